//! Setting up an address space for tracing, made by the program itself
//! under injection: the mover's code page, a userfaultfd, the store and
//! its index, and the mover; then every mapping registered and emptied.
//! Also attaching a running process and the ones it had forked.

use super::{Ptracer, ThreadState};
use crate::trace::descriptors::{inject, make_userfaultfd, take_fd, write_name};
use crate::trace::hooks::die_here_for_tests;
use crate::trace::leftover::Leftover;
use crate::trace::mm::{
    Mm, MoverRef, Store, INDEX_BYTES, INDEX_NAME, MOVER_NAME, PAGE, SCRATCH_BYTES, STORE_BYTES,
    STORE_NAME,
};
use crate::trace::os::{
    sys, MAP_ANONYMOUS, MAP_NORESERVE, MAP_PRIVATE, PR_SET_VMA, PR_SET_VMA_ANON_NAME,
};
use crate::trace::ptrace::{self as pt, nr, Injector};
use crate::trace::state::{anon_kind, maps_of, MapRange, Space};
use crate::trace::uffd::{self, Uffd};
use pagescope_core::trace::{EvictMethod, MappingKind, ProcessEventKind};
use pagescope_core::Result;
use pagescope_sys::ptrace;
use rustix::process::Signal;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

impl Ptracer {
    /// Sets up tracing of the address space of `tid`, stopped at a
    /// syscall-exit stop (or, `interrupted`, at the stop of an attach): a
    /// userfaultfd and a store made by the program itself, the descriptor
    /// copied to the tracer, and every private anonymous and shared-memory
    /// mapping registered and emptied.
    pub(super) fn attach_space(&mut self, tid: u32, interrupted: bool) -> Result<u32> {
        die_here_for_tests("attach");
        let tgid = self.threads[&tid].tgid;
        let mut inj = start_injection(tid, tgid, interrupted)?;
        // First the mover's page of code, whose `syscall` instruction the
        // other calls run at: a thread there goes on into a `pause()`
        // loop, not into the program, should pagescope die meanwhile (see
        // `Injector::park_in`). Its own mmap runs at the same loop, written
        // into the vDSO's unused end.
        if let Some(boot) = pt::vdso_bootstrap(tgid).map_err(|e| sys("writing into the vDSO", e))? {
            inj.park_in_vdso(tgid, boot)
                .map_err(|e| sys("writing the parking record", e))?;
        }
        // (Mapped read and execute; written through /proc/PID/mem.)
        let code = inject(
            &mut inj,
            nr::MMAP,
            [0, PAGE, 5, MAP_PRIVATE | MAP_ANONYMOUS, u64::MAX, 0],
        )?;
        if code < 0 {
            let _ = inj.finish();
            return Err(sys(
                "mmap of the mover's code",
                std::io::Error::from_raw_os_error(-code as i32),
            ));
        }
        let code = code as u64;
        place_mover_code(&mut inj, tgid, code)?;
        // What the set-up has made so far, taken out again if a later
        // call fails (an attach that fails leaves the program as it was).
        let mut made = Leftover {
            tgid,
            code: Some(code),
            ..Leftover::default()
        };
        let areas = match self.make_areas(&mut inj, tid, code, &mut made) {
            Ok(areas) => areas,
            Err(e) => {
                // The mover waits in its loop; killed, it is reaped below.
                for &m in &made.movers {
                    let _ = pagescope_sys::signals::kill(m, Signal::KILL.as_raw());
                }
                made.remove(&mut inj);
                let _ = inj.finish();
                return Err(e);
            }
        };
        inj.finish().map_err(|e| sys("ptrace SETREGS", e))?;
        die_here_for_tests("exec-done");
        let (key, ready) = self.register_space(tgid, areas)?;
        self.wait_ready(&ready)?;
        Ok(key)
    }

