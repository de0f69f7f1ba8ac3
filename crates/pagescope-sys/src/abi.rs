//! Numbers of the kernel's system call ABI for calls pagescope makes in
//! another process (injected into a stopped thread, or issued by code it
//! places there): system call numbers and flags, as the 64-bit register
//! values the calls take. All are linux-raw-sys's, for the target's
//! architecture.

use linux_raw_sys::general as k;
use linux_raw_sys::prctl as p;
use rustix::ioctl::opcode;

/// System call numbers.
pub mod nr {
    use super::k;

    /// close
    pub const CLOSE: u64 = k::__NR_close as u64;
    /// ioctl
    pub const IOCTL: u64 = k::__NR_ioctl as u64;
    /// openat
    pub const OPENAT: u64 = k::__NR_openat as u64;
    /// mmap
    pub const MMAP: u64 = k::__NR_mmap as u64;
    /// mprotect
    pub const MPROTECT: u64 = k::__NR_mprotect as u64;
    /// munmap
    pub const MUNMAP: u64 = k::__NR_munmap as u64;
    /// brk
    pub const BRK: u64 = k::__NR_brk as u64;
    /// clone
    pub const CLONE: u64 = k::__NR_clone as u64;
    /// mremap
    pub const MREMAP: u64 = k::__NR_mremap as u64;
    /// madvise
    pub const MADVISE: u64 = k::__NR_madvise as u64;
    /// shmat
    pub const SHMAT: u64 = k::__NR_shmat as u64;
    /// execve
    pub const EXECVE: u64 = k::__NR_execve as u64;
    /// prctl
    pub const PRCTL: u64 = k::__NR_prctl as u64;
    /// execveat
    pub const EXECVEAT: u64 = k::__NR_execveat as u64;
    /// userfaultfd
    pub const USERFAULTFD: u64 = k::__NR_userfaultfd as u64;
    /// dup3
    pub const DUP3: u64 = k::__NR_dup3 as u64;
    /// wait4
    pub const WAIT4: u64 = k::__NR_wait4 as u64;
    /// fcntl
    pub const FCNTL: u64 = k::__NR_fcntl as u64;
    /// close_range
    pub const CLOSE_RANGE: u64 = k::__NR_close_range as u64;
}

/// `mmap` flag `MAP_PRIVATE`.
pub const MAP_PRIVATE: u64 = k::MAP_PRIVATE as u64;
/// `mmap` flag `MAP_SHARED`.
pub const MAP_SHARED: u64 = k::MAP_SHARED as u64;
/// `mmap` flag `MAP_ANONYMOUS`.
pub const MAP_ANONYMOUS: u64 = k::MAP_ANONYMOUS as u64;
/// `mmap` flag `MAP_NORESERVE`.
pub const MAP_NORESERVE: u64 = k::MAP_NORESERVE as u64;
/// `mmap` flag `MAP_POPULATE`.
pub const MAP_POPULATE: u64 = k::MAP_POPULATE as u64;
/// `mmap` flag `MAP_STACK`.
pub const MAP_STACK: u64 = k::MAP_STACK as u64;
/// `mmap` flag `MAP_GROWSDOWN`.
pub const MAP_GROWSDOWN: u64 = k::MAP_GROWSDOWN as u64;
/// `madvise` advice `MADV_DONTNEED`.
pub const MADV_DONTNEED: u64 = k::MADV_DONTNEED as u64;
/// `prctl` option `PR_SET_VMA` (Linux 5.17).
pub const PR_SET_VMA: u64 = p::PR_SET_VMA as u64;
/// `PR_SET_VMA`'s `PR_SET_VMA_ANON_NAME`.
pub const PR_SET_VMA_ANON_NAME: u64 = p::PR_SET_VMA_ANON_NAME as u64;
/// `open` flag `O_CLOEXEC`.
pub const O_CLOEXEC: u64 = k::O_CLOEXEC as u64;
/// `open` flag `O_NONBLOCK`.
pub const O_NONBLOCK: u64 = k::O_NONBLOCK as u64;
/// `open` flag `O_RDWR`.
pub const O_RDWR: u64 = k::O_RDWR as u64;
/// `fcntl` command `F_DUPFD_CLOEXEC`: a close-on-exec copy at the lowest
/// free number at or above the argument.
pub const F_DUPFD_CLOEXEC: u64 = k::F_DUPFD_CLOEXEC as u64;
/// `openat`'s directory `AT_FDCWD`, as a register value.
pub const AT_FDCWD: u64 = k::AT_FDCWD as i64 as u64;
/// `clone` flag `CLONE_VM`.
pub const CLONE_VM: u64 = k::CLONE_VM as u64;
/// `clone` flag `CLONE_UNTRACED`.
pub const CLONE_UNTRACED: u64 = k::CLONE_UNTRACED as u64;
/// `wait4` option `__WALL`.
pub const WALL: u64 = k::__WALL as u64;
/// `/dev/userfaultfd`'s `USERFAULTFD_IOC_NEW` (Linux 6.1): `_IO(USERFAULTFD_IOC,
/// 0x00)` of include/uapi/linux/userfaultfd.h.
pub const USERFAULTFD_IOC_NEW: u64 = opcode::none(k::USERFAULTFD_IOC as u8, 0) as u64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_the_kernels() {
        assert_eq!(USERFAULTFD_IOC_NEW, 0xaa00);
        assert_eq!(AT_FDCWD as i64, -100);
        #[cfg(target_arch = "x86_64")]
        assert_eq!((nr::MMAP, nr::CLONE, nr::USERFAULTFD), (9, 56, 323));
        #[cfg(target_arch = "x86_64")]
        assert_eq!((nr::FCNTL, F_DUPFD_CLOEXEC), (72, 1030));
    }
}
