//! Following an address space at the program's system calls: a new
//! mapping is registered (and emptied if it came populated), the heap
//! grows, store slots of dropped pages are freed; at an exec the new image
//! is set up, and at a process's exit the residency of its file mappings
//! is logged.

use super::Ptracer;
use crate::procfs::ProcDir;
use crate::trace::descriptors::inject;
use crate::trace::mm::PAGE;
use crate::trace::os::{
    sys, MADV_DONTNEED, MAP_ANONYMOUS, MAP_GROWSDOWN, MAP_POPULATE, MAP_PRIVATE, MAP_SHARED,
    MAP_STACK,
};
use crate::trace::ptrace::{self as pt, nr, Injector};
use crate::trace::state::{maps_of, MapRange, State};
use crate::trace::uffd::{self};
use pagescope_core::evict;
use pagescope_core::parse;
use pagescope_core::trace::{Mapping, MappingKind, ProcessEventKind, Residency};
use pagescope_core::Result;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

impl Ptracer {
    pub(super) fn on_syscall_exit(
        &mut self,
        tid: u32,
        nr_: u64,
        args: [u64; 6],
        ret: i64,
    ) -> Result<()> {
        let ts = self.threads[&tid];
        if nr_ == nr::EXECVE || nr_ == nr::EXECVEAT {
            if ret != 0 {
                return Ok(());
            }
            let old = ts.space;
            let key = self.attach_space(tid, false)?;
            if let Some(t) = self.threads.get_mut(&tid) {
                t.space = Some(key);
            }
            if let Some(old) = old {
                if !self.threads.values().any(|t| t.space == Some(old)) {
                    self.retire(old);
                }
            }
            let command = ProcDir::at(&self.proc, tid)
                .cmdline(&mut Vec::new())
                .unwrap_or_default();
            let mut st = self.shared.lock();
            st.event(ts.tgid, ProcessEventKind::Exec { command })?;
            return Ok(());
        }
        let Some(key) = ts.space else { return Ok(()) };
        if ret < 0 && ret > -4096 {
            return Ok(());
        }
        match nr_ {
            nr::MMAP => {
                let (len, prot, flags) = (args[1], args[2], args[3]);
                let start = ret as u64;
                let end = start + page_up(len);
                if flags & MAP_ANONYMOUS != 0 && flags & MAP_PRIVATE != 0 && flags & MAP_SHARED == 0
                {
                    let kind = if flags & (MAP_STACK | MAP_GROWSDOWN) != 0 {
                        MappingKind::Stack
                    } else {
                        MappingKind::Anonymous
                    };
                    self.add_mapping(key, start, end, kind, prot, flags & MAP_POPULATE != 0)?;
                } else if flags & MAP_SHARED != 0 {
                    self.add_shared(key, start, Some(end), flags & MAP_POPULATE != 0)?;
                }
            }
            nr::SHMAT => self.add_shared(key, ret as u64, None, false)?,
            nr::BRK => self.grow_heap(key, ret as u64)?,
            _ => {}
        }
        if matches!(
            nr_,
            nr::MUNMAP | nr::MADVISE | nr::MREMAP | nr::BRK | nr::MMAP
        ) {
            self.free_dead_slots(tid, key)?;
        }
        Ok(())
    }

    /// Registers a new private anonymous mapping found at a syscall exit.
    fn add_mapping(
        &mut self,
        key: u32,
        start: u64,
        end: u64,
        kind: MappingKind,
        prot: u64,
        populated: bool,
    ) -> Result<()> {
        let mut st = self.shared.lock();
        let Some(space) = st.spaces.get(&key) else {
            return Ok(());
        };
        let pid = space.mm.pid;
        let u = space.mm.uffd.clone();
        let traced = u
            .register(start, end - start, uffd::MODE_MISSING_WP)
            .is_ok();
        let line = parse::maps::MapsLine {
            start,
            end,
            perms: perms_of(prot),
            ..Default::default()
        };
        let id = st.new_mapping(pid, &line, kind, traced)?;
        let range = MapRange {
            end,
            id,
            shared: false,
        };
        self.insert_range(st, key, start, range, traced && populated)
    }

