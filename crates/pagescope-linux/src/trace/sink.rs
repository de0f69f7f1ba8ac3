//! Where a session's references go: a [`RefSink`]. [`TraceSink`] writes
//! them to a trace file; `record`'s sampler has its own (see
//! [`super::sampler`]). The session, the fault thread and the ptrace
//! thread know only the trait.

use crate::trace::counts::Counts;
use crate::trace::os::now_mono;
use pagescope_core::format::TraceWriter;
use pagescope_core::trace::{Mapping, ProcessEvent, ProcessEventKind, Ref, Residency, TraceEnd};
use pagescope_core::Result;
use std::any::Any;
use std::fs::File;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How a logged page came to be referenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Touch {
    /// It came back: from the store, or mapped again (shared memory).
    Back,
    /// Touched for the first time (a missing fault on a page never away).
    First,
    /// A write to a page that was in place.
    Write,
}

/// One page reference, as the fault thread saw it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Touched {
    /// The address space's key.
    pub(super) key: u32,
    /// Its process (thread-group id), and the thread that touched it.
    pub(super) pid: u32,
    pub(super) tid: u32,
    /// The page's address.
    pub(super) page: u64,
    pub(super) write: bool,
    pub(super) how: Touch,
    /// The mapping's id, when the sink names mappings
    /// ([`RefSink::names_mappings`]; else `u32::MAX`).
    pub(super) mapping: u32,
    /// When the fault was taken up (CLOCK_MONOTONIC, ns).
    pub(super) at: u64,
}

/// Where the references, mappings and process events of a session go.
pub(super) trait RefSink: Send + std::fmt::Debug {
    /// Whether the pool's pages leave as it fills, oldest first (a trace);
    /// without, pages leave only when asked (a sampler's boundaries).
    fn replaces(&self) -> bool;

    /// Whether the page at `addr` is watched: a page outside is let in at
    /// its first touch without being logged, and not moved out when its
    /// mapping is registered. Every page is, by default.
    fn watches(&self, _addr: u64) -> bool {
        true
    }

    /// Whether each reference carries the id of its mapping (found, or
    /// logged then, for a page of a mapping the fault thread did not know).
    fn names_mappings(&self) -> bool;

    /// A mapping, traced or not.
    fn mapping(&mut self, m: &Mapping) -> Result<()>;

    /// A process started, forked, exec'd or exited.
    fn event(&mut self, pid: u32, kind: ProcessEventKind) -> Result<()>;

    /// The residency of a file mapping of a process that exits.
    fn residency(&mut self, r: &Residency) -> Result<()>;

    /// A page reference.
    fn reference(&mut self, t: Touched, counts: &Counts) -> Result<()>;

    /// Process `pid` is exiting: `frame(page)` still reads the frame and
    /// mapping of each of its pages.
    fn exiting(
        &mut self,
        _pid: u32,
        _frame: &mut dyn FnMut(u64) -> (Option<u64>, Option<(u64, u64)>),
    ) {
    }

    /// The pages of space `key` that were there when their mapping was
    /// registered, moved out then.
    fn emptied(&mut self, _key: u32, _pages: Vec<u64>) {}

    /// Pages moved out when asked ([`RefSink::replaces`]).
    fn evicted(&mut self, _pages: &[(u32, u64)]) {}

    /// The range `[start, end)` of space `key` left the program.
    fn forget(&mut self, _key: u32, _start: u64, _end: u64) {}

    /// Writes out what has waited long enough (200 ms).
    fn flush_if_due(&mut self, _counts: &Counts) -> Result<()> {
        Ok(())
    }

    /// Writes the end; returns the bytes written in all.
    fn finish(&mut self, end: &TraceEnd, counts: &Counts) -> Result<u64>;

    /// The sink itself, for its owner to reach its own type.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// References to a trace file, in chunks.
#[derive(Debug)]
pub(super) struct TraceSink {
    writer: TraceWriter<File>,
    pending: Vec<Ref>,
    last_flush: Instant,
    /// The trace's time zero (`CLOCK_MONOTONIC`).
    start_mono: u64,
}

impl TraceSink {
    /// A sink into `writer`, whose times count from `start_mono`.
    pub(super) fn new(writer: TraceWriter<File>, start_mono: u64) -> TraceSink {
        TraceSink {
            writer,
            pending: Vec::new(),
            last_flush: Instant::now(),
            start_mono,
        }
    }

    fn now(&self) -> u64 {
        now_mono().saturating_sub(self.start_mono)
    }

    fn flush(&mut self, counts: &Counts) -> Result<()> {
        self.writer.refs(&self.pending)?;
        counts.bytes.store(self.writer.bytes(), Ordering::Relaxed);
        self.pending.clear();
        self.last_flush = Instant::now();
        Ok(())
    }
}

impl RefSink for TraceSink {
    fn replaces(&self) -> bool {
        true
    }

    fn names_mappings(&self) -> bool {
        true
    }

    fn mapping(&mut self, m: &Mapping) -> Result<()> {
        self.writer.mapping(m)
    }

    fn event(&mut self, pid: u32, kind: ProcessEventKind) -> Result<()> {
        let e = ProcessEvent {
            time_ns: self.now(),
            pid,
            kind,
        };
        self.writer.event(&e)
    }

    fn residency(&mut self, r: &Residency) -> Result<()> {
        self.writer.residency(r)
    }

    fn reference(&mut self, t: Touched, counts: &Counts) -> Result<()> {
        self.pending.push(Ref {
            time_ns: t.at.saturating_sub(self.start_mono),
            pid: t.pid,
            tid: t.tid,
            addr: t.page,
            write: t.write,
            mapping: t.mapping,
        });
        counts.references.fetch_add(1, Ordering::Relaxed);
        if t.write {
            counts.writes.fetch_add(1, Ordering::Relaxed);
        }
        if self.pending.len() >= 1 << 16 {
            self.flush(counts)?;
        }
        Ok(())
    }

    fn flush_if_due(&mut self, counts: &Counts) -> Result<()> {
        if !self.pending.is_empty() && self.last_flush.elapsed() > Duration::from_millis(200) {
            self.flush(counts)?;
        }
        Ok(())
    }

    fn finish(&mut self, end: &TraceEnd, counts: &Counts) -> Result<u64> {
        self.flush(counts)?;
        self.writer.finish(end)?;
        Ok(self.writer.bytes())
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
