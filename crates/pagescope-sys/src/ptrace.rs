//! ptrace requests that take no pointer into the tracee, for a tracer
//! that seizes threads (`PTRACE_SEIZE`) and restarts their stops.
//!
//! Requests and options are linux-raw-sys's. Signals are raw numbers,
//! so that real-time signals pass too.

use linux_raw_sys::ptrace as k;
use std::io;

pub use linux_raw_sys::ptrace::{
    PTRACE_EVENT_EXEC, PTRACE_EVENT_STOP, PTRACE_O_TRACECLONE, PTRACE_O_TRACEEXEC,
    PTRACE_O_TRACEFORK, PTRACE_O_TRACESYSGOOD, PTRACE_O_TRACEVFORK,
};

/// One request whose `addr` is unused and whose `data` is a number.
fn request(req: u32, tid: u32, data: usize) -> io::Result<i64> {
    // SAFETY: the requests made here (SEIZE, INTERRUPT, CONT, LISTEN,
    // DETACH) read no memory at `addr` (0) and take `data` as a number
    // (options or a signal); none writes into this process.
    let r = unsafe { libc::ptrace(req as _, tid as libc::pid_t, 0usize, data) };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

/// `PTRACE_SEIZE`: attaches thread `tid` without stopping it, with
/// `options` (`PTRACE_O_*`).
pub fn seize(tid: u32, options: u32) -> io::Result<()> {
    request(k::PTRACE_SEIZE, tid, options as usize).map(drop)
}

/// `PTRACE_INTERRUPT`: stops a seized thread (a `PTRACE_EVENT_STOP`).
pub fn interrupt(tid: u32) -> io::Result<()> {
    request(k::PTRACE_INTERRUPT, tid, 0).map(drop)
}

/// `PTRACE_CONT`: restarts a stopped thread, delivering `signal` (0 for
/// none).
pub fn cont(tid: u32, signal: i32) -> io::Result<()> {
    request(k::PTRACE_CONT, tid, signal as usize).map(drop)
}

/// `PTRACE_LISTEN`: leaves a thread in its job-control stop, while its
/// tracer still hears of its next stop or exit.
pub fn listen(tid: u32) -> io::Result<()> {
    request(k::PTRACE_LISTEN, tid, 0).map(drop)
}

/// `PTRACE_DETACH`: lets a stopped thread go, delivering `signal` (0 for
/// none).
pub fn detach(tid: u32, signal: i32) -> io::Result<()> {
    request(k::PTRACE_DETACH, tid, signal as usize).map(drop)
}

/// `PTRACE_GETEVENTMSG`: the message of the event a thread stopped at
/// (for `PTRACE_EVENT_EXEC`, the thread id it had before the exec).
pub fn event_message(tid: u32) -> io::Result<u64> {
    let mut msg: libc::c_ulong = 0;
    // SAFETY: GETEVENTMSG writes one unsigned long at `data`, which
    // points to `msg`, valid for the call.
    let r = unsafe {
        libc::ptrace(
            k::PTRACE_GETEVENTMSG as _,
            tid as libc::pid_t,
            0usize,
            &raw mut msg,
        )
    };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(msg as u64)
}
