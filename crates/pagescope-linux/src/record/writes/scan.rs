//! Written pages from `PAGEMAP_SCAN` (Linux 6.7), where the kernel has
//! no soft-dirty bits: pagescope gives each recorded process a userfaultfd
//! in *asynchronous* write-protect mode (`UFFD_FEATURE_WP_ASYNC`): every
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
//! interval of the boundary); a process is given its userfaultfd when it
//! is first reset, where one of its threads can run the injected call
//! (the freezer holds it at an interrupt stop, or nothing traces it):
//! under the freezer, a process of the launched command where it starts
//! (at its fork, before its first instruction), otherwise at the first
//! boundary where it is seen, its writes counting from the interval
//! after. A process that execs leaves its userfaultfd with the old image:
//! the scan finds that image gone (its pagemap reads empty), and the new
//! one is given a userfaultfd of its own, under the freezer at the stop
//! after its exec (before its first instruction), otherwise at once at
//! the boundary, as a new process would be (the writes of the interval
//! of the exec are then not counted).

use pagescope_core::{Error, Result};
use pagescope_sys::pagemap_scan::{self, PageRegion, Query, PAGE_IS_WRITTEN, WP_MATCHING};
use pagescope_sys::uffd::{Uffd, FEATURES_WP_ASYNC, MODE_WP};
use rustix::io::Errno;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::path::Path;

/// Giving a process a userfaultfd: system calls injected into one of its
/// threads, which pagescope does on x86_64 only (`crate::trace`).
#[cfg(target_arch = "x86_64")]
mod give {
    pub(super) use crate::trace::userfaultfd_of;

    /// Whether pagescope can give a process a userfaultfd here.
    pub(super) const AVAILABLE: bool = true;
}

/// See the x86_64 version: elsewhere pagescope can't.
#[cfg(not(target_arch = "x86_64"))]
mod give {
    /// Never called ([`AVAILABLE`] is false).
    pub(super) fn userfaultfd_of(_pid: u32) -> super::Result<Option<std::os::fd::OwnedFd>> {
        Ok(None)
    }

    /// Whether pagescope can give a process a userfaultfd here.
    pub(super) const AVAILABLE: bool = false;
}

/// `e`'s error number, if it is one of `errnos`.
fn is(e: &std::io::Error, errnos: &[Errno]) -> bool {
    Errno::from_io_error(e).is_some_and(|n| errnos.contains(&n))
}

/// The end of the user address space scanned (x86_64, 4-level paging).
const USER_END: u64 = 0x7fff_ffff_f000;

/// The scanners of the recorded processes.
#[derive(Debug, Default)]
pub(super) struct Scans {
    /// Each process's scanner (`None`: it could not be given one).
    scanners: HashMap<u32, Option<Scanner>>,
    /// The processes that could not be given one because their main
    /// thread had exited (giving one seizes every thread).
    untracked: BTreeSet<u32>,
}

impl Scans {
    /// The processes whose writes are not tracked because their main
    /// thread had exited when they were to be given a userfaultfd.
    pub fn untracked(&self) -> Vec<u32> {
        self.untracked.iter().copied().collect()
    }

