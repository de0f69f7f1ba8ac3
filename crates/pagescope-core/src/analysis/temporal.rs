//! Analyses of a recording (`pagescope record`): references per interval
//! (`temporal`, the memref paper's figures 3-6 and 13-14), how often each
//! block was referenced over the run (`spatial`, figures 15-22), both at
//! once (`heatmap`), how densely 2 MiB regions were referenced
//! (`hugepages`, section 6.2) and references per NUMA node (`numa`,
//! section 6.3).

use crate::format::RecordVisitor;
use crate::record::{
    Counts, EndReason, Granularity, Interval, ProcessInfo, RecordEnd, RecordHeader, Scope,
    WriteSource,
};
use crate::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};

/// A recording, read whole: intervals are small (one row per referenced
/// block), so even a long recording fits.
#[derive(Debug, Default)]
pub struct Recording {
    /// The header.
    pub header: Option<RecordHeader>,
    /// Processes, in the order first seen.
    pub processes: Vec<ProcessInfo>,
    /// Intervals, in order.
    pub intervals: Vec<Interval>,
    /// The end record, absent when the recorder was killed.
    pub end: Option<RecordEnd>,
}

impl RecordVisitor for Recording {
    fn header(&mut self, h: &RecordHeader) -> Result<()> {
        self.header = Some(h.clone());
        Ok(())
    }
    fn process(&mut self, p: &ProcessInfo) -> Result<()> {
        self.processes.push(p.clone());
        Ok(())
    }
    fn interval(&mut self, i: &Interval) -> Result<()> {
        self.intervals.push(i.clone());
        Ok(())
    }
    fn end(&mut self, e: &RecordEnd) -> Result<()> {
        self.end = Some(e.clone());
        Ok(())
    }
}

/// A virtual address range to restrict counts to.
pub type Range = (u64, u64);

/// Which rows of the recorded processes an analysis counts: those of one
/// process, those overlapping a virtual address range, or both; the
/// default selects everything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Select {
    /// Only rows overlapping this range (a row is counted whole).
    pub range: Option<Range>,
    /// Only rows of this process.
    pub pid: Option<u32>,
}

impl Select {
    /// Whether nothing is left out.
    pub fn is_all(&self) -> bool {
        self.range.is_none() && self.pid.is_none()
    }

    /// Whether the row of process `pid` over `[start, end)` is counted.
    pub fn keeps(&self, pid: u32, start: u64, end: u64) -> bool {
        self.pid.is_none_or(|p| p == pid) && self.range.is_none_or(|(s, e)| start < e && end > s)
    }
}

/// Per-process totals over a recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessRow {
    /// The process.
    pub pid: u32,
    /// Its command line, when the recording names it.
    pub command: Vec<String>,
    /// Intervals in which it had a reference.
    pub intervals: u64,
    /// Referenced pages summed over intervals, by class, and written.
    pub counts: Counts,
    /// The most pages it referenced in one interval.
    pub peak: u64,
}

/// One interval's figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemporalRow {
    /// Sequence number.
    pub seq: u64,
    /// Start, nanoseconds after the recording start.
    pub start_ns: u64,
    /// End.
    pub end_ns: u64,
    /// Referenced pages by class, and written pages.
    pub counts: Counts,
    /// Blocks (or rows) with any reference.
    pub blocks: u64,
    /// Kernel pages resident at the end (slab, page tables, stacks).
    pub kernel_resident: u64,
    /// Recorder CPU in the interval.
    pub recorder_cpu_ns: u64,
}

/// How often one block was referenced over the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpatialRow {
    /// The process, for virtual blocks.
    pub pid: Option<u32>,
    /// First address (physical or virtual).
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// Intervals in which it had a reference.
    pub intervals: u64,
    /// Referenced pages summed over intervals, by class, and written.
    pub counts: Counts,
}

/// One row of one interval: a cell of the heat map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeatCell {
    /// The interval.
    pub seq: u64,
    /// The process, for virtual rows.
    pub pid: Option<u32>,
    /// First address (physical or virtual).
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// Its counts.
    pub counts: Counts,
}

