//! x86_64 page tables as the kernel writes them
//! (arch/x86/include/asm/pgtable_types.h, pgtable_64.h): the walk from a
//! top-level table to each page, 4 or 5 levels, huge pages at PMD (2 MiB)
//! and PUD (1 GiB) level, PROT_NONE entries (whose frame is stored
//! inverted, the L1TF mitigation) and swap entries.

use crate::dumpfile::Dump;
use crate::Result;

/// `_PAGE_PRESENT`.
pub const PRESENT: u64 = 1 << 0;
/// `_PAGE_RW`.
pub const RW: u64 = 1 << 1;
/// `_PAGE_ACCESSED`.
pub const ACCESSED: u64 = 1 << 5;
/// `_PAGE_DIRTY`.
pub const DIRTY: u64 = 1 << 6;
/// `_PAGE_PSE`: a huge page at PMD or PUD level.
pub const PSE: u64 = 1 << 7;
/// `_PAGE_PROTNONE` (the global bit, on entries that are not present).
pub const PROTNONE: u64 = 1 << 8;
/// `_PAGE_UFFD_WP` (`_PAGE_BIT_SOFTW2`).
pub const UFFD_WP: u64 = 1 << 10;
/// `_PAGE_SOFT_DIRTY` (`_PAGE_BIT_SOFTW3`).
pub const SOFT_DIRTY: u64 = 1 << 11;
/// `_PAGE_SWP_SOFT_DIRTY`: soft-dirty in a swap entry.
pub const SWP_SOFT_DIRTY: u64 = 1 << 1;
/// `_PAGE_SWP_UFFD_WP`: uffd-wp in a swap entry.
pub const SWP_UFFD_WP: u64 = 1 << 2;
/// `_PAGE_KNL_ERRATUM_MASK`: bits hardware may set on an empty entry.
const ERRATUM: u64 = ACCESSED | DIRTY;
/// `PTE_PFN_MASK` for 52 physical address bits.
const PFN_MASK: u64 = 0x000f_ffff_ffff_f000;
/// Slots of the kernel TLB (a power of two): translations for up to
/// 64 MiB of kernel memory (struct pages, tables) in 256 KiB.
const TLB_SLOTS: usize = 1 << 14;
/// A TLB slot's mark for a page that is not mapped (no physical address
/// has all these bits).
const NO_PAGE: u64 = u64::MAX;
/// The part of the kernel image's mapping read by its offset rather than
/// the tables: `KERNEL_IMAGE_SIZE` without KASLR, below the modules.
const IMAGE_FAST: u64 = 512 << 20;
/// `__START_KERNEL_map`: where the kernel image is mapped.
pub const START_KERNEL_MAP: u64 = 0xffff_ffff_8000_0000;

/// What a walk finds for one virtual page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A page in memory (or PROT_NONE): its frame, the entry's raw bits,
    /// and the level it was mapped at (0 a PTE, 1 a PMD, 2 a PUD).
    Present {
        /// Page frame number of this page.
        pfn: u64,
        /// The entry.
        raw: u64,
        /// 0 PTE, 1 PMD (2 MiB), 2 PUD (1 GiB).
        level: u8,
    },
    /// A swap entry (or another non-present entry: migration, marker).
    Swap {
        /// Swap type (`__swp_type`).
        swap_type: u64,
        /// Swap offset (`__swp_offset`), plus the page's index for an
        /// entry above PTE level.
        offset: u64,
        /// The entry.
        raw: u64,
    },
}

/// `pte_none`: nothing there.
pub fn is_none(raw: u64) -> bool {
    raw & !ERRATUM == 0
}

/// `pte_present`: in memory, or PROT_NONE.
pub fn is_present(raw: u64) -> bool {
    raw & (PRESENT | PROTNONE) != 0
}

/// The frame of a present entry, undoing the L1TF inversion of PROT_NONE
/// entries (`protnone_mask`); `mask` selects the address bits of the
/// level (and drops the memory-encryption bit).
pub fn frame(raw: u64, mask: u64) -> u64 {
    let v = if raw & PRESENT == 0 { !raw } else { raw };
    v & mask
}

/// The swap type and offset of a non-present entry (`__swp_type`,
/// `__swp_offset`: type in bits 59-63, offset inverted in bits 9-58).
pub fn swap_entry(raw: u64) -> (u64, u64) {
    (raw >> 59, (!raw << 5) >> 14)
}

/// Reads memory through page tables.
#[derive(Debug)]
pub struct Mmu<'a> {
    core: &'a Dump,
    /// Physical address of `init_top_pgt`.
    top: u64,
    phys_base: u64,
    levels: u8,
    addr_mask: u64,
    /// Kernel translations by virtual page, direct-mapped: each slot
    /// holds a page and its physical page ([`NO_PAGE`]: not mapped);
    /// an empty slot holds page 0, which the kernel never maps.
    tlb: Vec<(u64, u64)>,
    table: Vec<u8>,
}

