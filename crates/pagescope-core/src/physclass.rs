//! What each page frame of the machine is, from its kpageflags and
//! kpagecount: the classes of the `physmap` view.
//!
//! kpageflags marks only the first frame of a free buddy block (BUDDY), and
//! gives the others no flags at all. A flagless, unmapped frame is
//! therefore counted free when it follows a free block's first frame
//! within one maximal buddy block (2^10 frames, 4 MiB with 4 KiB pages),
//! and kernel memory otherwise.
//!
//! kpageflags' THP is set on every frame (head and tails) of any large
//! rmappable folio, anonymous or page cache, of any order above 0 (the
//! kernel's `stable_page_flags`: "we indicate any THPs here, not just
//! PMD-sized ones"). The THP class holds only the frames of folios of at
//! least a PMD's size (512 frames with 4 KiB pages), what meminfo counts
//! as `AnonHugePages`, `ShmemHugePages` and `FileHugePages`; the frames of
//! smaller large folios (multi-size THP, large page-cache folios) are
//! classed anonymous or page cache, as meminfo counts them. A folio's
//! size is its head (COMPOUND_HEAD) and the tails (COMPOUND_TAIL) that
//! follow it, so [`FrameClassifier::class_run`] looks ahead within the
//! run it is given: a run must not end inside a PMD-aligned range of
//! frames unless the RAM range ends there (runs aligned to
//! [`RUN_ALIGN`] frames never do).

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
    /// Transparent huge pages: frames of anonymous, shmem or file folios
    /// of at least a PMD's size (meminfo's `AnonHugePages`,
    /// `ShmemHugePages` and `FileHugePages`).
    Thp = 9,
    /// KSM-merged pages.
    Ksm = 10,
    /// The shared zero page (and the huge zero page).
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

/// A multiple of a PMD's frames for every page size (512 with 4 KiB
/// pages, 2048 with 16 KiB, 8192 with 64 KiB): runs given to
/// [`FrameClassifier::class_run`] that start and end on multiples of it
/// (or at the ends of RAM ranges) cut no huge page in two.
pub const RUN_ALIGN: u64 = 64 * 1024;

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

/// Classes frames in PFN order, remembering where a free block began and
/// where a huge page ends.
#[derive(Clone, Debug)]
pub struct FrameClassifier {
    /// The PFN of the last free block's first frame.
    free_from: Option<u64>,
    /// Frames a PMD maps: a page table's entries (8 bytes each).
    pmd_frames: u64,
    /// The PFN after the last frame of the huge page being classed.
    thp_end: u64,
}

impl Default for FrameClassifier {
    /// A classifier for 4 KiB pages.
    fn default() -> FrameClassifier {
        FrameClassifier::new(4096)
    }
}

impl FrameClassifier {
    /// A classifier for frames of `page_size` bytes.
    pub fn new(page_size: u64) -> FrameClassifier {
        FrameClassifier {
            free_from: None,
            pmd_frames: (page_size / 8).max(1),
            thp_end: 0,
        }
    }

    /// Appends to `out` the class code of each frame of the run starting
    /// at `start_pfn` with these kpageflags and kpagecounts. Call in
    /// ascending PFN order, with runs that cut no PMD-aligned range of
    /// frames (see [`RUN_ALIGN`]).
    pub fn class_run(&mut self, start_pfn: u64, flags: &[u64], counts: &[u64], out: &mut Vec<u8>) {
        for (i, (&f, &count)) in flags.iter().zip(counts).enumerate() {
            let pfn = start_pfn + i as u64;
            if f & KPageFlags::COMPOUND_HEAD.bits() != 0 {
                self.thp_end = pfn;
                if f & KPageFlags::THP.bits() != 0 {
                    // The folio: the head and the tails after it.
                    let is_tail = |g: &u64| {
                        g & KPageFlags::COMPOUND_TAIL.bits() != 0
                            && g & KPageFlags::COMPOUND_HEAD.bits() == 0
                    };
                    let size = 1 + flags[i + 1..].iter().take_while(|g| is_tail(g)).count();
                    if size as u64 >= self.pmd_frames {
                        self.thp_end = pfn + size as u64;
                    }
                }
            } else if f & KPageFlags::COMPOUND_TAIL.bits() == 0 {
                self.thp_end = 0;
            }
            let huge = pfn < self.thp_end;
            out.push(self.class(pfn, f, count, huge) as u8);
        }
    }

