//! One traced address space: its userfaultfd, its store of evicted pages,
//! and the operations that move pages out of and back into the program.
//!
//! The store is a private anonymous mapping inside the target, reserved
//! with `MAP_NORESERVE` and named `[anon:pagescope-store]`. An evicted page
//! is moved (`UFFDIO_MOVE`, no copy) into a free slot of the store; the
//! fault that follows copies it back (`UFFDIO_COPY` from the tracer, with
//! no ptrace round trip), and the slot's stale copy is dropped later with
//! others. Next to it, `[anon:pagescope-index]`
//! holds, for each slot, the address of the page in it, written *before*
//! the page moves; so if the tracer dies, `pagescope trace --release`
//! finds every page that is away and puts it back. Index entry 0 holds the
//! number of slots ever used.
//!
//! Kernels before 6.8 have no `UFFDIO_MOVE`. There the tracer copies
//! instead ([`EvictMethod::Copy`]): it write-protects the page (so a write
//! from now on waits for the tracer and can't be lost), copies it into its
//! slot, names it in the index, and has the mover drop it with
//! `madvise(MADV_DONTNEED)`; the fault that follows copies it back with
//! `UFFDIO_COPY`, as in the other method. That madvise waits until its
//! `UFFD_EVENT_REMOVE` is read, by the same thread that drives the mover,
//! so the thread reads the userfaultfd while it waits and keeps the other
//! messages for later. The moving method copies too, for a page shared
//! with another process since a fork (`UFFDIO_MOVE` takes only pages
//! exclusive to one), filling its slot with `UFFDIO_COPY` since its store
//! is registered; a forked child always copies (its userfaultfd is the
//! tracer's alone, so its mover can't issue `UFFDIO_MOVE`).
//!
//! Shared memory needs no store: its pages live in the page cache, which
//! every process mapping them shares. A page leaves by being unmapped in
//! this address space only (`madvise(MADV_DONTNEED)` in the mover), and
//! comes back on its minor fault with `UFFDIO_CONTINUE`.

mod reclaim;

use super::ptrace::{Mover, BATCH_ENTRY};
use super::remote;
use super::uffd::{Msg, Uffd};
use crate::procfs::ProcDir;
use pagescope_core::trace::EvictMethod;
use rustix::io::Errno;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes per page (x86_64).
pub const PAGE: u64 = 4096;
/// Slots in a store: 256 GiB of address space, none of it reserved.
pub const STORE_SLOTS: u64 = 1 << 26;
/// Bytes of the store mapping.
pub const STORE_BYTES: u64 = STORE_SLOTS * PAGE;
/// Bytes of the index mapping.
pub const INDEX_BYTES: u64 = STORE_SLOTS * 8;
/// Bytes of the mover's scratch area, the last pages of the index: a
/// batch table of system calls, then the arguments its calls point to.
pub const SCRATCH_BYTES: u64 = 16 * PAGE;
/// Slots of the trash: the stale copies of a reclaim are moved there,
/// run by run, and dropped with one `madvise` ([`Mm::reclaim_dead`]).
const TRASH_SLOTS: u64 = 8192;
/// The first slot of the trash, the last slots before the index's
/// scratch area. Never named in the index.
const TRASH: u64 = STORE_SLOTS - SCRATCH_BYTES / 8 - TRASH_SLOTS;
/// Slots below this one only: their index entries stay clear of the
/// scratch area, and the trash stays empty.
const SLOT_LIMIT: u64 = TRASH;
/// Most system calls in one batch of the mover.
const BATCH_MAX: usize = 512;
/// Bytes of a `struct uffdio_move`.
const MOVE_ARG: usize = 40;
/// Where in the scratch area a batch's arguments start.
const BATCH_ARGS: u64 = (BATCH_MAX * BATCH_ENTRY) as u64;

/// VMA name of the store.
pub const STORE_NAME: &str = "pagescope-store";
/// VMA name of the index.
pub const INDEX_NAME: &str = "pagescope-index";
/// VMA name of the mover's code page.
pub const MOVER_NAME: &str = "pagescope-mover";

/// Where the store and index are in the target.
#[derive(Clone, Debug)]
pub struct Store {
    /// Address of slot 0.
    pub base: u64,
    /// Address of the index.
    pub index: u64,
    /// Slots handed out so far (slot 0 is never used).
    pub next: u64,
    /// The count recorded in index entry 0: every slot ever used is
    /// below it.
    pub recorded: u64,
    /// Slots free for reuse.
    pub free: Vec<u64>,
}

