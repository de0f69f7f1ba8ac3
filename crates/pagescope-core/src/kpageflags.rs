//! The page flags of `/proc/kpageflags`.
//!
//! One little-endian u64 per page frame, bits 0-26 as listed in
//! Documentation/admin-guide/mm/pagemap.rst and
//! include/uapi/linux/kernel-page-flags.h. The short symbols are those of
//! the kernel's own tools/mm/page-types.c, so that pagescope's page dumps
//! read like page-types output.

use bitflags::bitflags;
use serde::{Deserialize, Serialize};

bitflags! {
    /// kpageflags bits (Documentation/admin-guide/mm/pagemap.rst, "kpageflags").
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub struct KPageFlags: u64 {
        /// 0 LOCKED: page is being locked for exclusive access.
        const LOCKED = 1 << 0;
        /// 1 ERROR: I/O error occurred.
        const ERROR = 1 << 1;
        /// 2 REFERENCED: page has been referenced since last LRU list enqueue/requeue.
        const REFERENCED = 1 << 2;
        /// 3 UPTODATE: page has up-to-date data.
        const UPTODATE = 1 << 3;
        /// 4 DIRTY: page has been written to, hence contains new data.
        const DIRTY = 1 << 4;
        /// 5 LRU: page is in one of the LRU lists.
        const LRU = 1 << 5;
        /// 6 ACTIVE: page is in the active LRU list.
        const ACTIVE = 1 << 6;
        /// 7 SLAB: page is managed by the SLAB/SLUB kernel memory allocator.
        const SLAB = 1 << 7;
        /// 8 WRITEBACK: page is being synced to disk.
        const WRITEBACK = 1 << 8;
        /// 9 RECLAIM: page will be reclaimed soon after its pageout IO completed.
        const RECLAIM = 1 << 9;
        /// 10 BUDDY: a free memory block managed by the buddy system allocator.
        const BUDDY = 1 << 10;
        /// 11 MMAP: a memory mapped page.
        const MMAP = 1 << 11;
        /// 12 ANON: a memory mapped page that is not part of a file.
        const ANON = 1 << 12;
        /// 13 SWAPCACHE: page is mapped to swap space, has an associated swap entry.
        const SWAPCACHE = 1 << 13;
        /// 14 SWAPBACKED: page is backed by swap/RAM.
        const SWAPBACKED = 1 << 14;
        /// 15 COMPOUND_HEAD: first page of a compound (higher order) page.
        const COMPOUND_HEAD = 1 << 15;
        /// 16 COMPOUND_TAIL: a tail page of a compound page.
        const COMPOUND_TAIL = 1 << 16;
        /// 17 HUGE: this is an integral part of a HugeTLB page.
        const HUGE = 1 << 17;
        /// 18 UNEVICTABLE: page is in the unevictable (non-)LRU list.
        const UNEVICTABLE = 1 << 18;
        /// 19 HWPOISON: hardware detected memory corruption on this page.
        const HWPOISON = 1 << 19;
        /// 20 NOPAGE: no page frame exists at the requested address.
        const NOPAGE = 1 << 20;
        /// 21 KSM: identical memory pages dynamically shared between processes.
        const KSM = 1 << 21;
        /// 22 THP: contiguous pages which construct a transparent hugepage.
        const THP = 1 << 22;
        /// 23 OFFLINE: the page is logically offline.
        const OFFLINE = 1 << 23;
        /// 24 ZERO_PAGE: zero page for pfn_zero or huge_zero page.
        const ZERO_PAGE = 1 << 24;
        /// 25 IDLE: the page has not been accessed since it was marked idle.
        const IDLE = 1 << 25;
        /// 26 PGTABLE: the page is in use as a page table.
        const PGTABLE = 1 << 26;
    }
}

