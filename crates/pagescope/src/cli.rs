//! The command line, as clap parses it. [`crate::config`] turns it into
//! what a run needs.

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// See how Linux programs use physical memory.
#[derive(Debug, Parser)]
#[command(name = "pagescope", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Collect a snapshot: every process's VMAs, pages and page frames.
    Snapshot(SnapshotArgs),
    /// Analyse a snapshot file, or the live system.
    Report(ReportArgs),
    /// What grew and shrank between two snapshots.
    Diff(DiffArgs),
    /// Record which pages processes reference, interval by interval.
    Record(RecordArgs),
    /// Trace every page reference of a program (userfaultfd; x86_64).
    Trace(TraceArgs),
    /// Analyse a recording or a trace.
    Analyze(AnalyzeArgs),
}

/// `pagescope trace`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  pagescope trace --pool 2M -o t.trace -- pagetest --size 64M --op write\n  pagescope trace --pid 1234 -o t.trace      (Ctrl-C lets it go)\n  pagescope trace --release 1234"
)]
pub struct TraceArgs {
    /// Pages kept resident (a size, e.g. 2M); touches of every other page
    /// are logged.
    #[arg(long, value_name = "SIZE", default_value = "2M", value_parser = parse_pool)]
    pub pool: u64,
    /// Output file ("-" for standard output; the traced program's own
    /// standard output then goes to standard error).
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
    #[arg(long, value_name = "DUR", default_value = "1us", value_parser = parse_resolution)]
    pub time_resolution: std::time::Duration,
    /// No progress line or summary.
    #[arg(short, long)]
    pub quiet: bool,
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
    /// Let idle CPUs sleep while tracing. By default pagescope holds the
    /// CPU latency limit at 0 (/dev/cpu_dma_latency) for the length of
    /// the trace, so idle CPUs poll and a program woken from a fault runs
    /// at once: several times faster per fault, at the price of idle CPUs
    /// spinning until the trace ends.
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

fn parse_pool(s: &str) -> Result<u64, String> {
    let n = pagescope_core::units::parse_size(s)?;
    // One instruction can touch several pages (its operands, the
    // stack, code in anonymous memory); a pool too small for them all
    // could evict one the instruction still needs, again and again.
    if n < 16 * 4096 {
        return Err(format!("{s:?}: the pool must hold at least 16 pages (64K)"));
    }
    Ok(n)
}

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
    #[arg(long, value_name = "DUR", default_value = "100ms", value_parser = parse_interval)]
    pub interval: std::time::Duration,
    /// Block size rows are counted over (a power of two, at least a page).
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = parse_block)]
    pub block: u64,
    /// Stop after this long (default: when the command exits, the
    /// processes are gone, or Ctrl-C).
    #[arg(long, value_name = "DUR", value_parser = parse_interval)]
    pub duration: Option<std::time::Duration>,
    /// Where reference bits come from.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// DAMON's sampling interval (the damon backend).
    #[arg(long, value_name = "DUR", default_value = "5ms", value_parser = parse_interval)]
    pub damon_sample: std::time::Duration,
    /// The fewest and most regions DAMON keeps (the damon backend).
    #[arg(long, value_name = "MIN-MAX", default_value = "1000-2000", value_parser = parse_regions)]
    pub damon_regions: (u32, u32),
    /// The fault backend: move only this random fraction of the resident
    /// pages out at each boundary (the same share of every 4 MiB), and
    /// scale what comes back (0 < F <= 1).
    #[arg(long, value_name = "FRACTION", default_value_t = 1.0, value_parser = parse_fraction)]
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
    /// standard output then goes to standard error).
    #[arg(short, long, value_name = "FILE", default_value = "pagescope.rec")]
    pub output: PathBuf,
    /// No live line or summary.
    #[arg(short, long)]
    pub quiet: bool,
    /// The command to launch and record, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!(
            "{s:?}: expected a fraction above 0 and at most 1, e.g. 0.1"
        )),
    }
}

fn parse_regions(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{s:?}: expected MIN-MAX, e.g. 10-1000");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let (min, max) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if min < 3 || max < min {
        return Err(format!(
            "{s:?}: DAMON keeps at least 3 regions, and MAX must be at least MIN"
        ));
    }
    Ok((min, max))
}

fn parse_resolution(s: &str) -> Result<std::time::Duration, String> {
    let d = pagescope_core::units::parse_duration(s)?;
    if d < std::time::Duration::from_nanos(1) || d > std::time::Duration::from_millis(1) {
        return Err(format!("{s:?}: must be from 1ns to 1ms"));
    }
    Ok(d)
}

fn parse_interval(s: &str) -> Result<std::time::Duration, String> {
    let d = pagescope_core::units::parse_duration(s)?;
    if d < std::time::Duration::from_millis(1) {
        return Err(format!("{s:?}: must be at least 1ms"));
    }
    Ok(d)
}

