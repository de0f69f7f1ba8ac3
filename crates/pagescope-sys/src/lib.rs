//! pagescope's raw kernel calls, with safe interfaces.
//!
//! Every `unsafe` block of pagescope is in this crate. Constants and
//! request numbers come from `linux-raw-sys` (or `rustix`), never written
//! by hand. The crates above it (`pagescope-linux`, the binary, the test
//! program) forbid unsafe code and call the safe functions here.

#![deny(missing_docs)]

pub mod abi;
pub mod cachestat;
pub mod clone;
pub mod cpuclock;
pub mod damon;
pub mod kcmp;
pub mod madvise;
pub mod mem;
pub mod pagemap_scan;
pub mod poll;
pub mod ptrace;
pub mod remote;
pub mod signals;
pub mod thread;
pub mod touch;
pub mod uffd;
pub mod wait;