/// page-types' one-letter symbol and long name for each bit, in bit order
/// (tools/mm/page-types.c, `page_flag_names`).
pub const SYMBOLS: [(KPageFlags, char, &str); 27] = [
    (KPageFlags::LOCKED, 'L', "locked"),
    (KPageFlags::ERROR, 'E', "error"),
    (KPageFlags::REFERENCED, 'R', "referenced"),
    (KPageFlags::UPTODATE, 'U', "uptodate"),
    (KPageFlags::DIRTY, 'D', "dirty"),
    (KPageFlags::LRU, 'l', "lru"),
    (KPageFlags::ACTIVE, 'A', "active"),
    (KPageFlags::SLAB, 'S', "slab"),
    (KPageFlags::WRITEBACK, 'W', "writeback"),
    (KPageFlags::RECLAIM, 'I', "reclaim"),
    (KPageFlags::BUDDY, 'B', "buddy"),
    (KPageFlags::MMAP, 'M', "mmap"),
    (KPageFlags::ANON, 'a', "anonymous"),
    (KPageFlags::SWAPCACHE, 's', "swapcache"),
    (KPageFlags::SWAPBACKED, 'b', "swapbacked"),
    (KPageFlags::COMPOUND_HEAD, 'H', "compound_head"),
    (KPageFlags::COMPOUND_TAIL, 'T', "compound_tail"),
    (KPageFlags::HUGE, 'G', "huge"),
    (KPageFlags::UNEVICTABLE, 'u', "unevictable"),
    (KPageFlags::HWPOISON, 'X', "hwpoison"),
    (KPageFlags::NOPAGE, 'n', "nopage"),
    (KPageFlags::KSM, 'x', "ksm"),
    (KPageFlags::THP, 't', "thp"),
    (KPageFlags::OFFLINE, 'o', "offline"),
    (KPageFlags::ZERO_PAGE, 'z', "zero_page"),
    (KPageFlags::IDLE, 'i', "idle_page"),
    (KPageFlags::PGTABLE, 'g', "pgtable"),
];

impl KPageFlags {
    /// The short symbolic form page-types prints: one character per bit in
    /// bit order, the symbol where the bit is set and `_` where it is clear,
    /// trailing clear bits trimmed (e.g. `___U_lA____Ma_b` for an active
    /// anonymous page).
    pub fn short_symbols(self) -> String {
        let mut s = String::new();
        self.write_short_symbols(&mut s);
        s
    }

    /// [`KPageFlags::short_symbols`] into a reused buffer (cleared first).
    pub fn write_short_symbols(self, out: &mut String) {
        out.clear();
        out.extend(
            SYMBOLS
                .iter()
                .map(|&(f, c, _)| if self.contains(f) { c } else { '_' }),
        );
        let trimmed = out.trim_end_matches('_').len();
        out.truncate(trimmed);
    }

    /// Parses a flag by its long page-types name (`anonymous`, `lru`, ...)
    /// or its bitflags name (`ANON`, `LRU`, ...), case-insensitively.
    pub fn from_symbol_name(name: &str) -> Option<KPageFlags> {
        let lower = name.to_ascii_lowercase();
        SYMBOLS
            .iter()
            .find(|(_, _, long)| *long == lower)
            .map(|&(f, _, _)| f)
            .or_else(|| {
                KPageFlags::all()
                    .iter_names()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, f)| f)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_order_matches_the_kernel() {
        // include/uapi/linux/kernel-page-flags.h numbers.
        assert_eq!(KPageFlags::SLAB.bits(), 1 << 7);
        assert_eq!(KPageFlags::BUDDY.bits(), 1 << 10);
        assert_eq!(KPageFlags::ANON.bits(), 1 << 12);
        assert_eq!(KPageFlags::THP.bits(), 1 << 22);
        assert_eq!(KPageFlags::ZERO_PAGE.bits(), 1 << 24);
        assert_eq!(KPageFlags::PGTABLE.bits(), 1 << 26);
        for (i, (f, _, _)) in SYMBOLS.iter().enumerate() {
            assert_eq!(f.bits(), 1 << i, "symbol table out of order at {i}");
        }
    }

    #[test]
    fn short_form() {
        let f = KPageFlags::UPTODATE
            | KPageFlags::LRU
            | KPageFlags::ACTIVE
            | KPageFlags::MMAP
            | KPageFlags::ANON
            | KPageFlags::SWAPBACKED;
        assert_eq!(f.short_symbols(), "___U_lA____Ma_b");
        assert_eq!(KPageFlags::empty().short_symbols(), "");
    }

    #[test]
    fn names() {
        assert_eq!(
            KPageFlags::from_symbol_name("anonymous"),
            Some(KPageFlags::ANON)
        );
        assert_eq!(KPageFlags::from_symbol_name("anon"), Some(KPageFlags::ANON));
        assert_eq!(KPageFlags::from_symbol_name("LRU"), Some(KPageFlags::LRU));
        assert_eq!(KPageFlags::from_symbol_name("nonsense"), None);
    }
}