/// The analyses of a recording and of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AnalyzeView {
    /// Recording: referenced pages per interval, by class.
    Temporal,
    /// Recording: how often each block was referenced over the run.
    Spatial,
    /// Recording: referenced pages by interval and block (SVG: a heat map).
    Heatmap,
    /// Recording: working set size per interval and over --window
    /// intervals (backends that place pages, processes).
    Wss,
    /// Recording: how densely referenced 2 MiB regions were used.
    Hugepages,
    /// Recording: referenced pages per NUMA node.
    Numa,
    /// Recording: totals per process over the run (recordings of
    /// processes, and of the machine with the refs backend).
    Processes,
    /// Trace: references, reads, writes and distinct pages, per thread
    /// and mapping.
    Refs,
    /// Trace: miss ratio by memory size, LRU (exact), FIFO and CLOCK.
    Mrc,
}

/// `pagescope analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// The recording or trace file ("-" for standard input).
    pub file: PathBuf,
    /// The analysis.
    pub view: AnalyzeView,
    /// Only references to virtual addresses in START-END of the recorded
    /// or traced processes (hex with 0x, or decimal; END exclusive).
    #[arg(long, value_name = "START-END", value_parser = parse_range)]
    pub range: Option<(u64, u64)>,
    /// Only the references of this process (recordings and traces).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// `wss`: intervals per window.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub window: u32,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let num = |t: &str| {
        let t = t.trim();
        match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            Some(h) => u64::from_str_radix(h, 16),
            None => t.parse(),
        }
        .map_err(|_| format!("{t:?} is not an address"))
    };
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("{s:?}: expected START-END"))?;
    let (a, b) = (num(a)?, num(b)?);
    if b <= a {
        return Err(format!("{s:?}: END must be above START"));
    }
    Ok((a, b))
}

/// `pagescope diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The earlier snapshot ("-" for standard input).
    pub old: PathBuf,
    /// The later snapshot ("-" for standard input, if the earlier is a
    /// file).
    pub new: PathBuf,
    /// Only this process (repeat for more).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

/// `pagescope snapshot`.
#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Only this process (repeat for more); default every process.
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Output file ("-" for standard output).
    #[arg(short, long, value_name = "FILE", default_value = "pagescope.snap")]
    pub output: PathBuf,
    /// No progress bar or summary.
    #[arg(short, long)]
    pub quiet: bool,
    /// Also record the physical map: every page frame of the machine
    /// classed (free, anonymous, page cache, slab, ...), for `physmap`.
    #[arg(long)]
    pub physmap: bool,
    /// Threads reading processes (default: one per CPU).
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
}

/// The report views.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum View {
    /// Machine totals: user pages, page cache, kernel, free.
    Total,
    /// Per process RSS, PSS, USS, swap, and pages by class.
    Processes,
    /// Each VMA of a process and its page map.
    Vmas,
    /// Each executable unit's segments across processes, with maps.
    Units,
    /// Per unit .text, .data and .bss pages summed over processes.
    UnitTotals,
    /// VMAs holding both single-use and shared pages.
    Alerts,
    /// Every resident page (frame, flags, share count, owner) and every
    /// page in swap (its swap entry).
    Pages,
    /// The whole machine by physical address: frames by class per block.
    Physmap,
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns.
    Table,
    /// Comma-separated values.
    Csv,
    /// JSON (the stable machine interface).
    Json,
    /// An SVG chart.
    Svg,
}

/// `pagescope report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The view.
    pub view: View,
    /// A snapshot file ("-" for standard input); without it, the live
    /// system is read.
    #[arg(short, long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Only this process (repeat for more).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
    /// `processes`: count mapped (virtual) pages instead of resident ones.
    #[arg(long = "virtual")]
    pub virtual_view: bool,
    /// `processes` on the live system: read every page to count them by
    /// class (by default only the kernel's smaps_rollup sums are read).
    #[arg(long)]
    pub classes: bool,
    /// `pages`: only pages with these kpageflags (page-types names,
    /// comma-separated, `~` for "not set"), e.g. `anonymous,~lru`.
    #[arg(long, value_name = "FLAGS")]
    pub flags: Option<String>,
    /// `physmap`: block size to sum frames over (default: the memory
    /// block size), e.g. 64M.
    #[arg(long, value_name = "SIZE", value_parser = parse_block)]
    pub block: Option<u64>,
}

fn parse_block(s: &str) -> Result<u64, String> {
    let n = pagescope_core::units::parse_size(s)?;
    if n < 4096 || !n.is_power_of_two() {
        return Err(format!(
            "{s:?}: the block size must be a power of two of at least one page"
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }
}
