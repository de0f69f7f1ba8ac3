//! A process the collector follows from one collection to the next: the
//! files of its `/proc/PID` it keeps open (read again with `pread`, so
//! that a collection costs one system call per file, not an open, a read
//! and a close), what it read last, and its figures.
//!
//! The files are opened through the process's [`ProcDir`], and a file of
//! `/proc/PID` stays the file of the process it was opened for: once that
//! process is gone, reads through it fail (ESRCH) or come back empty,
//! even if its pid was reused meanwhile. A pid reused is therefore a new
//! process, opened afresh.
//!
//! A process whose main thread has exited while its other threads run on
//! (a zombie leader) shows no memory in `/proc/PID`: its memory files
//! (`statm`, `cgroup`, `maps`, `smaps_rollup`, `pagemap`, `clear_refs`,
//! `cmdline`, `status`) are those of a live thread,
//! `/proc/PID/task/TID` ([`ProcDir::live_thread`]), while its `stat`
//! (name, faults, start time) stays the process's own. If that thread
//! ends, the process is opened afresh through another.

use super::figures::Figures;
use super::paced::{self, Frames, Unread};
use super::text::{self, Mapped, Rollup};
use pagescope_core::{Error, Result};
use pagescope_linux::pagemap::{Pacer, PagemapReader};
use pagescope_linux::procfs::ProcDir;
use pagescope_linux::shmem::{self, MappingSwap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// Reads the whole of `file` from its start into `buf` (cleared first).
///
/// For the files of `/proc/PID` the collector reads (`stat`, `statm`,
/// `cgroup`, `smaps_rollup`): the kernel makes each of them whole in one
/// record of a `seq_file` (`single_open`), and a read given room for all
/// of it returns all of it. So a read that leaves room in `buf` is the
/// end, without the read of 0 that would say so (a system call per file
/// per collection saved); a read that fills `buf` reads on.
pub fn pread_all(file: &File, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.clear();
    loop {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(buf.capacity().max(4096));
        }
        let len = buf.len();
        let spare = buf.capacity() - len;
        buf.resize(len + spare, 0);
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) => {
                buf.truncate(len);
                return Ok(());
            }
            Ok(n) if n < spare => {
                buf.truncate(len + n);
                return Ok(());
            }
            Ok(n) => buf.truncate(len + n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => buf.truncate(len),
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        }
    }
}

/// The cheap signals of one collection (see `refresh`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signals {
    /// The thread group's run time, ns (`None` if it could not be read:
    /// taken as having run).
    pub run_ns: Option<u64>,
    /// `minflt + majflt`.
    pub faults: u64,
    /// statm resident, pages.
    pub resident: u64,
    /// statm shared (file and shmem pages mapped), pages.
    pub shared: u64,
}

/// A user process followed across collections.
pub struct Tracked {
    /// Its directory.
    pub dir: ProcDir,
    /// Where its main thread has exited: the live thread its memory is
    /// read through, and that thread's stat, open.
    thread: Option<(ProcDir, File)>,
    stat: File,
    statm: File,
    cgroup: File,
    /// smaps_rollup (`None`: refused, or not opened yet).
    rollup: Option<File>,
    /// clear_refs, for the refs working set (opened at its first use).
    clear_refs: Option<File>,
    /// pagemap, for a paced walk (opened at its first use).
    pagemap: Option<PagemapReader>,
    /// Its start time (ticks after boot).
    pub start_time: u64,
    /// Its parent.
    pub ppid: u32,
    /// Its command name.
    pub comm: String,
    /// Its cgroup (v2 path).
    pub cgroup_path: String,
    /// Its command line, when asked for.
    pub cmdline: Option<String>,
    /// The signals last read.
    pub signals: Signals,
    /// What its maps said at the last read of them.
    pub mapped: Mapped,
    /// Its last figures (working set apart).
    pub figures: Figures,
    /// Its last rollup, when walked.
    pub rollup_last: Option<Rollup>,
    /// When `figures` were read (`None`: never walked).
    pub read_at: Option<Instant>,
    /// Its figures are walked again at this age at the latest.
    pub max_age: Duration,
    /// Its referenced bits were cleared at its last walk.
    pub cleared: bool,
    /// Its last walk read its pagemap, paced, not its smaps_rollup.
    pub paced: bool,
    /// Another pagescope observes it (`record --pid`, `trace --pid`):
    /// its referenced bits are that observer's to clear.
    pub observed: bool,
    /// The collection that last saw it.
    pub generation: u64,
}

