//! The whole machine in one set of numbers: user pages (distinct page
//! frames mapped by user processes, the 2005 suite's "total"), and from
//! the snapshot's meminfo the page cache, the kernel's own memory, the
//! hugetlb pages in use and the free pages.

use super::pfnset::PfnSet;
use super::{is_resident, VmaCursor};
use crate::kpageflags::KPageFlags;
use crate::model::{PageChunk, ProcessRecord, SnapshotSink, SystemInfo, Trailer, Vma};
use crate::Result;

/// The figures of the `total` view, in pages.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TotalFigures {
    /// Distinct page frames mapped by the processes in the snapshot
    /// (`None` when page frame numbers were hidden).
    pub user_pages: Option<u64>,
    /// Of those, anonymous frames (kpageflags ANON).
    pub user_anon_pages: Option<u64>,
    /// Of those, file-backed or shared-memory frames.
    pub user_file_pages: Option<u64>,
    /// Distinct frames of hugetlb pages mapped by the processes in the
    /// snapshot (apart from `user_pages`, as smaps keeps them apart from
    /// Rss; `None` when page frame numbers were hidden).
    pub user_hugetlb_pages: Option<u64>,
    /// The sum of every process's RSS (counts shared frames once per
    /// process that maps them).
    pub rss_sum_pages: u64,
    /// Processes counted.
    pub processes: u64,
    /// Of those, the processes whose memory or pages could not be read:
    /// the sums over processes (user pages, the RSS sum) leave them out.
    pub processes_unread: u64,
    /// meminfo MemTotal.
    pub mem_total_pages: u64,
    /// meminfo MemFree.
    pub free_pages: u64,
    /// meminfo Cached + Buffers: the page cache, including shmem/tmpfs.
    pub page_cache_pages: u64,
    /// meminfo Shmem (part of the page cache).
    pub shmem_pages: u64,
    /// meminfo AnonPages.
    pub anon_pages_meminfo: u64,
    /// meminfo Slab (SReclaimable + SUnreclaim).
    pub slab_pages: u64,
    /// meminfo PageTables (+ SecPageTables).
    pub page_table_pages: u64,
    /// meminfo KernelStack.
    pub kernel_stack_pages: u64,
    /// Hugetlb pages of the default size allocated to a mapping (mapped
    /// or not; pages only reserved count as free in `HugePages_Free`):
    /// meminfo `(HugePages_Total - HugePages_Free) * Hugepagesize`. Other
    /// huge page sizes are not counted here, while `user_hugetlb_pages`
    /// counts the mapped pages of every size. Not in `free_pages`, nor in
    /// any other figure.
    pub hugetlb_pages: u64,
}

/// The `total` analysis.
#[derive(Debug, Default)]
pub struct Total {
    /// The machine, once seen.
    pub system: SystemInfo,
    /// The figures (complete after the stream ends).
    pub figures: TotalFigures,
    /// Notes from the snapshot's end record.
    pub notes: Vec<String>,
    /// Whether the end record was seen.
    pub complete: bool,
    seen: PfnSet,
    vmas: Vec<Vma>,
    /// Whether the pages of the current process count (it was read).
    counting: bool,
    cursor: VmaCursor,
    anon: u64,
    distinct: u64,
    /// Distinct hugetlb frames, and how many the current process added.
    hugetlb: u64,
    current_hugetlb: u64,
    /// What the current process's pages added so far: to the RSS sum, to
    /// the distinct frames, to the anonymous ones.
    current: (u64, u64, u64),
}

impl Total {
    /// A fresh analysis.
    pub fn new() -> Total {
        Total::default()
    }

