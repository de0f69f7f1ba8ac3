//! What page-placing backends share: the resident pages of processes
//! (from pagemap), and the tallies that turn referenced pages into an
//! interval's rows.

use super::process::gone_ok;
use crate::pagemap::PagemapReader;
use crate::procfs::ProcDir;
use pagescope_core::kpageflags::KPageFlags;
use pagescope_core::record::{huge_histogram, Counts, Interval, PageRuns, PhysRow, VirtRow};
use pagescope_core::Result;
use std::collections::BTreeMap;
use std::path::Path;

/// One resident page of a recorded process (or one in swap, from
/// [`resident_or_in_swap`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Page {
    /// Its frame (0 for a page in swap, which has none).
    pub pfn: u64,
    /// In swap: a page with no frame.
    pub in_swap: bool,
    pub pid: u32,
    pub vaddr: u64,
    /// The VMA holding it.
    pub vma: (u64, u64),
    /// Its soft-dirty bit.
    pub dirty: bool,
}

/// Every resident page of `pids` inside `ranges(pid)` (sorted, disjoint
/// `[start, end)` address ranges), sorted by frame. Processes that exit
/// meanwhile are skipped.
pub(super) fn resident(
    proc_root: &Path,
    page_size: u64,
    pids: &[u32],
    buf: &mut Vec<u8>,
    ranges: impl FnMut(u32) -> Vec<(u64, u64)>,
) -> Result<Vec<Page>> {
    pages_of(proc_root, page_size, pids, buf, false, ranges)
}

/// [`resident`], and with `in_swap` the pages of the ranges that are in
/// swap (first, with no frame): a page the `fault` backend saw referenced
/// may have gone to swap before the boundary.
pub(super) fn pages_of(
    proc_root: &Path,
    page_size: u64,
    pids: &[u32],
    buf: &mut Vec<u8>,
    in_swap: bool,
    mut ranges: impl FnMut(u32) -> Vec<(u64, u64)>,
) -> Result<Vec<Page>> {
    let mut out = Vec::new();
    for &pid in pids {
        let want = ranges(pid);
        if want.is_empty() {
            continue;
        }
        let r = (|| -> Result<()> {
            let dir = ProcDir::open_memory(proc_root, pid)?;
            let maps = dir.maps(buf)?;
            let file = dir.open_file("pagemap")?;
            let mut pm = PagemapReader::new(file, dir.path().join("pagemap"), page_size);
            let mut k = 0;
            for m in maps {
                // The ranges are sorted, as the VMAs are: walk both.
                while k < want.len() && want[k].1 <= m.start {
                    k += 1;
                }
                let mut j = k;
                while j < want.len() && want[j].0 < m.end {
                    let (s, e) = (want[j].0.max(m.start), want[j].1.min(m.end));
                    pm.for_each(s, e, |vaddr, e| {
                        let pfn = e.pfn().filter(|_| e.is_present());
                        if pfn.is_some() || (in_swap && e.is_in_swap()) {
                            out.push(Page {
                                pfn: pfn.map_or(0, |p| p.0),
                                in_swap: pfn.is_none(),
                                pid,
                                vaddr,
                                vma: (m.start, m.end),
                                dirty: e.is_soft_dirty(),
                            });
                        }
                    })?;
                    j += 1;
                }
            }
            Ok(())
        })();
        gone_ok(r)?;
    }
    out.sort_unstable_by_key(|p| (!p.in_swap, p.pfn));
    Ok(out)
}

/// Per-process rows and page runs of a machine-wide interval: each of
/// `pids`'s resident pages whose frame is set in `seen` (a bit per frame,
/// the frames found referenced), read from pagemap after the machine's
/// frames were (a page mapped meanwhile goes by its frame's state). A
/// frame two processes map counts in both.
pub(super) fn per_process(
    proc_root: &Path,
    page_size: u64,
    block: u64,
    pids: &[u32],
    buf: &mut Vec<u8>,
    seen: &[u64],
    out: &mut Interval,
) -> Result<()> {
    let mut tally = ProcessTally::new(page_size, block, false);
    for p in &all_resident(proc_root, page_size, pids, buf)? {
        let bit = seen
            .get((p.pfn / 64) as usize)
            .map(|w| w >> (p.pfn % 64) & 1);
        if bit == Some(1) {
            tally.add(p);
        }
    }
    tally.finish_per_process(out);
    Ok(())
}

/// Sets the bit of `frame` in `seen`, growing it as needed.
pub(super) fn set_frame(seen: &mut Vec<u64>, frame: u64) {
    let w = (frame / 64) as usize;
    if seen.len() <= w {
        seen.resize(w + 1, 0);
    }
    seen[w] |= 1 << (frame % 64);
}

/// Every resident page of `pids`, sorted by frame.
pub(super) fn all_resident(
    proc_root: &Path,
    page_size: u64,
    pids: &[u32],
    buf: &mut Vec<u8>,
) -> Result<Vec<Page>> {
    resident(proc_root, page_size, pids, buf, |_| vec![(0, u64::MAX)])
}

/// Whether a frame's reference state means anything to the idle bitmap
/// and to DAMON's physical sampling: an LRU page, or any page of a
/// transparent huge page (whose tail pages don't carry the LRU flag in
/// kpageflags on older kernels), but never the zero page.
pub(super) fn tracked(flags: u64) -> bool {
    let f = KPageFlags::from_bits_retain(flags);
    (f.contains(KPageFlags::LRU) || f.contains(KPageFlags::THP))
        && !f.contains(KPageFlags::ZERO_PAGE)
}

