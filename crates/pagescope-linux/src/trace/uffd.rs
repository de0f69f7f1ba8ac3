//! The userfaultfd ioctls the tracer uses, on a descriptor taken from the
//! traced process with `pidfd_getfd` (Documentation/admin-guide/mm/userfaultfd.rst).
//!
//! The structures come from `linux-raw-sys`; this module is the only place
//! that hands them to `ioctl(2)`.
#![allow(unsafe_code)]

use linux_raw_sys::general as k;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

const fn iowr(nr: u32, size: usize) -> libc::c_ulong {
    ((3u32 << 30) | ((size as u32) << 16) | (0xAA << 8) | nr) as libc::c_ulong
}
const fn ior(nr: u32, size: usize) -> libc::c_ulong {
    ((2u32 << 30) | ((size as u32) << 16) | (0xAA << 8) | nr) as libc::c_ulong
}

const API: libc::c_ulong = iowr(k::_UFFDIO_API, size_of::<k::uffdio_api>());
const REGISTER: libc::c_ulong = iowr(k::_UFFDIO_REGISTER, size_of::<k::uffdio_register>());
const UNREGISTER: libc::c_ulong = ior(k::_UFFDIO_UNREGISTER, size_of::<k::uffdio_range>());
const WAKE: libc::c_ulong = ior(k::_UFFDIO_WAKE, size_of::<k::uffdio_range>());
const COPY: libc::c_ulong = iowr(k::_UFFDIO_COPY, size_of::<k::uffdio_copy>());
/// `UFFDIO_MOVE`, which only a task of the target's address space may
/// issue (see [`super::ptrace::Mover`]).
pub const MOVE: libc::c_ulong = iowr(k::_UFFDIO_MOVE, size_of::<k::uffdio_move>());
const WRITEPROTECT: libc::c_ulong =
    iowr(k::_UFFDIO_WRITEPROTECT, size_of::<k::uffdio_writeprotect>());
const CONTINUE: libc::c_ulong = iowr(k::_UFFDIO_CONTINUE, size_of::<k::uffdio_continue>());
const ZEROPAGE: libc::c_ulong = iowr(k::_UFFDIO_ZEROPAGE, size_of::<k::uffdio_zeropage>());

// Mode bits linux-raw-sys does not carry (include/uapi/linux/userfaultfd.h).
/// `UFFDIO_MOVE_MODE_DONTWAKE`.
pub const MOVE_MODE_DONTWAKE: u64 = 1;
const WRITEPROTECT_MODE_WP: u64 = 1;
const CONTINUE_MODE_DONTWAKE: u64 = 1;
const ZEROPAGE_MODE_DONTWAKE: u64 = 1;
/// `UFFDIO_CONTINUE_MODE_WP` (Linux 6.4).
const CONTINUE_MODE_WP: u64 = 2;

/// The features the tracer needs on every kernel, with the name of each.
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
    /// for the child's address space.
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
    /// A message this tracer does not ask for.
    Other(u8),
}

/// A userfaultfd held by the tracer.
#[derive(Debug)]
pub struct Uffd {
    fd: OwnedFd,
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Drop for Uffd {
    fn drop(&mut self) {
        // The number may next be a descriptor only pagescope holds.
        super::holder::mark_copy(self.fd.as_raw_fd(), false);
    }
}

impl Uffd {
    /// Wraps a descriptor.
    pub fn new(fd: OwnedFd) -> Uffd {
        Uffd { fd }
    }

    /// The raw descriptor, for poll.
    pub fn raw(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    fn ioctl<T>(&self, req: libc::c_ulong, arg: &mut T) -> io::Result<()> {
        // SAFETY: `req` is one of the UFFDIO requests above, each defined
        // with the size of exactly the structure `T` that its caller passes,
        // and `arg` is a live, exclusive reference for the call's duration.
        check(unsafe { libc::ioctl(self.fd.as_raw_fd(), req, arg as *mut T) })
    }

    /// `UFFDIO_API`: the handshake, asking for `features`. Returns the
    /// features the kernel has (all of them when `features` is 0).
    pub fn api(&self, features: u64) -> io::Result<u64> {
        let mut a = k::uffdio_api {
            api: k::UFFD_API as u64,
            features,
            ioctls: 0,
        };
        self.ioctl(API, &mut a)?;
        Ok(a.features)
    }

    /// Asks the kernel which features it has, on a throwaway descriptor
    /// of this process.
    pub fn probe_features() -> io::Result<u64> {
        // SAFETY: userfaultfd(2) takes flags only and returns a new fd.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor; nothing else owns it.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
        Uffd::new(fd).api(0)
    }

    /// `UFFDIO_REGISTER` of `[start, start+len)`.
    pub fn register(&self, start: u64, len: u64, mode: u64) -> io::Result<()> {
        self.register_ioctls(start, len, mode).map(|_| ())
    }

    /// `UFFDIO_REGISTER` of `[start, start+len)`; returns the ioctls the
    /// range allows.
    fn register_ioctls(&self, start: u64, len: u64, mode: u64) -> io::Result<u64> {
        let mut r = k::uffdio_register {
            range: k::uffdio_range { start, len },
            mode,
            ioctls: 0,
        };
        self.ioctl(REGISTER, &mut r)?;
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
        self.ioctl(UNREGISTER, &mut r)
    }

    /// `UFFDIO_WAKE` for threads waiting on the range.
    pub fn wake(&self, start: u64, len: u64) -> io::Result<()> {
        let mut r = k::uffdio_range { start, len };
        self.ioctl(WAKE, &mut r)
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
        self.ioctl(COPY, &mut c)
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
        self.ioctl(CONTINUE, &mut c)
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
        match self.ioctl(ZEROPAGE, &mut z) {
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
        self.ioctl(WRITEPROTECT, &mut w)
    }

    /// Waits up to `timeout_ms` for a message to read.
    pub fn wait_readable(&self, timeout_ms: i32) -> io::Result<()> {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid, exclusively borrowed pollfd.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r < 0 {
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
        for m in &raw[..count] {
            // SAFETY: each union arm is read only for the event the kernel
            // says it filled in; all arms are plain integers.
            let msg = unsafe {
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
            };
            out.push(msg);
        }
        Ok(count)
    }
}

/// Takes ownership of a descriptor number the kernel installed in this
/// process (the `ufd` of a fork message).
pub fn own_fd(fd: i32) -> OwnedFd {
    // SAFETY: the kernel installed `fd` in this process for this tracer's
    // exclusive use (UFFD_EVENT_FORK); nothing else refers to it.
    unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }
}
