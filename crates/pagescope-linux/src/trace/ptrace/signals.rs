//! SIGINT and SIGTERM as a stop request: the tracer's thread catches
//! them (its `waitpid` returns `EINTR`), other threads block them.

use pagescope_sys::signals as sig;
use rustix::process::Signal;
use std::io;

const STOP_SIGNALS: [i32; 2] = [Signal::INT.as_raw(), Signal::TERM.as_raw()];

/// Installs SIGINT and SIGTERM handlers that set [`stop_requested`]
/// without `SA_RESTART`, so the calling thread's blocking `waitpid`
/// returns `EINTR`. Other threads should block both signals.
pub fn catch_stop_signals() -> io::Result<()> {
    sig::catch_to_flag(&STOP_SIGNALS)
}

/// Asks the tracer to stop, as SIGINT would.
pub fn request_stop() {
    sig::raise_flag();
}

/// Whether SIGINT or SIGTERM arrived.
pub fn stop_requested() -> bool {
    sig::flag_raised()
}

/// Runs `f` with SIGINT and SIGTERM blocked, so threads it spawns inherit
/// the block and the signals reach the calling thread.
pub fn with_stop_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    let _ = sig::block_in_thread(&STOP_SIGNALS, true);
    let out = f();
    let _ = sig::block_in_thread(&STOP_SIGNALS, false);
    out
}

/// The name of `sig` if it is the signal of a fault (`SIGSEGV`,
/// `SIGBUS`, `SIGILL`, `SIGFPE`): what a thread running injected code
/// stops with when that code goes wrong.
pub fn fault_name(sig: i32) -> Option<&'static str> {
    [
        (Signal::SEGV, "SIGSEGV"),
        (Signal::BUS, "SIGBUS"),
        (Signal::ILL, "SIGILL"),
        (Signal::FPE, "SIGFPE"),
    ]
    .into_iter()
    .find(|(s, _)| s.as_raw() == sig)
    .map(|(_, name)| name)
}
