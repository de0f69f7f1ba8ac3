//! The tracer: a ptrace thread that follows the program's processes,
//! system calls and address spaces, and a fault thread that serves the
//! userfaultfds, keeps the pool, and logs references.
//!
//! New mappings are found at syscall-exit stops (`PTRACE_SYSCALL`), where
//! the thread that made the mapping is stopped: the range is registered
//! before any thread can learn its address. A seccomp filter would stop
//! only on the memory system calls, but once no tracer listens it makes
//! them fail with `ENOSYS` and can never be removed; plain syscall stops
//! cost two stops per system call instead, and a tracer that dies leaves
//! the program running normally.

use super::holder::Holder;
use super::leftover::Leftover;
use super::mm::{
    self, Mm, MoverRef, Restored, Store, INDEX_BYTES, INDEX_NAME, MOVER_NAME, PAGE, SCRATCH_BYTES,
    STORE_BYTES, STORE_NAME,
};
use super::ptrace::{self as pt, nr, Injector, Mover};
use super::uffd::{self, Msg, Uffd};
use crate::pagemap::PagemapReader;
use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use pagescope_core::format::TraceWriter;
use pagescope_core::parse;
use pagescope_core::sample;
use pagescope_core::trace::{
    EvictMethod, Mapping, MappingKind, ProcessEvent, ProcessEventKind, Ref, Residency, TraceEnd,
    TraceHeader,
};
use pagescope_core::{Error, Result};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What to trace and where to write.
#[derive(Clone, Debug)]
pub struct TraceConfig {
    /// The program traced.
    pub target: Target,
    /// Pages in the pool.
    pub pool_pages: u64,
    /// The trace file.
    pub output: PathBuf,
    /// How pages are evicted: see [`evict_method`].
    pub evict: EvictMethod,
    /// Reference times are stored rounded down to a multiple of this.
    pub time_resolution_ns: u32,
    /// Runs the launched program and the thread that serves its faults on
    /// this one CPU (see [`pin`]).
    pub cpu: Option<usize>,
}

/// The program a tracer follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A command (program and arguments) launched by the tracer.
    Launch(Vec<String>),
    /// A running process, attached with its threads (its exit status is
    /// still reported, though it is its parent's); processes it forks
    /// from then on are followed, the ones it forked before are not.
    Attach(u32),
}

impl Target {
    /// The command line: the launched one (an error if its program can't
    /// be run), or the attached process's (an error if there is none).
    fn command(&self) -> Result<Vec<String>> {
        match self {
            Target::Launch(argv) => {
                pt::resolve(&argv[0]).map_err(|e| sys("cannot run", e))?;
                Ok(argv.clone())
            }
            Target::Attach(pid) => std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| parse::cmdline(&b))
                .map_err(|e| {
                    let e = if e.kind() == std::io::ErrorKind::NotFound {
                        std::io::Error::new(e.kind(), "no such process")
                    } else {
                        e
                    };
                    sys(&format!("cannot attach to process {pid}"), e)
                }),
        }
    }
}

/// Counts the tracer keeps while it runs; readable from another thread.
#[derive(Debug, Default)]
pub struct Counts {
    /// References logged.
    pub references: AtomicU64,
    /// Of which writes.
    pub writes: AtomicU64,
    /// Pages evicted from the pool.
    pub evictions: AtomicU64,
    /// Pages that could not be evicted.
    pub unevictable: AtomicU64,
    /// Bytes of trace written.
    pub bytes: AtomicU64,
}

/// How a trace ended.
#[derive(Debug)]
pub struct TraceOutcome {
    /// The end record written.
    pub end: TraceEnd,
    /// Writes among the references.
    pub writes: u64,
    /// Size of the trace file.
    pub bytes: u64,
    /// The program's exit status (code, or 128 + signal), or `None` if it
    /// was detached and runs on.
    pub exit_status: Option<i32>,
}

fn sys(what: &str, e: impl Into<std::io::Error>) -> Error {
    Error::io(what, e.into())
}

fn now_mono() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// A page the sampled program faulted in since the last boundary (the
/// `fault` backend of `record`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampled {
    /// Process (thread-group id).
    pub pid: u32,
    /// Page address.
    pub page: u64,
    /// Whether the fault was a write.
    pub write: bool,
    /// How many pages this one stands for: `1 / FRACTION` for a page of
    /// the fixed random sample of `--sample FRACTION` that came back or
    /// was touched for the first time, 1 for any other (a write to a page
    /// in place, or shared memory mapped here for the first time).
    pub weight: f64,
    /// Its frame, read when its process exits before the boundary (whose
    /// pagemap can't be read any more then); `None` while it lives.
    pub pfn: Option<u64>,
    /// The mapping that held it, read with its frame.
    pub vma: Option<(u64, u64)>,
}

/// A traced mapping in the fault thread's lookup table.
#[derive(Clone, Copy, Debug)]
struct MapRange {
    end: u64,
    id: u32,
    /// Shared memory: its pages leave by being unmapped here (they stay
    /// in the page cache) and come back with `UFFDIO_CONTINUE`.
    shared: bool,
}

impl MapRange {
    /// The range of a maps line, logged as mapping `id`.
    fn of(line: &parse::maps::MapsLine, id: u32, shared: bool) -> MapRange {
        MapRange {
            end: line.end,
            id,
            shared,
        }
    }
}

/// The pool: FIFO over every traced address space. Entries of pages that
/// left by other means (unmapped) are skipped when they reach the front.
#[derive(Debug, Default)]
struct Pool {
    cap: usize,
    fifo: VecDeque<(u32, u64, u64)>,
    /// (mm, page) -> (generation, writable)
    live: HashMap<(u32, u64), (u64, bool)>,
    gen: u64,
}

/// A child address space announced by `UFFD_EVENT_FORK`, waiting for the
/// ptrace thread to learn its pid.
#[derive(Debug)]
struct PendingFork {
    uffd: Arc<Uffd>,
    store: Store,
    maps: BTreeMap<u64, MapRange>,
    heap: Option<(u32, u64, u64)>,
}

#[derive(Debug)]
struct Space {
    mm: Mm,
    maps: BTreeMap<u64, MapRange>,
    /// Heap mapping id, start, current end.
    heap: Option<(u32, u64, u64)>,
    /// Ranges registered by the ptrace thread whose resident pages the
    /// fault thread must move out, and whether each is shared memory.
    pending_empty: Vec<(u64, u64, bool)>,
    /// Set by the fault thread when the mover is attached and the pending
    /// ranges are empty; the ptrace thread waits for it before letting the
    /// program run.
    ready: Arc<AtomicBool>,
}

struct State {
    spaces: HashMap<u32, Space>,
    next_space: u32,
    pool: Pool,
    /// The trace file; `None` when sampling for `record`, whose faults go
    /// to `sampled` instead.
    writer: Option<TraceWriter<File>>,
    pending: Vec<Ref>,
    sampled: Vec<Sampled>,
    /// Pages of the sample out of the program (moved by a boundary, or
    /// when their mapping was registered with a fraction below one), and
    /// the fraction sampled.
    moved_out: HashSet<(u32, u64)>,
    fraction: f64,
    last_flush: Instant,
    next_mapping: u32,
    start_mono: u64,
    forks: HashMap<u32, VecDeque<PendingFork>>,
    /// Spaces gone (exit, exec) whose movers the fault thread must end.
    retired: Vec<Space>,
    /// Movers killed but not yet reaped (see [`Mover::kill_nowait`]).
    dying: Vec<Pid>,
    /// What the release left in each program (its mover ended), for the
    /// ptrace thread to remove.
    reap: Vec<Leftover>,
    failure: Option<String>,
    zero: Box<[u8; PAGE as usize]>,
    /// How pages leave the program.
    method: EvictMethod,
    /// The kernel can trace shared memory ([`uffd::FEATURES_SHMEM`]).
    shmem: bool,
    /// `UFFDIO_CONTINUE` can write-protect as it maps (Linux 6.4); until
    /// the kernel refuses, it is assumed.
    continue_wp: bool,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("spaces", &self.spaces.len())
            .finish_non_exhaustive()
    }
}

/// A boundary asked of the fault thread, and its answer.
#[derive(Debug, Default)]
struct Boundary {
    /// The recorder asks for the pages faulted in so far.
    take: bool,
    taken: Option<Vec<Sampled>>,
    /// Then, with faults held meanwhile, for the eviction at this fraction.
    evict: Option<f64>,
    answer: Option<std::result::Result<(), String>>,
}

struct Shared {
    state: Mutex<State>,
    counts: Arc<Counts>,
    boundary: Mutex<Boundary>,
    answered: Condvar,
    /// Set when the fault thread must put every page back and stop.
    release: AtomicBool,
    released: AtomicBool,
    quit: AtomicBool,
    wake_w: OwnedFd,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn poke(&self) {
        let _ = rustix::io::write(&self.wake_w, &[1]);
    }
}

impl State {
    fn flush(&mut self, counts: &Counts) -> Result<()> {
        if let Some(w) = self.writer.as_mut() {
            w.refs(&self.pending)?;
            counts.bytes.store(w.bytes(), Ordering::Relaxed);
        }
        self.pending.clear();
        self.last_flush = Instant::now();
        Ok(())
    }

    fn write_mapping(&mut self, m: &Mapping) -> Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.mapping(m),
            None => Ok(()),
        }
    }

    fn new_mapping(
        &mut self,
        pid: u32,
        line: &parse::maps::MapsLine,
        kind: MappingKind,
        traced: bool,
    ) -> Result<u32> {
        let id = self.next_mapping;
        self.next_mapping += 1;
        self.write_mapping(&Mapping {
            id,
            pid,
            start: line.start,
            end: line.end,
            perms: line.perms.clone(),
            offset: line.offset,
            path: line.path.clone(),
            inode: line.inode,
            dev: (line.dev_major as u64) << 32 | line.dev_minor as u64,
            kind,
            traced,
        })?;
        Ok(id)
    }

    fn event(&mut self, pid: u32, kind: ProcessEventKind) -> Result<()> {
        let e = ProcessEvent {
            time_ns: now_mono().saturating_sub(self.start_mono),
            pid,
            kind,
        };
        match self.writer.as_mut() {
            Some(w) => w.event(&e),
            None => Ok(()),
        }
    }
}

fn maps_of(pid: u32) -> Result<Vec<parse::maps::MapsLine>> {
    let path = format!("/proc/{pid}/maps");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    parse::maps::parse(&text).map_err(|e| Error::corrupt(&path, e.to_string()))
}

fn anon_kind(line: &parse::maps::MapsLine) -> Option<MappingKind> {
    if !line.perms.ends_with('p') {
        return None;
    }
    match line.path.as_str() {
        "" => Some(MappingKind::Anonymous),
        "[heap]" => Some(MappingKind::Heap),
        "[stack]" => Some(MappingKind::Stack),
        p if p.starts_with("[anon:") && !p.contains("pagescope-") => Some(MappingKind::Anonymous),
        _ => None,
    }
}

/// The pages that leave a full pool together: an eighth of it, at most
/// 64. One eviction per fault would cost one call in the mover per page;
/// in a batch, a run of neighbouring pages goes with one call.
fn evict_batch(cap: usize) -> usize {
    (cap / 8).clamp(1, 64)
}

/// Stale copies in store slots before they are dropped (16 MiB).
const DEAD_BATCH: usize = 4096;

