//! The data model of a page-reference trace (`pagescope trace`).
//!
//! A trace is the list of references that missed the tracer's pool of
//! resident pages, in the order the tracer saw them: the first touch of a
//! page, and every touch of a page after it was evicted from the pool. A
//! write to a page that was brought in by a read is a reference of its own.

use serde::{Deserialize, Serialize};

/// How evicted pages leave the traced address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EvictMethod {
    /// `UFFDIO_MOVE` into a store area inside the target: no copy.
    Move,
    /// Copied out and dropped, copied back on the fault.
    Copy,
}

/// The first record of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceHeader {
    /// Bytes per page.
    pub page_size: u64,
    /// Pages in the pool.
    pub pool_pages: u64,
    /// Pool replacement policy ("fifo").
    pub policy: String,
    /// How pages are evicted.
    pub evict: EvictMethod,
    /// The traced command line, or the attached process's.
    #[serde(deserialize_with = "crate::format::limits::args")]
    pub command: Vec<String>,
    /// Wall-clock start, nanoseconds since the Unix epoch; reference times
    /// are nanoseconds after it.
    pub start_unix_ns: u64,
    /// The same moment on `CLOCK_MONOTONIC`, to line references up with
    /// the traced program's own timestamps.
    pub start_monotonic_ns: u64,
    /// `uname -r` of the machine.
    pub kernel: String,
    /// What the trace does not hold, in words (file mappings).
    pub untraced: String,
    /// The machine and boot it was made on, stored in an origin frame of
    /// its own after the header (see [`crate::model::Origin`]); `None`
    /// in files written before it.
    #[serde(skip)]
    pub origin: Option<crate::model::Origin>,
}

/// What kind of memory a mapping is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MappingKind {
    /// Private anonymous memory (mmap).
    Anonymous,
    /// The brk heap.
    Heap,
    /// A stack.
    Stack,
    /// Shared memory (shmem, memfd); the same inode in two processes is one
    /// object.
    Shared,
    /// A regular file: not traced; its residency is reported instead.
    File,
}

impl MappingKind {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            MappingKind::Anonymous => "anon",
            MappingKind::Heap => "heap",
            MappingKind::Stack => "stack",
            MappingKind::Shared => "shared",
            MappingKind::File => "file",
        }
    }
}

/// One mapping of a traced process. A mapping that moves (`mremap`) is
/// recorded again with the same id; the last record wins.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    /// Id used by references.
    pub id: u32,
    /// Process.
    pub pid: u32,
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `rwxp`.
    pub perms: String,
    /// File offset.
    pub offset: u64,
    /// Path or pseudo-name (`[heap]`, `[stack]`), empty for anonymous.
    pub path: String,
    /// Inode (shared memory and files).
    pub inode: u64,
    /// Device of the inode (shared memory and files), `major << 32 |
    /// minor` as maps shows it: inode numbers are per file system, so a
    /// shared page is known by both. 0 in traces written before it was
    /// recorded.
    pub dev: u64,
    /// Kind.
    pub kind: MappingKind,
    /// References to it are traced.
    pub traced: bool,
}

/// Something that happened to a traced process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProcessEventKind {
    /// Tracing of this process began.
    Start {
        /// Its command line.
        #[serde(deserialize_with = "crate::format::limits::args")]
        command: Vec<String>,
    },
    /// It was created by `fork` of `parent`.
    Fork {
        /// The parent.
        parent: u32,
    },
    /// It ran `execve`: a new address space.
    Exec {
        /// The new command line.
        #[serde(deserialize_with = "crate::format::limits::args")]
        command: Vec<String>,
    },
    /// It exited (code) or was killed (negative signal number).
    Exit {
        /// Exit code, or minus the signal.
        status: i32,
    },
}

/// A process event with its time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessEvent {
    /// Nanoseconds after the trace start.
    pub time_ns: u64,
    /// The process.
    pub pid: u32,
    /// What happened.
    pub kind: ProcessEventKind,
}

/// Resident pages of an untraced (file) mapping, read from pagemap when
/// the process exits or the trace ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Residency {
    /// The mapping.
    pub mapping: u32,
    /// Pages of the mapping.
    pub pages: u64,
    /// Of those, resident.
    pub resident: u64,
}

