//! Frames: the unit of writing, checksumming and truncation recovery.

use super::frame_type;
use super::limits::{self, RECORD_RAW};
use super::{MAGIC, VERSION};
use crate::{Error, Result};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// What a file records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Kind {
    /// `pagescope snapshot`.
    Snapshot = 1,
    /// `pagescope record`.
    Record = 2,
    /// `pagescope trace`.
    Trace = 3,
}

impl Kind {
    fn from_u16(v: u16) -> Option<Kind> {
        match v {
            1 => Some(Kind::Snapshot),
            2 => Some(Kind::Record),
            3 => Some(Kind::Trace),
            _ => None,
        }
    }

    /// The format version this build writes files of this kind in, and
    /// the newest it reads: snapshots are at version 1, recordings at 3
    /// (version 2's end records hold a typed reason and notes, where
    /// version 1 held one string; version 3 added the end notes of
    /// processes that could not be read or that another pagescope
    /// observes, which a reader of version 2 could not decode), traces at 4 (version 3 predicted mapping ids from
    /// addresses and wrote mapping records together, a reader of version
    /// 2 would skip those frames and see no reference, so it refuses the
    /// file; version 4 folded write bits into the page column). See
    /// `docs/format.md`.
    pub fn version(self) -> u16 {
        match self {
            Kind::Snapshot => 1,
            Kind::Record => 3,
            Kind::Trace => 4,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Snapshot => "snapshot",
            Kind::Record => "record",
            Kind::Trace => "trace",
        }
    }
}

const FLAG_ZSTD: u16 = 1;

/// Says that `len` bytes are too many for a frame of `ty`.
fn too_large(ty: u16, len: u64, max: u32) -> String {
    let frame = match limits::max_raw(ty) {
        Some(_) => format!("a {} frame", frame_type::name(ty)),
        None => format!("a frame of type {ty}"),
    };
    format!("{len} bytes of payload, more than the {max} {frame} may hold")
}
const FRAME_HEADER: usize = 16;
const FILE_HEADER: usize = 16;

/// Writes frames to a byte sink, each in a single `write_all` followed by
/// a flush, so the kernel holds every complete frame even if this process
/// is killed.
#[derive(Debug)]
pub struct FrameWriter<W: Write> {
    out: W,
    level: i32,
    buf: Vec<u8>,
    /// Bytes written so far.
    pub bytes: u64,
}

impl<W: Write> FrameWriter<W> {
    /// Writes the file header.
    pub fn new(mut out: W, kind: Kind) -> io::Result<FrameWriter<W>> {
        let mut header = [0u8; FILE_HEADER];
        header[..8].copy_from_slice(&MAGIC);
        header[8..10].copy_from_slice(&kind.version().to_le_bytes());
        header[10..12].copy_from_slice(&(kind as u16).to_le_bytes());
        out.write_all(&header)?;
        out.flush()?;
        Ok(FrameWriter {
            out,
            level: 3,
            buf: Vec::new(),
            bytes: FILE_HEADER as u64,
        })
    }

    /// Writes one frame of `frame_type` holding `raw`, compressed. A
    /// payload larger than its type's limit ([`limits::max_raw`]) is
    /// refused: no reader would read it.
    pub fn write_frame(&mut self, frame_type: u16, raw: &[u8]) -> io::Result<()> {
        let max = limits::max_raw(frame_type).unwrap_or(RECORD_RAW);
        let raw_len = u32::try_from(raw.len())
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    too_large(frame_type, raw.len() as u64, max),
                )
            })?;
        let compressed = zstd::bulk::compress(raw, self.level)?;
        let (flags, stored): (u16, &[u8]) = if compressed.len() < raw.len() {
            (FLAG_ZSTD, &compressed)
        } else {
            (0, raw)
        };
        let stored_len = stored.len() as u32;
        self.buf.clear();
        self.buf.extend_from_slice(&frame_type.to_le_bytes());
        self.buf.extend_from_slice(&flags.to_le_bytes());
        self.buf.extend_from_slice(&stored_len.to_le_bytes());
        self.buf.extend_from_slice(&raw_len.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&self.buf[..12]);
        crc.update(stored);
        self.buf.extend_from_slice(&crc.finalize().to_le_bytes());
        self.buf.extend_from_slice(stored);
        self.out.write_all(&self.buf)?;
        self.out.flush()?;
        self.bytes += self.buf.len() as u64;
        Ok(())
    }

    /// The underlying sink.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One frame as read: its type and decompressed payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Frame type (see [`super::frame_type`]).
    pub frame_type: u16,
    /// Decompressed payload; empty for a type this build does not know
    /// (such a frame is checked, not decompressed: readers skip it).
    pub payload: Vec<u8>,
    /// Byte offset of the frame in the file.
    pub offset: u64,
}

