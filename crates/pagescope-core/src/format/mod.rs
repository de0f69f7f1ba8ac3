//! The recording format: a versioned stream of checksummed, compressed
//! frames, shared by snapshots, records and traces.
//!
//! ```text
//! file   = header frame* end-frame
//! header = magic[8] "\x89PGS\r\n\x1a\n" | version u16 | kind u16 | reserved u32
//! frame  = type u16 | flags u16 | stored_len u32 | raw_len u32 | crc32 u32 | payload
//! ```
//!
//! All integers are little-endian. The payload is a postcard-encoded
//! record, zstd-compressed when flag bit 0 is set; the CRC-32 covers the
//! first 12 bytes of the frame header and the stored payload. Each frame
//! is written with one `write` and compressed on its own, so a writer
//! killed at any moment leaves every earlier frame readable; a reader that
//! meets the end of the file before the end frame says the file was cut
//! short and returns what it read. The full description, with the record
//! layouts, is in `docs/format.md`.

mod codec;
mod frame;
pub mod limits;
mod maptable;
mod record;
mod refchunk;
mod snapshot;
mod trace;
mod v1;

pub use codec::{decode_pages, encode_pages, PageEncoder};
pub use frame::{Completeness, Frame, FrameReader, FrameWriter, Kind, ReadOutcome};
pub use maptable::MappingTable;
pub use record::{read_record, RecordVisitor, RecordWriter};
pub use refchunk::{
    decode_refs, decode_refs_folded, decode_refs_predicted, encode_refs, encode_refs_folded,
    encode_refs_predicted,
};
pub use snapshot::{read_snapshot, SnapshotWriter};
pub use trace::{read_trace, TraceVisitor, TraceWriter};

/// The 8 magic bytes that open every pagescope file. The high first byte
/// and the CR LF / ^Z / LF sequence catch files mangled by text transfer,
/// as PNG's signature does.
pub const MAGIC: [u8; 8] = *b"\x89PGS\r\n\x1a\n";

/// The newest format version of any kind of file this build writes
/// ([`Kind::version`] gives each kind's). Readers accept a kind's
/// versions up to its own and refuse newer ones with a message naming
/// both.
pub const VERSION: u16 = 2;

/// Frame types. Readers skip types they do not know, so new record kinds
/// can be added without breaking old readers.
pub mod frame_type {
    /// [`crate::model::SystemInfo`].
    pub const SYSTEM: u16 = 1;
    /// [`crate::model::ProcessRecord`].
    pub const PROCESS: u16 = 2;
    /// [`crate::model::PageChunk`], in the columnar encoding of
    /// [`super::encode_pages`].
    pub const PAGES: u16 = 3;
    /// [`crate::model::ElfFile`].
    pub const ELF: u16 = 4;
    /// [`crate::model::PhysChunk`].
    pub const PHYSMAP: u16 = 5;
    /// A [`crate::model::PageChunk`] of a process's hugetlb mappings,
    /// encoded as [`PAGES`]. Readers that predate it skip it (and show
    /// the snapshot without hugetlb pages, as it was before).
    pub const HUGETLB_PAGES: u16 = 6;
    /// Right after the system record (and its origin): the writer read
    /// the pages of hugetlb mappings ([`HUGETLB_PAGES`]), so that a
    /// snapshot without such frames has none, where one written before
    /// them has unknown hugetlb figures. An empty payload; older readers
    /// skip it.
    pub const HUGETLB_READ: u16 = 7;
    /// [`crate::trace::TraceHeader`]: the first frame of a trace.
    pub const TRACE_HEADER: u16 = 16;
    /// A [`crate::trace::Mapping`] without its `dev` (read, no longer
    /// written: see [`MAPPING_WITH_DEVICE`]).
    pub const MAPPING: u16 = 17;
    /// [`crate::trace::Mapping`].
    pub const MAPPING_WITH_DEVICE: u16 = 25;
    /// [`crate::trace::ProcessEvent`].
    pub const PROCESS_EVENT: u16 = 18;
    /// A chunk of [`crate::trace::Ref`]s with times in nanoseconds (read,
    /// no longer written: see [`REFS_IN_UNITS`]).
    pub const REFS: u16 = 19;
    /// A chunk of [`crate::trace::Ref`]s in the columnar encoding of
    /// [`super::encode_refs`], times in a unit the chunk names.
    pub const REFS_IN_UNITS: u16 = 24;
    /// A chunk of references as [`REFS_IN_UNITS`], each mapping id stored
    /// as its difference from the one the mappings written before it
    /// predict ([`super::encode_refs_predicted`]); traces of version 3.
    pub const REFS_PREDICTED: u16 = 28;
    /// Mapping records written together (a list of what
    /// [`MAPPING_WITH_DEVICE`] holds one of); traces of version 3.
    pub const MAPPINGS: u16 = 29;
    /// Residency records written together (a list of what [`RESIDENCY`]
    /// holds one of); traces of version 3.
    pub const RESIDENCIES: u16 = 30;
    /// A chunk of references as [`REFS_PREDICTED`], each write bit folded
    /// into its page column ([`super::encode_refs_folded`]); traces of
    /// version 4.
    pub const REFS_FOLDED: u16 = 31;
    /// [`crate::trace::Residency`].
    pub const RESIDENCY: u16 = 20;
    /// [`crate::record::RecordHeader`]: the first frame of a recording.
    pub const RECORD_HEADER: u16 = 21;
    /// [`crate::record::Interval`].
    pub const INTERVAL: u16 = 22;
    /// [`crate::record::ProcessInfo`].
    pub const PROCESS_INFO: u16 = 23;
    /// [`crate::record::Sampling`]: right after the record header, the
    /// fraction of pages the counts stand for (older recordings have
    /// none, and older readers skip it).
    pub const RECORD_SAMPLING: u16 = 26;
    /// [`crate::model::Origin`]: the machine and boot a file was written
    /// on, right after the first record (a recording's after its
    /// sampling frame). Files written before it have none, and older
    /// readers skip it.
    pub const ORIGIN: u16 = 27;
    /// The last frame of a complete file: [`crate::model::Trailer`] in a
    /// snapshot, [`crate::trace::TraceEnd`] in a trace,
    /// [`crate::record::RecordEnd`] in a recording.
    pub const END: u16 = 15;

    /// What a frame of `frame_type` holds, for messages.
    pub fn name(frame_type: u16) -> &'static str {
        match frame_type {
            SYSTEM => "system",
            PROCESS => "process",
            PAGES => "page chunk",
            HUGETLB_PAGES => "hugetlb page chunk",
            ELF => "ELF file",
            PHYSMAP => "physical map chunk",
            TRACE_HEADER => "trace header",
            MAPPING | MAPPING_WITH_DEVICE => "mapping",
            MAPPINGS => "mappings",
            RESIDENCIES => "residencies",
            PROCESS_EVENT => "process event",
            REFS | REFS_IN_UNITS | REFS_PREDICTED | REFS_FOLDED => "reference chunk",
            RESIDENCY => "residency",
            RECORD_HEADER => "record header",
            INTERVAL => "interval",
            PROCESS_INFO => "process",
            RECORD_SAMPLING => "sampling",
            ORIGIN => "origin",
            END => "end",
            _ => "unknown",
        }
    }
}