/// What opening and reading a process found.
pub enum Opened {
    /// A user process.
    User(Box<Tracked>),
    /// A kernel thread or a zombie: no memory to read. Its stat, open,
    /// and its start time, to know it again.
    NoMemory(File, u64),
}

impl Tracked {
    /// Opens `/proc/PID` and its files, and reads stat and statm.
    pub fn open(proc: &std::path::Path, pid: u32, buf: &mut Vec<u8>) -> Result<Opened> {
        let dir = ProcDir::open(proc, pid)?;
        let stat = dir.open_file("stat")?;
        let read = |f: &File, name: &str, buf: &mut Vec<u8>| -> Result<()> {
            pread_all(f, buf).map_err(|e| Error::io(dir.file_path(name), e))
        };
        read(&stat, "stat", buf)?;
        let s = text::stat(buf).ok_or_else(|| corrupt(&dir, "stat"))?;
        let (start_time, ppid) = (s.start_time, s.ppid);
        let comm = String::from_utf8_lossy(s.comm).into_owned();
        let (kernel, dead, leader_exited) =
            (s.is_kernel_thread(), s.is_dead(), s.is_zombie_leader());
        let thread = match leader_exited {
            true => dir.live_thread(buf),
            false => None,
        };
        if kernel || (dead && thread.is_none()) {
            return Ok(Opened::NoMemory(stat, start_time));
        }
        let thread = match thread {
            Some(t) => {
                let f = t.open_file("stat")?;
                Some((t, f))
            }
            None => None,
        };
        let mem = thread.as_ref().map_or(&dir, |(t, _)| t);
        let statm = mem.open_file("statm")?;
        let cgroup = mem.open_file("cgroup")?;
        pread_all(&cgroup, buf).map_err(|e| Error::io(mem.file_path("cgroup"), e))?;
        let cgroup_path = pagescope_core::parse::cgroup::path(&String::from_utf8_lossy(buf));
        Ok(Opened::User(Box::new(Tracked {
            dir,
            thread,
            stat,
            statm,
            cgroup,
            rollup: None,
            clear_refs: None,
            pagemap: None,
            start_time,
            ppid,
            comm,
            cgroup_path,
            cmdline: None,
            signals: Signals::default(),
            mapped: Mapped::default(),
            figures: Figures::default(),
            rollup_last: None,
            read_at: None,
            max_age: Duration::ZERO,
            cleared: false,
            paced: false,
            observed: false,
            generation: 0,
        })))
    }

    /// The directory its memory is read through: its own, or its live
    /// thread's where its main thread has exited.
    pub fn mem(&self) -> &ProcDir {
        self.thread.as_ref().map_or(&self.dir, |(t, _)| t)
    }

