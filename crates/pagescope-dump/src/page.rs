//! Page frames from the kernel's own `struct page`s (through vmemmap,
//! found from `mem_section`), turned into what a live snapshot reads from
//! `/proc/kpageflags` and `/proc/kpagecount`, by the rules of 6.1's
//! fs/proc/page.c (`stable_page_flags`, `kpagecount_read`) and
//! include/linux/mm.h (`page_mapcount`), or of 6.12's, whose compound
//! pages are folios (`folio_precise_page_mapcount`, page types in the
//! top byte of `page_type`).

use crate::layout::{Compound, Layout};
use crate::mmu::Mmu;
use crate::vmcoreinfo::VmcoreInfo;
use crate::Result;
use std::collections::HashMap;

/// `PAGE_TYPE_BASE` (include/linux/page-flags.h).
const PAGE_TYPE_BASE: u32 = 0xf000_0000;
/// `PG_offline` and `PG_table` page types (include/linux/page-flags.h).
const PG_OFFLINE_TYPE: u32 = 0x100;
const PG_TABLE_TYPE: u32 = 0x200;
/// `KPF_BUDDY`.
const KPF_BUDDY: u64 = 1 << 10;
/// 6.12's page types (`enum pagetype`), the top byte of `page_type`.
const PGTY_BUDDY: u8 = 0xf0;
const PGTY_OFFLINE: u8 = 0xf1;
const PGTY_TABLE: u8 = 0xf2;
const PGTY_HUGETLB: u8 = 0xf4;
const PGTY_SLAB: u8 = 0xf5;
/// `PAGE_MAPPING_ANON`, and with `PAGE_MAPPING_MOVABLE` a KSM page.
const MAPPING_ANON: u64 = 1;
const MAPPING_KSM: u64 = 3;
/// `SECTION_HAS_MEM_MAP` (include/linux/mmzone.h).
const SECTION_HAS_MEM_MAP: u64 = 1 << 1;

/// The `struct page` fields pagescope reads.
#[derive(Clone, Copy, Debug, Default)]
struct Raw {
    flags: u64,
    compound_head: u64,
    mapping: u64,
    mapcount: i32,
    refcount: i32,
    dtor: u8,
    order: u8,
    /// `compound_mapcount` (6.1), `_entire_mapcount` (6.12).
    compound_mapcount: i32,
    /// `_large_mapcount` (6.12).
    large_mapcount: i32,
    /// `private`: a free buddy block's order, on its first page.
    private: u64,
}

/// What a frame is, as a live snapshot would have read it, and what
/// smaps' accounting asks of it (`young`: `page_is_young`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// The kpageflags bits.
    pub kflags: u64,
    /// The kpagecount value.
    pub kcount: u64,
    /// `page_mapcount` of the page (may be below 1).
    pub mapcount: i64,
    /// `page_count` of its folio (the head's `_refcount`).
    pub refcount: i64,
    /// The folio is anonymous (`PageAnon`).
    pub anon: bool,
    /// The folio is swap-backed (`PageSwapBacked`).
    pub swapbacked: bool,
    /// The folio is dirty (`PageDirty`).
    pub dirty: bool,
    /// The folio is referenced (`PageReferenced`) or not idle.
    pub referenced: bool,
    /// Pages in its folio (1 for a small page).
    pub nr: u64,
}

/// Bit numbers of `enum pageflags` (from BTF; `None` where this kernel
/// has no such flag).
#[derive(Clone, Debug, Default)]
struct Pg {
    locked: Option<u32>,
    error: Option<u32>,
    referenced: Option<u32>,
    uptodate: Option<u32>,
    dirty: Option<u32>,
    lru: Option<u32>,
    active: Option<u32>,
    slab: Option<u32>,
    writeback: Option<u32>,
    reclaim: Option<u32>,
    swapbacked: Option<u32>,
    unevictable: Option<u32>,
    mlocked: Option<u32>,
    hwpoison: Option<u32>,
    uncached: Option<u32>,
    reserved: Option<u32>,
    mappedtodisk: Option<u32>,
    private: Option<u32>,
    private_2: Option<u32>,
    owner_priv_1: Option<u32>,
    arch_1: Option<u32>,
    arch_2: Option<u32>,
    idle: Option<u32>,
    young: Option<u32>,
    double_map: Option<u32>,
    swapcache: Option<u32>,
    owner_2: Option<u32>,
    arch_3: Option<u32>,
    large_rmappable: Option<u32>,
}