/// References to one NUMA node in one interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaRow {
    /// The interval.
    pub seq: u64,
    /// The node.
    pub node: u16,
    /// Referenced and written pages on it.
    pub counts: Counts,
}

/// The working set at one interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WssRow {
    /// The interval.
    pub seq: u64,
    /// Its start, nanoseconds after the recording start.
    pub start_ns: u64,
    /// Distinct pages referenced in it.
    pub pages: u64,
    /// Distinct pages referenced in it and the intervals before it, up to
    /// the window.
    pub window_pages: u64,
}

/// `(pages referenced in a region, regions)`, ascending.
pub type Histogram = Vec<(u64, u64)>;

/// How densely one interval referenced its 2 MiB regions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugeRow {
    /// The interval.
    pub seq: u64,
    /// 2 MiB regions with a reference.
    pub regions: u64,
    /// Of those, referenced in every page.
    pub full: u64,
    /// Pages referenced in them.
    pub pages: u64,
}

impl Recording {
    /// The header; a file without one never gets this far.
    pub fn header(&self) -> &RecordHeader {
        self.header.as_ref().expect("read_record checks the header")
    }

    /// The processes the recording holds: those it names, and those with
    /// rows it never named (a process the fault backend read only at its
    /// exit).
    pub fn pids(&self) -> BTreeSet<u32> {
        let named = self.processes.iter().map(|p| p.pid);
        let rows = self.intervals.iter().flat_map(|i| {
            let pages = i.pages.iter().map(|p| p.pid);
            i.virt.iter().map(|v| v.pid).chain(pages)
        });
        named.chain(rows).collect()
    }

    /// Whether the rows are per process (virtual): recordings of
    /// processes, and system-wide ones that hold them (the `refs` backend
    /// reads every process; `idle` and `damon` find each process's pages
    /// on the referenced frames; recordings from before they did have
    /// physical rows only).
    pub fn has_process_rows(&self) -> bool {
        self.header().scope != Scope::System || self.intervals.iter().any(|i| !i.virt.is_empty())
    }

    /// Checks that `sel` can be applied: it needs per-process rows.
    fn check_select(&self, sel: Select) -> Result<()> {
        if sel.is_all() {
            return Ok(());
        }
        self.needs_process_rows("--range and --pid")
    }

    /// Refuses `what` on a recording with no rows per process.
    fn needs_process_rows(&self, what: &str) -> Result<()> {
        if !self.has_process_rows() {
            return Err(Error::Unsupported {
                what: format!(
                    "{what} on a system-wide recording made with the {} backend",
                    self.header().backend.name()
                ),
                needs: "rows per process, which this recording does not hold".into(),
            });
        }
        Ok(())
    }

    /// Per-interval figures, restricted to the rows `sel` keeps.
    pub fn temporal(&self, sel: Select) -> Result<Vec<TemporalRow>> {
        self.check_select(sel)?;
        Ok(self
            .intervals
            .iter()
            .map(|i| {
                let (counts, blocks) = match sel.is_all() {
                    true => (
                        i.total(),
                        if i.phys.is_empty() {
                            i.virt.len()
                        } else {
                            i.phys.len()
                        } as u64,
                    ),
                    false => {
                        let mut c = Counts::default();
                        let mut n = 0;
                        for r in i.virt.iter().filter(|r| sel.keeps(r.pid, r.start, r.end)) {
                            c.add(&r.counts);
                            n += 1;
                        }
                        (c, n)
                    }
                };
                TemporalRow {
                    seq: i.seq,
                    start_ns: i.start_ns,
                    end_ns: i.end_ns,
                    counts,
                    blocks,
                    kernel_resident: i.kernel.total(),
                    recorder_cpu_ns: i.recorder_cpu_ns,
                }
            })
            .collect())
    }

    /// Rows that `sel` keeps that overlap its range only in part (counted
    /// whole, since a row can't be split).
    pub fn partial_rows(&self, sel: Select) -> u64 {
        let Some((s, e)) = sel.range else {
            return 0;
        };
        self.intervals
            .iter()
            .flat_map(|i| &i.virt)
            .filter(|r| sel.keeps(r.pid, r.start, r.end) && (r.start < s || r.end > e))
            .count() as u64
    }

