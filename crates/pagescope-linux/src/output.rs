//! The files pagescope writes (snapshots, recordings, traces): every one is
//! made here, private and never through a link planted at its path.
//!
//! A snapshot holds page frame numbers, which the kernel shows only to
//! CAP_SYS_ADMIN, and every process's command line; a recording and a
//! trace hold the addresses a program touched. So an output file is
//! created with mode 0600 whatever the umask, and `-o` never follows a
//! symlink: another user who planted one at the path (in /tmp, say)
//! would otherwise have pagescope, often root, overwrite its target.
//!
//! The file is made in the same directory under a fresh name with
//! `O_CREAT | O_EXCL` (which never opens an existing file or follows a
//! link), and renamed over the path at once, before any data is written:
//! whatever was at the path (a file, a symlink) is replaced, a symlink's
//! target is left as it was, and a writer killed at any later moment
//! leaves its file, readable up to its last frame, at the path.
//!
//! A trace or a recording of a running process can still fail after its
//! file is made: the process may refuse to be attached. So those files
//! are made with [`create_pending`], without a name (`O_TMPFILE`), and
//! put at the path only once the program is attached or launched
//! ([`Pending::commit`]); a run that fails before leaves whatever was at
//! the path as it was, and no file of its own, even if it is killed.

use std::ffi::OsString;
use std::fs::{File, Permissions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, CWD};
use rustix::io::Errno;

/// The mode of every file pagescope creates: read and write for its owner.
pub const MODE: u32 = 0o600;

/// Whether `path` means standard output (`-`).
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Opens `path` for an output file that starts empty:
///
/// - `-` is standard output. The file returned writes to it, and this
///   process's descriptor 1 is pointed at standard error from then on, so
///   that nothing else (a program pagescope launches inherits descriptor
///   1) can mix its output into the stream.
/// - A device or FIFO that exists (`/dev/null`) is opened as it is.
/// - Anything else gets a new private file (mode [`MODE`]), renamed over
///   whatever was at `path` (see the module documentation).
pub fn create(path: &Path) -> io::Result<File> {
    if let Some(file) = in_place(path)? {
        return Ok(file);
    }
    let temp = tempfile::Builder::new()
        .prefix(&temp_prefix(path)?)
        .suffix(".part")
        .permissions(Permissions::from_mode(MODE))
        .tempfile_in(parent(path))?;
    // The umask may have taken bits away (0200 would leave it unreadable).
    temp.as_file()
        .set_permissions(Permissions::from_mode(MODE))?;
    // A failed rename removes the new file (dropped with the error).
    temp.persist(path).map_err(|e| e.error)
}

/// Opens `path` for an output file that starts empty, as [`create`] does,
/// but a new file gets no name until [`Pending::commit`]: dropped before,
/// or with pagescope killed, it vanishes, and what was at `path` stays.
/// Standard output and devices are written in place at once. Where the
/// file system can't make a file without a name (no `O_TMPFILE`), the
/// file is put at `path` at once, as by [`create`].
pub fn create_pending(path: &Path) -> io::Result<(File, Pending)> {
    if let Some(file) = in_place(path)? {
        return Ok((file, Pending { unnamed: None }));
    }
    let fd = match rustix::fs::open(
        parent(path),
        OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(MODE),
    ) {
        Ok(fd) => fd,
        // No O_TMPFILE on this file system (or kernel).
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {
            return Ok((create(path)?, Pending { unnamed: None }));
        }
        Err(e) => return Err(e.into()),
    };
    // The umask may have taken bits away.
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(MODE))?;
    let keep = fd.try_clone()?;
    Ok((
        File::from(fd),
        Pending {
            unnamed: Some((keep, path.to_path_buf())),
        },
    ))
}

/// A file of [`create_pending`] not yet at its path.
#[derive(Debug)]
pub struct Pending {
    /// The file without a name, and its path; `None` once it is there.
    unnamed: Option<(OwnedFd, PathBuf)>,
}

impl Pending {
    /// Puts the file at its path, replacing whatever was there (as
    /// [`create`] does: a symlink is replaced, not followed). Once done,
    /// does nothing.
    pub fn commit(&mut self) -> io::Result<()> {
        let Some((fd, path)) = self.unnamed.take() else {
            return Ok(());
        };
        let by_proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
        // A name of its own first (linkat never replaces), then renamed
        // over the path; a failed rename removes the name (dropped).
        let prefix = temp_prefix(&path)?;
        let mut names = tempfile::Builder::new();
        names.prefix(&prefix).suffix(".part");
        let named = names.make_in(parent(&path), |temp| {
            match rustix::fs::linkat(CWD, &by_proc, CWD, temp, AtFlags::SYMLINK_FOLLOW) {
                // Without /proc: the same by the descriptor, which needs
                // CAP_DAC_READ_SEARCH.
                Err(Errno::NOENT) => rustix::fs::linkat(&fd, "", CWD, temp, AtFlags::EMPTY_PATH),
                r => r,
            }
            .map_err(io::Error::from)
        })?;
        named.persist(&path).map_err(|e| e.error)?;
        Ok(())
    }
}

