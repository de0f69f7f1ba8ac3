//! New processes made with clone(2) and fork(2): the raw part of
//! pagescope's holder (see `pagescope-linux`'s `trace::holder`), a clone
//! that shares this process's descriptor table and runs nothing but
//! system calls, with the ledger of descriptor numbers it shares; the
//! fork of a single-threaded program; and the fork and exec of a program
//! that stops itself first, for a tracer to attach.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

/// One bit per descriptor number, in a shared anonymous mapping
/// (`MAP_SHARED`): a holder cloned after it was made sees the bits this
/// process sets later. It is never unmapped.
#[derive(Clone, Copy, Debug)]
pub struct Ledger {
    words: &'static [AtomicU64],
}

impl Ledger {
    /// Maps a ledger of descriptor numbers `0..fds`, all clear.
    pub fn map(fds: usize) -> io::Result<Ledger> {
        let words = fds.div_ceil(64);
        // SAFETY: a fresh anonymous mapping, at an address the kernel
        // chooses; it does not alias any Rust object.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                words * 8,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
            )?
        };
        // SAFETY: the mapping is `words * 8` bytes, page-aligned, zeroed
        // by the kernel (a valid array of AtomicU64, accessed only
        // atomically) and never unmapped, so it lives for 'static.
        let words = unsafe { std::slice::from_raw_parts(p as *const AtomicU64, words) };
        Ok(Ledger { words })
    }

    /// The descriptor numbers the ledger covers (`0..fds()`).
    pub fn fds(&self) -> usize {
        self.words.len() * 64
    }

    /// Sets or clears the bit of `fd` (a number out of range: nothing).
    pub fn mark(&self, fd: i32, set: bool) {
        let Ok(n) = usize::try_from(fd) else { return };
        if let Some(word) = self.words.get(n / 64) {
            let bit = 1u64 << (n % 64);
            if set {
                word.fetch_or(bit, Ordering::SeqCst);
            } else {
                word.fetch_and(!bit, Ordering::SeqCst);
            }
        }
    }

    /// Whether the bit of `fd` is set.
    pub fn is_marked(&self, fd: usize) -> bool {
        self.words
            .get(fd / 64)
            .is_some_and(|w| w.load(Ordering::SeqCst) & (1 << (fd % 64)) != 0)
    }
}

/// The holder's process names (`comm`, up to 15 bytes).
#[derive(Clone, Copy, Debug)]
pub struct Names {
    /// While the process that cloned it lives.
    pub holding: &'static CStr,
    /// Once that process is gone and the holder keeps descriptors.
    pub left: &'static CStr,
}

/// Clones the holder: a process (no `CLONE_VM`: its own copy of memory)
/// that shares this process's descriptor table (`CLONE_FILES`), a child of
/// the calling thread. Returns its pid; the holder never returns.
///
/// The holder blocks every signal and asks for SIGUSR1 at the death of
/// the calling thread (`PR_SET_PDEATHSIG`), so call this from a thread
/// that lives until the holder is ended. Once this process is gone (the
/// holder's parent is another), it takes the name `names.left` and
/// closes every descriptor but `keep` and the userfaultfds whose numbers
/// are not marked in `ledger`; it then exits if it kept no userfaultfd,
/// and otherwise waits for SIGKILL.
pub fn clone_holder(keep: RawFd, ledger: Ledger, names: Names) -> io::Result<i32> {
    let parent = rustix::process::getpid().as_raw_nonzero().get();
    // SAFETY: a fork-like clone (no CLONE_VM: the child has its own copy
    // of memory, and runs on its copy of this thread's stack) that shares
    // the descriptor table; the child runs only `hold`, which makes
    // async-signal-safe system calls and never returns, as the child of a
    // threaded process must.
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
        hold(parent, keep, ledger, names);
    }
    if pid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(pid as i32)
    }
}

