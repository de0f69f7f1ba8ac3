//! The mappings a trace file has named so far, by process and address:
//! what the writer and every reader of a trace rebuild alike, frame by
//! frame, so that a reference's mapping id need not be stored when it is
//! the one its address predicts.
//!
//! The prediction is the mapping of the reference's process whose record,
//! among those written before the reference's chunk, covers its address
//! and came last (a mapping that moved or grew is written again, and the
//! newer record wins over what it overlaps). The chunk stores the
//! difference from the prediction, 0 for nearly every reference, so a
//! wrong prediction costs bytes, never correctness.

use crate::trace::Mapping;
use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::collections::BTreeMap;

/// Sets of the cache of recent predictions.
const RECENT: usize = 256;

/// A range a prediction found: `(pid, start, end, id)`.
type Found = Option<(u32, u64, u64, u32)>;

/// Per process, address ranges to mapping ids; later records replace the
/// parts of earlier ones they overlap.
#[derive(Debug, Clone)]
pub struct MappingTable {
    by_pid: FxHashMap<u32, BTreeMap<u64, (u64, u32)>>,
    /// The ranges recent predictions found, per 1 MiB block of address
    /// (consecutive blocks in consecutive sets), the two newest of each:
    /// references mostly fall in mappings referenced just before, and a
    /// hit spares a hash and a tree lookup. A program that touches many
    /// mappings at random finds them all here: python3's heap is arenas
    /// of 1 MiB, each a mapping, not aligned (so a block holds parts of
    /// two), and one entry for the last range missed about every other
    /// time. Cleared by every insert.
    recent: [[Cell<Found>; 2]; RECENT],
}

impl Default for MappingTable {
    fn default() -> MappingTable {
        MappingTable {
            by_pid: FxHashMap::default(),
            recent: std::array::from_fn(|_| [Cell::new(None), Cell::new(None)]),
        }
    }
}

/// The set of the cache of recent predictions that `addr` in `pid` uses:
/// its 1 MiB block, offset by a hash of the process.
#[inline]
fn way(pid: u32, addr: u64) -> usize {
    ((addr >> 20) ^ (pid as u64).wrapping_mul(0x9e37_79b9)) as usize % RECENT
}

impl MappingTable {
    /// Adds a mapping record, as the file holds it from here on.
    pub fn insert(&mut self, m: &Mapping) {
        if m.end <= m.start {
            return;
        }
        for w in self.recent.iter().flatten() {
            w.set(None);
        }
        let ranges = self.by_pid.entry(m.pid).or_default();
        // Every range that overlaps [start, end): the last one starting
        // before `start`, and those starting inside.
        let mut overlapping: Vec<u64> = ranges.range(m.start..m.end).map(|(&s, _)| s).collect();
        if let Some((&s, &(e, _))) = ranges.range(..m.start).next_back() {
            if e > m.start {
                overlapping.push(s);
            }
        }
        for s in overlapping {
            let (e, id) = ranges.remove(&s).expect("listed above");
            if s < m.start {
                ranges.insert(s, (m.start, id));
            }
            if e > m.end {
                ranges.insert(m.end, (e, id));
            }
        }
        ranges.insert(m.start, (m.end, m.id));
    }

    /// The mapping id that the records so far give `addr` in `pid`.
    #[inline]
    pub fn predict(&self, pid: u32, addr: u64) -> Option<u32> {
        let [newest, older] = &self.recent[way(pid, addr)];
        if let Some((p, start, end, id)) = newest.get() {
            if p == pid && (start..end).contains(&addr) {
                return Some(id);
            }
        }
        if let Some((p, start, end, id)) = older.get() {
            if p == pid && (start..end).contains(&addr) {
                newest.swap(older);
                return Some(id);
            }
        }
        self.look_up(pid, addr)
    }

    /// [`MappingTable::predict`] past the cache, which it fills.
    #[inline(never)]
    fn look_up(&self, pid: u32, addr: u64) -> Option<u32> {
        let (&start, &(end, id)) = self.by_pid.get(&pid)?.range(..=addr).next_back()?;
        if addr < end {
            let [newest, older] = &self.recent[way(pid, addr)];
            older.set(newest.replace(Some((pid, start, end, id))));
            Some(id)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::MappingKind;
    use proptest::prelude::*;

    fn mapping(id: u32, pid: u32, start: u64, end: u64) -> Mapping {
        Mapping {
            id,
            pid,
            start,
            end,
            perms: "rw-p".into(),
            offset: 0,
            path: String::new(),
            inode: 0,
            dev: 0,
            kind: MappingKind::Anonymous,
            traced: true,
        }
    }

    #[test]
    fn the_newest_record_covering_an_address_wins() {
        let mut t = MappingTable::default();
        t.insert(&mapping(1, 7, 0x1000, 0x9000));
        t.insert(&mapping(2, 7, 0x3000, 0x5000));
        t.insert(&mapping(3, 8, 0x1000, 0x9000));
        assert_eq!(t.predict(7, 0x0fff), None);
        assert_eq!(t.predict(7, 0x1000), Some(1));
        assert_eq!(t.predict(7, 0x2fff), Some(1));
        assert_eq!(t.predict(7, 0x3000), Some(2));
        assert_eq!(t.predict(7, 0x4fff), Some(2));
        assert_eq!(t.predict(7, 0x5000), Some(1));
        assert_eq!(t.predict(7, 0x8fff), Some(1));
        assert_eq!(t.predict(7, 0x9000), None);
        assert_eq!(t.predict(8, 0x4000), Some(3));
        assert_eq!(t.predict(9, 0x4000), None);
        // Mapping 1 moves: written again with its new range.
        t.insert(&mapping(1, 7, 0x4000, 0x6000));
        assert_eq!(t.predict(7, 0x3000), Some(2));
        assert_eq!(t.predict(7, 0x4000), Some(1));
        assert_eq!(t.predict(7, 0x6000), Some(1));
    }

    proptest! {
        /// The table answers as a list of every record, searched from the
        /// newest back, would, at every point of the file.
        #[test]
        fn as_the_list_of_records_would(
            records in prop::collection::vec((0u32..3, 0u64..64, 1u64..16), 0..40),
            probes in prop::collection::vec((0u32..3, 0u64..90), 0..60),
        ) {
            let mut t = MappingTable::default();
            let mut all = Vec::new();
            // Probed after every record too: what the last prediction
            // found must not outlive a record that changes it.
            for (i, &(pid, start, len)) in records.iter().enumerate() {
                let m = mapping(i as u32, pid, start, start + len);
                t.insert(&m);
                all.push(m);
                for &(pid, addr) in &probes {
                    let want = all
                        .iter()
                        .rev()
                        .find(|m| m.pid == pid && m.start <= addr && addr < m.end)
                        .map(|m| m.id);
                    prop_assert_eq!(t.predict(pid, addr), want);
                }
            }
        }
    }
}
