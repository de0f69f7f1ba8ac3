//! One pagescope observer per running process.
//!
//! Two observers of one process corrupt each other: two `refs` recorders
//! clear the accessed bits each one reads, a trace and a recorder each
//! want the process's userfaultfd registrations. So `record --pid` and
//! `trace --pid` take a lock per target before they touch it: an
//! exclusive `flock` on `/run/pagescope/PID-START.lock` (START: the
//! process's start time, so a recycled pid is another target), which
//! holds the observer's pid and command. A second observer is refused
//! with the holder's pid and command. The kernel drops a `flock` when its
//! holder dies, so a killed pagescope leaves no stale lock (the file is
//! removed when the holder lets go normally; one left by a kill is reused).
//!
//! Only pagescope's own instances see the lock; another tool's clear_refs
//! or userfaultfd is not seen (the recorders note that possibility).

use pagescope_core::{Error, Result};
use rustix::fs::{flock, FlockOperation, Mode, OFlags};
use std::io::{Read, Seek, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The directory of the locks.
pub const LOCK_DIR: &str = "/run/pagescope";

/// The lock on one observed process; dropped, it is released.
#[derive(Debug)]
pub struct ObserverLock {
    path: PathBuf,
    _file: std::fs::File,
}

impl ObserverLock {
    /// Takes the lock on `pid` for this process, described as `what`
    /// (`record`, `trace`). Refused if another pagescope observes `pid`;
    /// a process that does not exist is `NotFound`. Where the lock
    /// directory can't be made (no permission on /run), the lock is not
    /// taken and `None` says so (also where the directory or the lock
    /// belongs to another user, and on a kernel without file locking).
    pub fn acquire(proc_root: &Path, pid: u32, what: &str) -> Result<Option<ObserverLock>> {
        Self::acquire_in(Path::new(LOCK_DIR), proc_root, pid, what)
    }

    fn acquire_in(
        dir: &Path,
        proc_root: &Path,
        pid: u32,
        what: &str,
    ) -> Result<Option<ObserverLock>> {
        let start = start_time(proc_root, pid)?;
        match std::fs::create_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok(None),
            Err(e) => return Err(Error::io(dir, e)),
        }
        let path = dir.join(format!("{pid}-{start}.lock"));
        let fd: OwnedFd = match rustix::fs::open(
            &path,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => fd,
            // Made by another user (root's directory or lock, seen by an
            // unprivileged pagescope): this one can't take part, and the
            // kernel's own checks decide whether it may observe at all.
            Err(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM) => return Ok(None),
            Err(e) => return Err(Error::io(&path, e.into())),
        };
        let mut file = std::fs::File::from(fd);
        if let Err(e) = flock(&file, FlockOperation::NonBlockingLockExclusive) {
            // A kernel built without CONFIG_FILE_LOCKING has no flock:
            // observers can't see each other there.
            if matches!(
                e,
                rustix::io::Errno::NOSYS | rustix::io::Errno::NOLCK | rustix::io::Errno::OPNOTSUPP
            ) {
                drop(file);
                let _ = std::fs::remove_file(&path);
                return Ok(None);
            }
            if e == rustix::io::Errno::WOULDBLOCK {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(Error::Io {
                    path: path.clone(),
                    error: std::io::Error::other(format!(
                        "process {pid} is already observed by pagescope {}: two observers \
                         of one process corrupt each other's figures; wait for it to end",
                        if holder.is_empty() {
                            "(pid unknown)"
                        } else {
                            holder
                        }
                    )),
                });
            }
            return Err(Error::io(&path, e.into()));
        }
        let me = format!("(pid {}, `{what}`)\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(me.as_bytes()))
            .map_err(|e| Error::io(&path, e))?;
        Ok(Some(ObserverLock { path, _file: file }))
    }
}

impl Drop for ObserverLock {
    fn drop(&mut self) {
        // Removed while still held, so no other observer holds a lock on
        // a file that is gone.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The start time of `pid` (field 22 of its stat, in clock ticks since
/// boot): with the pid, it names one process.
fn start_time(proc_root: &Path, pid: u32) -> Result<u64> {
    Ok(crate::procfs::ProcDir::at(proc_root, pid)
        .stat(&mut Vec::new())?
        .start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_observer_is_refused_and_named_until_the_first_lets_go() {
        let locks = std::env::temp_dir().join(format!(
            "pagescope-observer-test-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let me = std::process::id();
        let proc_root = &crate::Root::default().proc;
        let first = ObserverLock::acquire_in(&locks, proc_root, me, "record")
            .unwrap()
            .unwrap();
        let e = ObserverLock::acquire_in(&locks, proc_root, me, "trace").unwrap_err();
        let said = e.to_string();
        assert!(said.contains(&format!("pid {me}, `record`")), "{said}");
        let file = std::fs::read_dir(&locks).unwrap().next().unwrap().unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(file.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        drop(first);
        assert_eq!(std::fs::read_dir(&locks).unwrap().count(), 0);
        let again = ObserverLock::acquire_in(&locks, proc_root, me, "trace").unwrap();
        assert!(again.is_some(), "the lock is free once the first lets go");
        drop(again);
        std::fs::remove_dir(&locks).unwrap();
    }
}