fn bit(flags: u64, b: Option<u32>) -> bool {
    b.is_some_and(|b| b < 64 && flags >> b & 1 == 1)
}

impl Pg {
    /// The kpageflags bits both 6.1 and 6.12 copy from `flags` as they
    /// are (`kpf_copy_bit`).
    fn copied(&self, flags: u64) -> u64 {
        let mut u = 0;
        for (kpf, b) in [
            (0, self.locked),
            (4, self.dirty),
            (3, self.uptodate),
            (8, self.writeback),
            (5, self.lru),
            (2, self.referenced),
            (6, self.active),
            (9, self.reclaim),
            (14, self.swapbacked),
            (18, self.unevictable),
            (33, self.mlocked),
            (32, self.reserved),
            (35, self.private),
            (36, self.private_2),
            (37, self.owner_priv_1),
            (38, self.arch_1),
            (41, self.arch_2),
        ] {
            if bit(flags, b) {
                u |= 1 << kpf;
            }
        }
        u
    }
}

/// Reads frames.
#[derive(Debug)]
pub struct Frames {
    layout: Layout,
    pg: Pg,
    head_mask: u64,
    buddy: u32,
    hugetlb_dtor: Option<u8>,
    /// mem_section: its address, sections per root (1 for a flat array),
    /// roots, size of one, offset of section_mem_map, section shift.
    sections: (u64, u64, u64, u64, u64, u32),
    section_cache: HashMap<u64, Option<u64>>,
    /// The last section looked up and its memory map (the walk asks for
    /// frames of one section many times in a row).
    last_section: Option<(u64, Option<u64>)>,
    zero_pfn: Option<u64>,
    huge_zero: Option<u64>,
    mapped_cache: HashMap<u64, bool>,
    buf: Vec<u8>,
    /// Orders of the buddy allocator (`LENGTH(zone.free_area)`).
    orders: u32,
    /// The free buddy block found last, `[first, end)` frames.
    buddy_block: Option<(u64, u64)>,
}