    /// The class of frame `pfn` with these kpageflags and kpagecount,
    /// `huge` if it is part of a folio of at least a PMD's size.
    fn class(&mut self, pfn: u64, raw_flags: u64, count: u64, huge: bool) -> PhysClass {
        let f = KPageFlags::from_bits_retain(raw_flags);
        // The zero page is also PG_reserved: before the reserved test.
        let class = if f.contains(KPageFlags::ZERO_PAGE) {
            PhysClass::Zero
        } else if f.intersects(KPageFlags::NOPAGE | KPageFlags::OFFLINE | KPageFlags::HWPOISON)
            || raw_flags & KPF_RESERVED != 0
        {
            PhysClass::Reserved
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
        } else if huge && f.contains(KPageFlags::THP) {
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

    const THP_HEAD: u64 = KPageFlags::THP.bits() | KPageFlags::COMPOUND_HEAD.bits();
    const THP_TAIL: u64 = KPageFlags::THP.bits() | KPageFlags::COMPOUND_TAIL.bits();

    /// The classes of a run of frames.
    fn run(c: &mut FrameClassifier, start: u64, frames: &[(u64, u64)]) -> Vec<PhysClass> {
        let (flags, counts): (Vec<u64>, Vec<u64>) = frames.iter().copied().unzip();
        let mut out = Vec::new();
        c.class_run(start, &flags, &counts, &mut out);
        out.into_iter()
            .map(|b| PhysClass::from_code(b).unwrap())
            .collect()
    }

    /// The class of one frame.
    fn one(c: &mut FrameClassifier, pfn: u64, flags: u64, count: u64) -> PhysClass {
        run(c, pfn, &[(flags, count)])[0]
    }

    #[test]
    fn classes() {
        let mut c = FrameClassifier::default();
        let k = |f: KPageFlags| f.bits();
        assert_eq!(
            one(&mut c, 0, k(KPageFlags::NOPAGE), 0),
            PhysClass::Reserved
        );
        assert_eq!(one(&mut c, 1, KPF_RESERVED, 0), PhysClass::Reserved);
        assert_eq!(
            one(
                &mut c,
                2,
                k(KPageFlags::ANON | KPageFlags::MMAP | KPageFlags::LRU),
                1
            ),
            PhysClass::Anon
        );
        assert_eq!(
            one(&mut c, 4, k(KPageFlags::LRU | KPageFlags::UPTODATE), 0),
            PhysClass::CacheUnmapped
        );
        assert_eq!(
            one(
                &mut c,
                5,
                k(KPageFlags::LRU | KPageFlags::UPTODATE | KPageFlags::MMAP),
                2
            ),
            PhysClass::CacheMapped
        );
        assert_eq!(one(&mut c, 6, k(KPageFlags::SLAB), 0), PhysClass::Slab);
        assert_eq!(
            one(&mut c, 7, k(KPageFlags::PGTABLE), 0),
            PhysClass::PageTable
        );
        assert_eq!(one(&mut c, 8, 0, 0), PhysClass::KernelOther);
        // A free block: its head has BUDDY, the rest no flags.
        assert_eq!(one(&mut c, 1024, k(KPageFlags::BUDDY), 0), PhysClass::Free);
        assert_eq!(one(&mut c, 1025, 0, 0), PhysClass::Free);
        assert_eq!(one(&mut c, 2047, 0, 0), PhysClass::Free);
        // ...but not past the largest block.
        assert_eq!(one(&mut c, 2048, 0, 0), PhysClass::KernelOther);
        assert_eq!(
            one(&mut c, 3000, k(KPageFlags::ZERO_PAGE), 1),
            PhysClass::Zero
        );
        for (i, cl) in ALL.iter().enumerate() {
            assert_eq!(PhysClass::from_code(i as u8), Some(*cl));
        }
        assert_eq!(PhysClass::from_code(200), None);
    }

    #[test]
    fn the_zero_page_is_reserved_too() {
        // The zero page's kpageflags on 6.18: ZERO_PAGE (24) and
        // PG_reserved (32).
        let mut c = FrameClassifier::default();
        assert_eq!(one(&mut c, 0x1234, 0x1_0100_0000, 1), PhysClass::Zero);
        // The huge zero page: ZERO_PAGE and THP on each of its frames.
        let z = KPageFlags::ZERO_PAGE.bits();
        let mut frames = vec![(z | THP_HEAD, 1)];
        frames.extend(std::iter::repeat_n((z | THP_TAIL, 1), 511));
        assert!(run(&mut c, 4096, &frames)
            .iter()
            .all(|&k| k == PhysClass::Zero));
    }

    #[test]
    fn only_pmd_sized_folios_are_thp() {
        let mut c = FrameClassifier::default();
        let anon = KPageFlags::ANON.bits() | KPageFlags::MMAP.bits() | KPageFlags::LRU.bits();
        let cache = KPageFlags::LRU.bits() | KPageFlags::UPTODATE.bits();
        // Page cache mapped by no process (kpagecount 0).
        let folio = |extra: u64, size: usize| {
            let n = u64::from(extra & KPageFlags::ANON.bits() != 0);
            let mut v = vec![(THP_HEAD | extra, n)];
            v.extend(std::iter::repeat_n((THP_TAIL | extra, n), size - 1));
            v
        };
        // A PMD-sized anonymous THP, then a 64 KiB anonymous folio.
        let mut frames = folio(anon, 512);
        frames.extend(folio(anon, 16));
        let got = run(&mut c, 512, &frames);
        assert!(got[..512].iter().all(|&k| k == PhysClass::Thp));
        assert!(got[512..].iter().all(|&k| k == PhysClass::Anon));
        // A PMD-sized page-cache folio (FileHugePages, ShmemHugePages),
        // then large page-cache folios of 2 and 256 frames: page cache.
        let mut frames = folio(cache, 512);
        frames.extend(folio(cache, 2));
        frames.extend(folio(cache, 256));
        let got = run(&mut c, 1024, &frames);
        assert!(got[..512].iter().all(|&k| k == PhysClass::Thp));
        assert!(got[512..].iter().all(|&k| k == PhysClass::CacheUnmapped));
        // Two 256-frame folios in a row are no huge page.
        let mut frames = folio(anon, 256);
        frames.extend(folio(anon, 256));
        assert!(run(&mut c, 2048, &frames)
            .iter()
            .all(|&k| k == PhysClass::Anon));
        // Tails whose head came before the run: not known to be huge.
        let frames = vec![(THP_TAIL | anon, 1); 8];
        assert!(run(&mut c, 4100, &frames)
            .iter()
            .all(|&k| k == PhysClass::Anon));
        // 64 KiB pages: a PMD is 8192 frames.
        let mut c = FrameClassifier::new(65536);
        let got = run(&mut c, 8192, &folio(anon, 512));
        assert!(got.iter().all(|&k| k == PhysClass::Anon));
        let got = run(&mut c, 16384, &folio(anon, 8192));
        assert!(got.iter().all(|&k| k == PhysClass::Thp));
    }
}
