//! What several parts of record do to one process: write its
//! `clear_refs`, and pass over it when it has exited.

use crate::procfs::ProcDir;
use pagescope_core::{Error, Result};
use std::io::Write;

/// Writes `what` to the process's `clear_refs`: `1` clears the accessed
/// bits of its pages, `4` their soft-dirty bits.
pub(super) fn clear_refs(dir: &ProcDir, what: &[u8]) -> Result<()> {
    let mut f = dir.open_write("clear_refs")?;
    f.write_all(what)
        .map_err(|e| Error::io(dir.path().join("clear_refs"), e))
}

/// A process that exited (or a kernel thread) is skipped, not an error.
pub(super) fn gone_ok(r: Result<()>) -> Result<()> {
    match r {
        Err(e) if e.is_gone() => Ok(()),
        other => other,
    }
}