impl Frames {
    /// Sets up from the layout, VMCOREINFO and BTF's page flag numbers.
    pub fn new(
        layout: &Layout,
        info: &VmcoreInfo,
        btf: &crate::btf::Btf,
        zero_pfn: Option<u64>,
        huge_zero: Option<u64>,
    ) -> std::result::Result<Frames, String> {
        let e = |n: &str| btf.enum_value(n).map(|v| v as u32);
        let pg = Pg {
            locked: e("PG_locked"),
            error: e("PG_error"),
            referenced: e("PG_referenced"),
            uptodate: e("PG_uptodate"),
            dirty: e("PG_dirty"),
            lru: info
                .number("PG_lru")
                .map(|v| v as u32)
                .or_else(|| e("PG_lru")),
            active: e("PG_active"),
            slab: info
                .number("PG_slab")
                .map(|v| v as u32)
                .or_else(|| e("PG_slab")),
            writeback: e("PG_writeback"),
            reclaim: e("PG_reclaim"),
            swapbacked: info
                .number("PG_swapbacked")
                .map(|v| v as u32)
                .or_else(|| e("PG_swapbacked")),
            unevictable: e("PG_unevictable"),
            mlocked: e("PG_mlocked"),
            hwpoison: info
                .number("PG_hwpoison")
                .map(|v| v as u32)
                .or_else(|| e("PG_hwpoison")),
            uncached: e("PG_uncached"),
            reserved: e("PG_reserved"),
            mappedtodisk: e("PG_mappedtodisk"),
            private: info
                .number("PG_private")
                .map(|v| v as u32)
                .or_else(|| e("PG_private")),
            private_2: e("PG_private_2"),
            owner_priv_1: e("PG_owner_priv_1"),
            arch_1: e("PG_arch_1"),
            arch_2: e("PG_arch_2"),
            idle: e("PG_idle"),
            young: e("PG_young"),
            double_map: e("PG_double_map"),
            owner_2: e("PG_owner_2"),
            arch_3: e("PG_arch_3"),
            large_rmappable: e("PG_large_rmappable"),
            swapcache: info
                .number("PG_swapcache")
                .map(|v| v as u32)
                .or_else(|| e("PG_swapcache")),
        };
        let head_mask = info
            .number("PG_head_mask")
            .map(|v| v as u64)
            .or_else(|| e("PG_head").map(|b| 1u64 << b))
            .ok_or("no PG_head_mask")?;
        let buddy = info
            .number("PAGE_BUDDY_MAPCOUNT_VALUE")
            .map(|v| !(v as i32) as u32)
            .unwrap_or(0x80);
        let num = |n: &str| {
            info.number(n)
                .ok_or_else(|| format!("VMCOREINFO has no NUMBER({n})"))
        };
        let addr = info
            .symbol("mem_section")
            .ok_or("VMCOREINFO has no SYMBOL(mem_section): only SPARSEMEM kernels are read")?;
        let roots = info
            .length("mem_section")
            .ok_or("VMCOREINFO has no LENGTH(mem_section)")?;
        let section_bits = num("SECTION_SIZE_BITS")? as u32;
        let phys_bits = num("MAX_PHYSMEM_BITS")? as u32;
        // PFN_SECTION_SHIFT is SECTION_SIZE_BITS less PAGE_SHIFT.
        let page_shift = info.page_size.trailing_zeros();
        if section_bits < page_shift || phys_bits <= section_bits || phys_bits > 60 || roots == 0 {
            return Err("VMCOREINFO's mem_section figures make no sense".into());
        }
        let nr = 1u64 << (phys_bits - section_bits);
        let per_root = (nr / roots).max(1);
        let size = info
            .size("mem_section")
            .ok_or("VMCOREINFO has no SIZE(mem_section)")?;
        let off = info
            .offset("mem_section.section_mem_map")
            .ok_or("VMCOREINFO has no OFFSET(mem_section.section_mem_map)")?;
        Ok(Frames {
            layout: layout.clone(),
            pg,
            head_mask,
            buddy,
            hugetlb_dtor: info.number("HUGETLB_PAGE_DTOR").map(|v| v as u8),
            sections: (addr, per_root, roots, size, off, section_bits - page_shift),
            section_cache: HashMap::new(),
            last_section: None,
            zero_pfn,
            huge_zero,
            mapped_cache: HashMap::new(),
            buf: vec![0; layout.page_size as usize],
            orders: info
                .length("zone.free_area")
                .map_or(11, |n| n.clamp(1, 20) as u32),
            buddy_block: None,
        })
    }

    /// The address of the `struct page` of `pfn`, `None` if its section
    /// has no memory map (a hole).
    pub fn page_addr(&mut self, mmu: &mut Mmu<'_>, pfn: u64) -> Result<Option<u64>> {
        let (addr, per_root, roots, size, off, shift) = self.sections;
        let nr = pfn >> shift;
        if let Some((n, m)) = self.last_section {
            if n == nr {
                return Ok(m.map(|m| m.wrapping_add(pfn.wrapping_mul(self.layout.page_size))));
            }
        }
        let map = match self.section_cache.get(&nr) {
            Some(&m) => m,
            None => {
                let root = nr / per_root;
                let m = if root >= roots {
                    None
                } else {
                    let base = if per_root > 1 {
                        let mut p = [0u8; 8];
                        if mmu.read(addr + root * 8, &mut p)? {
                            u64::from_le_bytes(p)
                        } else {
                            0
                        }
                    } else {
                        addr + root * size
                    };
                    let mut v = [0u8; 8];
                    let at = if per_root > 1 {
                        base + (nr % per_root) * size
                    } else {
                        base
                    };
                    if base != 0 && mmu.read(at + off, &mut v)? {
                        let v = u64::from_le_bytes(v);
                        (v & SECTION_HAS_MEM_MAP != 0).then_some(v & !0x3f)
                    } else {
                        None
                    }
                };
                self.section_cache.insert(nr, m);
                m
            }
        };
        self.last_section = Some((nr, map));
        Ok(map.map(|m| m.wrapping_add(pfn.wrapping_mul(self.layout.page_size))))
    }