impl<'a> Mmu<'a> {
    /// The kernel's address space: `init_top_pgt` (a run-time address),
    /// `phys_base`, 5 levels or 4, and the memory-encryption mask.
    pub fn new(core: &'a Dump, init_top_pgt: u64, phys_base: u64, five: bool, sme: u64) -> Self {
        Mmu {
            core,
            top: init_top_pgt
                .wrapping_sub(START_KERNEL_MAP)
                .wrapping_add(phys_base),
            phys_base,
            levels: if five { 5 } else { 4 },
            addr_mask: PFN_MASK & !sme,
            tlb: vec![(0, NO_PAGE); TLB_SLOTS],
            table: vec![0; 4096],
        }
    }

    /// The dump.
    pub fn core(&self) -> &'a Dump {
        self.core
    }

    /// The address mask of a level's entries (0 PTE, 1 PMD, 2 PUD).
    fn mask(&self, level: u8) -> u64 {
        self.addr_mask & !((1u64 << (12 + 9 * level as u32)) - 1)
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
        // The kernel image, by its fixed offset; above its first 512 MiB
        // (modules, the fixmap; a pointer that is garbage) through the
        // tables, like any address.
        if va >= START_KERNEL_MAP && va - START_KERNEL_MAP < IMAGE_FAST {
            return Ok((va - START_KERNEL_MAP).checked_add(self.phys_base));
        }
        let page = va & !0xfff;
        let slot = ((va >> 12) as usize) & (TLB_SLOTS - 1);
        let (tag, pa) = self.tlb[slot];
        if tag == page && page != 0 {
            return Ok((pa != NO_PAGE).then_some(pa + (va & 0xfff)));
        }
        let mut table = self.top;
        let mut found = None;
        for level in (0..self.levels).rev() {
            let shift = 12 + 9 * level as u32;
            let i = ((va >> shift) & 0x1ff) as usize;
            if !self.read_table(table)? {
                break;
            }
            let e = self.entry(i);
            if e & PRESENT == 0 {
                break;
            }
            if level == 0 || (level <= 2 && e & PSE != 0) {
                let base = e & self.mask(level);
                found = Some(base + (page & ((1u64 << shift) - 1)));
                break;
            }
            table = e & self.addr_mask;
        }
        self.tlb[slot] = (page, found.unwrap_or(NO_PAGE));
        Ok(found.map(|p| p + (va & 0xfff)))
    }

    /// Reads kernel memory at `va`; `Ok(false)` if any page of it is not
    /// mapped or not in the dump.
    pub fn read(&mut self, mut va: u64, mut buf: &mut [u8]) -> Result<bool> {
        while !buf.is_empty() {
            let n = ((0x1000 - (va & 0xfff)) as usize).min(buf.len());
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
        let shift = 12 + 9 * level as u32;
        let span = 1u64 << shift;
        if !self.read_table(table)? {
            *missing += (end - start) / 4096;
            return Ok(());
        }
        let entries: Vec<u64> = (0..512).map(|i| self.entry(i)).collect();
        let mut va = start;
        while va < end {
            let i = ((va >> shift) & 0x1ff) as usize;
            let next = ((va & !(span - 1)).wrapping_add(span)).min(end);
            let next = if next <= va { end } else { next };
            let e = entries[i];
            if !is_none(e) {
                let leaf = is_present(e) && (level == 0 || (level <= 2 && e & PSE != 0));
                if leaf {
                    let base = frame(e, self.mask(level)) >> 12;
                    let mut a = va;
                    while a < next {
                        let idx = (a & (span - 1)) >> 12;
                        f(
                            a,
                            Entry::Present {
                                pfn: base + idx,
                                raw: e,
                                level,
                            },
                        );
                        a += 4096;
                    }
                } else if is_present(e) && level > 0 {
                    let child = e & self.addr_mask;
                    self.walk_level(child, level - 1, va, next, f, missing)?;
                } else if level <= 1 {
                    // A swap or migration entry (above PTE level only for a
                    // huge page that is migrating).
                    let (swap_type, offset) = swap_entry(e);
                    let mut a = va;
                    while a < next {
                        let idx = (a & (span - 1)) >> 12;
                        f(
                            a,
                            Entry::Swap {
                                swap_type,
                                offset: offset + idx,
                                raw: e,
                            },
                        );
                        a += 4096;
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
    fn entries_decode_as_the_kernel_encodes_them() {
        // A present, dirty, accessed, writable PTE of frame 0x12345.
        let pte = 0x8000_0000_1234_5067;
        assert!(is_present(pte) && !is_none(pte));
        assert_eq!(frame(pte, PFN_MASK) >> 12, 0x12345);
        // PROT_NONE: not present, bit 8, frame stored inverted.
        let protnone = (!(0x12345u64 << 12) & PFN_MASK) | PROTNONE | ACCESSED;
        assert!(is_present(protnone));
        assert_eq!(frame(protnone, PFN_MASK) >> 12, 0x12345);
        // Only the erratum bits: empty.
        assert!(is_none(ACCESSED | DIRTY));
        // A swap entry of type 1, offset 0x777 (__swp_entry: type in
        // 59-63, !offset from bit 9, then the type bits shifted in).
        let off: u64 = 0x777;
        let raw = ((!off << 14) >> 5) | (1u64 << 59);
        assert_eq!(swap_entry(raw), (1, 0x777));
        assert!(!is_present(raw) && !is_none(raw));
    }
}
