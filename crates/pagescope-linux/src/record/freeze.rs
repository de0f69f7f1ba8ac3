//! Stopping the recorded processes for the moment a backend reads and
//! clears their reference bits.
//!
//! `clear_refs` and smaps each walk the whole address space, one after the
//! other; a page touched after the read passed it and before the clear
//! reached it would be in neither interval. On a program writing 1 GiB in
//! 0.2 s the two walks (25 ms) lose 10 to 20% of an iteration. With every
//! thread stopped between the two walks nothing is lost.
//!
//! Threads are attached with `PTRACE_SEIZE`, which the program cannot
//! see: no signal is sent, and stops are made with `PTRACE_INTERRUPT`.
//! New threads and children are attached by the kernel (`TRACECLONE`,
//! `TRACEFORK`). Between boundaries every stop is passed on at once:
//! signals are delivered, job-control stops are kept with `PTRACE_LISTEN`.
//! A recorder that dies detaches them all (the kernel does it), so the
//! program runs on.
#![allow(unsafe_code)]

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::io;

/// What restarts a stopped thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resume {
    /// `PTRACE_CONT`, delivering this signal.
    Cont(Option<Signal>),
    /// `PTRACE_LISTEN`: it is in a job-control stop and stays there.
    Listen,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Running,
    /// In a ptrace stop, to be restarted so.
    Stopped(Resume),
    /// In a job-control stop under `PTRACE_LISTEN`: not running.
    Listening,
}

/// How a process the recorder waits for ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    /// Its pid.
    pub pid: u32,
    /// Its exit code, or 128 plus the killing signal.
    pub code: i32,
}

/// The traced threads and their states.
#[derive(Debug, Default)]
pub struct Freezer {
    threads: HashMap<u32, State>,
}

/// The exit a wait status reports, if it reports one.
pub fn exit_of(status: WaitStatus) -> Option<Exit> {
    match status {
        WaitStatus::Exited(pid, code) => Some(Exit {
            pid: pid.as_raw() as u32,
            code,
        }),
        WaitStatus::Signaled(pid, sig, _) => Some(Exit {
            pid: pid.as_raw() as u32,
            code: 128 + sig as i32,
        }),
        _ => None,
    }
}

/// Whether this process is already `tid`'s tracer.
fn traced_by_us(tid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("TracerPid:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
        })
        == Some(std::process::id())
}

fn is_job_stop(sig: Signal) -> bool {
    matches!(
        sig,
        Signal::SIGSTOP | Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU
    )
}

/// Restarts a stopped thread; returns its new state.
fn resume(tid: u32, r: Resume) -> State {
    match r {
        Resume::Cont(sig) => {
            let _ = ptrace::cont(Pid::from_raw(tid as i32), sig);
            State::Running
        }
        Resume::Listen => {
            // SAFETY: PTRACE_LISTEN takes no pointers.
            let _ =
                unsafe { libc::ptrace(libc::PTRACE_LISTEN, tid as libc::pid_t, 0usize, 0usize) };
            State::Listening
        }
    }
}

fn options() -> ptrace::Options {
    use ptrace::Options as O;
    O::PTRACE_O_TRACEFORK | O::PTRACE_O_TRACEVFORK | O::PTRACE_O_TRACECLONE
}

