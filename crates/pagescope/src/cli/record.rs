//! `pagescope record`.

use super::{parse, Progress};
use clap::{ArgGroup, Args, ValueEnum};
use std::path::PathBuf;

/// The backends of `record`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// The best this kernel offers (and say which and why).
    Auto,
    /// The idle page bitmap: exact per page (CONFIG_IDLE_PAGE_TRACKING).
    Idle,
    /// `clear_refs` and smaps `Referenced:`: exact per VMA, any kernel.
    Refs,
    /// DAMON (CONFIG_DAMON_SYSFS): sampled regions, estimates; `vaddr`
    /// for processes, `paddr` with --system. Never used unless asked for.
    Damon,
    /// userfaultfd: every page moved out at each boundary, and what faults
    /// back was referenced; exact per page, with writes. A launched
    /// command only (Linux 6.8+). Never used unless asked for.
    Fault,
}

/// `pagescope record`.
#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("what").required(true).args(["pids", "cgroup", "system", "command"])),
    after_help = "Examples:\n  pagescope record -o run.rec -- pagetest --size 1G --iterations 10 --sleep 1s\n  pagescope record --pid 1234 --interval 1s --duration 1m\n  pagescope analyze run.rec temporal"
)]
pub struct RecordArgs {
    /// Record this running process (repeat for more).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Record the processes of this cgroup directory (as they come and go).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Record every process.
    #[arg(long)]
    pub system: bool,
    /// Interval length (e.g. 100ms, 1s).
    #[arg(long, value_name = "DUR", default_value = "100ms", value_parser = parse::interval)]
    pub interval: std::time::Duration,
    /// Block size rows are counted over (a power of two, at least a page).
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = parse::block)]
    pub block: u64,
    /// Stop after this long (default: when the command exits, the
    /// processes are gone, or Ctrl-C).
    #[arg(long, value_name = "DUR", value_parser = parse::interval)]
    pub duration: Option<std::time::Duration>,
    /// Where reference bits come from.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// DAMON's sampling interval (the damon backend).
    #[arg(long, value_name = "DUR", default_value = "5ms", value_parser = parse::interval)]
    pub damon_sample: std::time::Duration,
    /// The fewest and most regions DAMON keeps (the damon backend).
    #[arg(long, value_name = "MIN-MAX", default_value = "1000-2000", value_parser = parse::regions)]
    pub damon_regions: (u32, u32),
    /// The fault backend: move only this random fraction of the resident
    /// pages out at each boundary (the same share of every 4 MiB), and
    /// scale what comes back (0 < F <= 1).
    #[arg(long, value_name = "FRACTION", default_value_t = 1.0, value_parser = parse::fraction)]
    pub sample: f64,
    /// Let the processes run while a two-pass backend (refs) reads and
    /// clears: cheaper, but references in that moment are missed.
    #[arg(long)]
    pub no_freeze: bool,
    /// With `--backend fault`: let idle CPUs sleep (see `trace
    /// --no-idle-poll`).
    #[arg(long)]
    pub no_idle_poll: bool,
    /// Output file ("-" for standard output; a launched command's own
    /// standard output then goes to standard error; a terminal
    /// is refused).
    #[arg(short, long, value_name = "FILE", default_value = "pagescope.rec")]
    pub output: PathBuf,
    #[command(flatten)]
    pub progress: Progress,
    /// The command to launch and record, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}