    /// Enters a new mapping in the fault thread's table; with `empty`,
    /// has the fault thread move its resident pages out and waits until
    /// it has.
    fn insert_range(
        &self,
        mut st: MutexGuard<'_, State>,
        key: u32,
        start: u64,
        range: MapRange,
        empty: bool,
    ) -> Result<()> {
        let space = st.spaces.get_mut(&key).expect("space exists");
        space.maps.insert(start, range);
        if empty {
            space.pending_empty.push((start, range.end, range.shared));
            space.ready.store(false, Ordering::SeqCst);
            let ready = space.ready.clone();
            drop(st);
            self.wait_ready(&ready)?;
        }
        Ok(())
    }

    /// Registers a new shared mapping at `start` found at a syscall exit
    /// (to `end`, or with `None` the end of its VMA) if it is shared
    /// memory; other shared mappings (regular files) are left alone.
    fn add_shared(
        &mut self,
        key: u32,
        start: u64,
        end: Option<u64>,
        populated: bool,
    ) -> Result<()> {
        let mut st = self.shared.lock();
        let Some(space) = st.spaces.get(&key) else {
            return Ok(());
        };
        if !st.shmem {
            return Ok(());
        }
        let pid = space.mm.pid;
        let u = space.mm.uffd.clone();
        let vma_at = || -> Result<Option<parse::maps::MapsLine>> {
            Ok(maps_of(&self.proc, pid)?
                .into_iter()
                .find(|l| l.start <= start && start < l.end))
        };
        // A regular file is refused by the kernel before maps is read.
        let (end, vma) = match end {
            Some(end) => (end, None),
            None => match vma_at()? {
                Some(v) => (v.end, Some(v)),
                None => return Ok(()),
            },
        };
        if !u
            .register_shared(start, end - start)
            .map_err(|e| sys("UFFDIO_REGISTER (shared memory)", e))?
        {
            return Ok(());
        }
        let Some(vma) = vma.map_or_else(vma_at, |v| Ok(Some(v)))? else {
            return Ok(());
        };
        let end = end.min(vma.end);
        let line = parse::maps::MapsLine {
            start,
            end,
            offset: vma.offset + (start - vma.start),
            ..vma
        };
        let id = st.new_mapping(pid, &line, MappingKind::Shared, true)?;
        let range = MapRange {
            end,
            id,
            shared: true,
        };
        self.insert_range(st, key, start, range, populated)
    }

    fn grow_heap(&mut self, key: u32, new_end: u64) -> Result<()> {
        let mut st = self.shared.lock();
        let Some(space) = st.spaces.get(&key) else {
            return Ok(());
        };
        let Some((id, start, end)) = space.heap else {
            return Ok(());
        };
        let (from, to) = (page_up(end), page_up(new_end));
        let pid = space.mm.pid;
        let u = space.mm.uffd.clone();
        if to > from {
            let traced = u.register(from, to - from, uffd::MODE_MISSING_WP).is_ok();
            let id = if id == u32::MAX {
                let line = parse::maps::MapsLine {
                    start,
                    end: to,
                    perms: "rw-p".into(),
                    path: "[heap]".into(),
                    ..Default::default()
                };
                st.new_mapping(pid, &line, MappingKind::Heap, traced)?
            } else {
                st.write_mapping(&Mapping {
                    id,
                    pid,
                    start,
                    end: to,
                    perms: "rw-p".into(),
                    offset: 0,
                    path: "[heap]".into(),
                    inode: 0,
                    dev: 0,
                    kind: MappingKind::Heap,
                    traced,
                })?;
                id
            };
            let space = st.spaces.get_mut(&key).expect("space exists");
            space.maps.insert(
                start,
                MapRange {
                    end: to,
                    id,
                    shared: false,
                },
            );
            space.heap = Some((id, start, new_end));
        } else if let Some(space) = st.spaces.get_mut(&key) {
            space.heap = Some((id, start, new_end.max(start)));
        }
        Ok(())
    }

