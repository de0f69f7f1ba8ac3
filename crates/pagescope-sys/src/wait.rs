//! Waiting for children and tracees (waitpid(2)), and decoding a wait
//! status: as the raw `int` the kernel gave (`WIFEXITED`,
//! `WEXITSTATUS`, ...), or as a [`Status`] that tells a tracer's stops
//! apart. Signals stay raw numbers, so that any signal passes (real-time
//! ones too).

use linux_raw_sys::general as k;
use rustix::process::{Pid, WaitOptions};

/// Whether the child exited (`WIFEXITED`).
fn exited(raw: i32) -> bool {
    libc::WIFEXITED(raw)
}

/// Its exit status (`WEXITSTATUS`), meaningful if [`exited`].
fn exit_status(raw: i32) -> i32 {
    libc::WEXITSTATUS(raw)
}

/// Whether a signal ended the child (`WIFSIGNALED`).
fn signaled(raw: i32) -> bool {
    libc::WIFSIGNALED(raw)
}

/// The signal that ended it (`WTERMSIG`), meaningful if [`signaled`].
fn term_signal(raw: i32) -> i32 {
    libc::WTERMSIG(raw)
}

/// Whether the child is stopped (`WIFSTOPPED`).
fn stopped(raw: i32) -> bool {
    libc::WIFSTOPPED(raw)
}

/// The signal of its stop (`WSTOPSIG`), meaningful if [`stopped`].
fn stop_signal(raw: i32) -> i32 {
    libc::WSTOPSIG(raw)
}

/// What a wait status reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The child exited, with this exit status.
    Exited(i32),
    /// A signal ended the child.
    Signaled(i32),
    /// Stopped, with this signal: a tracee's signal-delivery stop, or a
    /// job-control stop (`WUNTRACED`).
    Stopped(i32),
    /// A tracee stopped at a `PTRACE_EVENT_*` (see [`crate::ptrace::event`]),
    /// with the stop's signal (`SIGTRAP`, or the stopping signal of a group
    /// stop at `PTRACE_EVENT_STOP`).
    Event {
        /// The stop's signal.
        signal: i32,
        /// The event.
        event: i32,
    },
    /// A tracee at a system call stop (entry or exit), reported as
    /// `SIGTRAP | 0x80` under `PTRACE_O_TRACESYSGOOD`.
    Syscall,
    /// The child continued from a job-control stop (`WCONTINUED`).
    Continued,
}

/// `SIGTRAP | 0x80`: the stop signal of a system call stop under
/// `PTRACE_O_TRACESYSGOOD`.
const SYSCALL_TRAP: i32 = (k::SIGTRAP | 0x80) as i32;

impl Status {
    /// Decodes the raw status of waitpid(2).
    pub fn from_raw(raw: i32) -> Status {
        if exited(raw) {
            Status::Exited(exit_status(raw))
        } else if signaled(raw) {
            Status::Signaled(term_signal(raw))
        } else if stopped(raw) {
            let signal = stop_signal(raw);
            let event = raw >> 16;
            if signal == SYSCALL_TRAP {
                Status::Syscall
            } else if event != 0 {
                Status::Event { signal, event }
            } else {
                Status::Stopped(signal)
            }
        } else {
            Status::Continued
        }
    }

    /// Whether the child is gone (it exited, or a signal ended it).
    pub fn is_gone(self) -> bool {
        matches!(self, Status::Exited(_) | Status::Signaled(_))
    }

    /// Whether a seized tracee stopped in a job-control stop (`SIGSTOP`,
    /// `SIGTSTP`, `SIGTTIN`, `SIGTTOU`): a `PTRACE_EVENT_STOP` with its
    /// stopping signal. Restarted with `PTRACE_LISTEN` it stays stopped
    /// until a `SIGCONT`; any other restart lets it run.
    pub fn is_group_stop(self) -> bool {
        let job = [k::SIGSTOP, k::SIGTSTP, k::SIGTTIN, k::SIGTTOU];
        matches!(self, Status::Event { signal, event }
            if event == crate::ptrace::event::STOP && job.contains(&(signal as u32)))
    }
}

/// `__WALL`: children and tracees, whatever signal they report their
/// exit with (threads too).
pub const ALL: WaitOptions = WaitOptions::from_bits_retain(k::__WALL);

/// `__WNOTHREAD`: only children and tracees of the calling thread, not of
/// the other threads of its process.
pub const NOTHREAD: WaitOptions = WaitOptions::from_bits_retain(k::__WNOTHREAD);

pub use rustix::process::WaitOptions as Options;

