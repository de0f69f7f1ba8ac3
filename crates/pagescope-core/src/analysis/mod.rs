//! Analyses: sinks that consume a snapshot stream and produce the figures
//! of the reports. They never read the live system, so a report from a
//! file and a live report are the same computation.

pub mod classify;
pub mod mrc;
pub mod pages;
pub mod pfnset;
pub mod physmap;
pub mod refs;
pub mod temporal;
pub mod total;
pub mod usage;

use crate::kpageflags::KPageFlags;
use crate::model::{PageChunk, PageRecord, ProcessRecord, SnapshotSink, SystemInfo, Trailer, Vma};
use crate::Result;

/// Whether a present page counts as memory the process holds, by the same
/// rule as the kernel's smaps (fs/proc/task_mmu.c): pages in `VM_PFNMAP`
/// or `VM_IO` mappings (VmFlags `pf`, `io`) and the shared zero page are
/// mapped but are not "normal" pages, so they are not in Rss.
pub fn is_resident(vma: Option<&Vma>, page: &PageRecord) -> bool {
    if !page.entry.is_present() {
        return false;
    }
    if let Some(v) = vma {
        if v.has_vm_flag("pf") || v.has_vm_flag("io") {
            return false;
        }
    }
    match page.phys {
        Some(ph) => !ph.flags.contains(KPageFlags::ZERO_PAGE),
        None => true,
    }
}

/// Finds the VMA of each page of a process as its pages stream by; pages
/// arrive in ascending address order, so a forward cursor suffices.
#[derive(Debug, Default)]
pub struct VmaCursor {
    index: usize,
}

impl VmaCursor {
    /// The VMA holding `vaddr`, if any.
    pub fn find<'a>(&mut self, vmas: &'a [Vma], vaddr: u64) -> Option<&'a Vma> {
        self.index_by(vmas, vaddr, |v| v).map(|i| &vmas[i])
    }

    /// The index of the item whose VMA (`vma(item)`) holds `vaddr`, for
    /// analyses that keep more than the VMA per entry.
    pub fn index_by<T>(
        &mut self,
        items: &[T],
        vaddr: u64,
        vma: impl Fn(&T) -> &Vma,
    ) -> Option<usize> {
        if self.index >= items.len() || vma(&items[self.index]).start > vaddr {
            // Out of order (never from pagescope's collector): search.
            self.index = items.partition_point(|v| vma(v).end <= vaddr);
        }
        while self.index < items.len() && vma(&items[self.index]).end <= vaddr {
            self.index += 1;
        }
        (self.index < items.len() && vma(&items[self.index]).start <= vaddr).then_some(self.index)
    }
}

/// Passes on only the processes whose pid is in the list (all if empty).
#[derive(Debug)]
pub struct PidFilter<'a, S: SnapshotSink> {
    pids: &'a [u32],
    inner: &'a mut S,
    passing: bool,
}

impl<'a, S: SnapshotSink> PidFilter<'a, S> {
    /// Wraps `inner`.
    pub fn new(pids: &'a [u32], inner: &'a mut S) -> Self {
        PidFilter {
            pids,
            inner,
            passing: true,
        }
    }
}

impl<S: SnapshotSink> SnapshotSink for PidFilter<'_, S> {
    fn system(&mut self, system: &SystemInfo) -> Result<()> {
        self.inner.system(system)
    }
    fn process(&mut self, p: &ProcessRecord) -> Result<()> {
        self.passing = self.pids.is_empty() || self.pids.contains(&p.task.pid);
        if self.passing {
            self.inner.process(p)?;
        }
        Ok(())
    }
    fn pages(&mut self, chunk: &PageChunk) -> Result<()> {
        if self.passing {
            self.inner.pages(chunk)?;
        }
        Ok(())
    }
    fn hugetlb(&mut self, chunk: &PageChunk) -> Result<()> {
        if self.passing {
            self.inner.hugetlb(chunk)?;
        }
        Ok(())
    }
    fn finish(&mut self, t: &Trailer) -> Result<()> {
        self.inner.finish(t)
    }
    fn cut_short(&mut self, pages_cut: bool) -> Result<()> {
        // A process left out was the one cut: those passed are whole.
        self.inner.cut_short(pages_cut && self.passing)
    }
    fn elf(&mut self, e: &crate::model::ElfFile) -> Result<()> {
        self.inner.elf(e)
    }
    fn physmap(&mut self, c: &crate::model::PhysChunk) -> Result<()> {
        self.inner.physmap(c)
    }
}

/// Hands the stream to two sinks, so that one read of a snapshot (which
/// may be a stream that can't be read twice) feeds two analyses.
#[derive(Debug)]
pub struct Tee<'a, A: SnapshotSink, B: SnapshotSink>(pub &'a mut A, pub &'a mut B);

impl<A: SnapshotSink, B: SnapshotSink> SnapshotSink for Tee<'_, A, B> {
    fn system(&mut self, system: &SystemInfo) -> Result<()> {
        self.0.system(system)?;
        self.1.system(system)
    }
    fn process(&mut self, p: &ProcessRecord) -> Result<()> {
        self.0.process(p)?;
        self.1.process(p)
    }
    fn pages(&mut self, chunk: &PageChunk) -> Result<()> {
        self.0.pages(chunk)?;
        self.1.pages(chunk)
    }
    fn hugetlb(&mut self, chunk: &PageChunk) -> Result<()> {
        self.0.hugetlb(chunk)?;
        self.1.hugetlb(chunk)
    }
    fn finish(&mut self, t: &Trailer) -> Result<()> {
        self.0.finish(t)?;
        self.1.finish(t)
    }
    fn cut_short(&mut self, pages_cut: bool) -> Result<()> {
        self.0.cut_short(pages_cut)?;
        self.1.cut_short(pages_cut)
    }
    fn elf(&mut self, e: &crate::model::ElfFile) -> Result<()> {
        self.0.elf(e)?;
        self.1.elf(e)
    }
    fn physmap(&mut self, c: &crate::model::PhysChunk) -> Result<()> {
        self.0.physmap(c)?;
        self.1.physmap(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vma(start: u64, end: u64) -> Vma {
        Vma {
            start,
            end,
            ..Vma::default()
        }
    }

    #[test]
    fn cursor_finds_vmas() {
        let vmas = [vma(0x1000, 0x3000), vma(0x5000, 0x6000)];
        let mut c = VmaCursor::default();
        assert_eq!(c.find(&vmas, 0x1000).unwrap().start, 0x1000);
        assert_eq!(c.find(&vmas, 0x2000).unwrap().start, 0x1000);
        assert!(c.find(&vmas, 0x4000).is_none());
        assert_eq!(c.find(&vmas, 0x5000).unwrap().start, 0x5000);
        assert!(c.find(&vmas, 0x9000).is_none());
        assert_eq!(c.find(&vmas, 0x1000).unwrap().start, 0x1000);
    }
}