impl Store {
    /// Address of a slot.
    pub fn addr(&self, slot: u64) -> u64 {
        self.base + slot * PAGE
    }

    /// Whether `addr` is inside the store.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr < self.base + STORE_BYTES
    }
}

/// What became of a page the tracer brought back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restored {
    /// Copied back from its slot.
    Copied,
    /// There was no page at the source.
    Nothing,
}

/// The mover of an address space, and what it needs to move pages.
#[derive(Debug)]
pub struct MoverRef {
    /// The attached mover, once the fault thread has it.
    pub mover: Option<Mover>,
    /// Its pid, from the injected `clone`.
    pub pid: u32,
    /// Address of its code (a `syscall` instruction).
    pub insn: u64,
    /// The program's userfaultfd descriptor number (the mover has a copy
    /// of the program's descriptor table).
    pub fd: i32,
    /// The index mapping's last [`SCRATCH_BYTES`], for system call
    /// arguments and batch tables.
    pub scratch: u64,
    /// Attaching it failed (the error is reported once).
    pub failed: bool,
}

/// One traced address space.
#[derive(Debug)]
pub struct Mm {
    /// Thread-group id of a process using it.
    pub pid: u32,
    /// The tracer's own descriptor for the target's userfaultfd.
    pub uffd: Arc<Uffd>,
    /// The store.
    pub store: Store,
    /// Evicted pages: page address to slot, ordered so that `munmap` and
    /// `mremap` find a range's pages without a scan of them all.
    pub evicted: BTreeMap<u64, u64>,
    /// Slots that still hold a stale copy: of a page that came back, or
    /// that the program dropped (unmapped or `MADV_DONTNEED` while
    /// evicted). The mover frees them in batches ([`Mm::reclaim_dead`]);
    /// a space without one frees them at its next memory system call.
    pub dead: Vec<u64>,
    /// The mover, if this space has one yet (a child after fork gets one
    /// at its first stop).
    pub mover: Option<MoverRef>,
    /// How pages leave the program.
    pub method: EvictMethod,
    /// Messages read from the userfaultfd while the mover waited, for the
    /// fault thread to handle next, in order.
    pub stash: Vec<Msg>,
    /// The mover's `/proc/PID/mem`, opened at first use (see
    /// [`Mm::space_mem`]).
    pub mem: Option<File>,
    /// The pages that hold the program's arguments and environment,
    /// found at its first set-up (see [`Mm::kept`]).
    pub kept: Option<(u64, u64)>,
    /// The procfs the process is read from.
    pub proc: PathBuf,
}

/// The errno of a failed system call's error (`None` for another error).
fn errno(e: &io::Error) -> Option<Errno> {
    Errno::from_io_error(e)
}

impl Mm {
    /// A space with nothing evicted yet, read from the procfs `proc`.
    pub fn new(
        pid: u32,
        uffd: Arc<Uffd>,
        store: Store,
        mover: Option<MoverRef>,
        method: EvictMethod,
        proc: &Path,
    ) -> Mm {
        Mm {
            pid,
            uffd,
            store,
            evicted: BTreeMap::new(),
            dead: Vec::new(),
            mover,
            method,
            stash: Vec::new(),
            mem: None,
            kept: None,
            proc: proc.to_path_buf(),
        }
    }

    /// The pages (start, end) that hold the program's arguments and
    /// environment, which pagescope never evicts. The kernel reads them
    /// for another process (`/proc/PID/cmdline` and `environ`, so `ps`,
    /// `pgrep -f`, `top`) and can't wait on a userfaultfd for a reader of
    /// another address space: were they away, those readers would see
    /// them empty for as long as the trace lasts. Kept resident, they
    /// never fault, so the program's own touches of them are not logged.
    /// From fields 48 to 51 of its stat (`arg_start` .. `env_end`);
    /// empty if they can't be read.
    pub fn kept(&mut self) -> (u64, u64) {
        let dir = ProcDir::at(&self.proc, self.pid);
        *self.kept.get_or_insert_with(|| {
            let stat = dir.stat(&mut Vec::new()).unwrap_or_default();
            let (arg_start, env_end) = (stat.arg_start, stat.env_end);
            if arg_start > 0 && env_end > arg_start {
                (arg_start & !(PAGE - 1), (env_end + PAGE - 1) & !(PAGE - 1))
            } else {
                (0, 0)
            }
        })
    }

