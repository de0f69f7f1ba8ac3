//! The whole machine by physical address: frames per class, summed per
//! block of physical memory and per NUMA node, from a snapshot's physical
//! map.

use crate::model::{PhysChunk, SnapshotSink, SystemInfo, Trailer};
use crate::physclass::{PhysClass, ALL};
use crate::Result;
use std::collections::BTreeMap;

/// Frames per class, indexed by class code.
pub type ClassCounts = [u64; ALL.len()];

/// The analysis.
#[derive(Debug, Default)]
pub struct Physmap {
    /// The machine.
    pub system: SystemInfo,
    /// Frames per block (0 until the system record: then the memory
    /// block size unless set).
    pub block_frames: u64,
    /// Frames per class over the machine.
    pub totals: ClassCounts,
    /// Frames per class per block index (`pfn / block_frames`).
    pub blocks: BTreeMap<u64, ClassCounts>,
    /// Frames per class per NUMA node (`u16::MAX`: unknown).
    pub nodes: BTreeMap<u16, ClassCounts>,
    /// Frames seen.
    pub frames: u64,
    /// Notes from the end record.
    pub notes: Vec<String>,
    /// Whether the end record was seen.
    pub complete: bool,
}

impl Physmap {
    /// An analysis summing per `block_bytes` (0: the memory block size).
    pub fn new(block_bytes: u64) -> Physmap {
        Physmap {
            block_frames: block_bytes,
            ..Physmap::default()
        }
    }

    /// The class holding most frames of `counts`.
    pub fn dominant(counts: &ClassCounts) -> Option<PhysClass> {
        let (i, &n) = counts
            .iter()
            .enumerate()
            .max_by_key(|&(i, &n)| (n, std::cmp::Reverse(i)))?;
        (n > 0).then(|| ALL[i])
    }
}

fn add(dst: &mut ClassCounts, src: &ClassCounts) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

impl SnapshotSink for Physmap {
    fn system(&mut self, system: &SystemInfo) -> Result<()> {
        self.system = system.clone();
        let ps = system.page_size.max(1);
        let bytes = if self.block_frames == 0 {
            if system.memory_block_size > 0 {
                system.memory_block_size
            } else {
                128 << 20
            }
        } else {
            self.block_frames
        };
        self.block_frames = (bytes / ps).max(1);
        Ok(())
    }

    fn process(&mut self, _: &crate::model::ProcessRecord) -> Result<()> {
        Ok(())
    }

    fn pages(&mut self, _: &crate::model::PageChunk) -> Result<()> {
        Ok(())
    }

    fn physmap(&mut self, chunk: &PhysChunk) -> Result<()> {
        let bf = self.block_frames.max(1);
        let mut pfn = chunk.start_pfn;
        let mut rest = &chunk.classes[..];
        // Count block by block, so that node lookups happen once a block.
        while !rest.is_empty() {
            let block = pfn / bf;
            let n = (bf - pfn % bf).min(rest.len() as u64) as usize;
            let node = self.system.node_of(pfn).unwrap_or(u16::MAX);
            let mut counts: ClassCounts = [0; ALL.len()];
            for &c in &rest[..n] {
                if let Some(slot) = counts.get_mut(c as usize) {
                    *slot += 1;
                }
            }
            add(self.blocks.entry(block).or_insert([0; ALL.len()]), &counts);
            add(self.nodes.entry(node).or_insert([0; ALL.len()]), &counts);
            add(&mut self.totals, &counts);
            self.frames += n as u64;
            pfn += n as u64;
            rest = &rest[n..];
        }
        Ok(())
    }

    fn finish(&mut self, trailer: &Trailer) -> Result<()> {
        self.notes = trailer.notes.clone();
        self.complete = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_per_block_and_node() {
        let mut p = Physmap::new(8 * 4096);
        p.system(&SystemInfo {
            page_size: 4096,
            nodes: vec![
                crate::model::NodeRange {
                    node: 0,
                    start_pfn: 0,
                    end_pfn: 8,
                },
                crate::model::NodeRange {
                    node: 1,
                    start_pfn: 8,
                    end_pfn: 16,
                },
            ],
            ..SystemInfo::default()
        })
        .unwrap();
        let classes = vec![0, 0, 1, 1, 1, 4, 4, 5, 2, 2, 2, 2, 0, 0, 0, 0];
        p.physmap(&PhysChunk {
            start_pfn: 0,
            classes,
        })
        .unwrap();
        assert_eq!(p.frames, 16);
        assert_eq!(p.totals[PhysClass::Free as usize], 6);
        assert_eq!(p.totals[PhysClass::Anon as usize], 3);
        assert_eq!(p.blocks[&0][PhysClass::Slab as usize], 2);
        assert_eq!(p.blocks[&1][PhysClass::CacheMapped as usize], 4);
        assert_eq!(p.nodes[&1][PhysClass::Free as usize], 4);
        assert_eq!(Physmap::dominant(&p.blocks[&0]), Some(PhysClass::Anon));
        assert_eq!(Physmap::dominant(&[0; ALL.len()]), None);
    }
}