    /// Makes in the program, stopped under `inj` and parked at the
    /// mover's `code`, what a traced address space needs: a userfaultfd
    /// (copied to pagescope), the store and its index, their names, and
    /// the mover. Each thing made is noted in `made` as it is.
    fn make_areas(
        &self,
        inj: &mut Injector,
        tid: u32,
        code: u64,
        made: &mut Leftover,
    ) -> Result<Areas> {
        let tgid = made.tgid;
        let fd = make_userfaultfd(inj, tid)?;
        made.fds.push(fd as i32);
        let (store, index) = map_store(inj, made)?;
        name_areas(
            inj,
            tid,
            [
                (store, STORE_BYTES, STORE_NAME),
                (index, INDEX_BYTES, INDEX_NAME),
                (code, PAGE, MOVER_NAME),
            ],
        )?;
        let brk = inject(inj, nr::BRK, [0; 6])?;
        let mover = inject(inj, nr::CLONE, [pt::MOVER_CLONE_FLAGS, 0, 0, 0, 0, 0])?;
        if mover <= 0 {
            return Err(sys(
                "clone of the mover",
                std::io::Error::from_raw_os_error(-mover as i32),
            ));
        }
        made.movers.push(mover as u32);
        let uffd = self.uffd_with_features(take_fd(tgid, fd as i32)?)?;
        if self.shared.lock().method == EvictMethod::Move {
            // UFFDIO_MOVE's destination must be registered too.
            uffd.register(store, STORE_BYTES, uffd::MODE_MISSING_WP)
                .map_err(|e| sys("UFFDIO_REGISTER (store)", e))?;
        }
        Ok(Areas {
            uffd,
            fd: fd as i32,
            code,
            store,
            index,
            brk,
            mover: mover as u32,
        })
    }

    /// Files the new address space of `tgid`, whose set-up made `areas`:
    /// each of its private anonymous and shared-memory mappings is
    /// registered, logged, and handed to the fault thread to be emptied.
    /// Returns its key, and the flag the fault thread sets once it is
    /// ready.
    fn register_space(&mut self, tgid: u32, areas: Areas) -> Result<(u32, Arc<AtomicBool>)> {
        let (method, shmem) = {
            let st = self.shared.lock();
            (st.method, st.shmem)
        };
        let Areas {
            uffd,
            fd,
            code,
            store,
            index,
            brk,
            mover,
        } = areas;
        let u = Arc::new(uffd);
        let mut space = Space {
            mm: Mm::new(
                tgid,
                u.clone(),
                Store {
                    base: store,
                    index,
                    next: 1,
                    recorded: 0,
                    free: Vec::new(),
                },
                Some(MoverRef {
                    mover: None,
                    pid: mover,
                    insn: code,
                    fd,
                    scratch: index + INDEX_BYTES - SCRATCH_BYTES,
                    failed: false,
                }),
                method,
                &self.proc,
            ),
            maps: BTreeMap::new(),
            heap: None,
            pending_empty: Vec::new(),
            thp: Vec::new(),
            ready: Arc::new(AtomicBool::new(false)),
        };
        let lines = maps_of(&self.proc, tgid)?;
        let mut st = self.shared.lock();
        let key = st.next_space;
        st.next_space += 1;
        let mut to_empty = Vec::new();
        for line in &lines {
            if line.start >= store - GUARD && line.end <= store + STORE_BYTES + GUARD
                || line.start == index
                || line.start == code
            {
                continue;
            }
            let len = line.end - line.start;
            let (kind, shared) = match anon_kind(line) {
                Some(kind) if u.register(line.start, len, uffd::MODE_MISSING_WP).is_ok() => {
                    (kind, false)
                }
                None if shmem
                    && line.perms.ends_with('s')
                    && u.register_shared(line.start, len).unwrap_or(false) =>
                {
                    (MappingKind::Shared, true)
                }
                _ => continue,
            };
            let id = st.new_mapping(tgid, line, kind, true)?;
            if kind == MappingKind::Heap {
                space.heap = Some((id, line.start, line.end));
            }
            space
                .maps
                .insert(line.start, MapRange::of(line, id, shared));
            to_empty.push((line.start, line.end, shared));
        }
        if space.heap.is_none() && brk > 0 {
            space.heap = Some((u32::MAX, brk as u64, brk as u64));
        }
        // Pages already there would never fault: the fault thread moves
        // them all out before the program runs on, so the first touch of
        // each is seen.
        // Moved out and back, its transparent huge pages would be split
        // for good: which there are, to collapse them again at the end.
        let private: Vec<(u64, u64)> = to_empty
            .iter()
            .filter(|r| !r.2)
            .map(|&(s, e, _)| (s, e))
            .collect();
        space.thp = crate::trace::thp::huge_ranges(&space.mm.proc, tgid, &private);
        space.pending_empty = to_empty;
        let ready = space.ready.clone();
        st.spaces.insert(key, space);
        Ok((key, ready))
    }

