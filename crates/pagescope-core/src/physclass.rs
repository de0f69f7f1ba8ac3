//! What each page frame of the machine is, from its kpageflags and
//! kpagecount: the classes of the `physmap` view.
//!
//! kpageflags marks only the first frame of a free buddy block (BUDDY), and
//! gives the others no flags at all. A flagless, unmapped frame is
//! therefore counted free when it follows a free block's first frame
//! within one maximal buddy block (2^10 frames, 4 MiB with 4 KiB pages),
//! and kernel memory otherwise.

use crate::kpageflags::KPageFlags;

/// Frame classes, in the order views list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum PhysClass {
    /// Free (buddy allocator).
    Free = 0,
    /// Anonymous user memory.
    Anon = 1,
    /// Page cache (file or shmem) mapped by some process.
    CacheMapped = 2,
    /// Page cache mapped by no process.
    CacheUnmapped = 3,
    /// Slab.
    Slab = 4,
    /// Page tables.
    PageTable = 5,
    /// Other kernel memory (vmalloc, stacks, per-cpu, buffers...).
    KernelOther = 6,
    /// Reserved, offline, poisoned, or no page frame.
    Reserved = 7,
    /// hugetlbfs huge pages.
    Huge = 8,
    /// Transparent huge pages.
    Thp = 9,
    /// KSM-merged pages.
    Ksm = 10,
    /// The shared zero page.
    Zero = 11,
}

/// Every class, in order.
pub const ALL: [PhysClass; 12] = [
    PhysClass::Free,
    PhysClass::Anon,
    PhysClass::CacheMapped,
    PhysClass::CacheUnmapped,
    PhysClass::Slab,
    PhysClass::PageTable,
    PhysClass::KernelOther,
    PhysClass::Reserved,
    PhysClass::Huge,
    PhysClass::Thp,
    PhysClass::Ksm,
    PhysClass::Zero,
];

/// Bit 32 of kpageflags: PG_reserved (one of the flags the kernel exports
/// above the documented 0-26, see include/linux/kernel-page-flags.h).
pub const KPF_RESERVED: u64 = 1 << 32;

/// Frames in the largest buddy block (MAX_PAGE_ORDER 10).
pub const MAX_BUDDY_FRAMES: u64 = 1 << 10;

impl PhysClass {
    /// The class of a code, if valid.
    pub fn from_code(c: u8) -> Option<PhysClass> {
        ALL.get(c as usize).copied()
    }

    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            PhysClass::Free => "free",
            PhysClass::Anon => "anon",
            PhysClass::CacheMapped => "cache_mapped",
            PhysClass::CacheUnmapped => "cache_unmapped",
            PhysClass::Slab => "slab",
            PhysClass::PageTable => "page_table",
            PhysClass::KernelOther => "kernel_other",
            PhysClass::Reserved => "reserved",
            PhysClass::Huge => "huge",
            PhysClass::Thp => "thp",
            PhysClass::Ksm => "ksm",
            PhysClass::Zero => "zero",
        }
    }

    /// The letter of the physical map strip.
    pub fn letter(self) -> char {
        match self {
            PhysClass::Free => '.',
            PhysClass::Anon => 'A',
            PhysClass::CacheMapped => 'C',
            PhysClass::CacheUnmapped => 'c',
            PhysClass::Slab => 'S',
            PhysClass::PageTable => 'P',
            PhysClass::KernelOther => 'K',
            PhysClass::Reserved => 'R',
            PhysClass::Huge => 'H',
            PhysClass::Thp => 'T',
            PhysClass::Ksm => 'X',
            PhysClass::Zero => 'Z',
        }
    }
}

/// Classes frames in PFN order, remembering where a free block began.
#[derive(Clone, Debug, Default)]
pub struct FrameClassifier {
    /// The PFN of the last free block's first frame.
    free_from: Option<u64>,
}

