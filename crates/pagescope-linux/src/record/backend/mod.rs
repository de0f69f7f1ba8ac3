//! The backends: each a [`super::probe::Probe`] that finds the pages the
//! targets referenced in an interval.
//!
//! - [`idle`]: the idle page bitmap, exact per page.
//! - [`refs`]: `clear_refs` and smaps, exact per VMA, on any kernel.
//! - [`damon`]: DAMON's sampled regions, an estimate.
//! - [`fault`]: userfaultfd, exact per page, for one program it follows.

pub mod damon;
pub mod fault;
pub mod idle;
pub mod refs;
