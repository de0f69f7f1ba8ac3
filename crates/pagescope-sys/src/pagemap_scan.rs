//! `PAGEMAP_SCAN` (Linux 6.7): the `ioctl` on `/proc/PID/pagemap` that
//! returns the ranges of pages in given categories (written, present,
//! ...), and can write-protect them again in the same walk.
//!
//! The argument and result structures are linux-raw-sys's; the request
//! number is not there, so it is made here from `linux/fs.h`'s
//! definition with `rustix::ioctl`.

pub use linux_raw_sys::general::page_region as PageRegion;
use linux_raw_sys::general::pm_scan_arg;
use rustix::ioctl::{opcode, Ioctl, IoctlOutput, Opcode};
use std::ffi::c_void;
use std::io;
use std::marker::PhantomData;
use std::os::fd::AsFd;

/// `PM_SCAN_WP_MATCHING`: write-protect the pages found, in the same walk.
pub const WP_MATCHING: u64 = linux_raw_sys::general::PM_SCAN_WP_MATCHING as u64;
/// `PAGE_IS_WRITTEN`: the category of pages written since they were
/// last write-protected.
pub const PAGE_IS_WRITTEN: u64 = linux_raw_sys::general::PAGE_IS_WRITTEN as u64;
/// `PAGE_IS_PRESENT`: the category of pages in RAM.
pub const PAGE_IS_PRESENT: u64 = linux_raw_sys::general::PAGE_IS_PRESENT as u64;
/// `PAGE_IS_HUGE`: the category of pages mapped by a huge page-table
/// entry (a PMD-mapped transparent huge page, or hugetlb).
pub const PAGE_IS_HUGE: u64 = linux_raw_sys::general::PAGE_IS_HUGE as u64;
/// `PAGE_IS_SWAPPED`: the category of swap entries (and of the other
/// non-present entries the kernel keeps in a page table: migration,
/// poison and guard markers).
pub const PAGE_IS_SWAPPED: u64 = linux_raw_sys::general::PAGE_IS_SWAPPED as u64;

/// `linux/fs.h`: `#define PAGEMAP_SCAN _IOWR(PAGEMAP_MAGIC, 16, struct
/// pm_scan_arg)`, with `PAGEMAP_MAGIC` `'f'`.
const PAGEMAP_SCAN: Opcode = opcode::read_write::<pm_scan_arg>(b'f', 16);

/// What one scan asks for: the fields of `struct pm_scan_arg` other than
/// the range and the output vector (see the kernel's
/// Documentation/admin-guide/mm/pagemap.rst).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Query {
    /// `PM_SCAN_WP_MATCHING`, `PM_SCAN_CHECK_WPASYNC`.
    pub flags: u64,
    /// Most pages to return (0: no limit).
    pub max_pages: u64,
    /// Categories whose meaning is inverted.
    pub category_inverted: u64,
    /// Categories a page must all have.
    pub category_mask: u64,
    /// Categories a page must have one of.
    pub category_anyof_mask: u64,
    /// Categories reported in each region.
    pub return_mask: u64,
}

/// What one scan found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scanned {
    /// How many entries of the output slice it filled.
    pub regions: usize,
    /// Where the walk stopped (the end of the range, or before it when
    /// the output slice filled up).
    pub walk_end: u64,
}

/// Scans `[start, end)` of the address space whose `pagemap` this is,
/// filling `out` with the regions that match `query`.
pub fn scan(
    pagemap: impl AsFd,
    start: u64,
    end: u64,
    query: &Query,
    out: &mut [PageRegion],
) -> io::Result<Scanned> {
    let call = Call {
        arg: pm_scan_arg {
            size: size_of::<pm_scan_arg>() as u64,
            flags: query.flags,
            start,
            end,
            walk_end: 0,
            vec: out.as_mut_ptr() as u64,
            vec_len: out.len() as u64,
            max_pages: query.max_pages,
            category_inverted: query.category_inverted,
            category_mask: query.category_mask,
            category_anyof_mask: query.category_anyof_mask,
            return_mask: query.return_mask,
        },
        _out: PhantomData,
    };
    // SAFETY: `Call` describes PAGEMAP_SCAN exactly (see its impl); its
    // output vector is `out`, borrowed exclusively for the call.
    let scanned = unsafe { rustix::ioctl::ioctl(pagemap, call) }?;
    Ok(Scanned {
        regions: scanned.regions.min(out.len()),
        ..scanned
    })
}