    /// Reads the cheap signals: the run time first (so that whatever
    /// runs after it shows next time), then stat (also the check that
    /// the process is still the one opened) and statm. `Err` gone (or
    /// unreadable, or the thread its memory was read through ended);
    /// `Ok(None)` if it became a zombie, or its main thread exited (to
    /// be opened afresh).
    pub fn signals(&mut self, buf: &mut Vec<u8>) -> Result<Option<Signals>> {
        let run_ns = pagescope_sys::cpuclock::process_run_time_ns(self.dir.pid).ok();
        self.pread(Which::Stat, buf)?;
        let s = text::stat(buf).ok_or_else(|| corrupt(&self.dir, "stat"))?;
        if s.start_time != self.start_time {
            return Err(Error::NotFound {
                path: self.dir.path().to_path_buf(),
            });
        }
        if s.is_dead() {
            let Some((thread, stat)) = &self.thread else {
                return Ok(None);
            };
            // Its main thread has exited: the thread it is read through
            // must live on.
            let path = || thread.file_path("stat");
            let mut own = Vec::new();
            pread_all(stat, &mut own).map_err(|e| Error::io(path(), e))?;
            if text::stat(&own).is_none_or(|t| t.is_dead()) {
                return Err(Error::NotFound { path: path() });
            }
        }
        let faults = s.minflt + s.majflt;
        if s.comm != self.comm.as_bytes() {
            self.comm = String::from_utf8_lossy(s.comm).into_owned();
        }
        self.ppid = s.ppid;
        self.pread(Which::Statm, buf)?;
        let (resident, shared) = text::statm(buf).ok_or_else(|| corrupt(self.mem(), "statm"))?;
        Ok(Some(Signals {
            run_ns,
            faults,
            resident,
            shared,
        }))
    }

    /// Reads the cgroup again (a process is moved without running).
    pub fn read_cgroup(&mut self, buf: &mut Vec<u8>) -> Result<()> {
        self.pread(Which::Cgroup, buf)?;
        self.cgroup_path = pagescope_core::parse::cgroup::path(&String::from_utf8_lossy(buf));
        Ok(())
    }

    /// Reads maps (opened each time: it is read only when the process
    /// ran).
    pub fn read_maps(&mut self, buf: &mut Vec<u8>) -> Result<Mapped> {
        self.mem().read_into("maps", buf)?;
        Ok(text::maps(buf))
    }