    /// Whether the space's mover is attached.
    pub fn has_mover(&self) -> bool {
        self.mover.as_ref().is_some_and(|m| m.mover.is_some())
    }

    /// The pid through which this address space's memory is read and
    /// written: its mover's once there is one. The program's own pid
    /// names another address space from the moment it execs until the
    /// tracer has retired this one, and a write meant for the index
    /// must never land in the new image; the mover lives in this space
    /// until it is retired.
    pub fn mem_pid(&self) -> u32 {
        match &self.mover {
            Some(m) if m.mover.is_some() => m.pid,
            _ => self.pid,
        }
    }

    /// Runs `UFFDIO_MOVE` of one page in the mover. `Err(errno)` for a
    /// refusal; `EAGAIN` when the address space is changing.
    fn move_page(&self, dst: u64, src: u64) -> io::Result<std::result::Result<(), Errno>> {
        self.move_pages(dst, src, 1).map(|(_, r)| r)
    }

    /// Runs `UFFDIO_MOVE` of `n` pages in the mover: returns how many
    /// moved, and the refusal that stopped it short, if any.
    fn move_pages(
        &self,
        dst: u64,
        src: u64,
        n: u64,
    ) -> io::Result<(u64, std::result::Result<(), Errno>)> {
        let Some(m) = &self.mover else {
            return Ok((0, Err(Errno::NODEV)));
        };
        let Some(mover) = &m.mover else {
            return Ok((0, Err(Errno::NODEV)));
        };
        let mut arg = [0u8; 40];
        arg[0..8].copy_from_slice(&dst.to_ne_bytes());
        arg[8..16].copy_from_slice(&src.to_ne_bytes());
        arg[16..24].copy_from_slice(&(n * PAGE).to_ne_bytes());
        arg[24..32].copy_from_slice(&super::uffd::MOVE_MODE_DONTWAKE.to_ne_bytes());
        remote::write(self.mem_pid(), m.scratch, &arg)?;
        let r = mover.syscall(
            16, /* ioctl */
            [m.fd as u64, super::uffd::MOVE, m.scratch, 0, 0, 0],
        )?;
        if r >= 0 {
            return Ok((n, Ok(())));
        }
        let moved = if n == 1 {
            0
        } else {
            // The kernel reports the bytes it moved before it stopped
            // (or a negative error) in the argument's `move` field.
            let mut field = [0u8; 8];
            remote::read(self.mem_pid(), m.scratch + 32, &mut field)?;
            (i64::from_ne_bytes(field).max(0) as u64 / PAGE).min(n)
        };
        Ok((moved, Err(Errno::from_raw_os_error(-r as i32))))
    }

    /// Moves the `n` pages from `start` into `n` contiguous fresh slots of
    /// the store with one `UFFDIO_MOVE`; returns how many moved (from
    /// `start` on). Fewer than `n`: the page after the last moved one was
    /// refused, and is left for [`Mm::evict`] to try alone; 0 also when the
    /// store has no fresh run left (its freed slots are reused one by
    /// one).
    pub fn evict_run(&mut self, start: u64, n: u64) -> io::Result<u64> {
        if !self.has_mover() || self.store.next + n >= SLOT_LIMIT {
            return Ok(0);
        }
        let first = self.store.next;
        self.store.next += n;
        self.record_slots(first + n)?;
        let names: Vec<u8> = (0..n)
            .flat_map(|k| (start + k * PAGE).to_ne_bytes())
            .collect();
        if self.method == EvictMethod::Copy {
            let done = self.copy_out(start, n, first, &names)?;
            if done == Some(true) {
                for k in 0..n {
                    self.evicted.insert(start + k * PAGE, first + k);
                }
                return Ok(n);
            }
            // Left for `evict` to try one by one.
            self.store.free.extend(first..first + n);
            return Ok(0);
        }
        // The index names the pages before they move.
        self.write_indexes(first, &names)?;
        let (moved, r) = self.move_pages(self.store.addr(first), start, n)?;
        for k in 0..moved {
            self.evicted.insert(start + k * PAGE, first + k);
        }
        if moved < n {
            self.write_indexes(first + moved, &vec![0u8; ((n - moved) * 8) as usize])?;
            self.store.free.extend(first + moved..first + n);
            if let Err(e) = r {
                if !matches!(
                    e,
                    Errno::AGAIN | Errno::BUSY | Errno::INVAL | Errno::NOENT | Errno::EXIST
                ) {
                    return Err(e.into());
                }
            }
        }
        Ok(moved)
    }

