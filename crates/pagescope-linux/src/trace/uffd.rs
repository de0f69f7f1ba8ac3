//! The userfaultfds the tracer holds, on descriptors taken from the
//! traced process with `pidfd_getfd` (Documentation/admin-guide/mm/userfaultfd.rst).
//!
//! The ioctls and messages are [`pagescope_sys::uffd`]'s; this module adds
//! the holder's bookkeeping: a descriptor the tracer closes is no longer
//! its copy of one a traced process holds (see [`super::holder`]).

use std::ops::Deref;
use std::os::fd::{AsRawFd, OwnedFd};

pub use pagescope_sys::uffd::{
    features, missing_features, own_fd, Msg, FEATURES_SHMEM, FEATURE_MOVE, MODE_MISSING_WP, MOVE,
    MOVE_MODE_ALLOW_SRC_HOLES, MOVE_MODE_DONTWAKE,
};

/// A userfaultfd held by the tracer: [`pagescope_sys::uffd::Uffd`]'s
/// calls, and on drop the holder's ledger cleared for its number.
#[derive(Debug)]
pub struct Uffd(pagescope_sys::uffd::Uffd);

impl Drop for Uffd {
    fn drop(&mut self) {
        // The number may next be a descriptor only pagescope holds.
        super::holder::mark_copy(self.0.as_raw_fd(), false);
    }
}

impl Deref for Uffd {
    type Target = pagescope_sys::uffd::Uffd;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Uffd {
    /// Wraps a descriptor.
    pub fn new(fd: OwnedFd) -> Uffd {
        Uffd(pagescope_sys::uffd::Uffd::new(fd))
    }

    /// Asks the kernel which features it has, on a throwaway descriptor
    /// of this process.
    pub fn probe_features() -> std::io::Result<u64> {
        pagescope_sys::uffd::Uffd::probe_features()
    }
}
