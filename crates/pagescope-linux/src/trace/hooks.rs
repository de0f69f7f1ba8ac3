//! Places where a test can make pagescope kill itself or change a timing
//! (`PAGESCOPE_DIE_IN_INJECTION`, `PAGESCOPE_SPIN_US`). They exist only
//! with the cargo feature `test-hooks` (on in the binary's test builds);
//! without it each hook does nothing and its variable is never read.

use std::time::Duration;

/// Fault injection for the tests of `--release`: with
/// `PAGESCOPE_DIE_IN_INJECTION=WHERE` in its environment (`attach`: about
/// to set up an address space, nothing put into it yet; `vdso`: setting
/// up an exec'd image, parked at the vDSO's bootstrap; `exec`: the same,
/// later, parked at the mover's page; `fork`: a forked child; `mover`: a
/// forked child, once its mover is cloned and before it is attached;
/// `move`: moving a forked child's registrations to its own descriptor;
/// `exec-done`: an exec's set-up done, its mover not yet attached;
/// `write-tracking`: making the userfaultfd of a recorded process's write
/// tracking), pagescope kills itself there, in the middle of an
/// injection, once; `WHERE:N` the Nth time it gets there. (`fork-entry`: at
/// the entry stop of a `fork`, no injection: the fork then waits on its
/// message, unread. `fork-message`: just after reading a fork's message,
/// whose descriptor only pagescope, and its holder, then hold.
/// `copied-back`: a page just copied back from the store, its thread
/// woken, its index entry not yet cleared.)
#[cfg(feature = "test-hooks")]
pub(super) fn die_here_for_tests(place: &str) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    static DONE: AtomicBool = AtomicBool::new(false);
    static SEEN: AtomicU64 = AtomicU64::new(0);
    let Some(want) = std::env::var_os("PAGESCOPE_DIE_IN_INJECTION") else {
        return;
    };
    let want = want.to_string_lossy();
    // `WHERE:N`: the Nth time there (the first by default).
    let (at, nth) = match want.split_once(':') {
        Some((at, n)) => (at, n.parse().unwrap_or(1)),
        None => (&*want, 1),
    };
    if at == place
        && SEEN.fetch_add(1, Ordering::SeqCst) + 1 == nth
        && !DONE.swap(true, Ordering::SeqCst)
    {
        let kill = rustix::process::Signal::KILL.as_raw();
        let _ = pagescope_sys::signals::kill(std::process::id(), kill);
    }
}

/// Without the test hooks: nothing.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(super) fn die_here_for_tests(_place: &str) {}

/// How long the fault thread looks for the next fault without sleeping
/// after serving one (`PAGESCOPE_SPIN_US`, microseconds).
#[cfg(feature = "test-hooks")]
pub(super) fn spin_time() -> Duration {
    let us = std::env::var("PAGESCOPE_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SPIN_US);
    Duration::from_micros(us)
}

/// Without the test hooks: [`SPIN_US`].
#[cfg(not(feature = "test-hooks"))]
pub(super) fn spin_time() -> Duration {
    Duration::from_micros(SPIN_US)
}

/// The default of [`spin_time`].
const SPIN_US: u64 = 100;