    /// The moving method's eviction of many runs `(start, n)` at once:
    /// each run goes into fresh contiguous slots with one `UFFDIO_MOVE`,
    /// and all the moves run in one batch of the mover. Returns how many
    /// pages of each run moved (from its start); the rest are left for
    /// [`Mm::evict`] to try one by one, as after [`Mm::evict_run`]. All
    /// zero in the copying method or without a mover.
    pub fn evict_runs(&mut self, runs: &[(u64, u64)]) -> io::Result<Vec<u64>> {
        let mut moved = vec![0; runs.len()];
        if self.method != EvictMethod::Move || !self.has_mover() {
            return Ok(moved);
        }
        let mut at = 0;
        for chunk in runs.chunks(BATCH_MAX) {
            let pages: u64 = chunk.iter().map(|r| r.1).sum();
            if self.store.next + pages >= SLOT_LIMIT {
                break;
            }
            // Fresh slots, one run after the other: the index names them
            // all with one write, before anything moves.
            let first = self.store.next;
            self.store.next += pages;
            self.record_slots(first + pages)?;
            let names: Vec<u8> = chunk
                .iter()
                .flat_map(|&(start, n)| (0..n).map(move |k| start + k * PAGE))
                .flat_map(u64::to_ne_bytes)
                .collect();
            self.write_indexes(first, &names)?;
            let m = self.mover.as_ref().expect("checked above");
            let mover = m.mover.as_ref().expect("checked above");
            let mut args = vec![0u8; chunk.len() * MOVE_ARG];
            let mut calls = Vec::with_capacity(chunk.len());
            let mut slot = first;
            for (k, &(start, n)) in chunk.iter().enumerate() {
                let a = &mut args[k * MOVE_ARG..(k + 1) * MOVE_ARG];
                a[0..8].copy_from_slice(&self.store.addr(slot).to_ne_bytes());
                a[8..16].copy_from_slice(&start.to_ne_bytes());
                a[16..24].copy_from_slice(&(n * PAGE).to_ne_bytes());
                a[24..32].copy_from_slice(&super::uffd::MOVE_MODE_DONTWAKE.to_ne_bytes());
                let arg = m.scratch + BATCH_ARGS + (k * MOVE_ARG) as u64;
                calls.push((
                    16, /* ioctl */
                    [m.fd as u64, super::uffd::MOVE, arg, 0, 0, 0],
                ));
                slot += n;
            }
            let results = batch(m, mover, &calls, &args, &mut || Ok(true))?;
            if results.iter().any(|&r| r < 0) {
                // The kernel reports the bytes it moved before it stopped
                // (or a negative error) in each argument's `move` field.
                remote::read(m.pid, m.scratch + BATCH_ARGS, &mut args)?;
            }
            let mut slot = first;
            for (k, (&(start, n), r)) in chunk.iter().zip(results).enumerate() {
                let done = if r >= 0 {
                    n
                } else {
                    let field = &args[k * MOVE_ARG + 32..(k + 1) * MOVE_ARG];
                    let bytes = i64::from_ne_bytes(field.try_into().expect("8 bytes"));
                    (bytes.max(0) as u64 / PAGE).min(n)
                };
                for p in 0..done {
                    self.evicted.insert(start + p * PAGE, slot + p);
                }
                if done < n {
                    let rest = slot + done..slot + n;
                    self.write_indexes(rest.start, &vec![0u8; ((n - done) * 8) as usize])?;
                    self.store.free.extend(rest);
                    let e = Errno::from_raw_os_error(-r as i32);
                    if !matches!(
                        e,
                        Errno::AGAIN | Errno::BUSY | Errno::INVAL | Errno::NOENT | Errno::EXIST
                    ) {
                        return Err(e.into());
                    }
                }
                moved[at + k] = done;
                slot += n;
            }
            at += chunk.len();
        }
        Ok(moved)
    }

    fn write_indexes(&mut self, slot: u64, bytes: &[u8]) -> io::Result<()> {
        let addr = self.store.index + slot * 8;
        if let Some(mem) = self.space_mem() {
            if mem.write_all_at(bytes, addr).is_ok() {
                return Ok(());
            }
        }
        remote::write(self.mem_pid(), addr, bytes)
    }

