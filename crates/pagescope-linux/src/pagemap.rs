//! `/proc/PID/pagemap`: one u64 per virtual page, read in large batches.
//!
//! The file is indexed by virtual page number; each read must start on an
//! 8-byte boundary (Documentation/admin-guide/mm/pagemap.rst). The reader
//! asks for up to [`BATCH`] entries per `pread` into one reused buffer.
//! The kernel walks the page tables for the range in a single call, so the
//! cost is close to the cost of the walk itself.

use crate::errno;
use pagescope_core::pagemap::PagemapEntry;
use pagescope_core::Result;
use rustix::fd::OwnedFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Entries per `pread`: 512 KiB of pagemap, 2 GiB of address space.
pub const BATCH: usize = 64 * 1024;

/// Entries per `pread`, and most pages per `PAGEMAP_SCAN`, of a paced
/// read: 16 MiB of address space.
pub const PACED_BATCH: usize = 4096;

/// Pauses a walk of another process's page tables often enough that the
/// process's own `mmap`, `munmap` and `mprotect` are not held up by it.
///
/// A read of `/proc/PID/pagemap` takes the process's memory map lock (for
/// reading) for one 2 MiB page-table range at a time, and `PAGEMAP_SCAN`
/// for the pages it returns; but between two ranges the reader takes the
/// lock again at once, before a writer the unlock woke can run, and the
/// kernel lets a reader take a lock a writer waits for until that writer
/// has waited about 4 ms (the rw-semaphore's hand-off). Measured on a
/// 4 GiB process mapping and unmapping 1 MiB in a loop: reading its
/// pagemap back to back made 53 of its iterations slower than 2 ms (14 ms
/// the longest, 1 ms with nothing reading); with a pause of 100 µs after
/// each 16 MiB, none (1.5 ms the longest). The pacer pauses once per
/// `quantum` of walking, so that a writer waits about a quantum at most.
#[derive(Debug)]
pub struct Pacer {
    quantum: Duration,
    pause: Duration,
    since: Instant,
    /// Pauses made.
    pub pauses: u64,
}

impl Pacer {
    /// Walks at most `quantum` between pauses of `pause`.
    pub fn new(quantum: Duration, pause: Duration) -> Pacer {
        Pacer {
            quantum,
            pause,
            since: Instant::now(),
            pauses: 0,
        }
    }

    /// Called after each call that walked page tables: pauses if a
    /// quantum has passed since the last pause.
    pub fn tick(&mut self) {
        if self.since.elapsed() >= self.quantum {
            std::thread::sleep(self.pause);
            self.pauses += 1;
            self.since = Instant::now();
        }
    }
}

impl Default for Pacer {
    /// 400 µs of walking, then 100 µs of pause.
    fn default() -> Pacer {
        Pacer::new(Duration::from_micros(400), Duration::from_micros(100))
    }
}

/// A process's pagemap, open.
#[derive(Debug)]
pub struct PagemapReader {
    fd: OwnedFd,
    path: PathBuf,
    buf: Vec<u64>,
    page_size: u64,
}

impl PagemapReader {
    /// Wraps an open pagemap file.
    pub fn new(file: std::fs::File, path: PathBuf, page_size: u64) -> PagemapReader {
        PagemapReader {
            fd: OwnedFd::from(file),
            path,
            buf: vec![0; BATCH],
            page_size,
        }
    }

    /// Calls `f(vaddr, entry)` for every page in `[start, end)`, in
    /// ascending order, reading [`BATCH`] entries at a time. Pages beyond
    /// what the kernel returns (the end of the user address space) are not
    /// visited. Returns the number of entries read.
    pub fn for_each(
        &mut self,
        start: u64,
        end: u64,
        f: impl FnMut(u64, PagemapEntry),
    ) -> Result<u64> {
        self.for_each_batched(start, end, BATCH, None, f)
    }

    /// [`for_each`](Self::for_each), [`PACED_BATCH`] entries per `pread`
    /// with `pacer` ticked after each.
    pub fn for_each_paced(
        &mut self,
        start: u64,
        end: u64,
        pacer: &mut Pacer,
        f: impl FnMut(u64, PagemapEntry),
    ) -> Result<u64> {
        self.for_each_batched(start, end, PACED_BATCH, Some(pacer), f)
    }

    fn for_each_batched(
        &mut self,
        start: u64,
        end: u64,
        batch: usize,
        mut pacer: Option<&mut Pacer>,
        mut f: impl FnMut(u64, PagemapEntry),
    ) -> Result<u64> {
        let first = start / self.page_size;
        let last = end / self.page_size;
        let mut vpn = first;
        let mut total = 0;
        while vpn < last {
            let want = ((last - vpn) as usize).min(batch);
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.buf[..want]);
            let n =
                rustix::io::pread(&self.fd, bytes, vpn * 8).map_err(|e| errno(&self.path, e))?;
            if let Some(p) = pacer.as_deref_mut() {
                p.tick();
            }
            let got = n / 8;
            for (i, &raw) in self.buf[..got].iter().enumerate() {
                f(
                    (vpn + i as u64) * self.page_size,
                    PagemapEntry(u64::from_le(raw)),
                );
            }
            total += got as u64;
            if got < want {
                break; // past the end of the user address space
            }
            vpn += got as u64;
        }
        Ok(total)
    }
}

