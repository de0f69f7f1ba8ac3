//! The state the two threads of a trace share (behind one mutex): the
//! traced address spaces with the mappings the fault thread knows of, the
//! pool, the forks not yet claimed, and where references go.

use crate::trace::leftover::Leftover;
use crate::trace::mm::{Mm, Store, PAGE};
use crate::trace::sink::RefSink;
use crate::trace::uffd::Uffd;
use pagescope_core::evict::Pool;
use pagescope_core::parse;
use pagescope_core::trace::{EvictMethod, Mapping, MappingKind, ProcessEventKind};
use pagescope_core::{Error, Result};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A traced mapping in the fault thread's lookup table.
#[derive(Clone, Copy, Debug)]
pub(super) struct MapRange {
    pub(super) end: u64,
    pub(super) id: u32,
    /// Shared memory: its pages leave by being unmapped here (they stay
    /// in the page cache) and come back with `UFFDIO_CONTINUE`.
    pub(super) shared: bool,
}

impl MapRange {
    /// The range of a maps line, logged as mapping `id`.
    pub(super) fn of(line: &parse::maps::MapsLine, id: u32, shared: bool) -> MapRange {
        MapRange {
            end: line.end,
            id,
            shared,
        }
    }
}

/// A child address space announced by `UFFD_EVENT_FORK`, waiting for the
/// ptrace thread to learn its pid.
#[derive(Debug)]
pub(super) struct PendingFork {
    pub(super) uffd: Arc<Uffd>,
    pub(super) store: Store,
    pub(super) maps: BTreeMap<u64, MapRange>,
    pub(super) heap: Option<(u32, u64, u64)>,
}

#[derive(Debug)]
pub(super) struct Space {
    pub(super) mm: Mm,
    pub(super) maps: BTreeMap<u64, MapRange>,
    /// Heap mapping id, start, current end.
    pub(super) heap: Option<(u32, u64, u64)>,
    /// Ranges registered by the ptrace thread whose resident pages the
    /// fault thread must move out, and whether each is shared memory.
    pub(super) pending_empty: Vec<(u64, u64, bool)>,
    /// The ranges mapped by transparent huge pages when pagescope
    /// attached, collapsed again when the program is let go (`thp`).
    pub(super) thp: Vec<(u64, u64)>,
    /// Set by the fault thread when the mover is attached and the pending
    /// ranges are empty; the ptrace thread waits for it before letting the
    /// program run.
    pub(super) ready: Arc<AtomicBool>,
}

pub(super) struct State {
    pub(super) spaces: HashMap<u32, Space>,
    pub(super) next_space: u32,
    /// The pages let into the program.
    pub(super) pool: Pool,
    /// Where references, mappings and events go.
    pub(super) sink: Box<dyn RefSink>,
    pub(super) next_mapping: u32,
    pub(super) forks: HashMap<u32, VecDeque<PendingFork>>,
    /// Spaces gone (exit, exec) whose movers the fault thread must end.
    pub(super) retired: Vec<Space>,
    /// Movers killed but not yet reaped (see [`Mover::kill_nowait`]).
    pub(super) dying: Vec<u32>,
    /// What the release left in each program (its mover ended), for the
    /// ptrace thread to remove.
    pub(super) reap: Vec<Leftover>,
    /// The fault thread's first error, for the ptrace thread to end the
    /// trace with.
    pub(super) failure: Option<Error>,
    pub(super) zero: Box<[u8; PAGE as usize]>,
    /// How pages leave the program.
    pub(super) method: EvictMethod,
    /// The kernel can trace shared memory ([`uffd::FEATURES_SHMEM`]).
    pub(super) shmem: bool,
    /// `UFFDIO_CONTINUE` can write-protect as it maps (Linux 6.4); until
    /// the kernel refuses, it is assumed.
    pub(super) continue_wp: bool,
    /// When the fault being served was taken up (CLOCK_MONOTONIC, ns):
    /// the time of its reference, read before any call that can wake the
    /// faulting thread, which would then run on past it.
    pub(super) fault_at: u64,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("spaces", &self.spaces.len())
            .finish_non_exhaustive()
    }
}

impl State {
    pub(super) fn write_mapping(&mut self, m: &Mapping) -> Result<()> {
        self.sink.mapping(m)
    }

    pub(super) fn new_mapping(
        &mut self,
        pid: u32,
        line: &parse::maps::MapsLine,
        kind: MappingKind,
        traced: bool,
    ) -> Result<u32> {
        let id = self.next_mapping;
        self.next_mapping += 1;
        self.write_mapping(&Mapping {
            id,
            pid,
            start: line.start,
            end: line.end,
            perms: line.perms.clone(),
            offset: line.offset,
            path: line.path.clone(),
            inode: line.inode,
            dev: (line.dev_major as u64) << 32 | line.dev_minor as u64,
            kind,
            traced,
        })?;
        Ok(id)
    }

    pub(super) fn event(&mut self, pid: u32, kind: ProcessEventKind) -> Result<()> {
        self.sink.event(pid, kind)
    }
}

/// `/proc/PID/maps` in the procfs `proc`.
pub(super) fn maps_of(proc: &std::path::Path, pid: u32) -> Result<Vec<parse::maps::MapsLine>> {
    crate::procfs::ProcDir::at(proc, pid).maps(&mut Vec::new())
}

pub(super) fn anon_kind(line: &parse::maps::MapsLine) -> Option<MappingKind> {
    if !line.perms.ends_with('p') {
        return None;
    }
    match line.path.as_str() {
        "" => Some(MappingKind::Anonymous),
        "[heap]" => Some(MappingKind::Heap),
        "[stack]" => Some(MappingKind::Stack),
        p if p.starts_with("[anon:") && !p.contains("pagescope-") => Some(MappingKind::Anonymous),
        _ => None,
    }
}