    /// Reads the address space's memory at `addr` (a store slot) through
    /// [`Mm::space_mem`], or [`remote`] where that fails.
    fn read_space(&mut self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        if let Some(mem) = self.space_mem() {
            if mem.read_exact_at(buf, addr).is_ok() {
                return Ok(());
            }
        }
        remote::read(self.mem_pid(), addr, buf)
    }

    fn write_index(&mut self, slot: u64, value: u64) -> io::Result<()> {
        self.write_indexes(slot, &value.to_ne_bytes())
    }

    /// Keeps the count in index entry 0 at or above `used` (in steps of
    /// 512 slots), so `--release` and a forked child read every name.
    fn record_slots(&mut self, used: u64) -> io::Result<()> {
        if used > self.store.recorded {
            self.store.recorded = used.next_multiple_of(512).min(STORE_SLOTS);
            self.write_index(0, self.store.recorded)?;
        }
        Ok(())
    }

    fn alloc_slot(&mut self) -> io::Result<u64> {
        if let Some(s) = self.store.free.pop() {
            return Ok(s);
        }
        // The index's last pages are the mover's scratch area.
        if self.store.next >= SLOT_LIMIT {
            return Err(io::Error::other("the store of evicted pages is full"));
        }
        let s = self.store.next;
        self.store.next += 1;
        self.record_slots(s + 1)?;
        Ok(s)
    }

    /// Moves the page at `page` into the store. `Ok(false)`: the kernel
    /// would not let it go (locked, another protection, no
    /// mover yet), or it is gone; the page stays where it is.
    /// `Err(EAGAIN)`-like states come back as `Ok(None)`: try later.
    pub fn evict(&mut self, page: u64) -> io::Result<Option<bool>> {
        if !self.has_mover() {
            return Ok(Some(false));
        }
        let slot = self.alloc_slot()?;
        if self.method == EvictMethod::Copy {
            return self.copy_out_one(page, slot);
        }
        // The index names the page before it moves, so a tracer killed
        // between the two steps leaves nothing unaccounted for.
        self.write_index(slot, page)?;
        let r = self.move_page(self.store.addr(slot), page)?;
        match r {
            Ok(()) => {
                self.evicted.insert(page, slot);
                Ok(Some(true))
            }
            // Shared with another process since a fork (the kernel moves
            // only pages exclusive to this one): it leaves by copy.
            Err(Errno::BUSY) => {
                self.write_index(slot, 0)?;
                self.copy_out_one(page, slot)
            }
            Err(e) => {
                self.write_index(slot, 0)?;
                self.store.free.push(slot);
                match e {
                    Errno::AGAIN => Ok(None),
                    Errno::BUSY | Errno::INVAL | Errno::NOENT | Errno::EXIST => Ok(Some(false)),
                    e => Err(e.into()),
                }
            }
        }
    }

    /// [`Mm::copy_out`] of one page into `slot`, which is freed again if
    /// the page stays.
    fn copy_out_one(&mut self, page: u64, slot: u64) -> io::Result<Option<bool>> {
        let done = self.copy_out(page, 1, slot, &page.to_ne_bytes())?;
        if done == Some(true) {
            self.evicted.insert(page, slot);
        } else {
            self.store.free.push(slot);
        }
        Ok(done)
    }

    /// The copy method's eviction of the `n` pages from `start` into the
    /// fresh slots from `first` (also the moving method's, for a page
    /// shared since a fork, which the kernel won't move), whose index
    /// entries are `names`:
    /// `Some(true)` when they are out, `Some(false)` when they stay (the
    /// range changed, or the kernel won't drop them), `None` to try later.
    fn copy_out(
        &mut self,
        start: u64,
        n: u64,
        first: u64,
        names: &[u8],
    ) -> io::Result<Option<bool>> {
        let len = n * PAGE;
        // From here on a write waits for the fault thread: none can land
        // between the copy and the drop.
        match self.uffd.write_protect(start, len, true) {
            Ok(()) => {}
            Err(e) if errno(&e) == Some(Errno::AGAIN) => return Ok(None),
            Err(e) if matches!(errno(&e), Some(Errno::NOENT | Errno::INVAL)) => {
                return Ok(Some(false))
            }
            Err(e) => return Err(e),
        }
        let mut buf = vec![0u8; len as usize];
        if self.read_mem(start, &mut buf).is_err() {
            // Unmapped meanwhile (its event is not read yet).
            return Ok(Some(false));
        }
        if self.method == EvictMethod::Move {
            // The store is registered (for UFFDIO_MOVE): a plain write
            // would fault into the tracer's own handler and wait on it.
            self.uffd.copy(self.store.addr(first), &buf, false, true)?;
        } else {
            remote::write(self.mem_pid(), self.store.addr(first), &buf)?;
        }
        // The index names the pages once their copies are in place, and
        // before the originals go.
        self.write_indexes(first, names)?;
        let r = self.drop_pages(start, len)?;
        if r < 0 {
            self.write_indexes(first, &vec![0u8; names.len()])?;
            return Ok(Some(false));
        }
        Ok(Some(true))
    }