    fn raw(&mut self, mmu: &mut Mmu<'_>, va: u64) -> Result<Option<Raw>> {
        let mut b = std::mem::take(&mut self.buf);
        let ok = mmu.read(va, &mut b)?;
        let l = &self.layout;
        let u64_at = |o: u64| {
            let o = o as usize;
            b.get(o..o + 8)
                .map_or(0, |s| u64::from_le_bytes(s.try_into().expect("8")))
        };
        let i32_at = |o: u64| {
            let o = o as usize;
            b.get(o..o + 4)
                .map_or(0, |s| i32::from_le_bytes(s.try_into().expect("4")))
        };
        let u8_at = |o: u64| b.get(o as usize).copied().unwrap_or(0);
        // The first tail page's fields, as offsets into its own struct
        // page (the folio's are from the head's).
        let (dtor, order, compound_mapcount, large_mapcount) = match l.page_compound {
            Compound::Page {
                dtor,
                order,
                mapcount,
            } => (u8_at(dtor), u8_at(order), i32_at(mapcount), 0),
            Compound::Folio {
                flags_1,
                large_mapcount,
                entire_mapcount,
            } => {
                let ps = l.page_size;
                (
                    0,
                    u8_at(flags_1.wrapping_sub(ps)),
                    i32_at(entire_mapcount.wrapping_sub(ps)),
                    i32_at(large_mapcount.wrapping_sub(ps)),
                )
            }
        };
        let raw = Raw {
            flags: u64_at(l.page_flags),
            compound_head: u64_at(l.page_compound_head),
            mapping: u64_at(l.page_mapping),
            mapcount: i32_at(l.page_mapcount),
            refcount: i32_at(l.page_refcount),
            dtor,
            order,
            compound_mapcount,
            large_mapcount,
            private: u64_at(l.page_private),
        };
        self.buf = b;
        Ok(ok.then_some(raw))
    }

    /// Forgets what was cached about folios (between processes).
    pub fn forget(&mut self) {
        self.mapped_cache.clear();
        self.buddy_block = None;
    }

    /// `PageBuddy`: the first page of a free block (6.1's page type
    /// bits, or 6.12's type byte).
    fn is_buddy(&self, r: &Raw) -> bool {
        let t = r.mapcount as u32;
        match self.layout.page_compound {
            Compound::Folio { .. } => (t >> 24) as u8 == PGTY_BUDDY,
            Compound::Page { .. } => t & (PAGE_TYPE_BASE | self.buddy) == PAGE_TYPE_BASE,
        }
    }

