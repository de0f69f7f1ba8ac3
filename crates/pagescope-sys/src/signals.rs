//! Signals: sending them to a process (kill(2)) or to one thread of this
//! process (tgkill(2), pthread_kill(3)), blocking them in a thread
//! (pthread_sigmask(3)), waiting for blocked ones and asking which are
//! pending (sigtimedwait(2), sigpending(2)), and catching some into one
//! flag (sigaction(2)). Signals are raw numbers (`libc::SIGINT`, or
//! rustix's `Signal::INT.as_raw()`), so that real-time ones pass too.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// `pid` as the `pid_t` of one process or thread: not 0 nor above
/// `i32::MAX`, which kill(2) would take for a process group or every
/// process.
fn one_pid(pid: u32) -> io::Result<libc::pid_t> {
    match libc::pid_t::try_from(pid) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    }
}

/// kill(2): sends `signal` to process `pid` (a thread id names its
/// process).
pub fn kill(pid: u32, signal: i32) -> io::Result<()> {
    let pid = one_pid(pid)?;
    // SAFETY: kill takes integers only.
    if unsafe { libc::kill(pid, signal) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// tgkill(2): sends `signal` to thread `tid` of this process (its id, as
/// gettid(2) gives it), and to no thread of another process. The thread
/// must live until the call: once it has exited, its id may name a newer
/// thread.
pub fn kill_thread(tid: u32, signal: i32) -> io::Result<()> {
    let tid = one_pid(tid)?;
    // SAFETY: tgkill takes integers only.
    let r = unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid() as libc::c_long,
            tid as libc::c_long,
            signal as libc::c_long,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// pthread_kill(3): sends `signal` to the thread of `thread`, which is not
/// joined while the handle lives (a thread that has finished gets
/// nothing, and no other thread gets it).
pub fn signal_thread<T>(thread: &std::thread::JoinHandle<T>, signal: i32) -> io::Result<()> {
    use std::os::unix::thread::JoinHandleExt;
    // SAFETY: the handle keeps the thread unjoined, so its pthread_t is
    // valid for the call (pthread_kill of a thread that has finished but
    // is not joined is allowed, and sends nothing).
    match unsafe { libc::pthread_kill(thread.as_pthread_t(), signal) } {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

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

/// The signal mask of the thread that first blocked signals here
/// ([`block_in_thread`]), as it was before: the mask this process was
/// given (pagescope blocks its signals in its first thread before any
/// other starts), which the programs it launches get back.
static GIVEN_MASK: OnceLock<libc::sigset_t> = OnceLock::new();

/// Blocks `signals` in the calling thread (`block`), or unblocks them;
/// threads it starts later inherit its mask. The first time it blocks,
/// the mask before is kept for the programs this process launches
/// ([`crate::clone::fork_exec_stopped`]).
pub fn block_in_thread(signals: &[i32], block: bool) -> io::Result<()> {
    let set = set_of(signals);
    let how = if block {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: an all-zero set is a valid place for the old mask.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid set for the call, `old` a valid place for
    // the old mask.
    match unsafe { libc::pthread_sigmask(how, &set, &mut old) } {
        0 => {
            if block {
                let _ = GIVEN_MASK.set(old);
            }
            Ok(())
        }
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// The mask a launched program starts with: the one this process was
/// given, or, if it never blocked a signal, the calling thread's.
pub(crate) fn launch_mask() -> libc::sigset_t {
    if let Some(&mask) = GIVEN_MASK.get() {
        return mask;
    }
    let mut now = set_of(&[]);
    // SAFETY: a null new set only asks for the current mask, into `now`.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now) };
    now
}

/// The flag that the handlers installed by [`catch_to_flag`] raise.
static CAUGHT: AtomicBool = AtomicBool::new(false);

/// The signals (bit `n - 1` for signal `n`) that this process was given
/// ignored and [`catch_to_flag`] then caught: a program it launches gets
/// them ignored again ([`launch_ignored`]), as it would have without
/// pagescope (a shell starts background jobs with SIGINT and SIGQUIT
/// ignored; a caught signal is reset to its default at exec).
static GIVEN_IGNORED: AtomicU64 = AtomicU64::new(0);

/// The signals a launched program starts ignored, besides those it
/// inherits ignored (see [`GIVEN_IGNORED`]).
pub(crate) fn launch_ignored() -> u64 {
    GIVEN_IGNORED.load(Ordering::SeqCst)
}

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
        // SAFETY: as `action`.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: the handler only stores to an atomic (async-signal-safe);
        // `action` and `old` are valid for the call.
        if unsafe { libc::sigaction(sig, &action, &mut old) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if old.sa_sigaction == libc::SIG_IGN && (1..=64).contains(&sig) {
            GIVEN_IGNORED.fetch_or(1 << (sig - 1), Ordering::SeqCst);
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

    /// A signal sent to a thread of this process (by its id or its
    /// handle), where it is blocked, is pending there, and taken.
    #[test]
    fn signals_reach_one_thread() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            block_in_thread(&[libc::SIGUSR1], true).unwrap();
            tx.send(rustix::thread::gettid().as_raw_pid() as i32)
                .unwrap();
            // One at a time: a second one pending would merge into the first.
            for _ in 0..2 {
                wait.recv().unwrap();
                let got = timed_wait(&[libc::SIGUSR1], Duration::from_secs(5));
                tx.send(got.unwrap_or(0)).unwrap();
            }
        });
        let tid = rx.recv().unwrap() as u32;
        kill_thread(tid, libc::SIGUSR1).unwrap();
        go.send(()).unwrap();
        assert_eq!(rx.recv().unwrap(), libc::SIGUSR1);
        signal_thread(&thread, libc::SIGUSR1).unwrap();
        go.send(()).unwrap();
        assert_eq!(rx.recv().unwrap(), libc::SIGUSR1);
        thread.join().unwrap();
        // Not one process, nor a thread.
        assert!(kill(0, libc::SIGUSR1).is_err() && kill(u32::MAX, 0).is_err());
        assert!(kill_thread(0, 0).is_err());
        // Signal 0 checks that the process is there.
        kill(std::process::id(), 0).unwrap();
    }

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