    /// Totals per process over the run, of the rows `sel` keeps, most
    /// referenced first.
    pub fn processes(&self, sel: Select) -> Result<Vec<ProcessRow>> {
        self.needs_process_rows("per-process totals")?;
        let mut by: BTreeMap<u32, ProcessRow> = BTreeMap::new();
        for i in &self.intervals {
            let mut here: BTreeMap<u32, Counts> = BTreeMap::new();
            for r in i.virt.iter().filter(|r| sel.keeps(r.pid, r.start, r.end)) {
                here.entry(r.pid).or_default().add(&r.counts);
            }
            for (pid, c) in here {
                let row = by.entry(pid).or_insert_with(|| ProcessRow {
                    pid,
                    command: Vec::new(),
                    intervals: 0,
                    counts: Counts::default(),
                    peak: 0,
                });
                row.intervals += 1;
                row.counts.add(&c);
                row.peak = row.peak.max(c.referenced());
            }
        }
        for p in &self.processes {
            if let Some(row) = by.get_mut(&p.pid) {
                row.command = p.command.clone();
            }
        }
        let mut rows: Vec<ProcessRow> = by.into_values().collect();
        rows.sort_by(|a, b| {
            b.counts
                .referenced()
                .cmp(&a.counts.referenced())
                .then(a.pid.cmp(&b.pid))
        });
        Ok(rows)
    }

    /// Per-block figures over the run: physical blocks when the backend
    /// knew frames, else the virtual rows of each process.
    pub fn spatial(&self, sel: Select) -> Result<Vec<SpatialRow>> {
        self.check_select(sel)?;
        let h = self.header();
        let mut by: BTreeMap<(Option<u32>, u64, u64), (u64, Counts)> = BTreeMap::new();
        for i in &self.intervals {
            if sel.is_all() && !i.phys.is_empty() {
                for r in &i.phys {
                    let start = r.block * h.block_size;
                    let e = by.entry((None, start, start + h.block_size)).or_default();
                    e.0 += 1;
                    e.1.add(&r.counts);
                }
                continue;
            }
            for r in i.virt.iter().filter(|r| sel.keeps(r.pid, r.start, r.end)) {
                let e = by.entry((Some(r.pid), r.start, r.end)).or_default();
                e.0 += 1;
                e.1.add(&r.counts);
            }
        }
        Ok(by
            .into_iter()
            .map(|((pid, start, end), (intervals, counts))| SpatialRow {
                pid,
                start,
                end,
                intervals,
                counts,
            })
            .collect())
    }

    /// Every row of every interval: physical blocks when the backend knew
    /// frames (and no range is asked for), else virtual rows.
    pub fn heatmap(&self, sel: Select) -> Result<Vec<HeatCell>> {
        self.check_select(sel)?;
        let bs = self.header().block_size;
        let mut out = Vec::new();
        for i in &self.intervals {
            if sel.is_all() && !i.phys.is_empty() {
                out.extend(i.phys.iter().map(|r| HeatCell {
                    seq: i.seq,
                    pid: None,
                    start: r.block * bs,
                    end: (r.block + 1) * bs,
                    counts: r.counts,
                }));
                continue;
            }
            out.extend(
                i.virt
                    .iter()
                    .filter(|r| sel.keeps(r.pid, r.start, r.end))
                    .map(|r| HeatCell {
                        seq: i.seq,
                        pid: Some(r.pid),
                        start: r.start,
                        end: r.end,
                        counts: r.counts,
                    }),
            );
        }
        Ok(out)
    }

    fn needs_pages(&self, what: &str) -> Result<()> {
        let h = self.header();
        if h.granularity == Granularity::Vma {
            return Err(Error::Unsupported {
                what: format!(
                    "`{what}` of a recording made with the {} backend",
                    h.backend.name()
                ),
                needs: "a backend that places pages (idle, damon, fault)".into(),
            });
        }
        Ok(())
    }

