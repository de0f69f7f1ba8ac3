//! `pagescope analyze`.

use super::{parse, Rendering};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

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
    /// Trace: miss ratio by memory size, LRU (exact), FIFO and CLOCK
    /// (with --sample, SHARDS estimates). Recording (page-exact
    /// backends): the LRU curve estimated from the pages each interval
    /// referenced.
    Mrc,
    /// Recording or trace: every view above that applies, on one
    /// self-contained HTML page (-o OUT).
    Html,
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
    #[arg(long, value_name = "START-END", value_parser = parse::range)]
    pub range: Option<(u64, u64)>,
    /// Only the references of this process (recordings and traces).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// `wss`: intervals per window.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub window: u32,
    /// `mrc`: estimate the curves from the references to a sample of
    /// about RATE of the pages (0 < RATE <= 1, e.g. 0.01), chosen by a
    /// hash of each page (SHARDS); the report says it is sampled.
    #[arg(long, value_name = "RATE", value_parser = parse::fraction)]
    pub sample: Option<f64>,
    /// `mrc`: LRU alone (FIFO and CLOCK, simulated size by size, cost
    /// most of the time; their columns are then empty, and a note says
    /// so).
    #[arg(long)]
    pub lru_only: bool,
    /// `mrc` of a recording: set the estimate beside the exact LRU curve
    /// of TRACE, a trace of the same program, and report how far apart
    /// they are.
    #[arg(long, value_name = "TRACE")]
    pub against: Option<PathBuf>,
    #[command(flatten)]
    pub rendering: Rendering,
    /// `html`: the page to write ("-" for standard output); made with
    /// mode 0600, as it holds command lines and addresses.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}
