//! Written pages for the backends that only see references (`idle`,
//! `damon`, `refs`), recorded per process.
//!
//! Where the kernel has soft-dirty bits (CONFIG_MEM_SOFT_DIRTY), they are
//! read from pagemap (bit 55) and cleared with `clear_refs` 4. Otherwise,
//! from Linux 6.7, from `PAGEMAP_SCAN` on a userfaultfd in asynchronous
//! write-protect mode that pagescope gives each recorded process (see
//! `scan`). Giving a process a userfaultfd injects system calls with
//! `crate::trace`, which is built for x86_64 only: elsewhere the scan is
//! never supported.

mod scan;

use super::soft_dirty;
use crate::procfs::ProcDir;
use pagescope_core::record::WriteSource;
use pagescope_core::Result;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    None,
    SoftDirty,
    Scan,
}

/// See the module documentation.
#[derive(Debug)]
pub(super) struct Writes {
    kind: Kind,
    proc_root: PathBuf,
    /// Each process's scanner.
    scans: scan::Scans,
    /// The pages written in the interval that ends, by process: sorted,
    /// disjoint address ranges.
    written: HashMap<u32, Vec<(u64, u64)>>,
}

impl Writes {
    /// The best source this kernel has for processes; none for the whole
    /// machine (`system`: soft-dirty bits and write protection belong to
    /// each process, and clearing every process's would disturb their
    /// other users, such as CRIU). The scan, which puts a userfaultfd into
    /// each process, only where `inject` (processes named by `--pid` or
    /// launched, not every process of a cgroup).
    pub fn new(proc_root: &Path, page_size: u64, system: bool, inject: bool) -> Writes {
        let kind = if system {
            Kind::None
        } else if soft_dirty::has_soft_dirty(proc_root, page_size) {
            Kind::SoftDirty
        } else if inject && scan_supported() {
            Kind::Scan
        } else {
            Kind::None
        };
        Writes {
            kind,
            proc_root: proc_root.to_path_buf(),
            scans: scan::Scans::default(),
            written: HashMap::new(),
        }
    }

    /// Where written counts come from.
    pub fn source(&self) -> WriteSource {
        match self.kind {
            Kind::None => WriteSource::None,
            Kind::SoftDirty => WriteSource::SoftDirty,
            Kind::Scan => WriteSource::PagemapScan,
        }
    }

    /// The processes whose written pages are not known (0 in their rows):
    /// the scan could not be given to them, their main thread having
    /// exited.
    pub fn untracked(&self) -> Vec<u32> {
        self.scans.untracked()
    }

    /// Whether written pages are known at all.
    pub fn known(&self) -> bool {
        self.kind != Kind::None
    }

    /// Whether reading and clearing are two passes (soft-dirty), so that
    /// the processes must be stopped between them for no write to be lost.
    pub fn two_pass(&self) -> bool {
        self.kind == Kind::SoftDirty
    }

    /// An interval begins for `pids`: no page of theirs counts as written
    /// from here on. A process seen for the first time gets its scanner.
    pub fn begin(&mut self, pids: &[u32]) -> Result<()> {
        match self.kind {
            Kind::None => Ok(()),
            Kind::SoftDirty => soft_dirty::clear(&self.proc_root, pids),
            Kind::Scan => self.gather(pids),
        }
    }

    /// An interval ends: takes which pages of `pids` were written in it
    /// (the scan; soft-dirty bits are read with the pages themselves).
    pub fn gather(&mut self, pids: &[u32]) -> Result<()> {
        if self.kind != Kind::Scan {
            return Ok(());
        }
        self.written.clear();
        self.scans.gather(&self.proc_root, pids, &mut self.written)
    }

    /// The pages of `pids` have been counted: soft-dirty bits are cleared
    /// for the next interval.
    pub fn end(&mut self, pids: &[u32]) -> Result<()> {
        match self.kind {
            Kind::SoftDirty => soft_dirty::clear(&self.proc_root, pids),
            _ => Ok(()),
        }
    }