    /// References per node per interval; also the physical rows that fall
    /// on no known node (their pages).
    pub fn numa(&self) -> Result<(Vec<NumaRow>, u64)> {
        self.needs_pages("numa")?;
        let h = self.header();
        if self.intervals.iter().all(|i| i.phys.is_empty()) && !self.intervals.is_empty() {
            return Err(Error::Unsupported {
                what: "`numa` of this recording".into(),
                needs: "physical rows (page frame numbers, root)".into(),
            });
        }
        let mut out = Vec::new();
        let mut unplaced = 0;
        for i in &self.intervals {
            let mut per: BTreeMap<u16, Counts> = BTreeMap::new();
            for r in &i.phys {
                let pfn = r.block * h.block_size / h.page_size;
                match h
                    .nodes
                    .iter()
                    .find(|n| n.start_pfn <= pfn && pfn < n.end_pfn)
                {
                    Some(n) => per.entry(n.node).or_default().add(&r.counts),
                    None => unplaced = r.counts.referenced().saturating_add(unplaced),
                }
            }
            out.extend(per.into_iter().map(|(node, counts)| NumaRow {
                seq: i.seq,
                node,
                counts,
            }));
        }
        Ok((out, unplaced))
    }

    /// The fraction of pages a sampled recording watched; `None` for one
    /// that watched every page.
    fn fraction(&self) -> Option<f64> {
        self.header().sample.filter(|&f| f < 1.0)
    }

    /// An interval's `(pages referenced in the region, regions)`, scaled
    /// to the whole where the recording watched a sample: from its pages,
    /// each region's referenced share of the sample pages it holds
    /// ([`crate::sample`]), times its size, and full where every sample
    /// page of it was referenced; without pages, the sampled counts over
    /// the fraction.
    fn huge_of(&self, i: &Interval, per_region: u64) -> Vec<(u64, u64)> {
        let Some(f) = self.fraction() else {
            return i.huge.iter().map(|&(p, r)| (p as u64, r as u64)).collect();
        };
        let scaled = || {
            i.huge
                .iter()
                .map(|&(p, r)| (((p as f64 / f).round() as u64).min(per_region), r as u64))
                .collect()
        };
        if i.pages.is_empty() {
            return scaled();
        }
        // Pages per region, run by run; past REGIONS_MAX regions (128 GiB
        // of them, far more than a sample's pages fill) the runs can't be
        // a sample's, and the histogram is scaled instead.
        const REGIONS_MAX: u64 = 1 << 16;
        let mut budget = REGIONS_MAX;
        let mut seen: BTreeMap<(u32, u64), u64> = BTreeMap::new();
        for p in &i.pages {
            for (start, len) in p.absolute() {
                let end = start.saturating_add(len);
                let mut at = start;
                while at < end {
                    if budget == 0 {
                        return scaled();
                    }
                    budget -= 1;
                    let region = at / per_region;
                    let next = region
                        .saturating_add(1)
                        .saturating_mul(per_region)
                        .min(end)
                        .max(at + 1);
                    *seen.entry((p.pid, region)).or_default() += next - at;
                    at = next;
                }
            }
        }
        let mut per: BTreeMap<u64, u64> = BTreeMap::new();
        for ((_, region), n) in seen {
            let watched = crate::sample::sampled_in(region * per_region, per_region, f);
            let pages = if n >= watched {
                per_region
            } else {
                (n as f64 * per_region as f64 / watched as f64).round() as u64
            };
            *per.entry(pages).or_default() += 1;
        }
        per.into_iter().collect()
    }

    /// 2 MiB regions per interval, and over the run the histogram of
    /// pages referenced per region (`(pages, regions)`); estimates scaled
    /// to the whole for a sampled recording.
    pub fn hugepages(&self) -> Result<(Vec<HugeRow>, Histogram)> {
        self.needs_pages("hugepages")?;
        let per_region = (2 << 20) / self.header().page_size;
        let mut all: BTreeMap<u64, u64> = BTreeMap::new();
        let rows = self
            .intervals
            .iter()
            .map(|i| {
                let mut row = HugeRow {
                    seq: i.seq,
                    regions: 0,
                    full: 0,
                    pages: 0,
                };
                for (pages, regions) in self.huge_of(i, per_region) {
                    row.regions = row.regions.saturating_add(regions);
                    row.pages = row.pages.saturating_add(pages.saturating_mul(regions));
                    if pages >= per_region {
                        row.full = row.full.saturating_add(regions);
                    }
                    let n = all.entry(pages).or_default();
                    *n = n.saturating_add(regions);
                }
                row
            })
            .collect();
        Ok((rows, all.into_iter().collect()))
    }