/// Standard output, or a device or FIFO that exists, opened to be
/// written in place; `None` for a path that gets a new file. A directory
/// is refused.
fn in_place(path: &Path) -> io::Result<Option<File>> {
    if is_stdout(path) {
        return take_stdout().map(Some);
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let t = meta.file_type();
        if t.is_char_device() || t.is_block_device() || t.is_fifo() {
            // Not ours to replace; O_NOFOLLOW in case it became a link.
            return std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(OFlags::NOFOLLOW.bits() as i32)
                .open(path)
                .map(Some);
        }
        if t.is_dir() {
            return Err(io::Error::from_raw_os_error(Errno::ISDIR.raw_os_error()));
        }
    }
    Ok(None)
}

/// The directory of `path`.
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The start of the fresh names, beside `path`, of a file on its way
/// there: `.NAME.XXXXXX.part`.
fn temp_prefix(path: &Path) -> io::Result<OsString> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "names no file"))?;
    let mut prefix = OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    Ok(prefix)
}

/// Standard output as a file of its own, with descriptor 1 pointed at
/// standard error.
fn take_stdout() -> io::Result<File> {
    let out = io::stdout().as_fd().try_clone_to_owned()?;
    rustix::stdio::dup2_stdout(io::stderr())?;
    Ok(File::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_new_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.snap");
        create(&p).unwrap().write_all(b"new").unwrap();
        assert_eq!(mode(&p), MODE);
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        // Nothing else is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn an_existing_file_is_replaced_and_made_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.rec");
        std::fs::write(&p, b"an older and longer file").unwrap();
        std::fs::set_permissions(&p, Permissions::from_mode(0o666)).unwrap();
        create(&p).unwrap().write_all(b"new").unwrap();
        assert_eq!(mode(&p), MODE);
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
    }

    #[test]
    fn a_symlink_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        std::fs::write(&target, b"keep me").unwrap();
        let p = dir.path().join("out.trace");
        std::os::unix::fs::symlink(&target, &p).unwrap();
        create(&p).unwrap().write_all(b"new").unwrap();
        assert!(std::fs::symlink_metadata(&p).unwrap().is_file());
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        // A dangling link too.
        let q = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &q).unwrap();
        create(&q).unwrap();
        assert!(std::fs::symlink_metadata(&q).unwrap().is_file());
        assert!(!dir.path().join("nowhere").exists());
    }

    #[test]
    fn a_file_is_visible_at_its_path_before_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.rec");
        let _f = create(&p).unwrap();
        assert!(std::fs::symlink_metadata(&p).unwrap().is_file());
    }

    #[test]
    fn a_pending_file_reaches_its_path_only_when_committed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.trace");
        std::fs::write(&p, b"yesterday's").unwrap();
        // Dropped uncommitted: the old file stays, nothing else is left.
        let (mut f, pending) = create_pending(&p).unwrap();
        f.write_all(b"lost").unwrap();
        drop((f, pending));
        assert_eq!(std::fs::read(&p).unwrap(), b"yesterday's");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // Committed: the new file replaces it, private, with what was
        // written before and after.
        let (mut f, mut pending) = create_pending(&p).unwrap();
        f.write_all(b"new ").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"yesterday's");
        pending.commit().unwrap();
        pending.commit().unwrap();
        f.write_all(b"file").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new file");
        assert_eq!(mode(&p), MODE);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // A symlink is replaced, its target kept.
        let target = dir.path().join("precious");
        std::fs::write(&target, b"keep me").unwrap();
        let q = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &q).unwrap();
        let (_f, mut pending) = create_pending(&q).unwrap();
        pending.commit().unwrap();
        assert!(std::fs::symlink_metadata(&q).unwrap().is_file());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    }

    #[test]
    fn devices_are_written_in_place_and_directories_refused() {
        let mut f = create(Path::new("/dev/null")).unwrap();
        f.write_all(b"gone").unwrap();
        assert!(std::fs::symlink_metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
        let dir = tempfile::tempdir().unwrap();
        let e = create(dir.path()).unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(rustix::io::Errno::ISDIR.raw_os_error())
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
