//! The counts a trace keeps while it runs, readable from another thread
//! (the progress line, `record`'s recorder).

use std::sync::atomic::AtomicU64;

/// Counts the tracer keeps while it runs; readable from another thread.
#[derive(Debug, Default)]
pub struct Counts {
    /// References logged.
    pub references: AtomicU64,
    /// Of which writes.
    pub writes: AtomicU64,
    /// Pages evicted from the pool.
    pub evictions: AtomicU64,
    /// Pages that could not be evicted.
    pub unevictable: AtomicU64,
    /// Bytes of trace written.
    pub bytes: AtomicU64,
}