    /// Working set sizes: distinct pages referenced in each interval, and
    /// in each window of `window` intervals ending with it, restricted to
    /// what `sel` keeps.
    pub fn wss(&self, window: usize, sel: Select) -> Result<Vec<WssRow>> {
        let h = self.header();
        if h.granularity == Granularity::Vma || !self.has_process_rows() {
            return Err(Error::Unsupported {
                what: format!(
                    "`wss` of a {} recording made with the {} backend",
                    if h.scope == Scope::System {
                        "system-wide"
                    } else {
                        "process"
                    },
                    h.backend.name()
                ),
                needs: "the referenced pages of processes: record processes with a \
                        backend that places pages (idle, damon, fault)"
                    .into(),
            });
        }
        let ps = h.page_size;
        let (lo, hi) = sel
            .range
            .map_or((0, u64::MAX), |(s, e)| (s / ps, e.div_ceil(ps)));
        let distinct = |intervals: &[Interval]| -> u64 {
            let mut runs: Vec<(u32, u64, u64)> = intervals
                .iter()
                .flat_map(|i| &i.pages)
                .filter(|p| sel.pid.is_none_or(|pid| pid == p.pid))
                .flat_map(|p| {
                    p.absolute()
                        .map(move |(s, n)| (p.pid, s, s.saturating_add(n)))
                })
                .map(|(pid, s, e)| (pid, s.max(lo), e.min(hi)))
                .filter(|(_, s, e)| s < e)
                .collect();
            runs.sort_unstable();
            let mut total = 0;
            let mut cur: Option<(u32, u64, u64)> = None;
            for (pid, s, e) in runs {
                match cur {
                    Some((p, cs, ce)) if p == pid && s <= ce => cur = Some((p, cs, ce.max(e))),
                    _ => {
                        if let Some((_, cs, ce)) = cur {
                            total = (ce - cs).saturating_add(total);
                        }
                        cur = Some((pid, s, e));
                    }
                }
            }
            cur.map_or(0, |(_, s, e)| e - s).saturating_add(total)
        };
        // A sampled recording's pages stand for 1/fraction pages each, as
        // its counts do.
        let scale = |pages: u64| match self.fraction() {
            Some(f) => (pages as f64 / f).round() as u64,
            None => pages,
        };
        let w = window.max(1);
        Ok((0..self.intervals.len())
            .map(|t| WssRow {
                seq: self.intervals[t].seq,
                start_ns: self.intervals[t].start_ns,
                pages: scale(distinct(&self.intervals[t..=t])),
                window_pages: scale(distinct(&self.intervals[(t + 1).saturating_sub(w)..=t])),
            })
            .collect())
    }

