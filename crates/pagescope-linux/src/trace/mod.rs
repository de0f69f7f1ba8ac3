//! `pagescope trace`: exact page-reference tracing with userfaultfd, the
//! work of kVMTrace done from user space (x86_64).
//!
//! Every private anonymous and shared-memory page of the traced program
//! is kept out of its address space except a small pool; a touch of any other page faults,
//! the fault is logged, the page joins the pool and the oldest pool page
//! is evicted. See docs/design.md for the data flow and the limits.

mod holder;
mod leftover;
mod mm;
mod ptrace;
mod release;
mod remote;
mod tracer;
mod uffd;

pub use holder::left as left_holders;
pub use ptrace::with_stop_signals_blocked;
pub use release::{
    end_orphaned_movers, end_stray_mover, is_parked, release, release_order, remove_leftovers,
    still_traced, unpark, Held,
};
pub use release::{release_all, ReleaseError, ReleaseReport, ReleaseStep};
pub(crate) use tracer::userfaultfd_of;
pub use tracer::{
    evict_method, shmem_supported, trace, Counts, Sampled, Sampler, Target, TraceConfig,
    TraceOutcome,
};
pub(crate) use uffd::{Uffd, FEATURES_WP_ASYNC, MODE_WP};
