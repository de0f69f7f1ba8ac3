//! The working set of each process: the pages it referenced between two
//! collections, by the backend asked for.
//!
//! - `refs`: the `Referenced:` of the smaps_rollup that the collection
//!   reads anyway, then `clear_refs` (`1`) at once: one more walk of the
//!   page tables per process, exact per process. A process that did not
//!   run since its last walk referenced nothing: its working set is 0
//!   without a walk (`refresh`).
//! - `idle`, `damon`: `record`'s backends ([`Probe`]), over the processes
//!   walked, after the walks.
//!
//! A process another pagescope observes (`record --pid`, `trace --pid`)
//! is left alone by every backend, and has no working set: the bits it
//! would read and clear are that observer's, whose figures clearing them
//! would corrupt.
//!
//! A process first seen (or a pid reused) is reset and has no working set
//! until the next collection: what it referenced before it was reset is
//! no interval's. No process is stopped: a page referenced between a
//! backend's read and its clear counts in neither interval.

use super::figures::Seen;
use pagescope_core::record::Interval;
use pagescope_core::Result;
use pagescope_linux::record::Probe;
use std::collections::{HashMap, HashSet};

/// See the module documentation.
pub enum WorkingSet {
    /// No working set.
    None,
    /// smaps_rollup `Referenced:` and `clear_refs`, read and cleared by
    /// the collector itself as it walks (`collect`).
    Refs,
    /// One of `record`'s backends.
    Probe {
        /// The backend.
        probe: Box<dyn Probe>,
        /// The processes reset or collected at the last collection.
        known: HashMap<u32, u64>,
    },
}

impl std::fmt::Debug for WorkingSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WorkingSet::None => "WorkingSet::None",
            WorkingSet::Refs => "WorkingSet::Refs",
            WorkingSet::Probe { .. } => "WorkingSet::Probe",
        })
    }
}

impl WorkingSet {
    /// The refs backend.
    pub fn refs() -> WorkingSet {
        WorkingSet::Refs
    }

    /// After every process was read. The processes another pagescope
    /// observes (`observed`, as [`pagescope_linux::observer::observed`]
    /// gives them) are left alone: their bits are that observer's.
    pub fn finish(&mut self, seen: &mut [Seen], observed: &HashSet<(u32, u64)>) -> Result<()> {
        match self {
            WorkingSet::None => Ok(()),
            WorkingSet::Refs => Ok(()),
            WorkingSet::Probe { probe, known } => {
                let ours = |s: &Seen| s.walked && !observed.contains(&(s.pid, s.start_time));
                let (old, new): (Vec<&mut Seen>, Vec<&mut Seen>) = seen
                    .iter_mut()
                    .filter(|s| ours(s))
                    .partition(|s| known.get(&s.pid) == Some(&s.start_time));
                let old_pids: Vec<u32> = old.iter().map(|s| s.pid).collect();
                let new_pids: Vec<u32> = new.iter().map(|s| s.pid).collect();
                let mut interval = Interval::default();
                probe.collect(&old_pids, &mut interval)?;
                probe.reset(&new_pids)?;
                let mut pages: HashMap<u32, u64> = HashMap::new();
                for row in &interval.virt {
                    *pages.entry(row.pid).or_default() += row.counts.user;
                }
                let page_size = pagescope_linux::system::page_size();
                for s in old {
                    s.figures.working_set =
                        Some(pages.get(&s.pid).copied().unwrap_or(0) * page_size);
                }
                *known = seen
                    .iter()
                    .filter(|s| ours(s))
                    .map(|s| (s.pid, s.start_time))
                    .collect();
                Ok(())
            }
        }
    }
}