    /// Lines for a report about what the figures can and can't say.
    pub fn notes(&self) -> Vec<String> {
        let h = self.header();
        let mut notes = h.notes.clone();
        if h.granularity == Granularity::Vma {
            notes.push(format!(
                "the {} backend places references by VMA: rows are whole VMAs",
                h.backend.name()
            ));
        }
        if h.scope == Scope::System && self.intervals.iter().all(|i| i.phys.is_empty()) {
            notes.push(
                "user_pages of the whole machine is a sum over processes, not a count of \
                 distinct pages: a page that n processes referenced counts n times (with no \
                 page frames, pages shared between processes can't be told apart)"
                    .into(),
            );
        }
        if h.granularity == Granularity::Region {
            notes.push(format!(
                "the {} backend samples one page per region: a region seen accessed counts \
                 as referenced in all its resident pages, so counts are estimates",
                h.backend.name()
            ));
            if h.writes != WriteSource::None {
                notes.push(
                    "written_pages is a lower bound here: a page written in an interval in \
                     which DAMON did not see its region accessed is not counted (measured 2% \
                     to 30% short per pass of pagetest: docs/performance.md)"
                        .into(),
                );
            }
        }
        if let Some(f) = h.sample.filter(|&f| f < 1.0) {
            // 0.1 x 100 is 10.000000000000002 in binary: six places, trimmed.
            let percent = format!("{:.6}", f * 100.0);
            let percent = percent.trim_end_matches('0').trim_end_matches('.');
            notes.push(format!(
                "counts are estimates: the {} backend watched a fixed random {percent}% of \
                 the pages, each one seen counting {:.1} pages",
                h.backend.name(),
                1.0 / f
            ));
        }
        match &self.end {
            None => notes.push(format!(
                "the recording was cut short (the recorder was killed): {} complete intervals",
                self.intervals.len()
            )),
            // Exited, a duration run out and an interruption end a
            // recording whole; anything else, and every note, is said.
            Some(end) => {
                if !matches!(
                    end.reason,
                    EndReason::Exited | EndReason::Duration | EndReason::Interrupted
                ) {
                    notes.push(format!("the recording ended: {}", end.reason));
                }
                notes.extend(end.notes.iter().map(ToString::to_string));
            }
        }
        notes.push(
            "kernel_resident_pages counts kernel memory resident (slab, page tables, kernel \
             stacks), not referenced: no interface reveals references to kernel pages"
                .into(),
        );
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Backend, PhysRow, VirtRow, WriteSource};

    fn range(start: u64, end: u64) -> Select {
        Select {
            range: Some((start, end)),
            pid: None,
        }
    }

    const ALL: Select = Select {
        range: None,
        pid: None,
    };

    fn recording(scope: Scope) -> Recording {
        let c = |user, written| Counts {
            user,
            page_cache: 0,
            written,
        };
        let mut r = Recording {
            header: Some(RecordHeader {
                page_size: 4096,
                interval_ns: 100,
                block_size: 1 << 20,
                backend: Backend::Refs,
                why: String::new(),
                granularity: Granularity::Vma,
                writes: WriteSource::SoftDirty,
                frozen: true,
                scope,
                start_unix_ns: 0,
                start_monotonic_ns: 0,
                kernel: String::new(),
                notes: vec![],
                nodes: vec![],
                sample: Some(1.0),
                origin: None,
            }),
            ..Recording::default()
        };
        for seq in 0..3u64 {
            r.intervals.push(Interval {
                seq,
                start_ns: seq * 100,
                end_ns: seq * 100 + 100,
                phys: vec![PhysRow {
                    block: seq,
                    counts: c(10, 1),
                }],
                virt: vec![
                    VirtRow {
                        pid: 7,
                        start: 0x10000,
                        end: 0x20000,
                        counts: c(4, 1),
                    },
                    VirtRow {
                        pid: 7,
                        start: 0x40000,
                        end: 0x80000,
                        counts: c(6 + seq, 0),
                    },
                ],
                ..Interval::default()
            });
        }
        r
    }

    /// Notes say what the figures can't: DAMON's written pages are a lower
    /// bound, and a machine's user_pages without frames is a sum.
    #[test]
    fn notes_name_lower_bounds_and_sums() {
        let mut r = recording(Scope::Processes(vec![7]));
        let lower = |r: &Recording| r.notes().iter().any(|n| n.contains("lower bound"));
        let sum = |r: &Recording| r.notes().iter().any(|n| n.contains("sum over processes"));
        assert!(!lower(&r) && !sum(&r));
        let h = r.header.as_mut().unwrap();
        h.backend = Backend::Damon;
        h.granularity = Granularity::Region;
        assert!(lower(&r));
        r.header.as_mut().unwrap().writes = WriteSource::None;
        assert!(!lower(&r));
        let mut m = recording(Scope::System);
        assert!(!sum(&m), "frames counted once");
        for i in &mut m.intervals {
            i.phys.clear();
        }
        assert!(sum(&m));
    }

