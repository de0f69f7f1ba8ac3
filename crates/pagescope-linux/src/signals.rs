//! Ctrl-C and SIGTERM as requests to stop, for the commands that stop
//! where they choose (`record`, `snapshot`): the signals are blocked in
//! every thread, stay pending, and are taken where the work can end
//! cleanly, in `sigtimedwait` between a recorder's boundaries, or by
//! asking whether one is pending between a snapshot's reads. (`trace`
//! catches them with handlers instead: its tracer must be woken out of
//! `waitpid`.)

use rustix::process::Signal;
use std::time::Duration;

/// The signals that ask to stop, and SIGCHLD, which wakes a recorder when
/// the command it launched exits.
const WAITED: [Signal; 3] = [Signal::CHILD, Signal::INT, Signal::TERM];

/// Blocks SIGCHLD, SIGINT and SIGTERM in the calling thread (and threads
/// it starts later, so call it before any), so that they wait to be taken
/// by [`wait`] or seen by [`stop_pending`]. Launched commands start with
/// an empty mask.
pub fn block() -> std::io::Result<()> {
    pagescope_sys::signals::block_in_thread(&WAITED.map(Signal::as_raw), true)
}

/// Waits for one of the blocked signals until `timeout`, and takes it;
/// `None` on timeout.
pub fn wait(timeout: Duration) -> Option<Signal> {
    let set = WAITED.map(Signal::as_raw);
    pagescope_sys::signals::timed_wait(&set, timeout).and_then(Signal::from_named_raw)
}

/// Whether SIGINT or SIGTERM is pending (blocked by [`block`], it stays
/// so: asking again says yes again). Cheap: one system call.
pub fn stop_pending() -> bool {
    pagescope_sys::signals::any_pending(&[Signal::INT.as_raw(), Signal::TERM.as_raw()])
}

/// Whether a signal [`wait`] took asks to stop: SIGINT (Ctrl-C) or
/// SIGTERM, not SIGCHLD.
pub fn is_stop(signal: Signal) -> bool {
    matches!(signal, Signal::INT | Signal::TERM)
}

/// Whether a signal [`wait`] took is SIGINT (Ctrl-C), whose exit code is
/// 130 by the shell's convention.
pub fn is_interrupt(signal: Signal) -> bool {
    signal == Signal::INT
}
