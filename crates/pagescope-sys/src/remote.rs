//! Another process's memory, read and written with
//! `process_vm_readv(2)` and `process_vm_writev(2)`: one handle per
//! address space, named by one of its processes.

use std::io;

/// The address space of another process, to read and write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteMemory {
    pid: libc::pid_t,
}

impl RemoteMemory {
    /// The address space of process (or thread) `pid`. Not this
    /// process's: a write there would change memory behind the back of
    /// the code that owns it (`EINVAL` for a thread of this process, or a
    /// pid that names no single process). The check is made here, once (a pid
    /// is given again once its process is reaped).
    pub fn of(pid: u32) -> io::Result<RemoteMemory> {
        let invalid = || io::Error::from_raw_os_error(libc::EINVAL);
        let p = libc::pid_t::try_from(pid)
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(invalid)?;
        // SAFETY: integers only; signal 0 is not sent, it only asks
        // whether `p` is a thread of this process's thread group.
        let ours = unsafe {
            libc::syscall(
                libc::SYS_tgkill,
                libc::getpid() as libc::c_long,
                p as libc::c_long,
                0 as libc::c_long,
            )
        } == 0;
        if ours {
            return Err(invalid());
        }
        Ok(RemoteMemory { pid: p })
    }

    /// The process it was named by.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Fills `buf` from address `addr`. A read cut short (a range not
    /// wholly mapped) is an error. `ENOSYS` on a kernel built without
    /// `CONFIG_CROSS_MEMORY_ATTACH`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`,
        // which is ours and valid for the call; the remote range is only
        // numbers here, and in another process.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        match n {
            n if n < 0 => Err(io::Error::last_os_error()),
            n if n as usize == buf.len() => Ok(()),
            _ => Err(io::Error::other(format!(
                "short read of the memory of process {}",
                self.pid
            ))),
        }
    }

    /// Writes `bytes` at address `addr`. A write cut short (a range not
    /// wholly mapped, or not writable) is an error. `ENOSYS` as for
    /// [`RemoteMemory::read`].
    pub fn write(&self, addr: u64, bytes: &[u8]) -> io::Result<()> {
        let local = libc::iovec {
            iov_base: bytes.as_ptr().cast_mut().cast(),
            iov_len: bytes.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        // SAFETY: the kernel only reads `bytes`, valid for the call; it
        // writes into the address space of another process (not this
        // one: see `of`), never into memory of this process.
        let n = unsafe { libc::process_vm_writev(self.pid, &local, 1, &remote, 1, 0) };
        match n {
            n if n < 0 => Err(io::Error::last_os_error()),
            n if n as usize == bytes.len() => Ok(()),
            _ => Err(io::Error::other(format!(
                "short write to the memory of process {}",
                self.pid
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::kill;
    use crate::wait::{waitpid, Status, ALL};

    /// A forked child (stopped before its exec, with its copy of this
    /// process's memory): what it has is read, what is written there is
    /// read back, and its copy is its own.
    #[test]
    fn reads_and_writes_a_childs_memory() {
        let page = rustix::param::page_size();
        let ours = crate::mem::Region::anonymous(3 * page).unwrap();
        // Its third page can't be read: a read into it is cut short.
        // SAFETY: the page is the region's, which no code touches past
        // its first two pages.
        unsafe {
            rustix::mm::mprotect(
                (ours.addr() + 2 * page) as *mut _,
                page,
                rustix::mm::MprotectFlags::empty(),
            )
            .unwrap()
        };
        ours.touch(2 * page, 8, Some(0x5a5a_5a5a_5a5a_5a5a));
        let pid =
            crate::clone::fork_exec_stopped(c"/bin/true", &[c"true".to_owned()]).unwrap() as u32;
        let mem = RemoteMemory::of(pid).unwrap();
        assert_eq!(mem.pid(), pid);
        let addr = ours.addr() as u64;
        let mut buf = vec![0u8; 2 * page];
        let read = mem.read(addr, &mut buf);
        let wrote = mem.write(addr + 100, b"pagescope");
        let mut back = [0u8; 12];
        let read_back = mem.read(addr + 99, &mut back);
        // Into the page that can't be read: cut short; unmapped: none.
        let mut past = vec![0u8; 3 * page];
        let short = mem.read(addr, &mut past);
        let unmapped = mem.read(8, &mut back);
        kill(pid, libc::SIGKILL).unwrap();
        assert_eq!(
            waitpid(Some(pid), ALL).unwrap().map(|w| w.1),
            Some(Status::Signaled(9))
        );
        if matches!(&read, Err(e) if e.raw_os_error() == Some(libc::ENOSYS)) {
            eprintln!("skipped: the kernel has no process_vm_readv (CONFIG_CROSS_MEMORY_ATTACH)");
            return;
        }
        read.unwrap();
        assert!(buf.iter().all(|&b| b == 0x5a));
        wrote.unwrap();
        read_back.unwrap();
        assert_eq!(&back, b"\x5apagescope\x5a\x5a");
        // The child's copy changed, not ours.
        assert_eq!(
            ours.touch(2 * page, 8, None),
            0x5a5a_5a5a_5a5a_5a5au64.wrapping_mul(2 * page as u64 / 8)
        );
        assert!(short.is_err() && unmapped.is_err());
        // Not this process, nor one of its threads, nor a pid that names
        // none.
        assert!(RemoteMemory::of(std::process::id()).is_err());
        let tid = rustix::thread::gettid().as_raw_pid() as u32;
        assert!(RemoteMemory::of(tid).is_err());
        assert!(RemoteMemory::of(0).is_err() && RemoteMemory::of(u32::MAX).is_err());
    }
}
