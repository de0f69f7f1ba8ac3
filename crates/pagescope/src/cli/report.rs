//! `pagescope report` and `pagescope diff`: views of snapshots.

use super::{parse, Pids, Rendering};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

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

/// `pagescope report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The view.
    pub view: View,
    /// A snapshot file ("-" for standard input); without it, the live
    /// system is read.
    #[arg(short, long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    #[command(flatten)]
    pub select: Pids,
    #[command(flatten)]
    pub rendering: Rendering,
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
    #[arg(long, value_name = "SIZE", value_parser = parse::block)]
    pub block: Option<u64>,
}

/// `pagescope diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The earlier snapshot ("-" for standard input).
    pub old: PathBuf,
    /// The later snapshot ("-" for standard input, if the earlier is a
    /// file).
    pub new: PathBuf,
    #[command(flatten)]
    pub select: Pids,
    #[command(flatten)]
    pub rendering: Rendering,
}
