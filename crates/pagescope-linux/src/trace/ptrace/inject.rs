//! Injection: making a stopped thread of the program run system calls of
//! the tracer's choosing (as CRIU's parasite code does, but one system
//! call at a time).
//!
//! Injection happens only at a syscall-exit stop. There `rip` points just
//! past the `syscall` instruction that was executed, so setting `rip` back
//! by two bytes and `rax` to another system call number makes the thread
//! execute the same instruction again with the tracer's arguments; at that
//! call's exit stop the result is read and the saved registers are put
//! back, and the program continues as if nothing happened. No code is
//! written into the target, so static binaries and read-only text work.
//!
//! A process attached with `--pid` is instead stopped with
//! `PTRACE_INTERRUPT`, which may catch a thread blocked in a system call
//! that the kernel means to restart when the thread resumes. The kernel
//! does that only on the way out of a signal stop, and the injected calls
//! end at a syscall-exit stop, so [`Injector::at_interrupt`] rewinds the
//! saved registers to the restart itself.

use super::code::{BOOT_CODE, BOOT_RECORD, PARK_RECORD};
use super::park::{write_code, Parked};
use super::signals::fault_name;
use pagescope_sys::ptrace::{self, getregs, setregs, Regs};
use pagescope_sys::signals::kill;
use pagescope_sys::wait::{self, waitpid, Status};
use rustix::io::Errno;
use std::io;

/// Waits for the next stop of `tid` while it runs injected code, and
/// returns it. A signal that arrives meanwhile is held back and returned
/// in `held` (numbers), to be sent again afterwards.
fn wait_syscall_stop(tid: u32, held: &mut Vec<i32>) -> io::Result<()> {
    loop {
        match waitpid(Some(tid), wait::ALL) {
            Err(Errno::INTR) => continue,
            r => {
                if injection_stop(tid, r?, held)? {
                    return Ok(());
                }
            }
        }
    }
}

/// As [`wait_syscall_stop`], but calls `idle` while `tid` runs, until it
/// returns `true` (nothing more to do but wait). `idle` must not block
/// for long: it is how the tracer answers what the injected call waits
/// for.
fn wait_syscall_stop_idle(
    tid: u32,
    held: &mut Vec<i32>,
    idle: &mut dyn FnMut() -> io::Result<bool>,
) -> io::Result<()> {
    loop {
        match waitpid(Some(tid), wait::ALL | wait::Options::NOHANG) {
            Err(Errno::INTR) => continue,
            Ok(None) => {
                if idle()? {
                    return wait_syscall_stop(tid, held);
                }
            }
            r => {
                if injection_stop(tid, r?, held)? {
                    return Ok(());
                }
            }
        }
    }
}

/// Handles one stop of a thread running injected code: `true` at the
/// syscall stop; other stops are passed over (signals held in `held`).
fn injection_stop(
    tid: u32,
    status: Option<(u32, Status)>,
    held: &mut Vec<i32>,
) -> io::Result<bool> {
    match status.map(|(_, st)| st) {
        Some(Status::Syscall) => Ok(true),
        Some(Status::Stopped(sig)) => {
            if let Some(name) = fault_name(sig) {
                return Err(io::Error::other(format!(
                    "the traced thread {tid} faulted ({name}) running an injected system call"
                )));
            }
            held.push(sig);
            ptrace::syscall(tid, 0)?;
            Ok(false)
        }
        Some(Status::Event { .. }) => {
            ptrace::syscall(tid, 0)?;
            Ok(false)
        }
        other => Err(io::Error::other(format!(
            "the traced thread {tid} went away during injection: {other:?}"
        ))),
    }
}

/// Makes the stopped `tid` execute the `syscall` instruction at `insn`
/// with `nr` and `args` (the other registers from `base`) and returns
/// `rax` at the call's exit stop, where `tid` is left stopped.
pub(super) fn run_at(
    tid: u32,
    base: &Regs,
    insn: u64,
    nr: u64,
    args: [u64; 6],
    held: &mut Vec<i32>,
    idle: Option<&mut dyn FnMut() -> io::Result<bool>>,
) -> io::Result<i64> {
    let mut r = *base;
    r.rip = insn;
    r.rax = nr;
    // Not a restartable call: the kernel must not rewind rip on return.
    r.orig_rax = u64::MAX;
    r.rdi = args[0];
    r.rsi = args[1];
    r.rdx = args[2];
    r.r10 = args[3];
    r.r8 = args[4];
    r.r9 = args[5];
    setregs(tid, &r)?;
    ptrace::syscall(tid, 0)?;
    wait_syscall_stop(tid, held)?; // entry
    ptrace::syscall(tid, 0)?;
    match idle {
        None => wait_syscall_stop(tid, held)?,
        Some(idle) => wait_syscall_stop_idle(tid, held, idle)?,
    } // exit
    Ok(getregs(tid)?.rax as i64)
}

/// A thread stopped at a syscall-exit stop, borrowed for injection.
#[derive(Debug)]
pub struct Injector {
    tid: u32,
    saved: Regs,
    insn: u64,
    /// Signals (numbers) that arrived during the injection.
    held: Vec<i32>,
    finished: bool,
    /// The process and address of this injection's parking record.
    parked: Option<(u32, u64)>,
}

