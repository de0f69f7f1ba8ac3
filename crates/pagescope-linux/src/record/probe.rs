//! What the recorder asks of a backend.

use pagescope_core::record::{Backend, Granularity, Interval, WriteSource};
use pagescope_core::{Error, Result};

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
    /// Launches the command, or attaches the one process of `--pid`,
    /// for a backend that must follow the program itself; returns its
    /// pid. `None`: the backend does not (the recorder launches a
    /// command).
    fn follow(&mut self, _what: &crate::trace::Target) -> Option<Result<u32>> {
        None
    }
    /// For a backend that follows the program: whether it still runs.
    /// Its children are the backend's: the recorder never waits for them.
    fn launched(&mut self) -> Launched {
        Launched::Running
    }
    /// For a backend that follows the program: stops following it, so
    /// that it runs on unrecorded (or says that it has exited).
    fn let_go(&mut self) -> Launched {
        Launched::LetGo
    }
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
