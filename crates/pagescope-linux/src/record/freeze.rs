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
//! signals are delivered, job-control stops are kept with `PTRACE_LISTEN`;
//! with [`Freezer::hold_born`], a new process at its first stop, and a
//! process that exec'd at an interrupt stop after its exec, are held (both
//! before the image's first instruction) for the recorder to set up
//! ([`Freezer::take_born`]); a new process is handed over once its
//! creator's event stop has said whether it shares the creator's memory
//! (`record::born`).
//! A recorder that dies detaches them all (the kernel does it), so the
//! program runs on.

use super::born::{Births, Creation};
use crate::procfs::ProcDir;
use pagescope_sys::ptrace;
use pagescope_sys::wait::{self, waitpid};
use rustix::io::Errno;
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use super::born::Born;

/// How long a boundary waits for every thread to stop.
const FREEZE_WAIT: Duration = Duration::from_millis(250);

/// What restarts a stopped thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resume {
    /// `PTRACE_CONT`, delivering this signal (0 for none; raw numbers, so
    /// that real-time signals pass too).
    Cont(i32),
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
#[derive(Debug)]
pub struct Freezer {
    threads: HashMap<u32, State>,
    /// The procfs where the threads are listed.
    proc_root: PathBuf,
    /// Whether threads stop on their way out (`PTRACE_O_TRACEEXIT`), for
    /// the recorder to read a process that exits before it goes.
    exits: bool,
    /// Threads stopped on their way out since the last
    /// [`Freezer::take_exiting`], between boundaries.
    exiting: Vec<u32>,
    /// Whether processes are held where they start, between boundaries
    /// ([`Freezer::hold_born`]).
    born_held: bool,
    /// Processes held before their first instruction since the last
    /// [`Freezer::take_born`], between boundaries.
    born: Vec<Born>,
    /// New processes whose first stop and creator's stop have not both
    /// been read (see `record::born`).
    births: Births,
    /// Whether the recording's write tracking attaches to each process
    /// too (the scan's userfaultfd is put in with ptrace), so that
    /// `--no-freeze` would not get past a refused attach either.
    writes_need_ptrace: bool,
    /// Threads that exec'd and were interrupted: their next interrupt
    /// stop comes before the new image's first instruction.
    execs: HashSet<u32>,
}

/// One wait status: the thread, and what it reports (signals as raw
/// numbers, so that a real-time one passes too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// The thread.
    pub tid: u32,
    /// What it reports.
    pub how: wait::Status,
}

