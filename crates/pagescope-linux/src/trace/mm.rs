//! One traced address space: its userfaultfd, its store of evicted pages,
//! and the operations that move pages out of and back into the program.
//!
//! The store is a private anonymous mapping inside the target, reserved
//! with `MAP_NORESERVE` and named `[anon:pagescope-store]`. An evicted page
//! is moved (`UFFDIO_MOVE`, no copy) into a free slot of the store; the
//! fault that follows moves it back. Next to it, `[anon:pagescope-index]`
//! holds, for each slot, the address of the page in it, written *before*
//! the page moves; so if the tracer dies, `pagescope trace --release`
//! finds every page that is away and puts it back. Index entry 0 holds the
//! number of slots ever used.

use super::ptrace::Mover;
use super::uffd::Uffd;
use nix::errno::Errno;
use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::io::{self, IoSlice, IoSliceMut};
use std::sync::Arc;

/// Bytes per page (x86_64).
pub const PAGE: u64 = 4096;
/// Slots in a store: 256 GiB of address space, none of it reserved.
pub const STORE_SLOTS: u64 = 1 << 26;
/// Bytes of the store mapping.
pub const STORE_BYTES: u64 = STORE_SLOTS * PAGE;
/// Bytes of the index mapping.
pub const INDEX_BYTES: u64 = STORE_SLOTS * 8;
/// VMA name of the store.
pub const STORE_NAME: &str = "pagescope-store";
/// VMA name of the index.
pub const INDEX_NAME: &str = "pagescope-index";

/// Where the store and index are in the target.
#[derive(Clone, Debug)]
pub struct Store {
    /// Address of slot 0.
    pub base: u64,
    /// Address of the index.
    pub index: u64,
    /// Slots handed out so far (slot 0 is never used: its index entry
    /// holds this count).
    pub next: u64,
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

/// What became of a page the tracer tried to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restored {
    /// Moved without a copy.
    Moved,
    /// The kernel refused the move (page shared after fork, or a
    /// protection that differs from the store's); the content was copied.
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
    /// A page of the index mapping for ioctl arguments.
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
    /// Slots that still hold a page the program has dropped (unmapped or
    /// `MADV_DONTNEED` while evicted); freed at the next system call stop.
    pub dead: Vec<u64>,
    /// The mover, if this space has one yet (a child after fork gets one
    /// at its first system call).
    pub mover: Option<MoverRef>,
}

fn errno(e: &io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(0))
}