    /// Reads the program's memory through `/proc/PID/mem`, which (unlike
    /// `process_vm_readv`) reads pages the program can't (`PROT_NONE`).
    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        match self.space_mem() {
            Some(mem) => mem.read_exact_at(buf, addr),
            None => Err(io::Error::from_raw_os_error(
                rustix::io::Errno::SRCH.raw_os_error(),
            )),
        }
    }

    /// `/proc/PID/mem` of the mover, opened once it is attached and kept:
    /// it names this address space for as long as the file is open, and
    /// a read or write through it costs no lookup of the process and no
    /// access check (`process_vm_readv` and `process_vm_writev` pay both
    /// on every call, which on a machine with a security module's hook
    /// there costs more than the copy). `None` without a mover, or if it
    /// can't be opened; callers then use [`remote`], whose errors say why.
    fn space_mem(&mut self) -> Option<&File> {
        if self.mem.is_none() && self.has_mover() {
            self.mem = ProcDir::at(&self.proc, self.mem_pid()).mem().ok();
        }
        self.mem.as_ref()
    }

    /// Runs `madvise(MADV_DONTNEED)` of the registered `[start,
    /// start+len)` in the mover and returns its result (see
    /// [`Mm::drop_ranges`]).
    fn drop_pages(&mut self, start: u64, len: u64) -> io::Result<i64> {
        Ok(self.drop_ranges(&[(start, len)], true)?[0])
    }

    /// Unmaps the `n` pages of shared memory from `start` in this address
    /// space only, with one `madvise(MADV_DONTNEED)` in the mover: the
    /// pages stay in the page cache (nothing is copied, nothing can be
    /// lost), and the next touch of each is a minor fault. `false`: they
    /// stay (no mover yet, or the kernel refused: `mlock`ed).
    pub fn unmap_shared(&mut self, start: u64, n: u64) -> io::Result<bool> {
        if !self.has_mover() {
            return Ok(false);
        }
        Ok(self.drop_pages(start, n * PAGE)? >= 0)
    }

    /// Brings an evicted page back to `page`, write-protected if `wp`,
    /// waking the threads that wait on it if `wake` (with the copy itself,
    /// so a fault costs no separate wake). Returns how, or `None` if it
    /// wasn't evicted.
    ///
    /// In both methods the page is copied back (read from its slot,
    /// `UFFDIO_COPY` in): that takes a few microseconds, where a move
    /// back needs the mover, a ptrace round trip ten times as long
    /// (`UFFDIO_MOVE` is refused from outside the address space). The
    /// slot keeps a stale copy until [`Mm::reclaim_dead`] drops it.
    ///
    /// The slot's index entry is cleared after the copy, which may have
    /// let the program run on: until then it names a page that is
    /// present, which `--release` can't overwrite (`UFFDIO_COPY` refuses a
    /// page that is there). The program can make the page missing again
    /// only by `madvise`, `munmap` or `mremap`, each of which waits until
    /// its message is read; a killed pagescope reads none, and `--release`
    /// follows each one it reads (the page drops from its list, or moves
    /// with its range) before it copies anything back.
    pub fn bring_back(&mut self, page: u64, wp: bool, wake: bool) -> io::Result<Option<Restored>> {
        let Some(&slot) = self.evicted.get(&page) else {
            return Ok(None);
        };
        let mut buf = [0u8; PAGE as usize];
        self.read_space(self.store.addr(slot), &mut buf)?;
        // `Nothing`: already back (another fault filled it) or unmapped.
        let how = restore(&self.uffd, page, &buf, wp, !wake)?;
        super::hooks::die_here_for_tests("copied-back");
        self.evicted.remove(&page);
        self.write_index(slot, 0)?;
        self.dead.push(slot);
        Ok(Some(how))
    }

    /// Takes the pages `stored` ((slot, page), [`stored_pages`]) of a
    /// forked child's copy of the store as its evicted pages, except those
    /// that are there in the child: pages that had just come back when the
    /// parent forked, whose index entries (cleared after the copy that
    /// woke the thread) its copy of the index still held. Their slots hold
    /// stale copies: the child's entries for them are cleared and the
    /// slots freed later, so that no page is ever named by two of its
    /// entries (a new eviction of it would add one). Should the child's
    /// pagemap be unreadable (it is gone), every stored page counts.
    pub fn adopt_stored(&mut self, stored: Vec<(u64, u64)>) {
        let reader = ProcDir::at(&self.proc, self.mem_pid()).pagemap_reader(PAGE);
        let mut there = Vec::with_capacity(stored.len());
        match reader {
            Ok(mut reader) => {
                for &(_, page) in &stored {
                    let mut here = false;
                    let _ = reader.for_each(page, page + PAGE, |_, e| {
                        here = e.is_present() || e.is_in_swap();
                    });
                    there.push(here);
                }
            }
            Err(_) => there.resize(stored.len(), false),
        }
        for ((slot, page), here) in stored.into_iter().zip(there) {
            // An entry that can't be cleared stays, as every entry did
            // before: `--release` never copies over a page that is there.
            if here && self.write_index(slot, 0).is_ok() {
                self.dead.push(slot);
            } else {
                self.evicted.insert(page, slot);
            }
        }
    }

    /// For a page in the evicted map that took a write-protect fault:
    /// `true` if it is in fact in place (a child forked between the copy
    /// and the drop of an eviction), and then no longer counted evicted.
    pub fn keep_if_present(&mut self, page: u64) -> io::Result<bool> {
        let mut present = false;
        ProcDir::at(&self.proc, self.mem_pid())
            .pagemap_reader(PAGE)?
            .for_each(page, page + PAGE, |_, e| present = e.is_present())
            .map_err(|e| io::Error::other(e.to_string()))?;
        if !present {
            return Ok(false);
        }
        if let Some(slot) = self.evicted.remove(&page) {
            self.write_index(slot, 0)?;
            self.dead.push(slot);
        }
        Ok(true)
    }

    /// The program dropped `[start, end)`: evicted pages there are gone.
    pub fn forget(&mut self, start: u64, end: u64) -> io::Result<()> {
        let gone: Vec<(u64, u64)> = self
            .evicted
            .range(start..end)
            .map(|(&p, &s)| (p, s))
            .collect();
        for (p, s) in gone {
            self.evicted.remove(&p);
            self.write_index(s, 0)?;
            self.dead.push(s);
        }
        Ok(())
    }

    /// `mremap` moved `[from, from+len)` to `to`.
    pub fn remap(&mut self, from: u64, to: u64, len: u64) -> io::Result<()> {
        let moved: Vec<(u64, u64)> = self
            .evicted
            .range(from..from + len)
            .map(|(&p, &s)| (p, s))
            .collect();
        for &(p, _) in &moved {
            self.evicted.remove(&p);
        }
        for (p, s) in moved {
            let np = p - from + to;
            self.write_index(s, np)?;
            self.evicted.insert(np, s);
        }
        Ok(())
    }
}