    /// Whether the page of `pid` at `vaddr` was written in the interval
    /// that ends; `soft_dirty` is its pagemap bit.
    pub fn dirty(&self, pid: u32, vaddr: u64, soft_dirty: bool) -> bool {
        match self.kind {
            Kind::None => false,
            Kind::SoftDirty => soft_dirty,
            Kind::Scan => self.written.get(&pid).is_some_and(|r| {
                let i = r.partition_point(|&(_, end)| end <= vaddr);
                i < r.len() && r[i].0 <= vaddr
            }),
        }
    }

    /// The pages of `pid` written in `[start, end)` in the interval that
    /// ends, `dir` being its /proc directory (soft-dirty bits are read
    /// from its pagemap); 0 where written pages are not known.
    pub fn written_in(
        &self,
        dir: &ProcDir,
        pid: u32,
        start: u64,
        end: u64,
        page_size: u64,
    ) -> Result<u64> {
        match self.count(pid, start, end, page_size) {
            Some(n) => Ok(n),
            None if self.known() => soft_dirty::count(dir, start, end, page_size),
            None => Ok(0),
        }
    }

    /// For the scan: the pages of `pid` written in `[start, end)` in the
    /// interval that ends. `None` for soft-dirty, whose bits are read from
    /// pagemap.
    pub fn count(&self, pid: u32, start: u64, end: u64, page_size: u64) -> Option<u64> {
        if self.kind != Kind::Scan {
            return None;
        }
        let r = self.written.get(&pid).map_or(&[][..], |r| &r[..]);
        let i = r.partition_point(|&(_, e)| e <= start);
        Some(
            r[i..]
                .iter()
                .take_while(|&&(s, _)| s < end)
                .map(|&(s, e)| (e.min(end) - s.max(start)) / page_size)
                .sum(),
        )
    }
}

/// Whether this kernel has asynchronous write protection and
/// `PAGEMAP_SCAN` (both Linux 6.7).
pub fn scan_supported() -> bool {
    scan::supported()
}

/// Why [`scan_supported`] is false, checked on this machine: pagescope
/// may not make a userfaultfd (and why), or the kernel's has no
/// asynchronous write protection.
pub fn scan_unavailable() -> String {
    scan::unavailable()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_of(ranges: Vec<(u64, u64)>) -> Writes {
        Writes {
            kind: Kind::Scan,
            proc_root: crate::Root::default().proc,
            scans: scan::Scans::default(),
            written: HashMap::from([(7, ranges)]),
        }
    }

    #[test]
    fn written_ranges_answer_per_page_and_per_range() {
        let w = scan_of(vec![(0x1000, 0x3000), (0x8000, 0x9000)]);
        let dirty: Vec<u64> = (0..10)
            .map(|p| p * 0x1000)
            .filter(|&a| w.dirty(7, a, false))
            .collect();
        assert_eq!(dirty, vec![0x1000, 0x2000, 0x8000]);
        assert!(!w.dirty(8, 0x1000, true), "another process");
        assert_eq!(w.count(7, 0, 0x10000, 0x1000), Some(3));
        assert_eq!(w.count(7, 0x2000, 0x8000, 0x1000), Some(1));
        assert_eq!(w.count(7, 0x3000, 0x8000, 0x1000), Some(0));
        assert_eq!(w.count(8, 0, 0x10000, 0x1000), Some(0));
    }

    #[test]
    fn soft_dirty_goes_by_the_pagemap_bit() {
        let mut w = scan_of(Vec::new());
        w.kind = Kind::SoftDirty;
        assert!(w.dirty(7, 0x1000, true));
        assert!(!w.dirty(7, 0x1000, false));
        assert_eq!(w.count(7, 0, 0x10000, 0x1000), None);
        assert_eq!(w.source(), WriteSource::SoftDirty);
    }
}
