//! Snapshots in the recording format: a [`SnapshotSink`] that writes the
//! stream to a file, and a reader that replays a file into any sink.

use super::frame::{decode, open_kind, Completeness, Kind, RecordFile};
use super::{codec, frame_type};
use crate::model::{
    ElfFile, PageChunk, PhysChunk, ProcessRecord, SnapshotSink, SystemInfo, Trailer,
};
use crate::{Error, Result};
use std::io::{Read, Write};
use std::path::Path;

/// Writes a snapshot stream as frames.
#[derive(Debug)]
pub struct SnapshotWriter<W: Write> {
    file: RecordFile<W>,
    page_size: u64,
    /// Reused encoder and buffer for page chunks.
    encoder: codec::PageEncoder,
    encoded: Vec<u8>,
}

impl<W: Write> SnapshotWriter<W> {
    /// Starts a snapshot file; `path` names it in errors.
    pub fn new(out: W, path: &Path) -> Result<SnapshotWriter<W>> {
        Ok(SnapshotWriter {
            file: RecordFile::new(out, path, Kind::Snapshot)?,
            page_size: 4096,
            encoder: codec::PageEncoder::default(),
            encoded: Vec::new(),
        })
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.file.frames.bytes
    }

    fn put<T: serde::Serialize>(&mut self, frame_type: u16, value: &T) -> Result<()> {
        self.file.put(frame_type, value)
    }
}

impl<W: Write> SnapshotSink for SnapshotWriter<W> {
    fn system(&mut self, system: &SystemInfo) -> Result<()> {
        self.page_size = system.page_size.max(1);
        self.put(frame_type::SYSTEM, system)
    }

    fn process(&mut self, process: &ProcessRecord) -> Result<()> {
        self.put(frame_type::PROCESS, process)
    }

    fn pages(&mut self, chunk: &PageChunk) -> Result<()> {
        self.encoder
            .encode(chunk, self.page_size, &mut self.encoded);
        self.file.raw(frame_type::PAGES, &self.encoded)
    }

    fn finish(&mut self, trailer: &Trailer) -> Result<()> {
        self.put(frame_type::END, trailer)
    }

    fn elf(&mut self, elf: &ElfFile) -> Result<()> {
        self.put(frame_type::ELF, elf)
    }

    fn physmap(&mut self, chunk: &PhysChunk) -> Result<()> {
        self.put(frame_type::PHYSMAP, chunk)
    }
}

/// Replays a snapshot file into `sink`. Returns whether the file was
/// complete; a file cut short is replayed up to its last complete frame.
/// Errors name the file and what is wrong with it.
pub fn read_snapshot<R: Read>(
    input: R,
    path: &Path,
    sink: &mut dyn SnapshotSink,
) -> Result<Completeness> {
    let mut reader = open_kind(input, path, Kind::Snapshot, "a snapshot")?;
    let mut seen_system = false;
    let mut seen_process = false;
    loop {
        let frame = match reader.next_or_end(seen_system)? {
            Ok(f) => f,
            Err(cut) => return Ok(cut),
        };
        let at = frame.offset;
        match frame.frame_type {
            frame_type::SYSTEM => {
                if seen_system {
                    return Err(Error::corrupt(
                        path,
                        format!("frame at byte {at}: second system record"),
                    ));
                }
                let s: SystemInfo = decode(path, at, "system", &frame.payload)?;
                if s.page_size == 0 || !s.page_size.is_power_of_two() {
                    return Err(Error::corrupt(
                        path,
                        format!("page size {} is impossible", s.page_size),
                    ));
                }
                sink.system(&s)?;
                seen_system = true;
            }
            _ if !seen_system => {
                return Err(Error::corrupt(path, "does not start with a system record"));
            }
            frame_type::PROCESS => {
                let p: ProcessRecord = decode(path, at, "process", &frame.payload)?;
                sink.process(&p)?;
                seen_process = true;
            }
            frame_type::PAGES => {
                if !seen_process {
                    return Err(Error::corrupt(
                        path,
                        format!("frame at byte {at}: pages before any process"),
                    ));
                }
                let chunk = codec::decode_pages(&frame.payload)
                    .map_err(|why| Error::corrupt(path, format!("frame at byte {at}: {why}")))?;
                sink.pages(&chunk)?;
            }
            frame_type::ELF => {
                let e: ElfFile = decode(path, at, "elf", &frame.payload)?;
                sink.elf(&e)?;
            }
            frame_type::PHYSMAP => {
                let c: PhysChunk = decode(path, at, "physical map", &frame.payload)?;
                sink.physmap(&c)?;
            }
            frame_type::END => {
                let t: Trailer = decode(path, at, "end", &frame.payload)?;
                sink.finish(&t)?;
                return Ok(Completeness::Complete);
            }
            _ => {} // A newer frame type: skip it.
        }
    }
}
