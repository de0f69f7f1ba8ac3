//! Reading memory through a dumped kernel's page tables: the kernel's
//! own addresses (its image, `struct page`s, slab objects) and each
//! process's, page by page. The walk is the same on every architecture;
//! what an entry means is [`crate::x86_64`]'s or [`crate::arm64`]'s.

use crate::dumpfile::{Dump, Machine};
pub use crate::entry::{Desc, Entry, Pte};
use crate::vmcoreinfo::VmcoreInfo;
use crate::Result;

/// The architecture of the dumped kernel and what its walk needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// x86_64, 4 KiB pages.
    X86_64 {
        /// `phys_base`: where the kernel image was loaded.
        phys_base: u64,
        /// 5-level page tables (LA57).
        five: bool,
        /// The memory-encryption bit (`sme_mask`), not part of addresses.
        sme: u64,
    },
    /// arm64 with 4 or 16 KiB pages (the translation granule).
    Arm64 {
        /// `PAGE_SHIFT`: 12 or 14.
        page_shift: u32,
        /// The address bits the kernel runs with (64 less
        /// `TCR_EL1.T1SZ`; `VA_BITS` where VMCOREINFO has no T1SZ).
        va_bits: u32,
        /// `kimage_voffset`: kernel-image virtual minus physical.
        kimage_voffset: u64,
        /// Where its software bits are.
        bits: crate::arm64::Bits,
        /// 52-bit addresses with 4 or 16 KiB pages (FEAT_LPA2).
        lpa2: bool,
    },
}

impl Arch {
    /// The architecture's description for the walk, from VMCOREINFO (and
    /// for x86_64 the kdump header's `phys_base`, where VMCOREINFO has
    /// none).
    pub fn of(
        machine: Machine,
        info: &VmcoreInfo,
        phys_base: Option<u64>,
    ) -> std::result::Result<Arch, String> {
        let number = |name: &str| {
            info.number(name)
                .map(|n| n as u64)
                .ok_or_else(|| format!("VMCOREINFO has no NUMBER({name})"))
        };
        Ok(match machine {
            Machine::X86_64 => Arch::X86_64 {
                phys_base: number("phys_base").or_else(|e| phys_base.ok_or(e))?,
                five: info.number("pgtable_l5_enabled") == Some(1),
                sme: info.number("sme_mask").unwrap_or(0) as u64,
            },
            Machine::Arm64 => {
                // VA_BITS is what the kernel was built for; a 52-bit kernel
                // on a CPU without 52-bit addresses runs with fewer, which
                // TCR_EL1.T1SZ says (and so many table levels it walks).
                let built = number("VA_BITS")?;
                let va_bits = match number("TCR_EL1_T1SZ") {
                    Ok(t1sz) => 64u64.saturating_sub(t1sz),
                    Err(_) => built,
                };
                if va_bits > built {
                    return Err(format!(
                        "TCR_EL1.T1SZ gives {va_bits} address bits, more than VA_BITS {built}"
                    ));
                }
                let page_shift = info.page_size.trailing_zeros();
                Arch::Arm64 {
                    page_shift,
                    va_bits: va_bits.min(64) as u32,
                    kimage_voffset: number("kimage_voffset")?,
                    bits: crate::arm64::Bits::of_release(&info.release),
                    lpa2: va_bits > 48 && page_shift < 16,
                }
            }
        })
    }
}

/// Slots of the kernel TLB (a power of two): translations for up to
/// 64 MiB of 4 KiB kernel pages in 256 KiB.
const TLB_SLOTS: usize = 1 << 14;
/// A TLB slot's mark for a page that is not mapped (no physical address
/// has all these bits).
const NO_PAGE: u64 = u64::MAX;

/// The shape of an address space's tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geometry {
    page_shift: u32,
    /// Index bits per table (9 for 4 KiB pages, 11 for 16 KiB).
    bits: u32,
    levels: u8,
    /// Index bits of the top-level table (fewer where the address space
    /// does not fill it).
    top_bits: u32,
}

impl Geometry {
    /// Tables of one page of 8-byte entries over `va_bits` of address.
    fn new(page_shift: u32, va_bits: u32) -> Self {
        let bits = page_shift - 3;
        let levels = (va_bits - page_shift).div_ceil(bits);
        Geometry {
            page_shift,
            bits,
            levels: levels as u8,
            top_bits: va_bits - page_shift - (levels - 1) * bits,
        }
    }

    /// The address bits below a level's entries (the page or block).
    fn shift(&self, level: u8) -> u32 {
        self.page_shift + self.bits * level as u32
    }

    /// A table's index of `va` at `level`.
    fn index(&self, va: u64, level: u8) -> usize {
        let bits = if level + 1 == self.levels {
            self.top_bits
        } else {
            self.bits
        };
        ((va >> self.shift(level)) & ((1 << bits) - 1)) as usize
    }
}

