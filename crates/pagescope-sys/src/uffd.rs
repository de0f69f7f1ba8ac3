//! userfaultfd: the descriptor, the `UFFDIO_*` ioctls and the messages
//! (Documentation/admin-guide/mm/userfaultfd.rst,
//! include/uapi/linux/userfaultfd.h).
//!
//! The structures and request numbers come from `linux-raw-sys`; the
//! opcodes are encoded by `rustix::ioctl::opcode` from the size of each
//! structure, as the kernel's `_IOR`/`_IOWR` do.

use linux_raw_sys::general as k;
use rustix::ioctl::{opcode, Opcode, Updater};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

const GROUP: u8 = k::UFFDIO as u8;

const API: Opcode = opcode::read_write::<k::uffdio_api>(GROUP, k::_UFFDIO_API as u8);
const REGISTER: Opcode = opcode::read_write::<k::uffdio_register>(GROUP, k::_UFFDIO_REGISTER as u8);
const UNREGISTER: Opcode = opcode::read::<k::uffdio_range>(GROUP, k::_UFFDIO_UNREGISTER as u8);
const WAKE: Opcode = opcode::read::<k::uffdio_range>(GROUP, k::_UFFDIO_WAKE as u8);
const COPY: Opcode = opcode::read_write::<k::uffdio_copy>(GROUP, k::_UFFDIO_COPY as u8);
const WRITEPROTECT: Opcode =
    opcode::read_write::<k::uffdio_writeprotect>(GROUP, k::_UFFDIO_WRITEPROTECT as u8);
const CONTINUE: Opcode = opcode::read_write::<k::uffdio_continue>(GROUP, k::_UFFDIO_CONTINUE as u8);
const ZEROPAGE: Opcode = opcode::read_write::<k::uffdio_zeropage>(GROUP, k::_UFFDIO_ZEROPAGE as u8);

/// `UFFDIO_MOVE` (Linux 6.8), as the number a task of the target's own
/// address space passes to `ioctl(2)`: pagescope issues it from code it
/// places in the traced process, with a `uffdio_move` of its own there.
pub const MOVE: u64 = opcode::read_write::<k::uffdio_move>(GROUP, k::_UFFDIO_MOVE as u8) as u64;

// Mode bits that linux-raw-sys does not carry (bindgen skips the
// `((__u64)1<<n)` macros of include/uapi/linux/userfaultfd.h).
/// `UFFDIO_MOVE_MODE_DONTWAKE`.
pub const MOVE_MODE_DONTWAKE: u64 = 1;
/// `UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES`: a page missing from the source is
/// skipped, not an error.
pub const MOVE_MODE_ALLOW_SRC_HOLES: u64 = 2;
/// `UFFDIO_WRITEPROTECT_MODE_WP`.
const WRITEPROTECT_MODE_WP: u64 = 1;
/// `UFFDIO_CONTINUE_MODE_DONTWAKE`.
const CONTINUE_MODE_DONTWAKE: u64 = 1;
/// `UFFDIO_CONTINUE_MODE_WP` (Linux 6.4).
const CONTINUE_MODE_WP: u64 = 2;
const ZEROPAGE_MODE_DONTWAKE: u64 = k::UFFDIO_ZEROPAGE_MODE_DONTWAKE as u64;

/// The features pagescope's tracer needs on every kernel, with the name
/// of each.
const FEATURE_LIST: [(u32, &str); 6] = [
    (k::UFFD_FEATURE_THREAD_ID, "THREAD_ID"),
    (k::UFFD_FEATURE_EVENT_FORK, "EVENT_FORK"),
    (k::UFFD_FEATURE_EVENT_REMAP, "EVENT_REMAP"),
    (k::UFFD_FEATURE_EVENT_REMOVE, "EVENT_REMOVE"),
    (k::UFFD_FEATURE_EVENT_UNMAP, "EVENT_UNMAP"),
    (k::UFFD_FEATURE_PAGEFAULT_FLAG_WP, "PAGEFAULT_FLAG_WP"),
];

/// `UFFD_FEATURE_MOVE` (Linux 6.8): evicting without a copy.
pub const FEATURE_MOVE: u64 = k::UFFD_FEATURE_MOVE as u64;

