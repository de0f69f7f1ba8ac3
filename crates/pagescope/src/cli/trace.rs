//! `pagescope trace`.

use super::{parse, Progress};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// `pagescope trace`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  pagescope trace --pool 2M -o t.trace -- pagetest --size 64M --op write\n  pagescope trace --pid 1234 -o t.trace      (Ctrl-C lets it go)\n  pagescope trace --release 1234"
)]
pub struct TraceArgs {
    /// Pages kept resident (a size, e.g. 2M); touches of every other page
    /// are logged.
    #[arg(long, value_name = "SIZE", default_value = "2M", value_parser = parse::pool)]
    pub pool: u64,
    /// Output file ("-" for standard output; the traced program's own
    /// standard output then goes to standard error; a terminal
    /// is refused).
    #[arg(short, long, value_name = "FILE", default_value = "pagescope.trace")]
    pub output: PathBuf,
    /// How pages leave the pool: `move` (UFFDIO_MOVE, no copy; Linux
    /// 6.8+), `copy` (copied out and dropped, copied back on the fault;
    /// slower, any kernel with userfaultfd write-protection), or `auto`,
    /// the best the kernel has.
    #[arg(long, value_enum, default_value_t = EvictArg::Auto)]
    pub evict: EvictArg,
    /// Reference times are stored rounded down to this (1ns to 1ms):
    /// below a microsecond they are the jitter of each fault's delivery to
    /// pagescope, and cost more than a byte per reference.
    #[arg(long, value_name = "DUR", default_value = "1us", value_parser = parse::resolution)]
    pub time_resolution: std::time::Duration,
    #[command(flatten)]
    pub progress: Progress,
    /// Put back every page a killed tracer had evicted from PID and from
    /// the processes it forked, and let them run on untraced.
    #[arg(long, value_name = "PID", conflicts_with_all = ["command", "pid"])]
    pub release: Option<u32>,
    /// Trace the running process PID (its threads, the processes it had
    /// forked, and those it forks from now on) instead of a command;
    /// Ctrl-C puts every page back and lets them run on.
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Run the command, and the pagescope thread that serves its faults,
    /// on this CPU alone: each fault is then two context switches on one
    /// CPU instead of two wake-ups across CPUs, several times faster. The
    /// program sees one CPU (a program that sizes its thread pool by the
    /// CPUs it may use starts fewer threads), and its threads share it.
    #[arg(long, value_name = "CPU", conflicts_with_all = ["release", "pid"])]
    pub cpu: Option<usize>,
    /// Let idle CPUs sleep while tracing. By default pagescope keeps the
    /// CPUs the program may run on (`--cpu`'s alone, if given) polling
    /// when idle for the length of the trace (their resume latency limits
    /// in /sys/devices/system/cpu/cpuN/power, given back at the end), so
    /// a program woken from a fault runs at once: several times faster per
    /// fault, at the price of those CPUs spinning until the trace ends.
    #[arg(long, conflicts_with = "release")]
    pub no_idle_poll: bool,
    /// The command to trace, after `--`.
    #[arg(
        last = true,
        value_name = "COMMAND",
        required_unless_present_any = ["release", "pid"]
    )]
    pub command: Vec<String>,
}

/// `trace --evict`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EvictArg {
    /// Move where the kernel can, else copy.
    Auto,
    /// UFFDIO_MOVE.
    Move,
    /// Copy out and back.
    Copy,
}
