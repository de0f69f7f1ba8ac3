//! `pagescope export`.

use super::Progress;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Formats `export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// Apache Parquet: one file per table, zstd-compressed (docs/schema.md).
    Parquet,
}

/// `pagescope export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The snapshot, recording or trace ("-" for standard input).
    pub input: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ExportFormat::Parquet)]
    pub format: ExportFormat,
    /// The output directory (made if missing). Without --partition it
    /// must be empty (or --force).
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,
    /// Hive-style directories, TABLE/host=NAME/KIND-TIME.parquet, so that
    /// the exports of many machines and moments share one directory (which
    /// need not be empty).
    #[arg(long)]
    pub partition: bool,
    /// Write over existing output: the tables of a non-empty directory,
    /// or (with --partition) this file's own earlier export.
    #[arg(long)]
    pub force: bool,
    /// The host name every row carries, instead of the one the file names
    /// (files written before pagescope recorded one have none).
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    #[command(flatten)]
    pub progress: Progress,
}
