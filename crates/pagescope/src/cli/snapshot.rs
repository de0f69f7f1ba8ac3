//! `pagescope snapshot`.

use super::{Pids, Progress};
use clap::Args;
use std::path::PathBuf;

/// `pagescope snapshot`.
#[derive(Debug, Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub select: Pids,
    /// Output file ("-" for standard output).
    #[arg(short, long, value_name = "FILE", default_value = "pagescope.snap")]
    pub output: PathBuf,
    #[command(flatten)]
    pub progress: Progress,
    /// Also record the physical map: every page frame of the machine
    /// classed (free, anonymous, page cache, slab, ...), for `physmap`.
    #[arg(long)]
    pub physmap: bool,
    /// Threads reading processes (default: one per CPU).
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
}
