//! Reading and writing another process's memory: `process_vm_readv` and
//! `process_vm_writev`, or `/proc/PID/mem` on kernels built without
//! CONFIG_CROSS_MEMORY_ATTACH (where those return `ENOSYS`).

use pagescope_sys::remote::RemoteMemory;
use std::io;
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

/// How many handles [`memory_of`] keeps per thread: the fault thread
/// turns between a program and its mover, and the tracer thread between
/// a parent and its child.
const HANDLES: usize = 4;

thread_local! {
    /// The last handles made in this thread, and which one goes next.
    static HANDLE: std::cell::Cell<([Option<RemoteMemory>; HANDLES], usize)> =
        const { std::cell::Cell::new(([None; HANDLES], 0)) };
}

/// The handle of `pid`'s address space: one made before in this thread,
/// or a new one (making it checks that `pid` is not of this process,
/// which costs two system calls, as much as a small read). The pids are
/// of traced programs and their movers, never pagescope's own.
fn memory_of(pid: u32) -> io::Result<RemoteMemory> {
    HANDLE.with(|cell| {
        let (mut made, next) = cell.get();
        if let Some(m) = made.iter().flatten().find(|m| m.pid() == pid) {
            return Ok(*m);
        }
        let m = RemoteMemory::of(pid)?;
        made[next] = Some(m);
        cell.set((made, (next + 1) % HANDLES));
        Ok(m)
    })
}

/// Whether `e` is the `ENOSYS` of a kernel without
/// `process_vm_readv`/`writev`; remembered if so.
fn no_cma(e: &io::Error) -> bool {
    let none = e.raw_os_error() == Some(rustix::io::Errno::NOSYS.raw_os_error());
    if none {
        NO_CMA.store(true, Ordering::Relaxed);
    }
    none
}

/// Fills `buf` from `addr` in `pid`.
pub fn read(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<()> {
    if !NO_CMA.load(Ordering::Relaxed) {
        match memory_of(pid)?.read(addr, buf) {
            Err(e) if no_cma(&e) => {}
            r => return r,
        }
    }
    let cell = std::cell::RefCell::new(buf);
    with_mem(pid, |m| m.read_exact_at(&mut cell.borrow_mut(), addr))
}

/// Writes `bytes` at `addr` in `pid`.
pub fn write(pid: u32, addr: u64, bytes: &[u8]) -> io::Result<()> {
    if !NO_CMA.load(Ordering::Relaxed) {
        match memory_of(pid)?.write(addr, bytes) {
            Err(e) if no_cma(&e) => {}
            r => return r,
        }
    }
    with_mem(pid, |m| m.write_all_at(bytes, addr))
}
