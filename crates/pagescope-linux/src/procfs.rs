//! `/proc/PID`: one open directory per process, and its text files.
//!
//! A [`ProcDir`] holds a descriptor of the process's `/proc/PID`
//! directory and opens every file relative to it. The directory belongs
//! to the process it was opened for: if that process exits and its pid is
//! reused, reads through the old descriptor fail with ESRCH instead of
//! reading the newcomer, so one process's data is never mixed with its
//! successor's. Where one read is all a caller makes, [`ProcDir::at`]
//! names the directory by its path instead (no descriptor held, one open
//! per read, as cheap as a plain open).
//!
//! This is the one place that makes the path of a process's file: every
//! reader of a process, in `trace` and `record` too, goes through it, from
//! the procfs mount of the [`crate::Root`] its caller gave.

use crate::errno;
use pagescope_core::parse::{self, ParseError};
use pagescope_core::{Error, Result};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{openat, Mode, OFlags, CWD};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A `/proc/PID` directory: open ([`ProcDir::open`]), or named by its
/// path ([`ProcDir::at`]).
#[derive(Debug)]
pub struct ProcDir {
    /// The open directory; `None` for one named by its path.
    dir: Option<OwnedFd>,
    path: PathBuf,
    /// The process id.
    pub pid: u32,
}

/// The running system's procfs mount, for the system-call layer only
/// (see [`ProcDir::live`]).
pub fn live_root() -> PathBuf {
    crate::Root::default().proc
}

/// `root` and its descendants, from every process's parent in `/proc`.
pub fn descendants(proc_root: &Path, root: u32) -> Vec<u32> {
    let mut out = vec![root];
    out.extend(
        descendants_where(proc_root, &[root], |_, _| true)
            .into_iter()
            .map(|d| d.0),
    );
    out
}

/// The descendants of `roots` (not `roots` themselves), each with its
/// start time (`/proc/PID/stat`, clock ticks after boot), from every
/// process's parent in `/proc`: a process for which `keep(pid, start)`
/// says no is left out, and so is every process below it.
pub fn descendants_where(
    proc_root: &Path,
    roots: &[u32],
    mut keep: impl FnMut(u32, u64) -> bool,
) -> Vec<(u32, u64)> {
    let mut buf = Vec::new();
    let procs: Vec<(u32, u32, u64)> = list_pids(proc_root)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|pid| {
            let stat = ProcDir::open(proc_root, pid).ok()?.stat(&mut buf).ok()?;
            Some((pid, stat.ppid, stat.start_time))
        })
        .collect();
    let mut parents: Vec<u32> = roots.to_vec();
    let mut visited: std::collections::HashSet<u32> = roots.iter().copied().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < parents.len() {
        let p = parents[i];
        for &(c, _, start) in procs.iter().filter(|(_, pp, _)| *pp == p) {
            if !visited.contains(&c) && keep(c, start) {
                visited.insert(c);
                parents.push(c);
                out.push((c, start));
            }
        }
        i += 1;
    }
    out
}

/// [`descendants_where`], found from the roots down through each
/// thread's `task/TID/children` (CONFIG_PROC_CHILDREN), which reads the
/// processes below the roots alone rather than every process of the
/// machine: what a recorder holding its targets stopped can afford at
/// each boundary. Where a root has no `children` file (a kernel without
/// it), every process's parent is read instead.
pub fn subtree_where(
    proc_root: &Path,
    roots: &[u32],
    mut keep: impl FnMut(u32, u64) -> bool,
) -> Vec<(u32, u64)> {
    let has_children_files = roots.iter().all(|&r| {
        let path = proc_root.join(format!("{r}/task/{r}/children"));
        // A root that has exited, or whose main thread has, has none to
        // read: not a sign of the kernel's.
        path.exists() || !proc_root.join(r.to_string()).exists() || leader_exited(proc_root, r)
    });
    if !has_children_files {
        return descendants_where(proc_root, roots, keep);
    }
    let mut buf = Vec::new();
    let mut parents: Vec<u32> = roots.to_vec();
    let mut visited: std::collections::HashSet<u32> = roots.iter().copied().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < parents.len() {
        for c in ProcDir::at(proc_root, parents[i]).children() {
            let Ok(stat) = ProcDir::at(proc_root, c).stat(&mut buf) else {
                continue; // gone
            };
            if !visited.contains(&c) && keep(c, stat.start_time) {
                visited.insert(c);
                parents.push(c);
                out.push((c, stat.start_time));
            }
        }
        i += 1;
    }
    out
}