/// Pages and written pages of a row, weighted (a sampled page stands for
/// several).
#[derive(Clone, Copy, Debug, Default)]
struct Weighted {
    user: f64,
    written: f64,
}

impl Weighted {
    /// The counts, rounded. A sample's estimate for a row may exceed the
    /// row's pages: it is not capped, since capping every row would bias
    /// the sum of rows low wherever a row was referenced in full.
    fn counts(self) -> Counts {
        let user = self.user.round() as u64;
        Counts {
            user,
            page_cache: 0,
            written: (self.written.round() as u64).min(user),
        }
    }
}

/// Referenced pages of processes, summed into an interval's rows: by
/// physical block (a frame mapped twice counts once), by block piece
/// inside each VMA, as runs of virtual pages, and by 2 MiB region.
pub(super) struct ProcessTally {
    page_size: u64,
    block: u64,
    soft_dirty: bool,
    phys: BTreeMap<u64, Weighted>,
    virt: BTreeMap<(u32, u64, u64), Weighted>,
    regions: Vec<(u32, u64)>,
    referenced: Vec<(u32, u64)>,
    last_pfn: Option<u64>,
}

impl ProcessTally {
    /// A tally whose written counts come from the pages' `dirty` flags
    /// (soft-dirty bits, or writes the backend saw) if `soft_dirty`.
    pub fn new(page_size: u64, block: u64, soft_dirty: bool) -> ProcessTally {
        ProcessTally {
            page_size,
            block,
            soft_dirty,
            phys: BTreeMap::new(),
            virt: BTreeMap::new(),
            regions: Vec::new(),
            referenced: Vec::new(),
            last_pfn: None,
        }
    }

    /// Counts a referenced page; pages must come sorted by frame.
    pub fn add(&mut self, p: &Page) {
        self.add_weighted(p, 1.0);
    }

    /// Counts a referenced page as `weight` pages (a page of a random
    /// sample); pages must come sorted by frame. A page in swap counts in
    /// its process's rows but in no physical block (it has no frame).
    pub fn add_weighted(&mut self, p: &Page, weight: f64) {
        let (ps, block) = (self.page_size, self.block);
        self.referenced.push((p.pid, p.vaddr / ps));
        self.regions.push((p.pid, p.vaddr >> 21));
        let written = if self.soft_dirty && p.dirty {
            weight
        } else {
            0.0
        };
        if !p.in_swap && self.last_pfn != Some(p.pfn) {
            self.last_pfn = Some(p.pfn);
            let c = self.phys.entry(p.pfn * ps / block).or_default();
            c.user += weight;
            c.written += written;
        }
        let vb = p.vaddr / block * block;
        let key = (p.pid, vb.max(p.vma.0), (vb + block).min(p.vma.1));
        let c = self.virt.entry(key).or_default();
        c.user += weight;
        c.written += written;
    }

    /// Writes the rows, page runs and huge-page histogram into `out`.
    pub fn finish(mut self, out: &mut Interval) {
        out.huge = huge_histogram(std::mem::take(&mut self.regions));
        out.phys.extend(
            std::mem::take(&mut self.phys)
                .into_iter()
                .map(|(block, w)| PhysRow {
                    block,
                    counts: w.counts(),
                }),
        );
        self.finish_per_process(out);
    }

    /// Writes only what is per process (virtual rows and page runs) into
    /// `out`: for the machine, whose physical rows and regions come from
    /// its frames.
    pub fn finish_per_process(mut self, out: &mut Interval) {
        self.referenced.sort_unstable();
        self.referenced.dedup();
        for run in self.referenced.chunk_by(|a, b| a.0 == b.0) {
            let vpages: Vec<u64> = run.iter().map(|&(_, p)| p).collect();
            out.pages.push(PageRuns::from_sorted(run[0].0, &vpages));
        }
        out.virt
            .extend(self.virt.into_iter().map(|((pid, start, end), w)| VirtRow {
                pid,
                start,
                end,
                counts: w.counts(),
            }));
    }
}

/// Referenced frames of the whole machine, classed by kpageflags: mapped
/// (user) or file pages no process maps (page cache), summed by
/// physical block and 2 MiB region.
pub(super) struct FrameTally {
    page_size: u64,
    block: u64,
    rows: BTreeMap<u64, Counts>,
    regions: Vec<u64>,
}

impl FrameTally {
    pub fn new(page_size: u64, block: u64) -> FrameTally {
        FrameTally {
            page_size,
            block,
            rows: BTreeMap::new(),
            regions: Vec::new(),
        }
    }

    /// Counts a referenced frame with kpageflags `flags` (only tracked
    /// frames should come here).
    pub fn add(&mut self, frame: u64, flags: u64) {
        let f = KPageFlags::from_bits_retain(flags);
        self.regions.push((frame * self.page_size) >> 21);
        let c = self
            .rows
            .entry(frame * self.page_size / self.block)
            .or_default();
        if !f.contains(KPageFlags::MMAP) && !f.contains(KPageFlags::ANON) {
            c.page_cache += 1;
        } else {
            c.user += 1;
        }
    }

    /// Writes the rows and huge-page histogram into `out`.
    pub fn finish(self, out: &mut Interval) {
        out.huge = huge_histogram(self.regions);
        out.phys.extend(
            self.rows
                .into_iter()
                .map(|(block, counts)| PhysRow { block, counts }),
        );
    }
}