    /// Starts tracing the attached process `tgid` whose threads are
    /// `seized` (all stopped), and lets them run on.
    pub(in crate::trace) fn attach_running(
        &mut self,
        tgid: u32,
        seized: &[(u32, pt::Seized)],
    ) -> Result<()> {
        for &(tid, _) in seized {
            self.threads.insert(
                tid,
                ThreadState {
                    space: None,
                    tgid,
                    entry: None,
                    mover_code: None,
                },
            );
        }
        let Some(&(by, _)) = seized.iter().find(|(_, how)| how.injectable()) else {
            return Err(sys(
                &format!("cannot attach to process {tgid}"),
                std::io::Error::other("no thread stopped where system calls can be injected"),
            ));
        };
        let key = self.attach_space(by, true)?;
        for t in self.threads.values_mut() {
            t.space = Some(key);
        }
        for &(tid, how) in seized {
            let sig = match how {
                pt::Seized::Signal(sig) => sig,
                pt::Seized::Event(event) => {
                    self.caught_forking(tid, event)?;
                    0
                }
                pt::Seized::Interrupted => 0,
                // Stopped it was, stopped it stays (until a SIGCONT). The
                // injections left it at a system call stop, which
                // PTRACE_LISTEN refuses: interrupted again, it stops in
                // its job-control stop before it runs a user instruction,
                // and is kept there (`on_status`).
                pt::Seized::GroupStop => {
                    let _ = ptrace::interrupt(tid);
                    0
                }
            };
            let _ = ptrace::syscall(tid, sig);
        }
        Ok(())
    }

    /// Traces the processes that the attached one had forked before the
    /// attach (and theirs), each attached as it was. One that shares its
    /// parent's address space (a `vfork` child before its exec, a mover)
    /// is not a program of its own, and is left alone; one forked during
    /// the attach by a process already attached is followed through its
    /// fork event instead.
    pub(in crate::trace) fn attach_descendants(&mut self) -> Result<()> {
        let proc = &self.proc.clone();
        let mut buf = Vec::new();
        for pid in crate::procfs::descendants(proc, self.root) {
            if self.threads.contains_key(&pid) {
                continue;
            }
            let Ok(dir) = crate::procfs::ProcDir::open(proc, pid) else {
                continue; // exited
            };
            let (Ok(stat), Ok(command)) = (dir.stat(&mut buf), dir.cmdline(&mut buf)) else {
                continue;
            };
            // A zombie has nothing left to trace.
            if matches!(stat.state, 'Z' | 'X') || pt::same_vm(pid, stat.ppid).unwrap_or(true) {
                continue;
            }
            let seized = match pt::seize_process(pid, pt::options()) {
                Ok(s) if s.is_empty() => continue,
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(sys(
                        &format!("cannot attach to process {pid}, a child of {}", self.root),
                        e,
                    ))
                }
            };
            self.shared
                .lock()
                .event(pid, ProcessEventKind::Start { command })?;
            self.attach_running(pid, &seized)?;
        }
        Ok(())
    }

    /// A thread of the attached process stopped at a fork event while it
    /// was being attached: the child (attached by the kernel) forked
    /// before there was a userfaultfd, so it is followed but not traced
    /// until it execs. A thread it cloned is in the task list, and was
    /// attached with the others.
    fn caught_forking(&mut self, parent: u32, event: i32) -> Result<()> {
        if !matches!(
            event,
            ptrace::event::FORK | ptrace::event::VFORK | ptrace::event::CLONE
        ) {
            return Ok(());
        }
        let Ok(child) = ptrace::event_message(parent) else {
            return Ok(());
        };
        let child = child as u32;
        if self.threads.contains_key(&child) {
            return Ok(());
        }
        self.threads.insert(
            child,
            ThreadState {
                space: None,
                tgid: child,
                entry: None,
                mover_code: None,
            },
        );
        self.shared.lock().event(
            child,
            ProcessEventKind::Fork {
                parent: self.threads[&parent].tgid,
            },
        )?;
        if self.parked.remove(&child) {
            let _ = ptrace::syscall(child, 0);
        }
        Ok(())
    }

    /// pagescope's copy of a userfaultfd of the traced program, with the
    /// features of this trace (checked before the program started).
    pub(super) fn uffd_with_features(&self, fd: OwnedFd) -> Result<Uffd> {
        // A copy: the program holds the descriptor too, so a holder need
        // not keep it (see [`crate::trace::holder`]).
        crate::trace::holder::mark_copy(fd.as_raw_fd(), true);
        let u = Uffd::new(fd);
        let (method, shmem) = {
            let st = self.shared.lock();
            (st.method, st.shmem)
        };
        u.api(uffd::features(method == EvictMethod::Move, shmem))
            .map_err(|e| sys("UFFDIO_API", e))?;
        Ok(u)
    }
}