impl FrameClassifier {
    /// The class of frame `pfn` with these kpageflags and kpagecount.
    /// Call in ascending PFN order.
    pub fn class(&mut self, pfn: u64, raw_flags: u64, count: u64) -> PhysClass {
        let f = KPageFlags::from_bits_retain(raw_flags);
        let class = if f.intersects(KPageFlags::NOPAGE | KPageFlags::OFFLINE | KPageFlags::HWPOISON)
            || raw_flags & KPF_RESERVED != 0
        {
            PhysClass::Reserved
        } else if f.contains(KPageFlags::ZERO_PAGE) {
            PhysClass::Zero
        } else if f.contains(KPageFlags::BUDDY) {
            self.free_from = Some(pfn);
            return PhysClass::Free;
        } else if f.contains(KPageFlags::SLAB) {
            PhysClass::Slab
        } else if f.contains(KPageFlags::PGTABLE) {
            PhysClass::PageTable
        } else if f.contains(KPageFlags::HUGE) {
            PhysClass::Huge
        } else if f.contains(KPageFlags::KSM) {
            PhysClass::Ksm
        } else if f.contains(KPageFlags::THP) {
            PhysClass::Thp
        } else if f.contains(KPageFlags::ANON) {
            PhysClass::Anon
        } else if f.intersects(
            KPageFlags::LRU | KPageFlags::MMAP | KPageFlags::UPTODATE | KPageFlags::SWAPBACKED,
        ) {
            if f.contains(KPageFlags::MMAP) || count > 0 {
                PhysClass::CacheMapped
            } else {
                PhysClass::CacheUnmapped
            }
        } else if raw_flags & ((1 << 32) - 1) == 0
            && count == 0
            && self
                .free_from
                .is_some_and(|s| pfn / MAX_BUDDY_FRAMES == s / MAX_BUDDY_FRAMES)
        {
            return PhysClass::Free;
        } else {
            PhysClass::KernelOther
        };
        self.free_from = None;
        class
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        let mut c = FrameClassifier::default();
        let k = |f: KPageFlags| f.bits();
        assert_eq!(c.class(0, k(KPageFlags::NOPAGE), 0), PhysClass::Reserved);
        assert_eq!(c.class(1, KPF_RESERVED, 0), PhysClass::Reserved);
        assert_eq!(
            c.class(
                2,
                k(KPageFlags::ANON | KPageFlags::MMAP | KPageFlags::LRU),
                1
            ),
            PhysClass::Anon
        );
        assert_eq!(
            c.class(
                3,
                k(KPageFlags::ANON | KPageFlags::THP | KPageFlags::COMPOUND_TAIL),
                1
            ),
            PhysClass::Thp
        );
        assert_eq!(
            c.class(4, k(KPageFlags::LRU | KPageFlags::UPTODATE), 0),
            PhysClass::CacheUnmapped
        );
        assert_eq!(
            c.class(
                5,
                k(KPageFlags::LRU | KPageFlags::UPTODATE | KPageFlags::MMAP),
                2
            ),
            PhysClass::CacheMapped
        );
        assert_eq!(c.class(6, k(KPageFlags::SLAB), 0), PhysClass::Slab);
        assert_eq!(c.class(7, k(KPageFlags::PGTABLE), 0), PhysClass::PageTable);
        assert_eq!(c.class(8, 0, 0), PhysClass::KernelOther);
        // A free block: its head has BUDDY, the rest no flags.
        assert_eq!(c.class(1024, k(KPageFlags::BUDDY), 0), PhysClass::Free);
        assert_eq!(c.class(1025, 0, 0), PhysClass::Free);
        assert_eq!(c.class(2047, 0, 0), PhysClass::Free);
        // ...but not past the largest block.
        assert_eq!(c.class(2048, 0, 0), PhysClass::KernelOther);
        assert_eq!(c.class(3000, k(KPageFlags::ZERO_PAGE), 1), PhysClass::Zero);
        for (i, cl) in ALL.iter().enumerate() {
            assert_eq!(PhysClass::from_code(i as u8), Some(*cl));
        }
        assert_eq!(PhysClass::from_code(200), None);
    }
}