    /// Frees store slots whose pages the program dropped, by running
    /// `madvise(MADV_DONTNEED)` in the stopped thread: for a space with
    /// no mover (whose mover would free them in batches, see
    /// [`Mm::reclaim_dead`]).
    fn free_dead_slots(&mut self, tid: u32, key: u32) -> Result<()> {
        let (mut dead, base) = {
            let mut st = self.shared.lock();
            let Some(space) = st.spaces.get_mut(&key) else {
                return Ok(());
            };
            if space.mm.has_mover() {
                return Ok(());
            }
            (std::mem::take(&mut space.mm.dead), space.mm.store.base)
        };
        if dead.is_empty() {
            return Ok(());
        }
        dead.sort_unstable();
        let mut inj = Injector::new(tid, None).map_err(|e| sys("ptrace GETREGS", e))?;
        // Parked meanwhile, as every injection (there is no code page);
        // without a vDSO, at the thread's own `syscall` as before.
        if let Ok(Some(boot)) = pt::vdso_bootstrap(tid) {
            inj.park_in_vdso(tid, boot)
                .map_err(|e| sys("writing the parking record", e))?;
        }
        for run in evict::neighbour_runs(&dead, 1, usize::MAX) {
            let (first, len) = (dead[run.start], run.len() as u64);
            let args = [base + first * PAGE, len * PAGE, MADV_DONTNEED, 0, 0, 0];
            let r = inject(&mut inj, nr::MADVISE, args)?;
            if r < 0 {
                let _ = inj.finish();
                return Err(sys(
                    "madvise of freed store slots",
                    std::io::Error::from_raw_os_error(-r as i32),
                ));
            }
        }
        inj.finish().map_err(|e| sys("ptrace SETREGS", e))?;
        let mut st = self.shared.lock();
        if let Some(space) = st.spaces.get_mut(&key) {
            space.mm.store.free.extend(dead);
        }
        Ok(())
    }

    pub(super) fn on_exit_event(&mut self, tid: u32) -> Result<()> {
        let ts = self.threads[&tid];
        if tid != ts.tgid {
            return Ok(());
        }
        // Residency of the file mappings, which the trace can't hold.
        let Ok(lines) = maps_of(&self.proc, tid) else {
            return Ok(());
        };
        let Ok(mut reader) = ProcDir::at(&self.proc, tid).pagemap_reader(PAGE) else {
            return Ok(());
        };
        let mut st = self.shared.lock();
        // The frames and mappings of its pages, while they can be read.
        st.sink.exiting(tid, &mut |page| {
            let mut pfn = None;
            let _ = reader.for_each(page, page + PAGE, |_, e| {
                pfn = e.pfn().filter(|_| e.is_present()).map(|p| p.0);
            });
            let vma = lines
                .iter()
                .find(|l| l.start <= page && page < l.end)
                .map(|l| (l.start, l.end));
            (pfn, vma)
        });
        // Shared memory that is traced has its references instead.
        let traced: HashSet<u64> = ts
            .space
            .and_then(|k| st.spaces.get(&k))
            .map(|s| {
                s.maps
                    .iter()
                    .filter(|(_, r)| r.shared)
                    .map(|(&a, _)| a)
                    .collect()
            })
            .unwrap_or_default();
        for line in lines
            .iter()
            .filter(|l| l.inode != 0 && l.path.starts_with('/') && !traced.contains(&l.start))
        {
            let mut resident = 0;
            let _ = reader.for_each(line.start, line.end, |_, e| {
                if e.is_present() {
                    resident += 1;
                }
            });
            let id = st.new_mapping(tid, line, MappingKind::File, false)?;
            st.sink.residency(&Residency {
                mapping: id,
                pages: (line.end - line.start) / PAGE,
                resident,
            })?;
        }
        Ok(())
    }
}

/// The maps-style permissions of a private mapping with `mmap` protection
/// `prot`.
fn perms_of(prot: u64) -> String {
    let bit = |b: u64, c: char| if prot & b != 0 { c } else { '-' };
    format!("{}{}{}p", bit(1, 'r'), bit(2, 'w'), bit(4, 'x'))
}

fn page_up(v: u64) -> u64 {
    (v + PAGE - 1) & !(PAGE - 1)
}