/// What the next read found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// A complete, verified frame.
    Frame(Frame),
    /// The end of the file exactly after a frame (the caller decides
    /// whether the last frame was the end frame).
    Eof,
    /// The file ends inside a frame: the writer was stopped mid-write.
    CutShort {
        /// Offset of the incomplete frame.
        offset: u64,
    },
}

/// Reads and verifies frames.
#[derive(Debug)]
pub struct FrameReader<R: Read> {
    input: R,
    path: PathBuf,
    kind: Kind,
    version: u16,
    offset: u64,
    zstd: Dctx,
}

/// A zstd decompression context kept from frame to frame (making one
/// costs more than decompressing a small frame), made at first use.
#[derive(Default)]
struct Dctx(Option<zstd::bulk::Decompressor<'static>>);

impl std::fmt::Debug for Dctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dctx")
    }
}

impl Dctx {
    fn decompress(&mut self, stored: &[u8], raw_len: usize) -> io::Result<Vec<u8>> {
        let d = match &mut self.0 {
            Some(d) => d,
            none => none.insert(zstd::bulk::Decompressor::new()?),
        };
        d.decompress(stored, raw_len)
    }
}

/// Reads until `buf` is full or the input ends; returns bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: Read> FrameReader<R> {
    /// Reads and checks the file header. `path` names the file in errors.
    pub fn new(mut input: R, path: &Path) -> Result<FrameReader<R>> {
        let path = path.to_path_buf();
        let mut header = [0u8; FILE_HEADER];
        let n = read_full(&mut input, &mut header).map_err(|e| Error::io(&path, e))?;
        if n == 0 {
            return Err(Error::corrupt(
                &path,
                "empty file, not a pagescope recording",
            ));
        }
        if n < 8 || header[..8] != MAGIC {
            return Err(Error::corrupt(
                &path,
                "not a pagescope recording (wrong magic bytes)",
            ));
        }
        if n < FILE_HEADER {
            return Err(Error::corrupt(&path, "cut short inside the file header"));
        }
        let version = u16::from_le_bytes([header[8], header[9]]);
        let kind_raw = u16::from_le_bytes([header[10], header[11]]);
        let kind = Kind::from_u16(kind_raw);
        let newest = kind.map_or(VERSION, Kind::version);
        if version == 0 || version > newest {
            return Err(Error::corrupt(
                &path,
                format!(
                    "format version {version}, but this pagescope reads up to version {newest}: upgrade pagescope"
                ),
            ));
        }
        let kind = kind
            .ok_or_else(|| Error::corrupt(&path, format!("unknown recording kind {kind_raw}")))?;
        Ok(FrameReader {
            input,
            path,
            kind,
            version,
            offset: FILE_HEADER as u64,
            zstd: Dctx::default(),
        })
    }

    /// What the file records.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The file's format version.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The file's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the next frame, verifying its sizes against the limits of
    /// its type ([`limits::max_raw`]) before reading it, then its
    /// checksum, and decompressing it.
    pub fn next_frame(&mut self) -> Result<ReadOutcome> {
        let offset = self.offset;
        let mut h = [0u8; FRAME_HEADER];
        let n = read_full(&mut self.input, &mut h).map_err(|e| Error::io(&self.path, e))?;
        if n == 0 {
            return Ok(ReadOutcome::Eof);
        }
        if n < FRAME_HEADER {
            return Ok(ReadOutcome::CutShort { offset });
        }
        let frame_type = u16::from_le_bytes([h[0], h[1]]);
        let flags = u16::from_le_bytes([h[2], h[3]]);
        let stored_len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        let raw_len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        let crc = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
        let bad =
            |why: String| Error::corrupt(&self.path, format!("frame at byte {offset}: {why}"));
        let known = limits::max_raw(frame_type);
        let max = known.unwrap_or(RECORD_RAW);
        if raw_len > max {
            return Err(bad(too_large(frame_type, raw_len.into(), max)));
        }
        // A writer stores a frame compressed only when that is smaller.
        if stored_len > raw_len {
            return Err(bad(format!(
                "{stored_len} bytes stored for {raw_len} bytes of payload"
            )));
        }
        if flags & !FLAG_ZSTD != 0 {
            return Err(bad(format!("unknown flags {flags:#x}")));
        }
        // Read what the file holds, growing as it comes: a length the
        // file does not hold allocates nothing.
        let mut stored = Vec::new();
        (&mut self.input)
            .take(stored_len.into())
            .read_to_end(&mut stored)
            .map_err(|e| Error::io(&self.path, e))?;
        if stored.len() < stored_len as usize {
            return Ok(ReadOutcome::CutShort { offset });
        }
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&h[..12]);
        hasher.update(&stored);
        // A fuzzing build takes any checksum, so that mutated inputs reach
        // the decoders behind it.
        if hasher.finalize() != crc && !cfg!(fuzzing) {
            return Err(bad("checksum mismatch: the file is corrupt".into()));
        }
        let payload = if known.is_none() {
            Vec::new()
        } else if flags & FLAG_ZSTD != 0 {
            let out = self
                .zstd
                .decompress(&stored, raw_len as usize)
                .map_err(|e| bad(format!("cannot decompress: {e}")))?;
            if out.len() != raw_len as usize {
                return Err(bad("decompressed size differs from the header".into()));
            }
            out
        } else {
            if stored_len != raw_len {
                return Err(bad(
                    "stored and raw sizes differ in an uncompressed frame".into()
                ));
            }
            stored
        };
        self.offset += (FRAME_HEADER + stored_len as usize) as u64;
        Ok(ReadOutcome::Frame(Frame {
            frame_type,
            payload,
            offset,
        }))
    }
}

