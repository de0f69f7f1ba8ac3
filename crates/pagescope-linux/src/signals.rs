//! Ctrl-C and SIGTERM as requests to stop, for the commands that stop
//! where they choose (`record`, `snapshot`): the signals are blocked in
//! every thread, stay pending, and are taken where the work can end
//! cleanly, in `sigtimedwait` between a recorder's boundaries, or by
//! asking whether one is pending between a snapshot's reads. (`trace`
//! catches them with handlers instead: its tracer must be woken out of
//! `waitpid`.)
#![allow(unsafe_code)]

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use std::time::Duration;

/// The signals that ask to stop, and SIGCHLD, which wakes a recorder when
/// the command it launched exits.
fn wait_set() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
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
    let set = wait_set();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: both pointers are valid for the call; a null siginfo is allowed.
    let r = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
    Signal::try_from(r).ok()
}

/// Whether SIGINT or SIGTERM is pending (blocked by [`block`], it stays
/// so: asking again says yes again). Cheap: one system call.
pub fn stop_pending() -> bool {
    // SAFETY: sigpending fills the set it is given (sigpending(2)), which
    // sigismember then reads; both are valid for the calls.
    unsafe {
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending) == 0
            && (libc::sigismember(&pending, libc::SIGINT) == 1
                || libc::sigismember(&pending, libc::SIGTERM) == 1)
    }
}
