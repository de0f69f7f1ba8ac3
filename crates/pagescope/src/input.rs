//! What the commands read: input files (or standard input for `-`),
//! snapshots replayed from them, and checks that named processes exist.

use crate::BadInput;
use anyhow::{Context, Result};
use pagescope_core::analysis::PidFilter;
use pagescope_core::format::{read_snapshot, Completeness};
use pagescope_core::model::SnapshotSink;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// The kind of pagescope file `input` holds (bytes 10 and 11 of its
/// file header), read without consuming it; `None` for a file too short
/// or foreign to say, which is left to a reader, whose error says what is
/// wrong.
pub fn peek_kind(input: &mut impl BufRead) -> Result<Option<u16>> {
    let head = input.fill_buf().context(BadInput)?;
    Ok(
        (head.len() >= 12 && head[..8] == pagescope_core::format::MAGIC)
            .then(|| u16::from_le_bytes([head[10], head[11]])),
    )
}

/// Opens an input file for reading, or standard input for `-`; returns it
/// with the name messages give it. A file that can't be opened is bad
/// input.
pub fn open_input(path: &Path) -> Result<(Box<dyn Read>, PathBuf)> {
    if path.as_os_str() == "-" {
        return Ok((Box::new(std::io::stdin().lock()), input_name(path)));
    }
    let file = std::fs::File::open(path)
        .map_err(|e| pagescope_core::Error::io(path, e))
        .context(BadInput)?;
    Ok((Box::new(BufReader::new(file)), path.to_path_buf()))
}

/// How messages name an input: `-` is standard input.
pub fn input_name(path: &Path) -> PathBuf {
    if path.as_os_str() == "-" {
        PathBuf::from("standard input")
    } else {
        path.to_path_buf()
    }
}

/// Replays a snapshot file (or standard input) into a sink, keeping only
/// `pids` (all if empty); the note says if it was cut short.
pub fn read_snapshot_file(
    path: &Path,
    pids: &[u32],
    sink: &mut impl SnapshotSink,
) -> Result<Option<String>> {
    let mut filtered = PidFilter::new(pids, sink);
    let (input, name) = open_input(path)?;
    let done = read_snapshot(input, &name, &mut filtered).context(BadInput)?;
    Ok(match done {
        Completeness::Complete => None,
        Completeness::CutShort { .. } => Some(format!(
            "{} was cut short (the recorder stopped before finishing it): this report covers what was written",
            name.display()
        )),
    })
}

/// Whether a process `pid` exists on the live system.
pub fn process_exists(pid: u32) -> bool {
    pagescope_linux::procfs::ProcDir::at(&pagescope_linux::Root::default().proc, pid).exists()
}

/// A `--pid` that names no process is an error before any work starts.
pub fn check_pids_exist(pids: &[u32]) -> Result<()> {
    match pids.iter().find(|&&pid| !process_exists(pid)) {
        Some(pid) => anyhow::bail!("no process with pid {pid}"),
        None => Ok(()),
    }
}