/// A frame writer for one kind of file, naming the file in its errors and
/// serialising records with postcard. Snapshot, record and trace writers
/// are built on it.
#[derive(Debug)]
pub(crate) struct RecordFile<W: Write> {
    pub(crate) frames: FrameWriter<W>,
    pub(crate) path: PathBuf,
}

impl<W: Write> RecordFile<W> {
    /// Writes the file header of `kind`.
    pub(crate) fn new(out: W, path: &Path, kind: Kind) -> Result<RecordFile<W>> {
        Ok(RecordFile {
            frames: FrameWriter::new(out, kind).map_err(|e| Error::io(path, e))?,
            path: path.to_path_buf(),
        })
    }

    /// Writes one postcard-encoded record as a frame, unless a reader
    /// would refuse it: it is decoded again within the format's limits
    /// ([`limits::decode_record`]) first.
    pub(crate) fn put<T>(&mut self, frame_type: u16, value: &T) -> Result<()>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        let raw =
            postcard::to_stdvec(value).map_err(|e| Error::corrupt(&self.path, e.to_string()))?;
        if let Err(why) = limits::decode_record::<T>(&raw) {
            let why = format!(
                "cannot write a {} record: {why}",
                frame_type::name(frame_type)
            );
            return Err(Error::io(
                &self.path,
                io::Error::new(io::ErrorKind::InvalidInput, why),
            ));
        }
        self.raw(frame_type, &raw)
    }

    /// Writes an already-encoded payload as a frame.
    pub(crate) fn raw(&mut self, frame_type: u16, raw: &[u8]) -> Result<()> {
        self.frames
            .write_frame(frame_type, raw)
            .map_err(|e| Error::io(&self.path, e))
    }
}

/// Decodes one postcard record within the format's limits
/// ([`limits::decode_record`]); errors name the frame and what it held.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    path: &Path,
    offset: u64,
    what: &str,
    bytes: &[u8],
) -> Result<T> {
    limits::decode_record(bytes).map_err(|e| {
        Error::corrupt(
            path,
            format!("frame at byte {offset}: bad {what} record: {e}"),
        )
    })
}