/// Lists the numeric entries of `/proc`: every process (thread group),
/// in ascending order. Threads live under `/proc/PID/task` and are not
/// listed, which folds them into their process.
pub fn list_pids(proc_root: &Path) -> Result<Vec<u32>> {
    let rd = std::fs::read_dir(proc_root).map_err(|e| Error::io(proc_root, e))?;
    let mut pids: Vec<u32> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// Whether process `pid` runs on without its main thread (a zombie
/// leader with other threads): its memory is read through one of those
/// ([`ProcDir::open_memory`]), and what needs its main thread (ptrace of
/// every thread) can't be done.
pub fn leader_exited(proc_root: &Path, pid: u32) -> bool {
    matches!(
        ProcDir::at(proc_root, pid).stat(&mut Vec::new()),
        Ok(s) if s.state == 'Z' && s.num_threads > 1
    )
}

/// A parse failure on a file of a process, as a pagescope error.
pub(crate) fn corrupt(path: &Path, e: ParseError) -> Error {
    Error::corrupt(path, e.to_string())
}

impl ProcDir {
    /// Opens `/proc/PID` (of a process or, by its thread id, a thread)
    /// and holds it: every read after is of this process, never of one
    /// that reused its pid.
    pub fn open(proc_root: &Path, pid: u32) -> Result<ProcDir> {
        let path = proc_root.join(pid.to_string());
        let dir = open_dir(CWD, &path).map_err(|e| errno(&path, e))?;
        Ok(ProcDir {
            dir: Some(dir),
            path,
            pid,
        })
    }

    /// The directory whose memory files (`maps`, `smaps`, `pagemap`,
    /// `clear_refs`, `cmdline`) show process `pid`'s address space:
    /// `/proc/PID`, or where its main thread has exited while its other
    /// threads run on (a zombie leader, whose own files read empty) a live
    /// thread's `task/TID` ([`ProcDir::live_thread`]).
    pub fn open_memory(proc_root: &Path, pid: u32) -> Result<ProcDir> {
        let dir = ProcDir::open(proc_root, pid)?;
        let mut buf = Vec::new();
        Ok(match dir.stat(&mut buf) {
            Ok(s) if s.state == 'Z' && s.num_threads > 1 => {
                dir.live_thread(&mut buf).unwrap_or(dir)
            }
            _ => dir,
        })
    }

    /// `/proc/PID` named by its path, not opened: each read opens its file
    /// by path, as a plain open does. For a caller that reads once (a
    /// second read may be of another process that reused the pid).
    pub fn at(proc_root: &Path, pid: u32) -> ProcDir {
        ProcDir {
            dir: None,
            path: proc_root.join(pid.to_string()),
            pid,
        }
    }

    /// `/proc/self`, this process, by path ([`ProcDir::at`]).
    pub fn own(proc_root: &Path) -> ProcDir {
        ProcDir {
            dir: None,
            path: proc_root.join("self"),
            pid: std::process::id(),
        }
    }

    /// `/proc/PID` of the running system, by path ([`ProcDir::at`]): for
    /// the system-call layer (ptrace, `process_vm_readv`, the kernel's
    /// refusals explained), which acts on live processes by pid, so that
    /// no other procfs could be meant. Everything above it reads the
    /// procfs of the [`crate::Root`] its caller gave.
    pub fn live(pid: u32) -> ProcDir {
        ProcDir::at(&live_root(), pid)
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of the process's file `name`, for messages.
    pub fn file_path(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Whether the directory is there (the process exists, or is a
    /// zombie).
    pub fn exists(&self) -> bool {
        self.dir.is_some() || self.path.exists()
    }

    /// The directory of thread `tid` (`task/TID`), held as this one is.
    pub fn task(&self, tid: u32) -> io::Result<ProcDir> {
        let name = format!("task/{tid}");
        let path = self.path.join(&name);
        let dir = match &self.dir {
            Some(d) => Some(open_dir(d.as_fd(), &name)?),
            None => None,
        };
        Ok(ProcDir {
            dir,
            path,
            pid: tid,
        })
    }

    /// Opens `name` with `flags` (and `O_CLOEXEC`).
    pub(crate) fn open_with(&self, name: &str, flags: OFlags) -> io::Result<std::fs::File> {
        let fd = match &self.dir {
            Some(d) => openat(d, name, flags | OFlags::CLOEXEC, Mode::empty()),
            None => openat(
                CWD,
                self.path.join(name),
                flags | OFlags::CLOEXEC,
                Mode::empty(),
            ),
        }?;
        Ok(std::fs::File::from(fd))
    }

    /// Opens a file of the process.
    pub fn open_file(&self, name: &str) -> Result<std::fs::File> {
        self.open_with(name, OFlags::RDONLY)
            .map_err(|e| Error::io(self.path.join(name), e))
    }

    /// Opens a file of the process for writing (`clear_refs`).
    pub fn open_write(&self, name: &str) -> Result<std::fs::File> {
        self.open_with(name, OFlags::WRONLY)
            .map_err(|e| Error::io(self.path.join(name), e))
    }

    /// `/proc/PID/mem`, for reading and writing (an open checks ptrace
    /// access; a read or write through it then names this address space
    /// for as long as it is open).
    pub fn mem(&self) -> io::Result<std::fs::File> {
        self.open_with("mem", OFlags::RDWR)
    }

    /// `/proc/PID/pagemap`, open.
    pub fn pagemap(&self) -> io::Result<std::fs::File> {
        self.open_with("pagemap", OFlags::RDONLY)
    }

    /// A reader of `/proc/PID/pagemap` for pages of `page_size` bytes.
    pub fn pagemap_reader(&self, page_size: u64) -> io::Result<crate::pagemap::PagemapReader> {
        Ok(crate::pagemap::PagemapReader::new(
            self.pagemap()?,
            self.file_path("pagemap"),
            page_size,
        ))
    }

    /// The numbered entries of the directory `name` (`task`, `fd`), in
    /// no particular order.
    fn numbered(&self, name: &str) -> io::Result<Vec<u32>> {
        let fd = match &self.dir {
            Some(d) => open_dir(d.as_fd(), name)?,
            None => open_dir(CWD, self.path.join(name))?,
        };
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::new(fd)? {
            let entry = entry?;
            let n = std::str::from_utf8(entry.file_name().to_bytes())
                .ok()
                .and_then(|n| n.parse::<u32>().ok());
            out.extend(n);
        }
        Ok(out)
    }

    /// The threads of the process (`task/`): their ids.
    pub fn tasks(&self) -> io::Result<Vec<u32>> {
        self.numbered("task")
    }

    /// A live thread of a process whose main thread has exited while its
    /// other threads run on (a zombie leader, state `Z` with more than one
    /// thread): `task/TID`, held as this directory is, whose `maps`,
    /// `smaps`, `smaps_rollup`, `statm`, `pagemap`, `cmdline` and
    /// `clear_refs` show the process's address space where `/proc/PID`'s
    /// read empty (the leader has none left). `None` if no other thread
    /// is left alive.
    pub fn live_thread(&self, buf: &mut Vec<u8>) -> Option<ProcDir> {
        let tasks = self.tasks().ok()?;
        tasks.into_iter().filter(|&t| t != self.pid).find_map(|t| {
            let thread = self.task(t).ok()?;
            let s = thread.stat(buf).ok()?;
            (!s.is_dead()).then_some(thread)
        })
    }

    /// The children of each of the process's threads (`task/*/children`);
    /// a thread that can't be read has none.
    pub fn children(&self) -> Vec<u32> {
        let mut buf = Vec::new();
        self.tasks()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|t| self.task(t).ok()?.read_text("children", &mut buf).ok())
            .flat_map(|text| {
                text.split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The process's descriptors (`fd/`), each with what it names (its
    /// link, e.g. `anon_inode:[userfaultfd]`); one closed meanwhile is
    /// left out.
    pub fn fds(&self) -> io::Result<Vec<(i32, PathBuf)>> {
        Ok(self
            .numbered("fd")?
            .into_iter()
            .filter_map(|fd| Some((fd as i32, self.fd_target(fd as i32).ok()?)))
            .collect())
    }

    /// What descriptor `fd` of the process names (the link `fd/FD`).
    pub fn fd_target(&self, fd: i32) -> io::Result<PathBuf> {
        self.link(&format!("fd/{fd}"))
    }

    /// The program the process runs (the link `exe`).
    pub fn exe(&self) -> io::Result<PathBuf> {
        self.link("exe")
    }

    /// Where the symbolic link `name` points.
    fn link(&self, name: &str) -> io::Result<PathBuf> {
        let link = match &self.dir {
            Some(d) => rustix::fs::readlinkat(d, name, Vec::new()),
            None => rustix::fs::readlinkat(CWD, self.path.join(name), Vec::new()),
        }?;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(link.as_bytes())))
    }

    /// `/proc/PID/fdinfo/FD`.
    pub fn fdinfo(&self, fd: i32, buf: &mut Vec<u8>) -> Result<String> {
        self.read_text(&format!("fdinfo/{fd}"), buf)
    }

    /// Reads a whole file into `buf` (cleared first).
    pub fn read_into(&self, name: &str, buf: &mut Vec<u8>) -> Result<()> {
        self.read_io(name, buf)
            .map_err(|e| Error::io(self.path.join(name), e))
    }

    /// Reads a whole file into `buf` (cleared first), with the system's
    /// error.
    fn read_io(&self, name: &str, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.clear();
        self.open_with(name, OFlags::RDONLY)?.read_to_end(buf)?;
        Ok(())
    }

    /// Reads a text file of the process.
    pub fn read_text(&self, name: &str, buf: &mut Vec<u8>) -> Result<String> {
        self.read_into(name, buf)?;
        Ok(String::from_utf8_lossy(buf).into_owned())
    }

    /// `/proc/PID/stat`.
    pub fn stat(&self, buf: &mut Vec<u8>) -> Result<parse::stat::Stat> {
        let text = self.read_text("stat", buf)?;
        if text.is_empty() {
            return Err(Error::NotFound {
                path: self.path.join("stat"),
            });
        }
        parse::stat::parse(&text).map_err(|e| corrupt(&self.path.join("stat"), e))
    }

    /// `/proc/PID/status`.
    pub fn status(&self, buf: &mut Vec<u8>) -> Result<parse::status::Status> {
        let text = self.read_text("status", buf)?;
        parse::status::parse(&text).map_err(|e| corrupt(&self.path.join("status"), e))
    }

    /// The process's state letter (`R`, `S`, `Z`...), from its stat.
    pub fn state(&self, buf: &mut Vec<u8>) -> Result<char> {
        Ok(self.stat(buf)?.state)
    }

    /// The pid of the process that traces it (0 if none), from its status.
    pub fn tracer_pid(&self, buf: &mut Vec<u8>) -> Result<u32> {
        Ok(self.status(buf)?.tracer_pid)
    }

    /// Its thread group (the process a thread belongs to), from its
    /// status.
    pub fn tgid(&self, buf: &mut Vec<u8>) -> Result<u32> {
        Ok(self.status(buf)?.tgid)
    }

    /// The text of thread `tid`'s file `name` (`task/TID/NAME`).
    pub fn task_text(&self, tid: u32, name: &str, buf: &mut Vec<u8>) -> Result<String> {
        self.read_text(&format!("task/{tid}/{name}"), buf)
    }

    /// The system call the thread is blocked in (`syscall`): `None` if it
    /// is in none.
    pub fn syscall(&self, buf: &mut Vec<u8>) -> io::Result<Option<parse::syscall::Syscall>> {
        self.read_io("syscall", buf)?;
        Ok(parse::syscall::parse(&String::from_utf8_lossy(buf)))
    }

    /// `/proc/PID/cmdline`, argument by argument.
    pub fn cmdline(&self, buf: &mut Vec<u8>) -> Result<Vec<String>> {
        self.read_into("cmdline", buf)?;
        Ok(parse::cmdline(buf))
    }

    /// The cgroup path from `/proc/PID/cgroup`.
    pub fn cgroup(&self, buf: &mut Vec<u8>) -> Result<String> {
        Ok(parse::cgroup::path(&self.read_text("cgroup", buf)?))
    }

    /// `/proc/PID/maps`.
    pub fn maps(&self, buf: &mut Vec<u8>) -> Result<Vec<parse::maps::MapsLine>> {
        let text = self.read_text("maps", buf)?;
        parse::maps::parse(&text).map_err(|e| corrupt(&self.path.join("maps"), e))
    }

    /// The vDSO's range (start, end) from `/proc/PID/maps`: `None` if the
    /// process has none (booted with `vdso=0`).
    pub fn vdso(&self, buf: &mut Vec<u8>) -> io::Result<Option<(u64, u64)>> {
        self.read_io("maps", buf)?;
        Ok(parse::maps::parse(&String::from_utf8_lossy(buf))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
            .iter()
            .find(|l| l.path == "[vdso]")
            .map(|l| (l.start, l.end)))
    }

    /// `/proc/PID/smaps`.
    pub fn smaps(&self, buf: &mut Vec<u8>) -> Result<Vec<parse::smaps::SmapsEntry>> {
        let text = self.read_text("smaps", buf)?;
        parse::smaps::parse(&text).map_err(|e| corrupt(&self.path.join("smaps"), e))
    }

    /// `/proc/PID/smaps_rollup`.
    pub fn smaps_rollup(&self, buf: &mut Vec<u8>) -> Result<pagescope_core::model::SmapsCounters> {
        let text = self.read_text("smaps_rollup", buf)?;
        parse::smaps::parse_rollup(&text).map_err(|e| corrupt(&self.path.join("smaps_rollup"), e))
    }

    /// `/proc/PID/numa_maps`.
    pub fn numa_maps(&self, buf: &mut Vec<u8>) -> Result<Vec<parse::numa_maps::NumaMapsLine>> {
        let text = self.read_text("numa_maps", buf)?;
        parse::numa_maps::parse(&text).map_err(|e| corrupt(&self.path.join("numa_maps"), e))
    }
}

/// Opens the directory `path` (relative to `at`).
fn open_dir<P: rustix::path::Arg>(at: BorrowedFd<'_>, path: P) -> rustix::io::Result<OwnedFd> {
    openat(
        at,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let me = std::process::id();
        let dir = ProcDir::open(Path::new("/proc"), me).unwrap();
        let mut buf = Vec::new();
        let stat = dir.stat(&mut buf).unwrap();
        assert_eq!(stat.pid, me);
        let status = dir.status(&mut buf).unwrap();
        assert_eq!(status.tgid, me);
        assert!(!dir.cmdline(&mut buf).unwrap().is_empty());
        // Other test threads map and unmap memory meanwhile, so compare
        // the VMAs that do not move: the stack's.
        let maps = dir.maps(&mut buf).unwrap();
        let stack = maps.iter().find(|m| m.path == "[stack]").unwrap();
        let smaps = dir.smaps(&mut buf).unwrap();
        let s = smaps.iter().find(|e| e.map.path == "[stack]").unwrap();
        assert_eq!((s.map.start, s.map.end), (stack.start, stack.end));
        assert!(s.counters.rss > 0 && s.counters.rss <= s.counters.size);
        let rollup = dir.smaps_rollup(&mut buf).unwrap();
        assert!(rollup.rss >= s.counters.rss);
        let numa = dir.numa_maps(&mut buf).unwrap();
        assert!(numa.iter().any(|n| n.start == stack.start));
        assert!(list_pids(Path::new("/proc")).unwrap().contains(&me));
    }

    #[test]
    fn threads_descriptors_and_memory_of_own_process() {
        let me = std::process::id();
        let proc = Path::new("/proc");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            let link = std::fs::read_link("/proc/thread-self").unwrap();
            tid_tx
                .send(
                    link.file_name()
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .parse::<u32>()
                        .unwrap(),
                )
                .unwrap();
            let _ = rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        let mut buf = Vec::new();
        for dir in [ProcDir::open(proc, me).unwrap(), ProcDir::at(proc, me)] {
            assert!(dir.exists());
            let tasks = dir.tasks().unwrap();
            assert!(tasks.contains(&me) && tasks.contains(&tid), "{tasks:?}");
            assert_eq!(dir.tgid(&mut buf).unwrap(), me);
            assert_eq!(dir.tracer_pid(&mut buf).unwrap(), 0);
            let thread = dir.task(tid).unwrap();
            assert_eq!(thread.tgid(&mut buf).unwrap(), me);
            // Blocked in futex (202) until told to go on.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            loop {
                match thread.syscall(&mut buf).unwrap() {
                    Some(s) if s.nr == 202 => break,
                    s => assert!(std::time::Instant::now() < deadline, "{s:?}"),
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert_eq!(thread.state(&mut buf).unwrap(), 'S');
            let text = dir.task_text(tid, "syscall", &mut buf).unwrap();
            assert!(text.starts_with("202 "), "{text}");
            assert_eq!(dir.exe().unwrap(), std::env::current_exe().unwrap());
            let file = std::fs::File::open("/dev/null").unwrap();
            let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
            assert_eq!(dir.fd_target(fd).unwrap(), Path::new("/dev/null"));
            assert!(dir
                .fds()
                .unwrap()
                .contains(&(fd, PathBuf::from("/dev/null"))));
            assert!(dir.fdinfo(fd, &mut buf).unwrap().starts_with("pos:"));
            drop(file);
            // This process's own memory, through mem and pagemap.
            let word: u64 = 0x5ca1_ab1e;
            let addr = &word as *const u64 as u64;
            let mut got = [0u8; 8];
            std::os::unix::fs::FileExt::read_exact_at(&dir.mem().unwrap(), &mut got, addr).unwrap();
            assert_eq!(u64::from_ne_bytes(got), word);
            let mut present = false;
            dir.pagemap_reader(4096)
                .unwrap()
                .for_each(addr & !4095, (addr & !4095) + 4096, |_, e| {
                    present = e.is_present()
                })
                .unwrap();
            assert!(present);
            let (start, end) = dir.vdso(&mut buf).unwrap().unwrap();
            assert!(start < end);
            assert!(!dir.children().contains(&me));
        }
        tx.send(()).unwrap();
        sleeper.join().unwrap();
        let gone = ProcDir::at(proc, 99_999_999);
        assert!(!gone.exists());
        assert!(gone.tasks().is_err());
        assert!(gone.status(&mut buf).unwrap_err().is_gone());
    }

    #[test]
    fn missing_process_is_not_found() {
        // pid_max is at most 2^22, so this pid cannot exist.
        let e = ProcDir::open(Path::new("/proc"), 99_999_999).unwrap_err();
        assert!(e.is_gone(), "{e}");
    }
}
