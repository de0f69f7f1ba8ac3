//! The holder: a process that shares pagescope's descriptor table for the
//! length of a trace, so that the userfaultfds only pagescope holds
//! outlive a pagescope that is killed.
//!
//! A fork of a traced process makes a userfaultfd for the child
//! (`UFFD_EVENT_FORK`) that exists only in the reader of the message:
//! pagescope. Until the child's first stop gives it a descriptor of its
//! own, a SIGKILL of pagescope would close that one and unregister the
//! child, whose pages away would then read as zeros. With the holder
//! alive the descriptor stays open: the child waits on its first page
//! away until `pagescope trace --release` puts its pages back (see
//! [`super::release::Held`]).
//!
//! The holder is cloned with `CLONE_FILES` (one descriptor table, two
//! processes) and runs nothing but system calls. It notices pagescope's
//! death (`PR_SET_PDEATHSIG`, then its parent is another process) and
//! then closes every descriptor but the userfaultfds that only pagescope
//! held and a pidfd of the traced program, which names the trace for
//! `--release`. Telling those userfaultfds from pagescope's copies of
//! descriptors that the traced processes hold themselves takes a ledger:
//! a shared page where pagescope marks each copy while it holds it. If
//! nothing is left to hold, the holder exits; otherwise it waits to be
//! ended by `--release`. When pagescope ends normally it ends the holder.
use pagescope_sys::clone::{Ledger, Names};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{mpsc, OnceLock};

/// The holder's name once pagescope is gone and it holds what
/// `--release` needs (`pagescope-hold` while pagescope lives).
pub const LEFT: &str = "pagescope-left";

/// The holder's names, as it sets them.
const NAMES: Names = Names {
    holding: c"pagescope-hold",
    left: c"pagescope-left",
};

/// Descriptor numbers the ledger covers; a copy numbered above is kept by
/// the holder (holding too much is safe: it only keeps the holder alive).
const LEDGER_FDS: usize = 1 << 20;

/// One bit per descriptor number: set while it is pagescope's copy of a
/// userfaultfd that a traced process holds too. Shared with every holder
/// (mapped before the first one is cloned); the error number if it could
/// not be mapped.
static LEDGER: OnceLock<Result<Ledger, i32>> = OnceLock::new();

/// The ledger, mapped at the first call.
fn ledger() -> io::Result<Ledger> {
    (*LEDGER.get_or_init(|| {
        Ledger::map(LEDGER_FDS).map_err(|e| {
            e.raw_os_error()
                .unwrap_or(rustix::io::Errno::NOMEM.raw_os_error())
        })
    }))
    .map_err(io::Error::from_raw_os_error)
}

/// Marks (or clears) descriptor `fd` as pagescope's copy of a userfaultfd
/// that a traced process holds as well: a holder closes it when
/// pagescope dies.
/// (Nothing before the first holder: no holder to tell.)
pub(crate) fn mark_copy(fd: i32, copy: bool) {
    if let Some(Ok(ledger)) = LEDGER.get() {
        ledger.mark(fd, copy);
    }
}

/// A running holder; dropping it ends the holder.
#[derive(Debug)]
pub struct Holder {
    pid: i32,
    stop: Option<mpsc::Sender<()>>,
    parent: Option<std::thread::JoinHandle<()>>,
    /// A pidfd of the traced program: the holder keeps it, and `--release`
    /// reads whose it is in the holder's fdinfo.
    _root: OwnedFd,
}

impl Holder {
    /// Starts a holder for the trace of `root`. The holder is cloned by a
    /// thread of its own that lives until the holder is ended: a parent
    /// death signal follows the thread, not the process, and no other
    /// thread of pagescope must find the holder among its children.
    pub fn start(root: u32) -> io::Result<Holder> {
        let ledger = ledger()?;
        let root_fd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(root as i32).ok_or_else(|| {
                io::Error::from_raw_os_error(rustix::io::Errno::SRCH.raw_os_error())
            })?,
            rustix::process::PidfdFlags::empty(),
        )?;
        let keep = root_fd.as_raw_fd();
        let (pid_tx, pid_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let parent = super::ptrace::with_stop_signals_blocked(|| {
            std::thread::Builder::new()
                .name("holder".into())
                .spawn(move || {
                    let pid = pagescope_sys::clone::clone_holder(keep, ledger, NAMES);
                    let ok = pid.is_ok();
                    let _ = pid_tx.send(pid);
                    if ok {
                        // Until the holder is ended.
                        let _ = stop_rx.recv();
                    }
                })
        })?;
        let pid = pid_rx
            .recv()
            .map_err(|_| io::Error::other("the holder's parent thread ended"))??;
        Ok(Holder {
            pid,
            stop: Some(stop_tx),
            parent: Some(parent),
            _root: root_fd,
        })
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        use pagescope_sys::wait::{waitpid, ALL};
        let pid = self.pid as u32;
        let _ = pagescope_sys::signals::kill(pid, rustix::process::Signal::KILL.as_raw());
        while matches!(waitpid(Some(pid), ALL), Err(rustix::io::Errno::INTR)) {}
        drop(self.stop.take());
        if let Some(t) = self.parent.take() {
            let _ = t.join();
        }
    }
}

/// The holders left by killed pagescopes (alive: an ended one may stay a
/// zombie), each with the pid of the program it traced (`None` if that
/// program is gone), from their names and the pidfd each keeps, as the
/// procfs `proc_root` shows them.
pub fn left(proc_root: &std::path::Path) -> Vec<(u32, Option<u32>)> {
    let mut buf = Vec::new();
    crate::procfs::list_pids(proc_root)
        .unwrap_or_default()
        .into_iter()
        .filter(|&p| {
            crate::procfs::ProcDir::open(proc_root, p)
                .and_then(|d| d.stat(&mut buf))
                .is_ok_and(|s| s.comm == LEFT && s.state != 'Z')
        })
        .map(|p| (p, root_of(proc_root, p)))
        .collect()
}

/// The pid named by the pidfd that holder `holder` keeps.
fn root_of(proc_root: &std::path::Path, holder: u32) -> Option<u32> {
    let dir = crate::procfs::ProcDir::at(proc_root, holder);
    let (fd, _) = dir
        .fds()
        .ok()?
        .into_iter()
        .find(|(_, target)| target.as_os_str() == "anon_inode:[pidfd]")?;
    let info = dir.fdinfo(fd, &mut Vec::new()).ok()?;
    pagescope_core::parse::fdinfo::pidfd_pid(&info)
}