    /// Walks the process: its smaps_rollup. `Ok(None)` if refused.
    pub fn read_rollup(&mut self, buf: &mut Vec<u8>) -> Result<Option<Rollup>> {
        if self.rollup.is_none() {
            match self.mem().open_file("smaps_rollup") {
                Ok(f) => self.rollup = Some(f),
                Err(Error::PermissionDenied { .. }) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        match self.pread(Which::Rollup, buf) {
            Ok(()) => {}
            Err(Error::PermissionDenied { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
        if buf.is_empty() {
            // No memory any more: it exited meanwhile.
            return Err(Error::NotFound {
                path: self.mem().file_path("smaps_rollup"),
            });
        }
        text::rollup(buf)
            .map(Some)
            .ok_or_else(|| corrupt(self.mem(), "smaps_rollup"))
    }

    /// Walks the process paced: the sums of smaps_rollup made from its
    /// pagemap and the frames' map counts ([`paced`]), with the swap of
    /// its shared memory from the files' page caches
    /// ([`pagescope_linux::shmem`]). `Ok(None)` if this reader may not
    /// read its pagemap or see its frame numbers; the `bool` says whether
    /// its swap is known (not where its shared memory's could not be
    /// read: without CAP_SYS_ADMIN for `map_files`, or without
    /// cachestat(2)). `swap_used`: the machine has pages in swap (if not,
    /// its shared memory has none, and its files are not looked at);
    /// `cache`: the counts of files already asked in this collection.
    pub fn read_paced(
        &mut self,
        frames: &mut Frames,
        page_size: u64,
        swap_used: bool,
        cache: &mut shmem::SwapCache,
        buf: &mut Vec<u8>,
    ) -> Result<Option<(Rollup, bool)>> {
        if self.pagemap.is_none() {
            let file = match self.mem().open_file("pagemap") {
                Ok(f) => f,
                Err(Error::PermissionDenied { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            let path = self.mem().file_path("pagemap");
            self.pagemap = Some(PagemapReader::new(file, path, page_size));
        }
        self.mem().read_into("maps", buf)?;
        let mut vmas = paced::vmas(buf).ok_or_else(|| corrupt(self.mem(), "maps"))?;
        if vmas.is_empty() {
            // No memory any more: it exited meanwhile.
            return Err(Error::NotFound {
                path: self.mem().file_path("maps"),
            });
        }
        // Its shared memory in swap, which pagemap does not show.
        let mut shmem_swap = Some(0);
        let mut files = Vec::new();
        let maybe = vmas
            .iter_mut()
            .enumerate()
            .filter(|(_, v)| swap_used && v.in_memory);
        for (i, v) in maybe {
            match shmem::mapping_swap(self.mem(), &v.map, cache) {
                Ok(MappingSwap::NotShmem) => {}
                Ok(MappingSwap::Pages(n)) => shmem_swap = shmem_swap.map(|s| s + n),
                Ok(MappingSwap::Holes(f)) => {
                    v.holes = true;
                    files.push((i, f));
                }
                // Unmapped meanwhile: not counted, as by a walk after.
                Err(e) if e.is_gone() => {}
                Err(Error::PermissionDenied { .. } | Error::Unsupported { .. }) => {
                    shmem_swap = None;
                }
                Err(e) => return Err(e),
            }
        }
        let pagemap = self.pagemap.as_mut().expect("opened above");
        let resident =
            self.signals.resident * page_size + self.rollup_last.map_or(0, |r| r.swap * 1024);
        let mut holes = Vec::new();
        let mut pacer = Pacer::default();
        let mut r = match frames.sum(pagemap, &vmas, resident, page_size, &mut pacer, &mut holes)? {
            Ok(r) => r,
            Err(Unread::NoFrames) => return Ok(None),
        };
        for (i, lo, hi) in holes {
            // Only VMAs given a file want their holes.
            let (_, file) = files.iter().find(|(j, _)| *j == i).expect("its file");
            let v = &vmas[i].map;
            match shmem::swapped(file, v.offset + (lo - v.start), hi - lo) {
                Ok(n) => shmem_swap = shmem_swap.map(|s| s + n),
                Err(Error::Unsupported { .. }) => shmem_swap = None,
                Err(e) => return Err(e),
            }
        }
        r.swap += shmem_swap.unwrap_or(0) * page_size / 1024;
        Ok(Some((r, shmem_swap.is_some())))
    }

    /// Clears its referenced bits (`clear_refs`, `1`); `false` if refused.
    pub fn clear_refs(&mut self) -> Result<bool> {
        if self.clear_refs.is_none() {
            match self.mem().open_write("clear_refs") {
                Ok(f) => self.clear_refs = Some(f),
                Err(Error::PermissionDenied { .. }) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        let f = self.clear_refs.as_ref().expect("opened above");
        f.write_at(b"1", 0)
            .map_err(|e| Error::io(self.mem().file_path("clear_refs"), e))?;
        Ok(true)
    }

    fn pread(&self, which: Which, buf: &mut Vec<u8>) -> Result<()> {
        let (f, name) = match which {
            Which::Stat => (&self.stat, "stat"),
            Which::Statm => (&self.statm, "statm"),
            Which::Cgroup => (&self.cgroup, "cgroup"),
            Which::Rollup => (self.rollup.as_ref().expect("opened"), "smaps_rollup"),
        };
        let dir = match which {
            Which::Stat => &self.dir,
            _ => self.mem(),
        };
        pread_all(f, buf).map_err(|e| Error::io(dir.file_path(name), e))?;
        if buf.is_empty() && matches!(which, Which::Stat | Which::Statm) {
            return Err(Error::NotFound {
                path: dir.file_path(name),
            });
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Which {
    Stat,
    Statm,
    Cgroup,
    Rollup,
}

fn corrupt(dir: &ProcDir, name: &str) -> Error {
    Error::corrupt(dir.file_path(name), "not the kernel's format")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A /proc file comes whole from its one read; a file longer than
    /// the buffer is read on to its end.
    #[test]
    fn pread_all_reads_to_the_end() {
        let mut buf = Vec::new();
        let cgroup = File::open("/proc/self/cgroup").unwrap();
        pread_all(&cgroup, &mut buf).unwrap();
        assert_eq!(buf, std::fs::read("/proc/self/cgroup").unwrap());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long");
        let text: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &text).unwrap();
        let mut small = Vec::with_capacity(100);
        pread_all(&File::open(&path).unwrap(), &mut small).unwrap();
        assert_eq!(small, text);
    }
}
