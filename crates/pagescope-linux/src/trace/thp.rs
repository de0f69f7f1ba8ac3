//! The transparent huge pages a program had when pagescope attached.
//! Moving its pages out of its address space (and back when it is let
//! go) splits each into base pages, so the program would run on without
//! them, slower for its TLB. Where they were mapped by a huge page-table
//! entry at the attach (`PAGEMAP_SCAN`'s `PAGE_IS_HUGE`, Linux 6.7), they
//! are collapsed again once the pages are back (`process_madvise` with
//! `MADV_COLLAPSE`, Linux 6.1). On kernels without either, they stay
//! split until khugepaged collapses them.

use crate::procfs::ProcDir;
use pagescope_sys::madvise::{process_madvise, MADV_COLLAPSE};
use pagescope_sys::pagemap_scan::{self, PageRegion, Query, PAGE_IS_HUGE};
use std::path::Path;

/// The parts of `ranges` of process `pid` (read through `proc`) mapped
/// by huge page-table entries, merged; empty where the kernel can't say.
pub(super) fn huge_ranges(proc: &Path, pid: u32, ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let Ok(pagemap) = ProcDir::at(proc, pid).open_file("pagemap") else {
        return Vec::new();
    };
    let query = Query {
        category_mask: PAGE_IS_HUGE,
        return_mask: PAGE_IS_HUGE,
        ..Query::default()
    };
    let empty = PageRegion {
        start: 0,
        end: 0,
        categories: 0,
    };
    let mut regions = vec![empty; 256];
    let mut huge: Vec<(u64, u64)> = Vec::new();
    for &(start, end) in ranges {
        let mut at = start;
        while at < end {
            let Ok(found) = pagemap_scan::scan(&pagemap, at, end, &query, &mut regions) else {
                return huge;
            };
            for r in &regions[..found.regions] {
                match huge.last_mut() {
                    Some(last) if last.1 == r.start => last.1 = r.end,
                    _ => huge.push((r.start, r.end)),
                }
            }
            if found.walk_end <= at {
                break;
            }
            at = found.walk_end;
        }
    }
    huge
}

/// Collapses `ranges` of process `pid` into transparent huge pages again,
/// each on its own (the kernel stops at the first it refuses: a range
/// the program unmapped or changed since). Returns the bytes collapsed.
pub(super) fn collapse(pid: u32, ranges: &[(u64, u64)]) -> u64 {
    let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else {
        return 0;
    };
    let Ok(fd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) else {
        return 0;
    };
    ranges
        .iter()
        .filter_map(|&r| process_madvise(&fd, &[r], MADV_COLLAPSE).ok())
        .map(|n| n as u64)
        .sum()
}
