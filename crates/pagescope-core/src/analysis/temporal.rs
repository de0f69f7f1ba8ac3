//! Analyses of a recording (`pagescope record`): references per interval
//! (`temporal`, the memref paper's figures 3-6 and 13-14) and how often
//! each block was referenced over the run (`spatial`, figures 15-22).

use crate::format::RecordVisitor;
use crate::record::{Counts, Granularity, Interval, ProcessInfo, RecordEnd, RecordHeader, Scope};
use crate::{Error, Result};
use std::collections::BTreeMap;

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

impl Recording {
    /// The header; a file without one never gets this far.
    pub fn header(&self) -> &RecordHeader {
        self.header.as_ref().expect("read_record checks the header")
    }

    /// Checks that `range` can be applied: it needs per-process rows.
    fn check_range(&self, range: Option<Range>) -> Result<()> {
        if range.is_some() && self.header().scope == Scope::System {
            return Err(Error::Unsupported {
                what: "--range on a system-wide recording".into(),
                needs: "record processes (--pid, or a command) to have virtual addresses".into(),
            });
        }
        Ok(())
    }

    /// Per-interval figures, restricted to `range` of the recorded
    /// processes when given.
    pub fn temporal(&self, range: Option<Range>) -> Result<Vec<TemporalRow>> {
        self.check_range(range)?;
        Ok(self
            .intervals
            .iter()
            .map(|i| {
                let (counts, blocks) = match range {
                    None => (
                        i.total(),
                        if i.phys.is_empty() {
                            i.virt.len()
                        } else {
                            i.phys.len()
                        } as u64,
                    ),
                    Some((s, e)) => {
                        let mut c = Counts::default();
                        let mut n = 0;
                        for r in i.virt.iter().filter(|r| r.start < e && r.end > s) {
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

    /// Rows of the recording that overlap `range` only in part (counted
    /// whole, since a row can't be split).
    pub fn partial_rows(&self, range: Range) -> u64 {
        let (s, e) = range;
        self.intervals
            .iter()
            .flat_map(|i| &i.virt)
            .filter(|r| r.start < e && r.end > s && (r.start < s || r.end > e))
            .count() as u64
    }

    /// Per-block figures over the run: physical blocks when the backend
    /// knew frames, else the virtual rows of each process.
    pub fn spatial(&self, range: Option<Range>) -> Result<Vec<SpatialRow>> {
        self.check_range(range)?;
        let h = self.header();
        let mut by: BTreeMap<(Option<u32>, u64, u64), (u64, Counts)> = BTreeMap::new();
        for i in &self.intervals {
            if range.is_none() && !i.phys.is_empty() {
                for r in &i.phys {
                    let start = r.block * h.block_size;
                    let e = by.entry((None, start, start + h.block_size)).or_default();
                    e.0 += 1;
                    e.1.add(&r.counts);
                }
                continue;
            }
            for r in &i.virt {
                if let Some((s, e)) = range {
                    if r.start >= e || r.end <= s {
                        continue;
                    }
                }
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
        if self.end.is_none() {
            notes.push(format!(
                "the recording was cut short (the recorder was killed): {} complete intervals",
                self.intervals.len()
            ));
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

    #[test]
    fn temporal_sums_and_ranges() {
        let r = recording(Scope::Processes(vec![7]));
        let t = r.temporal(None).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].counts.user, 10); // physical rows win
        let t = r.temporal(Some((0x40000, 0x50000))).unwrap();
        assert_eq!(t[2].counts.user, 8);
        assert_eq!(t[2].blocks, 1);
        assert_eq!(r.partial_rows((0x40000, 0x50000)), 3);
        assert_eq!(r.partial_rows((0x10000, 0x80000)), 0);
        let s = r.spatial(Some((0, 0x30000))).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].intervals, s[0].counts.user), (3, 12));
        let s = r.spatial(None).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[1].start, 1 << 20);
    }

    #[test]
    fn range_needs_processes() {
        let r = recording(Scope::System);
        assert!(r.temporal(Some((0, 1))).is_err());
        assert!(r.temporal(None).is_ok());
    }
}