/// How a replay ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completeness {
    /// The end frame was read.
    Complete,
    /// The file ends early; everything before `offset` was replayed.
    CutShort {
        /// Where the readable part ends.
        offset: u64,
    },
}

/// Opens a file that must be of `kind` (`what` names it in the refusal).
pub(crate) fn open_kind<R: Read>(
    input: R,
    path: &Path,
    kind: Kind,
    what: &str,
) -> Result<FrameReader<R>> {
    let reader = FrameReader::new(input, path)?;
    if reader.kind() != kind {
        return Err(Error::corrupt(
            path,
            format!("is a {} file, not {what}", reader.kind().name()),
        ));
    }
    Ok(reader)
}

impl<R: Read> FrameReader<R> {
    /// The next frame, or how the file ended: a file that ends (cleanly or
    /// mid-frame) without its end frame was cut short, which is an error
    /// only if it ended before its first record (`started` false).
    pub(crate) fn next_or_end(
        &mut self,
        started: bool,
    ) -> Result<std::result::Result<Frame, Completeness>> {
        let offset = match self.next_frame()? {
            ReadOutcome::Frame(f) => return Ok(Ok(f)),
            ReadOutcome::Eof => u64::MAX,
            ReadOutcome::CutShort { offset } => offset,
        };
        if !started {
            return Err(Error::corrupt(&self.path, "cut short before any data"));
        }
        Ok(Err(Completeness::CutShort { offset }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = FrameWriter::new(Vec::new(), Kind::Snapshot).unwrap();
        w.write_frame(frame_type::SYSTEM, b"hello").unwrap();
        w.write_frame(frame_type::ELF, &vec![42u8; 10_000]).unwrap();
        w.into_inner()
    }

    fn read_all(bytes: &[u8]) -> Result<(Vec<Frame>, bool)> {
        let mut r = FrameReader::new(bytes, Path::new("t"))?;
        let mut frames = Vec::new();
        loop {
            match r.next_frame()? {
                ReadOutcome::Frame(f) => frames.push(f),
                ReadOutcome::Eof => return Ok((frames, false)),
                ReadOutcome::CutShort { .. } => return Ok((frames, true)),
            }
        }
    }

    #[test]
    fn round_trip() {
        let (frames, cut) = read_all(&sample()).unwrap();
        assert!(!cut);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].payload, b"hello");
        assert_eq!(frames[1].payload.len(), 10_000);
        assert_eq!(frames[1].frame_type, frame_type::ELF);
    }

