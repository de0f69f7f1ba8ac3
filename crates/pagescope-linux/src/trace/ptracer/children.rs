//! New tasks: a thread joins its process's space; a forked child gets the
//! space the kernel's `UFFD_EVENT_FORK` announced, then at its first stop
//! its own userfaultfd and mover.

use super::{Inherited, Ptracer, ThreadState};
use crate::procfs::ProcDir;
use crate::trace::descriptors::{inject, make_userfaultfd, take_fd, unregister_all};
use crate::trace::hooks::die_here_for_tests;
use crate::trace::mm::{self, Mm, MoverRef};
use crate::trace::os::sys;
use crate::trace::ptrace::{self as pt, nr, Injector};
use crate::trace::state::Space;
use crate::trace::uffd::{self, Uffd};
use pagescope_core::trace::{EvictMethod, ProcessEventKind};
use pagescope_core::Result;
use pagescope_sys::ptrace;
use rustix::process::Signal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Ptracer {
    pub(super) fn on_new_child(&mut self, parent: u32, child: u32, event: i32) -> Result<()> {
        let pts = self.threads[&parent];
        let shares = pt::same_mm(parent, child).unwrap_or(false);
        let is_thread = event == pagescope_sys::ptrace::event::CLONE
            && ProcDir::at(&self.proc, child).tgid(&mut Vec::new()).ok() == Some(pts.tgid);
        let tgid = if is_thread { pts.tgid } else { child };
        let mut space = pts.space;
        let mut mover_code = None;
        if !shares {
            if let Some(pkey) = pts.space {
                // The fork message arrives before the ptrace event; wait
                // for the fault thread to have filed it.
                let deadline = Instant::now() + Duration::from_secs(10);
                let pending = loop {
                    if let Some(p) = self
                        .shared
                        .lock()
                        .forks
                        .get_mut(&pkey)
                        .and_then(|q| q.pop_front())
                    {
                        break Some(p);
                    }
                    if Instant::now() > deadline {
                        break None;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                };
                space = None;
                if let Some(p) = pending {
                    let mut st = self.shared.lock();
                    let key = st.next_space;
                    st.next_space += 1;
                    // The child has its copy of the parent's mover code.
                    mover_code = st
                        .spaces
                        .get(&pkey)
                        .and_then(|s| s.mm.mover.as_ref())
                        .map(|m| Inherited {
                            code: m.insn,
                            scratch: m.scratch,
                            fd: m.fd,
                        });
                    let mut mm = Mm::new(child, p.uffd, p.store, None, st.method, &self.proc);
                    // What the child holds in its store: its copy of the
                    // index, where its copy of the slot holds a page. (The
                    // parent's map may have changed since the fork.)
                    let stored =
                        match mm::stored_pages(&self.proc, child, mm.store.base, mm.store.index) {
                            Err(e)
                                if e.raw_os_error()
                                    == Some(rustix::io::Errno::SRCH.raw_os_error()) =>
                            {
                                Vec::new()
                            }
                            r => r.map_err(|e| sys("reading the store of a forked child", e))?,
                        };
                    mm.adopt_stored(stored);
                    // It gets a mover of its own at its first stop.
                    st.spaces.insert(
                        key,
                        Space {
                            mm,
                            maps: p.maps,
                            heap: p.heap,
                            pending_empty: Vec::new(),
                            thp: Vec::new(),
                            ready: Arc::new(AtomicBool::new(true)),
                        },
                    );
                    space = Some(key);
                    drop(st);
                    self.shared.poke();
                }
            }
        }
        self.threads.insert(
            child,
            ThreadState {
                space,
                tgid,
                entry: None,
                mover_code,
            },
        );
        if !is_thread {
            let mut st = self.shared.lock();
            st.event(child, ProcessEventKind::Fork { parent: pts.tgid })?;
        }
        if self.parked.remove(&child) {
            self.first_stop(child)?;
            let _ = ptrace::syscall(child, 0);
        }
        Ok(())
    }

    /// A forked child at its first stop, before it runs any code of its
    /// own: it gets a userfaultfd of its own and a mover, and every page
    /// it has resident leaves (as at an attach), so its first touch of
    /// each is logged.
    ///
    /// The descriptor the kernel made at the fork (`UFFD_EVENT_FORK`)
    /// exists only in pagescope: were pagescope killed, its release would
    /// unregister the child, whose evicted pages would then read as zeros.
    /// So the child makes its own (injected), in the slot of the parent's
    /// that it inherited; its ranges move over to it, and `--release`
    /// finds it there as in any traced process.
    pub(super) fn first_stop(&mut self, tid: u32) -> Result<()> {
        let Some(ts) = self.threads.get_mut(&tid) else {
            return Ok(());
        };
        let (Some(inherited), Some(key)) = (ts.mover_code.take(), ts.space) else {
            return Ok(());
        };
        let mut inj =
            Injector::at_interrupt(tid, inherited.code).map_err(|e| sys("ptrace GETREGS", e))?;
        inj.park_in(tid, inherited.code)
            .map_err(|e| sys("writing the parking record", e))?;
        let own = self.child_userfaultfd(&mut inj, tid, inherited.fd);
        die_here_for_tests("fork");
        // The mover comes after the descriptor, as at an attach: its copy
        // of the descriptor table holds it too.
        let mover = match &own {
            Ok(_) => inj
                .syscall(nr::CLONE, [pt::MOVER_CLONE_FLAGS, 0, 0, 0, 0, 0])
                .map_err(|e| sys("system call injection", e)),
            Err(_) => Ok(-1),
        };
        die_here_for_tests("mover");
        // The registrations move while the child is still parked: were
        // pagescope killed in the middle, the child would wait, parked,
        // and --release would put back every page, whichever descriptor
        // its range is registered with by then, or none (see `unpark`).
        // Given its registers back first, it would run on with some ranges
        // registered nowhere and their pages away as holes.
        let mut st = self.shared.lock();
        let moved = match (&own, st.spaces.get_mut(&key)) {
            (Ok((own, _)), Some(space)) => Some(move_registrations(space, tid, own)),
            _ => None,
        };
        inj.finish().map_err(|e| sys("ptrace SETREGS", e))?;
        let (own, fd) = own?;
        let mover = mover?;
        let kill_mover = || {
            if mover > 0 {
                let _ = pagescope_sys::signals::kill(mover as u32, Signal::KILL.as_raw());
            }
        };
        let (Some(moved), Some(space)) = (moved, st.spaces.get_mut(&key)) else {
            kill_mover();
            return Ok(());
        };
        if let Err(e) = moved {
            kill_mover();
            return Err(e);
        }
        space.mm.uffd = Arc::new(own);
        // Every page the child has is shared copy-on-write with its parent
        // until one of them writes it, and UFFDIO_MOVE refuses those: they
        // leave by copy, into a store that is then not registered (it was
        // unregistered from the fork's descriptor above).
        space.mm.method = EvictMethod::Copy;
        if mover <= 0 {
            // No mover (out of tasks): its pages come back by copy and
            // can't be evicted again, and are counted unevictable.
            return Ok(());
        }
        space.mm.mover = Some(MoverRef {
            mover: None,
            pid: mover as u32,
            insn: inherited.code,
            fd,
            scratch: inherited.scratch,
            failed: false,
        });
        space.pending_empty = space
            .maps
            .iter()
            .map(|(&start, r)| (start, r.end, r.shared))
            .collect();
        space.ready.store(false, Ordering::SeqCst);
        let ready = space.ready.clone();
        drop(st);
        self.wait_ready(&ready)
    }

    /// Makes the userfaultfd of the forked child `tid`, stopped under
    /// `inj`, with pagescope's features; puts it in the slot `parent_fd`
    /// when that holds the inherited userfaultfd. Returns pagescope's copy
    /// and the number in the child.
    fn child_userfaultfd(
        &self,
        inj: &mut Injector,
        tid: u32,
        parent_fd: i32,
    ) -> Result<(Uffd, i32)> {
        let mut fd = make_userfaultfd(inj, tid)? as i32;
        let inherited = parent_fd >= 0
            && ProcDir::at(&self.proc, tid)
                .fd_target(parent_fd)
                .is_ok_and(|l| l.as_os_str() == "anon_inode:[userfaultfd]");
        if inherited && fd != parent_fd {
            let flags = pagescope_sys::abi::O_CLOEXEC;
            let r = inject(inj, nr::DUP3, [fd as u64, parent_fd as u64, flags, 0, 0, 0])?;
            if r == -(rustix::io::Errno::BADF.raw_os_error() as i64) {
                // The inherited slot is at or above the child's
                // open-files limit (lowered since the parent's set-up, as
                // `ulimit -n` in a shell): its own stays where it is, and
                // the inherited copy goes.
                inject(inj, nr::CLOSE, [parent_fd as u64, 0, 0, 0, 0, 0])?;
            } else {
                inject(inj, nr::CLOSE, [fd as u64, 0, 0, 0, 0, 0])?;
                if r < 0 {
                    return Err(sys(
                        "dup3 of a child's userfaultfd",
                        std::io::Error::from_raw_os_error(-r as i32),
                    ));
                }
                fd = parent_fd;
            }
        }
        Ok((self.uffd_with_features(take_fd(tid, fd)?)?, fd))
    }
}

/// Moves the registrations of the forked child `tid` (at its first stop)
/// from the userfaultfd the fork made to `own`, its own; the store stays
/// unregistered.
fn move_registrations(space: &Space, tid: u32, own: &Uffd) -> Result<()> {
    // Nothing can have faulted yet: the child has not run.
    unregister_all(&space.mm.proc, &space.mm.uffd, tid)?;
    for (&start, range) in &space.maps {
        let len = range.end - start;
        let r = if range.shared {
            // It was registered in the parent, so it can be here.
            own.register_shared(start, len).and_then(|ok| {
                ok.then_some(()).ok_or_else(|| {
                    std::io::Error::from_raw_os_error(rustix::io::Errno::INVAL.raw_os_error())
                })
            })
        } else {
            own.register(start, len, uffd::MODE_MISSING_WP)
        };
        r.map_err(|e| sys("UFFDIO_REGISTER (a forked child's mapping)", e))?;
        // Killed here, pagescope leaves the child parked with one range
        // registered with its own descriptor and the rest with none.
        die_here_for_tests("move");
    }
    Ok(())
}
