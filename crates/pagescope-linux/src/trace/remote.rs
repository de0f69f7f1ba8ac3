//! Reading and writing another process's memory: `process_vm_readv` and
//! `process_vm_writev`, or `/proc/PID/mem` on kernels built without
//! CONFIG_CROSS_MEMORY_ATTACH (where those return `ENOSYS`).

use nix::errno::Errno;
use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Set once `process_vm_*` answered `ENOSYS`.
static NO_CMA: AtomicBool = AtomicBool::new(false);

/// The last `/proc/PID/mem` opened (opening one checks ptrace access each
/// time, which costs more than the copy).
static MEM: Mutex<Option<(u32, std::fs::File)>> = Mutex::new(None);

/// Runs `f` on `/proc/PID/mem`, the cached one first; on an error, once
/// more on a fresh one (the cached one may be of an address space the
/// process has left by `execve`).
fn with_mem(pid: u32, f: impl Fn(&std::fs::File) -> io::Result<()>) -> io::Result<()> {
    let mut cache = MEM.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((p, file)) = cache.as_ref() {
        if *p == pid && f(file).is_ok() {
            return Ok(());
        }
    }
    *cache = None;
    let file = crate::procfs::ProcDir::live(pid).mem()?;
    let r = f(&file);
    *cache = Some((pid, file));
    r
}

/// Fills `buf` from `addr` in `pid`.
pub fn read(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<()> {
    if !NO_CMA.load(Ordering::Relaxed) {
        let len = buf.len();
        match process_vm_readv(
            Pid::from_raw(pid as i32),
            &mut [IoSliceMut::new(buf)],
            &[RemoteIoVec {
                base: addr as usize,
                len,
            }],
        ) {
            Ok(n) if n == len => return Ok(()),
            Ok(_) => {
                return Err(io::Error::other(
                    "short read of the traced program's memory",
                ))
            }
            Err(Errno::ENOSYS) => NO_CMA.store(true, Ordering::Relaxed),
            Err(e) => return Err(e.into()),
        }
    }
    let cell = std::cell::RefCell::new(buf);
    with_mem(pid, |m| m.read_exact_at(&mut cell.borrow_mut(), addr))
}

/// Writes `bytes` at `addr` in `pid`.
pub fn write(pid: u32, addr: u64, bytes: &[u8]) -> io::Result<()> {
    if !NO_CMA.load(Ordering::Relaxed) {
        match process_vm_writev(
            Pid::from_raw(pid as i32),
            &[IoSlice::new(bytes)],
            &[RemoteIoVec {
                base: addr as usize,
                len: bytes.len(),
            }],
        ) {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(_) => {
                return Err(io::Error::other(
                    "short write to the traced program's memory",
                ))
            }
            Err(Errno::ENOSYS) => NO_CMA.store(true, Ordering::Relaxed),
            Err(e) => return Err(e.into()),
        }
    }
    with_mem(pid, |m| m.write_all_at(bytes, addr))
}
