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

/// Entries per `pread`: 512 KiB of pagemap, 2 GiB of address space.
pub const BATCH: usize = 64 * 1024;

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
        mut f: impl FnMut(u64, PagemapEntry),
    ) -> Result<u64> {
        let first = start / self.page_size;
        let last = end / self.page_size;
        let mut vpn = first;
        let mut total = 0;
        while vpn < last {
            let want = ((last - vpn) as usize).min(BATCH);
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.buf[..want]);
            let n =
                rustix::io::pread(&self.fd, bytes, vpn * 8).map_err(|e| errno(&self.path, e))?;
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
        use pagescope_sys::pagemap_scan::{self, PageRegion, Query};
        let query = Query {
            category_anyof_mask: pagemap_scan::PAGE_IS_PRESENT | pagemap_scan::PAGE_IS_SWAPPED,
            return_mask: pagemap_scan::PAGE_IS_PRESENT | pagemap_scan::PAGE_IS_SWAPPED,
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
}
