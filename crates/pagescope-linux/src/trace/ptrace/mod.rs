//! ptrace: starting the traced program stopped, attaching running
//! processes, and making a stopped thread run system calls of the
//! tracer's choosing.
//!
//! - [`process`]: spawning and attaching (`PTRACE_SEIZE`), and comparing
//!   processes (`kcmp`);
//! - [`signals`]: SIGINT and SIGTERM as a stop request;
//! - [`code`]: the machine code pagescope writes into a program (the
//!   mover's page, the vDSO bootstrap) and its parking records' layout;
//! - [`park`]: the bootstrap written into the vDSO, and finding and
//!   letting go the threads parked in that code;
//! - [`inject`]: the [`Injector`], which runs system calls in a stopped
//!   thread of the program;
//! - [`mover`]: the [`Mover`], a task in the program's address space that
//!   runs the calls only a task there may make.
//!
//! Each depends only on those listed before it.

mod code;
mod inject;
mod mover;
mod park;
mod process;
mod signals;

pub use code::{BATCH_ENTRY, MOVER_CLONE_FLAGS, MOVER_CODE};
pub use inject::Injector;
pub use mover::Mover;
pub use park::{stray_mover, vdso_bootstrap, vdso_syscall, write_code, Parked};
pub use process::{
    at_interrupt_stop, options, reap_now, same_file, same_mm, same_vm, seize_process, spawn,
    tracer_of, Seized,
};
pub use signals::{catch_stop_signals, request_stop, stop_requested, with_stop_signals_blocked};

/// System call numbers the tracer uses or watches.
pub use pagescope_sys::abi::nr;