/// Evicts `pages` (sorted), runs of neighbours in one mapping with one
/// call each. Returns the pages that left, and those that can't leave
/// now (the address space is changing: try later); the others can't
/// leave at all (locked, or no mover), and are counted so.
#[allow(clippy::type_complexity)]
fn evict_pages(
    st: &mut State,
    counts: &Counts,
    pages: &[(u32, u64)],
) -> Result<(Vec<(u32, u64)>, Vec<(u32, u64)>)> {
    let mut out = Vec::new();
    let mut later = Vec::new();
    // Runs of neighbours in one mapping: (first, end) into `pages`, and
    // whether the mapping is shared.
    let mut runs = Vec::new();
    let mut i = 0;
    while i < pages.len() {
        let (key, start) = pages[i];
        let Some(space) = st.spaces.get(&key) else {
            i += 1;
            continue;
        };
        let (map_end, shared) = space
            .maps
            .range(..=start)
            .next_back()
            .map_or((start + PAGE, false), |(_, r)| {
                (r.end.max(start + PAGE), r.shared && start < r.end)
            });
        let mut j = i + 1;
        while j < pages.len()
            && j - i < 4096
            && pages[j].0 == key
            && pages[j].1 == start + (j - i) as u64 * PAGE
            && pages[j].1 < map_end
        {
            j += 1;
        }
        runs.push((i, j, shared));
        i = j;
    }
    // The moving method moves a space's private runs in one batch of its
    // mover: one round trip for the lot, where a run alone costs one.
    let mut moved_in_batch: HashMap<(u32, u64), usize> = HashMap::new();
    let mut k = 0;
    while k < runs.len() {
        let key = pages[runs[k].0].0;
        let mut l = k;
        while l < runs.len() && pages[runs[l].0].0 == key {
            l += 1;
        }
        let private: Vec<(u64, u64)> = runs[k..l]
            .iter()
            .filter(|r| !r.2)
            .map(|&(i, j, _)| (pages[i].1, (j - i) as u64))
            .collect();
        if let Some(space) = st.spaces.get_mut(&key) {
            if space.mm.method == EvictMethod::Move && !private.is_empty() {
                match space.mm.evict_runs(&private) {
                    Ok(moved) => {
                        for (&(start, _), m) in private.iter().zip(moved) {
                            moved_in_batch.insert((key, start), m as usize);
                        }
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => return Err(sys("UFFDIO_MOVE (evicting pages)", e)),
                }
            }
        }
        k = l;
    }
    for (i, j, shared) in runs {
        let (key, start) = pages[i];
        let Some(space) = st.spaces.get_mut(&key) else {
            continue;
        };
        let n = (j - i) as u64;
        if shared {
            // Shared memory stays in the page cache: only this mapping of
            // it goes, and the next touch is a minor fault.
            match space.mm.unmap_shared(start, n) {
                Ok(true) => out.extend_from_slice(&pages[i..j]),
                Ok(false) => {
                    counts.unevictable.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(sys("madvise (evicting shared memory)", e)),
            }
            continue;
        }
        let moved = if let Some(&m) = moved_in_batch.get(&(key, start)) {
            m
        } else if n > 1 {
            match space.mm.evict_run(start, n) {
                Ok(m) => m as usize,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => 0,
                Err(e) => return Err(sys("UFFDIO_MOVE (evicting pages)", e)),
            }
        } else {
            0
        };
        out.extend_from_slice(&pages[i..i + moved]);
        // The rest one by one: the page that stopped the run may be one
        // the kernel won't move, and the others may still go.
        for &(_, page) in &pages[i + moved..j] {
            match space.mm.evict(page) {
                Ok(Some(true)) => out.push((key, page)),
                // Can't go (locked, or no mover): it stays, and
                // its next touches go unseen until it can.
                Ok(Some(false)) => {
                    counts.unevictable.fetch_add(1, Ordering::Relaxed);
                }
                Ok(None) => later.push((key, page)),
                // The process is exiting (its mover or memory already gone).
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(sys("UFFDIO_MOVE (evicting a page)", e)),
            }
        }
    }
    counts
        .evictions
        .fetch_add(out.len() as u64, Ordering::Relaxed);
    Ok((out, later))
}

/// Drops the stale slot copies of the spaces `keys` that have gathered
/// at least `at_least`.
fn reclaim_dead(
    st: &mut State,
    keys: impl IntoIterator<Item = u32>,
    at_least: usize,
) -> Result<()> {
    for key in keys {
        if let Some(space) = st.spaces.get_mut(&key) {
            match space.mm.reclaim_dead(at_least) {
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                r => r.map_err(|e| sys("madvise (freeing store slots)", e))?,
            }
        }
    }
    Ok(())
}

/// Runs the pool's replacement once it is over its size: its oldest
/// [`evict_batch`] pages leave.
fn shrink_pool(st: &mut State, counts: &Counts) -> Result<()> {
    if st.pool.live.len() <= st.pool.cap {
        return Ok(());
    }
    let target = st.pool.cap + 1 - evict_batch(st.pool.cap);
    let mut victims = Vec::new();
    while st.pool.live.len() > target {
        let Some((key, page, gen)) = st.pool.fifo.pop_front() else {
            break;
        };
        match st.pool.live.get(&(key, page)) {
            Some(&(g, writable)) if g == gen => {
                st.pool.live.remove(&(key, page));
                victims.push((key, page, gen, writable));
            }
            _ => continue,
        }
    }
    let mut pages: Vec<(u32, u64)> = victims.iter().map(|v| (v.0, v.1)).collect();
    pages.sort_unstable();
    let (_, later) = evict_pages(st, counts, &pages)?;
    // The address space is changing (an event not read yet): those stay
    // at the head of the pool, and are tried at the next fault.
    let later: HashSet<(u32, u64)> = later.into_iter().collect();
    for &(key, page, gen, writable) in victims.iter().rev() {
        if later.contains(&(key, page)) {
            st.pool.live.insert((key, page), (gen, writable));
            st.pool.fifo.push_front((key, page, gen));
        }
    }
    let mut keys: Vec<u32> = pages.iter().map(|p| p.0).collect();
    keys.dedup();
    reclaim_dead(st, keys, DEAD_BATCH)
}

fn pool_insert(st: &mut State, key: u32, page: u64, writable: bool) {
    st.pool.gen += 1;
    let gen = st.pool.gen;
    st.pool.live.insert((key, page), (gen, writable));
    // Sampling evicts at boundaries only: no replacement order to keep.
    if st.writer.is_some() {
        st.pool.fifo.push_back((key, page, gen));
    }
}

/// Pages per group of the sample ([`sample::GROUP`]).
const SAMPLE_GROUP: u64 = sample::GROUP;

/// Whether the page at address `page` is in the fixed random sample of
/// `fraction` of the pages ([`sample::in_sample`]).
fn in_sample(page: u64, fraction: f64) -> bool {
    sample::in_sample(page / PAGE, fraction)
}

/// A boundary of the `fault` backend: moves the resident pages of the
/// sample (every page at `fraction` 1) out again, so that their next touch
/// faults. The sample is fixed, so every page of it is out when an
/// interval begins: one that faults back stands for `1 / fraction` pages,
/// and the estimate is unbiased.
fn on_boundary(st: &mut State, counts: &Counts, fraction: f64) -> Result<()> {
    st.fraction = fraction;
    let mut pages: Vec<(u32, u64)> = st
        .pool
        .live
        .keys()
        .copied()
        .filter(|&(_, p)| in_sample(p, fraction))
        .collect();
    pages.sort_unstable();
    let (out, _) = evict_pages(st, counts, &pages)?;
    // Pages that can't leave now are tried at the next boundary.
    for page in out {
        st.pool.live.remove(&page);
        st.moved_out.insert(page);
    }
    let keys: Vec<u32> = st.spaces.keys().copied().collect();
    reclaim_dead(st, keys, 1)
}

fn lookup_mapping(st: &mut State, key: u32, addr: u64) -> Result<u32> {
    let space = &st.spaces[&key];
    if let Some((_, r)) = space.maps.range(..=addr).next_back() {
        if addr < r.end {
            return Ok(r.id);
        }
    }
    // Not known (a stack that grew, a mapping that grew in place): ask
    // the kernel which VMA it is.
    let pid = space.mm.pid;
    let lines = maps_of(pid)?;
    let Some(line) = lines.iter().find(|l| l.start <= addr && addr < l.end) else {
        return Ok(u32::MAX);
    };
    let shared = line.perms.ends_with('s');
    let kind = if shared {
        MappingKind::Shared
    } else {
        anon_kind(line).unwrap_or(MappingKind::Anonymous)
    };
    let id = st.new_mapping(pid, line, kind, true)?;
    let space = st.spaces.get_mut(&key).expect("space exists");
    space
        .maps
        .insert(line.start, MapRange::of(line, id, shared));
    Ok(id)
}

/// How a logged page came to be referenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Touch {
    /// It came back: from the store, or mapped again (shared memory).
    Back,
    /// Touched for the first time (a missing fault on a page never away).
    First,
    /// A write to a page that was in place.
    Write,
}

/// Logs a reference. For a sampler, the page's weight: `1 / fraction` for
/// a page of the sample that a boundary moved out, or that is touched for
/// the first time (the first touches outside the sample are not logged:
/// see [`fill_outside_sample`]), else 1.
fn log_ref(
    st: &mut State,
    counts: &Counts,
    key: u32,
    page: u64,
    tid: u32,
    write: bool,
    how: Touch,
) -> Result<()> {
    let pid = st.spaces[&key].mm.pid;
    if st.writer.is_none() {
        let sampled = match how {
            Touch::Back => st.moved_out.remove(&(key, page)),
            Touch::First => in_sample(page, st.fraction),
            Touch::Write => false,
        };
        let weight = if sampled { 1.0 / st.fraction } else { 1.0 };
        st.sampled.push(Sampled {
            pid,
            page,
            write,
            weight,
            pfn: None,
            vma: None,
        });
        counts.references.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    let mapping = lookup_mapping(st, key, page)?;
    st.pending.push(Ref {
        time_ns: now_mono().saturating_sub(st.start_mono),
        pid,
        tid,
        addr: page,
        write,
        mapping,
    });
    counts.references.fetch_add(1, Ordering::Relaxed);
    if write {
        counts.writes.fetch_add(1, Ordering::Relaxed);
    }
    if st.pending.len() >= 1 << 16 {
        st.flush(counts)?;
    }
    Ok(())
}

/// Serves one fault; `Ok(false)`: not now (the address space is
/// changing), try again after the pending events.
#[allow(clippy::too_many_arguments)]
fn on_fault(
    st: &mut State,
    counts: &Counts,
    key: u32,
    address: u64,
    write: bool,
    wp: bool,
    minor: bool,
    tid: u32,
) -> Result<bool> {
    let page = address & !(PAGE - 1);
    let uffd = st.spaces[&key].mm.uffd.clone();
    if minor {
        return on_minor_fault(st, counts, key, page, write, tid);
    }
    let in_pool = st.pool.live.get(&(key, page)).copied();
    if wp {
        match in_pool {
            Some((_, true)) => {
                // Another thread's write already opened it (clearing the
                // protection again is harmless, and wakes).
                match uffd.write_protect(page, PAGE, false) {
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(false),
                    r => r.map_err(|e| sys("UFFDIO_WRITEPROTECT", e))?,
                }
            }
            Some((gen, false)) => {
                match uffd.write_protect(page, PAGE, false) {
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(false),
                    r => r.map_err(|e| sys("UFFDIO_WRITEPROTECT", e))?,
                }
                log_ref(st, counts, key, page, tid, true, Touch::Write)?;
                st.pool.live.insert((key, page), (gen, true));
            }
            None if st.spaces[&key].mm.evicted.contains_key(&page)
                && !st
                    .spaces
                    .get_mut(&key)
                    .expect("space exists")
                    .mm
                    .keep_if_present(page)
                    .map_err(|e| sys("pagemap", e))? =>
            {
                // Evicted since the write faulted (the copy method
                // protects a page before it copies it): the thread touches
                // it again, takes a missing fault, and is logged then.
                let _ = uffd.wake(page, PAGE);
            }
            None => {
                // Write-protected but not in the pool: a page that was
                // resident when tracing began (or after fork). Log it and
                // let it in.
                match uffd.write_protect(page, PAGE, false) {
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(false),
                    r => r.map_err(|e| sys("UFFDIO_WRITEPROTECT", e))?,
                }
                log_ref(st, counts, key, page, tid, true, Touch::Write)?;
                pool_insert(st, key, page, true);
                shrink_pool(st, counts)?;
            }
        }
        return Ok(true);
    }
    let space = st.spaces.get_mut(&key).expect("space exists");
    let mut evicted = true;
    let back = match space.mm.bring_back(page, !write) {
        Ok(b) => b,
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(false),
        Err(e) => return Err(sys("UFFDIO_MOVE (bringing a page back)", e)),
    };
    match back {
        Some(Restored::Copied) => {
            uffd.wake(page, PAGE).map_err(|e| sys("UFFDIO_WAKE", e))?;
        }
        None if outside_sample(st, page) => {
            return fill_outside_sample(st, key, page);
        }
        Some(Restored::Nothing) | None => {
            evicted = false;
            // First touch: a zero page, write-protected for a read so that
            // the first write is seen. A page that is already there was
            // filled for another thread's fault: not a new reference.
            match mm::copy_in(&uffd, page, &st.zero[..], !write, false) {
                Ok(mm::Fill::Filled) => {}
                Ok(mm::Fill::Exists) => {
                    let _ = uffd.wake(page, PAGE);
                    return Ok(true);
                }
                Ok(mm::Fill::Gone) => {
                    st.pool.live.remove(&(key, page));
                    return Ok(true);
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(false),
                Err(e) => return Err(sys("UFFDIO_COPY", e)),
            }
        }
    }
    let how = if evicted { Touch::Back } else { Touch::First };
    log_ref(st, counts, key, page, tid, write, how)?;
    pool_insert(st, key, page, write);
    shrink_pool(st, counts)?;
    Ok(true)
}

/// Whether the sampler's sample leaves `page` out (never when tracing).
fn outside_sample(st: &State, page: u64) -> bool {
    st.writer.is_none() && !in_sample(page, st.fraction)
}

/// The first touch of a page outside the sample: the page is
/// filled (a zero page) and not logged, since the sample's first touches
/// stand for it (each counts `1 / fraction`). Then every other missing
/// page of its sample group ([`SAMPLE_GROUP`]) in its private mapping
/// that is outside the sample and not in the store gets the zero page too
/// (`UFFDIO_ZEROPAGE`, read-only: a write copies it in the kernel, with
/// no fault of the descriptor), so that the group's other first touches
/// cost nothing: a first pass over 4 GiB takes a fault per 4 MiB and one
/// per page of the sample, instead of one per page. `Ok(false)`: not now
/// (the address space is changing).
fn fill_outside_sample(st: &mut State, key: u32, page: u64) -> Result<bool> {
    let space = &st.spaces[&key];
    let uffd = space.mm.uffd.clone();
    match mm::copy_in(&uffd, page, &st.zero[..], false, false) {
        Ok(mm::Fill::Filled) => {}
        // Filled for another thread's fault, or by a group's filling.
        Ok(mm::Fill::Exists) => {
            let _ = uffd.wake(page, PAGE);
            return Ok(true);
        }
        Ok(mm::Fill::Gone) => return Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(false),
        Err(e) => return Err(sys("UFFDIO_COPY", e)),
    }
    let Some((&start, range)) = space.maps.range(..=page).next_back() else {
        return Ok(true);
    };
    // Shared memory is left alone: its zero pages would be page-cache
    // pages, memory the program never asked for.
    if page >= range.end || range.shared {
        return Ok(true);
    }
    let span = SAMPLE_GROUP * PAGE;
    let lo = (page / span * span).max(start);
    let hi = (page / span * span + span).min(range.end);
    // The rest is an economy: the thread runs already, and if its process
    // is gone meanwhile, there is nothing to fill.
    let path = format!("/proc/{}/pagemap", space.mm.mem_pid());
    let Ok(file) = File::open(&path) else {
        return Ok(true);
    };
    let mut holes: Vec<(u64, u64)> = Vec::new();
    let read = PagemapReader::new(file, path.into(), PAGE).for_each(lo, hi, |addr, e| {
        if e.is_present() || in_sample(addr, st.fraction) || space.mm.evicted.contains_key(&addr) {
            return;
        }
        match holes.last_mut() {
            Some(h) if h.1 == addr => h.1 += PAGE,
            _ => holes.push((addr, addr + PAGE)),
        }
    });
    if read.is_err() {
        return Ok(true);
    }
    for (mut at, end) in holes {
        while at < end {
            match uffd.zeropage(at, end - at) {
                // Stopped at a page that is there (another thread's,
                // filled since pagemap was read): step over it.
                Ok(n) if n < end - at => at += n + PAGE,
                Ok(_) => break,
                // The range is changing (an event is unread) or gone:
                // its pages fault one by one instead.
                Err(_) => break,
            }
        }
    }
    Ok(true)
}

/// Serves a minor fault: a page of shared memory that is in the page
/// cache but not mapped here (it left the pool, or another process put it
/// there). `UFFDIO_CONTINUE` maps it, write-protected for a read so that
/// the first write is seen.
fn on_minor_fault(
    st: &mut State,
    counts: &Counts,
    key: u32,
    page: u64,
    write: bool,
    tid: u32,
) -> Result<bool> {
    let uffd = st.spaces[&key].mm.uffd.clone();
    let wp = !write;
    let errno = |e: &std::io::Error| e.raw_os_error().unwrap_or(0);
    // Before Linux 6.4 the page is mapped without waking the thread, then
    // protected, then the thread is woken: another thread of the process
    // could write to it unseen in between.
    let split = wp && !st.continue_wp;
    match uffd.continue_page(page, PAGE, wp && !split, split) {
        Ok(()) => {}
        Err(e) if errno(&e) == libc::EINVAL && wp && st.continue_wp => {
            st.continue_wp = false;
            return on_minor_fault(st, counts, key, page, write, tid);
        }
        Err(e) if errno(&e) == libc::EAGAIN => return Ok(false),
        // Mapped already (another thread's fault), or gone from the page
        // cache (a hole punched: the retry is a missing fault) or from the
        // address space: the thread retries.
        Err(e) if matches!(errno(&e), libc::EEXIST | libc::EFAULT | libc::ENOENT) => {
            let _ = uffd.wake(page, PAGE);
            return Ok(true);
        }
        Err(e) => return Err(sys("UFFDIO_CONTINUE", e)),
    }
    if split {
        let r = uffd.write_protect(page, PAGE, true);
        uffd.wake(page, PAGE).map_err(|e| sys("UFFDIO_WAKE", e))?;
        r.map_err(|e| sys("UFFDIO_WRITEPROTECT", e))?;
    }
    log_ref(st, counts, key, page, tid, write, Touch::Back)?;
    pool_insert(st, key, page, write);
    shrink_pool(st, counts)?;
    Ok(true)
}

fn drop_range(st: &mut State, key: u32, start: u64, end: u64, unmap: bool) -> Result<()> {
    let Some(space) = st.spaces.get_mut(&key) else {
        return Ok(());
    };
    if space.mm.store.contains(start) {
        return Ok(()); // the tracer's own madvise of dead slots
    }
    space
        .mm
        .forget(start, end)
        .map_err(|e| sys("index write", e))?;
    if unmap {
        let inside: Vec<u64> = space
            .maps
            .range(start..end)
            .filter(|(_, r)| r.end <= end)
            .map(|(&s, _)| s)
            .collect();
        for s in inside {
            space.maps.remove(&s);
        }
    }
    st.pool
        .live
        .retain(|&(k, p), _| k != key || p < start || p >= end);
    st.moved_out
        .retain(|&(k, p)| k != key || p < start || p >= end);
    Ok(())
}

fn on_msg(shared: &Shared, st: &mut State, key: u32, msg: Msg) -> Result<bool> {
    let counts = &shared.counts;
    match msg {
        Msg::Fault {
            address,
            write,
            wp,
            minor,
            tid,
        } => on_fault(st, counts, key, address, write, wp, minor, tid),
        other => on_event(st, key, other).map(|()| true),
    }
}

fn on_event(st: &mut State, key: u32, msg: Msg) -> Result<()> {
    match msg {
        Msg::Fault { .. } => Ok(()),
        Msg::Fork { fd } => {
            let space = &st.spaces[&key];
            let pending = PendingFork {
                uffd: Arc::new(Uffd::new(uffd::own_fd(fd))),
                store: space.mm.store.clone(),
                maps: space.maps.clone(),
                heap: space.heap,
            };
            st.forks.entry(key).or_default().push_back(pending);
            die_here_for_tests("fork-message");
            Ok(())
        }
        Msg::Remap { from, to, len } => {
            let Some(space) = st.spaces.get_mut(&key) else {
                return Ok(());
            };
            space
                .mm
                .remap(from, to, len)
                .map_err(|e| sys("index write", e))?;
            if let Some((_, r)) = space.maps.range(..=from).next_back().map(|(&s, r)| (s, *r)) {
                space.maps.insert(to, MapRange { end: to + len, ..r });
            }
            let moved: Vec<((u32, u64), (u64, bool))> = st
                .pool
                .live
                .iter()
                .filter(|(&(k, p), _)| k == key && p >= from && p < from + len)
                .map(|(&k, &v)| (k, v))
                .collect();
            for ((k, p), (_, w)) in moved {
                st.pool.live.remove(&(k, p));
                pool_insert(st, k, p - from + to, w);
            }
            Ok(())
        }
        Msg::Remove { start, end } => drop_range(st, key, start, end, false),
        Msg::Unmap { start, end } => drop_range(st, key, start, end, true),
        Msg::Other(_) => Ok(()),
    }
}

/// Puts every evicted page back and unregisters every range of `space`,
/// so the program runs on untraced; then frees the store's pages and
/// ends the mover. Returns what stays in the program (the mover, a zombie
/// child of it until reaped, its descriptor, store, index and code page)
/// for the ptrace thread to remove ([`Ptracer::clean_up`]).
fn release_space(space: &mut Space) -> Result<Option<Leftover>> {
    let mm = &mut space.mm;
    let pages: Vec<u64> = mm.evicted.keys().copied().collect();
    for page in pages {
        mm.bring_back(page, false)
            .map_err(|e| sys("bringing a page back", e))?;
    }
    // Through the mover's pid: the program's names another address space
    // once it has exec'd, and none once it has exited.
    let unregistered = unregister_all(&mm.uffd, mm.mem_pid())?;
    // What stays in the program (see [`Leftover`]); its descriptor only
    // if the number still names the trace's (the program may have closed
    // it, and reused the number).
    let ended = mm.mover.as_ref().map(|m| Leftover {
        tgid: mm.pid,
        movers: vec![m.pid],
        code: Some(m.insn),
        fds: pt::same_file(mm.pid, m.fd, std::process::id(), mm.uffd.raw())
            .is_ok_and(|same| same)
            .then_some(m.fd)
            .into_iter()
            .collect(),
        store: Some(mm.store.base),
        guarded: true,
        index: Some(mm.store.index),
    });
    if let Some(m) = mm.mover.as_mut().and_then(|m| m.mover.take()) {
        if unregistered {
            // Unregistered now, so this raises no event (one would wait
            // for this thread to read it).
            let _ = m.syscall(
                nr::MADVISE,
                [mm.store.base, STORE_BYTES, MADV_DONTNEED, 0, 0, 0],
            );
        }
        m.kill();
        return Ok(ended);
    }
    Ok(None)
}

/// Unregisters every VMA of `pid` that has userfaultfd flags; the kernel
/// clears write protection and wakes waiters as it does. `false`: the
/// process has exited, and nothing was unregistered.
pub(crate) fn unregister_all(uffd: &Uffd, pid: u32) -> Result<bool> {
    let path = format!("/proc/{pid}/smaps");
    let text = match std::fs::read_to_string(&path) {
        // The process has exited (a page put back let it finish).
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ESRCH) =>
        {
            return Ok(false)
        }
        r => r.map_err(|e| Error::io(&path, e))?,
    };
    let entries = parse::smaps::parse(&text).map_err(|e| Error::corrupt(&path, e.to_string()))?;
    for e in entries {
        if e.vm_flags
            .iter()
            .any(|f| f == "um" || f == "uw" || f == "ui")
        {
            let (start, end) = (e.map.start, e.map.end);
            match uffd.unregister(start, end - start) {
                Ok(()) => {}
                // A range registered by another userfaultfd of the process.
                Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {}
                // The address space is gone: the process exited meanwhile.
                Err(err) if err.raw_os_error() == Some(libc::ENOMEM) => return Ok(false),
                Err(err) => return Err(sys("UFFDIO_UNREGISTER", err)),
            }
        }
    }
    Ok(true)
}

/// Moves the registrations of the forked child `tid` (at its first stop)
/// from the userfaultfd the fork made to `own`, its own; the store stays
/// unregistered.
fn move_registrations(space: &Space, tid: u32, own: &Uffd) -> Result<()> {
    // Nothing can have faulted yet: the child has not run.
    unregister_all(&space.mm.uffd, tid)?;
    for (&start, range) in &space.maps {
        let len = range.end - start;
        let r = if range.shared {
            // It was registered in the parent, so it can be here.
            own.register_shared(start, len).and_then(|ok| {
                ok.then_some(())
                    .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))
            })
        } else {
            own.register(start, len, uffd::MODE_MISSING_WP)
        };
        r.map_err(|e| sys("UFFDIO_REGISTER (a forked child's mapping)", e))?;
        // Killed here, pagescope leaves the child parked with one range
        // registered with its own descriptor and the rest with none.
        die_here_for_tests("move");
    }
    Ok(())
}