/// waitpid(2) of `pid`, or of any child or tracee with `None` (pid -1:
/// in any process group, so a process attached by pid from another
/// group is waited for too), with `options` (rustix's `WaitOptions`, with
/// [`ALL`] and [`NOTHREAD`]): the thread that changed state and its
/// status, or `None` if `NOHANG` was given and none has. An interrupted
/// wait is `Err(EINTR)`, not retried; a pid that can't name one process
/// (0, or above `i32::MAX`) is `Err(EINVAL)`.
pub fn waitpid(
    pid: Option<u32>,
    options: WaitOptions,
) -> rustix::io::Result<Option<(u32, Status)>> {
    let waited = match pid {
        // rustix's `waitpid(None)` is pid 0: the caller's process group
        // only.
        None => rustix::process::wait(options)?,
        Some(p) => rustix::process::waitpid(
            Some(
                i32::try_from(p)
                    .ok()
                    .and_then(Pid::from_raw)
                    .ok_or(rustix::io::Errno::INVAL)?,
            ),
            options,
        )?,
    };
    Ok(waited.map(|(p, st)| (p.as_raw_pid() as u32, Status::from_raw(st.as_raw()))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clone::fork_exec_stopped;
    use crate::signals::kill;

    /// The statuses of wait(2), as Linux encodes them.
    #[test]
    fn decodes_linux_statuses() {
        assert!(exited(3 << 8) && exit_status(3 << 8) == 3 && !signaled(3 << 8));
        assert!(signaled(9) && term_signal(9) == 9 && !exited(9));
        // A ptrace event stop: SIGTRAP, the event in the third byte.
        let ev = (128 << 16) | (5 << 8) | 0x7f;
        assert!(stopped(ev) && stop_signal(ev) == 5 && !exited(ev));
        assert_eq!(Status::from_raw(3 << 8), Status::Exited(3));
        assert_eq!(Status::from_raw(9), Status::Signaled(9));
        // With a core dump.
        assert_eq!(Status::from_raw(0x80 | 11), Status::Signaled(11));
        assert_eq!(
            Status::from_raw(ev),
            Status::Event {
                signal: 5,
                event: 128
            }
        );
        assert_eq!(Status::from_raw((0x85 << 8) | 0x7f), Status::Syscall);
        // A real-time signal's stop.
        assert_eq!(Status::from_raw((40 << 8) | 0x7f), Status::Stopped(40));
        assert_eq!(Status::from_raw(0xffff), Status::Continued);
        assert!(Status::Exited(0).is_gone() && !Status::Stopped(19).is_gone());
    }

    /// A child stopped before its exec: its stop, nothing more while it
    /// stays stopped, then its exit; or its continuation, and its death by
    /// a signal (a real-time one) sent to it.
    #[test]
    fn a_child_stops_continues_and_exits() {
        for (argv, end) in [
            (&[c"true"][..], Status::Exited(0)),
            (&[c"sh", c"-c", c"exit 7"][..], Status::Exited(7)),
            (
                &[c"sleep", c"100"][..],
                Status::Signaled(libc::SIGRTMIN() + 2),
            ),
        ] {
            let path = match argv[0].to_bytes() {
                b"true" => c"/bin/true",
                b"sh" => c"/bin/sh",
                _ => c"/bin/sleep",
            };
            let argv: Vec<_> = argv.iter().map(|a| (*a).to_owned()).collect();
            let pid = fork_exec_stopped(path, &argv).unwrap() as u32;
            let untraced = ALL | Options::UNTRACED;
            assert_eq!(
                waitpid(Some(pid), untraced).unwrap(),
                Some((pid, Status::Stopped(libc::SIGSTOP)))
            );
            let nohang = ALL | Options::NOHANG | Options::CONTINUED;
            assert_eq!(waitpid(Some(pid), nohang).unwrap(), None);
            kill(pid, libc::SIGCONT).unwrap();
            if let Status::Signaled(sig) = end {
                // Still running (an exit would be reported first).
                assert_eq!(
                    waitpid(Some(pid), ALL | Options::CONTINUED).unwrap(),
                    Some((pid, Status::Continued))
                );
                kill(pid, sig).unwrap();
            }
            assert_eq!(waitpid(Some(pid), ALL).unwrap(), Some((pid, end)));
            // Reaped: no such child any more.
            assert_eq!(waitpid(Some(pid), ALL), Err(rustix::io::Errno::CHILD));
        }
        assert_eq!(waitpid(Some(0), ALL), Err(rustix::io::Errno::INVAL));
        assert_eq!(waitpid(Some(u32::MAX), ALL), Err(rustix::io::Errno::INVAL));
    }
}
