//! Recordings in the recording format: the writer used by `pagescope
//! record` and the reader behind its analyses.
//!
//! One frame per interval, written when the interval ends, so a recorder
//! killed at any moment leaves every finished interval readable.

use super::frame::{decode, open_kind, Completeness, Kind, RecordFile};
use super::frame_type;
use crate::record::{Counts, Interval, ProcessInfo, RecordEnd, RecordHeader};
use crate::{Error, Result};
use std::io::{Read, Write};
use std::path::Path;

/// Writes a recording as frames.
#[derive(Debug)]
pub struct RecordWriter<W: Write> {
    file: RecordFile<W>,
}

impl<W: Write> RecordWriter<W> {
    /// Starts a recording with its header.
    pub fn new(out: W, path: &Path, header: &RecordHeader) -> Result<RecordWriter<W>> {
        let mut file = RecordFile::new(out, path, Kind::Record)?;
        file.put(frame_type::RECORD_HEADER, header)?;
        Ok(RecordWriter { file })
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.file.frames.bytes
    }

    /// A process seen for the first time.
    pub fn process(&mut self, p: &ProcessInfo) -> Result<()> {
        self.file.put(frame_type::PROCESS_INFO, p)
    }

    /// A finished interval.
    pub fn interval(&mut self, i: &Interval) -> Result<()> {
        self.file.put(frame_type::INTERVAL, i)
    }

    /// The end record.
    pub fn finish(&mut self, end: &RecordEnd) -> Result<()> {
        self.file.put(frame_type::END, end)
    }
}

/// Receives a recording as it is read.
pub trait RecordVisitor {
    /// The header, first.
    fn header(&mut self, header: &RecordHeader) -> Result<()>;
    /// A process.
    fn process(&mut self, _p: &ProcessInfo) -> Result<()> {
        Ok(())
    }
    /// An interval, in order.
    fn interval(&mut self, i: &Interval) -> Result<()>;
    /// The end record of a complete recording.
    fn end(&mut self, _e: &RecordEnd) -> Result<()> {
        Ok(())
    }
}

/// Replays a recording into `visitor`. A file cut short (a killed
/// recorder) is replayed up to its last complete interval.
pub fn read_record<R: Read>(
    input: R,
    path: &Path,
    visitor: &mut dyn RecordVisitor,
) -> Result<Completeness> {
    let mut reader = open_kind(input, path, Kind::Record, "a recording")?;
    let mut header: Option<RecordHeader> = None;
    loop {
        let frame = match reader.next_or_end(header.is_some())? {
            Ok(f) => f,
            Err(cut) => return Ok(cut),
        };
        let at = frame.offset;
        let bad = |why: String| Error::corrupt(path, format!("frame at byte {at}: {why}"));
        match (frame.frame_type, &header) {
            (frame_type::RECORD_HEADER, None) => {
                let h: RecordHeader = decode(path, at, "record header", &frame.payload)?;
                if h.page_size == 0 || !h.page_size.is_power_of_two() {
                    return Err(bad(format!("page size {} is impossible", h.page_size)));
                }
                if h.block_size < h.page_size || !h.block_size.is_power_of_two() {
                    return Err(bad(format!("block size {} is impossible", h.block_size)));
                }
                visitor.header(&h)?;
                header = Some(h);
            }
            (_, None) => {
                return Err(Error::corrupt(path, "does not start with a record header"));
            }
            (frame_type::RECORD_HEADER, Some(_)) => {
                return Err(bad("second record header".into()));
            }
            (frame_type::PROCESS_INFO, Some(_)) => {
                visitor.process(&decode(path, at, "process", &frame.payload)?)?
            }
            (frame_type::INTERVAL, Some(h)) => {
                let i: Interval = decode(path, at, "interval", &frame.payload)?;
                check_interval(&i, h).map_err(bad)?;
                visitor.interval(&i)?;
            }
            (frame_type::END, Some(_)) => {
                visitor.end(&decode(path, at, "end", &frame.payload)?)?;
                return Ok(Completeness::Complete);
            }
            _ => {} // A newer frame type: skip it.
        }
    }
}