    /// Puts the pages of `pids` written since the last scan into
    /// `written`, by process (sorted, disjoint address ranges). A process
    /// seen for the first time gets its scanner.
    pub fn gather(
        &mut self,
        proc_root: &Path,
        pids: &[u32],
        written: &mut HashMap<u32, Vec<(u64, u64)>>,
    ) -> Result<()> {
        for &pid in pids {
            let scanner = match self.scanners.get_mut(&pid) {
                Some(s) => s,
                None => {
                    let s = match Scanner::attach(proc_root, pid) {
                        Ok(Some(s)) => Some(s),
                        // Not at a stop yet: at the next boundary.
                        Ok(None) => continue,
                        Err(_) if gone(proc_root, pid) => continue,
                        Err(_) if crate::procfs::leader_exited(proc_root, pid) => {
                            self.untracked.insert(pid);
                            None
                        }
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
            match scanner.scan(proc_root, &mut ranges) {
                Err(_) if gone(proc_root, pid) => continue,
                // It exec'd: the new image is given a scanner now, while
                // the freezer holds it, so that only the writes of the
                // interval of the exec are lost; where it can't be (not
                // at a stop), at the next boundary.
                Ok(false) => {
                    self.scanners.remove(&pid);
                    match Scanner::attach(proc_root, pid) {
                        Ok(Some(s)) => {
                            self.scanners.insert(pid, Some(s));
                        }
                        Ok(None) => {}
                        Err(_) if gone(proc_root, pid) => {}
                        Err(e) => return Err(e),
                    }
                    continue;
                }
                r => r?,
            };
            written.insert(pid, ranges);
        }
        // A process that exited gives its descriptor back.
        let gone: Vec<u32> = self
            .scanners
            .keys()
            .copied()
            .filter(|&pid| gone(proc_root, pid))
            .collect();
        for pid in gone {
            self.scanners.remove(&pid);
        }
        Ok(())
    }
}

/// Whether `pid` has exited since it was listed, or is on its way out
/// (`PF_EXITING`: its address space may be gone already, and a scan of
/// it or a new pagemap of it fails as for a process that is gone).
fn gone(proc_root: &Path, pid: u32) -> bool {
    // A process whose main thread has exited is alive while a thread of
    // it is ([`ProcDir::open_memory`]).
    crate::procfs::ProcDir::open_memory(proc_root, pid)
        .and_then(|d| d.stat(&mut Vec::new()))
        .map_or(true, |s| s.is_exiting())
}

/// Whether this kernel has asynchronous write protection and
/// `PAGEMAP_SCAN` (both Linux 6.7), and pagescope can give a process a
/// userfaultfd here.
pub fn supported() -> bool {
    give::AVAILABLE
        && Uffd::probe_features().is_ok_and(|f| f & FEATURES_WP_ASYNC == FEATURES_WP_ASYNC)
}

/// Why [`supported`] is false, checked on this machine: pagescope
/// may not make a userfaultfd (and why), or the kernel's has no
/// asynchronous write protection.
pub fn unavailable() -> String {
    if !give::AVAILABLE {
        return format!(
            "PAGEMAP_SCAN needs a userfaultfd in each process, which pagescope gives only on \
             x86_64 (not {})",
            std::env::consts::ARCH
        );
    }
    match Uffd::probe_features() {
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(0);
            format!(
                "PAGEMAP_SCAN needs a userfaultfd, which {}: {}",
                if errno == Errno::PERM.raw_os_error() {
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
    /// (see `crate::trace::userfaultfd_of`).
    fn attach(proc_root: &Path, pid: u32) -> Result<Option<Scanner>> {
        let pagemap = crate::procfs::ProcDir::open_memory(proc_root, pid)?.open_file("pagemap")?;
        let Some(fd) = give::userfaultfd_of(pid)? else {
            return Ok(None);
        };
        let uffd = Uffd::new(fd);
        uffd.api(FEATURES_WP_ASYNC)
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
        let lines =
            crate::procfs::ProcDir::open_memory(proc_root, self.pid)?.maps(&mut Vec::new())?;
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
            match self.uffd.register(l.start, l.end - l.start, MODE_WP) {
                Ok(()) => {}
                Err(e) if is(&e, &[Errno::SRCH]) => return Ok(false),
                Err(e) if is(&e, &[Errno::NOMEM]) && !self.alive() => return Ok(false),
                // Not protectable (a regular file, a special mapping), or
                // held by another userfaultfd (a tracer's), or gone.
                Err(e) if is(&e, &[Errno::INVAL, Errno::BUSY, Errno::NOMEM, Errno::PERM]) => {}
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
            PageRegion {
                start: 0,
                end: 0,
                categories: 0,
            };
            512
        ];
        // The pages written since the last scan, write-protected again in
        // the same walk.
        let query = Query {
            flags: WP_MATCHING,
            category_mask: PAGE_IS_WRITTEN,
            return_mask: PAGE_IS_WRITTEN,
            ..Query::default()
        };
        let mut at = 0;
        while at < USER_END {
            let found = match pagemap_scan::scan(&self.pagemap, at, USER_END, &query, &mut regions)
            {
                Ok(found) => found,
                Err(e) if is(&e, &[Errno::SRCH]) => return Ok(false),
                Err(e) => {
                    return Err(Error::io(
                        crate::procfs::ProcDir::at(proc_root, self.pid).file_path("pagemap"),
                        e,
                    ))
                }
            };
            for r in &regions[..found.regions] {
                match out.last_mut() {
                    Some(last) if last.1 == r.start => last.1 = r.end,
                    _ => out.push((r.start, r.end)),
                }
            }
            if found.walk_end <= at {
                break;
            }
            at = found.walk_end;
        }
        Ok(true)
    }
}
