//! Small wrappers of the system that the tracer's threads share: the
//! monotonic clock, `poll`, CPU affinity, the `mmap`/`prctl`/`madvise`
//! constants of injected calls, and the error of a failed system call.

use nix::errno::Errno;
use nix::unistd::Pid;
use pagescope_core::{Error, Result};

pub(super) fn sys(what: &str, e: impl Into<std::io::Error>) -> Error {
    Error::sys(what, e.into())
}

pub(super) fn now_mono() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Pins thread `tid` (0: this one) to `cpu`. A fault then costs two
/// context switches on that CPU, the program's thread going to sleep and
/// pagescope's fault thread waking (and back), instead of two wake-ups
/// of a thread on another CPU, which cost far more (an interrupt between
/// CPUs, and a CPU leaving its idle state; more again in a VM).
pub(super) fn pin(tid: Pid, cpu: usize) -> Result<()> {
    let mut set = nix::sched::CpuSet::new();
    let bad = |e: Errno| Error::Unsupported {
        what: format!("--cpu {cpu}"),
        needs: format!(
            "one of the CPUs this process may run on: {} ({e})",
            allowed_cpus()
        ),
    };
    set.set(cpu).map_err(bad)?;
    nix::sched::sched_setaffinity(tid, &set).map_err(bad)
}

/// The CPUs this thread may run on.
pub(super) fn cpus() -> Vec<usize> {
    nix::sched::sched_getaffinity(Pid::from_raw(0)).map_or_else(
        |_| Vec::new(),
        |set| {
            (0..nix::sched::CpuSet::count())
                .filter(|&c| set.is_set(c).unwrap_or(false))
                .collect()
        },
    )
}

/// [`cpus`] as a list, e.g. `0 1`.
fn allowed_cpus() -> String {
    cpus()
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) use pagescope_sys::poll::poll;

pub(super) use pagescope_sys::abi::{
    MADV_DONTNEED, MAP_ANONYMOUS, MAP_GROWSDOWN, MAP_NORESERVE, MAP_POPULATE, MAP_PRIVATE,
    MAP_SHARED, MAP_STACK, PR_SET_VMA, PR_SET_VMA_ANON_NAME,
};
