//! The CPU-time clock of another process: how much CPU all its threads
//! (those alive and those that exited) have used, in nanoseconds.
//!
//! `clock_getcpuclockid(3)` names this clock by pid; the kernel encodes
//! it as `MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)`
//! (include/linux/posix-timers_types.h: `((~pid) << 3) | 2`), which this
//! module builds itself so that one `clock_gettime` is the whole read
//! (glibc's `clock_getcpuclockid` first checks the pid with a
//! `clock_getres`). The kernel sums the thread group's
//! `sum_exec_runtime` (kernel/time/posix-cpu-timers.c,
//! `cpu_clock_sample_group`); reading it needs no privilege beyond
//! seeing the pid.

use std::io;

/// `CPUCLOCK_SCHED`: the scheduler's run time, in nanoseconds.
const CPUCLOCK_SCHED: i32 = 2;

/// The run time of process `pid`'s thread group so far, in nanoseconds.
/// ESRCH (or EINVAL) if there is no such process.
pub fn process_run_time_ns(pid: u32) -> io::Result<u64> {
    // The encoding keeps 29 bits of the pid; pids stop at 2^22
    // (PID_MAX_LIMIT).
    if pid >= 1 << 28 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    let pid = pid as i32;
    let clock: libc::clockid_t = (!pid).wrapping_shl(3) | CPUCLOCK_SCHED;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration;
    // the clock id is an integer the kernel validates itself.
    let r = unsafe { libc::clock_gettime(clock, &mut ts) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_clock_is_the_process_cpu_clock() {
        // Burn a little CPU so that the clock has moved.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let own = |id| {
            let t = rustix::time::clock_gettime(id);
            t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
        };
        let before = own(rustix::time::ClockId::ProcessCPUTime);
        let read = process_run_time_ns(std::process::id()).unwrap();
        let after = own(rustix::time::ClockId::ProcessCPUTime);
        assert!(before <= read && read <= after, "{before} {read} {after}");
        assert!(read > 0);
    }

    #[test]
    fn no_such_process() {
        // pid_max is at most 2^22 (PID_MAX_LIMIT): no process has the
        // pid above it, which the encoding still holds.
        assert!(process_run_time_ns((1 << 22) + 1).is_err());
        assert!(process_run_time_ns(1 << 30).is_err());
    }
}