/// Attaches movers the ptrace thread created, and empties the ranges it
/// registered; then marks the spaces ready.
fn prepare_spaces(st: &mut State) {
    let keys: Vec<u32> = st.spaces.keys().copied().collect();
    for k in keys {
        let space = st.spaces.get_mut(&k).expect("listed");
        if let Some(m) = space.mm.mover.as_mut() {
            if m.mover.is_none() && !m.failed {
                match Mover::seize(m.pid, m.insn) {
                    Ok(mv) => m.mover = Some(mv),
                    Err(e) => {
                        m.failed = true;
                        st.failure
                            .get_or_insert(format!("attaching the mover: {e}"));
                        continue;
                    }
                }
            }
        }
        let space = st.spaces.get_mut(&k).expect("listed");
        let ranges = std::mem::take(&mut space.pending_empty);
        for (a, b, shared) in ranges {
            match empty_range(&mut space.mm, a, b, shared, st.fraction) {
                // Sampled pages that come back stand for 1 / fraction.
                Ok(out) if st.fraction < 1.0 => {
                    st.moved_out.extend(out.into_iter().map(|p| (k, p)))
                }
                Ok(_) => {}
                Err(e) => {
                    st.failure.get_or_insert(e.to_string());
                    break;
                }
            }
        }
        let space = st.spaces.get_mut(&k).expect("listed");
        space.ready.store(true, Ordering::SeqCst);
    }
    st.dying.retain(|&p| !pt::reap_now(p));
    for mut space in std::mem::take(&mut st.retired) {
        if let Some(m) = space.mm.mover.as_mut().and_then(|m| m.mover.take()) {
            st.dying.extend(m.kill_nowait());
        } else if let Some(m) = &space.mm.mover {
            let _ = nix::sys::signal::kill(Pid::from_raw(m.pid as i32), Signal::SIGKILL);
        }
    }
}