    /// How a recording ended reaches its reports: an error and every end
    /// note; a recording that ended whole adds nothing.
    #[test]
    fn notes_say_how_the_recording_ended() {
        use crate::record::EndNote;
        let mut r = recording(Scope::System);
        let before = r.notes().len();
        r.end = Some(RecordEnd {
            reason: EndReason::Duration,
            ..RecordEnd::default()
        });
        assert_eq!(r.notes().len(), before - 1, "no longer cut short");
        r.end = Some(RecordEnd {
            reason: EndReason::Error("reading /proc/1/pagemap: gone".into()),
            notes: vec![
                EndNote::LaunchedKilled,
                EndNote::Unreadable(vec![12, 40]),
                EndNote::Observed(vec![7]),
            ],
            ..RecordEnd::default()
        });
        let notes = r.notes();
        assert!(notes.contains(&"the recording ended: error: reading /proc/1/pagemap: gone".into()));
        assert!(notes.contains(&"the launched command was killed".into()));
        let unread = notes.iter().find(|n| n.contains("started while recording"));
        assert!(
            unread.is_some_and(
                |n| n.contains("2 processes could not be read") && n.contains("(pids 12 40)")
            ),
            "{notes:?}"
        );
        assert!(notes.iter().any(|n| n
            .starts_with("1 process came to be observed by another pagescope")
            && n.ends_with(
                "while recording and was left out from then on, so that this \
              recording's clears of referenced bits are not that observer's too (pids 7)"
            )));
    }

