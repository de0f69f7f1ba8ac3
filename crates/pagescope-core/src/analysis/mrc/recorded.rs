//! `analyze REC mrc`: an LRU miss-ratio curve estimated from a recording.
//!
//! A trace has every reference; a recording has, per interval, the set of
//! pages each process referenced (the page-exact backends, `fault` and
//! `idle`). The estimate treats each referenced page of an interval as
//! one reference, the pages of an interval in address order (processes
//! in pid order), and gives that stream's exact LRU stack distances
//! ([`StackDistance`]): reuse is measured in intervals, and within an
//! interval in the order a scan would take. What it cannot see: how often
//! a page was referenced inside one interval (a trace counts each of those
//! references that missed the tracer's pool), and the order of the
//! references inside an interval. So it is an estimate, and the report
//! says so with the error measured on the calibration workloads
//! ([`CALIBRATION`]).
//!
//! A recording of a sample of the pages (`record --backend fault
//! --sample`, the same pages at every interval) is read as SHARDS reads
//! its sample: distances scaled by the inverse of the rate.

use super::{lru_threshold, sizes, StackDistance};
use crate::format::RecordVisitor;
use crate::record::{Granularity, Interval, ProcessInfo, RecordEnd, RecordHeader};
use crate::{Error, Result};
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// The error of the estimate measured on the calibration workloads of
/// `ONLY=recorded bench/mrc.sh` (recordings by the `fault` backend at
/// 10 ms intervals): the mean absolute error of its LRU miss ratio against
/// the exact curve of a trace of the same program, over the sizes at and
/// above the tracer's pool (docs/performance.md, "A curve from a
/// recording"). A test holds the estimate of pagetest's scans to `least`.
pub const CALIBRATION: Calibration = Calibration {
    least: (0.01, "pagetest's scans"),
    most: (
        0.36,
        "xz -T2, whose working set is just above the tracer's 8 MiB pool",
    ),
};

/// See [`CALIBRATION`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    /// The smallest error measured (rounded up), and on what.
    pub least: (f64, &'static str),
    /// The largest error measured (rounded up), and on what.
    pub most: (f64, &'static str),
}

/// The estimate, fed by [`crate::format::read_record`].
#[derive(Debug, Default)]
pub struct RecordedMrc {
    /// The recording's header.
    pub header: Option<RecordHeader>,
    /// The end record, absent when the recorder was killed.
    pub end: Option<RecordEnd>,
    pid: Option<u32>,
    /// The processes the recording holds (named, or with pages).
    pids: BTreeSet<u32>,
    ids: FxHashMap<(u32, u64), u32>,
    stack: StackDistance,
    intervals: u64,
    /// Intervals in which the selection referenced no page.
    empty: u64,
    /// Intervals that lasted more than twice the nominal interval.
    long: u64,
    page_ids: Vec<u32>,
}

impl RecordedMrc {
    /// An empty estimate of every recorded process's references.
    pub fn new() -> RecordedMrc {
        RecordedMrc::default()
    }

    /// An empty estimate of the references of process `pid` alone.
    pub fn of_process(pid: u32) -> RecordedMrc {
        RecordedMrc {
            pid: Some(pid),
            ..RecordedMrc::default()
        }
    }

    /// The processes the recording holds: those it names, and those
    /// with pages it never named.
    pub fn pids(&self) -> &BTreeSet<u32> {
        &self.pids
    }

    /// References counted: one per page per interval that referenced it.
    pub fn references(&self) -> u64 {
        self.stack.references
    }

    /// Distinct pages referenced (in the sample, for a sampled recording).
    pub fn distinct_pages(&self) -> u64 {
        self.stack.cold
    }

    /// Intervals read, and of them those in which no page was referenced.
    pub fn intervals(&self) -> (u64, u64) {
        (self.intervals, self.empty)
    }

    /// Intervals that lasted more than twice the interval asked for (the
    /// recorder fell behind): reuse inside them is not seen.
    pub fn long_intervals(&self) -> u64 {
        self.long
    }

    /// The fraction of pages the recording watched (1: all).
    pub fn rate(&self) -> f64 {
        self.header
            .as_ref()
            .and_then(|h| h.sample)
            .unwrap_or(1.0)
            .clamp(f64::MIN_POSITIVE, 1.0)
    }

    /// The memory sizes reported (as for a trace: powers of two and the
    /// points halfway between, up to twice the distinct pages), in pages
    /// of the whole program (scaled up from a sample).
    pub fn sizes(&self) -> Vec<u64> {
        let pages = (self.distinct_pages() as f64 / self.rate()).round() as u64;
        sizes(pages)
    }

    /// The estimated LRU miss ratio at each of `sizes` (pages); `None`
    /// where there was no reference.
    pub fn lru_curve(&self, sizes: &[u64]) -> Vec<Option<f64>> {
        let refs = self.references();
        sizes
            .iter()
            .map(|&m| {
                (refs > 0).then(|| {
                    let misses = self.stack.lru_misses(lru_threshold(m, self.rate()));
                    misses as f64 / refs as f64
                })
            })
            .collect()
    }
}

/// An estimate set beside the exact LRU curve of a trace of the same
/// program (`analyze REC mrc --against TRACE`), at the sizes where the
/// trace knows its curve: at and above the tracer's pool.
///
/// (Putting the estimate in the trace's terms, since a trace holds only
/// the references that missed the tracer's FIFO pool: its LRU misses at
/// `m` over the misses of a FIFO memory of the pool's size simulated on
/// the estimated stream, measured worse on four of the six calibration
/// workloads: docs/performance.md.)
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The trace's exact LRU miss ratio at each size of the estimate;
    /// `None` below the tracer's pool, where the trace does not know.
    pub exact: Vec<Option<f64>>,
    /// The mean absolute difference of the two curves over the sizes
    /// where both are known; `None` if there is none.
    pub mae: Option<f64>,
    /// The largest absolute difference there.
    pub largest: Option<f64>,
    /// The tracer's pool, in pages.
    pub pool_pages: u64,
}

