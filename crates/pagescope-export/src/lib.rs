//! `pagescope export`: pagescope's files as Parquet tables, one file per
//! table, for DuckDB, Spark, pandas or any engine that reads Parquet.
//!
//! Each kind of file has its tables (docs/schema.md describes every
//! column): a snapshot ([`snapshot`]) `system`, `processes`, `vmas`,
//! `pages`, `physmap`; a recording ([`record`]) `header`, `processes`,
//! `intervals`, `counts`, `page_runs`; a trace ([`trace`]) `header`,
//! `mappings`, `refs`, `events`, `residency`. The readers of
//! `pagescope_core::format` stream the file into an exporter, which
//! writes rows as they come ([`table`]): memory stays bounded whatever
//! the file holds.
//!
//! Every row carries the host, the boot id and the time the file was
//! taken ([`table::Stamp`]), so that exports of many machines put in one
//! directory read as one dataset; [`Options::partition`] lays them out in
//! Hive-style directories, `TABLE/host=NAME/KIND-TAKEN_AT.parquet`.
//!
//! Modules, in the order they may use each other: `table`, then
//! `layout`, then `snapshot`, `record` and `trace`.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod layout;
pub mod record;
pub mod snapshot;
pub mod table;
pub mod trace;

pub use layout::{Options, Summary};

use pagescope_core::format::{FrameReader, Kind};
use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};

/// What can go wrong in an export.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The input is not a pagescope file, or is damaged.
    #[error(transparent)]
    Input(pagescope_core::Error),
    /// The output is there already (a non-empty directory, or a file of
    /// this export in a partitioned one) and `--force` was not given.
    #[error("{}: {why} (--force writes over it)", path.display())]
    Exists {
        /// The directory or file.
        path: PathBuf,
        /// What is there.
        why: &'static str,
    },
    /// Writing the output failed.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
    /// The Parquet writer failed.
    #[error("{}: {error}", path.display())]
    Parquet {
        /// The file being written.
        path: PathBuf,
        /// What failed.
        error: parquet::errors::ParquetError,
    },
    /// A row did not fit its table (a defect of pagescope).
    #[error("{0}")]
    Schema(String),
}

impl ExportError {
    fn io(path: &Path, error: std::io::Error) -> ExportError {
        ExportError::Io {
            path: path.to_path_buf(),
            error,
        }
    }

    fn parquet(path: &Path, error: parquet::errors::ParquetError) -> ExportError {
        ExportError::Parquet {
            path: path.to_path_buf(),
            error,
        }
    }

    /// Whether the input or the command line is at fault (a bad input
    /// file, an output already there), not the system.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, ExportError::Input(_) | ExportError::Exists { .. })
    }
}

/// The result of an export.
pub type Result<T> = std::result::Result<T, ExportError>;

/// Exports the pagescope file `input` (named `name` in messages), of any
/// kind, as `options` say.
pub fn export(mut input: impl Read, name: &Path, options: &Options) -> Result<Summary> {
    // The file header names the kind; a header that does not is read
    // again by the format's own reader, for its message.
    let mut header = [0u8; 16];
    let mut got = 0;
    while got < header.len() {
        match input.read(&mut header[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ExportError::Input(pagescope_core::Error::io(name, e))),
        }
    }
    let kind = FrameReader::new(Cursor::new(&header[..got]), name)
        .map_err(ExportError::Input)?
        .kind();
    layout::prepare(options)?;
    let input = Cursor::new(header).chain(input);
    match kind {
        Kind::Snapshot => snapshot::export(input, name, options),
        Kind::Record => record::export(input, name, options),
        Kind::Trace => trace::export(input, name, options),
    }
}

/// Carries a failure of the output through a reader's sink, whose methods
/// return the format's errors: the sink keeps the export's own error and
/// stops the reader with this one.
fn stop(kept: &mut Option<ExportError>, e: ExportError) -> pagescope_core::Error {
    let stop = pagescope_core::Error::Failed {
        what: "export".into(),
        why: e.to_string(),
    };
    *kept = Some(e);
    stop
}

/// The error of a read that a sink may have stopped: the sink's own if it
/// kept one, else the input's.
fn read_error(kept: Option<ExportError>, e: pagescope_core::Error) -> ExportError {
    kept.unwrap_or(ExportError::Input(e))
}