/// Reads memory through page tables.
#[derive(Debug)]
pub struct Mmu<'a> {
    core: &'a Dump,
    arch: Arch,
    /// Physical address of the kernel's top-level table.
    top: u64,
    page_shift: u32,
    levels: u8,
    geometry: Geometry,
    /// Kernel translations by virtual page, direct-mapped: each slot
    /// holds a page and its physical page ([`NO_PAGE`]: not mapped);
    /// an empty slot holds page 0, which the kernel never maps.
    tlb: Vec<(u64, u64)>,
    table: Vec<u8>,
}

impl<'a> Mmu<'a> {
    /// The kernel's address space: its architecture and the run-time
    /// address of its top-level table (`init_top_pgt`, `swapper_pg_dir`).
    pub fn new(core: &'a Dump, arch: Arch, top_va: u64) -> std::result::Result<Self, String> {
        let (page_shift, va_bits, top) = match arch {
            Arch::X86_64 {
                phys_base, five, ..
            } => (
                12,
                if five { 57 } else { 48 },
                top_va
                    .wrapping_sub(crate::x86_64::START_KERNEL_MAP)
                    .wrapping_add(phys_base),
            ),
            Arch::Arm64 {
                page_shift,
                va_bits,
                kimage_voffset,
                ..
            } => {
                if page_shift != 12 && page_shift != 14 {
                    return Err(format!(
                        "pages of {} KiB: pagescope reads arm64 dumps with 4 or 16 KiB pages",
                        (1u64 << page_shift.min(40)) >> 10
                    ));
                }
                if !(36..=52).contains(&va_bits) {
                    return Err(format!(
                        "VA_BITS {va_bits}: pagescope reads arm64 address spaces of 36 to 52 bits"
                    ));
                }
                (page_shift, va_bits, top_va.wrapping_sub(kimage_voffset))
            }
        };
        let geometry = Geometry::new(page_shift, va_bits);
        Ok(Mmu {
            core,
            arch,
            top,
            page_shift,
            levels: geometry.levels,
            geometry,
            tlb: vec![(0, NO_PAGE); TLB_SLOTS],
            table: vec![0; 1 << page_shift],
        })
    }

