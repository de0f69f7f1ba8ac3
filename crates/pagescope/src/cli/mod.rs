//! The command line, as clap parses it: one module per subcommand, and
//! here the arguments several of them share (flattened into each).
//! [`crate::commands`] runs what it parses.

mod analyze;
mod completions;
mod export;
mod parse;
mod record;
mod report;
mod serve;
mod snapshot;
mod top;
mod trace;

pub use analyze::{AnalyzeArgs, AnalyzeView};
pub use completions::{CompletionsArgs, ManArgs};
pub use export::{ExportArgs, ExportFormat};
pub use record::{BackendArg, RecordArgs};
pub use report::{DiffArgs, ReportArgs, View};
pub use serve::{ServeArgs, ServeBackend};
pub use snapshot::SnapshotArgs;
pub use top::{TopArgs, TopBackend};
#[cfg(target_arch = "x86_64")]
pub use trace::EvictArg;
pub use trace::TraceArgs;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
    /// Write a snapshot, recording or trace as Parquet tables.
    Export(ExportArgs),
    /// Serve memory metrics to Prometheus (OpenMetrics at /metrics).
    Serve(ServeArgs),
    /// A live view of the processes' memory: PSS, USS, RSS, swap, working set.
    Top(TopArgs),
    /// Print a shell's completion script (bash, zsh, fish, ...).
    Completions(CompletionsArgs),
    /// Write the man pages, one per command, into a directory.
    Man(ManArgs),
}

/// `--pid`, repeatable: the processes a snapshot, report or diff is of.
#[derive(Debug, Args)]
pub struct Pids {
    /// Only this process (repeat for more); default every process.
    #[arg(id = "pids", long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
}

/// `--format`: how a report is rendered.
#[derive(Debug, Args)]
pub struct Rendering {
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
    /// How tables show sizes (JSON and CSV always count pages, with
    /// `page_size`, and give RSS, PSS, USS, swap and totals in bytes too).
    #[arg(long, value_enum, default_value_t = UnitsArg::Human)]
    pub units: UnitsArg,
}

/// `--units`: how tables show sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum UnitsArg {
    /// KiB, MiB, GiB (binary units, like smem -k and procrank).
    Human,
    /// Bytes.
    Bytes,
    /// Pages (of the snapshot's page size).
    Pages,
}

impl Rendering {
    /// The renderers' name of `--units`.
    pub fn units(&self) -> pagescope_render::Units {
        match self.units {
            UnitsArg::Human => pagescope_render::Units::Human,
            UnitsArg::Bytes => pagescope_render::Units::Bytes,
            UnitsArg::Pages => pagescope_render::Units::Pages,
        }
    }
}

/// `--quiet`: no progress display and no summary on standard error.
#[derive(Debug, Args)]
pub struct Progress {
    /// No progress display or summary.
    #[arg(short, long)]
    pub quiet: bool,
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }
}
