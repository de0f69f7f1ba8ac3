//! The ptrace thread: it follows the program's processes, threads, system
//! calls and address spaces, while the fault thread serves their faults.
//!
//! New mappings are found at syscall-exit stops (`PTRACE_SYSCALL`), where
//! the thread that made the mapping is stopped: the range is registered
//! before any thread can learn its address. A seccomp filter would stop
//! only on the memory system calls, but once no tracer listens it makes
//! them fail with `ENOSYS` and can never be removed; plain syscall stops
//! cost two stops per system call instead, and a tracer that dies leaves
//! the program running normally.
//!
//! [`Ptracer::on_status`] handles each stop; [`attach`] sets up an address
//! space (at an exec, or an attach), [`syscalls`] follows its mappings,
//! [`children`] gives a forked child its own descriptor and mover, and
//! [`lifecycle`] lets everything go at the end.

mod attach;
mod children;
mod lifecycle;
mod syscalls;

use crate::trace::fault::Shared;
use crate::trace::hooks::die_here_for_tests;
use crate::trace::os::sys;
use crate::trace::ptrace::nr;
use pagescope_core::trace::ProcessEventKind;
use pagescope_core::Result;
use pagescope_sys::ptrace::{self, event, SyscallStop};
use pagescope_sys::wait::Status;
use rustix::io::Errno;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Per-thread ptrace bookkeeping.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ThreadState {
    /// Address space key, once the thread has one that is traced.
    pub(super) space: Option<u32>,
    /// Thread-group id.
    pub(super) tgid: u32,
    /// System call of the last entry stop.
    pub(super) entry: Option<(u64, [u64; 6])>,
    /// A forked child not yet at its first stop, which gets its own
    /// userfaultfd and a mover there.
    pub(super) mover_code: Option<Inherited>,
}

/// What a forked child inherited from its parent's traced space.
#[derive(Debug, Clone, Copy)]
pub(super) struct Inherited {
    /// The mover's code page.
    pub(super) code: u64,
    /// The scratch page.
    pub(super) scratch: u64,
    /// The parent's userfaultfd's number in the parent (and so in the
    /// child's copy of its descriptor table), or -1.
    pub(super) fd: i32,
}

pub(super) struct Ptracer {
    pub(super) shared: Arc<Shared>,
    pub(super) threads: HashMap<u32, ThreadState>,
    /// New tasks whose first stop came before their parent's fork or
    /// clone event: held stopped until that event says what they are.
    pub(super) parked: HashSet<u32>,
    pub(super) root: u32,
    pub(super) root_status: Option<i32>,
    /// The procfs the traced processes are read from.
    pub(super) proc: std::path::PathBuf,
}

impl Ptracer {
    /// An address space is gone: its mover is ended by the fault thread.
    pub(super) fn retire(&self, key: u32) {
        let mut st = self.shared.lock();
        if let Some(space) = st.spaces.remove(&key) {
            st.retired.push(space);
        }
        drop(st);
        self.shared.poke();
    }

    /// Waits until the fault thread has prepared a space.
    pub(super) fn wait_ready(&self, ready: &AtomicBool) -> Result<()> {
        self.shared.poke();
        while !ready.load(Ordering::SeqCst) {
            if let Some(e) = self.shared.lock().failure.take() {
                return Err(e);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(())
    }

    fn on_gone(&mut self, tid: u32, status: i32) -> Result<()> {
        let Some(ts) = self.threads.remove(&tid) else {
            return Ok(());
        };
        if tid == ts.tgid {
            let mut st = self.shared.lock();
            st.event(tid, ProcessEventKind::Exit { status })?;
        }
        if tid == self.root {
            self.root_status = Some(if status < 0 { 128 - status } else { status });
        }
        if let Some(key) = ts.space {
            if !self.threads.values().any(|t| t.space == Some(key)) {
                self.retire(key);
            }
        }
        Ok(())
    }

    /// Handles one stop of thread `tid` and restarts the thread.
    pub(super) fn on_status(&mut self, tid: u32, status: Status) -> Result<()> {
        match status {
            Status::Syscall => {
                let info = match ptrace::syscall_info(tid) {
                    Ok(info) => info,
                    // Killed since it stopped (another thread's exit_group,
                    // a SIGKILL): its exit is reported next.
                    Err(e) if Errno::from_io_error(&e) == Some(Errno::SRCH) => return Ok(()),
                    Err(e) => return Err(sys("PTRACE_GET_SYSCALL_INFO", e)),
                };
                if let SyscallStop::Entry { nr, args } = info {
                    let entry = (nr, args);
                    if entry.0 == nr::CLONE && entry.1[0] & pagescope_sys::abi::CLONE_VM == 0 {
                        die_here_for_tests("fork-entry");
                    }
                    if let Some(t) = self.threads.get_mut(&tid) {
                        t.entry = Some(entry);
                    }
                } else if let SyscallStop::Exit { rval: ret } = info {
                    let entry = self.threads.get_mut(&tid).and_then(|t| t.entry.take());
                    if let Some((n, args)) = entry {
                        self.on_syscall_exit(tid, n, args, ret)?;
                    }
                }
                let _ = ptrace::syscall(tid, 0);
            }
            Status::Event {
                event: event::STOP, ..
            } if !self.threads.contains_key(&tid) => {
                // A new task, stopped before its parent's event arrived:
                // it must not run (and fault, exec or fork) before the
                // tracer knows its address space.
                self.parked.insert(tid);
            }
            Status::Event {
                event: event::STOP, ..
            } if self
                .threads
                .get(&tid)
                .is_some_and(|t| t.mover_code.is_some()) =>
            {
                self.first_stop(tid)?;
                let _ = ptrace::syscall(tid, 0);
            }
            // A job-control stop (SIGSTOP, Ctrl-Z) is kept: the thread
            // stays stopped until a SIGCONT, after which it stops again
            // (a PTRACE_EVENT_STOP with SIGTRAP) and is restarted below.
            st if st.is_group_stop() => {
                let _ = ptrace::listen(tid);
            }
            Status::Event { event, .. } => {
                match event {
                    event::FORK | event::VFORK | event::CLONE => {
                        if let Ok(child) = ptrace::event_message(tid) {
                            self.on_new_child(tid, child as u32, event)?;
                        }
                    }
                    event::EXEC => {
                        // A non-leader thread that execs takes the leader's id.
                        if let Ok(former) = ptrace::event_message(tid) {
                            let former = former as u32;
                            if former != tid {
                                if let Some(t) = self.threads.remove(&former) {
                                    self.threads.insert(tid, t);
                                }
                            }
                        }
                        if let Some(t) = self.threads.get_mut(&tid) {
                            t.entry = Some((nr::EXECVE, [0; 6]));
                        }
                    }
                    event::EXIT => self.on_exit_event(tid)?,
                    _ => {}
                }
                let _ = ptrace::syscall(tid, 0);
            }
            Status::Stopped(sig) => {
                self.threads.entry(tid).or_insert(ThreadState {
                    space: None,
                    tgid: tid,
                    entry: None,
                    mover_code: None,
                });
                let _ = ptrace::syscall(tid, sig);
            }
            Status::Exited(code) => self.on_gone(tid, code)?,
            Status::Signaled(sig) => self.on_gone(tid, -sig)?,
            Status::Continued => {}
        }
        Ok(())
    }
}
