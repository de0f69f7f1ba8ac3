//! Memory of this process for workloads and tests: regions that live
//! until the process exits, touched one word at a time; paging out;
//! mapping pages in for reading; and switching swap on and off.

use std::ffi::CString;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Memory read and written through volatile accesses, so that each touch
/// really happens (see [`Region::touch`]). A mapping is never unmapped: it lives until the
/// process exits (as do its copies in forked children).
#[derive(Debug)]
pub struct Region {
    base: *mut u64,
    len: usize,
    /// The allocation of a region on the heap.
    _heap: Option<Vec<u64>>,
}

// SAFETY: a Region owns its memory (a mapping it never unmaps, or a heap
// allocation it holds) and hands out no reference into it, so moving it to
// another thread moves the only way to reach that memory through it.
unsafe impl Send for Region {}

impl Region {
    /// A new private anonymous mapping of `len` bytes, read-write.
    pub fn anonymous(len: usize) -> io::Result<Region> {
        use rustix::mm::{MapFlags, ProtFlags};
        // SAFETY: a fresh mapping at an address the kernel chooses: it
        // overlaps nothing, and is never unmapped.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )?
        };
        Ok(Region {
            base: p.cast(),
            len,
            _heap: None,
        })
    }

    /// A new private anonymous mapping of `len` bytes backed by hugetlb
    /// pages of the default size (`MAP_HUGETLB`), read-write; `len` must
    /// be a multiple of that size. The kernel takes the pages from its
    /// pool (`vm.nr_hugepages`) and refuses (`ENOMEM`) if it has too few.
    pub fn hugetlb(len: usize) -> io::Result<Region> {
        use rustix::mm::{MapFlags, ProtFlags};
        // SAFETY: a fresh mapping at an address the kernel chooses: it
        // overlaps nothing, and is never unmapped.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::HUGETLB,
            )?
        };
        Ok(Region {
            base: p.cast(),
            len,
            _heap: None,
        })
    }

    /// A new private anonymous read-write region of `len` bytes in the
    /// middle of a `reserve`-byte mapping (`MAP_NORESERVE`) that nothing
    /// else touches: a large, sparsely used address range, as a
    /// sanitizer's shadow or a heap reserved up front is.
    pub fn anonymous_in_reserve(len: usize, reserve: usize) -> io::Result<Region> {
        use rustix::mm::{MapFlags, ProtFlags};
        let page = rustix::param::page_size();
        if reserve < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the reservation is smaller than the region",
            ));
        }
        // SAFETY: a fresh mapping at an address the kernel chooses: it
        // overlaps nothing, and is never unmapped.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                reserve,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )?
        };
        let offset = (reserve - len) / 2 / page * page;
        Ok(Region {
            // SAFETY: `offset + len <= reserve`: inside the mapping.
            base: unsafe { p.cast::<u8>().add(offset) }.cast(),
            len,
            _heap: None,
        })
    }

    /// A new shared mapping of the first `len` bytes of file `fd`,
    /// read-write; the file must be that long.
    pub fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Region> {
        use rustix::mm::{MapFlags, ProtFlags};
        // SAFETY: a fresh mapping at an address the kernel chooses: it
        // overlaps nothing, and is never unmapped. Other processes may
        // write the file too: its words are only accessed volatile, as
        // plain integers.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )?
        };
        Ok(Region {
            base: p.cast(),
            len,
            _heap: None,
        })
    }

    /// `len` bytes (rounded down to whole words) on the C library's heap,
    /// zeroed by `calloc`, which leaves alone the pages of a large
    /// allocation (fresh from the kernel, so zero already): they are
    /// untouched until written or read.
    pub fn heap(len: usize) -> Region {
        let mut v = vec![0u64; len / 8];
        Region {
            base: v.as_mut_ptr(),
            len: v.len() * 8,
            _heap: Some(v),
        }
    }

    /// The address of the first byte.
    pub fn addr(&self) -> usize {
        self.base as usize
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Touches one word every `stride` bytes (a multiple of 8) of the
    /// first `len` bytes (at most the region's length), from the first:
    /// writes `value` to each, or with `None` reads each; returns the
    /// wrapping sum of the words read.
    pub fn touch(&self, len: usize, stride: usize, value: Option<u64>) -> u64 {
        assert!(
            stride > 0 && stride % 8 == 0 && len <= self.len / 8 * 8,
            "touch of {len} bytes by {stride} in a region of {} bytes",
            self.len
        );
        let mut sum = 0u64;
        let mut off = 0;
        while off < len {
            // SAFETY: `off` is below `len`, within the region's words
            // (checked), and 8-aligned; the region is mapped (or
            // allocated) read-write for the life of `self`, every word is
            // initialised, and the region is not Sync.
            unsafe {
                let p = self.base.cast::<u8>().add(off).cast::<u64>();
                match value {
                    Some(v) => std::ptr::write_volatile(p, v),
                    None => sum = sum.wrapping_add(std::ptr::read_volatile(p)),
                }
            }
            off += stride;
        }
        sum
    }

    /// `MADV_PAGEOUT` of the `len` bytes at byte offset `off`, both
    /// whole pages (by address): their pages go to swap (or clean ones
    /// are dropped), their contents kept.
    pub fn page_out(&self, off: usize, len: usize) -> io::Result<()> {
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: the range is inside the region, and MADV_PAGEOUT keeps
        // the contents of the pages it reclaims.
        unsafe {
            rustix::mm::madvise(
                self.base.cast::<u8>().wrapping_add(off).cast(),
                len,
                rustix::mm::Advice::LinuxPageOut,
            )?
        };
        Ok(())
    }
}