impl Comparison {
    /// The estimate `recorded` at `sizes` against the exact curve of
    /// `trace`.
    pub fn new(sizes: &[u64], recorded: &RecordedMrc, trace: &super::Mrc) -> Comparison {
        let pool_pages = trace.maps.header.as_ref().map_or(0, |h| h.pool_pages);
        let known = trace.references() > 0;
        let exact: Vec<Option<f64>> = sizes
            .iter()
            .zip(trace.lru_curve(sizes))
            .map(|(&m, r)| (known && m >= pool_pages).then_some(r))
            .collect();
        let diffs: Vec<f64> = exact
            .iter()
            .zip(recorded.lru_curve(sizes))
            .filter_map(|(a, b)| Some((a.as_ref()? - b?).abs()))
            .collect();
        let mae = (!diffs.is_empty()).then(|| diffs.iter().sum::<f64>() / diffs.len() as f64);
        let largest = diffs.iter().copied().reduce(f64::max);
        Comparison {
            exact,
            mae,
            largest,
            pool_pages,
        }
    }
}

impl RecordVisitor for RecordedMrc {
    fn header(&mut self, h: &RecordHeader) -> Result<()> {
        if h.granularity != Granularity::Page {
            return Err(Error::Unsupported {
                what: "a miss-ratio curve of this recording".into(),
                needs: format!(
                    "the pages each interval referenced, which the {} backend does not record \
                     (it places references by {}); record with --backend fault (or idle, where \
                     the kernel has idle page tracking)",
                    h.backend.name(),
                    match h.granularity {
                        Granularity::Vma => "VMA",
                        _ => "region",
                    }
                ),
            });
        }
        self.header = Some(h.clone());
        Ok(())
    }

    fn process(&mut self, p: &ProcessInfo) -> Result<()> {
        self.pids.insert(p.pid);
        Ok(())
    }

    fn interval(&mut self, i: &Interval) -> Result<()> {
        self.intervals += 1;
        let nominal = self.header.as_ref().map_or(0, |h| h.interval_ns);
        if nominal > 0 && i.end_ns.saturating_sub(i.start_ns) > 2 * nominal {
            self.long += 1;
        }
        self.page_ids.clear();
        self.pids.extend(i.pages.iter().map(|p| p.pid));
        for p in &i.pages {
            if self.pid.is_some_and(|want| want != p.pid) {
                continue;
            }
            let mut end = 0u64;
            for &(gap, len) in &p.runs {
                let first = end + gap;
                for page in first..first + len {
                    let next = self.ids.len() as u32;
                    self.page_ids
                        .push(*self.ids.entry((p.pid, page)).or_insert(next));
                }
                end = first + len;
            }
        }
        if self.page_ids.is_empty() {
            self.empty += 1;
        }
        for &id in &self.page_ids {
            self.stack.push(id);
        }
        Ok(())
    }

