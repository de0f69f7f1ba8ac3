//! `poll(2)` on descriptors this process holds.

/// `poll(2)` of `fds` for up to `timeout_ms` (-1: no limit): the number
/// of descriptors with events, or -1 with the error in `errno`
/// (`io::Error::last_os_error`), as `poll` returns.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> i32 {
    // SAFETY: `fds` is a valid, exclusively borrowed array of pollfd of
    // the length passed.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }
}
