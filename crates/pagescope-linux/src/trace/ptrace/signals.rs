//! SIGINT and SIGTERM as a stop request: the tracer's thread catches
//! them (its `waitpid` returns `EINTR`), other threads block them.

#![allow(unsafe_code)]

use nix::sys::signal::{self, Signal};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs SIGINT and SIGTERM handlers that set [`stop_requested`]
/// without `SA_RESTART`, so the calling thread's blocking `waitpid`
/// returns `EINTR`. Other threads should block both signals.
pub fn catch_stop_signals() -> io::Result<()> {
    let action = signal::SigAction::new(
        signal::SigHandler::Handler(on_stop_signal),
        signal::SaFlags::empty(),
        signal::SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { signal::sigaction(sig, &action) }.map_err(io::Error::from)?;
    }
    Ok(())
}

/// Asks the tracer to stop, as SIGINT would.
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}

/// Whether SIGINT or SIGTERM arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Runs `f` with SIGINT and SIGTERM blocked, so threads it spawns inherit
/// the block and the signals reach the calling thread.
pub fn with_stop_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    let mut set = signal::SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    let _ = signal::pthread_sigmask(signal::SigmaskHow::SIG_BLOCK, Some(&set), None);
    let out = f();
    let _ = signal::pthread_sigmask(signal::SigmaskHow::SIG_UNBLOCK, Some(&set), None);
    out
}
