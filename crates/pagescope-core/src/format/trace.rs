//! Traces in the recording format: the writer used by `pagescope trace`
//! and the reader behind `pagescope analyze`.
//!
//! References are stored in chunks, column by column: time deltas,
//! page-number deltas (zigzag), thread and process changes, each mapping
//! id against the one its address predicts ([`MappingTable`]), and a bit
//! per reference for writes. Mapping and residency records are written
//! together, before the next frame of another kind. A program that walks memory page by page
//! gives a page delta of 1 every time, which zstd stores in almost nothing,
//! so the time column dominates. Times are stored in a unit (the trace's
//! time resolution, 1 us by default): below it they are the jitter of
//! the fault's delivery to the tracer, which no compressor can shrink
//! (see docs/format.md for measured sizes).

use super::frame::{decode, open_kind, Completeness, Kind, RecordFile};
use super::frame_type;
use super::limits::CHUNK_REFS;
use super::maptable::MappingTable;
use super::refchunk::{decode_refs_into, encode_refs_folded};
use super::v1::TraceEndV1;
use crate::trace::{Mapping, ProcessEvent, Ref, Residency, TraceEnd, TraceHeader};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::Path;

/// Writes a trace stream as frames; every frame is on disk (in the page
/// cache) when its call returns, so a killed tracer leaves a readable file.
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    file: RecordFile<W>,
    page_size: u64,
    time_unit: u32,
    encoded: Vec<u8>,
    /// The mappings written so far, as readers rebuild them.
    table: MappingTable,
    /// Mapping and residency records not written yet: they go out
    /// together (mappings first), before the next frame of another kind.
    mappings: Vec<Mapping>,
    residencies: Vec<Residency>,
}

/// Mapping records per [`frame_type::MAPPINGS`] frame.
const MAPPINGS_PER_FRAME: usize = 256;
/// Residency records per [`frame_type::RESIDENCIES`] frame.
const RESIDENCIES_PER_FRAME: usize = 4096;

impl<W: Write> TraceWriter<W> {
    /// Starts a trace file with its header; reference times are stored
    /// rounded down to a multiple of `time_unit` ns (at least 1).
    pub fn new(
        out: W,
        path: &Path,
        header: &TraceHeader,
        time_unit: u32,
    ) -> Result<TraceWriter<W>> {
        let mut w = TraceWriter {
            file: RecordFile::new(out, path, Kind::Trace)?,
            page_size: header.page_size,
            time_unit: time_unit.max(1),
            encoded: Vec::new(),
            table: MappingTable::default(),
            mappings: Vec::new(),
            residencies: Vec::new(),
        };
        w.put(frame_type::TRACE_HEADER, header)?;
        if let Some(origin) = &header.origin {
            w.put(frame_type::ORIGIN, origin)?;
        }
        Ok(w)
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.file.frames.bytes
    }

    fn put<T>(&mut self, frame_type: u16, value: &T) -> Result<()>
    where
        T: Serialize + serde::de::DeserializeOwned,
    {
        self.file.put(frame_type, value)
    }

    /// A mapping (new, or moved). It is written with the next frame of
    /// another kind (or [`TraceWriter::flush_records`]): records written
    /// together compress to a fraction of their size one by one.
    pub fn mapping(&mut self, m: &Mapping) -> Result<()> {
        self.table.insert(m);
        self.mappings.push(m.clone());
        Ok(())
    }

    /// Residency of an untraced mapping, written as mappings are.
    pub fn residency(&mut self, r: &Residency) -> Result<()> {
        self.residencies.push(r.clone());
        Ok(())
    }

    /// Writes the mapping and residency records not written yet.
    pub fn flush_records(&mut self) -> Result<()> {
        let mappings = std::mem::take(&mut self.mappings);
        for batch in mappings.chunks(MAPPINGS_PER_FRAME) {
            self.file.put(frame_type::MAPPINGS, &batch.to_vec())?;
        }
        let residencies = std::mem::take(&mut self.residencies);
        for batch in residencies.chunks(RESIDENCIES_PER_FRAME) {
            self.file.put(frame_type::RESIDENCIES, &batch.to_vec())?;
        }
        Ok(())
    }