impl Region {
    /// `MADV_HUGEPAGE` of the whole region: the kernel may back it with
    /// transparent huge pages where THP is `madvise` (or `always`).
    pub fn advise_huge(&self) -> io::Result<()> {
        // SAFETY: MADV_HUGEPAGE changes only how the kernel backs the
        // range, never its contents; the range is the region's own.
        unsafe {
            rustix::mm::madvise(
                self.base.cast(),
                self.len,
                rustix::mm::Advice::LinuxHugepage,
            )?
        };
        Ok(())
    }
}

/// `MADV_POPULATE_READ` (Linux 5.14) of this process's `len` bytes at
/// `addr`: every page of the range is mapped as a read would map it (a
/// file's pages from its page cache, the zero page for untouched
/// anonymous memory), and no byte changes. A range that is not mapped
/// readable, wholly, is an error (`ENOMEM`, `EINVAL`, `EFAULT`), as is a
/// kernel without the advice (`EINVAL`).
pub fn populate_read(addr: usize, len: usize) -> io::Result<()> {
    // SAFETY: MADV_POPULATE_READ only faults pages in for reading: it
    // writes no memory, breaks no copy-on-write sharing and changes no
    // mapping, so no reference into the range can observe it; a range
    // that is not wholly mapped readable is refused by the kernel.
    unsafe {
        rustix::mm::madvise(
            addr as *mut std::ffi::c_void,
            len,
            rustix::mm::Advice::LinuxPopulateRead,
        )?
    };
    Ok(())
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// swapon(2) of the swap file or device `path`, with no flags.
pub fn swapon(path: &Path) -> io::Result<()> {
    let c = c_path(path)?;
    // SAFETY: swapon(2) reads a NUL-terminated path that outlives the call.
    if unsafe { libc::swapon(c.as_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// swapoff(2) of `path`.
pub fn swapoff(path: &Path) -> io::Result<()> {
    let c = c_path(path)?;
    // SAFETY: swapoff(2) reads a NUL-terminated path that outlives the call.
    if unsafe { libc::swapoff(c.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touches_read_back_what_was_written() {
        let page = rustix::param::page_size();
        for r in [Region::anonymous(4 * page).unwrap(), Region::heap(4 * page)] {
            assert_eq!(r.len(), 4 * page);
            assert_eq!(r.touch(4 * page, page, None), 0);
            r.touch(4 * page, page, Some(7));
            r.touch(2 * page, page, Some(9));
            assert_eq!(r.touch(4 * page, page, None), 9 + 9 + 7 + 7);
            assert_eq!(r.touch(4 * page, 8, None), 9 + 9 + 7 + 7);
        }
        let r = Region::anonymous(2 * page).unwrap();
        r.touch(page, page, Some(5));
        // Paged out (or dropped): the contents stay.
        let _ = r.page_out(0, page);
        assert_eq!(r.touch(page, page, None), 5);
        assert!(r.page_out(page, 2 * page).is_err());
    }

    #[test]
    #[should_panic(expected = "in a region of 64 bytes")]
    fn a_touch_past_the_end_panics() {
        Region::heap(64).touch(72, 8, None);
    }
}
