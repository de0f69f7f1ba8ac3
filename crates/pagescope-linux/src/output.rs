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

use std::fs::{File, Permissions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

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
    if is_stdout(path) {
        return take_stdout();
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let t = meta.file_type();
        if t.is_char_device() || t.is_block_device() || t.is_fifo() {
            // Not ours to replace; O_NOFOLLOW in case it became a link.
            return std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(path);
        }
        if t.is_dir() {
            return Err(io::Error::from_raw_os_error(
                rustix::io::Errno::ISDIR.raw_os_error(),
            ));
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "names no file"))?;
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    let temp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".part")
        .permissions(Permissions::from_mode(MODE))
        .tempfile_in(dir)?;
    // The umask may have taken bits away (0200 would leave it unreadable).
    temp.as_file()
        .set_permissions(Permissions::from_mode(MODE))?;
    // A failed rename removes the new file (dropped with the error).
    temp.persist(path).map_err(|e| e.error)
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
