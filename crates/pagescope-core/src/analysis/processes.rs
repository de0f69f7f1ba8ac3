//! Per-process resident memory: RSS, PSS, USS and swap, in pages.
//!
//! With page frame numbers visible, the figures come from the pages
//! themselves: RSS counts present pages (by smaps' rule, see
//! [`super::is_resident`]), PSS adds `1 / kpagecount` for each, USS counts
//! the pages pagemap marks exclusively mapped, swap counts swapped entries. Without them
//! (no CAP_SYS_ADMIN), sharing is invisible, and the figures are the
//! kernel's own smaps sums, which the report says. A quick live collection
//! that read only `smaps_rollup` gives the kernel's sums too.

use super::{is_resident, VmaCursor};
use crate::model::{
    PageChunk, ProcessRecord, SmapsCounters, SnapshotSink, SystemInfo, Trailer, Vma,
};
use crate::Result;

/// Where a row's figures come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Counted from pagemap and kpagecount.
    Pages,
    /// Summed from smaps (PFNs were not visible).
    Smaps,
}

/// One process.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessRow {
    /// Process id.
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// Command line, joined with spaces.
    pub cmdline: String,
    /// Threads.
    pub threads: u32,
    /// A kernel thread (no memory of its own).
    pub kernel_thread: bool,
    /// Resident pages.
    pub rss_pages: u64,
    /// Proportional set size, pages (fractional).
    pub pss_pages: f64,
    /// Unique set size: pages mapped only here.
    pub uss_pages: u64,
    /// Pages in swap.
    pub swap_pages: u64,
    /// Resident anonymous pages.
    pub anon_pages: u64,
    /// Where the figures come from.
    pub source: Source,
    /// The smaps sums, kept for comparison.
    pub smaps: SmapsCounters,
}

/// The `processes` analysis.
#[derive(Debug, Default)]
pub struct Processes {
    /// The machine, once seen.
    pub system: SystemInfo,
    /// One row per process, in snapshot order.
    pub rows: Vec<ProcessRow>,
    /// Notes from the snapshot's end record.
    pub notes: Vec<String>,
    /// Whether the snapshot's end record was seen.
    pub complete: bool,
    vmas: Vec<Vma>,
    cursor: VmaCursor,
}

impl Processes {
    /// A fresh analysis.
    pub fn new() -> Processes {
        Processes::default()
    }
}

impl SnapshotSink for Processes {
    fn system(&mut self, system: &SystemInfo) -> Result<()> {
        self.system = system.clone();
        Ok(())
    }

    fn process(&mut self, p: &ProcessRecord) -> Result<()> {
        let kb_per_page = (self.system.page_size / 1024).max(1);
        let smaps = p.rollup.unwrap_or_else(|| {
            let mut sum = SmapsCounters::default();
            for v in &p.vmas {
                sum.add(&v.smaps);
            }
            sum
        });
        let from_pages = self.system.pfns_visible && p.rollup.is_none();
        self.rows.push(ProcessRow {
            pid: p.task.pid,
            comm: p.task.comm.clone(),
            cmdline: p.task.cmdline.join(" "),
            threads: p.task.threads,
            kernel_thread: p.task.kernel_thread,
            rss_pages: if from_pages {
                0
            } else {
                smaps.rss / kb_per_page
            },
            pss_pages: if from_pages {
                0.0
            } else {
                smaps.pss as f64 / kb_per_page as f64
            },
            uss_pages: if from_pages {
                0
            } else {
                (smaps.private_clean + smaps.private_dirty) / kb_per_page
            },
            swap_pages: if from_pages {
                0
            } else {
                smaps.swap / kb_per_page
            },
            anon_pages: if from_pages {
                0
            } else {
                smaps.anonymous / kb_per_page
            },
            source: if from_pages {
                Source::Pages
            } else {
                Source::Smaps
            },
            smaps,
        });
        self.vmas = p.vmas.clone();
        self.cursor = VmaCursor::default();
        Ok(())
    }

    fn pages(&mut self, chunk: &PageChunk) -> Result<()> {
        let Some(row) = self.rows.last_mut() else {
            return Ok(());
        };
        if row.source != Source::Pages || row.pid != chunk.pid {
            return Ok(());
        }
        for page in &chunk.pages {
            if page.entry.is_swapped() {
                row.swap_pages += 1;
                continue;
            }
            let vma = self.cursor.find(&self.vmas, page.vaddr);
            if !is_resident(vma, page) {
                continue;
            }
            row.rss_pages += 1;
            let Some(ph) = page.phys else { continue };
            if ph.flags.contains(crate::kpageflags::KPageFlags::ANON) {
                row.anon_pages += 1;
            }
            // PSS divides each page among its mappings, as smaps does:
            // by kpagecount when it is 2 or more. A count of zero means
            // the page was unmapped between the pagemap and kpagecount
            // reads.
            let count = ph.count.max(1);
            row.pss_pages += 1.0 / count as f64;
            // USS counts the pages the kernel calls exclusively mapped
            // (pagemap bit 56), the same test smaps uses for Private_*.
            if page.entry.is_exclusive() {
                row.uss_pages += 1;
            }
        }
        Ok(())
    }

    fn finish(&mut self, trailer: &Trailer) -> Result<()> {
        self.notes = trailer.notes.clone();
        self.complete = true;
        Ok(())
    }
}
