//! The whole machine by physical address: frames per class, summed per
//! block of physical memory and per NUMA node, from a snapshot's physical
//! map.

use crate::model::{PhysChunk, SnapshotSink, SystemInfo, Trailer};
use crate::physclass::{PhysClass, ALL};
use crate::Result;
use std::collections::BTreeMap;

/// The most blocks a map is summed over: each block costs a few KiB of
/// memory in a report (its row, its bar), so that a smaller block is
/// refused ([`Physmap::too_small`]) rather than filling the memory.
pub const MAX_BLOCKS: u64 = 1 << 16;

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
    /// Set when the block size asked for would give more than
    /// [`MAX_BLOCKS`] blocks: the smallest block size (bytes, a power of
    /// two) that gives no more. The system record then fails.
    pub too_small: Option<u64>,
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

impl Physmap {
    /// A note when meminfo's `MemFree` exceeds the free frames of the map
    /// by more than 5% of the frames: the flagless frames the map counts
    /// as other kernel memory may then be free memory the kernel has not
    /// yet handed to its page allocator (deferred struct-page init).
    fn free_note(&self) -> Option<String> {
        let ps = self.system.page_size.max(1);
        let mem_free = self.system.meminfo_kb("MemFree")? * 1024 / ps;
        let free = self.totals[PhysClass::Free as usize];
        let other = self.totals[PhysClass::KernelOther as usize];
        (mem_free > free + self.frames / 20).then(|| {
            format!(
                "meminfo's MemFree ({mem_free} pages) is {} pages more than the free frames of the map ({free}): frames with no flags outside a free block are counted as kernel, other ({other}); on a kernel that initialises its struct pages late (deferred struct-page init) they may be memory not yet handed to the page allocator (compare the zones' present and managed pages in /proc/zoneinfo)",
                mem_free - free
            )
        })
    }
}

/// A block size in the largest binary unit that divides it: `4 KiB`,
/// `64 KiB`, `2 MiB`, `1 GiB`, `1536 B`.
pub fn block_name(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut unit) = (bytes, 0);
    while unit + 1 < UNITS.len() && v >= 1024 && v % 1024 == 0 {
        v /= 1024;
        unit += 1;
    }
    format!("{v} {}", UNITS[unit])
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
        // Blocks from frame 0 to the highest: the strip shows each.
        let top = system.max_pfn();
        if top.div_ceil(self.block_frames) > MAX_BLOCKS {
            let smallest = (top * ps).div_ceil(MAX_BLOCKS).next_power_of_two().max(ps);
            self.too_small = Some(smallest);
            return Err(crate::Error::Failed {
                what: format!("a physical map in blocks of {}", block_name(bytes)),
                why: format!(
                    "more than {MAX_BLOCKS} blocks; the smallest block for this machine is {}",
                    block_name(smallest)
                ),
            });
        }
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
        self.notes.extend(self.free_note());
        self.complete = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_memfree_far_above_the_free_frames() {
        let mut p = Physmap::new(0);
        let mut system = SystemInfo {
            page_size: 4096,
            meminfo: vec![("MemFree".into(), 400)],
            ..SystemInfo::default()
        };
        p.system(&system).unwrap();
        // 100 frames, 10 free, 90 flagless: MemFree says 100 free.
        let mut classes = vec![PhysClass::Free as u8; 10];
        classes.extend([PhysClass::KernelOther as u8; 90]);
        p.physmap(&PhysChunk {
            start_pfn: 0,
            classes: classes.clone(),
        })
        .unwrap();
        p.finish(&Trailer::default()).unwrap();
        assert_eq!(p.notes.len(), 1);
        assert!(p.notes[0].contains("is 90 pages more"), "{}", p.notes[0]);
        // Within 5% of the frames: no note.
        system.meminfo = vec![("MemFree".into(), 56)];
        let mut p = Physmap::new(0);
        p.system(&system).unwrap();
        p.physmap(&PhysChunk {
            start_pfn: 0,
            classes,
        })
        .unwrap();
        p.finish(&Trailer::default()).unwrap();
        assert!(p.notes.is_empty());
    }

    #[test]
    fn names_block_sizes() {
        assert_eq!(block_name(4096), "4 KiB");
        assert_eq!(block_name(64 << 10), "64 KiB");
        assert_eq!(block_name(2 << 20), "2 MiB");
        assert_eq!(block_name(1 << 30), "1 GiB");
        assert_eq!(block_name(512 << 30), "512 GiB");
        assert_eq!(block_name(1536), "1536 B");
    }

    #[test]
    fn refuses_too_many_blocks() {
        // 24 GiB of RAM and a hole below 4 GiB: up to 25 GiB.
        let system = SystemInfo {
            page_size: 4096,
            ram_ranges: vec![(0x1000, 0x9_fbff), (0x1_0000_0000, 0x6_3fff_ffff)],
            ..SystemInfo::default()
        };
        let mut p = Physmap::new(4096);
        let e = p.system(&system).unwrap_err().to_string();
        assert_eq!(p.too_small, Some(512 << 10));
        assert!(
            e.contains("the smallest block for this machine is 512 KiB"),
            "{e}"
        );
        // 25 GiB / 512 KiB = 51200 blocks: allowed; 256 KiB: not.
        let mut p = Physmap::new(512 << 10);
        p.system(&system).unwrap();
        assert_eq!(p.too_small, None);
        assert!(Physmap::new(256 << 10).system(&system).is_err());
        // The default, the memory block size, is allowed.
        Physmap::new(0).system(&system).unwrap();
    }

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
