//! The `refs` backend: `clear_refs` and smaps `Referenced:`, on any kernel.
//!
//! Writing `1` to `/proc/PID/clear_refs` clears the accessed bit of every
//! PTE of the process (and the referenced flag of the pages); smaps then
//! reports, per VMA, how much of it was referenced since. This places
//! references by VMA only. Written pages come from soft-dirty where the
//! kernel has it (`clear_refs` 4, pagemap bit 55), else from
//! `PAGEMAP_SCAN` (see [`crate::record::writes`]).

use crate::procfs::ProcDir;
use crate::record::probe::Probe;
use crate::record::process::{clear_refs, gone_ok};
use crate::record::writes::Writes;
use pagescope_core::record::{Backend, Counts, Granularity, Interval, VirtRow, WriteSource};
use pagescope_core::Result;
use std::path::{Path, PathBuf};

/// See the module documentation.
#[derive(Debug)]
pub struct Refs {
    proc_root: PathBuf,
    page_size: u64,
    writes: Writes,
    buf: Vec<u8>,
}

impl Refs {
    /// A backend reading `proc_root`, its written pages from `writes`.
    pub fn new(proc_root: &Path, page_size: u64, writes: Writes) -> Refs {
        Refs {
            proc_root: proc_root.to_path_buf(),
            page_size,
            writes,
            buf: Vec::new(),
        }
    }

    fn collect_one(&mut self, pid: u32, out: &mut Interval) -> Result<()> {
        let dir = ProcDir::open_memory(&self.proc_root, pid)?;
        let vmas = dir.smaps(&mut self.buf)?;
        clear_refs(&dir, b"1")?;
        for v in vmas {
            let pages = v.counters.referenced * 1024 / self.page_size;
            if pages == 0 {
                continue;
            }
            let written = self
                .writes
                .written_in(&dir, pid, v.map.start, v.map.end, self.page_size)?
                .min(pages);
            out.virt.push(VirtRow {
                pid,
                start: v.map.start,
                end: v.map.end,
                counts: Counts {
                    user: pages,
                    page_cache: 0,
                    written,
                },
            });
        }
        Ok(())
    }
}

impl Probe for Refs {
    fn backend(&self) -> Backend {
        Backend::Refs
    }

    fn granularity(&self) -> Granularity {
        Granularity::Vma
    }

    fn writes(&self) -> WriteSource {
        self.writes.source()
    }

    fn writes_untracked(&self) -> Vec<u32> {
        self.writes.untracked()
    }

    fn needs_freeze(&self) -> bool {
        true
    }

    fn collects_at_exit(&self) -> bool {
        // Rows are whole VMAs of one process.
        true
    }

    fn resets_alone(&self) -> bool {
        // clear_refs 1 clears the process's own accessed bits. It clears
        // the referenced flags of the frames it shares too, which count
        // for another process only where reclaim has taken that one's
        // accessed bit into the flag. Soft-dirty bits and write
        // protection are the process's own.
        true
    }

    fn reset(&mut self, pids: &[u32]) -> Result<()> {
        for &pid in pids {
            let Ok(dir) = ProcDir::open_memory(&self.proc_root, pid) else {
                continue; // gone
            };
            gone_ok(clear_refs(&dir, b"1"))?;
        }
        self.writes.begin(pids)
    }

    fn collect(&mut self, pids: &[u32], out: &mut Interval) -> Result<()> {
        self.writes.gather(pids)?;
        for &pid in pids {
            gone_ok(self.collect_one(pid, out))?;
        }
        self.writes.end(pids)
    }
}
