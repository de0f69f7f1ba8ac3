//! Written pages for the backends that only see references (`idle`,
//! `damon`, `refs`), recorded per process.
//!
//! Where the kernel has soft-dirty bits (CONFIG_MEM_SOFT_DIRTY), they are
//! read from pagemap (bit 55) and cleared with `clear_refs` 4. Otherwise,
//! from Linux 6.7, pagescope gives each recorded process a userfaultfd in
//! *asynchronous* write-protect mode (`UFFD_FEATURE_WP_ASYNC`): every
//! thread stops for the moment it takes to inject the `userfaultfd` call
//! into one, pagescope takes the descriptor (`pidfd_getfd`) and closes the
//! program's copy, and registers the process's anonymous and shared-memory
//! mappings for write protection. A write to a protected page then costs
//! the program one fault that the kernel resolves itself (no message, no
//! waiting on pagescope), and `PAGEMAP_SCAN` on the process's pagemap
//! returns the pages written since the last scan (`PAGE_IS_WRITTEN`) and
//! protects them again in the same pass (`PM_SCAN_WP_MATCHING`), so no
//! write falls between reading and clearing. When pagescope's descriptor
//! closes (the recording ends, or pagescope dies), the kernel unregisters
//! every range and lifts the protection: the program is left as it was.
//!
//! Limits of the scan: mappings of regular files (program text, a
//! file's private copy-on-write pages) can't be write-protected this way,
//! so their writes are not counted; mappings made after a boundary are
//! registered at the next one (writes to them before that count in the
//! interval of the boundary); a process is given its userfaultfd at the
//! first boundary where one of its threads can run the injected call (the
//! freezer holds it at an interrupt stop, or nothing traces it), and its
//! writes count from the interval after. A process that execs leaves its
//! userfaultfd with the old image: the scan finds that image gone (its
//! pagemap reads empty), and the new one is given a userfaultfd of its
//! own at once, as a new process would be (the writes of the interval of
//! the exec are not counted).
#![allow(unsafe_code)]

use super::pages::clear_soft_dirty;
use crate::trace::Uffd;
use linux_raw_sys::general as k;
use pagescope_core::record::WriteSource;
use pagescope_core::{parse, Error, Result};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// `PAGEMAP_SCAN`: `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: libc::c_ulong =
    ((3u32 << 30) | ((size_of::<k::pm_scan_arg>() as u32) << 16) | ((b'f' as u32) << 8) | 16)
        as libc::c_ulong;

