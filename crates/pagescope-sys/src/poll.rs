//! `poll(2)` on descriptors this process holds.

use std::os::fd::RawFd;

/// `struct pollfd` of `poll(2)`: a descriptor, the events asked for, and
/// those that happened.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollFd {
    /// The descriptor (a negative one is skipped).
    pub fd: RawFd,
    /// The events asked for (`POLLIN`, ...).
    pub events: i16,
    /// The events that happened, filled by [`poll`].
    pub revents: i16,
}

const _: () = assert!(
    std::mem::size_of::<PollFd>() == std::mem::size_of::<libc::pollfd>()
        && std::mem::align_of::<PollFd>() == std::mem::align_of::<libc::pollfd>()
);

/// `POLLIN`: there is data to read.
pub const POLLIN: i16 = linux_raw_sys::general::POLLIN as i16;

/// `poll(2)` of `fds` for up to `timeout_ms` (-1: no limit): the number
/// of descriptors with events, or -1 with the error in `errno`
/// (`io::Error::last_os_error`), as `poll` returns.
pub fn poll(fds: &mut [PollFd], timeout_ms: i32) -> i32 {
    // SAFETY: `fds` is a valid, exclusively borrowed array of PollFd, of
    // the layout of `struct pollfd` (checked above), of the length passed.
    unsafe {
        libc::poll(
            fds.as_mut_ptr().cast::<libc::pollfd>(),
            fds.len() as libc::nfds_t,
            timeout_ms,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_pipe_is_readable_once_written() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        let mut fds = [PollFd {
            fd: r.as_raw_fd(),
            events: POLLIN,
            revents: 0,
        }];
        assert_eq!(poll(&mut fds, 0), 0);
        rustix::io::write(&w, b"x").unwrap();
        assert_eq!(poll(&mut fds, 1000), 1);
        assert_eq!(fds[0].revents & POLLIN, POLLIN);
    }
}