/// Waits for any child or tracee (`__WALL`); `None` if `nohang` and
/// nothing is pending, or if there is nothing to wait for.
pub fn wait_any(nohang: bool) -> io::Result<Option<Status>> {
    let flags = if nohang {
        wait::ALL | wait::Options::NOHANG
    } else {
        wait::ALL
    };
    loop {
        match waitpid(None, flags) {
            Ok(Some((tid, how))) => return Ok(Some(Status { tid, how })),
            Ok(None) => return Ok(None),
            Err(Errno::INTR) => continue,
            Err(Errno::CHILD) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits for one process (blocking); its exit, if it exited.
pub fn wait_pid(pid: u32) -> Option<Exit> {
    let (tid, how) = waitpid(Some(pid), wait::ALL).ok()??;
    exit_of(Status { tid, how })
}

/// The exit a wait status reports, if it reports one.
pub fn exit_of(st: Status) -> Option<Exit> {
    let code = match st.how {
        wait::Status::Exited(code) => code,
        wait::Status::Signaled(sig) => 128 + sig,
        _ => return None,
    };
    Some(Exit { pid: st.tid, code })
}

/// Whether a task is gone or can no longer stop (exiting: zombie or dead).
fn is_ending(proc_root: &Path, tid: u32) -> bool {
    ProcDir::at(proc_root, tid)
        .stat(&mut Vec::new())
        .map_or(true, |s| s.is_dead())
}

/// Whether this process is already `tid`'s tracer.
fn traced_by_us(proc_root: &Path, tid: u32) -> bool {
    ProcDir::at(proc_root, tid).tracer_pid(&mut Vec::new()).ok() == Some(std::process::id())
}

/// Restarts a stopped thread; returns its new state.
fn resume(tid: u32, r: Resume) -> State {
    match r {
        Resume::Cont(sig) => {
            let _ = ptrace::cont(tid, sig);
            State::Running
        }
        Resume::Listen => {
            let _ = ptrace::listen(tid);
            State::Listening
        }
    }
}

/// Follow new threads, children and execs; `TRACESYSGOOD` marks syscall
/// stops, which only a system call injected into a frozen thread makes
/// (see `record::writes`), and which must not look like a `SIGTRAP`.
/// The options the freezer attaches threads with (`PTRACE_O_*`), without
/// the stop at exits.
fn options() -> u32 {
    ptrace::PTRACE_O_TRACEFORK
        | ptrace::PTRACE_O_TRACEVFORK
        | ptrace::PTRACE_O_TRACECLONE
        | ptrace::PTRACE_O_TRACEEXEC
        | ptrace::PTRACE_O_TRACESYSGOOD
}

impl Freezer {
    /// A freezer of no thread yet, listing threads in `proc_root`. With
    /// `exits`, a thread on its way out (`PTRACE_EVENT_EXIT`, before its
    /// address space goes) stays stopped between boundaries until
    /// [`Freezer::resume`]: see [`Freezer::take_exiting`].
    pub fn new(proc_root: &Path, exits: bool) -> Freezer {
        Freezer {
            threads: HashMap::new(),
            proc_root: proc_root.to_path_buf(),
            exits,
            exiting: Vec::new(),
            born_held: false,
            born: Vec::new(),
            births: Births::default(),
            writes_need_ptrace: false,
            execs: HashSet::new(),
        }
    }

    /// Says that the recording's write tracking attaches to each process
    /// with ptrace as well, so that a refused attach does not suggest
    /// `--no-freeze`.
    pub fn writes_need_ptrace(&mut self) {
        self.writes_need_ptrace = true;
    }

    /// From now on, a new process (fork, vfork or clone, not a thread)
    /// stays at its first stop between boundaries, and a thread that
    /// execs is interrupted right after and stays at that stop, until
    /// [`Freezer::resume`]: see [`Freezer::take_born`]. At a boundary
    /// (while freezing) they stop as any thread does.
    pub fn hold_born(&mut self) {
        self.born_held = true;
    }

    /// The processes held before their first instruction since the last
    /// call ([`Freezer::hold_born`]); each stays stopped until
    /// [`Freezer::resume`] or the next [`Freezer::thaw`].
    pub fn take_born(&mut self) -> Vec<Born> {
        std::mem::take(&mut self.born)
    }

    /// The options it attaches threads with (`PTRACE_O_*`).
    pub fn options(&self) -> u32 {
        if self.exits {
            options() | ptrace::PTRACE_O_TRACEEXIT
        } else {
            options()
        }
    }

    /// The threads that stopped on their way out between boundaries
    /// since the last call; each stays stopped until [`Freezer::resume`]
    /// or the next [`Freezer::thaw`].
    pub fn take_exiting(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.exiting)
    }

    /// Restarts `tid` if it is stopped.
    pub fn resume(&mut self, tid: u32) {
        if let Some(&State::Stopped(r)) = self.threads.get(&tid) {
            self.threads.insert(tid, resume(tid, r));
        }
    }

    /// Attaches to every thread of `pid`, listing them until no new one
    /// shows up. A process that is gone is not an error.
    pub fn attach(&mut self, pid: u32) -> io::Result<()> {
        loop {
            let mut new = 0;
            let dir = match ProcDir::at(&self.proc_root, pid).tasks() {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            for tid in dir {
                if self.threads.contains_key(&tid) {
                    continue;
                }
                match ptrace::seize(tid, self.options()) {
                    Ok(()) => {
                        self.threads.insert(tid, State::Running);
                        new += 1;
                    }
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => {}
                    // Attached already: a child or thread the kernel
                    // attached (TRACEFORK, TRACECLONE) whose first stop
                    // has not been read yet.
                    Err(e)
                        if e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error())
                            && traced_by_us(&self.proc_root, tid) =>
                    {
                        self.threads.insert(tid, State::Running);
                        new += 1;
                    }
                    // Exiting: it can't be attached, and needn't be.
                    Err(e)
                        if e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error())
                            && is_ending(&self.proc_root, tid) => {}
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()) => {
                        let facts = crate::cause::PtraceFacts::read(&self.proc_root, tid);
                        let hint = if facts.only_attach_refused() && !self.writes_need_ptrace {
                            " (--no-freeze records it without stopping it)"
                        } else {
                            ""
                        };
                        return Err(io::Error::new(
                            io::ErrorKind::PermissionDenied,
                            format!("ptrace of {pid} was refused: {}{hint}", facts.explain()),
                        ));
                    }
                    Err(e) => return Err(io::Error::other(format!("ptrace seize {tid}: {e}"))),
                }
            }
            if new == 0 {
                return Ok(());
            }
        }
    }

    /// Takes `pid`, a single-threaded process attached with [`options`]
    /// and held in a ptrace stop ([`crate::launched::hold_at_exec`]): it
    /// stays stopped until the next [`Freezer::thaw`].
    pub fn hold(&mut self, pid: u32) {
        self.threads.insert(pid, State::Stopped(Resume::Cont(0)));
    }

    /// Whether `tid`, at an interrupt stop, is a new process the kernel
    /// attached (`TRACEFORK`, `TRACEVFORK`, `TRACECLONE`) at its first
    /// stop: not a thread known yet, and the leader of its process.
    fn is_new_process(&self, tid: u32) -> bool {
        !self.threads.contains_key(&tid)
            && ProcDir::at(&self.proc_root, tid)
                .tgid(&mut Vec::new())
                .is_ok_and(|tgid| tgid == tid)
    }

    /// Threads attached.
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Takes one wait status: a thread that stopped or ended. Returns the
    /// exit of a process (or thread) that ended. While `freezing`, stopped
    /// threads are left stopped.
    pub fn on_status(&mut self, st: Status, freezing: bool) -> Option<Exit> {
        if let Some(e) = exit_of(st) {
            self.threads.remove(&e.pid);
            self.execs.remove(&e.pid);
            self.births.forget(e.pid);
            return Some(e);
        }
        let tid = st.tid;
        let r = match st.how {
            // A signal-delivery stop: deliver it.
            wait::Status::Stopped(sig) => Resume::Cont(sig),
            wait::Status::Event {
                event: ptrace::event::EXEC,
                ..
            } => {
                // A thread other than the leader that execs takes the
                // leader's id; its own id disappears without an exit.
                let former = ptrace::event_message(tid).unwrap_or(0);
                if former as u32 != tid {
                    self.threads.remove(&(former as u32));
                }
                // The exec stop is not one where system calls can be
                // injected (to give the new image its write tracking):
                // the interrupt stop that follows, still before the
                // image's first instruction, is.
                if self.born_held && ptrace::interrupt(tid).is_ok() {
                    self.execs.insert(tid);
                    let _ = ptrace::cont(tid, 0);
                    self.threads.insert(tid, State::Running);
                    return None;
                }
                Resume::Cont(0)
            }
            wait::Status::Event {
                event: ptrace::event::STOP,
                signal,
            } if signal == rustix::process::Signal::TRAP.as_raw()
                && self.born_held
                && (self.execs.contains(&tid) || self.is_new_process(tid)) =>
            {
                let exec = self.execs.remove(&tid);
                let born = match (exec, freezing) {
                    (true, _) => Some(Born {
                        pid: tid,
                        exec,
                        own_memory: true,
                    }),
                    // Held until its creator's stop says what it is.
                    (false, false) => self.births.first_stop(tid),
                    // At a boundary, it is set up as a process first
                    // seen there.
                    (false, true) => {
                        self.births.forget(tid);
                        None
                    }
                };
                if !freezing {
                    self.born.extend(born);
                }
                self.threads.insert(tid, State::Stopped(Resume::Cont(0)));
                return None;
            }
            wait::Status::Event {
                event: ptrace::event::EXIT,
                ..
            } if !freezing => {
                self.exiting.push(tid);
                self.threads.insert(tid, State::Stopped(Resume::Cont(0)));
                return None;
            }
            wait::Status::Event {
                event: event @ (ptrace::event::FORK | ptrace::event::VFORK | ptrace::event::CLONE),
                ..
            } => {
                if self.born_held {
                    self.note_creation(tid, event == ptrace::event::VFORK, freezing);
                }
                Resume::Cont(0)
            }
            st if st.is_group_stop() => Resume::Listen,
            wait::Status::Event { .. } | wait::Status::Syscall => {
                // A new thread's first stop.
                if !self.threads.contains_key(&tid) {
                    self.births.forget(tid);
                }
                Resume::Cont(0)
            }
            // Not stopped.
            _ => return None,
        };
        let s = if freezing {
            State::Stopped(r)
        } else {
            resume(tid, r)
        };
        self.threads.insert(tid, s);
        None
    }

    /// Notes, at `creator`'s event stop (`PTRACE_EVENT_FORK`, `VFORK` or
    /// `CLONE`), the task it made, and whether that task shares its
    /// memory (asked now, while the creator is held): see `record::born`.
    /// A new process already held at its first stop is handed over
    /// ([`Freezer::take_born`]), unless a boundary is being made.
    fn note_creation(&mut self, creator: u32, vfork: bool, freezing: bool) {
        let Ok(new) = ptrace::event_message(creator) else {
            return;
        };
        let new = new as u32;
        let same_vm = pagescope_sys::kcmp::same_vm(creator, new);
        let creation = Creation::new(creator, vfork, same_vm);
        let known = self.threads.contains_key(&new);
        let born = self.births.made(new, creation, known);
        if !freezing {
            self.born.extend(born);
        }
    }

    /// Stops every thread; returns the exits seen meanwhile.
    pub fn freeze(&mut self) -> io::Result<Vec<Exit>> {
        for (&tid, s) in &self.threads {
            if *s == State::Running {
                let _ = ptrace::interrupt(tid);
            }
        }
        let mut exits = Vec::new();
        let deadline = Instant::now() + FREEZE_WAIT;
        while self.threads.values().any(|s| *s == State::Running) {
            match wait_any(true)? {
                Some(st) => exits.extend(self.on_status(st, true)),
                None if Instant::now() >= deadline => {
                    // Threads in an unkillable wait (a vfork parent) or
                    // already exiting don't stop; they run no code of
                    // their own meanwhile. Forget the ones that are gone.
                    let proc_root = &self.proc_root;
                    self.threads
                        .retain(|&t, s| *s != State::Running || !is_ending(proc_root, t));
                    break;
                }
                None => std::thread::sleep(Duration::from_micros(200)),
            }
        }
        Ok(exits)
    }

    /// Restarts every thread [`Freezer::freeze`] stopped, and those
    /// stopped on their way out.
    pub fn thaw(&mut self) {
        self.exiting.clear();
        self.born.clear();
        let threads = &self.threads;
        self.births.thaw(|t| threads.contains_key(&t));
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
                let _ = ptrace::interrupt(tid);
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
                _ => 0,
            };
            let _ = ptrace::detach(tid, sig);
        }
        exits
    }
}
