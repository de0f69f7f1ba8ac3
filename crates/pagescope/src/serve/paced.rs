//! A large process's figures without stopping it: its smaps_rollup sums
//! made from its pagemap and `/proc/kpagecount`, read paced.
//!
//! smaps_rollup walks a process's page tables holding its memory map lock
//! for the whole of each mapping (it lets a waiting writer in only between
//! mappings): for a 4 GiB mapping about 55 ms here, during which the
//! process's `mmap`, `munmap`, `mprotect` and `brk` wait. pagemap's walk
//! takes the lock for one 2 MiB range at a time, and the [`Pacer`] pauses
//! between them often enough for a waiting writer to get the lock
//! (`pagescope_linux::pagemap` says why the pause is needed).
//!
//! The sums follow the kernel's `smaps_account` (fs/proc/task_mmu.c) page
//! by page:
//!
//! - a page counts when it is present and a normal page (smaps'
//!   `vm_normal_page`): not the zero page, not a frame of a
//!   `VM_PFNMAP`/`VM_IO` mapping (kpagecount 0 for both), not a special
//!   page such as the vDSO's (pagemap marks it neither file nor
//!   exclusive, as a shared anonymous page, but kpageflags has no
//!   `ANON` for it);
//! - its map count is 1 when pagemap marks it exclusively mapped (bit
//!   56, set by the same test smaps' private/shared split makes), and
//!   kpagecount's (the same `folio_precise_page_mapcount`) otherwise: only
//!   the pages mapped more than once are looked up;
//! - PSS adds `(page size << 12) / map count` per page, shifted back at
//!   the end, as the kernel's `PSS_SHIFT` arithmetic does; USS counts the
//!   pages mapped once; swap counts the swap entries (`Swap`, not guard
//!   regions or other markers).
//!
//! Shared memory in swap (tmpfs, memfd, SysV, shared anonymous) has no
//! entry in pagemap: smaps adds the swap of the part of the file each
//! mapping maps, which `pagescope_linux::shmem` counts from the file's
//! page cache (cachestat(2)), and for a private writable mapping only at
//! the addresses where the walk found no entry ([`Vma::holes`]).
//!
//! What it does not give: `Referenced` (pagemap has no accessed bit, so
//! such a process has no refs working set), and `SwapPss` (its swap is
//! taken as shared, so that the refresh policy reads it again when a
//! sharer may have changed).

use super::text::Rollup;
use pagescope_core::kpageflags::KPageFlags;
use pagescope_core::Result;
use pagescope_linux::kpage::{FrameInfo, KPageReader};
use pagescope_linux::pagemap::{Pacer, PagemapReader, PACED_BATCH};
use pagescope_linux::shmem::Mapping;

/// The kernel's `PSS_SHIFT`.
const PSS_SHIFT: u32 = 12;
/// Frames looked up at once.
const LOOKUP: usize = 64 * 1024;

/// The frame files, and what a walk keeps between processes.
pub struct Frames {
    kpage: KPageReader,
    /// Whether `PAGEMAP_SCAN` works here (`None`: not tried yet).
    scan: Option<bool>,
    pending: Vec<u64>,
    anon: Vec<bool>,
    keys: Vec<u64>,
    info: Vec<FrameInfo>,
}

/// The sums of one walk, in pages (PSS and anonymous PSS in pages <<
/// [`PSS_SHIFT`] scaled by the page size, as the kernel keeps them).
#[derive(Default)]
struct Sums {
    rss: u64,
    private: u64,
    anonymous: u64,
    ksm: u64,
    swap: u64,
    pss: u64,
    pss_anon: u64,
}

/// A line of `/proc/PID/maps`, as the walk needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vma {
    /// Its addresses, file offset and permissions.
    pub map: Mapping,
    /// It maps a file of a file system with no device (device major 0:
    /// tmpfs, the kernel's shmem mounts, but also others): perhaps
    /// shmem.
    pub in_memory: bool,
    /// Its runs of addresses with no pagemap entry are wanted (a private
    /// writable mapping of shmem with pages in swap): walked whole, and
    /// each run given to the caller.
    pub holes: bool,
}