    fn end(&mut self, e: &RecordEnd) -> Result<()> {
        self.end = Some(e.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Backend, PageRuns, Scope, WriteSource};

    fn header(granularity: Granularity) -> RecordHeader {
        RecordHeader {
            page_size: 4096,
            interval_ns: 10_000_000,
            block_size: 4096,
            backend: Backend::Fault,
            why: String::new(),
            granularity,
            writes: WriteSource::None,
            frozen: false,
            scope: Scope::Processes(vec![7]),
            start_unix_ns: 0,
            start_monotonic_ns: 0,
            kernel: String::new(),
            notes: Vec::new(),
            nodes: Vec::new(),
            sample: None,
            origin: None,
        }
    }

    fn interval(seq: u64, pages: &[u64]) -> Interval {
        Interval {
            seq,
            pages: vec![PageRuns::from_sorted(7, pages)],
            ..Interval::default()
        }
    }

    /// A scan of `n` pages, one per interval, `passes` times: every page's
    /// reuse distance is `n`, so the curve is 1 below `n` pages and the
    /// cold share (1 / passes) from `n` on.
    #[test]
    fn a_scan_misses_below_its_size_and_only_cold_from_it() {
        let mut m = RecordedMrc::new();
        m.header(&header(Granularity::Page)).unwrap();
        let pages: Vec<u64> = (100..164).collect();
        for pass in 0..4 {
            for (i, chunk) in pages.chunks(8).enumerate() {
                m.interval(&interval(pass * 8 + i as u64, chunk)).unwrap();
            }
        }
        assert_eq!(m.references(), 256);
        assert_eq!(m.distinct_pages(), 64);
        let curve = m.lru_curve(&[1, 63, 64, 128]);
        assert_eq!(curve, [Some(1.0), Some(1.0), Some(0.25), Some(0.25)]);
    }

    /// A page referenced in every interval hits in a memory of the pages
    /// referenced per interval, whatever happens inside the interval.
    #[test]
    fn pages_of_each_interval_count_once() {
        let mut m = RecordedMrc::new();
        m.header(&header(Granularity::Page)).unwrap();
        for seq in 0..10 {
            m.interval(&interval(seq, &[1, 2, 3])).unwrap();
        }
        assert_eq!(m.references(), 30);
        assert_eq!(m.lru_curve(&[2, 3]), [Some(1.0), Some(0.1)]);
    }

    #[test]
    fn intervals_the_recorder_fell_behind_in_are_counted() {
        let mut m = RecordedMrc::new();
        m.header(&header(Granularity::Page)).unwrap();
        for (seq, (start, end)) in [(0, 10), (10, 31), (31, 41)].into_iter().enumerate() {
            let mut i = interval(seq as u64, &[1]);
            (i.start_ns, i.end_ns) = (start * 1_000_000, end * 1_000_000);
            m.interval(&i).unwrap();
        }
        assert_eq!(m.long_intervals(), 1);
    }

    #[test]
    fn other_processes_are_left_out_with_a_pid() {
        let mut m = RecordedMrc::of_process(8);
        m.header(&header(Granularity::Page)).unwrap();
        m.interval(&interval(0, &[1, 2])).unwrap();
        assert_eq!(m.references(), 0);
        assert_eq!(m.intervals(), (1, 1));
        assert_eq!(m.lru_curve(&[1]), [None]);
    }

    #[test]
    fn a_recording_by_vma_is_refused_with_what_to_do() {
        let e = RecordedMrc::new()
            .header(&header(Granularity::Vma))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--backend fault"), "{e}");
    }

    /// A sample of every other page of a scan: distances in the sample are
    /// half the whole stream's, and the sizes are scaled back up.
    #[test]
    fn a_sampled_recording_scales_distances_by_its_rate() {
        let mut m = RecordedMrc::new();
        let mut h = header(Granularity::Page);
        h.sample = Some(0.5);
        m.header(&h).unwrap();
        let kept: Vec<u64> = (0..128).step_by(2).collect();
        for pass in 0..4 {
            m.interval(&interval(pass, &kept)).unwrap();
        }
        assert_eq!(m.distinct_pages(), 64);
        assert_eq!(*m.sizes().last().unwrap(), 256);
        let curve = m.lru_curve(&[100, 128, 200]);
        assert_eq!(curve, [Some(1.0), Some(0.25), Some(0.25)]);
    }
}
