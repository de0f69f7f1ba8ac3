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
//! removed when the holder lets go normally; one a killed holder left is
//! removed by the next observer, and by `trace --release`).
//!
//! `record -- CMD` takes the lock on the command it launched too. What
//! clears other processes' referenced bits for figures of its own (the
//! working set of `serve` and `top`, a whole-machine or cgroup recording)
//! leaves every locked process alone ([`observed`]).
//!
//! Two of those would clear each other's bits over every process they
//! share, so each takes the machine's lock, `/run/pagescope/machine.lock`,
//! for as long as it runs ([`ObserverLock::acquire_machine`]), and a
//! second is refused with the holder's pid and command (`top` goes on
//! without a working set instead, and says so).
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

/// The machine's lock in [`LOCK_DIR`] ([`ObserverLock::acquire_machine`]).
const MACHINE_LOCK: &str = "machine.lock";

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
        Self::take(dir, &format!("{pid}-{start}.lock"), what, &|holder| {
            format!(
                "process {pid} is already observed by pagescope {holder}: two observers \
                 of one process corrupt each other's figures; wait for it to end"
            )
        })
    }

    /// Takes the machine's lock for `what` (`record --system`, `serve`,
    /// `top`): whatever clears or reads the accessed bits of many
    /// processes at once, for figures of its own. Two such clear each
    /// other's bits, and both count too few references, so a second is
    /// refused and told who holds the lock. `None` where locks can't be
    /// taken, as for [`ObserverLock::acquire`].
    pub fn acquire_machine(dir: &Path, what: &str) -> Result<Option<ObserverLock>> {
        Self::take(dir, MACHINE_LOCK, what, &|holder| {
            format!(
                "pagescope {holder} already clears the accessed bits of many processes \
                 (a whole-machine or cgroup recording, or the working set of serve or \
                 top): two such clear each other's bits, and both would count too few \
                 references; wait for it to end, leave the bits alone (serve or top \
                 --backend none), or record one program (--pid, or -- CMD), which it \
                 leaves alone"
            )
        })
    }

    /// Who holds the machine's lock in `dir` (`(pid N, `serve`)`), if
    /// anyone does.
    pub fn machine_holder(dir: &Path) -> Option<String> {
        let path = dir.join(MACHINE_LOCK);
        let fd = open_lock(&path).ok()?;
        let held = flock(&fd, FlockOperation::NonBlockingLockShared)
            .is_err_and(|e| e == rustix::io::Errno::WOULDBLOCK);
        let holder = std::fs::read_to_string(&path).ok()?;
        held.then(|| holder.trim().to_string())
    }

    /// Takes the lock `name` in `dir` for this process, described as
    /// `what`; `refused` says why, given the holder's description.
    fn take(
        dir: &Path,
        name: &str,
        what: &str,
        refused: &dyn Fn(&str) -> String,
    ) -> Result<Option<ObserverLock>> {
        match std::fs::create_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok(None),
            Err(e) => return Err(Error::io(dir, e)),
        }
        sweep_abandoned(dir);
        let path = dir.join(name);
        let mut tries = 0;
        let mut file = loop {
            tries += 1;
            match Self::open_locked(&path, refused, tries < 4)? {
                Locked::Taken(file) => break file,
                Locked::Gone => continue,
                Locked::NotTakingPart => return Ok(None),
            }
        };
        let me = format!("(pid {}, `{what}`)\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(me.as_bytes()))
            .map_err(|e| Error::io(&path, e))?;
        Ok(Some(ObserverLock { path, _file: file }))
    }

    /// Opens (making it) the lock at `path` and takes it. The lock is
    /// `Gone` when the file was removed (by its last holder, or a sweep)
    /// between the open and the lock: a lock on a removed file guards
    /// nothing, so the caller opens the path again. A lock held by
    /// another is `Gone` too while `retry` (after 5 ms): a sweep holds a
    /// lock it is about to remove for a moment; a holder refuses.
    fn open_locked(path: &Path, refused: &dyn Fn(&str) -> String, retry: bool) -> Result<Locked> {
        let fd: OwnedFd = match rustix::fs::open(
            path,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => fd,
            // Made by another user (root's directory or lock, seen by an
            // unprivileged pagescope): this one can't take part, and the
            // kernel's own checks decide whether it may observe at all.
            Err(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM) => {
                return Ok(Locked::NotTakingPart)
            }
            Err(e) => return Err(Error::io(path, e.into())),
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
                let _ = std::fs::remove_file(path);
                return Ok(Locked::NotTakingPart);
            }
            if e == rustix::io::Errno::WOULDBLOCK && retry {
                std::thread::sleep(std::time::Duration::from_millis(5));
                return Ok(Locked::Gone);
            }
            if e == rustix::io::Errno::WOULDBLOCK {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(Error::Io {
                    path: path.to_path_buf(),
                    error: std::io::Error::other(refused(if holder.is_empty() {
                        "(pid unknown)"
                    } else {
                        holder
                    })),
                });
            }
            return Err(Error::io(path, e.into()));
        }
        let held = rustix::fs::fstat(&file).map_err(|e| Error::io(path, e.into()))?;
        match rustix::fs::lstat(path) {
            Ok(now) if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino) => {
                Ok(Locked::Taken(file))
            }
            Ok(_) | Err(rustix::io::Errno::NOENT) => Ok(Locked::Gone),
            Err(e) => Err(Error::io(path, e.into())),
        }
    }
}

/// What [`ObserverLock::open_locked`] found.
enum Locked {
    /// The lock is this process's.
    Taken(std::fs::File),
    /// The file was removed before it was locked (or, while retrying,
    /// another holds it for now): open it again.
    Gone,
    /// Locks can't be taken here (another user's, or no file locking).
    NotTakingPart,
}

