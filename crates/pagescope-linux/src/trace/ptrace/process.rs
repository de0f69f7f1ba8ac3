//! Starting the traced program stopped before its `execve`, attaching
//! the threads of a running process (`PTRACE_SEIZE`), and comparing
//! processes and descriptors (`kcmp`).

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::{self, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::ffi::CString;
use std::io;

/// The options every tracee gets.
pub fn options() -> ptrace::Options {
    use ptrace::Options as O;
    O::PTRACE_O_TRACESYSGOOD
        | O::PTRACE_O_TRACEFORK
        | O::PTRACE_O_TRACEVFORK
        | O::PTRACE_O_TRACECLONE
        | O::PTRACE_O_TRACEEXEC
        | O::PTRACE_O_TRACEEXIT
}

/// Finds `prog` the way `execvp` would, so that a missing program is an
/// error here rather than an exit code from the child.
pub fn resolve(prog: &str) -> io::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if prog.contains('/') {
        let p = std::path::PathBuf::from(prog);
        return if executable(&p) {
            Ok(p)
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{prog}: not an executable file"),
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| executable(p))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{prog}: command not found in PATH"),
            )
        })
}

fn cstring(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("argument {s:?} contains a NUL byte"),
        )
    })
}

/// Forks and runs `argv` (with `program` its resolved path), attached with
/// `PTRACE_SEIZE` before it calls `execve`, so the tracer sees the exec.
/// Call this before the tracer starts other threads.
pub fn spawn(program: &std::path::Path, argv: &[String]) -> io::Result<Pid> {
    let path = cstring(&program.to_string_lossy())?;
    let args: Vec<CString> = argv.iter().map(|a| cstring(a)).collect::<io::Result<_>>()?;
    let child = Pid::from_raw(pagescope_sys::clone::fork_exec_stopped(&path, &args)?);
    match waitpid(child, Some(WaitPidFlag::WSTOPPED)).map_err(io::Error::from)? {
        WaitStatus::Stopped(_, Signal::SIGSTOP) => {}
        other => {
            return Err(io::Error::other(format!(
                "the child did not stop before exec: {other:?}"
            )))
        }
    }
    if let Err(e) = ptrace::seize(child, options()) {
        let _ = signal::kill(child, Signal::SIGKILL);
        let _ = waitpid(child, None);
        return Err(seize_error(child, e));
    }
    signal::kill(child, Signal::SIGCONT).map_err(io::Error::from)?;
    Ok(child)
}

/// The message for a refused `PTRACE_SEIZE` of `tid`, naming the cause
/// that holds here (see [`crate::cause`]).
pub(super) fn seize_error(tid: Pid, e: Errno) -> io::Error {
    if e == Errno::EPERM {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "ptrace was refused: {}",
                crate::cause::ptrace_refused(tid.as_raw() as u32)
            ),
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
    /// At a signal-delivery stop: the signal is delivered when it resumes.
    Signal(Signal),
    /// At another ptrace event (`PTRACE_EVENT_*`: it was exiting, or
    /// forking).
    Event(i32),
}

/// Attaches every thread of the running process `pid` with
/// `PTRACE_SEIZE` and `opts` ([`options`] to follow it), and stops each
/// one. Threads that appear meanwhile are attached too: the task list is
/// read again until every thread in it is stopped, after which none can
/// start another.
pub fn seize_process(pid: u32, opts: ptrace::Options) -> io::Result<Vec<(Pid, Seized)>> {
    if pid == std::process::id() {
        return Err(io::Error::other("pagescope can't trace itself"));
    }
    let mut seized: Vec<(Pid, Seized)> = Vec::new();
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
            let tid = Pid::from_raw(tid as i32);
            if seized.iter().any(|&(s, _)| s == tid) {
                continue;
            }
            match ptrace::seize(tid, opts) {
                Ok(()) => {}
                Err(Errno::ESRCH) => continue,
                // Already ours: a thread cloned by one attached before,
                // attached by the kernel.
                Err(Errno::EPERM) if tracer_of(tid) == Some(std::process::id()) => {}
                Err(e) => {
                    for &(t, _) in &seized {
                        let _ = ptrace::detach(t, None);
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
pub fn at_interrupt_stop(tid: Pid) -> bool {
    pagescope_sys::ptrace::stop_signal(tid.as_raw() as u32).is_ok_and(|(signo, code)| {
        signo == Signal::SIGTRAP as i32
            && code >> 8 == pagescope_sys::ptrace::PTRACE_EVENT_STOP as i32
    })
}

/// The pid of the tracer of `tid`, from its status.
pub fn tracer_of(tid: Pid) -> Option<u32> {
    crate::procfs::ProcDir::live(tid.as_raw() as u32)
        .tracer_pid(&mut Vec::new())
        .ok()
}

/// Waits for the first stop of a thread just attached; `None` if it is
/// gone.
fn wait_seized(tid: Pid) -> io::Result<Option<Seized>> {
    loop {
        return match waitpid(tid, Some(WaitPidFlag::__WALL)) {
            Err(Errno::EINTR) => continue,
            Err(Errno::ECHILD) => Ok(None),
            Err(e) => Err(e.into()),
            Ok(WaitStatus::PtraceEvent(_, _, pagescope_sys::ptrace::event::STOP)) => {
                Ok(Some(Seized::Interrupted))
            }
            Ok(WaitStatus::PtraceEvent(_, _, event)) => Ok(Some(Seized::Event(event))),
            Ok(WaitStatus::Stopped(_, sig)) => Ok(Some(Seized::Signal(sig))),
            Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) => Ok(None),
            Ok(other) => Err(io::Error::other(format!(
                "thread {tid} did not stop: {other:?}"
            ))),
        };
    }
}

/// Reaps `pid`, a tracee of this thread, if it has exited; returns
/// whether it is gone.
pub fn reap_now(pid: Pid) -> bool {
    !matches!(
        waitpid(pid, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)),
        Ok(WaitStatus::StillAlive) | Err(Errno::EINTR)
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