impl Injector {
    /// Saves the registers of `tid`, which must be at a syscall-exit stop.
    /// `insn` is the address of a `syscall` instruction to run; `None`
    /// means the one the thread just executed (not after `execve`, which
    /// leaves `rip` at the new program's entry point).
    pub fn new(tid: u32, insn: Option<u64>) -> io::Result<Injector> {
        let saved = getregs(tid)?;
        Ok(Injector {
            tid,
            saved,
            insn: insn.unwrap_or(saved.rip - 2),
            held: Vec::new(),
            finished: false,
            parked: None,
        })
    }

    /// Runs the next system calls at the `syscall` instruction that starts
    /// the mover's code page `code` in process `pid`, after writing the
    /// thread's saved registers there (see [`Parked`]). Should pagescope
    /// die before [`Injector::finish`], the thread goes on into the page's
    /// `pause()` loop rather than into the program's code with the
    /// registers of an injected call, and `--release` gives it its
    /// registers back.
    pub fn park_in(&mut self, pid: u32, code: u64) -> io::Result<()> {
        self.park_at(pid, code, code + PARK_RECORD)
    }

    /// As [`Injector::park_in`], at the bootstrap that
    /// [`vdso_bootstrap`] wrote into the vDSO of `pid` (its `syscall`
    /// instruction at `boot`): for the calls that make the mover's page.
    pub fn park_in_vdso(&mut self, pid: u32, boot: u64) -> io::Result<()> {
        self.park_at(pid, boot, boot - BOOT_CODE + BOOT_RECORD)
    }

    /// Writes the parking record at `record`, then runs the next calls at
    /// the `syscall` instruction `insn` that a `pause()` loop follows. A
    /// record written before (the bootstrap's) is cleared once the thread
    /// is at the new one.
    fn park_at(&mut self, pid: u32, insn: u64, record: u64) -> io::Result<()> {
        write_code(pid, record, &Parked::record(self.tid, &self.saved))?;
        let before = self.parked.replace((pid, record));
        self.insn = insn;
        // From now on, between calls too: the thread would go on at the
        // loop, not where the last call left it.
        let mut r = getregs(self.tid)?;
        r.rip = insn + 2;
        // Not in a system call to restart (at an interrupt stop of an
        // attach, the kernel would otherwise run the interrupted call once
        // more, at the page, before the loop).
        r.orig_rax = u64::MAX;
        setregs(self.tid, &r)?;
        if let Some((pid, old)) = before.filter(|&(_, old)| old != record) {
            write_code(pid, old, &[0u8; 8])?;
        }
        Ok(())
    }

    /// As [`Injector::new`] for a thread at its `PTRACE_INTERRUPT` stop,
    /// which runs the `syscall` instruction at `insn`. If the interrupt
    /// cut a system call short to be restarted, the saved registers are
    /// set to restart it, as the kernel would have on resuming.
    pub fn at_interrupt(tid: u32, insn: u64) -> io::Result<Injector> {
        const ERESTARTSYS: i64 = -512;
        const ERESTARTNOINTR: i64 = -513;
        const ERESTARTNOHAND: i64 = -514;
        const ERESTART_RESTARTBLOCK: i64 = -516;
        const RESTART_SYSCALL: u64 = 219;
        let mut inj = Injector::new(tid, Some(insn))?;
        let r = &mut inj.saved;
        if (r.orig_rax as i64) >= 0 {
            match r.rax as i64 {
                ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND => {
                    r.rax = r.orig_rax;
                    r.rip -= 2;
                }
                ERESTART_RESTARTBLOCK => {
                    r.rax = RESTART_SYSCALL;
                    r.rip -= 2;
                }
                _ => {}
            }
        }
        Ok(inj)
    }

    /// The saved stack pointer.
    pub fn sp(&self) -> u64 {
        self.saved.rsp
    }

    /// Runs system call `nr` with `args` in the thread; returns its result
    /// (negative errno on failure).
    pub fn syscall(&mut self, nr: u64, args: [u64; 6]) -> io::Result<i64> {
        run_at(
            self.tid,
            &self.saved,
            self.insn,
            nr,
            args,
            &mut self.held,
            None,
        )
    }

    /// Puts the saved registers back; the thread is again at its original
    /// syscall-exit stop. Signals that arrived meanwhile are sent again.
    pub fn finish(mut self) -> io::Result<()> {
        self.finished = true;
        setregs(self.tid, &self.saved)?;
        if let Some((pid, record)) = self.parked {
            // The thread is back at its own code: the record is void (the
            // release checks where the thread is, too).
            let _ = write_code(pid, record, &[0u8; 8]);
        }
        for sig in std::mem::take(&mut self.held) {
            let _ = kill(self.tid, sig);
        }
        Ok(())
    }
}

impl Drop for Injector {
    /// An injection cut short by an error still gives the thread its
    /// registers back (if it is stopped), so that it can be let go.
    fn drop(&mut self) {
        if !self.finished {
            let _ = setregs(self.tid, &self.saved);
        }
    }
}