fn fault_thread(shared: Arc<Shared>, wake_r: OwnedFd) {
    // With one CPU, looking without sleeping would hold off the program
    // that the fault just let go.
    let spin = if cpus().len() > 1 {
        spin_time()
    } else {
        Duration::ZERO
    };
    let mut last_fault: Option<Instant> = None;
    let mut msgs = Vec::new();
    let mut deferred: Vec<(u32, Msg)> = Vec::new();
    let mut drain = [0u8; 64];
    loop {
        if shared.release.load(Ordering::SeqCst) && !shared.released.load(Ordering::SeqCst) {
            let mut st = shared.lock();
            prepare_spaces(&mut st);
            let keys: Vec<u32> = st.spaces.keys().copied().collect();
            for k in keys {
                if let Some(space) = st.spaces.get_mut(&k) {
                    match release_space(space) {
                        Ok(Some(ended)) => st.reap.push(ended),
                        Ok(None) => {}
                        Err(e) => {
                            st.failure.get_or_insert(e.to_string());
                        }
                    }
                }
            }
            st.pool.live.clear();
            shared.released.store(true, Ordering::SeqCst);
        }
        if shared.quit.load(Ordering::SeqCst) {
            let mut st = shared.lock();
            let spaces: Vec<Space> = st.spaces.drain().map(|(_, s)| s).collect();
            st.retired.extend(spaces);
            prepare_spaces(&mut st);
            // Nothing waits on a page any more: they exit at once.
            let deadline = Instant::now() + Duration::from_secs(2);
            while !st.dying.is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
                st.dying.retain(|&p| !pt::reap_now(p));
            }
            return;
        }
        let mut b = shared.boundary.lock().unwrap_or_else(|p| p.into_inner());
        if std::mem::take(&mut b.take) {
            // The pages faulted in so far; no fault is served until the
            // recorder has read their frames and asks for the eviction, so
            // none comes in (and goes out again unseen) in between.
            b.taken = Some(std::mem::take(&mut shared.lock().sampled));
            shared.answered.notify_all();
            let fraction = loop {
                if let Some(f) = b.evict.take() {
                    break Some(f);
                }
                if shared.quit.load(Ordering::SeqCst) || shared.release.load(Ordering::SeqCst) {
                    break None;
                }
                b = shared
                    .answered
                    .wait_timeout(b, Duration::from_millis(100))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            };
            if let Some(fraction) = fraction {
                let answer = {
                    let mut st = shared.lock();
                    prepare_spaces(&mut st);
                    on_boundary(&mut st, &shared.counts, fraction).map_err(|e| e.to_string())
                };
                b.answer = Some(answer);
                shared.answered.notify_all();
            }
        }
        drop(b);
        // Messages read while a mover waited come first, in their order.
        let mut batch: Vec<(u32, Msg)> = Vec::new();
        let fds: Vec<(u32, Arc<Uffd>)> = {
            let mut st = shared.lock();
            prepare_spaces(&mut st);
            for (&k, s) in st.spaces.iter_mut() {
                batch.extend(s.mm.stash.drain(..).map(|m| (k, m)));
            }
            st.spaces
                .iter()
                .map(|(&k, s)| (k, s.mm.uffd.clone()))
                .collect()
        };
        let mut polls: Vec<libc::pollfd> = std::iter::once(wake_r.as_raw_fd())
            .chain(fds.iter().map(|(_, u)| u.raw()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let timeout = if !batch.is_empty() {
            0
        } else if deferred.is_empty() {
            200
        } else {
            1
        };
        // Right after a fault the next one is likely microseconds away:
        // look for it without sleeping, so that it needs no wake-up. The
        // descriptors are read directly (they are non-blocking): a message
        // found costs one system call, not a poll and then a read. The
        // wake-up pipe waits until the spin ends (100 us at most).
        let spun = timeout > 0
            && last_fault.is_some_and(|t| t.elapsed() < spin)
            && loop {
                let before = batch.len();
                for (key, u) in &fds {
                    msgs.clear();
                    if u.read_msgs(&mut msgs).is_ok() {
                        batch.extend(msgs.iter().map(|&m| (*key, m)));
                    }
                }
                if batch.len() > before {
                    break true;
                }
                if last_fault.is_none_or(|t| t.elapsed() >= spin) {
                    break false;
                }
                std::hint::spin_loop();
            };
        if !spun && poll(&mut polls, timeout) < 0 {
            continue;
        }
        if polls[0].revents != 0 {
            let _ = rustix::io::read(&wake_r, &mut drain);
        }
        for (i, (key, u)) in fds.iter().enumerate() {
            if polls[i + 1].revents & libc::POLLIN == 0 {
                continue;
            }
            msgs.clear();
            if u.read_msgs(&mut msgs).is_ok() {
                batch.extend(msgs.iter().map(|&m| (*key, m)));
            }
        }
        if batch.iter().any(|(_, m)| matches!(m, Msg::Fault { .. })) {
            last_fault = Some(Instant::now());
        }
        // Events first: a fault that could not be served waits for them.
        let mut st = shared.lock();
        let retry = std::mem::take(&mut deferred);
        for (key, m) in batch
            .iter()
            .filter(|(_, m)| !matches!(m, Msg::Fault { .. }))
            .chain(retry.iter())
            .chain(batch.iter().filter(|(_, m)| matches!(m, Msg::Fault { .. })))
        {
            let (key, m) = (*key, *m);
            if !st.spaces.contains_key(&key) {
                continue;
            }
            match on_msg(&shared, &mut st, key, m) {
                Ok(true) => {}
                Ok(false) => deferred.push((key, m)),
                Err(e) => {
                    st.failure.get_or_insert(e.to_string());
                    // Never leave a thread waiting on a page.
                    if let (Msg::Fault { address, .. }, Some(space)) = (m, st.spaces.get(&key)) {
                        let _ = space.mm.uffd.wake(address & !(PAGE - 1), PAGE);
                    }
                }
            }
        }
        if !st.pending.is_empty() && st.last_flush.elapsed() > Duration::from_millis(200) {
            if let Err(e) = st.flush(&shared.counts) {
                st.failure.get_or_insert(e.to_string());
            }
        }
    }
}

/// How long the fault thread looks for the next fault without sleeping
/// after serving one (`PAGESCOPE_SPIN_US`, microseconds).
fn spin_time() -> Duration {
    let us = std::env::var("PAGESCOPE_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SPIN_US);
    Duration::from_micros(us)
}

/// The default of [`spin_time`].
const SPIN_US: u64 = 100;

/// Pins thread `tid` (0: this one) to `cpu`. A fault then costs two
/// context switches on that CPU, the program's thread going to sleep and
/// pagescope's fault thread waking (and back), instead of two wake-ups
/// of a thread on another CPU, which cost far more (an interrupt between
/// CPUs, and a CPU leaving its idle state; more again in a VM).
fn pin(tid: Pid, cpu: usize) -> Result<()> {
    let mut set = nix::sched::CpuSet::new();
    let bad = |e: Errno| Error::Unsupported {
        what: format!("--cpu {cpu}"),
        needs: format!(
            "one of the CPUs this process may run on: {} ({e})",
            allowed_cpus()
        ),
    };
    set.set(cpu).map_err(bad)?;
    nix::sched::sched_setaffinity(tid, &set).map_err(bad)
}

/// The CPUs this thread may run on.
fn cpus() -> Vec<usize> {
    nix::sched::sched_getaffinity(Pid::from_raw(0)).map_or_else(
        |_| Vec::new(),
        |set| {
            (0..nix::sched::CpuSet::count())
                .filter(|&c| set.is_set(c).unwrap_or(false))
                .collect()
        },
    )
}

/// [`cpus`] as a list, e.g. `0 1`.
fn allowed_cpus() -> String {
    cpus()
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

#[allow(unsafe_code)]
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> i32 {
    // SAFETY: `fds` is a valid, exclusively borrowed array of pollfd.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }
}

/// Per-thread ptrace bookkeeping.
#[derive(Debug, Default, Clone, Copy)]
struct ThreadState {
    /// Address space key, once the thread has one that is traced.
    space: Option<u32>,
    /// Thread-group id.
    tgid: u32,
    /// System call of the last entry stop.
    entry: Option<(u64, [u64; 6])>,
    /// A forked child not yet at its first stop, which gets its own
    /// userfaultfd and a mover there.
    mover_code: Option<Inherited>,
}

/// What a forked child inherited from its parent's traced space.
#[derive(Debug, Clone, Copy)]
struct Inherited {
    /// The mover's code page.
    code: u64,
    /// The scratch page.
    scratch: u64,
    /// The parent's userfaultfd's number in the parent (and so in the
    /// child's copy of its descriptor table), or -1.
    fd: i32,
}

struct Ptracer {
    shared: Arc<Shared>,
    threads: HashMap<u32, ThreadState>,
    /// New tasks whose first stop came before their parent's fork or
    /// clone event: held stopped until that event says what they are.
    parked: HashSet<u32>,
    root: u32,
    root_status: Option<i32>,
}

const MAP_PRIVATE: u64 = 0x02;
const MAP_SHARED: u64 = 0x01;
const MAP_ANONYMOUS: u64 = 0x20;
const MAP_NORESERVE: u64 = 0x4000;
const MAP_POPULATE: u64 = 0x8000;
const MAP_STACK: u64 = 0x20000;
const MAP_GROWSDOWN: u64 = 0x100;
const PR_SET_VMA: u64 = 0x53564d41;
const PR_SET_VMA_ANON_NAME: u64 = 0;
const MADV_DONTNEED: u64 = 4;

/// The maps-style permissions of a private mapping with `mmap` protection
/// `prot`.
fn perms_of(prot: u64) -> String {
    let bit = |b: u64, c: char| if prot & b != 0 { c } else { '-' };
    format!("{}{}{}p", bit(1, 'r'), bit(2, 'w'), bit(4, 'x'))
}

fn page_up(v: u64) -> u64 {
    (v + PAGE - 1) & !(PAGE - 1)
}

/// Fault injection for the tests of `--release`: with
/// `PAGESCOPE_DIE_IN_INJECTION=WHERE` in its environment (`vdso`: setting
/// up an exec'd image, parked at the vDSO's bootstrap; `exec`: the same,
/// later, parked at the mover's page; `fork`: a forked child; `mover`: a
/// forked child, once its mover is cloned and before it is attached;
/// `move`: moving a forked child's registrations to its own descriptor;
/// `exec-done`: an exec's set-up done, its mover not yet attached;
/// `write-tracking`: making the userfaultfd of a recorded process's write
/// tracking), pagescope kills itself there, in the middle of an
/// injection, once; `WHERE:N` the Nth time it gets there. (`fork-entry`: at
/// the entry stop of a `fork`, no injection: the fork then waits on its
/// message, unread. `fork-message`: just after reading a fork's message,
/// whose descriptor only pagescope, and its holder, then hold.)
fn die_here_for_tests(place: &str) {
    static DONE: AtomicBool = AtomicBool::new(false);
    static SEEN: AtomicU64 = AtomicU64::new(0);
    let Some(want) = std::env::var_os("PAGESCOPE_DIE_IN_INJECTION") else {
        return;
    };
    let want = want.to_string_lossy();
    // `WHERE:N`: the Nth time there (the first by default).
    let (at, nth) = match want.split_once(':') {
        Some((at, n)) => (at, n.parse().unwrap_or(1)),
        None => (&*want, 1),
    };
    if at == place
        && SEEN.fetch_add(1, Ordering::SeqCst) + 1 == nth
        && !DONE.swap(true, Ordering::SeqCst)
    {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), Signal::SIGKILL);
    }
}

impl Ptracer {
    /// Writes `name` below the red zone of the stopped thread's stack, for
    /// an injected call that takes a string; returns its address.
    fn write_name(tid: Pid, sp: u64, name: &str) -> Result<u64> {
        // Below the red zone of the stopped thread's stack.
        let at = (sp - 4096) & !15;
        let mut bytes = name.as_bytes().to_vec();
        bytes.push(0);
        super::remote::write(tid.as_raw() as u32, at, &bytes)
            .map_err(|e| sys("writing a name into the program", e))?;
        Ok(at)
    }

    /// Sets up tracing of the address space of `tid`, stopped at a
    /// syscall-exit stop (or, `interrupted`, at the stop of an attach): a
    /// userfaultfd and a store made by the program itself, the descriptor
    /// copied to the tracer, and every private anonymous and shared-memory
    /// mapping registered and emptied.
    fn attach_space(&mut self, tid: u32, interrupted: bool) -> Result<u32> {
        let t = Pid::from_raw(tid as i32);
        let tgid = self.threads[&tid].tgid;
        let insn = pt::vdso_syscall(tgid).map_err(|e| sys("finding a syscall instruction", e))?;
        let inj = if interrupted {
            Injector::at_interrupt(t, insn)
        } else {
            Injector::new(t, Some(insn))
        };
        let mut inj = inj.map_err(|e| sys("ptrace GETREGS", e))?;
        let sp = inj.sp();
        let run = |inj: &mut Injector, n: u64, a: [u64; 6]| -> Result<i64> {
            inj.syscall(n, a)
                .map_err(|e| sys("system call injection", e))
        };
        // First the mover's page of code, whose `syscall` instruction the
        // other calls run at: a thread there goes on into a `pause()`
        // loop, not into the program, should pagescope die meanwhile (see
        // `Injector::park_in`). Its own mmap runs at the same loop, written
        // into the vDSO's unused end.
        // (Mapped read and execute; written through /proc/PID/mem.)
        if let Some(boot) = pt::vdso_bootstrap(tgid).map_err(|e| sys("writing into the vDSO", e))? {
            inj.park_in_vdso(tgid, boot)
                .map_err(|e| sys("writing the parking record", e))?;
        }
        let code = run(
            &mut inj,
            nr::MMAP,
            [0, PAGE, 5, MAP_PRIVATE | MAP_ANONYMOUS, u64::MAX, 0],
        )?;
        if code < 0 {
            let _ = inj.finish();
            return Err(sys(
                "mmap of the mover's code",
                std::io::Error::from_raw_os_error(-code as i32),
            ));
        }
        let code = code as u64;
        die_here_for_tests("vdso");
        pt::write_code(tgid, code, &pt::MOVER_CODE)
            .map_err(|e| sys("writing the mover's code", e))?;
        inj.park_in(tgid, code)
            .map_err(|e| sys("writing the parking record", e))?;
        die_here_for_tests("exec");
        // What the set-up has made so far, taken out again if a later
        // call fails (an attach that fails leaves the program as it was).
        let mut made = Leftover {
            tgid,
            code: Some(code),
            ..Leftover::default()
        };
        let guard = PAGE;
        let set_up = (|| -> Result<(Uffd, i64, u64, u64, i64, i64)> {
            let fd = make_userfaultfd(&mut inj, t)?;
            made.fds.push(fd as i32);
            let total = STORE_BYTES + 2 * guard;
            let base = run(
                &mut inj,
                nr::MMAP,
                [
                    0,
                    total,
                    0,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    u64::MAX,
                    0,
                ],
            )?;
            if base < 0 {
                return Err(sys(
                    "mmap of the store in the target",
                    std::io::Error::from_raw_os_error(-base as i32),
                ));
            }
            let store = base as u64 + guard;
            made.store = Some(store);
            made.guarded = true;
            let index = run(
                &mut inj,
                nr::MMAP,
                [
                    0,
                    INDEX_BYTES,
                    3,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    u64::MAX,
                    0,
                ],
            )?;
            if index < 0 {
                return Err(sys(
                    "mmap of the store's index in the target",
                    std::io::Error::from_raw_os_error(-index as i32),
                ));
            }
            made.index = Some(index as u64);
            let r = run(&mut inj, nr::MPROTECT, [store, STORE_BYTES, 3, 0, 0, 0])?;
            if r < 0 {
                return Err(sys(
                    "mprotect of the store",
                    std::io::Error::from_raw_os_error(-r as i32),
                ));
            }
            // Names make the areas visible in maps and findable by
            // --release; kernels without CONFIG_ANON_VMA_NAME refuse, and
            // --release then finds them by size (and the code page by
            // what it holds).
            for (addr, len, name) in [
                (store, STORE_BYTES, STORE_NAME),
                (index as u64, INDEX_BYTES, INDEX_NAME),
                (code, PAGE, MOVER_NAME),
            ] {
                let at = Self::write_name(t, sp, name)?;
                run(
                    &mut inj,
                    nr::PRCTL,
                    [PR_SET_VMA, PR_SET_VMA_ANON_NAME, addr, len, at, 0],
                )?;
            }
            let brk = run(&mut inj, nr::BRK, [0; 6])?;
            let mover = run(&mut inj, nr::CLONE, [pt::MOVER_CLONE_FLAGS, 0, 0, 0, 0, 0])?;
            if mover <= 0 {
                return Err(sys(
                    "clone of the mover",
                    std::io::Error::from_raw_os_error(-mover as i32),
                ));
            }
            made.movers.push(mover as u32);
            let u = self.uffd_with_features(take_fd(tgid, fd as i32)?)?;
            if self.shared.lock().method == EvictMethod::Move {
                // UFFDIO_MOVE's destination must be registered too.
                u.register(store, STORE_BYTES, uffd::MODE_MISSING_WP)
                    .map_err(|e| sys("UFFDIO_REGISTER (store)", e))?;
            }
            Ok((u, fd, store, index as u64, brk, mover))
        })();
        let (u, fd, store, index, brk, mover) = match set_up {
            Ok(set) => set,
            Err(e) => {
                // The mover waits in its loop; killed, it is reaped below.
                for &m in &made.movers {
                    let _ = nix::sys::signal::kill(Pid::from_raw(m as i32), Signal::SIGKILL);
                }
                made.remove(&mut inj);
                let _ = inj.finish();
                return Err(e);
            }
        };
        inj.finish().map_err(|e| sys("ptrace SETREGS", e))?;
        die_here_for_tests("exec-done");
        let (method, shmem) = {
            let st = self.shared.lock();
            (st.method, st.shmem)
        };
        let u = Arc::new(u);
        let mut space = Space {
            mm: Mm::new(
                tgid,
                u.clone(),
                Store {
                    base: store,
                    index,
                    next: 1,
                    recorded: 0,
                    free: Vec::new(),
                },
                Some(MoverRef {
                    mover: None,
                    pid: mover as u32,
                    insn: code,
                    fd: fd as i32,
                    scratch: index + INDEX_BYTES - SCRATCH_BYTES,
                    failed: false,
                }),
                method,
            ),
            maps: BTreeMap::new(),
            heap: None,
            pending_empty: Vec::new(),
            ready: Arc::new(AtomicBool::new(false)),
        };
        let lines = maps_of(tgid)?;
        let mut st = self.shared.lock();
        let key = st.next_space;
        st.next_space += 1;
        let mut to_empty = Vec::new();
        for line in &lines {
            if line.start >= store - guard && line.end <= store + STORE_BYTES + guard
                || line.start == index
                || line.start == code
            {
                continue;
            }
            let len = line.end - line.start;
            let (kind, shared) = match anon_kind(line) {
                Some(kind) if u.register(line.start, len, uffd::MODE_MISSING_WP).is_ok() => {
                    (kind, false)
                }
                None if shmem
                    && line.perms.ends_with('s')
                    && u.register_shared(line.start, len).unwrap_or(false) =>
                {
                    (MappingKind::Shared, true)
                }
                _ => continue,
            };
            let id = st.new_mapping(tgid, line, kind, true)?;
            if kind == MappingKind::Heap {
                space.heap = Some((id, line.start, line.end));
            }
            space
                .maps
                .insert(line.start, MapRange::of(line, id, shared));
            to_empty.push((line.start, line.end, shared));
        }
        if space.heap.is_none() && brk > 0 {
            space.heap = Some((u32::MAX, brk as u64, brk as u64));
        }
        // Pages already there would never fault: the fault thread moves
        // them all out before the program runs on, so the first touch of
        // each is seen.
        space.pending_empty = to_empty;
        let ready = space.ready.clone();
        st.spaces.insert(key, space);
        drop(st);
        self.wait_ready(&ready)?;
        Ok(key)
    }

    /// Starts tracing the attached process `tgid` whose threads are
    /// `seized` (all stopped), and lets them run on.
    fn attach_running(&mut self, tgid: u32, seized: &[(Pid, pt::Seized)]) -> Result<()> {
        for &(tid, _) in seized {
            self.threads.insert(
                tid.as_raw() as u32,
                ThreadState {
                    space: None,
                    tgid,
                    entry: None,
                    mover_code: None,
                },
            );
        }
        let Some(&(by, _)) = seized
            .iter()
            .find(|(_, how)| *how == pt::Seized::Interrupted)
        else {
            return Err(sys(
                &format!("cannot attach to process {tgid}"),
                std::io::Error::other("no thread stopped where system calls can be injected"),
            ));
        };
        let key = self.attach_space(by.as_raw() as u32, true)?;
        for t in self.threads.values_mut() {
            t.space = Some(key);
        }
        for &(tid, how) in seized {
            let sig = match how {
                pt::Seized::Signal(sig) => Some(sig),
                pt::Seized::Event(event) => {
                    self.caught_forking(tid.as_raw() as u32, event)?;
                    None
                }
                pt::Seized::Interrupted => None,
            };
            let _ = ptrace::syscall(tid, sig);
        }
        Ok(())
    }

    /// Traces the processes that the attached one had forked before the
    /// attach (and theirs), each attached as it was. One that shares its
    /// parent's address space (a `vfork` child before its exec, a mover)
    /// is not a program of its own, and is left alone; one forked during
    /// the attach by a process already attached is followed through its
    /// fork event instead.
    fn attach_descendants(&mut self) -> Result<()> {
        let proc = std::path::Path::new("/proc");
        let mut buf = Vec::new();
        for pid in crate::procfs::descendants(proc, self.root) {
            if self.threads.contains_key(&pid) {
                continue;
            }
            let Ok(dir) = crate::procfs::ProcDir::open(proc, pid) else {
                continue; // exited
            };
            let (Ok(stat), Ok(command)) = (dir.stat(&mut buf), dir.cmdline(&mut buf)) else {
                continue;
            };
            // A zombie has nothing left to trace.
            if matches!(stat.state, 'Z' | 'X') || pt::same_vm(pid, stat.ppid).unwrap_or(true) {
                continue;
            }
            let seized = match pt::seize_process(pid, pt::options()) {
                Ok(s) if s.is_empty() => continue,
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(sys(
                        &format!("cannot attach to process {pid}, a child of {}", self.root),
                        e,
                    ))
                }
            };
            self.shared
                .lock()
                .event(pid, ProcessEventKind::Start { command })?;
            self.attach_running(pid, &seized)?;
        }
        Ok(())
    }

    /// A thread of the attached process stopped at a fork event while it
    /// was being attached: the child (attached by the kernel) forked
    /// before there was a userfaultfd, so it is followed but not traced
    /// until it execs. A thread it cloned is in the task list, and was
    /// attached with the others.
    fn caught_forking(&mut self, parent: u32, event: i32) -> Result<()> {
        if !matches!(
            event,
            libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE
        ) {
            return Ok(());
        }
        let Ok(child) = ptrace::getevent(Pid::from_raw(parent as i32)) else {
            return Ok(());
        };
        let child = child as u32;
        if self.threads.contains_key(&child) {
            return Ok(());
        }
        self.threads.insert(
            child,
            ThreadState {
                space: None,
                tgid: child,
                entry: None,
                mover_code: None,
            },
        );
        self.shared.lock().event(
            child,
            ProcessEventKind::Fork {
                parent: self.threads[&parent].tgid,
            },
        )?;
        if self.parked.remove(&child) {
            let _ = ptrace::syscall(Pid::from_raw(child as i32), None);
        }
        Ok(())
    }

    /// An address space is gone: its mover is ended by the fault thread.
    fn retire(&self, key: u32) {
        let mut st = self.shared.lock();
        if let Some(space) = st.spaces.remove(&key) {
            st.retired.push(space);
        }
        drop(st);
        self.shared.poke();
    }

    /// Waits until the fault thread has prepared a space.
    fn wait_ready(&self, ready: &AtomicBool) -> Result<()> {
        self.shared.poke();
        while !ready.load(Ordering::SeqCst) {
            if let Some(f) = self.shared.lock().failure.clone() {
                return Err(Error::Io {
                    path: "trace".into(),
                    error: std::io::Error::other(f),
                });
            }
            std::thread::sleep(Duration::from_micros(100));
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
            Ok(maps_of(pid)?
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
        let mut inj =
            Injector::new(Pid::from_raw(tid as i32), None).map_err(|e| sys("ptrace GETREGS", e))?;
        // Parked meanwhile, as every injection (there is no code page);
        // without a vDSO, at the thread's own `syscall` as before.
        if let Ok(Some(boot)) = pt::vdso_bootstrap(tid) {
            inj.park_in_vdso(tid, boot)
                .map_err(|e| sys("writing the parking record", e))?;
        }
        let mut i = 0;
        while i < dead.len() {
            let mut j = i + 1;
            while j < dead.len() && dead[j] == dead[j - 1] + 1 {
                j += 1;
            }
            let r = inj
                .syscall(
                    nr::MADVISE,
                    [
                        base + dead[i] * PAGE,
                        (j - i) as u64 * PAGE,
                        MADV_DONTNEED,
                        0,
                        0,
                        0,
                    ],
                )
                .map_err(|e| sys("system call injection", e))?;
            if r < 0 {
                let _ = inj.finish();
                return Err(sys(
                    "madvise of freed store slots",
                    std::io::Error::from_raw_os_error(-r as i32),
                ));
            }
            i = j;
        }
        inj.finish().map_err(|e| sys("ptrace SETREGS", e))?;
        let mut st = self.shared.lock();
        if let Some(space) = st.spaces.get_mut(&key) {
            space.mm.store.free.extend(dead);
        }
        Ok(())
    }

    fn on_syscall_exit(&mut self, tid: u32, nr_: u64, args: [u64; 6], ret: i64) -> Result<()> {
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
            let command = std::fs::read(format!("/proc/{tid}/cmdline"))
                .map(|b| parse::cmdline(&b))
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

    fn on_exit_event(&mut self, tid: u32) -> Result<()> {
        let ts = self.threads[&tid];
        if tid != ts.tgid {
            return Ok(());
        }
        // Residency of the file mappings, which the trace can't hold.
        let Ok(lines) = maps_of(tid) else {
            return Ok(());
        };
        let Ok(file) = File::open(format!("/proc/{tid}/pagemap")) else {
            return Ok(());
        };
        let mut reader = PagemapReader::new(file, format!("/proc/{tid}/pagemap").into(), PAGE);
        let mut st = self.shared.lock();
        // Sampling for `record`: the pages it referenced since the last
        // boundary keep their frames, which the recorder reads from
        // pagemap at the boundary, when this process is gone.
        if st.writer.is_none() {
            for s in st
                .sampled
                .iter_mut()
                .filter(|s| s.pid == tid && s.pfn.is_none())
            {
                let _ = reader.for_each(s.page, s.page + PAGE, |_, e| {
                    s.pfn = e.pfn().filter(|_| e.is_present()).map(|p| p.0);
                });
                s.vma = lines
                    .iter()
                    .find(|l| l.start <= s.page && s.page < l.end)
                    .map(|l| (l.start, l.end));
            }
        }
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
            if let Some(w) = st.writer.as_mut() {
                w.residency(&Residency {
                    mapping: id,
                    pages: (line.end - line.start) / PAGE,
                    resident,
                })?;
            }
        }
        Ok(())
    }

    fn on_new_child(&mut self, parent: u32, child: u32, event: i32) -> Result<()> {
        let pts = self.threads[&parent];
        let shares = pt::same_mm(parent, child).unwrap_or(false);
        let is_thread = event == libc::PTRACE_EVENT_CLONE
            && std::fs::read_to_string(format!("/proc/{child}/status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("Tgid:"))
                        .map(|l| l[5..].trim().to_string())
                })
                .is_some_and(|t| t == pts.tgid.to_string());
        let tgid = if is_thread { pts.tgid } else { child };
        let mut space = pts.space;
        let mut mover_code = None;
        if !shares {
            if let Some(pkey) = pts.space {
                // The fork message arrives before the ptrace event; wait
                // for the fault thread to have filed it.
                let deadline = Instant::now() + Duration::from_secs(10);
                let pending = loop {
                    if let Some(p) = self
                        .shared
                        .lock()
                        .forks
                        .get_mut(&pkey)
                        .and_then(|q| q.pop_front())
                    {
                        break Some(p);
                    }
                    if Instant::now() > deadline {
                        break None;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                };
                space = None;
                if let Some(p) = pending {
                    let mut st = self.shared.lock();
                    let key = st.next_space;
                    st.next_space += 1;
                    // The child has its copy of the parent's mover code.
                    mover_code = st
                        .spaces
                        .get(&pkey)
                        .and_then(|s| s.mm.mover.as_ref())
                        .map(|m| Inherited {
                            code: m.insn,
                            scratch: m.scratch,
                            fd: m.fd,
                        });
                    let mut mm = Mm::new(child, p.uffd, p.store, None, st.method);
                    // What the child holds in its store: its copy of the
                    // index, where its copy of the slot holds a page. (The
                    // parent's map may have changed since the fork.)
                    let stored = match mm::stored_pages(child, mm.store.base, mm.store.index) {
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Vec::new(),
                        r => r.map_err(|e| sys("reading the store of a forked child", e))?,
                    };
                    for (slot, page) in stored {
                        mm.evicted.insert(page, slot);
                    }
                    // It gets a mover of its own at its first stop.
                    st.spaces.insert(
                        key,
                        Space {
                            mm,
                            maps: p.maps,
                            heap: p.heap,
                            pending_empty: Vec::new(),
                            ready: Arc::new(AtomicBool::new(true)),
                        },
                    );
                    space = Some(key);
                    drop(st);
                    self.shared.poke();
                }
            }
        }
        self.threads.insert(
            child,
            ThreadState {
                space,
                tgid,
                entry: None,
                mover_code,
            },
        );
        if !is_thread {
            let mut st = self.shared.lock();
            st.event(child, ProcessEventKind::Fork { parent: pts.tgid })?;
        }
        if self.parked.remove(&child) {
            self.first_stop(child)?;
            let _ = ptrace::syscall(Pid::from_raw(child as i32), None);
        }
        Ok(())
    }

    /// A forked child at its first stop, before it runs any code of its
    /// own: it gets a userfaultfd of its own and a mover, and every page
    /// it has resident leaves (as at an attach), so its first touch of
    /// each is logged.
    ///
    /// The descriptor the kernel made at the fork (`UFFD_EVENT_FORK`)
    /// exists only in pagescope: were pagescope killed, its release would
    /// unregister the child, whose evicted pages would then read as zeros.
    /// So the child makes its own (injected), in the slot of the parent's
    /// that it inherited; its ranges move over to it, and `--release`
    /// finds it there as in any traced process.
    fn first_stop(&mut self, tid: u32) -> Result<()> {
        let Some(ts) = self.threads.get_mut(&tid) else {
            return Ok(());
        };
        let (Some(inherited), Some(key)) = (ts.mover_code.take(), ts.space) else {
            return Ok(());
        };
        let t = Pid::from_raw(tid as i32);
        let mut inj =
            Injector::at_interrupt(t, inherited.code).map_err(|e| sys("ptrace GETREGS", e))?;
        inj.park_in(tid, inherited.code)
            .map_err(|e| sys("writing the parking record", e))?;
        let own = self.child_userfaultfd(&mut inj, tid, inherited.fd);
        die_here_for_tests("fork");
        // The mover comes after the descriptor, as at an attach: its copy
        // of the descriptor table holds it too.
        let mover = match &own {
            Ok(_) => inj
                .syscall(nr::CLONE, [pt::MOVER_CLONE_FLAGS, 0, 0, 0, 0, 0])
                .map_err(|e| sys("system call injection", e)),
            Err(_) => Ok(-1),
        };
        die_here_for_tests("mover");
        // The registrations move while the child is still parked: were
        // pagescope killed in the middle, the child would wait, parked,
        // and --release would put back every page, whichever descriptor
        // its range is registered with by then, or none (see `unpark`).
        // Given its registers back first, it would run on with some ranges
        // registered nowhere and their pages away as holes.
        let mut st = self.shared.lock();
        let moved = match (&own, st.spaces.get_mut(&key)) {
            (Ok((own, _)), Some(space)) => Some(move_registrations(space, tid, own)),
            _ => None,
        };
        inj.finish().map_err(|e| sys("ptrace SETREGS", e))?;
        let (own, fd) = own?;
        let mover = mover?;
        let kill_mover = || {
            if mover > 0 {
                let _ = nix::sys::signal::kill(Pid::from_raw(mover as i32), Signal::SIGKILL);
            }
        };
        let (Some(moved), Some(space)) = (moved, st.spaces.get_mut(&key)) else {
            kill_mover();
            return Ok(());
        };
        if let Err(e) = moved {
            kill_mover();
            return Err(e);
        }
        space.mm.uffd = Arc::new(own);
        // Every page the child has is shared copy-on-write with its parent
        // until one of them writes it, and UFFDIO_MOVE refuses those: they
        // leave by copy, into a store that is then not registered (it was
        // unregistered from the fork's descriptor above).
        space.mm.method = EvictMethod::Copy;
        if mover <= 0 {
            // No mover (out of tasks): its pages come back by copy and
            // can't be evicted again, and are counted unevictable.
            return Ok(());
        }
        space.mm.mover = Some(MoverRef {
            mover: None,
            pid: mover as u32,
            insn: inherited.code,
            fd,
            scratch: inherited.scratch,
            failed: false,
        });
        space.pending_empty = space
            .maps
            .iter()
            .map(|(&start, r)| (start, r.end, r.shared))
            .collect();
        space.ready.store(false, Ordering::SeqCst);
        let ready = space.ready.clone();
        drop(st);
        self.wait_ready(&ready)
    }

    /// Makes the userfaultfd of the forked child `tid`, stopped under
    /// `inj`, with pagescope's features; puts it in the slot `parent_fd`
    /// when that holds the inherited userfaultfd. Returns pagescope's copy
    /// and the number in the child.
    fn child_userfaultfd(
        &self,
        inj: &mut Injector,
        tid: u32,
        parent_fd: i32,
    ) -> Result<(Uffd, i32)> {
        let t = Pid::from_raw(tid as i32);
        let mut fd = make_userfaultfd(inj, t)? as i32;
        let inherited = parent_fd >= 0
            && std::fs::read_link(format!("/proc/{tid}/fd/{parent_fd}"))
                .is_ok_and(|l| l.as_os_str() == "anon_inode:[userfaultfd]");
        let run = |inj: &mut Injector, n: u64, a: [u64; 6]| -> Result<i64> {
            inj.syscall(n, a)
                .map_err(|e| sys("system call injection", e))
        };
        if inherited && fd != parent_fd {
            let flags = libc::O_CLOEXEC as u64;
            let r = run(inj, nr::DUP3, [fd as u64, parent_fd as u64, flags, 0, 0, 0])?;
            run(inj, nr::CLOSE, [fd as u64, 0, 0, 0, 0, 0])?;
            if r < 0 {
                return Err(sys(
                    "dup3 of a child's userfaultfd",
                    std::io::Error::from_raw_os_error(-r as i32),
                ));
            }
            fd = parent_fd;
        }
        Ok((self.uffd_with_features(take_fd(tid, fd)?)?, fd))
    }

    /// pagescope's copy of a userfaultfd of the traced program, with the
    /// features of this trace (checked before the program started).
    fn uffd_with_features(&self, fd: OwnedFd) -> Result<Uffd> {
        // A copy: the program holds the descriptor too, so a holder need
        // not keep it (see [`super::holder`]).
        super::holder::mark_copy(fd.as_raw_fd(), true);
        let u = Uffd::new(fd);
        let (method, shmem) = {
            let st = self.shared.lock();
            (st.method, st.shmem)
        };
        u.api(uffd::features(method == EvictMethod::Move, shmem))
            .map_err(|e| sys("UFFDIO_API", e))?;
        Ok(u)
    }

    fn on_gone(&mut self, tid: u32, status: i32) -> Result<()> {
        let Some(ts) = self.threads.remove(&tid) else {
            return Ok(());
        };
        if tid == ts.tgid {
            let mut st = self.shared.lock();
            st.event(tid, ProcessEventKind::Exit { status })?;
        }
        if tid == self.root {
            self.root_status = Some(if status < 0 { 128 - status } else { status });
        }
        if let Some(key) = ts.space {
            if !self.threads.values().any(|t| t.space == Some(key)) {
                self.retire(key);
            }
        }
        Ok(())
    }

    /// Handles one stop and restarts the thread.
    fn on_status(&mut self, status: WaitStatus) -> Result<()> {
        match status {
            WaitStatus::PtraceSyscall(pid) => {
                let tid = pid.as_raw() as u32;
                let info = match ptrace::syscall_info(pid) {
                    Ok(info) => info,
                    // Killed since it stopped (another thread's exit_group,
                    // a SIGKILL): its exit is reported next.
                    Err(Errno::ESRCH) => return Ok(()),
                    Err(e) => return Err(sys("PTRACE_GET_SYSCALL_INFO", e)),
                };
                if info.op == libc::PTRACE_SYSCALL_INFO_ENTRY {
                    // SAFETY of reading the union: op says entry.
                    let entry = entry_of(&info);
                    if entry.0 == nr::CLONE && entry.1[0] & libc::CLONE_VM as u64 == 0 {
                        die_here_for_tests("fork-entry");
                    }
                    if let Some(t) = self.threads.get_mut(&tid) {
                        t.entry = Some(entry);
                    }
                } else if info.op == libc::PTRACE_SYSCALL_INFO_EXIT {
                    let ret = exit_of(&info);
                    let entry = self.threads.get_mut(&tid).and_then(|t| t.entry.take());
                    if let Some((n, args)) = entry {
                        self.on_syscall_exit(tid, n, args, ret)?;
                    }
                }
                let _ = ptrace::syscall(pid, None);
            }
            WaitStatus::PtraceEvent(pid, _, libc::PTRACE_EVENT_STOP)
                if !self.threads.contains_key(&(pid.as_raw() as u32)) =>
            {
                // A new task, stopped before its parent's event arrived:
                // it must not run (and fault, exec or fork) before the
                // tracer knows its address space.
                self.parked.insert(pid.as_raw() as u32);
            }
            WaitStatus::PtraceEvent(pid, _, libc::PTRACE_EVENT_STOP)
                if self
                    .threads
                    .get(&(pid.as_raw() as u32))
                    .is_some_and(|t| t.mover_code.is_some()) =>
            {
                self.first_stop(pid.as_raw() as u32)?;
                let _ = ptrace::syscall(pid, None);
            }
            WaitStatus::PtraceEvent(pid, _, event) => {
                let tid = pid.as_raw() as u32;
                match event {
                    libc::PTRACE_EVENT_FORK
                    | libc::PTRACE_EVENT_VFORK
                    | libc::PTRACE_EVENT_CLONE => {
                        if let Ok(child) = ptrace::getevent(pid) {
                            self.on_new_child(tid, child as u32, event)?;
                        }
                    }
                    libc::PTRACE_EVENT_EXEC => {
                        // A non-leader thread that execs takes the leader's id.
                        if let Ok(former) = ptrace::getevent(pid) {
                            let former = former as u32;
                            if former != tid {
                                if let Some(t) = self.threads.remove(&former) {
                                    self.threads.insert(tid, t);
                                }
                            }
                        }
                        if let Some(t) = self.threads.get_mut(&tid) {
                            t.entry = Some((nr::EXECVE, [0; 6]));
                        }
                    }
                    libc::PTRACE_EVENT_EXIT => self.on_exit_event(tid)?,
                    _ => {}
                }
                let _ = ptrace::syscall(pid, None);
            }
            WaitStatus::Stopped(pid, sig) => {
                let tid = pid.as_raw() as u32;
                self.threads.entry(tid).or_insert(ThreadState {
                    space: None,
                    tgid: tid,
                    entry: None,
                    mover_code: None,
                });
                let _ = ptrace::syscall(pid, Some(sig));
            }
            WaitStatus::Exited(pid, code) => self.on_gone(pid.as_raw() as u32, code)?,
            WaitStatus::Signaled(pid, sig, _) => {
                self.on_gone(pid.as_raw() as u32, -(sig as i32))?
            }
            _ => {}
        }
        Ok(())
    }

    /// Removes what the release left in a program (see [`Leftover`]). The
    /// mover's clone has no exit signal, so none of the program's own
    /// waits sees it, and it would stay a zombie child of the program
    /// until the program exits. A thread of the program is stopped and
    /// runs `wait4(mover, __WALL)` (the `syscall` of the mover's code),
    /// then the calls of [`Leftover::remove`], and is left stopped for the
    /// detach. `false` if the mover was not reaped (no thread could be
    /// stopped within 2 s); the rest is best effort too.
    fn clean_up(&mut self, left: &Leftover) -> bool {
        let Some(insn) = left.code else { return false };
        let tgid = left.tgid;
        let tid = if self.threads.contains_key(&tgid) {
            tgid
        } else {
            match self.threads.iter().find(|(_, t)| t.tgid == tgid) {
                Some((&tid, _)) => tid,
                None => return false,
            }
        };
        let pid = Pid::from_raw(tid as i32);
        if ptrace::interrupt(pid).is_err() {
            return false;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let flags = WaitPidFlag::__WALL | WaitPidFlag::WNOHANG;
            let status = match waitpid(pid, Some(flags)) {
                Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(Errno::EINTR) => continue,
                Ok(s) => s,
                Err(_) => return false,
            };
            let inj = match status {
                WaitStatus::PtraceEvent(_, _, libc::PTRACE_EVENT_STOP) => {
                    Injector::at_interrupt(pid, insn)
                }
                WaitStatus::PtraceSyscall(_) => match ptrace::syscall_info(pid) {
                    Ok(info) if info.op == libc::PTRACE_SYSCALL_INFO_EXIT => {
                        Injector::new(pid, Some(insn))
                    }
                    _ => {
                        let _ = ptrace::syscall(pid, None);
                        continue;
                    }
                },
                // A signal is delivered; the interrupt stop follows.
                WaitStatus::Stopped(_, sig) => {
                    let _ = ptrace::syscall(pid, Some(sig));
                    continue;
                }
                WaitStatus::PtraceEvent(..) => {
                    let _ = ptrace::syscall(pid, None);
                    continue;
                }
                // Gone: its zombies go with it.
                WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
                    self.threads.remove(&tid);
                    return false;
                }
                // Still running at the deadline.
                _ => return false,
            };
            let Ok(mut inj) = inj else { return false };
            if inj.park_in(tgid, insn).is_err() {
                let _ = inj.finish();
                return false;
            }
            let reaped = left.remove(&mut inj);
            let _ = inj.finish();
            return reaped.len() == left.movers.len();
        }
    }

    /// Ctrl-C or SIGTERM: put every page back, then let go of every thread.
    fn detach_all(&mut self) -> Result<()> {
        self.shared.release.store(true, Ordering::SeqCst);
        self.shared.poke();
        while !self.shared.released.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        for tid in self.parked.drain() {
            let _ = ptrace::detach(Pid::from_raw(tid as i32), None);
        }
        let ended = std::mem::take(&mut self.shared.lock().reap);
        for left in ended {
            self.clean_up(&left);
        }
        // A thread already in a stop (the one whose stop was being
        // handled when an error came) detaches at once; the others are
        // interrupted first.
        let mut waiting: Vec<u32> = self
            .threads
            .keys()
            .copied()
            .filter(|&tid| ptrace::detach(Pid::from_raw(tid as i32), None).is_err())
            .collect();
        for &tid in &waiting {
            let _ = ptrace::interrupt(Pid::from_raw(tid as i32));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !waiting.is_empty() && Instant::now() < deadline {
            let flags = WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD | WaitPidFlag::WNOHANG;
            let status = match waitpid(None, Some(flags)) {
                Ok(WaitStatus::StillAlive) => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Ok(s) => s,
                Err(Errno::EINTR) => continue,
                Err(_) => break,
            };
            let Some(pid) = status.pid() else { continue };
            let tid = pid.as_raw() as u32;
            let sig = match status {
                WaitStatus::Stopped(_, sig) if sig != Signal::SIGSTOP => Some(sig),
                WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
                    waiting.retain(|&t| t != tid);
                    continue;
                }
                _ => None,
            };
            let _ = ptrace::detach(pid, sig);
            waiting.retain(|&t| t != tid);
        }
        Ok(())
    }
}

fn entry_of(info: &libc::ptrace_syscall_info) -> (u64, [u64; 6]) {
    #[allow(unsafe_code)]
    // SAFETY: the kernel filled the entry arm (op == ENTRY).
    let e = unsafe { info.u.entry };
    (e.nr, e.args)
}

fn exit_of(info: &libc::ptrace_syscall_info) -> i64 {
    #[allow(unsafe_code)]
    // SAFETY: the kernel filled the exit arm (op == EXIT).
    let e = unsafe { info.u.exit };
    e.sval
}

/// Moves every page of `[start, end)` that is resident or in swap and in
/// the sample of `fraction` into the store (of shared memory: unmaps it
/// here), runs of neighbours together: a page in swap moves as its swap
/// entry (or, by copy, is read in), so that its next touch faults as any
/// other's. Returns the pages moved.
fn empty_range(mm: &mut Mm, start: u64, end: u64, shared: bool, fraction: f64) -> Result<Vec<u64>> {
    let path = format!("/proc/{}/pagemap", mm.pid);
    let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
    let mut reader = PagemapReader::new(file, path.into(), PAGE);
    let mut present = Vec::new();
    let kept = mm.kept();
    reader.for_each(start, end, |addr, e| {
        if (e.is_present() || e.is_in_swap())
            && in_sample(addr, fraction)
            && !(kept.0..kept.1).contains(&addr)
        {
            present.push(addr);
        }
    })?;
    let what = |e| sys("evicting the pages of a new mapping", e);
    // Runs of neighbours, as (first, end) into `present`.
    let mut runs = Vec::new();
    let mut i = 0;
    while i < present.len() {
        let mut j = i + 1;
        while j < present.len() && j - i < 4096 && present[j] == present[j - 1] + PAGE {
            j += 1;
        }
        runs.push((i, j));
        i = j;
    }
    if shared {
        for (i, j) in runs {
            mm.unmap_shared(present[i], (j - i) as u64).map_err(what)?;
        }
        return Ok(present);
    }
    // The moving method moves them all in one batch of the mover (a
    // sampled range is mostly runs of one page).
    let starts: Vec<(u64, u64)> = runs
        .iter()
        .map(|&(i, j)| (present[i], (j - i) as u64))
        .collect();
    let batched = mm.evict_runs(&starts).map_err(what)?;
    for (&(i, j), done) in runs.iter().zip(batched) {
        let moved = if done > 0 || mm.method == EvictMethod::Move {
            done as usize
        } else if j - i > 1 {
            mm.evict_run(present[i], (j - i) as u64).map_err(what)? as usize
        } else {
            0
        };
        for &page in &present[i + moved..j] {
            mm.evict(page).map_err(what)?;
        }
    }
    Ok(present)
}

/// A copy of descriptor `fd` of process `pid` (`pidfd_getfd`).
pub(crate) fn take_fd(pid: u32, fd: i32) -> Result<OwnedFd> {
    rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(pid as i32).expect("pid > 0"),
        rustix::process::PidfdFlags::empty(),
    )
    .and_then(|pidfd| {
        rustix::process::pidfd_getfd(pidfd.as_fd(), fd, rustix::process::PidfdGetfdFlags::empty())
    })
    .map_err(|e| sys("pidfd_getfd", e))
}

/// Makes a userfaultfd (`O_CLOEXEC | O_NONBLOCK`) in the thread `t`,
/// stopped under `inj`: the system call, or where it is refused,
/// `/dev/userfaultfd`. Returns the descriptor's number in the program.
fn make_userfaultfd(inj: &mut Injector, t: Pid) -> Result<i64> {
    let run = |inj: &mut Injector, n: u64, a: [u64; 6]| -> Result<i64> {
        inj.syscall(n, a)
            .map_err(|e| sys("system call injection", e))
    };
    let flags = (libc::O_CLOEXEC | libc::O_NONBLOCK) as u64;
    let mut fd = run(inj, nr::USERFAULTFD, [flags, 0, 0, 0, 0, 0])?;
    if fd < 0 {
        // The system call refused (a seccomp filter of the program's,
        // or vm.unprivileged_userfaultfd=0 for a user without
        // CAP_SYS_PTRACE): since Linux 6.1, /dev/userfaultfd makes the
        // same descriptor for whoever may open it.
        const USERFAULTFD_IOC_NEW: u64 = 0xaa00;
        let path = Ptracer::write_name(t, inj.sp(), "/dev/userfaultfd")?;
        let open = [
            libc::AT_FDCWD as u64,
            path,
            (libc::O_RDWR | libc::O_CLOEXEC) as u64,
            0,
            0,
            0,
        ];
        let dev = run(inj, nr::OPENAT, open)?;
        if dev >= 0 {
            let made = run(
                inj,
                nr::IOCTL,
                [dev as u64, USERFAULTFD_IOC_NEW, flags, 0, 0, 0],
            )?;
            run(inj, nr::CLOSE, [dev as u64, 0, 0, 0, 0, 0])?;
            if made >= 0 {
                fd = made;
            }
        }
    }
    if fd < 0 {
        let e = Errno::from_raw(-fd as i32);
        return Err(if e == Errno::EPERM {
            Error::PermissionDenied {
                path: "userfaultfd".into(),
                needs: "the program may not make one (the system call and \
                        /dev/userfaultfd were refused): run it as root, or \
                        `sysctl vm.unprivileged_userfaultfd=1`, or give access to \
                        /dev/userfaultfd"
                    .into(),
            }
        } else {
            Error::Unsupported {
                what: "userfaultfd".into(),
                needs: format!("a kernel built with CONFIG_USERFAULTFD ({e})"),
            }
        });
    }
    Ok(fd)
}

/// A userfaultfd of the address space of the running process `pid`, for
/// pagescope to hold alone: `userfaultfd` is injected into one of its
/// threads (and `close` of the program's copy, once pagescope has taken
/// it with `pidfd_getfd`). A process this thread already traces must be
/// stopped at its `PTRACE_INTERRUPT` stops (the recorder's freezer holds
/// it so); any other is attached, stopped for the moment it takes, and
/// let go. The descriptor's features are not set yet (`UFFDIO_API`).
/// `None`: the process is traced by this thread but not at such a stop
/// now (a child not yet at its first stop, a parent at its `vfork`): try
/// again later.
pub fn userfaultfd_of(pid: u32) -> Result<Option<OwnedFd>> {
    let leader = Pid::from_raw(pid as i32);
    let held = pt::tracer_of(leader) == Some(std::process::id());
    if held && !pt::at_interrupt_stop(leader) {
        return Ok(None);
    }
    let seized = if held {
        vec![(leader, pt::Seized::Interrupted)]
    } else {
        // TRACESYSGOOD: the injected calls' syscall stops must not look
        // like a SIGTRAP.
        pt::seize_process(pid, ptrace::Options::PTRACE_O_TRACESYSGOOD)
            .map_err(|e| sys(&format!("cannot attach to process {pid}"), e))?
    };
    let r = (|| -> Result<OwnedFd> {
        let t = seized
            .iter()
            .find(|(_, how)| *how == pt::Seized::Interrupted)
            .map(|&(t, _)| t)
            .ok_or_else(|| {
                sys(
                    &format!("process {pid}"),
                    std::io::Error::other("no thread stopped where it can run a system call"),
                )
            })?;
        let insn = pt::vdso_syscall(pid).map_err(|e| sys("finding a syscall instruction", e))?;
        let mut inj = Injector::at_interrupt(t, insn).map_err(|e| sys("ptrace GETREGS", e))?;
        // Killed meanwhile, pagescope leaves the thread parked, not running
        // on with the calls' registers (`trace --release` lets it go).
        if let Some(boot) = pt::vdso_bootstrap(pid).map_err(|e| sys("writing into the vDSO", e))? {
            inj.park_in_vdso(pid, boot)
                .map_err(|e| sys("writing the parking record", e))?;
        }
        let fd = make_userfaultfd(&mut inj, t)?;
        die_here_for_tests("write-tracking");
        let ours = take_fd(pid, fd as i32);
        inj.syscall(nr::CLOSE, [fd as u64, 0, 0, 0, 0, 0])
            .map_err(|e| sys("system call injection", e))?;
        inj.finish().map_err(|e| sys("ptrace SETREGS", e))?;
        ours
    })();
    if !held {
        for (t, how) in seized {
            let sig = match how {
                pt::Seized::Signal(sig) => Some(sig),
                _ => None,
            };
            let _ = ptrace::detach(t, sig);
        }
    }
    r.map(Some)
}

/// Whether this kernel can trace shared memory: minor faults and write
/// protection of shmem ([`uffd::FEATURES_SHMEM`], Linux 5.19).
pub fn shmem_supported() -> bool {
    uffd::Uffd::probe_features().is_ok_and(|f| f & uffd::FEATURES_SHMEM == uffd::FEATURES_SHMEM)
}

/// How pages will be evicted: `want`, or with `None` the best this kernel
/// has (`UFFDIO_MOVE` from Linux 6.8, else copying). Refuses before the
/// program starts if the kernel can't trace at all, or lacks `want`.
pub fn evict_method(want: Option<EvictMethod>) -> Result<EvictMethod> {
    let available = uffd::Uffd::probe_features().map_err(|e| {
        let errno = e.raw_os_error().unwrap_or(0);
        let why = crate::cause::userfaultfd_refused(errno);
        if errno == libc::EPERM {
            Error::PermissionDenied {
                path: "userfaultfd".into(),
                needs: why,
            }
        } else {
            Error::Unsupported {
                what: "userfaultfd".into(),
                needs: why,
            }
        }
    })?;
    let missing = uffd::missing_features(available);
    if !missing.is_empty() {
        return Err(Error::Unsupported {
            what: format!("userfaultfd feature {}", missing.join(", ")),
            needs: "Linux 5.7 or later with CONFIG_USERFAULTFD".into(),
        });
    }
    let has_move = available & uffd::FEATURE_MOVE != 0;
    match want {
        Some(EvictMethod::Move) if !has_move => Err(Error::Unsupported {
            what: "userfaultfd feature MOVE".into(),
            needs: "Linux 6.8 or later to evict by moving pages; `--evict copy` works on \
                    older kernels"
                .into(),
        }),
        Some(m) => Ok(m),
        None if has_move => Ok(EvictMethod::Move),
        None => Ok(EvictMethod::Copy),
    }
}

/// Traces the program of `config` into its trace file. `started` gets the
/// program's pid once it is traced (an attached one: every page it had
/// is out, and it runs on).
pub fn trace(
    config: &TraceConfig,
    counts: Arc<Counts>,
    started: impl FnOnce(u32),
) -> Result<TraceOutcome> {
    let command = config.target.command()?;
    evict_method(Some(config.evict))?;
    // Another pagescope observing the process would corrupt this trace
    // (and this trace its figures).
    let _observing = match config.target {
        Target::Attach(pid) => {
            crate::observer::ObserverLock::acquire(Path::new("/proc"), pid, "trace")?
        }
        Target::Launch(_) => None,
    };
    let file = crate::output::create(&config.output).map_err(|e| Error::io(&config.output, e))?;
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let start_mono = now_mono();
    let header = TraceHeader {
        page_size: PAGE,
        pool_pages: config.pool_pages,
        policy: "fifo".into(),
        evict: config.evict,
        command,
        start_unix_ns,
        start_monotonic_ns: start_mono,
        kernel: crate::system::kernel_release(),
        untraced: format!(
            "{}; the pages holding the program's arguments and environment stay resident \
             (so that /proc/PID/cmdline and environ, ps and pgrep read them while it is \
             traced), and touches of them are not logged",
            if shmem_supported() {
                "regular-file and hugetlbfs mappings (program text, mapped files) can't be \
                 trapped with userfaultfd; their residency at exit is recorded instead"
            } else {
                "regular-file mappings (program text, mapped files) can't be trapped with \
                 userfaultfd, nor shared memory on this kernel (it needs Linux 5.19); their \
                 residency at exit is recorded instead"
            }
        ),
    };
    let writer = TraceWriter::new(file, &config.output, &header, config.time_resolution_ns)?;
    run(
        &config.target,
        config.evict,
        config.pool_pages.max(1) as usize,
        Sink::Trace(writer),
        start_mono,
        config.cpu,
        counts,
        |_, pid| started(pid),
    )
}

/// Where the references of [`run`] go.
enum Sink {
    /// The trace file.
    Trace(TraceWriter<File>),
    /// The boundaries of a [`Sampler`] that moves out this fraction of the
    /// pages (from the start: of the pages already there, only those of
    /// the sample leave when a mapping is registered).
    Sample(f64),
}

/// Launches or attaches the program and traces it until it exits or a
/// stop is asked for (SIGINT or SIGTERM in this thread). `started` gets
/// the shared state and the program's pid once it runs. `cpu`: see
/// [`TraceConfig::cpu`].
#[allow(clippy::too_many_arguments)]
fn run(
    target: &Target,
    method: EvictMethod,
    pool_cap: usize,
    sink: Sink,
    start_mono: u64,
    cpu: Option<usize>,
    counts: Arc<Counts>,
    started: impl FnOnce(&Arc<Shared>, u32),
) -> Result<TraceOutcome> {
    pt::catch_stop_signals().map_err(|e| sys("sigaction", e))?;
    let command = target.command()?;
    let (root, seized) = match target {
        Target::Launch(argv) => {
            let program = pt::resolve(&argv[0]).map_err(|e| sys("cannot run", e))?;
            let child = pt::spawn(&program, argv).map_err(|e| sys("trace", e))?;
            if let Some(cpu) = cpu {
                // Stopped before its exec: its threads and children, and
                // their movers, inherit the mask.
                if let Err(e) = pin(child, cpu) {
                    let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
                    return Err(e);
                }
            }
            (child.as_raw() as u32, Vec::new())
        }
        Target::Attach(pid) => {
            let seized = pt::seize_process(*pid, pt::options())
                .map_err(|e| sys(&format!("cannot attach to process {pid}"), e))?;
            (*pid, seized)
        }
    };
    // From here on, a descriptor only pagescope holds outlives its death.
    let holder = Holder::start(root).map_err(|e| sys("starting pagescope's holder", e))?;
    let (writer, fraction) = match sink {
        Sink::Trace(w) => (Some(w), 1.0),
        Sink::Sample(f) => (None, f),
    };
    let (wake_r, wake_w) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )
    .map_err(|e| sys("pipe", e))?;
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            spaces: HashMap::new(),
            next_space: 0,
            pool: Pool {
                cap: pool_cap,
                ..Pool::default()
            },
            writer,
            pending: Vec::new(),
            sampled: Vec::new(),
            moved_out: HashSet::new(),
            fraction,
            last_flush: Instant::now(),
            next_mapping: 0,
            start_mono,
            forks: HashMap::new(),
            retired: Vec::new(),
            dying: Vec::new(),
            reap: Vec::new(),
            failure: None,
            zero: Box::new([0; PAGE as usize]),
            method,
            shmem: shmem_supported(),
            continue_wp: true,
        }),
        counts: counts.clone(),
        boundary: Mutex::new(Boundary::default()),
        answered: Condvar::new(),
        release: AtomicBool::new(false),
        released: AtomicBool::new(false),
        quit: AtomicBool::new(false),
        wake_w,
    });
    let handler = {
        let shared = shared.clone();
        pt::with_stop_signals_blocked(|| {
            std::thread::Builder::new()
                .name("faults".into())
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        // Checked on the program above.
                        let _ = pin(Pid::from_raw(0), cpu);
                    }
                    fault_thread(shared, wake_r)
                })
        })
        .map_err(|e| sys("thread", e))?
    };
    let mut tracer = Ptracer {
        shared: shared.clone(),
        threads: HashMap::from([(
            root,
            ThreadState {
                space: None,
                tgid: root,
                entry: None,
                mover_code: None,
            },
        )]),
        parked: HashSet::new(),
        root,
        root_status: None,
    };
    shared
        .lock()
        .event(root, ProcessEventKind::Start { command })?;
    let mut reason = "exited".to_string();
    let mut error = None;
    if !seized.is_empty() {
        if let Err(e) = tracer
            .attach_running(root, &seized)
            .and_then(|()| tracer.attach_descendants())
        {
            reason = format!("stopped by an error: {e}");
            let _ = tracer.detach_all();
            error = Some(e);
        }
    }
    if error.is_none() {
        started(&shared, root);
    }
    while error.is_none() {
        if pt::stop_requested() {
            reason = "interrupted: the program was detached and runs on".into();
            if let Err(e) = tracer.detach_all() {
                error = Some(e);
            }
            break;
        }
        match waitpid(None, Some(WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD)) {
            Err(Errno::EINTR) => continue,
            Err(Errno::ECHILD) => break,
            Err(e) => {
                error = Some(sys("waitpid", e));
                break;
            }
            Ok(status) => {
                if let Err(e) = tracer.on_status(status) {
                    // Leave the program running untraced rather than stuck.
                    reason = format!("stopped by an error: {e}");
                    let _ = tracer.detach_all();
                    error = Some(e);
                    break;
                }
            }
        }
        let failure = shared.lock().failure.take();
        if let Some(f) = failure {
            reason = format!("stopped by an error: {f}");
            let _ = tracer.detach_all();
            error = Some(Error::Io {
                path: "trace".into(),
                error: std::io::Error::other(f),
            });
            break;
        }
    }
    shared.quit.store(true, Ordering::SeqCst);
    shared.poke();
    let _ = handler.join();
    // Everything is released (or the program is gone): nothing to hold.
    drop(holder);
    // A boundary asked for now gets no answer but this.
    shared
        .boundary
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .answer
        .get_or_insert(Err(format!("the tracer ended: {reason}")));
    shared.answered.notify_all();
    // A trace that caught nothing says so in its end record, so that an
    // empty result never reads as a clean one.
    if counts.references.load(Ordering::Relaxed) == 0 {
        reason.push_str(
            "; no page reference was caught (the program touched no traced page, or \
             something else held its pages: another userfaultfd, mlock)",
        );
    }
    let end = TraceEnd {
        references: counts.references.load(Ordering::Relaxed),
        evictions: counts.evictions.load(Ordering::Relaxed),
        unevictable: counts.unevictable.load(Ordering::Relaxed),
        reason,
    };
    let mut st = shared.lock();
    st.flush(&counts)?;
    let mut bytes = 0;
    if let Some(w) = st.writer.as_mut() {
        w.finish(&end)?;
        bytes = w.bytes();
    }
    drop(st);
    if let Some(e) = error {
        return Err(e);
    }
    Ok(TraceOutcome {
        writes: counts.writes.load(Ordering::Relaxed),
        end,
        bytes,
        exit_status: tracer.root_status,
    })
}