    /// A frame header: type, flags, sizes, and the checksum of `stored`.
    fn header(ty: u16, flags: u16, stored: &[u8], raw_len: u32) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&ty.to_le_bytes());
        h.extend_from_slice(&flags.to_le_bytes());
        h.extend_from_slice(&(stored.len() as u32).to_le_bytes());
        h.extend_from_slice(&raw_len.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&h);
        crc.update(stored);
        h.extend_from_slice(&crc.finalize().to_le_bytes());
        h
    }

    /// Each type's limit holds on write and on read, before anything is
    /// read or decompressed.
    #[test]
    fn frames_beyond_their_limit_are_refused() {
        let mut w = FrameWriter::new(Vec::new(), Kind::Snapshot).unwrap();
        let at = vec![0u8; limits::PAGES_RAW as usize];
        w.write_frame(frame_type::PAGES, &at).unwrap();
        let e = w.write_frame(frame_type::PAGES, &[&at[..], &[0]].concat());
        let e = e.unwrap_err().to_string();
        assert!(
            e.contains("4194305 bytes of payload, more than the 4194304 a page chunk frame"),
            "{e}"
        );
        let mut w = FrameWriter::new(Vec::new(), Kind::Snapshot).unwrap();
        let packed = zstd::bulk::compress(&[0; 100], 3).unwrap();
        let cases = [
            (
                frame_type::PAGES,
                limits::PAGES_RAW + 1,
                "4194304 a page chunk frame",
            ),
            (
                frame_type::PHYSMAP,
                limits::PHYSMAP_RAW + 1,
                "a physical map chunk frame",
            ),
            (
                frame_type::PROCESS,
                limits::RECORD_RAW + 1,
                "67108864 a process frame",
            ),
            (99, limits::RECORD_RAW + 1, "a frame of type 99 may hold"),
            (99, u32::MAX, "a frame of type 99 may hold"),
            (frame_type::PROCESS, 10, "stored for 10 bytes"),
        ];
        for (ty, raw_len, says) in cases {
            let mut file = std::mem::take(&mut w.out);
            file.truncate(FILE_HEADER);
            file.extend(header(ty, FLAG_ZSTD, &packed, raw_len));
            file.extend_from_slice(&packed);
            let e = read_all(&file).unwrap_err().to_string();
            assert!(e.contains("frame at byte 16: ") && e.contains(says), "{e}");
            w.out = file;
        }
    }

    /// A frame of a type this build does not know is checked, not
    /// decompressed; a claimed size the file does not hold is a file cut
    /// short, whatever the size.
    #[test]
    fn unknown_and_short_frames() {
        let mut file = sample();
        let packed = zstd::bulk::compress(&[7; 1000], 3).unwrap();
        file.extend(header(99, FLAG_ZSTD, &packed, 1000));
        file.extend_from_slice(&packed);
        let (frames, cut) = read_all(&file).unwrap();
        assert!(!cut);
        assert_eq!((frames[2].frame_type, frames[2].payload.len()), (99, 0));
        let last = file.len() - 1;
        file[last] ^= 1;
        let e = read_all(&file).unwrap_err().to_string();
        assert!(e.contains("checksum mismatch"), "{e}");
        let mut file = sample();
        let claimed = vec![0; 1000];
        file.extend(header(frame_type::PROCESS, 0, &claimed, 1000));
        file.extend_from_slice(&claimed[..10]);
        let (frames, cut) = read_all(&file).unwrap();
        assert!(cut && frames.len() == 2);
    }

    #[test]
    fn every_truncation_is_handled() {
        let bytes = sample();
        for cut in 0..bytes.len() {
            match read_all(&bytes[..cut]) {
                Ok((frames, _)) => assert!(frames.len() <= 2),
                Err(e) => assert!(cut < FILE_HEADER, "cut at {cut}: {e}"),
            }
        }
    }

    #[test]
    fn bit_flips_are_caught() {
        let bytes = sample();
        for i in FILE_HEADER..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            // Must never panic or return a frame whose content differs.
            if let Ok((frames, _)) = read_all(&b) {
                for f in frames {
                    assert!(
                        f.payload == b"hello"
                            || f.payload == vec![42u8; 10_000]
                            || f.payload.is_empty() && limits::max_raw(f.frame_type).is_none()
                    );
                }
            }
        }
    }

    #[test]
    fn foreign_and_empty_files() {
        let e = read_all(b"").unwrap_err().to_string();
        assert!(e.contains("empty file"), "{e}");
        let e = read_all(b"#!/bin/sh\necho hi\n").unwrap_err().to_string();
        assert!(e.contains("not a pagescope recording"), "{e}");
        let mut newer = sample();
        newer[8] = 99;
        let e = read_all(&newer).unwrap_err().to_string();
        assert!(e.contains("version 99"), "{e}");
    }

    /// Each kind is at its own version: a reader takes every version of
    /// a kind up to its own, and refuses a newer one naming both.
    #[test]
    fn versions_by_kind() {
        for (kind, version) in [(Kind::Snapshot, 1u16), (Kind::Record, 3), (Kind::Trace, 4)] {
            let mut file = FrameWriter::new(Vec::new(), kind).unwrap().into_inner();
            assert_eq!(file[8..10], version.to_le_bytes());
            for older in 1..=version {
                file[8..10].copy_from_slice(&older.to_le_bytes());
                let r = FrameReader::new(&file[..], Path::new("f")).unwrap();
                assert_eq!((r.kind(), r.version()), (kind, older));
            }
            file[8..10].copy_from_slice(&(version + 1).to_le_bytes());
            let e = FrameReader::new(&file[..], Path::new("f")).unwrap_err();
            let says = format!(
                "f: format version {}, but this pagescope reads up to version {version}: \
                 upgrade pagescope",
                version + 1
            );
            assert_eq!(e.to_string(), says);
        }
    }
}