    /// `is_free_buddy_page`: whether `pfn` lies in a free buddy block,
    /// whose first page has the order in `private`.
    fn free_buddy(&mut self, mmu: &mut Mmu<'_>, pfn: u64) -> Result<bool> {
        if let Some((s, e)) = self.buddy_block {
            if (s..e).contains(&pfn) {
                return Ok(true);
            }
        }
        for order in 0..self.orders {
            let first = pfn & !((1u64 << order) - 1);
            let Some(va) = self.page_addr(mmu, first)? else {
                break;
            };
            let Some(r) = self.raw(mmu, va)? else {
                break;
            };
            if self.is_buddy(&r) && r.private >= u64::from(order) {
                let n = 1u64 << r.private.min(u64::from(self.orders));
                self.buddy_block = Some((first, first.saturating_add(n)));
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The frame `pfn`, or `None` where it has no `struct page` in the
    /// dump (kpageflags' NOPAGE).
    pub fn frame(&mut self, mmu: &mut Mmu<'_>, pfn: u64) -> Result<Option<Frame>> {
        let Some(mut f) = self.frame_of(mmu, pfn)? else {
            return Ok(None);
        };
        // KPF_BUDDY on the other pages of a free block too, which have
        // no count (`page_count(page) == 0 && is_free_buddy_page(page)`).
        if f.kflags & KPF_BUDDY == 0 && f.refcount == 0 && self.free_buddy(mmu, pfn)? {
            f.kflags |= KPF_BUDDY;
        }
        Ok(Some(f))
    }

    /// The frame `pfn` but for the buddy tail pages' flag.
    fn frame_of(&mut self, mmu: &mut Mmu<'_>, pfn: u64) -> Result<Option<Frame>> {
        let Some(va) = self.page_addr(mmu, pfn)? else {
            return Ok(None);
        };
        let Some(page) = self.raw(mmu, va)? else {
            return Ok(None);
        };
        let ps = self.layout.page_size;
        let tail = page.compound_head & 1 == 1;
        let head_va = if tail { page.compound_head - 1 } else { va };
        let head = if tail {
            match self.raw(mmu, head_va)? {
                Some(h) => h,
                None => return Ok(None),
            }
        } else {
            page
        };
        let is_head = page.flags & self.head_mask != 0;
        let compound = tail || is_head;
        let second = if compound {
            self.raw(mmu, head_va.wrapping_add(ps))?.unwrap_or_default()
        } else {
            Raw::default()
        };
        if matches!(self.layout.page_compound, Compound::Folio { .. }) {
            return Ok(Some(
                self.folio_frame(pfn, &page, &head, &second, tail, is_head, head_va),
            ));
        }
        let pg = self.pg.clone();
        let anon = head.mapping & MAPPING_ANON != 0;
        let ksm = head.mapping & 3 == MAPPING_KSM;
        let hugetlb = compound && self.hugetlb_dtor.is_some_and(|d| d == second.dtor);
        let page_type = page.mapcount as u32;
        let has_type = page.mapcount < -128;
        let is_type = |flag: u32| page_type & (PAGE_TYPE_BASE | flag) == PAGE_TYPE_BASE;
        let slab = bit(head.flags, pg.slab);
        let mut mapcount = page.mapcount as i64 + 1;
        if compound && (anon || hugetlb) {
            mapcount += second.compound_mapcount as i64 + 1;
            if bit(second.flags, pg.double_map) {
                mapcount -= 1;
            }
        }
        let nr = if compound {
            1u64 << second.order.min(20)
        } else {
            1
        };
        let mapped = if !compound {
            head.mapcount >= 0
        } else if second.compound_mapcount >= 0 {
            true
        } else if hugetlb {
            false
        } else if let Some(&m) = self.mapped_cache.get(&head_va) {
            m
        } else {
            let mut m = false;
            for i in 0..nr {
                if let Some(r) = self.raw(mmu, head_va.wrapping_add(i * ps))? {
                    if r.mapcount >= 0 {
                        m = true;
                        break;
                    }
                }
            }
            self.mapped_cache.insert(head_va, m);
            m
        };
        let mut u: u64 = 0;
        let set = |u: &mut u64, b: u32, on: bool| {
            if on {
                *u |= 1 << b
            }
        };
        set(&mut u, 11, !slab && mapped);
        set(&mut u, 12, anon);
        set(&mut u, 21, ksm);
        set(&mut u, 15, is_head);
        set(&mut u, 16, tail);
        if hugetlb {
            set(&mut u, 17, true);
        } else if compound {
            if bit(head.flags, pg.lru) || anon {
                set(&mut u, 22, true);
            } else if self.huge_zero == Some(head_va) {
                set(&mut u, 24, true);
                set(&mut u, 22, true);
            }
        } else if self.zero_pfn == Some(pfn) {
            set(&mut u, 24, true);
        }
        set(&mut u, 10, is_type(self.buddy));
        set(&mut u, 23, is_type(PG_OFFLINE_TYPE));
        set(&mut u, 26, is_type(PG_TABLE_TYPE));
        set(&mut u, 25, bit(head.flags, pg.idle));
        let k = page.flags;
        u |= pg.copied(k);
        for (kpf, b) in [
            (7, pg.slab),
            (1, pg.error),
            (19, pg.hwpoison),
            (39, pg.uncached),
            (34, pg.mappedtodisk),
        ] {
            set(&mut u, kpf, bit(k, b));
        }
        set(&mut u, 7, tail && slab);
        let swapbacked = bit(head.flags, pg.swapbacked);
        set(&mut u, 13, swapbacked && bit(head.flags, pg.swapcache));
        let kcount = if slab || has_type {
            0
        } else {
            mapcount.max(0) as u64
        };
        Ok(Some(Frame {
            kflags: u,
            kcount,
            mapcount,
            refcount: head.refcount as i64,
            anon,
            swapbacked,
            dirty: bit(head.flags, pg.dirty),
            referenced: bit(head.flags, pg.referenced) || bit(head.flags, pg.young),
            nr,
        }))
    }

    /// Whether pagemap's exclusive bit is the page's own (6.12: its
    /// precise mapcount is 1) rather than its compound head's (6.1).
    pub fn exclusive_per_page(&self) -> bool {
        matches!(self.layout.page_compound, Compound::Folio { .. })
    }

    /// The frame by 6.12's rules (fs/proc/page.c `stable_page_flags`,
    /// fs/proc/internal.h `folio_precise_page_mapcount`): flags from the
    /// folio's head, page types in the top byte of `page_type`.
    #[allow(clippy::too_many_arguments)]
    fn folio_frame(
        &self,
        pfn: u64,
        page: &Raw,
        head: &Raw,
        second: &Raw,
        tail: bool,
        is_head: bool,
        head_va: u64,
    ) -> Frame {
        let pg = &self.pg;
        let large = tail || is_head;
        // `page_type_has_type` and the type of a page (PGTY_*).
        let has_type = |t: i32| t < (0xffu32 << 24) as i32;
        let type_of = |r: &Raw| (r.mapcount as u32 >> 24) as u8;
        let hugetlb = large && type_of(head) == PGTY_HUGETLB;
        let slab = type_of(head) == PGTY_SLAB;
        let k = head.flags;
        let anon = head.mapping & MAPPING_ANON != 0;
        // `folio_precise_page_mapcount`.
        let mut mapcount = page.mapcount as i64 + 1;
        if has_type(page.mapcount) {
            mapcount = 0;
        }
        if large {
            mapcount += second.compound_mapcount as i64 + 1;
        }
        // `folio_mapped`: `folio_mapcount` at least 1.
        let mapped = if large {
            second.large_mapcount as i64 + 1 >= 1
        } else {
            !has_type(head.mapcount) && head.mapcount as i64 + 1 >= 1
        };
        let nr = if large {
            1u64 << second.order.min(20)
        } else {
            1
        };
        let mut u: u64 = 0;
        let set = |u: &mut u64, b: u32, on: bool| {
            if on {
                *u |= 1 << b
            }
        };
        set(&mut u, 11, mapped);
        set(&mut u, 12, anon);
        // `mapping & PAGE_MAPPING_KSM` (both low bits), as 6.12 tests it.
        set(&mut u, 21, anon && head.mapping & MAPPING_KSM != 0);
        set(&mut u, 15, !tail && k & self.head_mask != 0);
        set(&mut u, 16, tail);
        if hugetlb {
            set(&mut u, 17, true);
        } else if large && bit(second.flags, pg.large_rmappable) {
            set(&mut u, 22, true);
        } else if large && self.huge_zero == Some(head_va) {
            set(&mut u, 24, true);
            set(&mut u, 22, true);
        } else if !large && self.zero_pfn == Some(pfn) {
            set(&mut u, 24, true);
        }
        set(&mut u, 10, type_of(page) == PGTY_BUDDY);
        set(&mut u, 23, type_of(page) == PGTY_OFFLINE);
        set(&mut u, 26, type_of(page) == PGTY_TABLE);
        set(&mut u, 7, slab);
        set(&mut u, 25, bit(k, pg.idle));
        u |= pg.copied(k);
        for (kpf, b) in [(34, pg.owner_2), (42, pg.arch_3)] {
            set(&mut u, kpf, bit(k, b));
        }
        let hwpoison = if hugetlb { k } else { page.flags };
        set(&mut u, 19, bit(hwpoison, pg.hwpoison));
        let swapbacked = bit(k, pg.swapbacked);
        set(&mut u, 13, swapbacked && bit(k, pg.swapcache));
        Frame {
            kflags: u,
            kcount: mapcount.max(0) as u64,
            mapcount,
            refcount: head.refcount as i64,
            anon,
            swapbacked,
            dirty: bit(k, pg.dirty),
            referenced: bit(k, pg.referenced) || bit(k, pg.young),
            nr,
        }
    }
}
