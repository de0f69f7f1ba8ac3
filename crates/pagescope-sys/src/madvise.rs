//! `process_madvise(2)` (Linux 5.10): advice given for another process's
//! memory through a pidfd, here `MADV_COLLAPSE` (Linux 6.1), which
//! collapses the pages of a range into transparent huge pages at once.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// `MADV_COLLAPSE`: collapse the range's pages into transparent huge
/// pages now, whatever the THP settings say (but not where the mapping
/// says `MADV_NOHUGEPAGE`).
pub const MADV_COLLAPSE: i32 = linux_raw_sys::general::MADV_COLLAPSE as i32;

/// Gives `advice` for each `(start, end)` of `ranges` of the process of
/// `pidfd`; returns the bytes the kernel advised (it stops at the first
/// range it refuses).
pub fn process_madvise(pidfd: impl AsFd, ranges: &[(u64, u64)], advice: i32) -> io::Result<usize> {
    let iov: Vec<libc::iovec> = ranges
        .iter()
        .map(|&(start, end)| libc::iovec {
            iov_base: start as *mut libc::c_void,
            iov_len: (end - start) as usize,
        })
        .collect();
    // SAFETY: the iovecs name addresses of the other process, which the
    // kernel only reads as numbers (it never dereferences them here); the
    // vector itself is valid for the call. process_madvise returns the
    // bytes advised or -1 with errno.
    let r = unsafe {
        libc::syscall(
            libc::SYS_process_madvise,
            pidfd.as_fd().as_raw_fd(),
            iov.as_ptr(),
            iov.len(),
            advice,
            0u32,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}