/// A program traced for `record --backend fault`: the tracer runs in a
/// thread of its own (ptrace requests must come from the thread that
/// launched the program), and at each boundary the recorder takes the
/// pages faulted in since the last one and has them moved out again.
pub struct Sampler {
    shared: Arc<Shared>,
    root: u32,
    thread: Option<std::thread::JoinHandle<Result<TraceOutcome>>>,
    tracer_thread: nix::sys::pthread::Pthread,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Sampler {
    /// Launches `argv` under the tracer. SIGINT and SIGTERM go to the
    /// tracer's thread, which puts every page back and lets the program go;
    /// when the tracer ends for any reason it sends `SIGCHLD` to the
    /// calling thread, to wake a recorder waiting in `sigtimedwait`.
    pub fn start(target: &Target, fraction: f64, counts: Arc<Counts>) -> Result<Sampler> {
        // Before the tracer's thread: a bad command is an error here.
        target.command()?;
        let method = evict_method(None)?;
        let caller = nix::sys::pthread::pthread_self();
        let (tx, rx) = std::sync::mpsc::channel();
        let target = target.clone();
        let thread = std::thread::Builder::new()
            .name("tracer".into())
            .spawn(move || {
                let mut set = nix::sys::signal::SigSet::empty();
                set.add(Signal::SIGINT);
                set.add(Signal::SIGTERM);
                let _ = nix::sys::signal::pthread_sigmask(
                    nix::sys::signal::SigmaskHow::SIG_UNBLOCK,
                    Some(&set),
                    None,
                );
                let me = nix::sys::pthread::pthread_self();
                let r = run(
                    &target,
                    method,
                    usize::MAX,
                    Sink::Sample(fraction),
                    now_mono(),
                    None,
                    counts,
                    |shared, root| {
                        let _ = tx.send((shared.clone(), root, me));
                    },
                );
                // The caller thread outlives the recording.
                let _ = nix::sys::pthread::pthread_kill(caller, Signal::SIGCHLD);
                r
            })
            .map_err(|e| sys("thread", e))?;
        match rx.recv() {
            Ok((shared, root, tracer_thread)) => Ok(Sampler {
                shared,
                root,
                thread: Some(thread),
                tracer_thread,
            }),
            Err(_) => Err(match thread.join() {
                Ok(Err(e)) => e,
                _ => sys("trace", std::io::Error::other("the tracer ended at once")),
            }),
        }
    }

    /// The launched program's pid.
    pub fn root(&self) -> u32 {
        self.root
    }

    /// The processes traced now.
    pub fn pids(&self) -> Vec<u32> {
        let mut p: Vec<u32> = self
            .shared
            .lock()
            .spaces
            .values()
            .map(|s| s.mm.pid)
            .collect();
        p.sort_unstable();
        p.dedup();
        p
    }

    /// Whether the tracer has ended (the program exited, or was let go).
    pub fn finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// The pages faulted in since the last boundary. Faults are held
    /// until [`Sampler::evict`], which must follow.
    pub fn take(&self) -> Vec<Sampled> {
        let taken = self.ask(
            |b| {
                b.taken = None;
                b.take = true;
            },
            |b| b.taken.take(),
        );
        // The tracer ended: what it logged before.
        taken.unwrap_or_else(|| std::mem::take(&mut self.shared.lock().sampled))
    }

    /// Moves the resident pages of the sample (every page when `fraction`
    /// is one) out again, so that their next touch faults; then faults
    /// are served again.
    pub fn evict(&self, fraction: f64) -> Result<()> {
        self.ask(
            |b| {
                b.answer = None;
                b.evict = Some(fraction);
            },
            |b| b.answer.take(),
        )
        .unwrap_or(Ok(()))
        .map_err(|e| sys("trace", std::io::Error::other(e)))
    }

    /// Puts a request to the fault thread and waits for its answer;
    /// `None` if the tracer has ended.
    fn ask<T>(
        &self,
        put: impl FnOnce(&mut Boundary),
        mut answer: impl FnMut(&mut Boundary) -> Option<T>,
    ) -> Option<T> {
        let mut b = self.lock_boundary();
        if self.finished() {
            return None;
        }
        put(&mut b);
        drop(b);
        self.shared.answered.notify_all();
        self.shared.poke();
        let mut b = self.lock_boundary();
        loop {
            if let Some(a) = answer(&mut b) {
                return Some(a);
            }
            if self.finished() {
                return None;
            }
            b = self
                .shared
                .answered
                .wait_timeout(b, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn lock_boundary(&self) -> MutexGuard<'_, Boundary> {
        self.shared
            .boundary
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Ends tracing: if the program still runs, every page is put back and
    /// it runs on untraced. Returns how the tracer ended.
    pub fn stop(mut self) -> Result<TraceOutcome> {
        let Some(thread) = self.thread.take() else {
            return Err(sys("trace", std::io::Error::other("stopped twice")));
        };
        if !thread.is_finished() {
            pt::request_stop();
            // The thread runs until joined below.
            let _ = nix::sys::pthread::pthread_kill(self.tracer_thread, Signal::SIGINT);
        }
        thread
            .join()
            .unwrap_or_else(|_| Err(sys("trace", std::io::Error::other("the tracer panicked"))))
    }
}
