//! What pagescope puts into a traced program, and taking it out again.
//!
//! Tracing a process leaves in it, besides its pages and registrations
//! (which the release puts back and unregisters): the mover (a clone with
//! no exit signal, so a zombie none of the program's waits can reap), the
//! program's userfaultfd descriptor, the store with its two guard pages,
//! the index, and the mover's one page of code. A thread of the program
//! itself must remove them (`wait4`, `close`, `munmap` act on the caller),
//! so they are removed by calls injected into one, whichever way the trace
//! ends: Ctrl-C or the end of a `record --duration` (the tracer's
//! release), and `trace --release` after a SIGKILL.

use super::mm::{INDEX_BYTES, PAGE, STORE_BYTES};
use super::ptrace::{self as pt, nr, Injector};

/// See the module documentation. A piece already gone is `None` (or
/// absent from its list).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Leftover {
    /// The program (a process of the address space).
    pub tgid: u32,
    /// Ended movers to reap (zombie children of the program).
    pub movers: Vec<u32>,
    /// The mover's code page (its first instruction is a `syscall`).
    pub code: Option<u64>,
    /// The program's descriptors of pagescope's userfaultfds.
    pub fds: Vec<i32>,
    /// The store, without its guard pages.
    pub store: Option<u64>,
    /// Whether the store has its guard pages either side.
    pub guarded: bool,
    /// The index mapping.
    pub index: Option<u64>,
}

impl Leftover {
    /// Whether anything is left.
    pub fn is_empty(&self) -> bool {
        self.movers.is_empty()
            && self.code.is_none()
            && self.fds.is_empty()
            && self.store.is_none()
            && self.index.is_none()
    }

    /// Runs the calls that remove it in a thread of the program held
    /// under `inj`, which must run its calls at the code page (parked
    /// there) or, without one, at a `syscall` of the vDSO. The code page
    /// goes last, with the thread parked at the vDSO's bootstrap: where
    /// the vDSO has no room for one, the page stays (unmapping it under
    /// the parked thread would leave a killed pagescope's thread nowhere
    /// to wait). Every range was unregistered before, so no call raises a
    /// userfaultfd event. Returns the movers reaped; a call that fails
    /// leaves its piece.
    pub fn remove(&self, inj: &mut Injector) -> Vec<u32> {
        let mut reaped = Vec::new();
        for &m in &self.movers {
            let r = inj.syscall(nr::WAIT4, [m as u64, 0, pagescope_sys::abi::WALL, 0, 0, 0]);
            if matches!(r, Ok(r) if r == m as i64) {
                reaped.push(m);
            }
        }
        for &fd in &self.fds {
            let _ = inj.syscall(nr::CLOSE, [fd as u64, 0, 0, 0, 0, 0]);
        }
        if let Some(store) = self.store {
            let (at, len) = if self.guarded {
                (store - PAGE, STORE_BYTES + 2 * PAGE)
            } else {
                (store, STORE_BYTES)
            };
            let _ = inj.syscall(nr::MUNMAP, [at, len, 0, 0, 0, 0]);
        }
        if let Some(index) = self.index {
            let _ = inj.syscall(nr::MUNMAP, [index, INDEX_BYTES, 0, 0, 0, 0]);
        }
        if let Some(code) = self.code {
            if let Ok(Some(boot)) = pt::vdso_bootstrap(self.tgid) {
                if inj.park_in_vdso(self.tgid, boot).is_ok() {
                    let _ = inj.syscall(nr::MUNMAP, [code, PAGE, 0, 0, 0, 0]);
                }
            }
        }
        reaped
    }
}
