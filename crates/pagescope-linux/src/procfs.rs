//! `/proc/PID`: one open directory per process, and its text files.
//!
//! A [`ProcDir`] holds a descriptor of the process's `/proc/PID`
//! directory and opens every file relative to it. The directory belongs
//! to the process it was opened for: if that process exits and its pid is
//! reused, reads through the old descriptor fail with ESRCH instead of
//! reading the newcomer, so one process's data is never mixed with its
//! successor's.

use crate::errno;
use pagescope_core::parse::{self, ParseError};
use pagescope_core::{Error, Result};
use rustix::fd::OwnedFd;
use rustix::fs::{openat, Mode, OFlags, CWD};
use std::io::Read;
use std::path::{Path, PathBuf};

/// An open `/proc/PID` directory.
#[derive(Debug)]
pub struct ProcDir {
    dir: OwnedFd,
    path: PathBuf,
    /// The process id.
    pub pid: u32,
}

/// `root` and its descendants, from every process's parent in `/proc`.
pub fn descendants(proc_root: &Path, root: u32) -> Vec<u32> {
    let mut buf = Vec::new();
    let parents: Vec<(u32, u32)> = list_pids(proc_root)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|pid| {
            let stat = ProcDir::open(proc_root, pid).ok()?.stat(&mut buf).ok()?;
            Some((pid, stat.ppid))
        })
        .collect();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
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

/// The note for processes whose memory pagescope may not read (`pids`,
/// sorted): how many, what grants access, `missing` (what is therefore
/// missing), and the first few pids.
pub fn denied_note(pids: &[u32], missing: &str) -> String {
    let shown: Vec<String> = pids.iter().take(8).map(|p| p.to_string()).collect();
    format!(
        "{} could not be read (permission denied: needs root with CAP_SYS_PTRACE, or the \
         processes' own user): {missing} (pids {}{})",
        match pids.len() {
            1 => "1 process".to_string(),
            n => format!("{n} processes"),
        },
        shown.join(" "),
        if pids.len() > 8 { " ..." } else { "" }
    )
}

/// A parse failure on a file of a process, as a pagescope error.
pub(crate) fn corrupt(path: &Path, e: ParseError) -> Error {
    Error::corrupt(path, e.to_string())
}

impl ProcDir {
    /// Opens `/proc/PID`.
    pub fn open(proc_root: &Path, pid: u32) -> Result<ProcDir> {
        let path = proc_root.join(pid.to_string());
        let dir = openat(
            CWD,
            &path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| errno(&path, e))?;
        Ok(ProcDir { dir, path, pid })
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens a file of the process.
    pub fn open_file(&self, name: &str) -> Result<std::fs::File> {
        let fd = openat(
            &self.dir,
            name,
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| errno(self.path.join(name), e))?;
        Ok(std::fs::File::from(fd))
    }

    /// Opens a file of the process for writing (`clear_refs`).
    pub fn open_write(&self, name: &str) -> Result<std::fs::File> {
        let fd = openat(
            &self.dir,
            name,
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| errno(self.path.join(name), e))?;
        Ok(std::fs::File::from(fd))
    }

    /// Reads a whole file into `buf` (cleared first).
    pub fn read_into(&self, name: &str, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        let mut f = self.open_file(name)?;
        f.read_to_end(buf)
            .map_err(|e| Error::io(self.path.join(name), e))?;
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
    fn missing_process_is_not_found() {
        // pid_max is at most 2^22, so this pid cannot exist.
        let e = ProcDir::open(Path::new("/proc"), 99_999_999).unwrap_err();
        assert!(e.is_gone(), "{e}");
    }
}
