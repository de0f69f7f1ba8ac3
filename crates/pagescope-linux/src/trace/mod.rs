//! `pagescope trace`: exact page-reference tracing with userfaultfd, the
//! work of kVMTrace done from user space (x86_64).
//!
//! Every private anonymous and shared-memory page of the traced program
//! is kept out of its address space except a small pool; a touch of any other page faults,
//! the fault is logged, the page joins the pool and the oldest pool page
//! is evicted. See docs/design.md for the data flow and the limits.
//!
//! The modules, each depending only on those above it:
//!
//! - `os`, `hooks`: small system wrappers; the test hooks.
//! - `remote`, `ptrace`, `holder`, `uffd`: another process's memory;
//!   ptrace (spawning, attaching, injection, parking, the mover); the
//!   process that keeps pagescope's descriptors alive; userfaultfd.
//! - `mm`, `leftover`, `thp`: one address space's store and the moves of
//!   its pages; what a set-up leaves in a program; the huge pages it had.
//! - `probe`, `descriptors`: the kernel's features; descriptors made in,
//!   taken from or unregistered in the program.
//! - `release`: `--release`, putting back what a dead pagescope left.
//! - `counts`, `sink`: the counts a trace keeps; where references go (a
//!   trace file, or a sampler).
//! - `state`: what the two threads of a trace share (spaces, pool, the
//!   sink).
//! - `evict`: executing an eviction.
//! - `serve`: serving one fault or event.
//! - `fault`: the fault thread.
//! - `ptracer`: the ptrace thread (events, system calls, address spaces,
//!   children, the end).
//! - `session`: a trace from start to end ([`trace`]).
//! - `sampler`: `record`'s fault backend ([`Sampler`]).

mod counts;
mod descriptors;
mod evict;
mod fault;
mod holder;
mod hooks;
mod leftover;
mod mm;
mod os;
mod probe;
mod ptrace;
mod ptracer;
mod release;
mod release_report;
mod remote;
mod sampler;
mod serve;
mod session;
mod sink;
mod state;
mod thp;
mod uffd;

pub use counts::Counts;
pub(crate) use descriptors::userfaultfd_of;
pub use holder::left as left_holders;
pub use probe::{evict_method, shmem_supported};
pub use ptrace::with_stop_signals_blocked;
pub use release::release_all;
pub use release::{
    end_orphaned_movers, end_stray_mover, is_parked, release, release_order, remove_leftovers,
    still_traced, unpark, Held,
};
pub use release_report::{ReleaseError, ReleaseReport, ReleaseStep};
pub use sampler::{Sampled, Sampler};
pub use session::{trace, Target, TraceConfig, TraceOutcome};
