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
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, OnceLock};

/// The holder's name once pagescope is gone and it holds what
/// `--release` needs (`pagescope-hold` while pagescope lives).
pub const LEFT: &str = "pagescope-left";

/// Descriptor numbers the ledger covers; a copy numbered above is kept by
/// the holder (holding too much is safe: it only keeps the holder alive).
const LEDGER_FDS: usize = 1 << 20;

/// One bit per descriptor number: set while it is pagescope's copy of a
/// userfaultfd that a traced process holds too. Shared with every holder
/// (`MAP_SHARED`, mapped before the first one is cloned).
static LEDGER: OnceLock<Option<&'static [AtomicU64]>> = OnceLock::new();

/// The ledger, mapped at the first call.
fn ledger() -> Option<&'static [AtomicU64]> {
    *LEDGER.get_or_init(|| {
        let bytes = LEDGER_FDS / 8;
        // SAFETY: a fresh anonymous mapping, never unmapped; zeroed by the
        // kernel, which is a valid array of AtomicU64.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            (p != libc::MAP_FAILED)
                .then(|| std::slice::from_raw_parts(p as *const AtomicU64, LEDGER_FDS / 64))
        }
    })
}

/// Marks (or clears) descriptor `fd` as pagescope's copy of a userfaultfd
/// that a traced process holds as well: a holder closes it when
/// pagescope dies.
/// (Nothing before the first holder: no holder to tell.)
pub(crate) fn mark_copy(fd: i32, copy: bool) {
    let Some(Some(ledger)) = LEDGER.get() else {
        return;
    };
    let Ok(n) = usize::try_from(fd) else { return };
    if let Some(word) = ledger.get(n / 64) {
        let bit = 1u64 << (n % 64);
        if copy {
            word.fetch_or(bit, Ordering::SeqCst);
        } else {
            word.fetch_and(!bit, Ordering::SeqCst);
        }
    }
}

fn is_copy(ledger: &[AtomicU64], fd: usize) -> bool {
    ledger
        .get(fd / 64)
        .is_some_and(|w| w.load(Ordering::SeqCst) & (1 << (fd % 64)) != 0)
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
        let ledger = ledger().ok_or_else(io::Error::last_os_error)?;
        let root_fd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(root as i32)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?,
            rustix::process::PidfdFlags::empty(),
        )?;
        let keep = root_fd.as_raw_fd();
        let (pid_tx, pid_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let parent = super::ptrace::with_stop_signals_blocked(|| {
            std::thread::Builder::new()
                .name("holder".into())
                .spawn(move || {
                    // SAFETY: getpid takes nothing.
                    let me = unsafe { libc::getpid() };
                    // SAFETY: a fork-like clone (no CLONE_VM: the child has
                    // its own copy of memory, on this thread's stack) that
                    // shares the descriptor table; the child runs only
                    // `hold`, which makes system calls and never returns.
                    let pid = unsafe {
                        libc::syscall(
                            libc::SYS_clone,
                            (libc::CLONE_FILES | libc::SIGCHLD) as libc::c_ulong,
                            0usize,
                            0usize,
                            0usize,
                            0usize,
                        )
                    };
                    if pid == 0 {
                        hold(me, keep, ledger);
                    }
                    let pid = if pid < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(pid as i32)
                    };
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
        // SAFETY: kill and waitpid of the holder, this process's child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut status = 0;
            while libc::waitpid(self.pid, &mut status, libc::__WALL) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
        }
        drop(self.stop.take());
        if let Some(t) = self.parent.take() {
            let _ = t.join();
        }
    }
}

/// The holder's whole life: wait for pagescope (`parent`) to die, then
/// keep only what a release needs. System calls only: it is a fork of a
/// threaded process, where a lock may be held by a thread that is not
/// there.
fn hold(parent: i32, root_fd: i32, ledger: &[AtomicU64]) -> ! {
    // SAFETY: plain system calls on this process, with buffers on the stack.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"pagescope-hold".as_ptr());
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGUSR1 as libc::c_ulong);
        let mut usr1: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut usr1);
        libc::sigaddset(&mut usr1, libc::SIGUSR1);
        // The signal comes when the parent thread exits; the process is
        // gone once the parent is another process (init, or a subreaper).
        while libc::getppid() == parent {
            let second = libc::timespec {
                tv_sec: 1,
                tv_nsec: 0,
            };
            libc::sigtimedwait(&usr1, std::ptr::null_mut(), &second);
        }
        libc::prctl(libc::PR_SET_NAME, c"pagescope-left".as_ptr());
        let mut limit: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        let top = (limit.rlim_cur as usize).min(LEDGER_FDS * 4);
        let mut kept = 0;
        for fd in 0..top {
            if fd as i32 == root_fd {
                continue;
            }
            match fd_kind(fd) {
                FdKind::Closed => {}
                FdKind::Userfaultfd if !is_copy(ledger, fd) => kept += 1,
                _ => {
                    libc::close(fd as i32);
                }
            }
        }
        if kept == 0 {
            libc::_exit(0);
        }
        loop {
            // Every signal is blocked: only SIGKILL ends this.
            libc::pause();
        }
    }
}

enum FdKind {
    Closed,
    Userfaultfd,
    Other,
}

/// What descriptor `fd` of this process is, from its /proc link; no
/// allocation.
fn fd_kind(fd: usize) -> FdKind {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    let mut path = [0u8; 40];
    path[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 20];
    let mut n = fd;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        path[PREFIX.len() + i] = digits[len - 1 - i];
    }
    let mut link = [0u8; 64];
    // SAFETY: `path` is NUL-terminated (zeroed past the digits) and `link`
    // is a writable buffer of the length given.
    let r = unsafe {
        libc::readlink(
            path.as_ptr() as *const libc::c_char,
            link.as_mut_ptr() as *mut libc::c_char,
            link.len(),
        )
    };
    if r < 0 {
        return FdKind::Closed;
    }
    if &link[..r as usize] == b"anon_inode:[userfaultfd]" {
        FdKind::Userfaultfd
    } else {
        FdKind::Other
    }
}

/// The holders left by killed pagescopes (alive: an ended one may stay a
/// zombie), each with the pid of the program it traced (`None` if that
/// program is gone), from their names and the pidfd each keeps.
pub fn left() -> Vec<(u32, Option<u32>)> {
    let proc_root = std::path::Path::new("/proc");
    let mut buf = Vec::new();
    crate::procfs::list_pids(proc_root)
        .unwrap_or_default()
        .into_iter()
        .filter(|&p| {
            crate::procfs::ProcDir::open(proc_root, p)
                .and_then(|d| d.stat(&mut buf))
                .is_ok_and(|s| s.comm == LEFT && s.state != 'Z')
        })
        .map(|p| (p, root_of(p)))
        .collect()
}

/// The pid named by the pidfd that holder `holder` keeps.
fn root_of(holder: u32) -> Option<u32> {
    let fds = std::fs::read_dir(format!("/proc/{holder}/fd")).ok()?;
    for e in fds.flatten() {
        let is_pidfd =
            std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:[pidfd]");
        if !is_pidfd {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{holder}/fdinfo/{}",
            e.file_name().to_string_lossy()
        ))
        .ok()?;
        return info
            .lines()
            .find_map(|l| l.strip_prefix("Pid:"))
            .and_then(|v| v.trim().parse::<i64>().ok())
            .and_then(|p| u32::try_from(p).ok().filter(|&p| p > 0));
    }
    None
}
