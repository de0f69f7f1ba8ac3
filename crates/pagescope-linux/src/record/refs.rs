//! The `refs` backend: `clear_refs` and smaps `Referenced:`, on any kernel.
//!
//! Writing `1` to `/proc/PID/clear_refs` clears the accessed bit of every
//! PTE of the process (and the referenced flag of the pages); smaps then
//! reports, per VMA, how much of it was referenced since. This places
//! references by VMA only. Written pages come from soft-dirty where the
//! kernel has it (`clear_refs` 4, pagemap bit 55), else from
//! `PAGEMAP_SCAN` (see [`super::writes`]).
#![allow(unsafe_code)]

use super::writes::Writes;
use super::Probe;
use crate::pagemap::PagemapReader;
use crate::procfs::ProcDir;
use pagescope_core::record::{Backend, Counts, Granularity, Interval, VirtRow, WriteSource};
use pagescope_core::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// See the module documentation.
#[derive(Debug)]
pub struct Refs {
    proc_root: PathBuf,
    page_size: u64,
    writes: Writes,
    buf: Vec<u8>,
}

/// Whether the kernel tracks soft-dirty bits (CONFIG_MEM_SOFT_DIRTY).
/// Every kernel accepts `4` in `clear_refs`, and without the option
/// pagemap bit 55 is simply never set, so the test is on pagescope
/// itself: clear, write one page, and see whether its bit comes back.
pub fn has_soft_dirty(proc_root: &Path, page_size: u64) -> bool {
    let page = vec![0u8; 2 * page_size as usize];
    let addr = (page.as_ptr() as u64).next_multiple_of(page_size);
    let ok = std::fs::OpenOptions::new()
        .write(true)
        .open(proc_root.join("self/clear_refs"))
        .and_then(|mut f| f.write_all(b"4"))
        .is_ok();
    if !ok {
        return false;
    }
    let offset = (addr - page.as_ptr() as u64) as usize;
    // A volatile write, so that it is not optimised away.
    let mut page = page;
    // SAFETY: `offset` is inside `page`.
    unsafe { std::ptr::write_volatile(page.as_mut_ptr().add(offset), 1) };
    let Ok(file) = std::fs::File::open(proc_root.join("self/pagemap")) else {
        return false;
    };
    let mut reader = PagemapReader::new(file, proc_root.join("self/pagemap"), page_size);
    let mut dirty = false;
    let _ = reader.for_each(addr, addr + page_size, |_, e| dirty = e.is_soft_dirty());
    std::hint::black_box(&page);
    dirty
}

/// Writes `what` to the process's `clear_refs`.
pub(super) fn clear(dir: &ProcDir, what: &[u8]) -> Result<()> {
    let mut f = dir.open_write("clear_refs")?;
    f.write_all(what)
        .map_err(|e| Error::io(dir.path().join("clear_refs"), e))
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

    /// Counts soft-dirty present pages of `[start, end)`.
    fn written(&self, dir: &ProcDir, start: u64, end: u64) -> Result<u64> {
        let file = dir.open_file("pagemap")?;
        let mut reader = PagemapReader::new(file, dir.path().join("pagemap"), self.page_size);
        let mut n = 0;
        reader.for_each(start, end, |_, e| {
            if e.is_present() && e.is_soft_dirty() {
                n += 1;
            }
        })?;
        Ok(n)
    }

    fn collect_one(&mut self, pid: u32, out: &mut Interval) -> Result<()> {
        let dir = ProcDir::open(&self.proc_root, pid)?;
        let vmas = dir.smaps(&mut self.buf)?;
        clear(&dir, b"1")?;
        for v in vmas {
            let pages = v.counters.referenced * 1024 / self.page_size;
            if pages == 0 {
                continue;
            }
            let written = match self
                .writes
                .count(pid, v.map.start, v.map.end, self.page_size)
            {
                Some(n) => n,
                None if self.writes.known() => self.written(&dir, v.map.start, v.map.end)?,
                None => 0,
            }
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

    fn needs_freeze(&self) -> bool {
        true
    }

    fn reset(&mut self, pids: &[u32]) -> Result<()> {
        for &pid in pids {
            let Ok(dir) = ProcDir::open(&self.proc_root, pid) else {
                continue; // gone
            };
            gone_ok(clear(&dir, b"1"))?;
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

/// A process that exited (or a kernel thread) is skipped, not an error.
pub(super) fn gone_ok(r: Result<()>) -> Result<()> {
    match r {
        Err(e) if e.is_gone() => Ok(()),
        other => other,
    }
}
