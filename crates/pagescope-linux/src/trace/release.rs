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
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use pagescope_core::{parse, Error, Result};
use std::io::IoSliceMut;
use std::os::fd::AsFd;

/// What a release did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Pages copied back. (Their copies in the store stay allocated until
    /// the process exits: freeing them needs a task inside the process.)
    pub copied: u64,
}

fn read_index(pid: u32, index: u64, slots: u64) -> Result<Vec<u64>> {
    let mut out = vec![0u64; slots as usize];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut out);
    let mut done = 0;
    while done < bytes.len() {
        let len = (bytes.len() - done).min(1 << 20);
        let n = process_vm_readv(
            Pid::from_raw(pid as i32),
            &mut [IoSliceMut::new(&mut bytes[done..done + len])],
            &[RemoteIoVec {
                base: (index + done as u64) as usize,
                len,
            }],
        )
        .map_err(|e| Error::io(format!("/proc/{pid}/mem (index)"), e.into()))?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(out)
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
    let high = read_index(pid, index, 1)?[0].min(STORE_BYTES / PAGE);
    let slots = read_index(pid, index, high.max(1))?;
    let mut done = Released::default();
    for fd in uffds {
        let ours = rustix::process::pidfd_getfd(
            pidfd.as_fd(),
            fd,
            rustix::process::PidfdGetfdFlags::empty(),
        )
        .map_err(|e| Error::io(format!("pidfd_getfd {pid}"), e.into()))?;
        let uffd = Uffd::new(ours);
        // Only slots that hold a page: reading an empty one would wait for
        // a userfaultfd handler, and there is none.
        let mut present = std::collections::HashSet::new();
        let path = format!("/proc/{pid}/pagemap");
        let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        crate::pagemap::PagemapReader::new(file, path.into(), PAGE).for_each(
            store,
            store + slots.len() as u64 * PAGE,
            |addr, e| {
                if e.is_present() {
                    present.insert(addr);
                }
            },
        )?;
        for (slot, &page) in slots.iter().enumerate().skip(1) {
            let from = store + slot as u64 * PAGE;
            if page == 0 || !present.contains(&from) {
                continue;
            }
            match mm::copy_back(&uffd, pid, from, page, false) {
                Ok(_) => done.copied += 1,
                // Another descriptor of the process owns the pages.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => break,
                Err(e) => return Err(Error::io(format!("UFFDIO_COPY in {pid}"), e)),
            }
        }
        unregister_all(&uffd, pid)?;
    }
    Ok(done)
}