/// The end of the user address space scanned (x86_64, 4-level paging).
const USER_END: u64 = 0x7fff_ffff_f000;

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
    /// Each process's scanner (`None`: it could not be given one).
    scanners: HashMap<u32, Option<Scanner>>,
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
        } else if super::refs::has_soft_dirty(proc_root, page_size) {
            Kind::SoftDirty
        } else if inject && scan_supported() {
            Kind::Scan
        } else {
            Kind::None
        };
        Writes {
            kind,
            proc_root: proc_root.to_path_buf(),
            scanners: HashMap::new(),
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
            Kind::SoftDirty => clear_soft_dirty(&self.proc_root, pids),
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
        for &pid in pids {
            let scanner = match self.scanners.get_mut(&pid) {
                Some(s) => s,
                None => {
                    let s = match Scanner::attach(&self.proc_root, pid) {
                        Ok(Some(s)) => Some(s),
                        // Not at a stop yet: at the next boundary.
                        Ok(None) => continue,
                        Err(_) if self.gone(pid) => continue,
                        Err(e) => {
                            return Err(Error::Unsupported {
                                what: format!("tracking the writes of process {pid}"),
                                needs: format!("{e}"),
                            })
                        }
                    };
                    self.scanners.entry(pid).or_insert(s)
                }
            };
            let Some(scanner) = scanner else { continue };
            let mut ranges = Vec::new();
            match scanner.scan(&self.proc_root, &mut ranges) {
                Err(_) if self.gone(pid) => continue,
                // It exec'd: the new image is given a scanner now, while
                // the freezer holds it, so that only the writes of the
                // interval of the exec are lost; where it can't be (not
                // at a stop), at the next boundary.
                Ok(false) => {
                    self.scanners.remove(&pid);
                    match Scanner::attach(&self.proc_root, pid) {
                        Ok(Some(s)) => {
                            self.scanners.insert(pid, Some(s));
                        }
                        Ok(None) => {}
                        Err(_) if self.gone(pid) => {}
                        Err(e) => return Err(e),
                    }
                    continue;
                }
                r => r?,
            };
            self.written.insert(pid, ranges);
        }
        // A process that exited gives its descriptor back.
        let gone: Vec<u32> = self
            .scanners
            .keys()
            .copied()
            .filter(|&pid| self.gone(pid))
            .collect();
        for pid in gone {
            self.scanners.remove(&pid);
        }
        Ok(())
    }

    /// Whether `pid` has exited (or become a zombie) since it was listed.
    fn gone(&self, pid: u32) -> bool {
        let stat = std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("stat"));
        stat.map_or(true, |s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
        })
    }

    /// The pages of `pids` have been counted: soft-dirty bits are cleared
    /// for the next interval.
    pub fn end(&mut self, pids: &[u32]) -> Result<()> {
        match self.kind {
            Kind::SoftDirty => clear_soft_dirty(&self.proc_root, pids),
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
    Uffd::probe_features()
        .is_ok_and(|f| f & crate::trace::FEATURES_WP_ASYNC == crate::trace::FEATURES_WP_ASYNC)
}

/// Why [`scan_supported`] is false, checked on this machine: pagescope
/// may not make a userfaultfd (and why), or the kernel's has no
/// asynchronous write protection.
pub fn scan_unavailable() -> String {
    match Uffd::probe_features() {
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(0);
            format!(
                "PAGEMAP_SCAN needs a userfaultfd, which {}: {}",
                if errno == libc::EPERM {
                    "the kernel refuses pagescope"
                } else {
                    "pagescope could not make"
                },
                crate::cause::userfaultfd_refused(errno)
            )
        }
        Ok(_) => format!(
            "{} for PAGEMAP_SCAN",
            crate::cause::wp_async_missing(&crate::system::kernel_release())
        ),
    }
}

/// One process's userfaultfd in asynchronous write-protect mode, and its
/// pagemap.
#[derive(Debug)]
struct Scanner {
    pid: u32,
    uffd: Uffd,
    pagemap: File,
    /// Mappings already registered (or refused), by range.
    seen: HashSet<(u64, u64)>,
}

impl Scanner {
    /// Gives `pid` a userfaultfd, registers its mappings, and protects
    /// every page (the first scan's result is dropped). `None`: not now
    /// (see [`crate::trace::userfaultfd_of`]).
    fn attach(proc_root: &Path, pid: u32) -> Result<Option<Scanner>> {
        let path = proc_root.join(pid.to_string()).join("pagemap");
        let pagemap = File::open(&path).map_err(|e| Error::io(&path, e))?;
        let Some(fd) = crate::trace::userfaultfd_of(pid)? else {
            return Ok(None);
        };
        let uffd = Uffd::new(fd);
        uffd.api(crate::trace::FEATURES_WP_ASYNC)
            .map_err(|e| Error::io("UFFDIO_API (asynchronous write protection)", e))?;
        let mut s = Scanner {
            pid,
            uffd,
            pagemap,
            seen: HashSet::new(),
        };
        if !s.scan(proc_root, &mut Vec::new())? {
            // It exec'd meanwhile: the new image at the next boundary.
            return Ok(None);
        }
        Ok(Some(s))
    }

    /// Whether the address space that the userfaultfd and the pagemap
    /// were opened on still has users. After an exec it has none: a read
    /// of the old pagemap then returns nothing (the kernel's pagemap read
    /// ends at once when it can't take the address space), whereas a live
    /// one always gives the 8 bytes of a page's entry. This is asked
    /// first because the calls on a dead address space do not say so
    /// alike: `UFFDIO_REGISTER` fails with ENOMEM, which it also gives for
    /// a range it can't protect, and `PAGEMAP_SCAN` with ESRCH.
    fn alive(&self) -> bool {
        let mut entry = [0u8; 8];
        !matches!(
            std::os::unix::fs::FileExt::read_at(&self.pagemap, &mut entry, 0),
            Ok(0)
        )
    }

