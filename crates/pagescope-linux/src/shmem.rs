//! The pages of a process's shared memory mappings (tmpfs, memfd, SysV
//! shared memory, shared anonymous memory) that are in swap, without
//! walking its page tables: for `serve`'s pagemap path, which reads a
//! large process without taking its memory-map lock for long.
//!
//! A shmem page in swap leaves no entry in the page tables that map it
//! (pagemap shows nothing there): the swap entry is in the file's page
//! cache. smaps counts it per mapping (fs/proc/task_mmu.c,
//! `smap_gather_stats`, and mm/shmem.c, `shmem_swap_usage`): a shared or
//! read-only mapping has every swapped page of the part of the file it
//! maps; a private writable one only those at addresses where it has no
//! page table entry (elsewhere it has its own copy, or the page).
//! cachestat(2) counts the same entries from the file's page cache,
//! under RCU, without the process's lock; the file is opened through
//! `/proc/PID/map_files` (CAP_SYS_ADMIN), which reaches memfds, SysV
//! segments and deleted files, and closed at once (holding it would keep
//! a file the process let go of alive).

use crate::procfs::ProcDir;
use pagescope_core::{Error, Result};
use pagescope_sys::cachestat;
use std::fs::File;
use std::os::fd::AsFd;

/// A mapping's pages in swap, as smaps counts them.
#[derive(Debug)]
pub enum MappingSwap {
    /// Not a mapping of shmem (none of its pages are counted here).
    NotShmem,
    /// Its pages in swap: of the range of the file it maps, for a shared
    /// or read-only mapping, or a private writable one whose range has
    /// none.
    Pages(u64),
    /// A private writable mapping whose range of the file has pages in
    /// swap: smaps counts those at addresses with no page table entry,
    /// which only a walk of its pagemap finds; the file, to count them
    /// with [`swapped`] per run of such addresses.
    Holes(File),
}

/// What `/proc/PID/maps` says of a mapping that may be of shmem: its
/// addresses, its offset in its file, and its permissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// Offset in the file, bytes.
    pub offset: u64,
    /// `s`: shared.
    pub shared: bool,
    /// `w`: writable.
    pub writable: bool,
}

/// The pages in swap of ranges of shmem files, by device, inode, offset
/// and length, as counted once in one collection: many processes map the
/// same segment (a database's shared buffers), and its count costs a walk
/// of the file's page cache (cachestat(2), 8 to 38 ms a GiB here).
#[derive(Debug, Default)]
pub struct SwapCache(std::collections::HashMap<(u64, u64, u64, u64), u64>);

impl SwapCache {
    /// An empty cache, for one collection.
    pub fn new() -> SwapCache {
        SwapCache::default()
    }
}

/// The pages of mapping `m` of the process of `dir` that are in swap as
/// a shmem file's ([`MappingSwap`]). `NotFound` if the mapping is gone;
/// `PermissionDenied` without CAP_SYS_ADMIN; `Unsupported` on a kernel
/// without cachestat(2) (Linux 6.5).
pub fn mapping_swap(dir: &ProcDir, m: &Mapping, cache: &mut SwapCache) -> Result<MappingSwap> {
    let name = format!("map_files/{:x}-{:x}", m.start, m.end);
    // Looked at through an O_PATH descriptor first: opening a device or a
    // ring (perf, io_uring, a packet socket: major 0 as shmem is) would
    // run its driver's open, or fail (ENXIO). Only a regular file of
    // tmpfs is opened (devtmpfs says TMPFS_MAGIC too, for its devices).
    let io = |e| Error::io(dir.file_path(&name), e);
    let path = dir.open_with(&name, rustix::fs::OFlags::PATH).map_err(io)?;
    let st = rustix::fs::fstat(&path).map_err(|e| io(e.into()))?;
    let regular = rustix::fs::FileType::from_raw_mode(st.st_mode).is_file();
    if !regular || !cachestat::is_shmem(path.as_fd()).map_err(io)? {
        return Ok(MappingSwap::NotShmem);
    }
    let key = (st.st_dev, st.st_ino, m.offset, m.end - m.start);
    let holes = m.writable && !m.shared;
    if let (Some(&pages), false) = (cache.0.get(&key), holes) {
        return Ok(MappingSwap::Pages(pages));
    }
    let file = dir.open_file(&name)?;
    let pages = swapped(&file, m.offset, m.end - m.start)?;
    if pages > 0 && holes {
        return Ok(MappingSwap::Holes(file));
    }
    cache.0.insert(key, pages);
    Ok(MappingSwap::Pages(pages))
}

/// The pages of shmem `file` in swap over `len` bytes from `off`.
/// `Unsupported` on a kernel without cachestat(2).
pub fn swapped(file: &File, off: u64, len: u64) -> Result<u64> {
    match cachestat::cachestat(file.as_fd(), off, len) {
        Ok(s) => Ok(s.evicted),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOSYS.raw_os_error()) => {
            Err(Error::Unsupported {
                what: "cachestat(2)".into(),
                needs: "Linux 6.5 with CONFIG_CACHESTAT_SYSCALL".into(),
            })
        }
        Err(e)
            if matches!(
                rustix::io::Errno::from_io_error(&e),
                Some(rustix::io::Errno::PERM | rustix::io::Errno::ACCESS)
            ) =>
        {
            Err(Error::PermissionDenied {
                path: "cachestat(2)".into(),
                needs: "CAP_SYS_ADMIN, as for /proc/PID/map_files".into(),
            })
        }
        Err(e) => Err(Error::sys("cachestat", e)),
    }
}