impl Freezer {
    /// Attaches to every thread of `pid`, listing them until no new one
    /// shows up. A process that is gone is not an error.
    pub fn attach(&mut self, pid: u32) -> io::Result<()> {
        loop {
            let mut new = 0;
            let dir = match std::fs::read_dir(format!("/proc/{pid}/task")) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            for entry in dir.flatten() {
                let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                    continue;
                };
                if self.threads.contains_key(&tid) {
                    continue;
                }
                match ptrace::seize(Pid::from_raw(tid as i32), options()) {
                    Ok(()) => {
                        self.threads.insert(tid, State::Running);
                        new += 1;
                    }
                    Err(Errno::ESRCH) => {}
                    // Attached already: a child or thread the kernel
                    // attached (TRACEFORK, TRACECLONE) whose first stop
                    // has not been read yet.
                    Err(Errno::EPERM) if traced_by_us(tid) => {
                        self.threads.insert(tid, State::Running);
                        new += 1;
                    }
                    Err(Errno::EPERM) => {
                        return Err(io::Error::new(
                            io::ErrorKind::PermissionDenied,
                            format!(
                                "ptrace of {pid} was refused (already traced, or Yama): \
                                 run as root with `sysctl kernel.yama.ptrace_scope=0`, \
                                 or pass --no-freeze"
                            ),
                        ))
                    }
                    Err(e) => return Err(io::Error::other(format!("ptrace seize {tid}: {e}"))),
                }
            }
            if new == 0 {
                return Ok(());
            }
        }
    }

    /// Threads attached.
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Takes one wait status: a thread that stopped or ended. Returns the
    /// exit of a process (or thread) that ended. While `freezing`, stopped
    /// threads are left stopped.
    pub fn on_status(&mut self, status: WaitStatus, freezing: bool) -> Option<Exit> {
        let restart = |tid: u32, r: Resume| {
            if freezing {
                State::Stopped(r)
            } else {
                resume(tid, r)
            }
        };
        if let Some(e) = exit_of(status) {
            self.threads.remove(&e.pid);
            return Some(e);
        }
        match status {
            WaitStatus::PtraceEvent(pid, sig, event) => {
                let tid = pid.as_raw() as u32;
                let r = if event == libc::PTRACE_EVENT_STOP && is_job_stop(sig) {
                    Resume::Listen
                } else {
                    Resume::Cont(None)
                };
                let s = restart(tid, r);
                self.threads.insert(tid, s);
                None
            }
            WaitStatus::Stopped(pid, sig) => {
                let tid = pid.as_raw() as u32;
                let s = restart(tid, Resume::Cont(Some(sig)));
                self.threads.insert(tid, s);
                None
            }
            _ => None,
        }
    }

    /// Stops every thread; returns the exits seen meanwhile.
    pub fn freeze(&mut self) -> io::Result<Vec<Exit>> {
        for (&tid, s) in &self.threads {
            if *s == State::Running {
                let _ = ptrace::interrupt(Pid::from_raw(tid as i32));
            }
        }
        let mut exits = Vec::new();
        while self.threads.values().any(|s| *s == State::Running) {
            match waitpid(None, Some(WaitPidFlag::__WALL)) {
                Ok(st) => exits.extend(self.on_status(st, true)),
                Err(Errno::EINTR) => {}
                Err(Errno::ECHILD) => {
                    self.threads.clear();
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(exits)
    }

    /// Restarts every thread [`Freezer::freeze`] stopped.
    pub fn thaw(&mut self) {
        let stopped: Vec<(u32, Resume)> = self
            .threads
            .iter()
            .filter_map(|(&t, s)| match s {
                State::Stopped(r) => Some((t, *r)),
                _ => None,
            })
            .collect();
        for (tid, r) in stopped {
            self.threads.insert(tid, resume(tid, r));
        }
    }

    /// Lets go of every thread, each with the signal it was stopped for.
    pub fn detach_all(&mut self) -> Vec<Exit> {
        for (&tid, s) in &self.threads {
            if *s == State::Listening {
                let _ = ptrace::interrupt(Pid::from_raw(tid as i32));
                // Its next stop reports it; freeze() waits for it below.
            }
        }
        for s in self.threads.values_mut() {
            if *s == State::Listening {
                *s = State::Running;
            }
        }
        let exits = self.freeze().unwrap_or_default();
        for (tid, s) in self.threads.drain() {
            let sig = match s {
                State::Stopped(Resume::Cont(sig)) => sig,
                _ => None,
            };
            let _ = ptrace::detach(Pid::from_raw(tid as i32), sig);
        }
        exits
    }
}