impl Drop for ObserverLock {
    fn drop(&mut self) {
        // Removed while still held, so no other observer holds a lock on
        // a file that is gone.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Removes the locks in `dir` that no observer holds: those that killed
/// observers left (the kernel dropped their `flock`, the files stayed).
/// An observer that opened such a file just before it went finds it gone
/// once locked, and makes it again. Best effort: a lock that can't be
/// opened or removed stays.
pub fn sweep_abandoned(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if lock_of(&entry.file_name()).is_none() {
            continue;
        }
        let path = entry.path();
        let Ok(fd) = open_lock(&path) else {
            continue;
        };
        // Removed while locked, as an observer removes its own.
        if flock(&fd, FlockOperation::NonBlockingLockExclusive).is_ok() {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The processes another pagescope observes now (`record --pid`,
/// `trace --pid`, the command `record` launched): the `(pid, start
/// time)` of each lock in `dir` that its observer holds. Whatever clears
/// processes' referenced bits for figures of its own (the `refs` working
/// set of `serve` and `top`) leaves these alone: the observer's figures
/// are the bits it clears itself. Empty where there are no locks (none
/// taken, or no permission to read them).
pub fn observed(dir: &Path) -> std::collections::HashSet<(u32, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Default::default();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let target = lock_of(&entry.file_name())?;
            let fd = open_lock(&entry.path()).ok()?;
            // Held by its observer (exclusive), a shared lock is refused;
            // one taken is let go at once, as a sweep lets go of the
            // locks it keeps (an observer taking it meanwhile retries).
            let held = flock(&fd, FlockOperation::NonBlockingLockShared)
                .is_err_and(|e| e == rustix::io::Errno::WOULDBLOCK);
            held.then_some(target)
        })
        .collect()
}

/// The process a lock file's name (`PID-START.lock`) names.
fn lock_of(name: &std::ffi::OsStr) -> Option<(u32, u64)> {
    let (pid, start) = name.to_str()?.strip_suffix(".lock")?.split_once('-')?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// Opens a lock file to test or take its lock, not following a link.
fn open_lock(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
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

    /// One pagescope at a time clears many processes' bits: a second is
    /// refused and told who, until the first lets go.
    #[test]
    fn the_machine_has_one_clearer_at_a_time() {
        let locks = tempfile::tempdir().unwrap();
        let dir = locks.path();
        assert_eq!(ObserverLock::machine_holder(dir), None);
        let first = ObserverLock::acquire_machine(dir, "serve")
            .unwrap()
            .unwrap();
        let who = format!("(pid {}, `serve`)", std::process::id());
        assert_eq!(ObserverLock::machine_holder(dir), Some(who.clone()));
        let said = ObserverLock::acquire_machine(dir, "top")
            .unwrap_err()
            .to_string();
        assert!(said.contains(&who) && said.contains("each other"), "{said}");
        // Observing one process is another lock.
        let me = std::process::id();
        let proc_root = &crate::Root::default().proc;
        let one = ObserverLock::acquire_in(dir, proc_root, me, "record").unwrap();
        assert!(one.is_some());
        drop(first);
        assert_eq!(ObserverLock::machine_holder(dir), None);
        let again = ObserverLock::acquire_machine(dir, "top").unwrap();
        assert!(again.is_some(), "free once the first lets go");
    }

    /// The locks killed observers left are removed by the next observer;
    /// a held lock stays, and so does what is not a lock.
    #[test]
    fn the_locks_no_observer_holds_are_swept() {
        let locks = tempfile::tempdir().unwrap();
        let proc_root = &crate::Root::default().proc;
        let me = std::process::id();
        for name in ["1-1.lock", &format!("{me}-7.lock"), "notes.txt"] {
            std::fs::write(locks.path().join(name), "(pid 1, `trace`)\n").unwrap();
        }
        let held = locks.path().join("2-2.lock");
        std::fs::write(&held, "").unwrap();
        let holder = std::fs::File::open(&held).unwrap();
        flock(&holder, FlockOperation::LockExclusive).unwrap();
        let lock = ObserverLock::acquire_in(locks.path(), proc_root, me, "record")
            .unwrap()
            .unwrap();
        let mut names: Vec<String> = std::fs::read_dir(locks.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .collect();
        names.sort();
        let mine = lock.path.file_name().unwrap().to_str().unwrap().to_string();
        let mut want = vec!["2-2.lock".to_string(), mine, "notes.txt".to_string()];
        want.sort();
        assert_eq!(names, want);
    }

    /// Observed are the processes whose locks are held, and only while
    /// they are: not those a killed observer left, nor what is not a lock.
    #[test]
    fn observed_are_the_processes_whose_locks_are_held() {
        let locks = tempfile::tempdir().unwrap();
        let proc_root = &crate::Root::default().proc;
        let me = std::process::id();
        for name in ["1-1.lock", "3-x.lock", "notes.txt"] {
            std::fs::write(locks.path().join(name), "(pid 1, `trace`)\n").unwrap();
        }
        assert!(observed(locks.path()).is_empty());
        let lock = ObserverLock::acquire_in(locks.path(), proc_root, me, "record")
            .unwrap()
            .unwrap();
        let start = start_time(proc_root, me).unwrap();
        assert_eq!(observed(locks.path()), [(me, start)].into());
        // Testing a lock does not take it from its holder, nor keep it
        // from the next observer.
        assert!(ObserverLock::acquire_in(locks.path(), proc_root, me, "trace").is_err());
        drop(lock);
        assert!(observed(locks.path()).is_empty());
        let again = ObserverLock::acquire_in(locks.path(), proc_root, me, "trace").unwrap();
        assert!(again.is_some());
        assert!(observed(Path::new("/nonexistent/pagescope")).is_empty());
    }
}