/// Shared memory (shmem, memfd, SysV): minor faults on pages in the page
/// cache (Linux 5.14) and write protection of them (Linux 5.19).
pub const FEATURES_SHMEM: u64 =
    (k::UFFD_FEATURE_MINOR_SHMEM | k::UFFD_FEATURE_WP_HUGETLBFS_SHMEM) as u64;

/// The features the tracer asks for: the needed ones, MOVE when it moves
/// pages rather than copying them, and the shared-memory ones when it
/// traces shared memory.
pub fn features(with_move: bool, with_shmem: bool) -> u64 {
    let needed = FEATURE_LIST.iter().fold(0, |f, &(bit, _)| f | bit as u64);
    needed | if with_move { FEATURE_MOVE } else { 0 } | if with_shmem { FEATURES_SHMEM } else { 0 }
}

/// The names of the needed features that `available` lacks.
pub fn missing_features(available: u64) -> Vec<&'static str> {
    FEATURE_LIST
        .iter()
        .filter(|(bit, _)| available & *bit as u64 == 0)
        .map(|&(_, name)| name)
        .collect()
}

/// Asynchronous write protection (Linux 6.7): the kernel itself lifts the
/// protection at a write, and `PAGEMAP_SCAN` reports the pages written
/// since they were protected (and protects them again). Unpopulated
/// anonymous pages count as protected.
pub const FEATURES_WP_ASYNC: u64 =
    (k::UFFD_FEATURE_WP_ASYNC | k::UFFD_FEATURE_WP_UNPOPULATED) as u64;

/// Register mode: write protection only.
pub const MODE_WP: u64 = k::UFFDIO_REGISTER_MODE_WP as u64;

/// Register mode: missing pages and write protection.
pub const MODE_MISSING_WP: u64 =
    (k::UFFDIO_REGISTER_MODE_MISSING | k::UFFDIO_REGISTER_MODE_WP) as u64;
/// Register mode of shared memory: also minor faults, on pages that are
/// in the page cache but not mapped here.
pub const MODE_SHARED: u64 = MODE_MISSING_WP | k::UFFDIO_REGISTER_MODE_MINOR as u64;
/// The bit of `UFFDIO_ZEROPAGE` in the ioctls a registration allows: every
/// range but hugetlbfs has it.
const IOCTL_ZEROPAGE: u64 = 1 << k::_UFFDIO_ZEROPAGE;

/// One message read from a userfaultfd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Msg {
    /// A thread touched a registered page.
    Fault {
        /// Faulting address (page-aligned by the kernel unless EXACT_ADDRESS).
        address: u64,
        /// A write (or a write to a write-protected page).
        write: bool,
        /// The page is present and write-protected.
        wp: bool,
        /// Shared memory: the page is in the page cache, not mapped here.
        minor: bool,
        /// The faulting thread.
        tid: u32,
    },
    /// The process forked; `fd` is a new userfaultfd, in this process,
    /// for the child's address space (take it with [`own_fd`]).
    Fork {
        /// The child's descriptor.
        fd: i32,
    },
    /// `mremap` moved `len` bytes from `from` to `to`.
    Remap {
        /// Old start.
        from: u64,
        /// New start.
        to: u64,
        /// Length.
        len: u64,
    },
    /// `madvise(MADV_DONTNEED/REMOVE)` dropped the range's pages.
    Remove {
        /// Start.
        start: u64,
        /// End.
        end: u64,
    },
    /// `munmap` (or a shrinking `mremap`) removed the range.
    Unmap {
        /// Start.
        start: u64,
        /// End.
        end: u64,
    },
    /// A message pagescope does not ask for.
    Other(u8),
}

/// A userfaultfd.
#[derive(Debug)]
pub struct Uffd {
    fd: OwnedFd,
}

impl AsFd for Uffd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Uffd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Uffd {
    /// Wraps a descriptor that is a userfaultfd (one of this process, or
    /// one taken from another with `pidfd_getfd`).
    pub fn new(fd: OwnedFd) -> Uffd {
        Uffd { fd }
    }

