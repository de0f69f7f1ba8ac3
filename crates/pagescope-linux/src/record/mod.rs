//! `pagescope record`: memref's periodic reference-pattern sampling.
//!
//! At every interval boundary the recorder asks a backend ([`Probe`])
//! which pages the targets referenced since the previous boundary, and
//! writes one interval frame. Between boundaries it sleeps in
//! `sigtimedwait`, woken by the launched command's exit, by a stop of a
//! frozen thread that must be passed on, or by Ctrl-C/SIGTERM. The data
//! flow is described in docs/design.md.
//!
//! The modules, each using only those listed before it (no cycle):
//!
//! 1. `process` (a process's `clear_refs`, a process that is gone),
//!    `probe` (the traits backends implement), `born` (a new process's
//!    two stops paired), [`freeze`] (stopping the targets at a boundary),
//!    `machine` (`/proc/meminfo`);
//! 2. `soft_dirty` (soft-dirty bits), `pages` (a process's resident pages
//!    and the tallies that make an interval's rows);
//! 3. `writes` (written pages: soft-dirty bits, or `PAGEMAP_SCAN` in
//!    `writes::scan`);
//! 4. `backend` (`idle`, `refs`, `damon`, `fault`);
//! 5. `config` (what is asked, what comes back);
//! 6. `choose` (backend choice), `notes` (the header's notes);
//! 7. `recorder` (the interval loop), then this module.
//!
//! Only `backend::fault` and the one function of `writes::scan` that
//! gives a recorded process a userfaultfd use `crate::trace` (the
//! userfaultfd tracer, whose system-call injection is built for x86_64
//! only); elsewhere each is a stand-in, in the same file as its gate,
//! that refuses (`--backend fault`) or is never supported (written pages
//! from `PAGEMAP_SCAN`).

mod backend;
mod born;
mod choose;
mod config;
pub mod freeze;
mod machine;
mod notes;
mod pages;
mod probe;
mod process;
mod recorder;
mod soft_dirty;
mod writes;

pub use backend::damon::DamonSettings;
pub use choose::probe_for_processes;
pub use config::{Choice, Live, RecordConfig, RecordOutcome, Target, DENIED_MISSING};
pub use machine::kernel_resident;
pub use probe::{Follow, Followed, Launched, Probe};
pub use recorder::{record, wait_launched};
pub use soft_dirty::has_soft_dirty;
pub use writes::scan_supported;