/// Runs `calls` (system call number and arguments) in `mover` in one
/// batch, after writing `args` (what the calls point to) at the scratch
/// area's argument part; returns each call's result. At most
/// [`BATCH_MAX`] calls.
fn batch(
    m: &MoverRef,
    mover: &Mover,
    calls: &[(u64, [u64; 6])],
    args: &[u8],
    idle: &mut dyn FnMut() -> io::Result<bool>,
) -> io::Result<Vec<i64>> {
    debug_assert!(calls.len() <= BATCH_MAX);
    debug_assert!(BATCH_ARGS + args.len() as u64 <= SCRATCH_BYTES);
    let mut table = vec![0u8; calls.len() * BATCH_ENTRY];
    // A call the mover never ran reads as failed.
    let unrun = -i64::from(rustix::io::Errno::NOSYS.raw_os_error()) as u64;
    for (e, (nr, a)) in table.chunks_mut(BATCH_ENTRY).zip(calls) {
        let words = std::iter::once(nr).chain(a).chain(std::iter::once(&unrun));
        for (word, v) in e.chunks_mut(8).zip(words) {
            word.copy_from_slice(&v.to_ne_bytes());
        }
    }
    if !args.is_empty() {
        remote::write(m.pid, m.scratch + BATCH_ARGS, args)?;
    }
    remote::write(m.pid, m.scratch, &table)?;
    mover.batch(m.scratch, calls.len() as u64, idle)?;
    remote::read(m.pid, m.scratch, &mut table)?;
    Ok(table
        .chunks(BATCH_ENTRY)
        .map(|e| i64::from_ne_bytes(e[56..64].try_into().expect("8 bytes")))
        .collect())
}

