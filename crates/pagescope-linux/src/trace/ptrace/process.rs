//! Starting the traced program stopped before its `execve`, attaching
//! the threads of a running process (`PTRACE_SEIZE`), and comparing
//! processes and descriptors (`kcmp`).

use pagescope_sys::ptrace;
use pagescope_sys::signals::kill;
use pagescope_sys::wait::{self, waitpid, Status};
use rustix::io::Errno;
use rustix::process::Signal;
use std::io;

/// The options every tracee gets (`PTRACE_O_*`).
pub fn options() -> u32 {
    ptrace::PTRACE_O_TRACESYSGOOD
        | ptrace::PTRACE_O_TRACEFORK
        | ptrace::PTRACE_O_TRACEVFORK
        | ptrace::PTRACE_O_TRACECLONE
        | ptrace::PTRACE_O_TRACEEXEC
        | ptrace::PTRACE_O_TRACEEXIT
}

/// Forks and runs `argv` (with `program` its resolved path), attached with
/// `PTRACE_SEIZE` before it calls `execve`, so the tracer sees the exec.
/// Call this before the tracer starts other threads.
pub fn spawn(program: &std::path::Path, argv: &[String]) -> io::Result<u32> {
    let child = crate::launched::fork_stopped(program, argv)?;
    if let Err(e) = ptrace::seize(child, options()) {
        let _ = kill(child, Signal::KILL.as_raw());
        let _ = waitpid(Some(child), wait::Options::empty());
        return Err(seize_error(child, e));
    }
    kill(child, Signal::CONT.as_raw())?;
    Ok(child)
}

/// The message for a refused `PTRACE_SEIZE` of `tid`, naming the cause
/// that holds here (see [`crate::cause`]).
pub(super) fn seize_error(tid: u32, e: io::Error) -> io::Error {
    if Errno::from_io_error(&e) == Some(Errno::PERM) {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("ptrace was refused: {}", crate::cause::ptrace_refused(tid)),
        )
    } else {
        io::Error::other(format!("ptrace: {e}"))
    }
}

/// How a thread of an attached process stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seized {
    /// At the `PTRACE_INTERRUPT` stop: ready for injection.
    Interrupted,
    /// At the `PTRACE_INTERRUPT` stop of a thread in a job-control stop
    /// (`SIGSTOP`, `SIGTSTP`, ...): ready for injection too, and to be
    /// restarted with `PTRACE_LISTEN`, so that it stays stopped.
    GroupStop,
    /// At a signal-delivery stop: the signal (its number) is delivered
    /// when it resumes.
    Signal(i32),
    /// At another ptrace event (`PTRACE_EVENT_*`: it was exiting, or
    /// forking).
    Event(i32),
}

impl Seized {
    /// Whether the thread stopped where calls can be injected.
    pub fn injectable(self) -> bool {
        matches!(self, Seized::Interrupted | Seized::GroupStop)
    }
}

/// Attaches every thread of the running process `pid` with
/// `PTRACE_SEIZE` and `opts` ([`options`] to follow it), and stops each
/// one. Threads that appear meanwhile are attached too: the task list is
/// read again until every thread in it is stopped, after which none can
/// start another.
pub fn seize_process(pid: u32, opts: u32) -> io::Result<Vec<(u32, Seized)>> {
    if pid == std::process::id() {
        return Err(io::Error::other("pagescope can't trace itself"));
    }
    let mut seized: Vec<(u32, Seized)> = Vec::new();
    loop {
        let tasks = crate::procfs::ProcDir::live(pid).tasks().map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(io::ErrorKind::NotFound, format!("no process {pid}"))
            } else {
                e
            }
        })?;
        let mut new = Vec::new();
        for tid in tasks {
            if seized.iter().any(|&(s, _)| s == tid) {
                continue;
            }
            match ptrace::seize(tid, opts) {
                Ok(()) => {}
                Err(e) if Errno::from_io_error(&e) == Some(Errno::SRCH) => continue,
                // Already ours: a thread cloned by one attached before,
                // attached by the kernel.
                Err(e)
                    if Errno::from_io_error(&e) == Some(Errno::PERM)
                        && tracer_of(tid) == Some(std::process::id()) => {}
                Err(e) => {
                    for &(t, _) in &seized {
                        let _ = ptrace::detach(t, 0);
                    }
                    return Err(seize_error(tid, e));
                }
            }
            let _ = ptrace::interrupt(tid);
            new.push(tid);
        }
        if new.is_empty() {
            break;
        }
        for tid in new {
            if let Some(how) = wait_seized(tid)? {
                seized.push((tid, how));
            }
        }
    }
    if seized.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("process {pid} has no threads left"),
        ));
    }
    Ok(seized)
}

