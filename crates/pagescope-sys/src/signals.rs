//! Signals: blocking them in a thread (pthread_sigmask(3)), waiting for
//! blocked ones and asking which are pending (sigtimedwait(2),
//! sigpending(2)), and catching some into one flag (sigaction(2)).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The set of the signals `signals` (numbers such as `libc::SIGINT`).
fn set_of(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the zeroed set; sigaddset adds to
    // it (an invalid number fails with EINVAL and changes nothing).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Waits until `timeout` for one of `signals`, which the calling thread
/// has blocked, and takes it: its number, or `None` on timeout (or
/// interruption by another signal).
pub fn timed_wait(signals: &[i32], timeout: Duration) -> Option<i32> {
    let set = set_of(signals);
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: both pointers are valid for the call; a null siginfo is allowed.
    let r = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    (r > 0).then_some(r)
}

/// Whether one of `signals` is pending for the calling thread or the
/// process (blocked signals stay pending until taken).
pub fn any_pending(signals: &[i32]) -> bool {
    // SAFETY: sigpending fills the set it is given (sigpending(2)), which
    // sigismember then reads; both are valid for the calls.
    unsafe {
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending) == 0
            && signals.iter().any(|&s| libc::sigismember(&pending, s) == 1)
    }
}

/// Blocks `signals` in the calling thread (`block`), or unblocks them;
/// threads it starts later inherit its mask.
pub fn block_in_thread(signals: &[i32], block: bool) -> io::Result<()> {
    let set = set_of(signals);
    let how = if block {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: `set` is a valid set for the call; the old mask is not asked
    // for (null).
    match unsafe { libc::pthread_sigmask(how, &set, std::ptr::null_mut()) } {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// The flag that the handlers installed by [`catch_to_flag`] raise.
static CAUGHT: AtomicBool = AtomicBool::new(false);

extern "C" fn raise_on_signal(_: libc::c_int) {
    CAUGHT.store(true, Ordering::SeqCst);
}

/// Installs, for each of `signals`, a handler that only raises one flag
/// ([`flag_raised`]), without `SA_RESTART`: a blocking system call of the
/// thread that takes the signal returns `EINTR`.
pub fn catch_to_flag(signals: &[i32]) -> io::Result<()> {
    for &sig in signals {
        // SAFETY: an all-zero sigaction is a valid value (no flags, an
        // empty mask once sigemptyset has run).
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = raise_on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: the mask is part of `action`, valid for the call.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: the handler only stores to an atomic (async-signal-safe);
        // `action` is valid for the call and the old action is not asked
        // for.
        if unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Raises the flag of [`catch_to_flag`], as a caught signal would.
pub fn raise_flag() {
    CAUGHT.store(true, Ordering::SeqCst);
}

/// Whether the flag of [`catch_to_flag`] is raised.
pub fn flag_raised() -> bool {
    CAUGHT.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blocked signal sent to this thread is pending, then taken by the
    /// wait; with none pending the wait times out.
    #[test]
    fn blocked_signal_is_pending_then_taken() {
        // SAFETY: blocking SIGUSR2 in this test thread only.
        unsafe {
            let set = set_of(&[libc::SIGUSR2]);
            assert_eq!(
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()),
                0
            );
            assert!(!any_pending(&[libc::SIGUSR2]));
            assert_eq!(libc::pthread_kill(libc::pthread_self(), libc::SIGUSR2), 0);
        }
        assert!(any_pending(&[libc::SIGUSR2]));
        assert!(!any_pending(&[libc::SIGUSR1]));
        assert_eq!(
            timed_wait(&[libc::SIGUSR2], Duration::from_millis(100)),
            Some(libc::SIGUSR2)
        );
        assert!(!any_pending(&[libc::SIGUSR2]));
        assert_eq!(
            timed_wait(&[libc::SIGUSR2], Duration::from_millis(10)),
            None
        );
    }
}
