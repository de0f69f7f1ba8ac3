//! Small wrappers of the system that the tracer's threads share: the
//! monotonic clock, `poll`, CPU affinity, the `mmap`/`prctl`/`madvise`
//! constants of injected calls, and the error of a failed system call.

use pagescope_core::{Error, Result};
use rustix::thread::{sched_setaffinity, CpuSet};

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
pub(super) fn pin(tid: u32, cpu: usize) -> Result<()> {
    let bad = |e: rustix::io::Errno| Error::Unsupported {
        what: format!("--cpu {cpu}"),
        needs: format!(
            "one of the CPUs this process may run on: {} ({e})",
            allowed_cpus()
        ),
    };
    if cpu >= CpuSet::MAX_CPU {
        return Err(bad(rustix::io::Errno::INVAL));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    let tid = i32::try_from(tid).map_err(|_| bad(rustix::io::Errno::SRCH))?;
    sched_setaffinity(rustix::process::Pid::from_raw(tid), &set).map_err(bad)
}

/// The CPUs this thread may run on.
pub(super) fn cpus() -> Vec<usize> {
    crate::system::allowed_cpus()
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
