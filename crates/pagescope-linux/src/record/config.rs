//! What a recording is asked to do, and what it gives back: the API of
//! [`super::record`].

use super::backend::damon::DamonSettings;
use pagescope_core::record::{Backend, RecordEnd, RecordHeader};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// What to record.
#[derive(Clone, Debug)]
pub enum Target {
    /// Running processes.
    Pids(Vec<u32>),
    /// The processes of a cgroup directory.
    Cgroup(PathBuf),
    /// Every process.
    System,
    /// Launch this command and record it and its descendants.
    Command(Vec<String>),
}

/// Which backend to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The best one this kernel has for the target.
    Auto,
    /// This one.
    Use(Backend),
}

/// A recording's settings.
#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// What to record.
    pub target: Target,
    /// Interval length.
    pub interval: Duration,
    /// Block size (a power of two, at least a page).
    pub block: u64,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Backend choice.
    pub backend: Choice,
    /// Stop the targets while a two-pass backend reads and clears.
    pub freeze: bool,
    /// Output file.
    pub output: PathBuf,
    /// DAMON's settings (the `damon` backend).
    pub damon: DamonSettings,
    /// The fraction of resident pages the `fault` backend moves out at
    /// each boundary (in (0, 1]).
    pub sample: f64,
    /// Where `/proc` and `/sys` are.
    pub root: crate::Root,
}

/// Figures for the live line, updated at every boundary.
#[derive(Debug, Default)]
pub struct Live {
    /// Intervals written.
    pub intervals: AtomicU64,
    /// Pages referenced in the last interval.
    pub referenced: AtomicU64,
    /// Recorder CPU in the last interval, per mille of one core.
    pub cpu_permille: AtomicU64,
    /// Bytes written.
    pub bytes: AtomicU64,
}

/// How a recording went.
#[derive(Debug)]
pub struct RecordOutcome {
    /// The header written.
    pub header: RecordHeader,
    /// The end record written.
    pub end: RecordEnd,
    /// Bytes written.
    pub bytes: u64,
    /// The launched command's exit code.
    pub exit_code: Option<i32>,
    /// The launched command, if it still ran when the recording ended
    /// (`--duration`, Ctrl-C): the file is complete, and the command's
    /// exit code comes from [`wait_launched`](super::wait_launched).
    pub runs_on: Option<u32>,
}

pub use pagescope_core::record::DENIED_MISSING;