/// The holder's whole life: wait for `parent` to die, then keep only
/// what a release needs. System calls only: it is a fork of a threaded
/// process, where a lock may be held by a thread that is not there.
fn hold(parent: i32, keep: RawFd, ledger: Ledger, names: Names) -> ! {
    // SAFETY: plain system calls on this process, with buffers on the
    // stack and NUL-terminated names.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, names.holding.as_ptr());
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
        libc::prctl(libc::PR_SET_NAME, names.left.as_ptr());
        let mut limit: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        // Above the ledger a copy is kept: holding too much is safe, it
        // only keeps the holder alive.
        let top = (limit.rlim_cur as usize).min(ledger.fds() * 4);
        let mut kept = 0;
        for fd in 0..top {
            if fd as i32 == keep {
                continue;
            }
            match fd_kind(fd) {
                FdKind::Closed => {}
                FdKind::Userfaultfd if !ledger.is_marked(fd) => kept += 1,
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

/// Which side of a [`fork`] this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forked {
    /// The child.
    Child,
    /// The parent, with the child's pid.
    Parent(i32),
}

/// fork(2) of a process that has one thread (so the child may run any
/// code: no lock can be held by a thread it lacks). An error, and no
/// fork, if the process has other threads.
pub fn fork() -> io::Result<Forked> {
    let threads = std::fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(io::Error::other(format!(
            "fork of a process of {threads} threads"
        )));
    }
    // SAFETY: the process has this one thread (it alone could have made
    // another), so the child's copy of memory is consistent.
    match unsafe { libc::fork() } {
        pid if pid < 0 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// Forks a child that stops itself (`SIGSTOP`) and, once continued,
/// runs `path` with arguments `argv` (`execv`: the environment is this
/// process's); where the exec fails it writes `pagescope: exec failed`
/// to its standard error and exits with status 127. The program starts
/// with the signals as this process was given them: the mask from
/// before pagescope blocked its own ([`crate::signals::launch_mask`]),
/// and SIGPIPE at its default (the Rust runtime ignores it, and an
/// ignored signal stays ignored across exec: a program writing into a
/// closed pipe would see EPIPE where it would have died quietly), and
/// the signals this process was given ignored and then caught ignored
/// again ([`crate::signals::launch_ignored`]). Returns the child's pid. Any process may call it, threaded or not:
/// the child makes only async-signal-safe calls, on memory prepared
/// before the fork.
pub fn fork_exec_stopped(path: &CStr, argv: &[CString]) -> io::Result<i32> {
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let msg = b"pagescope: exec failed\n";
    let mask = crate::signals::launch_mask();
    let ignored = crate::signals::launch_ignored();
    // SAFETY: the child only calls async-signal-safe functions (signal,
    // sigprocmask, raise, execv, write, _exit) on memory prepared before
    // the fork (`path`, the NUL-terminated `ptrs` to `argv`'s strings,
    // `msg`, `mask`), and never returns.
    match unsafe { libc::fork() } {
        pid if pid < 0 => Err(io::Error::last_os_error()),
        // SAFETY: as above.
        0 => unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            for sig in 1..=64 {
                if ignored & (1 << (sig - 1)) != 0 {
                    libc::signal(sig, libc::SIG_IGN);
                }
            }
            libc::sigprocmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
            libc::raise(libc::SIGSTOP);
            libc::execv(path.as_ptr(), ptrs.as_ptr());
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        },
        pid => Ok(pid),
    }
}

/// Starts a process that shares this process's memory and parent
/// (`clone` with `CLONE_VM` and `CLONE_PARENT`, on a stack of its own)
/// and ends at once (exit status 0): its parent in `/proc` is this
/// process's parent, which reaps it, and its address space is this
/// process's. Returns its pid. For tests of tools that must tell such a
/// process from one of its own memory.
pub fn clone_vm_sibling() -> io::Result<i32> {
    const STACK: usize = 64 << 10;
    extern "C" fn ends_at_once(_: *mut libc::c_void) -> libc::c_int {
        0
    }
    // The child's stack, never freed: this process can't tell when the
    // child (not its own) is done with it.
    let stack: &'static mut [u128] = Vec::leak(vec![0u128; STACK / 16]);
    // SAFETY: clone(2) through the C library's wrapper, which switches
    // the child to `stack` (its top, 16-byte aligned, the stack growing
    // down) and calls `ends_at_once`, which touches no memory and
    // returns, after which the wrapper ends the child with exit(2). The
    // stack stays valid for the life of the process.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(stack.len()).cast::<libc::c_void>();
        libc::clone(
            ends_at_once,
            top,
            libc::CLONE_VM | libc::CLONE_PARENT | libc::SIGCHLD,
            std::ptr::null_mut(),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test harness has threads: no fork.
    #[test]
    fn no_fork_of_a_threaded_process() {
        let other =
            std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(500)));
        assert!(fork().is_err());
        other.join().unwrap();
    }

    #[test]
    fn ledger_marks_and_clears() {
        let l = Ledger::map(1 << 10).unwrap();
        assert_eq!(l.fds(), 1 << 10);
        l.mark(70, true);
        l.mark(3, true);
        assert!(l.is_marked(70) && l.is_marked(3) && !l.is_marked(71));
        l.mark(70, false);
        assert!(!l.is_marked(70) && l.is_marked(3));
        // Out of range: nothing, and never set.
        l.mark(-1, true);
        l.mark(1 << 20, true);
        assert!(!l.is_marked(1 << 20));
    }
}