/// What the set-up of an address space made in the program.
struct Areas {
    /// pagescope's copy of the program's userfaultfd.
    uffd: Uffd,
    /// The userfaultfd's number in the program.
    fd: i32,
    /// The mover's code page.
    code: u64,
    /// The store, and its index.
    store: u64,
    index: u64,
    /// The program break when it was made.
    brk: i64,
    /// The mover.
    mover: u32,
}

/// The inaccessible page on each side of the store.
const GUARD: u64 = PAGE;

/// Borrows the thread `tid` of `tgid` for injection, at a `syscall`
/// instruction of the vDSO: at a syscall-exit stop, or (`interrupted`) at
/// the stop of an attach.
fn start_injection(tid: u32, tgid: u32, interrupted: bool) -> Result<Injector> {
    let insn = pt::vdso_syscall(tgid).map_err(|e| sys("finding a syscall instruction", e))?;
    let inj = if interrupted {
        Injector::at_interrupt(tid, insn)
    } else {
        Injector::new(tid, Some(insn))
    };
    inj.map_err(|e| sys("ptrace GETREGS", e))
}

/// Writes the mover's code into its page at `code` in `tgid`, and parks
/// the injection there.
fn place_mover_code(inj: &mut Injector, tgid: u32, code: u64) -> Result<()> {
    die_here_for_tests("vdso");
    pt::write_code(tgid, code, &pt::MOVER_CODE).map_err(|e| sys("writing the mover's code", e))?;
    inj.park_in(tgid, code)
        .map_err(|e| sys("writing the parking record", e))?;
    die_here_for_tests("exec");
    Ok(())
}

/// Maps the store (between two guard pages) and its index in the
/// program; returns their addresses, each noted in `made` as it is made.
fn map_store(inj: &mut Injector, made: &mut Leftover) -> Result<(u64, u64)> {
    let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    let total = STORE_BYTES + 2 * GUARD;
    let base = inject(inj, nr::MMAP, [0, total, 0, flags, u64::MAX, 0])?;
    if base < 0 {
        return Err(sys(
            "mmap of the store in the target",
            std::io::Error::from_raw_os_error(-base as i32),
        ));
    }
    let store = base as u64 + GUARD;
    made.store = Some(store);
    made.guarded = true;
    let index = inject(inj, nr::MMAP, [0, INDEX_BYTES, 3, flags, u64::MAX, 0])?;
    if index < 0 {
        return Err(sys(
            "mmap of the store's index in the target",
            std::io::Error::from_raw_os_error(-index as i32),
        ));
    }
    made.index = Some(index as u64);
    let r = inject(inj, nr::MPROTECT, [store, STORE_BYTES, 3, 0, 0, 0])?;
    if r < 0 {
        return Err(sys(
            "mprotect of the store",
            std::io::Error::from_raw_os_error(-r as i32),
        ));
    }
    Ok((store, index as u64))
}

/// Names pagescope's areas in the program (`PR_SET_VMA_ANON_NAME`), which
/// makes them visible in maps and findable by --release; kernels without
/// CONFIG_ANON_VMA_NAME refuse, and --release then finds them by size
/// (and the code page by what it holds).
fn name_areas(inj: &mut Injector, t: u32, areas: [(u64, u64, &str); 3]) -> Result<()> {
    let sp = inj.sp();
    for (addr, len, name) in areas {
        let at = write_name(t, sp, name)?;
        inject(
            inj,
            nr::PRCTL,
            [PR_SET_VMA, PR_SET_VMA_ANON_NAME, addr, len, at, 0],
        )?;
    }
    Ok(())
}