    /// Registers the mappings not seen before: private anonymous ones
    /// and shared memory (the kernel refuses regular files). `false`: the
    /// address space of the userfaultfd is gone (see [`Scanner::scan`]).
    fn register(&mut self, proc_root: &Path) -> Result<bool> {
        if !self.alive() {
            return Ok(false);
        }
        let path = proc_root.join(self.pid.to_string()).join("maps");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let lines = parse::maps::parse(&text).map_err(|e| Error::corrupt(&path, e.to_string()))?;
        let now: HashSet<(u64, u64)> = lines.iter().map(|l| (l.start, l.end)).collect();
        self.seen.retain(|r| now.contains(r));
        for l in &lines {
            let anon = l.perms.ends_with('p')
                && (l.path.is_empty() || l.path.starts_with('['))
                && l.path != "[vsyscall]"
                && l.path != "[vdso]"
                && l.path != "[vvar]";
            let shared = l.perms.ends_with('s');
            if !(anon || shared) || !self.seen.insert((l.start, l.end)) {
                continue;
            }
            match self
                .uffd
                .register(l.start, l.end - l.start, crate::trace::MODE_WP)
            {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(false),
                Err(e) if e.raw_os_error() == Some(libc::ENOMEM) && !self.alive() => {
                    return Ok(false)
                }
                // Not protectable (a regular file, a special mapping), or
                // held by another userfaultfd (a tracer's), or gone.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::EBUSY | libc::ENOMEM | libc::EPERM)
                    ) => {}
                Err(e) => return Err(Error::io("UFFDIO_REGISTER (write protection)", e)),
            }
        }
        Ok(true)
    }

    /// Registers new mappings, then puts the ranges written since the
    /// last scan into `out` (sorted) and protects them again. `false`:
    /// the address space that the userfaultfd and the pagemap were opened
    /// on has no users left (ESRCH) while the process lives on: it exec'd.
    fn scan(&mut self, proc_root: &Path, out: &mut Vec<(u64, u64)>) -> Result<bool> {
        if !self.register(proc_root)? {
            return Ok(false);
        }
        let mut regions = vec![
            k::page_region {
                start: 0,
                end: 0,
                categories: 0,
            };
            512
        ];
        let mut at = 0;
        while at < USER_END {
            let mut arg = k::pm_scan_arg {
                size: size_of::<k::pm_scan_arg>() as u64,
                flags: k::PM_SCAN_WP_MATCHING as u64,
                start: at,
                end: USER_END,
                walk_end: 0,
                vec: regions.as_mut_ptr() as u64,
                vec_len: regions.len() as u64,
                max_pages: 0,
                category_inverted: 0,
                category_mask: k::PAGE_IS_WRITTEN as u64,
                category_anyof_mask: 0,
                return_mask: k::PAGE_IS_WRITTEN as u64,
            };
            // SAFETY: PAGEMAP_SCAN takes a pm_scan_arg of the size given in
            // it, whose `vec` points to `vec_len` page_region structures
            // that live (exclusively borrowed) across the call.
            let n = unsafe { libc::ioctl(self.pagemap.as_raw_fd(), PAGEMAP_SCAN, &mut arg) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ESRCH) {
                    return Ok(false);
                }
                return Err(Error::io(
                    proc_root.join(self.pid.to_string()).join("pagemap"),
                    e,
                ));
            }
            for r in &regions[..n as usize] {
                match out.last_mut() {
                    Some(last) if last.1 == r.start => last.1 = r.end,
                    _ => out.push((r.start, r.end)),
                }
            }
            if arg.walk_end <= at {
                break;
            }
            at = arg.walk_end;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_of(ranges: Vec<(u64, u64)>) -> Writes {
        Writes {
            kind: Kind::Scan,
            proc_root: PathBuf::from("/proc"),
            scanners: HashMap::new(),
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
