//! ptrace: starting the traced program stopped, and making a stopped
//! thread run system calls of the tracer's choosing (injection, as CRIU's
//! parasite code does, but one system call at a time).
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
#![allow(unsafe_code)]

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::{self, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::ffi::CString;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// x86_64 system call numbers the tracer uses or watches.
pub mod nr {
    /// close
    pub const CLOSE: u64 = 3;
    /// ioctl
    pub const IOCTL: u64 = 16;
    /// openat
    pub const OPENAT: u64 = 257;
    /// mmap
    pub const MMAP: u64 = 9;
    /// mprotect
    pub const MPROTECT: u64 = 10;
    /// munmap
    pub const MUNMAP: u64 = 11;
    /// brk
    pub const BRK: u64 = 12;
    /// clone
    pub const CLONE: u64 = 56;
    /// mremap
    pub const MREMAP: u64 = 25;
    /// madvise
    pub const MADVISE: u64 = 28;
    /// shmat
    pub const SHMAT: u64 = 30;
    /// execve
    pub const EXECVE: u64 = 59;
    /// prctl
    pub const PRCTL: u64 = 157;
    /// execveat
    pub const EXECVEAT: u64 = 322;
    /// userfaultfd
    pub const USERFAULTFD: u64 = 323;
    /// dup3
    pub const DUP3: u64 = 292;
    /// wait4
    pub const WAIT4: u64 = 61;
}

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
    let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let msg = b"pagescope: exec failed\n";
    // SAFETY: the child only calls async-signal-safe functions (raise,
    // execv, write, _exit) on memory prepared before the fork.
    match unsafe { nix::unistd::fork() }.map_err(io::Error::from)? {
        nix::unistd::ForkResult::Child => unsafe {
            libc::raise(libc::SIGSTOP);
            libc::execv(path.as_ptr(), ptrs.as_ptr());
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        },
        nix::unistd::ForkResult::Parent { child } => {
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
    }
}

/// The message for a refused `PTRACE_SEIZE` of `tid`, naming the cause
/// that holds here (see [`crate::cause`]).
pub fn seize_error(tid: Pid, e: Errno) -> io::Error {
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

/// Waits for the next stop of `tid` while it runs injected code, and
/// returns it. A signal that arrives meanwhile is held back and returned
/// in `held`, to be sent again afterwards.
fn wait_syscall_stop(tid: Pid, held: &mut Vec<Signal>) -> io::Result<()> {
    loop {
        match waitpid(tid, Some(WaitPidFlag::__WALL)) {
            Err(Errno::EINTR) => continue,
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
    tid: Pid,
    held: &mut Vec<Signal>,
    idle: &mut dyn FnMut() -> io::Result<bool>,
) -> io::Result<()> {
    loop {
        match waitpid(tid, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
            Err(Errno::EINTR) => continue,
            Ok(WaitStatus::StillAlive) => {
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
fn injection_stop(tid: Pid, status: WaitStatus, held: &mut Vec<Signal>) -> io::Result<bool> {
    match status {
        WaitStatus::PtraceSyscall(_) => Ok(true),
        WaitStatus::Stopped(_, sig) => {
            if matches!(
                sig,
                Signal::SIGSEGV | Signal::SIGBUS | Signal::SIGILL | Signal::SIGFPE
            ) {
                return Err(io::Error::other(format!(
                    "the traced thread {tid} faulted ({sig}) running an injected system call"
                )));
            }
            held.push(sig);
            ptrace::syscall(tid, None)?;
            Ok(false)
        }
        WaitStatus::PtraceEvent(..) => {
            ptrace::syscall(tid, None)?;
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
fn run_at(
    tid: Pid,
    base: &libc::user_regs_struct,
    insn: u64,
    nr: u64,
    args: [u64; 6],
    held: &mut Vec<Signal>,
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
    ptrace::setregs(tid, r)?;
    ptrace::syscall(tid, None)?;
    wait_syscall_stop(tid, held)?; // entry
    ptrace::syscall(tid, None)?;
    match idle {
        None => wait_syscall_stop(tid, held)?,
        Some(idle) => wait_syscall_stop_idle(tid, held, idle)?,
    } // exit
    Ok(ptrace::getregs(tid)?.rax as i64)
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
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(io::ErrorKind::NotFound, format!("no process {pid}"))
            } else {
                e
            }
        })?;
        let mut new = Vec::new();
        for t in tasks {
            let Some(tid) = t?.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let tid = Pid::from_raw(tid);
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
    ptrace::getsiginfo(tid)
        .is_ok_and(|si| si.si_signo == libc::SIGTRAP && si.si_code >> 8 == libc::PTRACE_EVENT_STOP)
}

/// The pid of the tracer of `tid`, from its status.
pub fn tracer_of(tid: Pid) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))?
        .trim()
        .parse()
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
            Ok(WaitStatus::PtraceEvent(_, _, libc::PTRACE_EVENT_STOP)) => {
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

/// A thread stopped at a syscall-exit stop, borrowed for injection.
#[derive(Debug)]
pub struct Injector {
    tid: Pid,
    saved: libc::user_regs_struct,
    insn: u64,
    held: Vec<Signal>,
    finished: bool,
    /// The process and address of this injection's parking record.
    parked: Option<(u32, u64)>,
}

impl Injector {
    /// Saves the registers of `tid`, which must be at a syscall-exit stop.
    /// `insn` is the address of a `syscall` instruction to run; `None`
    /// means the one the thread just executed (not after `execve`, which
    /// leaves `rip` at the new program's entry point).
    pub fn new(tid: Pid, insn: Option<u64>) -> io::Result<Injector> {
        let saved = ptrace::getregs(tid)?;
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
        write_code(
            pid,
            record,
            &Parked::record(self.tid.as_raw() as u32, &self.saved),
        )?;
        let before = self.parked.replace((pid, record));
        self.insn = insn;
        // From now on, between calls too: the thread would go on at the
        // loop, not where the last call left it.
        let mut r = ptrace::getregs(self.tid)?;
        r.rip = insn + 2;
        // Not in a system call to restart (at an interrupt stop of an
        // attach, the kernel would otherwise run the interrupted call once
        // more, at the page, before the loop).
        r.orig_rax = u64::MAX;
        ptrace::setregs(self.tid, r)?;
        if let Some((pid, old)) = before.filter(|&(_, old)| old != record) {
            write_code(pid, old, &[0u8; 8])?;
        }
        Ok(())
    }

    /// As [`Injector::new`] for a thread at its `PTRACE_INTERRUPT` stop,
    /// which runs the `syscall` instruction at `insn`. If the interrupt
    /// cut a system call short to be restarted, the saved registers are
    /// set to restart it, as the kernel would have on resuming.
    pub fn at_interrupt(tid: Pid, insn: u64) -> io::Result<Injector> {
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
        ptrace::setregs(self.tid, self.saved)?;
        if let Some((pid, record)) = self.parked {
            // The thread is back at its own code: the record is void (the
            // release checks where the thread is, too).
            let _ = write_code(pid, record, &[0u8; 8]);
        }
        for sig in std::mem::take(&mut self.held) {
            let _ = signal::kill(self.tid, sig);
        }
        Ok(())
    }
}

impl Drop for Injector {
    /// An injection cut short by an error still gives the thread its
    /// registers back (if it is stopped), so that it can be let go.
    fn drop(&mut self) {
        if !self.finished {
            let _ = ptrace::setregs(self.tid, self.saved);
        }
    }
}

/// Where in the mover's code page the parking record is.
pub const PARK_RECORD: u64 = 2048;

/// First word of a valid parking record.
const PARK_MAGIC: u64 = u64::from_le_bytes(*b"pgsPARK1");

/// Words of a `user_regs_struct`.
const REGS_WORDS: usize = std::mem::size_of::<libc::user_regs_struct>() / 8;

/// Bytes of a parking record: magic, thread id, registers.
const RECORD_BYTES: usize = 16 + REGS_WORDS * 8;

/// First word of the bootstrap in a vDSO ([`vdso_bootstrap`]).
const BOOT_MAGIC: u64 = u64::from_le_bytes(*b"pgsBOOT1");

/// Offset of the bootstrap's code: the `syscall` instruction and
/// `pause()` loop that start [`MOVER_CODE`].
const BOOT_CODE: u64 = 16;

/// Bytes of the bootstrap's code.
const BOOT_LOOP: usize = 11;

/// Offset of the bootstrap's parking record.
const BOOT_RECORD: u64 = 32;

/// Bytes of the bootstrap: magic, code, record.
const BOOT_BYTES: usize = BOOT_RECORD as usize + RECORD_BYTES;

/// Where a parked thread's instruction pointer is, past the `syscall`
/// of the `pause()` loop, from the start of the code.
const PAUSE_PC: u64 = 9;

/// Writes a bootstrap into the unused end of the vDSO of `pid` (the zero
/// bytes that round its image up to whole pages; the process gets its
/// own copy of that page): a magic word, the `syscall` instruction and
/// `pause()` loop that start [`MOVER_CODE`], and room for a parking
/// record. Returns the address of its `syscall`, or `None` if the vDSO
/// has no room (the first calls of a set-up then run at a `syscall` of
/// the vDSO's own code, with no parking).
///
/// A set-up's first call maps the mover's page: until then the program
/// has no page of pagescope's, and a thread let go in the middle of that
/// call by pagescope's death would run on into the vDSO with the call's
/// registers. Parked at the bootstrap it waits in `pause()` instead, for
/// `--release`.
pub fn vdso_bootstrap(pid: u32) -> io::Result<Option<u64>> {
    let (start, bytes) = vdso(pid)?;
    // One written before (a process traced again): used again.
    let at = (0..bytes.len().saturating_sub(BOOT_BYTES))
        .step_by(64)
        .find(|&i| bytes[i..i + 8] == BOOT_MAGIC.to_le_bytes())
        .or_else(|| {
            let last = bytes.iter().rposition(|&b| b != 0)?;
            // Clear of whatever the image ends with, by 64 bytes at least.
            let at = (last + 1 + 64).next_multiple_of(64);
            (at + BOOT_BYTES <= bytes.len()).then_some(at)
        });
    let Some(at) = at else {
        return Ok(None);
    };
    let boot = start + at as u64;
    let mut area = BOOT_MAGIC.to_le_bytes().to_vec();
    area.resize(BOOT_CODE as usize, 0);
    area.extend_from_slice(&MOVER_CODE[..BOOT_LOOP]);
    area.resize(BOOT_RECORD as usize + 8, 0);
    write_code(pid, boot, &area)?;
    Ok(Some(boot + BOOT_CODE))
}

/// Writes `bytes` at `addr` in `pid` through `/proc/PID/mem`, which
/// writes into a page mapped without write permission (the mover's code
/// page): the kernel gives the process its own copy of the page.
pub fn write_code(pid: u32, addr: u64, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/mem"))?
        .write_all_at(bytes, addr)
}

/// The threads of `pid` blocked in `pause()` in the loop of a page that
/// holds [`MOVER_CODE`], or of a vDSO bootstrap ([`vdso_bootstrap`]):
/// each with the address of the parking record there and its bytes.
fn in_pause_loop(pid: u32) -> Vec<(u32, u64, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        // "nr args... sp pc" of a thread blocked in a system call.
        let Ok(sc) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")) else {
            continue;
        };
        let f: Vec<&str> = sc.split_whitespace().collect();
        if f.len() != 9 || f[0] != "34" {
            continue;
        }
        let Some(pc) = f[8]
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok())
        else {
            continue;
        };
        let code = pc & !4095;
        let mut page = vec![0u8; PARK_RECORD as usize + RECORD_BYTES];
        if (code + 2..=code + MOVER_BATCH).contains(&pc)
            && super::remote::read(pid, code, &mut page).is_ok()
            && page[..MOVER_CODE.len()] == MOVER_CODE
        {
            out.push((
                tid,
                code + PARK_RECORD,
                page.split_off(PARK_RECORD as usize),
            ));
            continue;
        }
        let Some(boot) = pc.checked_sub(PAUSE_PC + BOOT_CODE) else {
            continue;
        };
        let mut area = vec![0u8; BOOT_BYTES];
        if super::remote::read(pid, boot, &mut area).is_ok()
            && area[..8] == BOOT_MAGIC.to_le_bytes()
            && area[BOOT_CODE as usize..][..BOOT_LOOP] == MOVER_CODE[..BOOT_LOOP]
        {
            out.push((
                tid,
                boot + BOOT_RECORD,
                area.split_off(BOOT_RECORD as usize),
            ));
        }
    }
    out
}

/// Whether `pid` is a mover that pagescope never attached (it died
/// between the `clone` that made it and the attach, so the kernel did
/// not kill it with pagescope): a process of one thread, waiting in the
/// `pause()` loop of a mover's code page with no parking record naming
/// it. (No thread of the program waits there but a parked one, which a
/// record names.) It holds a copy of the program's descriptors as they
/// were at the `clone` (a pipe's write end keeps the reader waiting), so
/// `--release` ends it.
pub fn stray_mover(pid: u32) -> bool {
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count());
    threads == 1 && in_pause_loop(pid).len() == 1 && Parked::find(pid).is_empty()
}

/// A thread left in the `pause()` loop of a mover's code page (or of
/// the bootstrap in the vDSO) by an injection that pagescope did not live
/// to finish, and the registers to give it back.
///
/// Before an injection changes a thread's registers, the tracer writes
/// them into the code page (at [`PARK_RECORD`]: magic, thread id,
/// `user_regs_struct`; in the bootstrap, after its code), and clears the
/// record once the thread has them back. A thread whose record is still
/// there *and* that sits in the loop (the program's own code never runs
/// there) is parked.
#[derive(Debug, Clone, Copy)]
pub struct Parked {
    /// The thread.
    pub tid: u32,
    /// Its parking record's address.
    pub record: u64,
    regs: libc::user_regs_struct,
}

impl Parked {
    fn record(tid: u32, regs: &libc::user_regs_struct) -> Vec<u8> {
        let mut out = Vec::with_capacity(RECORD_BYTES);
        out.extend_from_slice(&PARK_MAGIC.to_le_bytes());
        out.extend_from_slice(&u64::from(tid).to_le_bytes());
        // SAFETY: user_regs_struct is plain u64 words.
        let words: &[u64; REGS_WORDS] = unsafe { &*(regs as *const _ as *const [u64; REGS_WORDS]) };
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// The parked threads of process `pid`: each thread blocked in
    /// `pause()` whose instruction pointer is in the loop of a page
    /// holding [`MOVER_CODE`] and a record naming it.
    pub fn find(pid: u32) -> Vec<Parked> {
        let mut out = Vec::new();
        for (tid, record, rec) in in_pause_loop(pid) {
            let word = |i: usize| u64::from_le_bytes(rec[i * 8..i * 8 + 8].try_into().unwrap());
            if word(0) != PARK_MAGIC || word(1) != u64::from(tid) {
                continue;
            }
            let mut words = [0u64; REGS_WORDS];
            for (i, w) in words.iter_mut().enumerate() {
                *w = word(2 + i);
            }
            // SAFETY: user_regs_struct is plain u64 words.
            let regs: libc::user_regs_struct = unsafe { std::mem::transmute(words) };
            out.push(Parked { tid, record, regs });
        }
        out
    }

    /// Gives the thread its registers back (attached for that moment
    /// only): it leaves the `pause()` and goes on with its own code, as
    /// it would have after the injection. Clears the record.
    pub fn unpark(&self, pid: u32) -> io::Result<()> {
        let t = Pid::from_raw(self.tid as i32);
        ptrace::seize(t, ptrace::Options::empty()).map_err(|e| seize_error(t, e))?;
        let r = (|| {
            ptrace::interrupt(t)?;
            loop {
                match waitpid(t, Some(WaitPidFlag::__WALL)) {
                    Err(Errno::EINTR) => continue,
                    Ok(WaitStatus::PtraceEvent(..)) => break,
                    // A signal that came meanwhile: deliver it later.
                    Ok(WaitStatus::Stopped(_, sig)) => ptrace::cont(t, sig)?,
                    Ok(other) => {
                        return Err(io::Error::other(format!(
                            "thread {} went away while parked: {other:?}",
                            self.tid
                        )))
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            ptrace::setregs(t, self.regs)?;
            Ok(())
        })();
        let _ = write_code(pid, self.record, &[0u8; 8]);
        let _ = ptrace::detach(t, None);
        r
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs SIGINT and SIGTERM handlers that set [`stop_requested`]
/// without `SA_RESTART`, so the calling thread's blocking `waitpid`
/// returns `EINTR`. Other threads should block both signals.
pub fn catch_stop_signals() -> io::Result<()> {
    let action = signal::SigAction::new(
        signal::SigHandler::Handler(on_stop_signal),
        signal::SaFlags::empty(),
        signal::SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { signal::sigaction(sig, &action) }.map_err(io::Error::from)?;
    }
    Ok(())
}

/// Asks the tracer to stop, as SIGINT would.
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}

/// Whether SIGINT or SIGTERM arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Runs `f` with SIGINT and SIGTERM blocked, so threads it spawns inherit
/// the block and the signals reach the calling thread.
pub fn with_stop_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    let mut set = signal::SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    let _ = signal::pthread_sigmask(signal::SigmaskHow::SIG_BLOCK, Some(&set), None);
    let out = f();
    let _ = signal::pthread_sigmask(signal::SigmaskHow::SIG_UNBLOCK, Some(&set), None);
    out
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
    kcmp(a, b, 1, 0, 0)
}

/// Whether descriptor `fa` of process `a` and `fb` of `b` are one open
/// file (`kcmp KCMP_FILE`): a copy inherited at a fork, or taken with
/// `pidfd_getfd`.
pub fn same_file(a: u32, fa: i32, b: u32, fb: i32) -> io::Result<bool> {
    kcmp(a, b, 0, fa as libc::c_long, fb as libc::c_long)
}

/// Whether processes `a` and `b` share one address space (`kcmp
/// KCMP_VM`): a pagescope mover and its program, a `vfork` child before
/// its exec and its parent.
pub fn same_vm(a: u32, b: u32) -> io::Result<bool> {
    kcmp(a, b, 1, 0, 0)
}

fn kcmp(a: u32, b: u32, kind: libc::c_long, x: libc::c_long, y: libc::c_long) -> io::Result<bool> {
    // SAFETY: kcmp takes integers only.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            a as libc::c_long,
            b as libc::c_long,
            kind,
            x,
            y,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r == 0)
    }
}

/// Finds a `syscall` instruction (bytes 0f 05) in the vDSO of `pid`, for
/// injection where the thread's own can't be used.
pub fn vdso_syscall(pid: u32) -> io::Result<u64> {
    let (start, bytes) = vdso(pid)?;
    bytes
        .windows(2)
        .position(|w| w == [0x0f, 0x05])
        .map(|i| start + i as u64)
        .ok_or_else(|| io::Error::other("no syscall instruction in the vDSO"))
}

/// The vDSO of `pid`: its address and bytes.
fn vdso(pid: u32) -> io::Result<(u64, Vec<u8>)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let (start, end) = maps
        .lines()
        .find(|l| l.ends_with("[vdso]"))
        .and_then(|l| {
            let (a, b) = l.split(' ').next()?.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .ok_or_else(|| io::Error::other("the process has no vDSO (booted with vdso=0?)"))?;
    let mut bytes = vec![0u8; (end - start) as usize];
    super::remote::read(pid, start, &mut bytes)?;
    Ok((start, bytes))
}

/// The code of the mover's page: a `syscall` instruction for injection,
/// then a loop of `pause()` where the mover waits if it is ever let go,
/// then [`MOVER_BATCH`], which runs a table of system calls in one go.
///
/// ```text
///  0: 0f 05           syscall
///  2: b8 22 00 00 00  mov eax, 34 (pause)
///  7: 0f 05           syscall
///  9: eb f7           jmp 2
///     ; batch: rbx = table of 64-byte entries (nr, six arguments, result),
///     ; r12 = number of entries
///  b: 4d 85 e4        test r12, r12
///  e: 74 2a           jz 3a
/// 10: 48 8b 03        mov rax, [rbx]
/// 13: 48 8b 7b 08     mov rdi, [rbx+8]
/// 17: 48 8b 73 10     mov rsi, [rbx+16]
/// 1b: 48 8b 53 18     mov rdx, [rbx+24]
/// 1f: 4c 8b 53 20     mov r10, [rbx+32]
/// 23: 4c 8b 43 28     mov r8, [rbx+40]
/// 27: 4c 8b 4b 30     mov r9, [rbx+48]
/// 2b: 0f 05           syscall
/// 2d: 48 89 43 38     mov [rbx+56], rax
/// 31: 48 83 c3 40     add rbx, 64
/// 35: 49 ff cc        dec r12
/// 38: eb d1           jmp b
/// 3a: cc              int3 (SIGTRAP: the tracer sees the batch done)
/// 3b: eb fd           jmp 3a
/// ```
pub const MOVER_CODE: [u8; 61] = [
    0x0f, 0x05, 0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7, // syscall; pause loop
    0x4d, 0x85, 0xe4, 0x74, 0x2a, // test r12, r12; jz 3a
    0x48, 0x8b, 0x03, 0x48, 0x8b, 0x7b, 0x08, 0x48, 0x8b, 0x73, 0x10, // rax, rdi, rsi
    0x48, 0x8b, 0x53, 0x18, 0x4c, 0x8b, 0x53, 0x20, // rdx, r10
    0x4c, 0x8b, 0x43, 0x28, 0x4c, 0x8b, 0x4b, 0x30, // r8, r9
    0x0f, 0x05, 0x48, 0x89, 0x43, 0x38, // syscall; result
    0x48, 0x83, 0xc3, 0x40, 0x49, 0xff, 0xcc, 0xeb, 0xd1, // next entry
    0xcc, 0xeb, 0xfd, // int3
];

/// Offset of the batch routine in [`MOVER_CODE`].
pub const MOVER_BATCH: u64 = 0xb;

/// Bytes of one entry of a batch table: `nr`, six arguments, and the
/// result written back.
pub const BATCH_ENTRY: usize = 64;

/// clone flags of the mover: same address space, not auto-attached, no
/// signal to the parent when it ends (so the program's `wait` never sees
/// it).
pub const MOVER_CLONE_FLAGS: u64 = (libc::CLONE_VM | libc::CLONE_UNTRACED) as u64;

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
    regs: libc::user_regs_struct,
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
            regs: ptrace::getregs(p)?,
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
        ptrace::setregs(self.pid, r)?;
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