    /// Fills the meminfo-derived figures and closes the counts. Called by
    /// [`SnapshotSink::finish`] and [`SnapshotSink::cut_short`].
    pub fn close(&mut self) {
        let s = &self.system;
        let kpp = (s.page_size / 1024).max(1);
        let kb = |k: &str| s.meminfo_kb(k).unwrap_or(0) / kpp;
        let f = &mut self.figures;
        f.mem_total_pages = kb("MemTotal");
        f.free_pages = kb("MemFree");
        f.page_cache_pages = kb("Cached") + kb("Buffers");
        f.shmem_pages = kb("Shmem");
        f.anon_pages_meminfo = kb("AnonPages");
        f.slab_pages = kb("SReclaimable") + kb("SUnreclaim");
        f.page_table_pages = kb("PageTables") + kb("SecPageTables");
        f.kernel_stack_pages = kb("KernelStack");
        // HugePages_* are counts of huge pages, not kB.
        let huge = |k: &str| s.meminfo_kb(k).unwrap_or(0);
        f.hugetlb_pages = huge("HugePages_Total").saturating_sub(huge("HugePages_Free"))
            * huge("Hugepagesize")
            / kpp;
        if s.pfns_visible {
            f.user_hugetlb_pages = s.hugetlb_read.then_some(self.hugetlb);
            f.user_pages = Some(self.distinct);
            f.user_anon_pages = Some(self.anon);
            f.user_file_pages = Some(self.distinct - self.anon);
        }
    }
}

impl SnapshotSink for Total {
    fn system(&mut self, system: &SystemInfo) -> Result<()> {
        self.system = system.clone();
        self.seen = PfnSet::new();
        Ok(())
    }

    fn process(&mut self, p: &ProcessRecord) -> Result<()> {
        self.vmas = p.vmas.clone();
        self.cursor = VmaCursor::default();
        self.counting = p.pages_read();
        self.current = (0, 0, 0);
        self.current_hugetlb = 0;
        if !p.task.kernel_thread {
            self.figures.processes += 1;
            if !self.counting {
                self.figures.processes_unread += 1;
            }
        }
        if !self.system.pfns_visible && self.counting {
            let kpp = (self.system.page_size / 1024).max(1);
            self.figures.rss_sum_pages += p.vmas.iter().map(|v| v.smaps.rss).sum::<u64>() / kpp;
        }
        Ok(())
    }

    fn pages(&mut self, chunk: &PageChunk) -> Result<()> {
        if !self.system.pfns_visible || !self.counting {
            return Ok(());
        }
        for page in &chunk.pages {
            let vma = self.cursor.find(&self.vmas, page.vaddr);
            if !is_resident(vma, page) {
                continue;
            }
            self.figures.rss_sum_pages += 1;
            self.current.0 += 1;
            let (Some(pfn), Some(ph)) = (page.entry.pfn(), page.phys) else {
                continue;
            };
            if self.seen.insert(pfn.0) {
                self.distinct += 1;
                self.current.1 += 1;
                if ph.flags.contains(KPageFlags::ANON) {
                    self.anon += 1;
                    self.current.2 += 1;
                }
            }
        }
        Ok(())
    }

    fn hugetlb(&mut self, chunk: &PageChunk) -> Result<()> {
        if !self.system.pfns_visible || !self.counting {
            return Ok(());
        }
        for page in &chunk.pages {
            let Some(pfn) = page.entry.pfn().filter(|_| page.entry.is_present()) else {
                continue;
            };
            if self.seen.insert(pfn.0) {
                self.hugetlb += 1;
                self.current_hugetlb += 1;
            }
        }
        Ok(())
    }

    fn finish(&mut self, trailer: &Trailer) -> Result<()> {
        self.notes = trailer.notes.clone();
        self.complete = true;
        self.close();
        Ok(())
    }

    fn cut_short(&mut self, pages_cut: bool) -> Result<()> {
        // A process whose pages the file lacks in part counts as unread:
        // what it added is taken out again. The frames it saw first are
        // all its own (no process follows it), so the distinct count is
        // again exactly that of the others.
        if pages_cut && self.counting && self.system.pfns_visible {
            let (rss, distinct, anon) = std::mem::take(&mut self.current);
            self.figures.rss_sum_pages -= rss;
            self.distinct -= distinct;
            self.anon -= anon;
            self.hugetlb -= std::mem::take(&mut self.current_hugetlb);
            self.figures.processes_unread += 1;
            self.counting = false;
        }
        self.close();
        Ok(())
    }
}
