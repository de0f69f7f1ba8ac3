//! cachestat(2) (Linux 6.5): the kernel's count of a file's pages in the
//! page cache over a range of the file, made from the file's own page
//! cache (under RCU), without touching any process that maps it.
//!
//! For a shmem file (tmpfs, memfd, SysV shared memory, shared anonymous
//! memory), the page cache holds a swap entry in place of each page in
//! swap, and cachestat counts those as evicted
//! (mm/filemap.c, `filemap_cachestat`): the same entries smaps counts as
//! the file's swap (mm/shmem.c, `shmem_partial_swap_usage`).
//!
//! The system call number and structures are linux-raw-sys's.

use linux_raw_sys::general::{cachestat as RawStat, cachestat_range, TMPFS_MAGIC};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// What cachestat counts over a range of a file, in pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStat {
    /// Pages in the page cache.
    pub cache: u64,
    /// Of those, dirty.
    pub dirty: u64,
    /// Of those, under writeback.
    pub writeback: u64,
    /// Pages evicted: for a shmem file, the pages in swap.
    pub evicted: u64,
    /// Of those, evicted recently (the workingset's shadow entries).
    pub recently_evicted: u64,
}

/// cachestat(2) of `fd` over `len` bytes from `off` (`len` 0: to the
/// end of the file). ENOSYS before Linux 6.5 (or without
/// CONFIG_CACHESTAT_SYSCALL); EOPNOTSUPP for a hugetlbfs file.
pub fn cachestat(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<CacheStat> {
    let range = cachestat_range { off, len };
    let mut out = RawStat {
        nr_cache: 0,
        nr_dirty: 0,
        nr_writeback: 0,
        nr_evicted: 0,
        nr_recently_evicted: 0,
    };
    // SAFETY: `range` and `out` are valid for the call's duration, of
    // the layouts the kernel reads and writes (linux-raw-sys's
    // `struct cachestat_range` and `struct cachestat`); flags are 0.
    let r = unsafe {
        libc::syscall(
            linux_raw_sys::general::__NR_cachestat as libc::c_long,
            fd.as_raw_fd() as libc::c_long,
            &range as *const cachestat_range,
            &mut out as *mut RawStat,
            0 as libc::c_long,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(CacheStat {
        cache: out.nr_cache,
        dirty: out.nr_dirty,
        writeback: out.nr_writeback,
        evicted: out.nr_evicted,
        recently_evicted: out.nr_recently_evicted,
    })
}

/// Whether `fd` is a file of shmem: its file system is tmpfs
/// (`TMPFS_MAGIC`), as for the kernel's own internal mounts of memfd,
/// SysV shared memory and shared anonymous memory.
pub fn is_shmem(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let st = rustix::fs::fstatfs(fd)?;
    Ok(st.f_type as u64 == u64::from(TMPFS_MAGIC))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// A memfd is shmem, with its written pages in its page cache; a
    /// file of /proc is not shmem.
    #[test]
    fn a_memfd_is_shmem_and_its_pages_are_counted() {
        let fd = rustix::fs::memfd_create("cachestat", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::io::write(&fd, &[1u8; 3 * 4096]).unwrap();
        assert!(is_shmem(fd.as_fd()).unwrap());
        match cachestat(fd.as_fd(), 0, 0) {
            Ok(s) => assert_eq!((s.cache, s.evicted), (3, 0)),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOSYS), "{e}"),
        }
        let proc = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(!is_shmem(proc.as_fd()).unwrap());
    }
}
