//! The mover: a task in the traced program's address space, driven by
//! the fault thread, for the calls the kernel takes only from there.

use super::code::MOVER_BATCH;
use super::inject::run_at;
use super::process::{reap_now, seize_error};
use super::signals::fault_name;
use pagescope_sys::ptrace::{self, getregs, setregs, Regs};
use pagescope_sys::signals::kill;
use pagescope_sys::wait::{self, waitpid, Status};
use rustix::io::Errno;
use rustix::process::Signal;
use std::io;

/// A task that shares the traced program's address space and runs the
/// system calls that the kernel accepts only from inside it
/// (`UFFDIO_MOVE` refuses a caller from another mm; without MOVE, the
/// `madvise` that drops a page copied out). It is created by the
/// program (an injected `clone`), attached by the thread that uses it, and
/// killed by the kernel if the tracer dies (`PTRACE_O_EXITKILL`).
#[derive(Debug)]
pub struct Mover {
    pid: u32,
    insn: u64,
    regs: Regs,
}

impl Mover {
    /// Attaches the mover `pid`, whose code page starts at `insn`. Must be
    /// called from the thread that will use it.
    pub fn seize(pid: u32, insn: u64) -> io::Result<Mover> {
        ptrace::seize(
            pid,
            ptrace::PTRACE_O_EXITKILL | ptrace::PTRACE_O_TRACESYSGOOD,
        )
        .map_err(|e| seize_error(pid, e))?;
        ptrace::interrupt(pid)?;
        loop {
            match waitpid(Some(pid), wait::ALL) {
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
                Ok(Some((_, Status::Event { .. } | Status::Stopped(_) | Status::Syscall))) => break,
                Ok(other) => {
                    return Err(io::Error::other(format!(
                        "the mover {pid} did not stop: {other:?}"
                    )))
                }
            }
        }
        Ok(Mover {
            pid,
            insn,
            regs: getregs(pid)?,
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
        setregs(self.pid, &r)?;
        ptrace::cont(self.pid, 0)?;
        let mut waiting = true;
        loop {
            let flags = if waiting {
                wait::ALL | wait::Options::NOHANG
            } else {
                wait::ALL
            };
            match waitpid(Some(self.pid), flags) {
                Err(Errno::INTR) => continue,
                Ok(None) => waiting = !idle()?,
                Ok(Some((_, Status::Stopped(sig)))) if sig == Signal::TRAP.as_raw() => {
                    return Ok(())
                }
                Ok(Some((_, Status::Stopped(sig)))) => {
                    if let Some(name) = fault_name(sig) {
                        return Err(io::Error::other(format!(
                            "the mover {} faulted ({name}) running a batch of system calls",
                            self.pid
                        )));
                    }
                    // A signal sent to the mover is dropped.
                    ptrace::cont(self.pid, 0)?
                }
                // Another stop is passed over.
                Ok(Some((_, Status::Event { .. }))) => ptrace::cont(self.pid, 0)?,
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
        let _ = kill(self.pid, Signal::KILL.as_raw());
        let _ = waitpid(Some(self.pid), wait::ALL);
    }

    /// Ends the mover without waiting for it; returns its pid if it has
    /// not exited yet, to be reaped with [`reap_now`] later. Its exit may
    /// have to wait for a thread of the program that faulted while holding
    /// a lock the exit takes (a pipe's, as the program read from a pipe
    /// into a page that is away): waiting here, in the thread that serves
    /// the faults, would never end.
    pub fn kill_nowait(self) -> Option<u32> {
        let _ = kill(self.pid, Signal::KILL.as_raw());
        (!reap_now(self.pid)).then_some(self.pid)
    }
}
