//! `pagescope trace --release PID`: after a tracer was killed, put back
//! every page it had evicted from PID and unregister the userfaultfd, so
//! the program runs on with all its data.
//!
//! Everything needed is inside the target: its userfaultfd (in its
//! descriptor table), the store of evicted pages, and the index that names
//! the page in each slot (see [`super::mm`]).

use super::mm::{self, INDEX_BYTES, INDEX_NAME, PAGE, STORE_BYTES, STORE_NAME};
use super::tracer::unregister_all;
use super::uffd::Uffd;
use pagescope_core::{parse, Error, Result};
use std::os::fd::AsFd;

/// What a release did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Pages copied back. (Their copies in the store stay allocated until
    /// the process exits: freeing them needs a task inside the process.)
    pub copied: u64,
}

/// Releases `pid`. Errors say what is missing (no userfaultfd: nothing to
/// release; no store: not traced by pagescope).
pub fn release(pid: u32) -> Result<Released> {
    let fd_dir = format!("/proc/{pid}/fd");
    let entries = std::fs::read_dir(&fd_dir).map_err(|e| Error::io(&fd_dir, e))?;
    let mut uffds = Vec::new();
    for e in entries.flatten() {
        if let Ok(target) = std::fs::read_link(e.path()) {
            if target.as_os_str() == "anon_inode:[userfaultfd]" {
                if let Some(n) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
                    uffds.push(n);
                }
            }
        }
    }
    if uffds.is_empty() {
        return Err(Error::corrupt(
            &fd_dir,
            format!("process {pid} holds no userfaultfd: there is nothing to release"),
        ));
    }
    let maps_path = format!("/proc/{pid}/maps");
    let text = std::fs::read_to_string(&maps_path).map_err(|e| Error::io(&maps_path, e))?;
    let lines = parse::maps::parse(&text).map_err(|e| Error::corrupt(&maps_path, e.to_string()))?;
    let find = |name: &str, bytes: u64| {
        let named = format!("[anon:{name}]");
        lines
            .iter()
            .find(|l| l.path == named)
            .or_else(|| {
                lines
                    .iter()
                    .find(|l| l.path.is_empty() && l.end - l.start == bytes)
            })
            .map(|l| l.start)
    };
    let (Some(store), Some(index)) = (find(STORE_NAME, STORE_BYTES), find(INDEX_NAME, INDEX_BYTES))
    else {
        return Err(Error::corrupt(
            &maps_path,
            format!("process {pid} has no pagescope store: it was not traced by pagescope"),
        ));
    };
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(pid as i32).ok_or_else(|| Error::corrupt("pid", "pid 0"))?,
        rustix::process::PidfdFlags::empty(),
    )
    .map_err(|e| Error::io(format!("pidfd_open {pid}"), e.into()))?;
    let stored = mm::stored_pages(pid, store, index)
        .map_err(|e| Error::io(format!("/proc/{pid}/mem (the store's index)"), e))?;
    let mut done = Released::default();
    for fd in uffds {
        let ours = rustix::process::pidfd_getfd(
            pidfd.as_fd(),
            fd,
            rustix::process::PidfdGetfdFlags::empty(),
        )
        .map_err(|e| Error::io(format!("pidfd_getfd {pid}"), e.into()))?;
        let uffd = Uffd::new(ours);
        for &(slot, page) in &stored {
            match mm::copy_back(&uffd, pid, store + slot * PAGE, page, false) {
                Ok(mm::Restored::Copied) => done.copied += 1,
                // Still in place: the tracer died before it dropped it.
                Ok(_) => {}
                // Another descriptor of the process owns the pages.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => break,
                Err(e) => return Err(Error::io(format!("UFFDIO_COPY in {pid}"), e)),
            }
        }
        unregister_all(&uffd, pid)?;
    }
    Ok(done)
}