    /// A new userfaultfd of this process's address space, close-on-exec,
    /// before its `UFFDIO_API` handshake.
    pub fn open() -> io::Result<Uffd> {
        // SAFETY: userfaultfd(2) only makes a descriptor; rustix marks it
        // unsafe because a registration on it could make this process's
        // own accesses wait, which pagescope never does with it.
        let fd = unsafe { rustix::mm::userfaultfd(rustix::mm::UserfaultfdFlags::CLOEXEC)? };
        Ok(Uffd { fd })
    }

    /// The raw descriptor, for poll.
    pub fn raw(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Issues `OPCODE` with `arg`.
    ///
    /// # Safety
    ///
    /// `OPCODE` is one of the `UFFDIO_*` requests above whose argument is
    /// a `T` (ioctl_userfaultfd(2)).
    unsafe fn ioctl<const OPCODE: Opcode, T>(&self, arg: &mut T) -> io::Result<()> {
        // SAFETY: the caller passes the structure the request is defined
        // with, and `arg` is a live, exclusive reference for the call.
        unsafe { rustix::ioctl::ioctl(&self.fd, Updater::<OPCODE, T>::new(arg)) }
            .map_err(io::Error::from)
    }

    /// `UFFDIO_API`: the handshake, asking for `features`. Returns the
    /// features the kernel has (all of them when `features` is 0).
    pub fn api(&self, features: u64) -> io::Result<u64> {
        let mut a = k::uffdio_api {
            api: k::UFFD_API as u64,
            features,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API takes a uffdio_api.
        unsafe { self.ioctl::<API, _>(&mut a)? };
        Ok(a.features)
    }

    /// Asks the kernel which features it has, on a throwaway descriptor
    /// of this process.
    pub fn probe_features() -> io::Result<u64> {
        Uffd::open()?.api(0)
    }

    /// `UFFDIO_REGISTER` of `[start, start+len)`.
    pub fn register(&self, start: u64, len: u64, mode: u64) -> io::Result<()> {
        self.register_ioctls(start, len, mode).map(|_| ())
    }

    /// `UFFDIO_REGISTER` of `[start, start+len)`; returns the ioctls the
    /// range allows.
    pub fn register_ioctls(&self, start: u64, len: u64, mode: u64) -> io::Result<u64> {
        let mut r = k::uffdio_register {
            range: k::uffdio_range { start, len },
            mode,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER takes a uffdio_register.
        unsafe { self.ioctl::<REGISTER, _>(&mut r)? };
        Ok(r.ioctls)
    }

    /// Registers a shared mapping with [`MODE_SHARED`]: `Ok(true)` if it
    /// is shared memory of base pages (shmem, memfd, SysV, shared
    /// anonymous), `Ok(false)` if it is not (the kernel refuses a regular
    /// file; hugetlbfs, whose pages are huge, is let go again).
    pub fn register_shared(&self, start: u64, len: u64) -> io::Result<bool> {
        match self.register_ioctls(start, len, MODE_SHARED) {
            Ok(ioctls) if ioctls & IOCTL_ZEROPAGE != 0 => Ok(true),
            Ok(_) => {
                self.unregister(start, len)?;
                Ok(false)
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `UFFDIO_UNREGISTER`; the kernel also clears write protection and
    /// wakes waiting threads in the range.
    pub fn unregister(&self, start: u64, len: u64) -> io::Result<()> {
        let mut r = k::uffdio_range { start, len };
        // SAFETY: UFFDIO_UNREGISTER takes a uffdio_range.
        unsafe { self.ioctl::<UNREGISTER, _>(&mut r) }
    }

    /// `UFFDIO_WAKE` for threads waiting on the range.
    pub fn wake(&self, start: u64, len: u64) -> io::Result<()> {
        let mut r = k::uffdio_range { start, len };
        // SAFETY: UFFDIO_WAKE takes a uffdio_range.
        unsafe { self.ioctl::<WAKE, _>(&mut r) }
    }

    /// `UFFDIO_COPY` of `src` (in this process) to `dst` in the target,
    /// write-protected if `wp`; wakes the waiters unless `dontwake`.
    pub fn copy(&self, dst: u64, src: &[u8], wp: bool, dontwake: bool) -> io::Result<()> {
        let mut c = k::uffdio_copy {
            dst,
            src: src.as_ptr() as u64,
            len: src.len() as u64,
            mode: if wp { k::UFFDIO_COPY_MODE_WP as u64 } else { 0 }
                | if dontwake {
                    k::UFFDIO_COPY_MODE_DONTWAKE as u64
                } else {
                    0
                },
            copy: 0,
        };
        // SAFETY: UFFDIO_COPY takes a uffdio_copy; the kernel reads
        // `src.len()` bytes at `src`, which the borrow keeps alive.
        unsafe { self.ioctl::<COPY, _>(&mut c) }
    }

    /// `UFFDIO_CONTINUE` of one page of shared memory: maps the page the
    /// page cache holds, write-protected if `wp`, and wakes the waiters
    /// unless `dontwake`. `wp` needs Linux 6.4: older kernels refuse the
    /// mode with `EINVAL`.
    pub fn continue_page(&self, page: u64, len: u64, wp: bool, dontwake: bool) -> io::Result<()> {
        let mut c = k::uffdio_continue {
            range: k::uffdio_range { start: page, len },
            mode: if wp { CONTINUE_MODE_WP } else { 0 }
                | if dontwake { CONTINUE_MODE_DONTWAKE } else { 0 },
            mapped: 0,
        };
        // SAFETY: UFFDIO_CONTINUE takes a uffdio_continue.
        unsafe { self.ioctl::<CONTINUE, _>(&mut c) }
    }

    /// `UFFDIO_ZEROPAGE` without waking anyone: maps the zero page over
    /// the range's pages, read-only, so that a write copies it as any write
    /// to the zero page does, with no fault of the descriptor. Returns the
    /// bytes mapped: fewer than `len` if it stopped at a page that is there
    /// already, or at another error after some pages.
    pub fn zeropage(&self, start: u64, len: u64) -> io::Result<u64> {
        let mut z = k::uffdio_zeropage {
            range: k::uffdio_range { start, len },
            mode: ZEROPAGE_MODE_DONTWAKE,
            zeropage: 0,
        };
        // SAFETY: UFFDIO_ZEROPAGE takes a uffdio_zeropage.
        match unsafe { self.ioctl::<ZEROPAGE, _>(&mut z) } {
            Ok(()) => Ok(len),
            Err(_) if z.zeropage > 0 => Ok(z.zeropage as u64),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// `UFFDIO_WRITEPROTECT`: sets (`wp`) or clears write protection; a
    /// clear also wakes the waiters.
    pub fn write_protect(&self, start: u64, len: u64, wp: bool) -> io::Result<()> {
        let mut w = k::uffdio_writeprotect {
            range: k::uffdio_range { start, len },
            mode: if wp { WRITEPROTECT_MODE_WP } else { 0 },
        };
        // SAFETY: UFFDIO_WRITEPROTECT takes a uffdio_writeprotect.
        unsafe { self.ioctl::<WRITEPROTECT, _>(&mut w) }
    }

    /// Waits up to `timeout_ms` for a message to read (an interrupted
    /// wait returns early, without error).
    pub fn wait_readable(&self, timeout_ms: i32) -> io::Result<()> {
        let mut p = [crate::poll::PollFd {
            fd: self.fd.as_raw_fd(),
            events: crate::poll::POLLIN,
            revents: 0,
        }];
        if crate::poll::poll(&mut p, timeout_ms) < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Reads the messages waiting (the descriptor is non-blocking) into
    /// `out`; returns how many.
    pub fn read_msgs(&self, out: &mut Vec<Msg>) -> io::Result<usize> {
        let mut raw = [k::uffd_msg {
            event: 0,
            reserved1: 0,
            reserved2: 0,
            reserved3: 0,
            arg: k::uffd_msg__bindgen_ty_1 {
                reserved: k::uffd_msg__bindgen_ty_1__bindgen_ty_5 {
                    reserved1: 0,
                    reserved2: 0,
                    reserved3: 0,
                },
            },
        }; 64];
        // SAFETY: reading into a properly sized array of plain-old-data
        // message structures.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                raw.as_mut_ptr().cast(),
                size_of_val(&raw),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(0)
            } else {
                Err(e)
            };
        }
        let count = n as usize / size_of::<k::uffd_msg>();
        out.extend(raw[..count].iter().map(decode));
        Ok(count)
    }
}

/// The message `m` says.
fn decode(m: &k::uffd_msg) -> Msg {
    // SAFETY: each union arm is read only for the event the kernel says
    // it filled in; all arms are plain integers.
    unsafe {
        match m.event as u32 {
            k::UFFD_EVENT_PAGEFAULT => {
                let pf = m.arg.pagefault;
                Msg::Fault {
                    address: pf.address,
                    write: pf.flags & k::UFFD_PAGEFAULT_FLAG_WRITE as u64 != 0,
                    wp: pf.flags & k::UFFD_PAGEFAULT_FLAG_WP as u64 != 0,
                    minor: pf.flags & k::UFFD_PAGEFAULT_FLAG_MINOR as u64 != 0,
                    tid: pf.feat.ptid,
                }
            }
            k::UFFD_EVENT_FORK => Msg::Fork {
                fd: m.arg.fork.ufd as i32,
            },
            k::UFFD_EVENT_REMAP => Msg::Remap {
                from: m.arg.remap.from,
                to: m.arg.remap.to,
                len: m.arg.remap.len,
            },
            k::UFFD_EVENT_REMOVE => Msg::Remove {
                start: m.arg.remove.start,
                end: m.arg.remove.end,
            },
            k::UFFD_EVENT_UNMAP => Msg::Unmap {
                start: m.arg.remove.start,
                end: m.arg.remove.end,
            },
            e => Msg::Other(e as u8),
        }
    }
}

/// Takes ownership of a descriptor number the kernel installed in this
/// process: the `fd` of a [`Msg::Fork`], which nothing else refers to.
/// Give it no other number.
pub fn own_fd(fd: i32) -> OwnedFd {
    // SAFETY: the kernel installed `fd` in this process for the reader of
    // the fork message (UFFD_EVENT_FORK); nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Installs a seccomp filter on this thread (and the threads and
/// processes it makes from now on) under which `userfaultfd(2)` fails
/// with EPERM and every other system call is allowed; sets
/// `no_new_privs` first, as an unprivileged filter needs.
pub fn deny_userfaultfd() -> io::Result<()> {
    let insn = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let mut filter = [
        // A = seccomp_data.nr
        insn(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 0),
        insn(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            0,
            1,
            libc::SYS_userfaultfd as u32,
        ),
        insn(
            libc::BPF_RET | libc::BPF_K,
            0,
            0,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        insn(libc::BPF_RET | libc::BPF_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: prctl with integer arguments, then with a pointer to a
    // filter program that outlives the call; the filter only makes one
    // system call fail.
    let r = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) != 0
    };
    if r {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The opcodes encoded from the structures are the kernel's (as
    /// linux-raw-sys's ioctl table has them, where it has them).
    #[test]
    fn opcodes_match_the_kernel_headers() {
        assert_eq!(API as u64, 0xc018_aa3f);
        assert_eq!(REGISTER as u64, 0xc020_aa00);
        assert_eq!(UNREGISTER as u64, 0x8010_aa01);
        assert_eq!(WAKE as u64, 0x8010_aa02);
        assert_eq!(COPY as u64, 0xc028_aa03);
        assert_eq!(ZEROPAGE as u64, 0xc020_aa04);
        assert_eq!(MOVE, 0xc028_aa05);
        assert_eq!(WRITEPROTECT as u64, 0xc018_aa06);
        assert_eq!(CONTINUE as u64, 0xc020_aa07);
    }

    /// A fresh descriptor of this process answers the handshake with the
    /// features every kernel pagescope runs on has.
    #[test]
    fn probe_answers() {
        match Uffd::probe_features() {
            Ok(f) => assert!(missing_features(f).is_empty(), "{:?}", missing_features(f)),
            // No permission (vm.unprivileged_userfaultfd=0 and not root).
            Err(e) => eprintln!("userfaultfd not available: {e}"),
        }
    }
}
