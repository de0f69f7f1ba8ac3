//! `pagescope export`: a snapshot, recording or trace as Parquet tables
//! (`pagescope_export`), for DuckDB, Spark and other engines.

use crate::cli::{ExportArgs, ExportFormat};
use crate::input::open_input;
use crate::BadInput;
use anyhow::{Context, Result};
use pagescope_export::{export, Options};

/// Runs `export`; returns the exit code.
pub fn run(args: ExportArgs) -> Result<u8> {
    let ExportFormat::Parquet = args.format;
    if args.host.as_deref() == Some("") {
        return Err(anyhow::anyhow!("--host: an empty host name").context(BadInput));
    }
    let options = Options {
        dir: args.output.clone(),
        partition: args.partition,
        force: args.force,
        host: args.host.clone(),
    };
    let (input, name) = open_input(&args.input)?;
    let summary = match export(input, &name, &options) {
        Ok(s) => s,
        Err(e) if e.is_bad_input() => return Err(anyhow::Error::new(e).context(BadInput)),
        Err(e) => return Err(e).context("export"),
    };
    if !summary.complete {
        eprintln!(
            "note: {} was cut short: the tables hold what was written",
            name.display()
        );
    }
    if !args.progress.quiet {
        let rows: u64 = summary.tables.iter().map(|t| t.2).sum();
        eprintln!(
            "exported {} {} ({} tables, {rows} rows; host {}, boot {}) to {}",
            summary.kind,
            name.display(),
            summary.tables.len(),
            summary.stamp.host.as_deref().unwrap_or("unknown"),
            summary.stamp.boot_id.as_deref().unwrap_or("unknown"),
            args.output.display()
        );
    }
    Ok(0)
}
