//! The backends: each a [`super::probe::Probe`] that finds the pages the
//! targets referenced in an interval.
//!
//! - [`idle`]: the idle page bitmap, exact per page.
//! - [`refs`]: `clear_refs` and smaps, exact per VMA, on any kernel.
//! - [`damon`]: DAMON's sampled regions, an estimate.
//! - [`fault`]: userfaultfd, exact per page, for one program it follows.
//!   It runs the program under `pagescope trace`'s tracer
//!   (`crate::trace`), which is built for x86_64 only: elsewhere
//!   `fault` is a stand-in that says so.

pub mod damon;
pub mod idle;
pub mod refs;

#[cfg(target_arch = "x86_64")]
pub mod fault;

/// The fault backend where pagescope has no userfaultfd tracer.
#[cfg(not(target_arch = "x86_64"))]
pub mod fault {
    use crate::record::probe::Probe;
    use crate::Root;
    use pagescope_core::{Error, Result};

    /// Refuses: there is no fault backend on this architecture.
    pub fn probe(
        _root: &Root,
        _page_size: u64,
        _block: u64,
        _fraction: f64,
    ) -> Result<Box<dyn Probe>> {
        Err(Error::Unsupported {
            what: "the fault backend".into(),
            needs: format!(
                "an x86_64 machine: it runs the program under pagescope's userfaultfd \
                 tracer (that of `pagescope trace`), which is built for x86_64 only, not {}",
                std::env::consts::ARCH
            ),
        })
    }
}
