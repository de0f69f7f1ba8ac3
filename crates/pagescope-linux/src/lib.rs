//! pagescope's Linux part: every system call and every read of `/proc`
//! and sysfs.
//!
//! Readers are named after what they read ([`procfs`], [`pagemap`],
//! [`kpage`], [`node`], [`system`]); [`snapshot`] drives them to produce a
//! snapshot stream into any [`pagescope_core::model::SnapshotSink`]. All
//! paths hang off a [`Root`], so tests can point the readers at a fixture
//! tree. Reads are batched: one `pread` per run of pagemap entries or page
//! frames, into reused buffers. Raw kernel calls (ioctls, ptrace, clone,
//! signal handlers) are `pagescope-sys`'s safe functions.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod cause;
pub mod cpuidle;
pub mod elf;
pub mod kpage;
pub mod launched;
pub mod node;
pub mod observer;
pub mod output;
pub mod pagemap;
pub mod physmap;
pub mod procfs;
pub mod record;
pub mod resume_latency;
pub mod shmem;
pub mod signals;
pub mod snapshot;
pub mod system;
#[cfg(target_arch = "x86_64")]
pub mod trace;

use std::path::PathBuf;

/// Where `/proc` and `/sys` are, and pagescope's run-time directory.
#[derive(Clone, Debug)]
pub struct Root {
    /// The procfs mount, normally `/proc`.
    pub proc: PathBuf,
    /// The sysfs mount, normally `/sys`.
    pub sys: PathBuf,
    /// What pagescope instances share while they run (locks, limits to
    /// give back), normally `/run/pagescope`.
    pub run: PathBuf,
}

impl Default for Root {
    fn default() -> Root {
        Root {
            proc: PathBuf::from("/proc"),
            sys: PathBuf::from("/sys"),
            run: PathBuf::from(observer::LOCK_DIR),
        }
    }
}

/// The entries of the sysfs directory `dir` named `prefix` and a number
/// (`node0`, `cpu3`, `state1`, `memory42`): each number with its path.
pub(crate) fn numbered(
    dir: &std::path::Path,
    prefix: &str,
) -> std::io::Result<Vec<(u64, PathBuf)>> {
    Ok(std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect())
}

/// Maps a rustix errno on `path` to pagescope's error type.
pub(crate) fn errno(path: impl Into<PathBuf>, e: rustix::io::Errno) -> pagescope_core::Error {
    pagescope_core::Error::io(path, std::io::Error::from(e))
}