/// One logged reference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ref {
    /// Nanoseconds after the trace start.
    pub time_ns: u64,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Page-aligned virtual address.
    pub addr: u64,
    /// A write.
    pub write: bool,
    /// [`Mapping::id`].
    pub mapping: u32,
}

/// The last record of a complete trace: the tracer's own counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEnd {
    /// References logged.
    pub references: u64,
    /// Pages evicted from the pool.
    pub evictions: u64,
    /// Pages the kernel would not let the tracer evict (shared with another
    /// process after fork, or in a mapping whose protection differs from
    /// the store's): they stayed mapped, and later touches of them were not
    /// seen until they were written.
    pub unevictable: u64,
    /// Why the trace ended.
    pub reason: EndReason,
    /// What else is to be known about its end, in order.
    #[serde(deserialize_with = "crate::format::limits::notes")]
    pub notes: Vec<EndNote>,
}

impl TraceEnd {
    /// The reason followed by the notes, as one line (`exited; no page
    /// reference was caught ...`): what version 1 of the format stored.
    pub fn why(&self) -> String {
        crate::end_line(&self.reason, &self.notes)
    }
}

/// Why a trace ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    /// The traced programs exited.
    #[default]
    Exited,
    /// SIGINT or SIGTERM: the program was detached, its pages put back,
    /// and it runs on.
    Interrupted,
    /// The tracer failed and let the program run on untraced: the error's
    /// message.
    Error(String),
    /// A reason of a version-1 trace that none of the others matches, as
    /// written.
    Other(String),
}

impl std::fmt::Display for EndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndReason::Exited => f.write_str("exited"),
            EndReason::Interrupted => {
                f.write_str("interrupted: the program was detached and runs on")
            }
            EndReason::Error(e) => write!(f, "stopped by an error: {e}"),
            EndReason::Other(s) => f.write_str(s),
        }
    }
}

/// Something to know about how a trace ended, besides its reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndNote {
    /// Not one reference was caught: the trace is empty, which must not
    /// read as a clean result.
    NoReference,
    /// A note of a version-1 trace that none of the others matches, as
    /// written.
    Other(String),
}

impl std::fmt::Display for EndNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndNote::NoReference => f.write_str(
                "no page reference was caught (the program touched no traced page, or \
                 something else held its pages: another userfaultfd, mlock)",
            ),
            EndNote::Other(s) => f.write_str(s),
        }
    }
}

/// Descriptor numbers [`descriptor_floor`] never goes above: a process's
/// descriptor table grows to hold its highest number (and never shrinks),
/// so a program with a soft limit of a million would otherwise carry an
/// 8 MiB table for the sake of one descriptor.
pub const DESCRIPTOR_CAP: u64 = 4096;

/// Where a descriptor that pagescope keeps inside a traced program goes:
/// the lowest free number at or above this one, for a program whose
/// `RLIMIT_NOFILE` soft limit is `soft_limit` (`None`: unlimited). Each
/// `open`, `pipe` or `dup` of the program takes the lowest free number,
/// so a descriptor up there leaves every number the program would get
/// untraced to the program. It is under the limit (which descriptor
/// numbers must be, when made), some way below it: room for a program
/// that puts a descriptor of its own there, near the top. 0 where the
/// limit leaves no room at all.
pub fn descriptor_floor(soft_limit: Option<u64>) -> u64 {
    let top = soft_limit.unwrap_or(u64::MAX).min(DESCRIPTOR_CAP);
    top.saturating_sub((top / 16).clamp(1, 64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_go_high_under_the_limit() {
        assert_eq!(descriptor_floor(Some(1024)), 960);
        assert_eq!(descriptor_floor(Some(524288)), 4032);
        assert_eq!(descriptor_floor(None), 4032);
        assert_eq!(descriptor_floor(Some(64)), 60);
        assert_eq!(descriptor_floor(Some(10)), 9);
        assert_eq!(descriptor_floor(Some(0)), 0);
        for soft in 1..5000 {
            let floor = descriptor_floor(Some(soft));
            assert!(floor < soft && floor >= soft.min(DESCRIPTOR_CAP) * 15 / 16);
        }
    }
}
