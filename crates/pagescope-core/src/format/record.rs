//! Recordings in the recording format: the writer used by `pagescope
//! record` and the reader behind its analyses.
//!
//! One frame per interval, written when the interval ends, so a recorder
//! killed at any moment leaves every finished interval readable.

use super::frame::{decode, open_kind, Completeness, Kind, RecordFile};
use super::frame_type;
use super::v1::RecordEndV1;
use crate::record::{Counts, Interval, ProcessInfo, RecordEnd, RecordHeader, Sampling};
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
        if let Some(fraction) = header.sample {
            file.put(frame_type::RECORD_SAMPLING, &Sampling { fraction })?;
        }
        // After the sampling frame: readers older than the origin frame
        // want that one right after the header.
        if let Some(origin) = &header.origin {
            file.put(frame_type::ORIGIN, origin)?;
        }
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
    let version = reader.version();
    let mut header: Option<RecordHeader> = None;
    // The header goes to the visitor once its sampling frame, if any, is
    // read: at the first frame of another type, or at the end.
    let mut announced = false;
    loop {
        let frame = reader.next_or_end(header.is_some())?;
        let other = frame.as_ref().map_or(true, |f| {
            f.frame_type != frame_type::RECORD_SAMPLING && f.frame_type != frame_type::ORIGIN
        });
        if let (Some(h), false, true) = (&header, announced, other) {
            visitor.header(h)?;
            announced = true;
        }
        let frame = match frame {
            Ok(f) => f,
            Err(cut) => return Ok(cut),
        };
        let at = frame.offset;
        let bad = |why: String| Error::corrupt(path, format!("frame at byte {at}: {why}"));
        match (frame.frame_type, &mut header) {
            (frame_type::RECORD_HEADER, None) => {
                let h: RecordHeader = decode(path, at, "record header", &frame.payload)?;
                if h.page_size == 0 || !h.page_size.is_power_of_two() {
                    return Err(bad(format!("page size {} is impossible", h.page_size)));
                }
                if h.block_size < h.page_size || !h.block_size.is_power_of_two() {
                    return Err(bad(format!("block size {} is impossible", h.block_size)));
                }
                header = Some(h);
            }
            (frame_type::RECORD_SAMPLING, Some(h))
                if !announced && h.sample.is_none() && h.origin.is_none() =>
            {
                let Sampling { fraction } = decode(path, at, "sampling", &frame.payload)?;
                if !(fraction > 0.0 && fraction <= 1.0) {
                    return Err(bad(format!("sampled fraction {fraction} is impossible")));
                }
                h.sample = Some(fraction);
            }
            (frame_type::RECORD_SAMPLING, Some(_)) => {
                return Err(bad("sampling frame not right after the header".into()));
            }
            (frame_type::ORIGIN, Some(h)) if !announced && h.origin.is_none() => {
                h.origin = Some(decode(path, at, "origin", &frame.payload)?);
            }
            (frame_type::ORIGIN, Some(_)) => {
                return Err(bad("origin frame not right after the header".into()));
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
                let end: RecordEnd = match version {
                    1 => decode::<RecordEndV1>(path, at, "end", &frame.payload)?.upgrade(),
                    _ => decode(path, at, "end", &frame.payload)?,
                };
                visitor.end(&end)?;
                return Ok(Completeness::Complete);
            }
            _ => {} // A newer frame type: skip it.
        }
    }
}

