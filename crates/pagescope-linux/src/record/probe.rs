//! What the recorder asks of a backend: every backend is a [`Probe`]; one
//! that follows the program itself (launches the command, or attaches the
//! process, and sees its exit) is a [`Follow`] too.

use pagescope_core::record::{Backend, Granularity, Interval, WriteSource};
use pagescope_core::{Error, Result};
use std::time::Instant;

/// A source of reference bits.
pub trait Probe {
    /// Which backend this is.
    fn backend(&self) -> Backend;
    /// How finely its rows place references.
    fn granularity(&self) -> Granularity;
    /// Where its written counts come from.
    fn writes(&self) -> WriteSource;
    /// Whether reading and clearing are two passes, so that the targets
    /// must be stopped between them for no reference to be lost.
    fn needs_freeze(&self) -> bool;
    /// Clears the reference bits of `pids`: an interval begins.
    fn reset(&mut self, pids: &[u32]) -> Result<()>;
    /// Adds what `pids` referenced since the last reset or collect to
    /// `out`, and clears the bits again for the next interval.
    fn collect(&mut self, pids: &[u32], out: &mut Interval) -> Result<()>;
    /// Whether a process that exits between boundaries can be collected
    /// on its way out ([`Probe::collect`] of it alone, its rows added to
    /// the interval's): a backend whose rows are its own per process.
    fn collects_at_exit(&self) -> bool {
        false
    }
    /// Whether [`Probe::reset`] of one process between boundaries leaves
    /// what every other process referenced alone, so that a process can
    /// be reset where it starts (at its fork or exec, before its first
    /// instruction) rather than at the next boundary: a backend whose bits
    /// are the process's own page-table entries, not the page frames it
    /// shares with its parent.
    fn resets_alone(&self) -> bool {
        false
    }
    /// When the interval just collected ended, for a backend that cuts
    /// it at one instant of its own inside [`Probe::collect`] (the fault
    /// backend holds faults there): what came in until then is in the
    /// interval, whatever came later is in the next. `None` where the
    /// cut is the recorder's, taken before collecting.
    fn cut(&self) -> Option<Instant> {
        None
    }
    /// The processes whose written pages this backend could not track
    /// (their main thread had exited: [`crate::record::writes`]), for the
    /// end record's notes.
    fn writes_untracked(&self) -> Vec<u32> {
        Vec::new()
    }
    /// What the backend does not see of the targets' memory, for the
    /// header's notes, where it says so itself.
    fn coverage_note(&self) -> Option<String> {
        None
    }
    /// The backend as one that follows the program itself, if it is one
    /// (otherwise the recorder launches a command).
    fn follower(&mut self) -> Option<&mut dyn Follow> {
        None
    }
}

/// A backend that follows the program itself. Its children are the
/// backend's: the recorder never waits for them.
pub trait Follow {
    /// Launches the command, or attaches the one process of `--pid`;
    /// returns its pid.
    fn follow(&mut self, what: &Followed) -> Result<u32>;
    /// Whether the program still runs.
    fn launched(&mut self) -> Launched;
    /// Stops following the program, so that it runs on unrecorded (or
    /// says that it has exited).
    fn let_go(&mut self) -> Launched;
}

/// What a [`Follow`] backend follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Followed {
    /// A command (program and arguments) it launches.
    Launch(Vec<String>),
    /// A running process it attaches.
    Attach(u32),
}

/// The state of a command a backend launched.
#[derive(Debug)]
pub enum Launched {
    /// It runs, followed by the backend.
    Running,
    /// It exited with this code (128 + signal if killed).
    Exited(i32),
    /// The backend let it go (Ctrl-C or SIGTERM): it runs on.
    LetGo,
    /// The backend failed, and let it go.
    Failed(Error),
}