/// The pages held in the store of `pid` (store at `store`, index at
/// `index`), as (slot, page address): every slot that holds a page (in
/// RAM or in swap) and is named in the index. This is the truth after a fork (the child's store
/// and index are copies made in one step) and after the tracer died.
/// `proc`: the procfs the process is read from.
pub fn stored_pages(proc: &Path, pid: u32, store: u64, index: u64) -> io::Result<Vec<(u64, u64)>> {
    let read = |at: u64, out: &mut [u64]| -> io::Result<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(out);
        for (i, chunk) in bytes.chunks_mut(1 << 20).enumerate() {
            remote::read(pid, at + (i << 20) as u64, chunk)?;
        }
        Ok(())
    };
    let mut high = [0u64];
    read(index, &mut high)?;
    let slots = high[0].clamp(1, STORE_SLOTS);
    let mut names = vec![0u64; slots as usize];
    read(index, &mut names)?;
    // Only slots that hold a page, in RAM or in swap (a page moved out
    // of swap moves as its swap entry): an empty one may be named by an
    // eviction that never happened (the tracer died, or the process
    // forked, between the index write and the move).
    let mut present = Vec::new();
    ProcDir::at(proc, pid)
        .pagemap_reader(PAGE)?
        .for_each(store, store + slots * PAGE, |addr, e| {
            if e.is_present() || e.is_in_swap() {
                present.push((addr - store) / PAGE);
            }
        })
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(present
        .into_iter()
        .filter(|&slot| slot > 0 && names[slot as usize] != 0)
        .map(|slot| (slot, names[slot as usize]))
        .collect())
}

/// Copies the page in store slot `slot_addr` back to `page` (no wake),
/// write-protected if `wp`; `Restored::Nothing` if the page was there
/// already or is no longer mapped. Works from any process: `UFFDIO_COPY`, unlike
/// `UFFDIO_MOVE`, accepts a caller outside the address space.
pub fn copy_back(
    uffd: &Uffd,
    pid: u32,
    slot_addr: u64,
    page: u64,
    wp: bool,
) -> io::Result<Restored> {
    let mut buf = [0u8; PAGE as usize];
    remote::read(pid, slot_addr, &mut buf)?;
    restore(uffd, page, &buf, wp, true)
}

/// Copies `data`, an evicted page's contents, back to `page` (waking its
/// waiters unless `dontwake`), write-protected if `wp`;
/// `Restored::Nothing` if the page was there already or is no longer
/// mapped.
fn restore(uffd: &Uffd, page: u64, data: &[u8], wp: bool, dontwake: bool) -> io::Result<Restored> {
    Ok(match copy_in(uffd, page, data, wp, dontwake)? {
        Fill::Filled => Restored::Copied,
        Fill::Exists | Fill::Gone => Restored::Nothing,
    })
}

/// What `UFFDIO_COPY` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// The page was missing and is now filled.
    Filled,
    /// The page was already there (another thread's fault filled it).
    Exists,
    /// The range is no longer mapped; the waiters were woken.
    Gone,
}

/// `UFFDIO_COPY` of one page.
pub fn copy_in(uffd: &Uffd, page: u64, data: &[u8], wp: bool, dontwake: bool) -> io::Result<Fill> {
    match uffd.copy(page, data, wp, dontwake) {
        Ok(()) => Ok(Fill::Filled),
        Err(e) if errno(&e) == Some(Errno::EXIST) => Ok(Fill::Exists),
        Err(e) if errno(&e) == Some(Errno::NOENT) => {
            uffd.wake(page, PAGE)?;
            Ok(Fill::Gone)
        }
        Err(e) => Err(e),
    }
}