/// Refuses counts that can't be: more pages in a row than it holds, more
/// written than referenced pages, an interval that ends before it starts.
/// The `fault` backend's counts may be a sample's estimates, scaled, which
/// can exceed a row's pages: so may those of a recording that does not
/// say it watched every page (made before the sampling frame).
fn check_interval(i: &Interval, h: &RecordHeader) -> std::result::Result<(), String> {
    if i.end_ns < i.start_ns {
        return Err(format!("interval {} ends before it starts", i.seq));
    }
    // Whether `counts` are more than `pages` can hold (never said of a
    // sample's estimates).
    let scaled = h.backend == crate::record::Backend::Fault && h.sample != Some(1.0);
    let too_many =
        |c: &Counts, pages: u64| (!scaled && c.referenced() > pages) || c.written > c.referenced();
    for r in &i.phys {
        let c = &r.counts;
        if r.block
            .checked_add(1)
            .and_then(|b| b.checked_mul(h.block_size))
            .is_none()
        {
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
    // Page runs: each at least a page, the next one after a gap, none
    // past the address space.
    let last_page = u64::MAX / h.page_size;
    for p in &i.pages {
        let mut end = 0u64;
        for (k, &(gap, len)) in p.runs.iter().enumerate() {
            let start = end.checked_add(gap);
            end = match start.and_then(|s| s.checked_add(len)) {
                Some(e) if len > 0 && (gap > 0 || k == 0) && e <= last_page + 1 => e,
                _ => {
                    return Err(format!(
                        "interval {}: pid {}: page run {k} (gap {gap}, {len} pages) is empty, \
                         touches the one before, or passes the address space",
                        i.seq, p.pid
                    ))
                }
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{
        Backend, Counts, Granularity, PageRuns, PhysRow, Scope, VirtRow, WriteSource,
    };

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
            sample: None,
            origin: None,
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
        write_with(n, &header())
    }

    fn write_with(n: u64, header: &RecordHeader) -> (Vec<u8>, Vec<Interval>) {
        let mut w = RecordWriter::new(Vec::new(), Path::new("r"), header).unwrap();
        let all: Vec<Interval> = (0..n).map(interval).collect();
        for i in &all {
            w.interval(i).unwrap();
        }
        w.finish(&RecordEnd {
            intervals: n,
            reason: crate::record::EndReason::Exited,
            notes: vec![],
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

    /// The sampled fraction travels in its own frame after the header;
    /// a recording without one (made before it) reads as `None`, and a
    /// reader that does not know the frame skips it.
    #[test]
    fn the_sample_comes_back_with_the_header() {
        let mut h = header();
        h.backend = Backend::Fault;
        h.sample = Some(0.25);
        let (bytes, all) = write_with(3, &h);
        let mut c = Collect::default();
        read_record(&bytes[..], Path::new("r"), &mut c).unwrap();
        assert_eq!(c.header().sample, Some(0.25));
        assert_eq!(c.intervals, all);
        assert!(c
            .notes()
            .iter()
            .any(|n| n.contains("random 25% of the pages")));
        for (fraction, says) in [(0.1, "random 10% "), (0.001, "random 0.1% ")] {
            h.sample = Some(fraction);
            let (bytes, _) = write_with(1, &h);
            let mut c = Collect::default();
            read_record(&bytes[..], Path::new("r"), &mut c).unwrap();
            assert!(
                c.notes().iter().any(|n| n.contains(says)),
                "{:?}",
                c.notes()
            );
        }
        h.sample = Some(0.25);
        // Cut right after the sampling frame: the header still arrives,
        // with its sample.
        let end = 16 + 16 + postcard::to_stdvec(&h).unwrap().len() + 16;
        let end = end
            + postcard::to_stdvec(&Sampling { fraction: 0.25 })
                .unwrap()
                .len();
        let mut c = Collect::default();
        let done = read_record(&bytes[..end], Path::new("r"), &mut c).unwrap();
        assert!(matches!(done, Completeness::CutShort { .. }), "{done:?}");
        assert_eq!(c.header().sample, Some(0.25));
        // No sampling frame: unknown.
        let (bytes, _) = write(1);
        let mut c = Collect::default();
        read_record(&bytes[..], Path::new("r"), &mut c).unwrap();
        assert_eq!(c.header().sample, None);
        // An impossible fraction is refused.
        h.sample = Some(0.0);
        let (bytes, _) = write_with(1, &h);
        let e = read_record(&bytes[..], Path::new("r"), &mut Collect::default()).unwrap_err();
        assert!(e.to_string().contains("sampled fraction 0"), "{e}");
    }

    /// The origin travels in its own frame after the sampling frame (where
    /// readers older than it want the sampling frame); without one (a
    /// file made before it) it reads as `None`, and one anywhere else is
    /// refused.
    #[test]
    fn the_origin_comes_back_with_the_header() {
        let mut h = header();
        h.backend = Backend::Fault;
        h.sample = Some(0.5);
        let origin = crate::model::Origin {
            host: "db-7".into(),
            boot_id: Some("0f3c".into()),
        };
        h.origin = Some(origin.clone());
        let (bytes, all) = write_with(2, &h);
        let mut c = Collect::default();
        read_record(&bytes[..], Path::new("r"), &mut c).unwrap();
        assert_eq!(c.header().origin.as_ref(), Some(&origin));
        assert_eq!(c.header().sample, Some(0.5));
        assert_eq!(c.intervals, all);
        // Cut right after the origin frame: the header still arrives.
        let frames = [
            postcard::to_stdvec(&h).unwrap().len(),
            postcard::to_stdvec(&Sampling { fraction: 0.5 })
                .unwrap()
                .len(),
            postcard::to_stdvec(&origin).unwrap().len(),
        ];
        let end = 16 + frames.iter().map(|n| 16 + n).sum::<usize>();
        let mut c = Collect::default();
        let done = read_record(&bytes[..end], Path::new("r"), &mut c).unwrap();
        assert!(matches!(done, Completeness::CutShort { .. }), "{done:?}");
        assert_eq!(c.header().origin.as_ref(), Some(&origin));
        // An origin after an interval is refused.
        let mut w = RecordWriter::new(Vec::new(), Path::new("r"), &header()).unwrap();
        w.interval(&interval(0)).unwrap();
        w.file.put(frame_type::ORIGIN, &origin).unwrap();
        let bytes = w.file.frames.into_inner();
        let e = read_record(&bytes[..], Path::new("r"), &mut Collect::default()).unwrap_err();
        assert!(
            e.to_string().contains("origin frame not right after"),
            "{e}"
        );
    }

    /// The end's reason and notes come back typed, and read as version 1
    /// wrote them.
    #[test]
    fn the_end_comes_back() {
        use crate::record::{EndNote, EndReason};
        let end = RecordEnd {
            intervals: 0,
            reason: EndReason::Error("ptrace: gone".into()),
            notes: vec![EndNote::LaunchedKilled, EndNote::Unreadable(vec![9])],
            overruns: 3,
        };
        let mut w = RecordWriter::new(Vec::new(), Path::new("r"), &header()).unwrap();
        w.finish(&end).unwrap();
        let bytes = w.file.frames.into_inner();
        assert_eq!(bytes[8..10], [3, 0]);
        let mut c = Collect::default();
        read_record(&bytes[..], Path::new("r"), &mut c).unwrap();
        let read = c.end.unwrap();
        assert_eq!(read, end);
        assert_eq!(
            read.why(),
            "error: ptrace: gone; the launched command was killed; of the processes that \
             started while recording, 1 process could not be read (permission denied: needs \
             root with CAP_SYS_PTRACE, or the processes' own user): their references are not \
             recorded (pids 9)"
        );
    }

    #[test]
    fn impossible_counts_are_refused() {
        let mut i = interval(1);
        i.phys[0].counts.user = (64 << 20) / 4096 + 1;
        assert!(check_interval(&i, &header()).is_err());
        // A sample's estimate may exceed the block (so may the counts of
        // a fault recording that does not say it watched every page);
        // never more written than referenced.
        let mut sampled = header();
        sampled.backend = Backend::Fault;
        for sample in [None, Some(0.25)] {
            sampled.sample = sample;
            assert!(check_interval(&i, &sampled).is_ok());
        }
        sampled.sample = Some(1.0);
        assert!(check_interval(&i, &sampled).is_err());
        sampled.sample = Some(0.25);
        i.phys[0].counts.written = i.phys[0].counts.referenced() + 1;
        assert!(check_interval(&i, &sampled).is_err());
        let mut i = interval(1);
        i.virt[0].counts.written = 1000;
        assert!(check_interval(&i, &header()).is_err());
        let mut i = interval(1);
        i.end_ns = 0;
        assert!(check_interval(&i, &header()).is_err());
        assert!(check_interval(&interval(3), &header()).is_ok());
        // Blocks and page runs past what they can be.
        let mut i = interval(1);
        i.phys[0].block = u64::MAX / (64 << 20);
        assert!(check_interval(&i, &header()).is_err());
        let runs = |runs: Vec<(u64, u64)>| {
            let mut i = interval(1);
            i.pages = vec![PageRuns { pid: 1, runs }];
            check_interval(&i, &header())
        };
        assert!(runs(vec![(0, 3), (1, 2), (7, 1)]).is_ok());
        assert!(runs(vec![(u64::MAX / 4096, 1)]).is_ok());
        for bad in [
            vec![(0, 0)],
            vec![(0, 3), (0, 2)],
            vec![(u64::MAX / 4096, 2)],
            vec![(1, u64::MAX)],
        ] {
            let e = runs(bad.clone()).unwrap_err();
            assert!(e.contains("page run"), "{bad:?}: {e}");
        }
    }
}