/// Why a walk could not be made.
pub enum Unread {
    /// pagemap hides frame numbers from this reader (CAP_SYS_ADMIN).
    NoFrames,
}

impl Frames {
    /// Opens kpageflags and kpagecount under `proc`.
    pub fn open(proc: &std::path::Path) -> Result<Frames> {
        Ok(Frames {
            kpage: KPageReader::open_without_cgroup(proc)?,
            scan: None,
            pending: Vec::new(),
            anon: Vec::new(),
            keys: Vec::new(),
            info: Vec::new(),
        })
    }

    /// Sums the pages of `vmas` (the process's mappings, from `maps`)
    /// as smaps_rollup would, reading `pagemap` paced by `pacer`. Sizes
    /// in the result are kB, as smaps_rollup's; its swap is that of the
    /// swap entries pagemap shows (not shmem's). The runs of addresses
    /// with no entry of each VMA that wants them ([`Vma::holes`]) go to
    /// `holes`: (its index, start, end).
    ///
    /// A mapping more than twice `resident` (the process's resident and
    /// swapped bytes, from its counters) is mostly empty, and its
    /// populated parts are found first with `PAGEMAP_SCAN` (where the
    /// kernel has it), so that an 8 TiB reservation costs its few pages,
    /// not 2^31 pagemap entries; a mapping that may be full is read
    /// whole, as a scan first would walk it twice.
    pub fn sum(
        &mut self,
        pagemap: &mut PagemapReader,
        vmas: &[Vma],
        resident: u64,
        page_size: u64,
        pacer: &mut Pacer,
        holes: &mut Vec<(usize, u64, u64)>,
    ) -> Result<std::result::Result<Rollup, Unread>> {
        let unit = page_size << PSS_SHIFT;
        let mut s = Sums::default();
        self.pending.clear();
        self.anon.clear();
        let mut hidden = false;
        for (i, v) in vmas.iter().enumerate() {
            let (start, end) = (v.map.start, v.map.end);
            let size = end - start;
            let sparse = !v.holes && size / page_size > PACED_BATCH as u64 && size / 2 > resident;
            let parts = if self.scan != Some(false) && sparse {
                let found = pagemap.populated_paced(start, end, pacer)?;
                self.scan = Some(found.is_some());
                found
            } else {
                None
            };
            let parts = parts.unwrap_or_else(|| vec![(start, end)]);
            for (lo, hi) in parts {
                let mut failed = Ok(());
                // The run of addresses with no entry going on, if wanted.
                let mut hole: Option<u64> = None;
                pagemap.for_each_paced(lo, hi, pacer, |addr, e| {
                    if v.holes {
                        let none = !e.is_present() && !e.is_swapped();
                        match (none, hole) {
                            (true, None) => hole = Some(addr),
                            (false, Some(h)) => {
                                holes.push((i, h, addr));
                                hole = None;
                            }
                            _ => {}
                        }
                    }
                    if e.is_present() {
                        let anon = !e.is_file_or_shared();
                        if e.is_exclusive() {
                            s.rss += 1;
                            s.private += 1;
                            s.pss += unit;
                            if anon {
                                s.anonymous += 1;
                                s.pss_anon += unit;
                            }
                        } else if e.frame_bits() == 0 {
                            hidden = true;
                        } else {
                            self.pending.push(e.frame_bits());
                            self.anon.push(anon);
                            if self.pending.len() >= LOOKUP && failed.is_ok() {
                                failed = self.flush(&mut s, unit);
                            }
                        }
                    } else if e.is_in_swap() {
                        s.swap += 1;
                    }
                })?;
                if let Some(h) = hole {
                    holes.push((i, h, hi));
                }
                failed?;
                if hidden {
                    return Ok(Err(Unread::NoFrames));
                }
            }
        }
        self.flush(&mut s, unit)?;
        let kb = |pages: u64| pages * page_size / 1024;
        let shifted_kb = |v: u64| (v >> PSS_SHIFT) / 1024;
        Ok(Ok(Rollup {
            rss: kb(s.rss),
            pss: shifted_kb(s.pss),
            pss_anon: Some(shifted_kb(s.pss_anon)),
            private: kb(s.private),
            referenced: 0,
            anonymous: kb(s.anonymous),
            ksm: kb(s.ksm),
            swap: kb(s.swap),
            swap_pss: 0,
        }))
    }

