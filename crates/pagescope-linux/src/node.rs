//! NUMA nodes and memory blocks from sysfs.
//!
//! `/sys/devices/system/memory/block_size_bytes` gives the memory block
//! size (hex); `/sys/devices/system/node/nodeN/memoryM` links say that
//! block M (PFNs `[M * block / page, (M + 1) * block / page)`) is on node N
//! (Documentation/admin-guide/mm/memory-hotplug.rst).

use pagescope_core::model::NodeRange;
use pagescope_core::{Error, Result};
use std::path::Path;

/// The memory block size in bytes.
pub fn block_size(sys_root: &Path) -> Result<u64> {
    let path = sys_root.join("devices/system/memory/block_size_bytes");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    u64::from_str_radix(text.trim(), 16)
        .map_err(|_| Error::corrupt(&path, format!("{:?} is not a hex size", text.trim())))
}

/// PFN ranges per node, adjacent blocks merged, sorted by PFN.
pub fn node_ranges(sys_root: &Path, block_size: u64, page_size: u64) -> Result<Vec<NodeRange>> {
    let nodes_dir = sys_root.join("devices/system/node");
    let nodes = crate::numbered(&nodes_dir, "node").map_err(|e| Error::io(&nodes_dir, e))?;
    let mut blocks: Vec<(u64, u16)> = Vec::new();
    for (node, node_dir) in nodes {
        let Ok(node) = u16::try_from(node) else {
            continue;
        };
        let memory = crate::numbered(&node_dir, "memory").map_err(|e| Error::io(&node_dir, e))?;
        blocks.extend(memory.into_iter().map(|(block, _)| (block, node)));
    }
    Ok(merge(blocks, block_size / page_size.max(1)))
}

/// Merges `(block, node)` pairs into ranges.
fn merge(mut blocks: Vec<(u64, u16)>, pfns_per_block: u64) -> Vec<NodeRange> {
    blocks.sort_unstable();
    let mut out: Vec<NodeRange> = Vec::new();
    for (block, node) in blocks {
        let start = block * pfns_per_block;
        match out.last_mut() {
            Some(r) if r.node == node && r.end_pfn == start => r.end_pfn = start + pfns_per_block,
            _ => out.push(NodeRange {
                node,
                start_pfn: start,
                end_pfn: start + pfns_per_block,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_adjacent_blocks() {
        let r = merge(vec![(2, 0), (0, 0), (1, 0), (4, 1), (5, 1)], 32768);
        assert_eq!(
            r,
            vec![
                NodeRange {
                    node: 0,
                    start_pfn: 0,
                    end_pfn: 3 * 32768
                },
                NodeRange {
                    node: 1,
                    start_pfn: 4 * 32768,
                    end_pfn: 6 * 32768
                },
            ]
        );
    }

    #[test]
    fn reads_this_machine() {
        let sys = Path::new("/sys");
        let bs = block_size(sys).unwrap();
        assert!(bs.is_power_of_two());
        let ranges = node_ranges(sys, bs, 4096).unwrap();
        assert!(!ranges.is_empty());
    }
}
