//! The mover: a task in the traced program's address space, driven by
//! the fault thread, for the calls the kernel takes only from there.

use super::code::MOVER_BATCH;
use super::inject::run_at;
use super::process::{reap_now, seize_error};
use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::{self, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use pagescope_sys::ptrace::{getregs, setregs, Regs};
use std::io;

/// A task that shares the traced program's address space and runs the
/// system calls that the kernel accepts only from inside it
/// (`UFFDIO_MOVE` refuses a caller from another mm; without MOVE, the
/// `madvise` that drops a page copied out). It is created by the
/// program (an injected `clone`), attached by the thread that uses it, and
/// killed by the kernel if the tracer dies (`PTRACE_O_EXITKILL`).
#[derive(Debug)]
pub struct Mover {
    pid: Pid,
    insn: u64,
    regs: Regs,
}

impl Mover {
    /// Attaches the mover `pid`, whose code page starts at `insn`. Must be
    /// called from the thread that will use it.
    pub fn seize(pid: u32, insn: u64) -> io::Result<Mover> {
        let p = Pid::from_raw(pid as i32);
        ptrace::seize(
            p,
            ptrace::Options::PTRACE_O_EXITKILL | ptrace::Options::PTRACE_O_TRACESYSGOOD,
        )
        .map_err(|e| seize_error(p, e))?;
        ptrace::interrupt(p)?;
        loop {
            match waitpid(p, Some(WaitPidFlag::__WALL)) {
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
                Ok(WaitStatus::PtraceEvent(..)) | Ok(WaitStatus::Stopped(..)) => break,
                Ok(WaitStatus::PtraceSyscall(_)) => break,
                Ok(other) => {
                    return Err(io::Error::other(format!(
                        "the mover {pid} did not stop: {other:?}"
                    )))
                }
            }
        }
        Ok(Mover {
            pid: p,
            insn,
            regs: getregs(p.as_raw() as u32)?,
        })
    }

    /// Runs one system call in the mover; returns its result (negative
    /// errno on failure). Signals sent to the mover are dropped: it never
    /// runs code of its own to handle them.
    pub fn syscall(&self, nr: u64, args: [u64; 6]) -> io::Result<i64> {
        self.syscall_idle(nr, args, &mut || Ok(true))
    }

    /// Runs one system call in the mover that waits for the tracer (a
    /// `madvise` of a registered range blocks until its `UFFD_EVENT_REMOVE`
    /// is read): `idle` is called while it runs, until it returns `true`.
    pub fn syscall_idle(
        &self,
        nr: u64,
        args: [u64; 6],
        idle: &mut dyn FnMut() -> io::Result<bool>,
    ) -> io::Result<i64> {
        run_at(
            self.pid,
            &self.regs,
            self.insn,
            nr,
            args,
            &mut Vec::new(),
            Some(idle),
        )
    }

    /// Runs the `n` system calls of the batch table at `table` (in the
    /// mover's address space, [`BATCH_ENTRY`] bytes each, results written
    /// back into it) with one resume of the mover: the calls run without
    /// a stop between them, so a batch costs one round trip to the mover
    /// where single calls cost one each. `idle` is called while they run,
    /// until it returns `true`, as in [`Mover::syscall_idle`]. The mover
    /// ends stopped by its `int3`; the next injection drops the SIGTRAP.
    pub fn batch(
        &self,
        table: u64,
        n: u64,
        idle: &mut dyn FnMut() -> io::Result<bool>,
    ) -> io::Result<()> {
        let mut r = self.regs;
        r.rip = self.insn + MOVER_BATCH;
        r.orig_rax = u64::MAX;
        r.rbx = table;
        r.r12 = n;
        setregs(self.pid.as_raw() as u32, &r)?;
        ptrace::cont(self.pid, None)?;
        let mut waiting = true;
        loop {
            let flags = if waiting {
                WaitPidFlag::__WALL | WaitPidFlag::WNOHANG
            } else {
                WaitPidFlag::__WALL
            };
            match waitpid(self.pid, Some(flags)) {
                Err(Errno::EINTR) => continue,
                Ok(WaitStatus::StillAlive) => waiting = !idle()?,
                Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => return Ok(()),
                Ok(WaitStatus::Stopped(_, sig))
                    if matches!(
                        sig,
                        Signal::SIGSEGV | Signal::SIGBUS | Signal::SIGILL | Signal::SIGFPE
                    ) =>
                {
                    return Err(io::Error::other(format!(
                        "the mover {} faulted ({sig}) running a batch of system calls",
                        self.pid
                    )))
                }
                // A signal sent to the mover is dropped, another stop
                // passed over.
                Ok(WaitStatus::Stopped(..) | WaitStatus::PtraceEvent(..)) => {
                    ptrace::cont(self.pid, None)?
                }
                Ok(other) => {
                    return Err(io::Error::other(format!(
                        "the mover {} went away during a batch: {other:?}",
                        self.pid
                    )))
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Ends the mover.
    pub fn kill(self) {
        let _ = signal::kill(self.pid, Signal::SIGKILL);
        let _ = waitpid(self.pid, Some(WaitPidFlag::__WALL));
    }

    /// Ends the mover without waiting for it; returns its pid if it has
    /// not exited yet, to be reaped with [`reap_now`] later. Its exit may
    /// have to wait for a thread of the program that faulted while holding
    /// a lock the exit takes (a pipe's, as the program read from a pipe
    /// into a page that is away): waiting here, in the thread that serves
    /// the faults, would never end.
    pub fn kill_nowait(self) -> Option<Pid> {
        let _ = signal::kill(self.pid, Signal::SIGKILL);
        (!reap_now(self.pid)).then_some(self.pid)
    }
}