    /// A process event.
    pub fn event(&mut self, e: &ProcessEvent) -> Result<()> {
        self.flush_records()?;
        self.put(frame_type::PROCESS_EVENT, e)
    }

    /// References, in chunks of at most [`CHUNK_REFS`], each mapping id
    /// stored against the one the mappings before it predict.
    pub fn refs(&mut self, refs: &[Ref]) -> Result<()> {
        self.flush_records()?;
        for chunk in refs.chunks(CHUNK_REFS) {
            encode_refs_folded(
                chunk,
                self.page_size,
                self.time_unit,
                &self.table,
                &mut self.encoded,
            );
            self.file.raw(frame_type::REFS_FOLDED, &self.encoded)?;
        }
        Ok(())
    }

    /// The end record.
    pub fn finish(&mut self, end: &TraceEnd) -> Result<()> {
        self.flush_records()?;
        self.put(frame_type::END, end)
    }
}

/// Receives a trace as it is read.
pub trait TraceVisitor {
    /// The header, first.
    fn header(&mut self, header: &TraceHeader) -> Result<()>;
    /// A mapping record.
    fn mapping(&mut self, _m: &Mapping) -> Result<()> {
        Ok(())
    }
    /// A process event.
    fn event(&mut self, _e: &ProcessEvent) -> Result<()> {
        Ok(())
    }
    /// A chunk of references, in trace order.
    fn refs(&mut self, refs: &[Ref]) -> Result<()>;
    /// A chunk of references, in trace order, given to keep: for a
    /// visitor that hands them to another thread. [`read_trace`] calls
    /// this one, and decodes the next chunk into the buffer it returns
    /// (`refs` itself, or one the other thread is done with), so that
    /// chunks do not each allocate anew.
    fn refs_owned(&mut self, refs: Vec<Ref>) -> Result<Vec<Ref>> {
        self.refs(&refs)?;
        Ok(refs)
    }
    /// Residency of an untraced mapping.
    fn residency(&mut self, _r: &Residency) -> Result<()> {
        Ok(())
    }
    /// The end record of a complete trace.
    fn end(&mut self, _e: &TraceEnd) -> Result<()> {
        Ok(())
    }
}

/// A mapping record of frame type [`frame_type::MAPPING`], written before
/// mappings named their device.
#[derive(Deserialize)]
struct MappingWithoutDevice {
    id: u32,
    pid: u32,
    start: u64,
    end: u64,
    perms: String,
    offset: u64,
    path: String,
    inode: u64,
    kind: crate::trace::MappingKind,
    traced: bool,
}

impl MappingWithoutDevice {
    /// The mapping, with no device.
    fn upgrade(self) -> Mapping {
        let m = self;
        Mapping {
            id: m.id,
            pid: m.pid,
            start: m.start,
            end: m.end,
            perms: m.perms,
            offset: m.offset,
            path: m.path,
            inode: m.inode,
            dev: 0,
            kind: m.kind,
            traced: m.traced,
        }
    }
}