    /// The dump.
    pub fn core(&self) -> &'a Dump {
        self.core
    }

    /// The architecture.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// `PAGE_SHIFT`.
    pub fn page_shift(&self) -> u32 {
        self.page_shift
    }

    /// `PAGE_SIZE`.
    pub fn page_size(&self) -> u64 {
        1 << self.page_shift
    }

    fn shift(&self, level: u8) -> u32 {
        self.geometry.shift(level)
    }

    /// The order of an entry at `level`: it maps 2^order pages (9 per
    /// level with 4 KiB pages, 11 with 16 KiB).
    pub fn order(&self, level: u8) -> u32 {
        self.geometry.bits * level as u32
    }

    fn index(&self, va: u64, level: u8) -> usize {
        self.geometry.index(va, level)
    }

    fn decode(&self, raw: u64, level: u8, kernel: bool) -> Desc {
        match self.arch {
            Arch::X86_64 { sme, .. } => crate::x86_64::decode(raw, level, kernel, sme),
            Arch::Arm64 {
                page_shift,
                bits,
                lpa2,
                ..
            } => crate::arm64::decode(raw, level, kernel, page_shift, bits, lpa2),
        }
    }

    fn read_table(&mut self, pa: u64) -> Result<bool> {
        let mut t = std::mem::take(&mut self.table);
        let ok = self.core.read_phys(pa, &mut t);
        self.table = t;
        ok
    }

    fn entry(&self, i: usize) -> u64 {
        u64::from_le_bytes(self.table[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
    }

    /// The physical address of a kernel virtual address, `None` where
    /// nothing is mapped or the tables are not in the dump.
    pub fn kernel_phys(&mut self, va: u64) -> Result<Option<u64>> {
        if let Some(pa) = self.fast(va) {
            return Ok(Some(pa));
        }
        let off_mask = self.page_size() - 1;
        let page = va & !off_mask;
        let slot = ((va >> self.page_shift) as usize) & (TLB_SLOTS - 1);
        let (tag, pa) = self.tlb[slot];
        if tag == page && page != 0 {
            return Ok((pa != NO_PAGE).then_some(pa + (va & off_mask)));
        }
        let mut table = self.top;
        let mut found = None;
        for level in (0..self.levels).rev() {
            if !self.read_table(table)? {
                break;
            }
            match self.decode(self.entry(self.index(va, level)), level, true) {
                Desc::Table(next) if level > 0 => table = next,
                Desc::Leaf(base, _) => {
                    found = Some(base + (page & ((1u64 << self.shift(level)) - 1)));
                    break;
                }
                _ => break,
            }
        }
        self.tlb[slot] = (page, found.unwrap_or(NO_PAGE));
        Ok(found.map(|p| p + (va & off_mask)))
    }

    /// A kernel address translated by its architecture's fixed offset
    /// (x86_64's kernel image, its first 512 MiB; above them modules,
    /// the fixmap or a pointer that is garbage go through the tables).
    fn fast(&self, va: u64) -> Option<u64> {
        match self.arch {
            Arch::X86_64 { phys_base, .. } => {
                let off = va.checked_sub(crate::x86_64::START_KERNEL_MAP)?;
                (off < crate::x86_64::IMAGE_FAST)
                    .then_some(off)
                    .and_then(|o| o.checked_add(phys_base))
            }
            Arch::Arm64 { .. } => None,
        }
    }

    /// Reads kernel memory at `va`; `Ok(false)` if any page of it is not
    /// mapped or not in the dump.
    pub fn read(&mut self, mut va: u64, mut buf: &mut [u8]) -> Result<bool> {
        let size = self.page_size();
        while !buf.is_empty() {
            let n = ((size - (va & (size - 1))) as usize).min(buf.len());
            let (now, rest) = buf.split_at_mut(n);
            match self.kernel_phys(va)? {
                Some(pa) if self.core.read_phys(pa, now)? => {}
                _ => return Ok(false),
            }
            va += n as u64;
            buf = rest;
        }
        Ok(true)
    }

    /// Walks the user page tables at `top` (physical) over `[start, end)`
    /// and calls `f` for every page with an entry, in address order. Tables
    /// the dump does not hold are counted in the return value (pages whose
    /// residency is unknown).
    pub fn walk_user(
        &mut self,
        top: u64,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(u64, Entry),
    ) -> Result<u64> {
        let mut missing = 0;
        self.walk_level(top, self.levels - 1, start, end, f, &mut missing)?;
        Ok(missing)
    }

    fn walk_level(
        &mut self,
        table: u64,
        level: u8,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(u64, Entry),
        missing: &mut u64,
    ) -> Result<()> {
        let shift = self.shift(level);
        let span = 1u64 << shift;
        let page = self.page_size();
        if !self.read_table(table)? {
            *missing += (end - start) >> self.page_shift;
            return Ok(());
        }
        let entries: Vec<u64> = (0..self.table.len() / 8).map(|i| self.entry(i)).collect();
        let mut va = start;
        while va < end {
            let next = ((va & !(span - 1)).wrapping_add(span)).min(end);
            let next = if next <= va { end } else { next };
            match self.decode(entries[self.index(va, level)], level, false) {
                Desc::None => {}
                Desc::Table(child) => {
                    if level > 0 {
                        self.walk_level(child, level - 1, va, next, f, missing)?;
                    }
                }
                Desc::Leaf(base, pte) => {
                    let base = base >> self.page_shift;
                    let mut a = va;
                    while a < next {
                        let idx = (a & (span - 1)) >> self.page_shift;
                        f(
                            a,
                            Entry::Present {
                                pfn: base + idx,
                                level,
                                pte,
                            },
                        );
                        a += page;
                    }
                }
                Desc::Swap(swap_type, offset, pte) => {
                    // Above PTE level only for a huge page that is
                    // migrating.
                    if level <= 1 {
                        let mut a = va;
                        while a < next {
                            let idx = (a & (span - 1)) >> self.page_shift;
                            f(
                                a,
                                Entry::Swap {
                                    swap_type,
                                    offset: offset + idx,
                                    pte,
                                },
                            );
                            a += page;
                        }
                    }
                }
            }
            va = next;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_indexes_follow_the_granule_and_address_bits() {
        let g = |page_shift, va_bits| {
            let g = Geometry::new(page_shift, va_bits);
            (g.levels, g.top_bits)
        };
        // arm64, 4 KiB pages: 48 bits in 4 levels of 9 bits, 39 in 3.
        assert_eq!(g(12, 48), (4, 9));
        assert_eq!(g(12, 39), (3, 9));
        // 16 KiB pages: 47 bits in 3 levels of 11; 48 bits add a top
        // table of 2 entries.
        assert_eq!(g(14, 47), (3, 11));
        assert_eq!(g(14, 48), (4, 1));
        // 52 bits (LPA2): 16 KiB pages in 4 levels with a top table of 32
        // entries, 4 KiB pages in 5 with 16.
        assert_eq!(g(14, 52), (4, 5));
        assert_eq!(g(12, 52), (5, 4));
        // x86_64: 4 or 5 levels of 9 bits.
        assert_eq!(g(12, 57), (5, 9));
        // A kernel address's top index stays within its table.
        let m = Geometry::new(14, 48);
        assert_eq!(m.index(0xffff_8000_0000_0000, 3), 1);
        assert_eq!(m.index(0x0000_7fff_ffff_c000, 3), 0);
        assert_eq!(m.index(0x0000_7fff_ffff_c000, 0), 2047);
        let m = Geometry::new(14, 47);
        assert_eq!(m.index(0xffff_8000_0000_0000, 2), 0);
        assert_eq!(m.index(0xffff_c000_0000_0000, 2), 1024);
        assert_eq!(m.index(0xffff_ffff_ffff_c000, 2), 2047);
        assert_eq!(Geometry::new(12, 48).index(0xffff_8880_0000_0000, 3), 273);
    }
}