    /// Looks up the frames pending and adds them to `s`.
    fn flush(&mut self, s: &mut Sums, unit: u64) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.kpage
            .lookup(&self.pending, &mut self.keys, &mut self.info)?;
        for (f, &anon) in self.info.iter().zip(&self.anon) {
            // Not a page smaps counts: the zero page, a frame with no
            // map count (a `VM_PFNMAP` mapping's), or a special page
            // mapped without its `struct page` being counted (the vDSO's:
            // pagemap leaves the file bit clear as for anonymous memory,
            // but the frame is not anonymous).
            let special = anon && !f.flags.contains(KPageFlags::ANON);
            if f.count == 0 || f.flags.contains(KPageFlags::ZERO_PAGE) || special {
                continue;
            }
            s.rss += 1;
            let pss = if f.count <= 1 {
                s.private += 1;
                unit
            } else {
                unit / f.count
            };
            s.pss += pss;
            if anon {
                s.anonymous += 1;
                s.pss_anon += pss;
            }
            if f.flags.contains(KPageFlags::KSM) {
                s.ksm += 1;
            }
        }
        self.pending.clear();
        self.anon.clear();
        Ok(())
    }
}

/// The lines of `/proc/PID/maps`, in order (`None` if a line is not of
/// the kernel's format).
pub fn vmas(maps: &[u8]) -> Option<Vec<Vma>> {
    let hex = |s: &[u8]| u64::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok();
    let mut out = Vec::new();
    for line in maps.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
        let mut f = line.split(|&c| c == b' ').filter(|f| !f.is_empty());
        let (range, perms, offset, dev, inode) =
            (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        let mut ends = range.splitn(2, |&c| c == b'-');
        let (Some(start), Some(end)) = (ends.next().and_then(hex), ends.next().and_then(hex))
        else {
            return None;
        };
        let major = hex(dev.split(|&c| c == b':').next()?)?;
        let inode = std::str::from_utf8(inode).ok()?.parse::<u64>().ok()?;
        if start >= end || perms.len() != 4 {
            return None;
        }
        out.push(Vma {
            map: Mapping {
                start,
                end,
                offset: hex(offset)?,
                shared: perms[3] == b's',
                writable: perms[1] == b'w',
            },
            in_memory: major == 0 && inode != 0,
            holes: false,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmas_of_maps_lines() {
        let text = b"55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0  [heap]\n\
                     7f0000000000-7f0000100000 rw-s 00000000 00:01 77   /memfd:pagetest (deleted)\n\
                     7f0000200000-7f0000300000 rw-p 00003000 00:2a 12   /dev/shm/x\n\
                     7f0000400000-7f0000500000 r--p 00001000 fd:01 1234 /usr/lib/libc.so.6\n\
                     7ffd1000-7ffd3000 r-xp 00000000 00:00 0  [vdso]\n";
        let v = vmas(text).unwrap();
        let m = |start, end, offset, shared, writable| Mapping {
            start,
            end,
            offset,
            shared,
            writable,
        };
        assert_eq!(
            v.iter().map(|v| (v.map, v.in_memory)).collect::<Vec<_>>(),
            [
                (m(0x55d0c0a00000, 0x55d0c0a21000, 0, false, true), false),
                (m(0x7f0000000000, 0x7f0000100000, 0, true, true), true),
                (m(0x7f0000200000, 0x7f0000300000, 0x3000, false, true), true),
                (
                    m(0x7f0000400000, 0x7f0000500000, 0x1000, false, false),
                    false
                ),
                (m(0x7ffd1000, 0x7ffd3000, 0, false, false), false),
            ]
        );
        assert!(v.iter().all(|v| !v.holes));
        assert!(vmas(b"zz-10 r--p 0 00:00 0\n").is_none());
        assert!(vmas(b"10-20 r--p\n").is_none());
    }
}