/// One `PAGEMAP_SCAN` call: its argument, whose `vec` points into the
/// slice borrowed for `'a`.
struct Call<'a> {
    arg: pm_scan_arg,
    _out: PhantomData<&'a mut [PageRegion]>,
}

// SAFETY: PAGEMAP_SCAN takes a pointer to a `struct pm_scan_arg` of the
// size given in it, reads it, writes `walk_end` back and up to `vec_len`
// `page_region`s at `vec` (valid for `'a`, exclusively borrowed), and
// returns how many it wrote.
unsafe impl Ioctl for Call<'_> {
    type Output = Scanned;

    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        PAGEMAP_SCAN
    }

    fn as_ptr(&mut self) -> *mut c_void {
        (&raw mut self.arg).cast()
    }

    unsafe fn output_from_ptr(
        out: IoctlOutput,
        extract_output: *mut c_void,
    ) -> rustix::io::Result<Scanned> {
        // SAFETY: the caller passes the pointer `as_ptr` gave, to the
        // `pm_scan_arg` that lives in `self` across the call.
        let arg = unsafe { &*extract_output.cast::<pm_scan_arg>() };
        Ok(Scanned {
            regions: usize::try_from(out).unwrap_or(0),
            walk_end: arg.walk_end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linux_raw_sys::general::PAGE_IS_PRESENT;

    fn present() -> Query {
        Query {
            category_mask: PAGE_IS_PRESENT as u64,
            return_mask: PAGE_IS_PRESENT as u64,
            ..Query::default()
        }
    }

    /// A fresh anonymous mapping of `pages` pages (none present), every
    /// other one touched; unmapped on drop.
    struct Mapping {
        addr: *mut std::ffi::c_void,
        len: usize,
    }

    impl Mapping {
        fn every_other(page: usize, pages: usize) -> Mapping {
            use rustix::mm::{mmap_anonymous, MapFlags, ProtFlags};
            let len = page * pages;
            let flags = ProtFlags::READ | ProtFlags::WRITE;
            // SAFETY: a new private anonymous mapping, placed by the kernel,
            // aliases nothing.
            let addr = unsafe {
                mmap_anonymous(std::ptr::null_mut(), len, flags, MapFlags::PRIVATE).unwrap()
            };
            // SAFETY: the mapping is `len` bytes, readable and writable, and
            // only this slice refers to it until it is unmapped.
            let bytes = unsafe { std::slice::from_raw_parts_mut(addr.cast::<u8>(), len) };
            for p in (0..pages).step_by(2) {
                crate::touch::write_volatile(&mut bytes[p * page], 1);
            }
            Mapping { addr, len }
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `every_other`, which nothing uses
            // any more.
            let _ = unsafe { rustix::mm::munmap(self.addr, self.len) };
        }
    }

    #[test]
    fn finds_the_pages_touched_and_where_the_walk_ended() {
        let page = rustix::param::page_size();
        let pages = 16;
        let map = Mapping::every_other(page, pages);
        let (start, end) = (map.addr as u64, map.addr as u64 + map.len as u64);
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mut out = vec![
            PageRegion {
                start: 0,
                end: 0,
                categories: 0
            };
            64
        ];
        let Ok(found) = scan(&pagemap, start, end, &present(), &mut out) else {
            eprintln!("skipped: this kernel has no PAGEMAP_SCAN (Linux 6.7)");
            return;
        };
        assert_eq!(found.regions, pages / 2);
        assert_eq!(found.walk_end, end);
        for (k, r) in out[..found.regions].iter().enumerate() {
            assert_eq!(r.start, start + (2 * k * page) as u64);
            assert_eq!(r.end, r.start + page as u64);
        }
        // A full output vector ends the walk early, after its last region.
        let mut one = [PageRegion {
            start: 0,
            end: 0,
            categories: 0,
        }];
        let found = scan(&pagemap, start, end, &present(), &mut one).unwrap();
        assert_eq!(found.regions, 1);
        assert_eq!(one[0].start, start);
        assert!(found.walk_end > start && found.walk_end < end, "{found:?}");
    }
}