    #[test]
    fn temporal_sums_and_ranges() {
        let r = recording(Scope::Processes(vec![7]));
        let t = r.temporal(ALL).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].counts.user, 10); // physical rows win
        let t = r.temporal(range(0x40000, 0x50000)).unwrap();
        assert_eq!(t[2].counts.user, 8);
        assert_eq!(t[2].blocks, 1);
        assert_eq!(r.partial_rows(range(0x40000, 0x50000)), 3);
        assert_eq!(r.partial_rows(range(0x10000, 0x80000)), 0);
        let s = r.spatial(range(0, 0x30000)).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].intervals, s[0].counts.user), (3, 12));
        let s = r.spatial(ALL).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[1].start, 1 << 20);
    }

    #[test]
    fn heatmap_numa_hugepages() {
        let mut r = recording(Scope::Processes(vec![7]));
        let cells = r.heatmap(ALL).unwrap();
        assert_eq!(cells.len(), 3); // one physical block per interval
        assert_eq!(cells[2].start, 2 << 20);
        let cells = r.heatmap(range(0x40000, 0x50000)).unwrap();
        assert_eq!(cells.len(), 3);
        assert!(cells.iter().all(|c| c.pid == Some(7)));
        // Per VMA rows can't be placed on nodes or in 2 MiB regions.
        assert!(r.numa().is_err() && r.hugepages().is_err());
        let h = r.header.as_mut().unwrap();
        h.granularity = Granularity::Page;
        h.nodes = vec![
            crate::model::NodeRange {
                node: 0,
                start_pfn: 0,
                end_pfn: 256,
            },
            crate::model::NodeRange {
                node: 1,
                start_pfn: 256,
                end_pfn: 1024,
            },
        ];
        r.intervals[0].huge = vec![(3, 2), (512, 4)];
        let (rows, unplaced) = r.numa().unwrap();
        // Block 0 (pfn 0) on node 0, blocks 1 and 2 (pfns 256, 512) on 1.
        assert_eq!(unplaced, 0);
        assert_eq!(
            rows.iter().map(|n| (n.seq, n.node)).collect::<Vec<_>>(),
            [(0, 0), (1, 1), (2, 1)]
        );
        let (rows, hist) = r.hugepages().unwrap();
        assert_eq!((rows[0].regions, rows[0].full, rows[0].pages), (6, 4, 2054));
        assert_eq!(hist, [(3, 2), (512, 4)]);
        assert_eq!(rows[1].regions, 0);
    }

    #[test]
    fn wss_unites_windows() {
        use crate::record::PageRuns;
        let mut r = recording(Scope::Processes(vec![7]));
        assert!(r.wss(2, ALL).is_err()); // VMA rows hold no pages
        r.header.as_mut().unwrap().granularity = Granularity::Page;
        // Interval 0: pages 10-19; 1: 15-24 and, in pid 8, 10-11; 2: none.
        r.intervals[0].pages = vec![PageRuns::from_sorted(7, &(10..20).collect::<Vec<_>>())];
        r.intervals[1].pages = vec![
            PageRuns::from_sorted(7, &(15..25).collect::<Vec<_>>()),
            PageRuns::from_sorted(8, &[10, 11]),
        ];
        let w = r.wss(2, ALL).unwrap();
        let got: Vec<(u64, u64)> = w.iter().map(|x| (x.pages, x.window_pages)).collect();
        assert_eq!(got, [(10, 10), (12, 17), (0, 12)]);
        // Pages 18-21 only (bytes 18*4096 .. 22*4096).
        let w = r.wss(3, range(18 * 4096, 22 * 4096)).unwrap();
        assert_eq!(w[1].window_pages, 4); // pid 8's pages are outside
        let only8 = Select {
            range: None,
            pid: Some(8),
        };
        let w = r.wss(3, only8).unwrap();
        assert_eq!((w[0].pages, w[1].pages, w[2].window_pages), (0, 2, 2));
        let runs = PageRuns::from_sorted(1, &[3, 4, 5, 9, 11, 12]);
        assert_eq!(runs.runs, [(3, 3), (3, 1), (1, 2)]);
        assert_eq!(
            runs.absolute().collect::<Vec<_>>(),
            [(3, 3), (9, 1), (11, 2)]
        );
    }

    #[test]
    fn huge_histogram_counts_pages_per_region() {
        let regions = vec![5, 1, 5, 5, 2, 1];
        assert_eq!(
            crate::record::huge_histogram(regions),
            [(1, 1), (2, 1), (3, 1)]
        );
    }

    #[test]
    fn selection_needs_process_rows() {
        // A machine-wide recording with physical rows only.
        let mut r = recording(Scope::System);
        let virt: Vec<Vec<VirtRow>> = r
            .intervals
            .iter_mut()
            .map(|i| std::mem::take(&mut i.virt))
            .collect();
        assert!(r.temporal(range(0, 1)).is_err());
        assert!(r.processes(ALL).is_err());
        assert!(r.temporal(ALL).is_ok());
        // With rows per process.
        for (i, v) in r.intervals.iter_mut().zip(virt) {
            i.virt = v;
        }
        assert!(r.temporal(range(0, 1)).is_ok());
        assert!(r.processes(ALL).is_ok());
    }

    #[test]
    fn per_process_totals_and_selection() {
        let mut r = recording(Scope::System);
        r.processes.push(ProcessInfo {
            pid: 9,
            command: vec!["nine".into()],
            first_seq: 1,
        });
        // pid 9 references 20 pages in interval 1, 5 in interval 2.
        for (seq, user) in [(1, 20), (2, 5)] {
            r.intervals[seq].virt.push(VirtRow {
                pid: 9,
                start: 0x40000,
                end: 0x50000,
                counts: Counts {
                    user,
                    page_cache: 0,
                    written: user,
                },
            });
        }
        let p = r.processes(ALL).unwrap();
        // pid 7: 10 + 11 + 12 (4 + 6, 4 + 7, 4 + 8), peak 12.
        let got: Vec<(u32, u64, u64, u64, u64)> = p
            .iter()
            .map(|p| (p.pid, p.intervals, p.counts.user, p.counts.written, p.peak))
            .collect();
        assert_eq!(got, [(7, 3, 33, 3, 12), (9, 2, 25, 25, 20)]);
        assert_eq!(p[1].command, ["nine"]);
        assert!(p[0].command.is_empty());
        let nine = Select {
            range: None,
            pid: Some(9),
        };
        let t = r.temporal(nine).unwrap();
        let users: Vec<u64> = t.iter().map(|t| t.counts.user).collect();
        assert_eq!(users, [0, 20, 5]);
        // Both: pid 7's rows over 0x40000.. only.
        let both = Select {
            range: Some((0x40000, 0x50000)),
            pid: Some(7),
        };
        assert_eq!(r.processes(both).unwrap()[0].counts.user, 21);
        assert_eq!(r.spatial(nine).unwrap().len(), 1);
        assert_eq!(r.heatmap(nine).unwrap().len(), 2);
    }
}