impl PagemapReader {
    /// The parts of `[start, end)` that hold a page in RAM or an entry the
    /// kernel keeps in place of one (swap, migration, poison and guard
    /// markers), as the kernel's `PAGEMAP_SCAN` walk finds them, in
    /// ascending order, adjacent parts merged; `None` where the kernel has
    /// no `PAGEMAP_SCAN` (before 6.7). Outside them every pagemap entry is
    /// empty, unless the VMA is soft-dirty (`VM_SOFTDIRTY` marks its holes
    /// too): the caller reads those whole. The cost is that of the page
    /// tables that exist, not of the range: an 8 TiB reservation with a
    /// few pages touched is a few page-table pages.
    pub fn populated(&mut self, start: u64, end: u64) -> Result<Option<Vec<(u64, u64)>>> {
        self.populated_by(start, end, None)
    }

    /// [`populated`](Self::populated), each `PAGEMAP_SCAN` stopping after
    /// [`PACED_BATCH`] pages (so that it holds the memory map lock for no
    /// more than that many pages' walk), with `pacer` ticked after each.
    pub fn populated_paced(
        &mut self,
        start: u64,
        end: u64,
        pacer: &mut Pacer,
    ) -> Result<Option<Vec<(u64, u64)>>> {
        self.populated_by(start, end, Some(pacer))
    }

    fn populated_by(
        &mut self,
        start: u64,
        end: u64,
        mut pacer: Option<&mut Pacer>,
    ) -> Result<Option<Vec<(u64, u64)>>> {
        use pagescope_sys::pagemap_scan::{self, PageRegion, Query};
        let query = Query {
            category_anyof_mask: pagemap_scan::PAGE_IS_PRESENT | pagemap_scan::PAGE_IS_SWAPPED,
            return_mask: pagemap_scan::PAGE_IS_PRESENT | pagemap_scan::PAGE_IS_SWAPPED,
            max_pages: if pacer.is_some() {
                PACED_BATCH as u64
            } else {
                0
            },
            ..Query::default()
        };
        let empty = PageRegion {
            start: 0,
            end: 0,
            categories: 0,
        };
        let mut regions = vec![empty; 512];
        let mut parts: Vec<(u64, u64)> = Vec::new();
        let mut at = start;
        while at < end {
            let found = match pagemap_scan::scan(&self.fd, at, end, &query, &mut regions) {
                Ok(found) => found,
                // No such ioctl (ENOTTY), or not this use of it (EINVAL).
                Err(e) if matches!(e.raw_os_error(), Some(25 | 22)) && parts.is_empty() => {
                    return Ok(None)
                }
                Err(e) => return Err(pagescope_core::Error::io(&self.path, e)),
            };
            if let Some(p) = pacer.as_deref_mut() {
                p.tick();
            }
            for r in &regions[..found.regions] {
                match parts.last_mut() {
                    Some(last) if last.1 == r.start => last.1 = r.end,
                    _ => parts.push((r.start, r.end)),
                }
            }
            if found.walk_end <= at {
                break;
            }
            at = found.walk_end;
        }
        Ok(Some(parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::ProcDir;

    #[test]
    fn sees_own_touched_pages() {
        let ps = rustix::param::page_size() as u64;
        let mut v = vec![0u8; 64 * ps as usize];
        for i in (0..v.len()).step_by(ps as usize) {
            v[i] = 1;
        }
        std::hint::black_box(&mut v);
        let start = (v.as_ptr() as u64).div_ceil(ps) * ps;
        let end = start + 32 * ps;
        let dir = ProcDir::open(&crate::Root::default().proc, std::process::id()).unwrap();
        let file = dir.open_file("pagemap").unwrap();
        let mut r = PagemapReader::new(file, "pagemap".into(), ps);
        let mut present = 0;
        let n = r
            .for_each(start, end, |_, e| {
                if e.is_present() {
                    present += 1
                }
            })
            .unwrap();
        assert_eq!(n, 32);
        assert_eq!(present, 32);
    }

    /// A paced read sees what a whole read sees: the same entries, and
    /// the same populated parts though each scan stops at
    /// [`PACED_BATCH`] pages (here 3 times over).
    #[test]
    fn paced_reads_see_what_whole_reads_see() {
        let ps = rustix::param::page_size() as u64;
        let pages = 3 * PACED_BATCH + 100;
        let mut v = vec![0u8; pages * ps as usize];
        // Every page but every fifth: populated parts with holes.
        for i in (0..pages).filter(|i| i % 5 != 0) {
            v[i * ps as usize] = 1;
        }
        std::hint::black_box(&mut v);
        let start = (v.as_ptr() as u64).div_ceil(ps) * ps;
        let end = start + (pages as u64 - 1) * ps;
        let dir = ProcDir::open(&crate::Root::default().proc, std::process::id()).unwrap();
        let mut r = PagemapReader::new(dir.open_file("pagemap").unwrap(), "pagemap".into(), ps);
        let mut pacer = Pacer::new(Duration::ZERO, Duration::from_micros(1));
        let (mut whole, mut paced) = (Vec::new(), Vec::new());
        r.for_each(start, end, |a, e| whole.push((a, e.is_present())))
            .unwrap();
        r.for_each_paced(start, end, &mut pacer, |a, e| {
            paced.push((a, e.is_present()))
        })
        .unwrap();
        assert_eq!(whole, paced);
        let pauses = pacer.pauses;
        assert!(pauses >= 3, "{pauses} pauses");
        if let Some(parts) = r.populated(start, end).unwrap() {
            assert!(parts.len() > 100, "{} parts", parts.len());
            let paced = r.populated_paced(start, end, &mut pacer).unwrap().unwrap();
            assert_eq!(parts, paced);
            assert!(pacer.pauses >= pauses + 3);
        }
    }
}