impl Mm {
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
            return Ok((0, Err(Errno::ENODEV)));
        };
        let Some(mover) = &m.mover else {
            return Ok((0, Err(Errno::ENODEV)));
        };
        let mut arg = [0u8; 40];
        arg[0..8].copy_from_slice(&dst.to_ne_bytes());
        arg[8..16].copy_from_slice(&src.to_ne_bytes());
        arg[16..24].copy_from_slice(&(n * PAGE).to_ne_bytes());
        arg[24..32].copy_from_slice(&super::uffd::MOVE_MODE_DONTWAKE.to_ne_bytes());
        process_vm_writev(
            Pid::from_raw(self.pid as i32),
            &[IoSlice::new(&arg)],
            &[RemoteIoVec {
                base: m.scratch as usize,
                len: arg.len(),
            }],
        )?;
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
            process_vm_readv(
                Pid::from_raw(self.pid as i32),
                &mut [IoSliceMut::new(&mut field)],
                &[RemoteIoVec {
                    base: m.scratch as usize + 32,
                    len: 8,
                }],
            )?;
            (i64::from_ne_bytes(field).max(0) as u64 / PAGE).min(n)
        };
        Ok((moved, Err(Errno::from_raw(-r as i32))))
    }

    /// Moves the `n` pages from `start` into `n` contiguous fresh slots of
    /// the store with one `UFFDIO_MOVE`; returns how many moved (from
    /// `start` on). Fewer than `n`: the page after the last moved one was
    /// refused, and is left for [`Mm::evict`] to try alone; 0 also when the
    /// store has no fresh run left (its freed slots are reused one by
    /// one).
    pub fn evict_run(&mut self, start: u64, n: u64) -> io::Result<u64> {
        if self.mover.as_ref().is_none_or(|m| m.mover.is_none())
            || self.store.next + n >= STORE_SLOTS - PAGE / 8
        {
            return Ok(0);
        }
        let first = self.store.next;
        self.store.next += n;
        if first / 512 != (first + n) / 512 || first % 512 == 0 {
            // Keep the recorded high-water mark ahead of every used slot.
            self.write_index(0, (first + n).next_multiple_of(512).min(STORE_SLOTS))?;
        }
        // The index names the pages before they move.
        let names: Vec<u8> = (0..n)
            .flat_map(|k| (start + k * PAGE).to_ne_bytes())
            .collect();
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
                    Errno::EAGAIN | Errno::EBUSY | Errno::EINVAL | Errno::ENOENT | Errno::EEXIST
                ) {
                    return Err(e.into());
                }
            }
        }
        Ok(moved)
    }

    fn write_indexes(&self, slot: u64, bytes: &[u8]) -> io::Result<()> {
        process_vm_writev(
            Pid::from_raw(self.pid as i32),
            &[IoSlice::new(bytes)],
            &[RemoteIoVec {
                base: (self.store.index + slot * 8) as usize,
                len: bytes.len(),
            }],
        )?;
        Ok(())
    }

    fn write_index(&self, slot: u64, value: u64) -> io::Result<()> {
        self.write_indexes(slot, &value.to_ne_bytes())
    }

    fn alloc_slot(&mut self) -> io::Result<u64> {
        if let Some(s) = self.store.free.pop() {
            return Ok(s);
        }
        // The index's last page is the mover's scratch page.
        if self.store.next >= STORE_SLOTS - PAGE / 8 {
            return Err(io::Error::other("the store of evicted pages is full"));
        }
        let s = self.store.next;
        self.store.next += 1;
        if s % 512 == 0 {
            // Keep the recorded high-water mark ahead of every used slot.
            self.write_index(0, (s + 512).min(STORE_SLOTS))?;
        }
        Ok(s)
    }

    /// Moves the page at `page` into the store. `Ok(false)`: the kernel
    /// would not let it go (shared after fork, another protection, no
    /// mover yet), or it is gone; the page stays where it is.
    /// `Err(EAGAIN)`-like states come back as `Ok(None)`: try later.
    pub fn evict(&mut self, page: u64) -> io::Result<Option<bool>> {
        if self.mover.as_ref().is_none_or(|m| m.mover.is_none()) {
            return Ok(Some(false));
        }
        let slot = self.alloc_slot()?;
        // The index names the page before it moves, so a tracer killed
        // between the two steps leaves nothing unaccounted for.
        self.write_index(slot, page)?;
        let r = self.move_page(self.store.addr(slot), page)?;
        match r {
            Ok(()) => {
                self.evicted.insert(page, slot);
                Ok(Some(true))
            }
            Err(e) => {
                self.write_index(slot, 0)?;
                self.store.free.push(slot);
                match e {
                    Errno::EAGAIN => Ok(None),
                    Errno::EBUSY | Errno::EINVAL | Errno::ENOENT | Errno::EEXIST => Ok(Some(false)),
                    e => Err(e.into()),
                }
            }
        }
    }

    /// Brings an evicted page back to `page` without waking the waiters;
    /// write-protected if `wp`. Returns how, or `None` if it wasn't evicted.
    pub fn bring_back(&mut self, page: u64, wp: bool) -> io::Result<Option<Restored>> {
        let Some(&slot) = self.evicted.get(&page) else {
            return Ok(None);
        };
        let from = self.store.addr(slot);
        let how = match self.move_page(page, from)? {
            Ok(()) => Restored::Moved,
            Err(Errno::ENOENT) => Restored::Nothing,
            Err(Errno::EEXIST) => {
                // Already back (another fault filled it): the slot keeps
                // its copy until it is dropped.
                self.evicted.remove(&page);
                self.write_index(slot, 0)?;
                self.dead.push(slot);
                return Ok(Some(Restored::Nothing));
            }
            Err(Errno::EAGAIN) => return Err(Errno::EAGAIN.into()),
            // Shared after fork, no mover, or no MOVE: copy it.
            Err(_) => copy_back(&self.uffd, self.pid, from, page, wp)?,
        };
        self.evicted.remove(&page);
        match how {
            Restored::Moved | Restored::Nothing => self.store.free.push(slot),
            // The slot still holds the original; it is dropped at the
            // next system call stop.
            Restored::Copied => {
                self.write_index(slot, 0)?;
                self.dead.push(slot);
            }
        }
        if wp && how == Restored::Moved {
            match self.uffd.write_protect(page, PAGE, true) {
                // The address space is changing: the page stays writable,
                // and a write to it before its next eviction goes unseen.
                Err(e) if errno(&e) == Errno::EAGAIN => {}
                r => r?,
            }
        }
        Ok(Some(how))
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

/// Copies the page in store slot `slot_addr` back to `page` (no wake),
/// write-protected if `wp`. Works from any process: `UFFDIO_COPY`, unlike
/// `UFFDIO_MOVE`, accepts a caller outside the address space.
pub fn copy_back(
    uffd: &Uffd,
    pid: u32,
    slot_addr: u64,
    page: u64,
    wp: bool,
) -> io::Result<Restored> {
    let mut buf = [0u8; PAGE as usize];
    let n = process_vm_readv(
        Pid::from_raw(pid as i32),
        &mut [IoSliceMut::new(&mut buf)],
        &[RemoteIoVec {
            base: slot_addr as usize,
            len: PAGE as usize,
        }],
    )?;
    if n != PAGE as usize {
        return Err(io::Error::other("short read of a stored page"));
    }
    copy_in(uffd, page, &buf, wp, true)?;
    Ok(Restored::Copied)
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
        Err(e) if errno(&e) == Errno::EEXIST => Ok(Fill::Exists),
        Err(e) if errno(&e) == Errno::ENOENT => {
            uffd.wake(page, PAGE)?;
            Ok(Fill::Gone)
        }
        Err(e) => Err(e),
    }
}