/// Refuses counts that can't be: more pages in a row than it holds, more
/// written than referenced pages, an interval that ends before it starts.
/// The `fault` backend's counts may be a sample's estimates, scaled, which
/// can exceed a row's pages.
fn check_interval(i: &Interval, h: &RecordHeader) -> std::result::Result<(), String> {
    if i.end_ns < i.start_ns {
        return Err(format!("interval {} ends before it starts", i.seq));
    }
    // Whether `counts` are more than `pages` can hold (never said of a
    // sample's estimates).
    let scaled = h.backend == crate::record::Backend::Fault;
    let too_many =
        |c: &Counts, pages: u64| (!scaled && c.referenced() > pages) || c.written > c.referenced();
    for r in &i.phys {
        let c = &r.counts;
        if r.block.checked_mul(h.block_size).is_none() {
            return Err(format!(
                "interval {}: block {} is past any address",
                i.seq, r.block
            ));
        }
        if too_many(c, h.block_size / h.page_size) {
            return Err(format!(
                "interval {}: block {} counts {c:?}: more pages than it holds, or more \
                 written than referenced",
                i.seq, r.block
            ));
        }
    }
    for r in &i.virt {
        let c = &r.counts;
        let pages = r.end.saturating_sub(r.start) / h.page_size;
        if r.end <= r.start || too_many(c, pages) {
            return Err(format!(
                "interval {}: range {:#x}-{:#x} counts {c:?}: more pages than it holds, or \
                 more written than referenced",
                i.seq, r.start, r.end
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Backend, Counts, Granularity, PhysRow, Scope, VirtRow, WriteSource};

    fn header() -> RecordHeader {
        RecordHeader {
            page_size: 4096,
            interval_ns: 100_000_000,
            block_size: 64 << 20,
            backend: Backend::Refs,
            why: "asked for".into(),
            granularity: Granularity::Vma,
            writes: WriteSource::None,
            frozen: true,
            scope: Scope::Processes(vec![1]),
            start_unix_ns: 1,
            start_monotonic_ns: 2,
            kernel: "6.18".into(),
            notes: vec![],
            nodes: vec![],
        }
    }

    fn interval(seq: u64) -> Interval {
        let c = Counts {
            user: seq * 10,
            page_cache: 1,
            written: seq,
        };
        Interval {
            seq,
            start_ns: seq * 100,
            end_ns: seq * 100 + 100,
            phys: vec![PhysRow {
                block: seq,
                counts: c,
            }],
            virt: vec![VirtRow {
                pid: 1,
                start: 0x1000,
                end: 0x1000 + 4096 * 1000,
                counts: c,
            }],
            ..Interval::default()
        }
    }

    type Collect = crate::analysis::temporal::Recording;

    fn write(n: u64) -> (Vec<u8>, Vec<Interval>) {
        let mut w = RecordWriter::new(Vec::new(), Path::new("r"), &header()).unwrap();
        let all: Vec<Interval> = (0..n).map(interval).collect();
        for i in &all {
            w.interval(i).unwrap();
        }
        w.finish(&RecordEnd {
            intervals: n,
            reason: "exited".into(),
            overruns: 0,
        })
        .unwrap();
        (w.file.frames.into_inner(), all)
    }

    #[test]
    fn round_trip_and_every_cut() {
        let (bytes, all) = write(20);
        let mut c = Collect::default();
        let done = read_record(&bytes[..], Path::new("r"), &mut c).unwrap();
        assert_eq!(done, Completeness::Complete);
        assert_eq!(c.intervals, all);
        assert_eq!(c.end.unwrap().intervals, 20);
        let header_end = 32 + postcard::to_stdvec(&header()).unwrap().len();
        for cut in header_end..bytes.len() {
            let mut c = Collect::default();
            let done = read_record(&bytes[..cut], Path::new("r"), &mut c).unwrap();
            assert!(matches!(done, Completeness::CutShort { .. }));
            assert_eq!(c.intervals[..], all[..c.intervals.len()]);
        }
        for cut in 0..header_end {
            assert!(read_record(&bytes[..cut], Path::new("r"), &mut Collect::default()).is_err());
        }
    }

    #[test]
    fn impossible_counts_are_refused() {
        let mut i = interval(1);
        i.phys[0].counts.user = (64 << 20) / 4096 + 1;
        assert!(check_interval(&i, &header()).is_err());
        // A sample's estimate may exceed the block; never more written
        // than referenced.
        let mut sampled = header();
        sampled.backend = Backend::Fault;
        assert!(check_interval(&i, &sampled).is_ok());
        i.phys[0].counts.written = i.phys[0].counts.referenced() + 1;
        assert!(check_interval(&i, &sampled).is_err());
        let mut i = interval(1);
        i.virt[0].counts.written = 1000;
        assert!(check_interval(&i, &header()).is_err());
        let mut i = interval(1);
        i.end_ns = 0;
        assert!(check_interval(&i, &header()).is_err());
        assert!(check_interval(&interval(3), &header()).is_ok());
    }
}