/// Replays a trace file into `visitor`. A file cut short (a killed
/// tracer) is replayed up to its last complete frame.
pub fn read_trace<R: Read>(
    input: R,
    path: &Path,
    visitor: &mut dyn TraceVisitor,
) -> Result<Completeness> {
    let mut reader = open_kind(input, path, Kind::Trace, "a trace")?;
    let version = reader.version();
    let mut seen_header = false;
    let mut table = MappingTable::default();
    // The header goes to the visitor once its origin frame, if any, is
    // read: at the next frame of another type, or at the end.
    let mut pending: Option<TraceHeader> = None;
    // The buffer chunks are decoded into, kept or handed back by the
    // visitor.
    let mut refs = Vec::new();
    loop {
        let frame = reader.next_or_end(seen_header)?;
        if !matches!(&frame, Ok(f) if f.frame_type == frame_type::ORIGIN) {
            if let Some(h) = pending.take() {
                visitor.header(&h)?;
            }
        }
        let frame = match frame {
            Ok(f) => f,
            Err(cut) => return Ok(cut),
        };
        let at = frame.offset;
        match frame.frame_type {
            frame_type::TRACE_HEADER if !seen_header => {
                let h: TraceHeader = decode(path, at, "trace header", &frame.payload)?;
                if h.page_size == 0 || !h.page_size.is_power_of_two() {
                    return Err(Error::corrupt(
                        path,
                        format!("page size {} is impossible", h.page_size),
                    ));
                }
                pending = Some(h);
                seen_header = true;
            }
            _ if !seen_header => {
                return Err(Error::corrupt(path, "does not start with a trace header"));
            }
            frame_type::TRACE_HEADER => {
                return Err(Error::corrupt(
                    path,
                    format!("frame at byte {at}: second trace header"),
                ));
            }
            frame_type::ORIGIN => match pending.as_mut() {
                Some(h) if h.origin.is_none() => {
                    h.origin = Some(decode(path, at, "origin", &frame.payload)?);
                }
                _ => {
                    return Err(Error::corrupt(
                        path,
                        format!("frame at byte {at}: origin not right after the trace header"),
                    ));
                }
            },
            frame_type::MAPPING => {
                let m: MappingWithoutDevice = decode(path, at, "mapping", &frame.payload)?;
                let m = m.upgrade();
                table.insert(&m);
                visitor.mapping(&m)?
            }
            frame_type::MAPPING_WITH_DEVICE => {
                let m: Mapping = decode(path, at, "mapping", &frame.payload)?;
                table.insert(&m);
                visitor.mapping(&m)?
            }
            frame_type::MAPPINGS => {
                let ms: Vec<Mapping> = decode(path, at, "mappings", &frame.payload)?;
                for m in &ms {
                    table.insert(m);
                    visitor.mapping(m)?;
                }
            }
            frame_type::PROCESS_EVENT => {
                visitor.event(&decode(path, at, "process event", &frame.payload)?)?
            }
            frame_type::RESIDENCY => {
                visitor.residency(&decode(path, at, "residency", &frame.payload)?)?
            }
            frame_type::RESIDENCIES => {
                let rs: Vec<Residency> = decode(path, at, "residencies", &frame.payload)?;
                for r in &rs {
                    visitor.residency(r)?;
                }
            }
            frame_type::REFS
            | frame_type::REFS_IN_UNITS
            | frame_type::REFS_PREDICTED
            | frame_type::REFS_FOLDED => {
                decode_refs_into(&frame.payload, frame.frame_type, &table, &mut refs)
                    .map_err(|why| Error::corrupt(path, format!("frame at byte {at}: {why}")))?;
                refs = visitor.refs_owned(std::mem::take(&mut refs))?;
            }
            frame_type::END => {
                let end: TraceEnd = match version {
                    1 => decode::<TraceEndV1>(path, at, "end", &frame.payload)?.upgrade(),
                    _ => decode(path, at, "end", &frame.payload)?,
                };
                visitor.end(&end)?;
                return Ok(Completeness::Complete);
            }
            _ => {} // A newer frame type: skip it.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::limits;
    use crate::format::refchunk::{
        decode_refs, decode_refs_folded, decode_refs_predicted, encode_refs, encode_refs_predicted,
        RefChunk,
    };
    use crate::trace::EvictMethod;

    fn header() -> TraceHeader {
        TraceHeader {
            page_size: 4096,
            pool_pages: 512,
            policy: "fifo".into(),
            evict: EvictMethod::Move,
            command: vec!["x".into()],
            start_unix_ns: 1,
            start_monotonic_ns: 1,
            kernel: "6.18".into(),
            untraced: String::new(),
            origin: None,
        }
    }

    fn sample(n: u64) -> Vec<Ref> {
        (0..n)
            .map(|i| Ref {
                time_ns: 1000 + i * 3217 + (i * i) % 97,
                pid: 100 + (i / 50) as u32,
                tid: 100 + (i % 3) as u32,
                addr: 0x7f00_0000_0000 + ((i * 7919) % 5000) * 4096,
                write: i % 3 == 0,
                mapping: (i % 5) as u32,
            })
            .collect()
    }

    #[derive(Default)]
    struct Collect {
        header: Option<TraceHeader>,
        refs: Vec<Ref>,
        mappings: Vec<Mapping>,
        end: Option<TraceEnd>,
    }
    impl TraceVisitor for Collect {
        fn header(&mut self, h: &TraceHeader) -> Result<()> {
            self.header = Some(h.clone());
            Ok(())
        }
        fn mapping(&mut self, m: &Mapping) -> Result<()> {
            self.mappings.push(m.clone());
            Ok(())
        }
        fn refs(&mut self, refs: &[Ref]) -> Result<()> {
            self.refs.extend_from_slice(refs);
            Ok(())
        }
        fn end(&mut self, e: &TraceEnd) -> Result<()> {
            self.end = Some(e.clone());
            Ok(())
        }
    }

    #[test]
    fn refs_round_trip() {
        let refs = sample(10_000);
        let mut buf = Vec::new();
        encode_refs(&refs, 4096, 1, &mut buf);
        assert_eq!(decode_refs(&buf, false).unwrap(), refs);
        // In microseconds: every time rounded down, nothing else changed.
        encode_refs(&refs, 4096, 1000, &mut buf);
        let us = decode_refs(&buf, false).unwrap();
        for (a, b) in us.iter().zip(&refs) {
            assert_eq!(a.time_ns, b.time_ns / 1000 * 1000);
            assert_eq!(
                (a.pid, a.tid, a.addr, a.write),
                (b.pid, b.tid, b.addr, b.write)
            );
        }
    }

    fn mapping(id: u32, pid: u32, start: u64, end: u64) -> Mapping {
        Mapping {
            id,
            pid,
            start,
            end,
            perms: "rw-p".into(),
            offset: 0,
            path: format!("/lib/{id}.so"),
            inode: id as u64,
            dev: 0,
            kind: crate::trace::MappingKind::File,
            traced: true,
        }
    }

    /// Mapping ids stored against the mappings written before their chunk
    /// read back exactly, also where the prediction is wrong (a reference
    /// outside any mapping, one whose mapping moved after it was taken,
    /// another process's), and the mapping records come back in order.
    #[test]
    fn predicted_mapping_ids_read_back_exactly() {
        let mut w = TraceWriter::new(Vec::new(), Path::new("t"), &header(), 1000).unwrap();
        let maps = [
            mapping(0, 100, 0x10_000, 0x20_000),
            mapping(1, 100, 0x40_000, 0x80_000),
            mapping(2, 101, 0x10_000, 0x20_000),
        ];
        for m in &maps {
            w.mapping(m).unwrap();
        }
        let r = |i: u64, pid: u32, addr: u64, mapping: u32| Ref {
            time_ns: 1000 * i,
            pid,
            tid: pid,
            addr,
            write: i % 2 == 0,
            mapping,
        };
        let mut refs = vec![
            r(1, 100, 0x10_000, 0),
            r(2, 100, 0x41_000, 1),
            r(3, 101, 0x11_000, 2),
            // Outside every mapping: stored against the previous id.
            r(4, 100, 0x90_000, 7),
            // Not what the address predicts.
            r(5, 100, 0x12_000, 1),
        ];
        w.refs(&refs).unwrap();
        // Mapping 1 moves; a reference taken before, at its old place.
        let moved = mapping(1, 100, 0x100_000, 0x140_000);
        w.mapping(&moved).unwrap();
        let late = vec![r(6, 100, 0x42_000, 1), r(7, 100, 0x100_000, 1)];
        w.refs(&late).unwrap();
        w.finish(&TraceEnd {
            references: 7,
            evictions: 0,
            unevictable: 0,
            reason: crate::trace::EndReason::Exited,
            notes: vec![],
        })
        .unwrap();
        let bytes = w.file.frames.into_inner();
        let mut c = Collect::default();
        read_trace(&bytes[..], Path::new("t"), &mut c).unwrap();
        refs.extend(late);
        assert_eq!(c.refs, refs);
        let mut want = maps.to_vec();
        want.push(moved);
        assert_eq!(c.mappings, want);
        // Against an empty table every id is stored as its change.
        let mut buf = Vec::new();
        let table = MappingTable::default();
        let sample = sample(5000);
        encode_refs_predicted(&sample, 4096, 1, &table, &mut buf);
        assert_eq!(decode_refs_predicted(&buf, &table).unwrap(), sample);
    }

    /// Write bits folded into the page column read back exactly (also
    /// pages far apart, and from a file, where chunks of type 28, written
    /// before, read as they did); where writes follow reads of the same
    /// page, as write-protect faults do, the chunk is smaller.
    #[test]
    fn folded_writes_read_back_and_cost_less() {
        let table = MappingTable::default();
        let mut refs = Vec::new();
        for i in 0..40_000u64 {
            let page = (i * 2654435761) % (1 << 20) + if i % 7 == 0 { 1 << 40 } else { 0 };
            let r = Ref {
                time_ns: i * 20_000,
                pid: 100,
                tid: 100 + (i % 3) as u32,
                addr: page * 4096,
                write: false,
                mapping: 0,
            };
            refs.push(r);
            if i % 3 == 0 {
                refs.push(Ref {
                    time_ns: r.time_ns + 5_000,
                    write: true,
                    ..r
                });
            }
        }
        let (mut predicted, mut folded) = (Vec::new(), Vec::new());
        encode_refs_predicted(&refs, 4096, 1000, &table, &mut predicted);
        encode_refs_folded(&refs, 4096, 1000, &table, &mut folded);
        let back = decode_refs_folded(&folded, &table).unwrap();
        assert_eq!(back, decode_refs_predicted(&predicted, &table).unwrap());
        assert!(back
            .iter()
            .zip(&refs)
            .all(|(a, b)| a.write == b.write && a.addr == b.addr));
        // A folded chunk read as a bit-column one (or the reverse) is an
        // error, not other references.
        assert!(decode_refs_predicted(&folded, &table).is_err());
        assert!(decode_refs_folded(&predicted, &table).is_err());
        let size = |b: &[u8]| zstd::bulk::compress(b, 3).unwrap().len();
        let (p, f) = (size(&predicted), size(&folded));
        assert!(f < p, "folded {f} bytes, bit column {p}");
        // A file with both kinds of chunk.
        let mut w = TraceWriter::new(Vec::new(), Path::new("t"), &header(), 1000).unwrap();
        let (old, new) = refs.split_at(1000);
        w.file
            .raw(frame_type::REFS_PREDICTED, &{
                let mut b = Vec::new();
                encode_refs_predicted(old, 4096, 1000, &table, &mut b);
                b
            })
            .unwrap();
        w.refs(new).unwrap();
        let bytes = w.file.frames.into_inner();
        let mut c = Collect::default();
        read_trace(&bytes[..], Path::new("t"), &mut c).unwrap();
        let rounded: Vec<Ref> = refs
            .iter()
            .map(|r| Ref {
                time_ns: r.time_ns / 1000 * 1000,
                ..*r
            })
            .collect();
        assert_eq!(c.refs, rounded);
    }

    /// On a trace whose references follow their mappings, the mapping
    /// column costs next to nothing once predicted.
    #[test]
    fn predicted_mapping_ids_cost_little() {
        let mut table = MappingTable::default();
        for id in 0..64u32 {
            let start = 0x7f00_0000_0000 + id as u64 * (1 << 20);
            table.insert(&mapping(id, 100, start, start + (1 << 20)));
        }
        // References hop among the 64 mappings.
        let refs: Vec<Ref> = (0..60_000u64)
            .map(|i| {
                let id = (i * 2654435761 % 64) as u32;
                let page = (i * 40503) % 256;
                Ref {
                    time_ns: i * 20_000,
                    pid: 100,
                    tid: 100,
                    addr: 0x7f00_0000_0000 + id as u64 * (1 << 20) + page * 4096,
                    write: false,
                    mapping: id,
                }
            })
            .collect();
        let column = |bytes: &[u8]| {
            let c: RefChunk = postcard::from_bytes(bytes).unwrap();
            zstd::bulk::compress(&c.columns.mapping_delta, 3)
                .unwrap()
                .len()
        };
        let (mut plain, mut predicted) = (Vec::new(), Vec::new());
        encode_refs(&refs, 4096, 1000, &mut plain);
        encode_refs_predicted(&refs, 4096, 1000, &table, &mut predicted);
        assert_eq!(
            decode_refs_predicted(&predicted, &table).unwrap(),
            decode_refs(&plain, false).unwrap()
        );
        let (a, b) = (column(&plain), column(&predicted));
        assert!(b * 50 < a, "mapping column: {a} bytes plain, {b} predicted");
    }

    /// The origin travels in a frame of its own right after the header,
    /// and comes with it, even from a file cut right after it; a trace
    /// without one (written before it) reads as `None`.
    #[test]
    fn the_origin_comes_with_the_header() {
        let mut h = header();
        h.origin = Some(crate::model::Origin {
            host: "db-7".into(),
            boot_id: None,
        });
        let mut w = TraceWriter::new(Vec::new(), Path::new("t"), &h, 1000).unwrap();
        let cut = w.bytes() as usize;
        w.refs(&sample(10)).unwrap();
        let bytes = w.file.frames.into_inner();
        for end in [bytes.len(), cut] {
            let mut c = Collect::default();
            read_trace(&bytes[..end], Path::new("t"), &mut c).unwrap();
            assert_eq!(c.header.as_ref(), Some(&h));
        }
        let w = TraceWriter::new(Vec::new(), Path::new("t"), &header(), 1000).unwrap();
        let mut c = Collect::default();
        read_trace(&w.file.frames.into_inner()[..], Path::new("t"), &mut c).unwrap();
        assert_eq!(c.header.unwrap().origin, None);
    }

    /// Chunks of frame type 19 (times in ns, no unit) still read.
    #[test]
    fn chunks_in_ns_still_read() {
        let refs = sample(1000);
        let mut buf = Vec::new();
        encode_refs(&refs, 4096, 1, &mut buf);
        // The unit (varint 1) is the first byte; the rest is the old form.
        assert_eq!(buf[0], 1);
        assert_eq!(decode_refs(&buf[1..], true).unwrap(), refs);
    }

    /// The end's reason and notes come back typed, and read as version 1
    /// wrote them.
    #[test]
    fn the_end_comes_back() {
        use crate::trace::{EndNote, EndReason};
        let end = TraceEnd {
            references: 0,
            evictions: 1,
            unevictable: 2,
            reason: EndReason::Interrupted,
            notes: vec![EndNote::NoReference],
        };
        let mut w = TraceWriter::new(Vec::new(), Path::new("t"), &header(), 1).unwrap();
        w.finish(&end).unwrap();
        let bytes = w.file.frames.into_inner();
        assert_eq!(bytes[8..10], [4, 0]);
        let mut c = Collect::default();
        read_trace(&bytes[..], Path::new("t"), &mut c).unwrap();
        let read = c.end.unwrap();
        assert_eq!(read, end);
        assert!(read.why().starts_with(
            "interrupted: the program was detached and runs on; no page reference was caught ("
        ));
    }

    #[test]
    fn file_round_trip_and_truncation() {
        let refs = sample(3000);
        let mut w = TraceWriter::new(Vec::new(), Path::new("t"), &header(), 1).unwrap();
        for chunk in refs.chunks(1000) {
            w.refs(chunk).unwrap();
        }
        let end = TraceEnd {
            references: 3000,
            ..TraceEnd::default()
        };
        w.finish(&end).unwrap();
        let bytes = w.file.frames.into_inner();
        let mut c = Collect::default();
        let done = read_trace(&bytes[..], Path::new("t"), &mut c).unwrap();
        assert_eq!(done, Completeness::Complete);
        assert_eq!(c.refs, refs);
        assert_eq!(c.end, Some(end));
        // Every cut keeps whole chunks only, and never errors once the
        // header is in.
        let header_end = 16 + 16 + postcard::to_stdvec(&header()).unwrap().len();
        for cut in (header_end + 20..bytes.len()).step_by(97) {
            let mut c = Collect::default();
            let done = read_trace(&bytes[..cut], Path::new("t"), &mut c).unwrap();
            assert!(matches!(done, Completeness::CutShort { .. }));
            assert_eq!(c.refs.len() % 1000, 0);
            assert_eq!(c.refs[..], refs[..c.refs.len()]);
        }
    }

    /// Mappings round trip with their device; those of the older frame
    /// type (no device) still read, with device 0.
    #[test]
    fn mappings_old_and_new() {
        #[derive(Serialize)]
        struct Old<'a> {
            id: u32,
            pid: u32,
            start: u64,
            end: u64,
            perms: &'a str,
            offset: u64,
            path: &'a str,
            inode: u64,
            kind: crate::trace::MappingKind,
            traced: bool,
        }
        let new = Mapping {
            id: 1,
            pid: 7,
            start: 0x1000,
            end: 0x5000,
            perms: "rw-s".into(),
            offset: 0x2000,
            path: "/dev/shm/x".into(),
            inode: 42,
            dev: 25,
            kind: crate::trace::MappingKind::Shared,
            traced: true,
        };
        let mut w = TraceWriter::new(Vec::new(), Path::new("t"), &header(), 1).unwrap();
        let old = postcard::to_stdvec(&Old {
            id: 0,
            pid: 7,
            start: 0x1000,
            end: 0x5000,
            perms: "rw-s",
            offset: 0x2000,
            path: "/dev/shm/x",
            inode: 42,
            kind: crate::trace::MappingKind::Shared,
            traced: true,
        })
        .unwrap();
        w.file.raw(frame_type::MAPPING, &old).unwrap();
        w.mapping(&new).unwrap();
        w.finish(&TraceEnd::default()).unwrap();
        let bytes = w.file.frames.into_inner();
        let mut c = Collect::default();
        read_trace(&bytes[..], Path::new("t"), &mut c).unwrap();
        assert_eq!(
            c.mappings,
            vec![
                Mapping {
                    id: 0,
                    dev: 0,
                    ..new.clone()
                },
                new
            ]
        );
    }

    /// The most references a chunk may hold, each with the longest
    /// encoding of every column, fit the frame limit and come back; the
    /// writer splits more into chunks of that size.
    #[test]
    fn a_chunk_of_the_most_references_round_trips() {
        let top = u64::MAX / 4096 * 4096;
        let refs: Vec<Ref> = (0..CHUNK_REFS as u64)
            .map(|i| {
                let far = i % 2 == 1;
                Ref {
                    time_ns: if far { 1 << 63 } else { 0 },
                    pid: if far { u32::MAX } else { 0 },
                    tid: if far { 0 } else { u32::MAX },
                    addr: if far { top } else { 0 },
                    write: far,
                    mapping: if far { u32::MAX } else { 0 },
                }
            })
            .collect();
        let mut buf = Vec::new();
        encode_refs(&refs, 4096, 1, &mut buf);
        assert!(
            buf.len() <= limits::REFS_RAW as usize,
            "{} bytes",
            buf.len()
        );
        assert!(buf.len() > CHUNK_REFS * 30, "{} bytes", buf.len());
        assert_eq!(decode_refs(&buf, false).unwrap(), refs);
        let more: Vec<Ref> = refs
            .iter()
            .chain(&refs)
            .chain(&refs[..5])
            .copied()
            .collect();
        encode_refs(&more, 4096, 1, &mut buf);
        let e = decode_refs(&buf, false).unwrap_err();
        assert_eq!(
            e,
            "reference chunk of 131077 references, more than the 65536 a chunk may hold"
        );
        let mut w = TraceWriter::new(Vec::new(), Path::new("t"), &header(), 1).unwrap();
        w.refs(&more).unwrap();
        w.finish(&TraceEnd::default()).unwrap();
        let bytes = w.file.frames.into_inner();
        let mut c = Collect::default();
        read_trace(&bytes[..], Path::new("t"), &mut c).unwrap();
        assert_eq!(c.refs, more);
    }

    #[test]
    fn corrupt_chunks_are_errors() {
        let refs = sample(100);
        let mut buf = Vec::new();
        encode_refs(&refs, 4096, 1000, &mut buf);
        for i in 0..buf.len() {
            let mut b = buf.clone();
            b[i] ^= 0x55;
            let _ = decode_refs(&b, false); // must not panic
            let _ = decode_refs(&b, true);
            b.truncate(i);
            assert!(decode_refs(&b, false).is_err() || i == buf.len());
        }
    }
}