/// Whether `tid`, traced by this thread, is at a `PTRACE_INTERRUPT`
/// stop, where a system call can be injected. Not at any other stop: a
/// parent stopped at its `vfork` event, resumed, would wait for its child
/// before it ran anything.
pub fn at_interrupt_stop(tid: u32) -> bool {
    ptrace::stop_signal(tid).is_ok_and(|(signo, code)| {
        signo == Signal::TRAP.as_raw() && code >> 8 == ptrace::event::STOP
    })
}

/// The pid of the tracer of `tid`, from its status.
pub fn tracer_of(tid: u32) -> Option<u32> {
    crate::procfs::ProcDir::live(tid)
        .tracer_pid(&mut Vec::new())
        .ok()
}

/// Waits for the first stop of a thread just attached; `None` if it is
/// gone.
fn wait_seized(tid: u32) -> io::Result<Option<Seized>> {
    loop {
        return match waitpid(Some(tid), wait::ALL) {
            Err(Errno::INTR) => continue,
            Err(Errno::CHILD) => Ok(None),
            Err(e) => Err(e.into()),
            Ok(Some((_, st))) => match st {
                st if st.is_group_stop() => Ok(Some(Seized::GroupStop)),
                Status::Event {
                    event: ptrace::event::STOP,
                    ..
                } => Ok(Some(Seized::Interrupted)),
                Status::Event { event, .. } => Ok(Some(Seized::Event(event))),
                Status::Stopped(sig) => Ok(Some(Seized::Signal(sig))),
                Status::Exited(_) | Status::Signaled(_) => Ok(None),
                other => Err(io::Error::other(format!(
                    "thread {tid} did not stop: {other:?}"
                ))),
            },
            Ok(None) => Err(io::Error::other(format!("thread {tid} did not stop"))),
        };
    }
}

/// Reaps `pid`, a tracee of this thread, if it has exited; returns
/// whether it is gone.
pub fn reap_now(pid: u32) -> bool {
    !matches!(
        waitpid(Some(pid), wait::ALL | wait::Options::NOHANG),
        Ok(None) | Err(Errno::INTR)
    )
}

/// Whether two processes share one address space (`kcmp KCMP_VM`).
pub fn same_mm(a: u32, b: u32) -> io::Result<bool> {
    pagescope_sys::kcmp::same_vm(a, b)
}

/// Whether descriptor `fa` of process `a` and `fb` of `b` are one open
/// file (`kcmp KCMP_FILE`): a copy inherited at a fork, or taken with
/// `pidfd_getfd`.
pub fn same_file(a: u32, fa: i32, b: u32, fb: i32) -> io::Result<bool> {
    pagescope_sys::kcmp::same_file(a, fa, b, fb)
}

/// Whether processes `a` and `b` share one address space (`kcmp
/// KCMP_VM`): a pagescope mover and its program, a `vfork` child before
/// its exec and its parent.
pub fn same_vm(a: u32, b: u32) -> io::Result<bool> {
    pagescope_sys::kcmp::same_vm(a, b)
}
