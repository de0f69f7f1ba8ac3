//! Ctrl-C and SIGTERM as requests to stop, for the commands that stop
//! where they choose (`record`, `snapshot`): the signals are blocked in
//! every thread, stay pending, and are taken where the work can end
//! cleanly, in `sigtimedwait` between a recorder's boundaries, or by
//! asking whether one is pending between a snapshot's reads. (`trace`
//! catches them with handlers instead: its tracer must be woken out of
//! `waitpid`.)

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use std::time::Duration;

/// The signals that ask to stop, and SIGCHLD, which wakes a recorder when
/// the command it launched exits.
const WAITED: [Signal; 3] = [Signal::SIGCHLD, Signal::SIGINT, Signal::SIGTERM];

fn wait_set() -> SigSet {
    let mut set = SigSet::empty();
    for s in WAITED {
        set.add(s);
    }
    set
}

/// Blocks SIGCHLD, SIGINT and SIGTERM in the calling thread (and threads
/// it starts later, so call it before any), so that they wait to be taken
/// by [`wait`] or seen by [`stop_pending`]. Launched commands start with
/// an empty mask.
pub fn block() -> std::io::Result<()> {
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&wait_set()), None)
        .map_err(std::io::Error::from)
}

/// Waits for one of the blocked signals until `timeout`, and takes it;
/// `None` on timeout.
pub fn wait(timeout: Duration) -> Option<Signal> {
    let set = WAITED.map(|s| s as i32);
    pagescope_sys::signals::timed_wait(&set, timeout).and_then(|s| Signal::try_from(s).ok())
}

/// Whether SIGINT or SIGTERM is pending (blocked by [`block`], it stays
/// so: asking again says yes again). Cheap: one system call.
pub fn stop_pending() -> bool {
    pagescope_sys::signals::any_pending(&[Signal::SIGINT as i32, Signal::SIGTERM as i32])
}

/// Whether a signal [`wait`] took asks to stop: SIGINT (Ctrl-C) or
/// SIGTERM, not SIGCHLD.
pub fn is_stop(signal: Signal) -> bool {
    matches!(signal, Signal::SIGINT | Signal::SIGTERM)
}

/// Whether a signal [`wait`] took is SIGINT (Ctrl-C), whose exit code is
/// 130 by the shell's convention.
pub fn is_interrupt(signal: Signal) -> bool {
    signal == Signal::SIGINT
}
