//! One collection of `pagescope serve` (and `top`): every process's
//! kernel sums from `smaps_rollup` (or, above `--pagemap-above`, the same
//! sums from its pagemap, read paced so as not to stop it; above the size
//! cap, only the counters of `status`, which take no page-table walk),
//! its working set since the last collection, the sums per cgroup, and
//! the machine's totals from meminfo, computed by `report total`'s own
//! code.
//!
//! The collector follows each process across collections
//! ([`Tracked`]): its `/proc/PID` files stay open and are read again with
//! `pread`, and its smaps_rollup (a walk of its page tables, nearly all
//! of a collection's cost) is read again only when a kernel signal says
//! its figures may have changed, or when they reach `--max-age`
//! ([`super::refresh`] says which signals and why they suffice).

use super::figures::{Figures, Seen};
use super::paced::Frames;
use super::refresh::{self, Gone, Machine, Reason};
use super::text::{self, Events};
use super::tracked::{pread_all, Opened, Signals, Tracked};
use super::working_set::WorkingSet;
use pagescope_core::analysis::total::{Total, TotalFigures};
use pagescope_core::model::{SnapshotSink, SystemInfo};
use pagescope_core::{Error, Result};
use pagescope_linux::procfs::list_pids;
use pagescope_linux::Root;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::time::{Duration, Instant};

/// What one collection found, in bytes.
#[derive(Clone, Debug, Default)]
pub struct Collection {
    /// The user processes (kernel threads and zombies are not listed; a
    /// process whose main thread has exited while others run on is).
    pub processes: Vec<ProcessFigures>,
    /// Sums of the processes per cgroup (cgroup v2 path).
    pub cgroups: BTreeMap<String, Figures>,
    /// The machine, from meminfo.
    pub machine: TotalFigures,
    /// The machine's page size.
    pub page_size: u64,
    /// Processes whose smaps_rollup walk was skipped (above the size
    /// cap) or refused.
    pub skipped: u64,
    /// Processes the refs working set leaves out: above the working-set
    /// size cap (`None` with another backend).
    pub working_set_skipped: Option<u64>,
    /// Processes walked in this collection, by reason.
    pub walked: BTreeMap<&'static str, u64>,
    /// Of those, the processes whose pagemap was read (paced) instead of
    /// their smaps_rollup.
    pub paced: u64,
    /// Wall time the collection took.
    pub elapsed: Duration,
    /// CPU time the collecting thread spent on it.
    pub cpu: Duration,
}

/// A process and its figures.
#[derive(Clone, Debug, Default)]
pub struct ProcessFigures {
    /// Its pid.
    pub pid: u32,
    /// Its command name.
    pub comm: String,
    /// Its command line, when asked for (`--cmdline`).
    pub cmdline: Option<String>,
    /// Its figures.
    pub figures: Figures,
    /// How long ago its smaps_rollup figures were read (`None`: never,
    /// as for a process above the size cap).
    pub age: Option<Duration>,
}

/// What a collection asks.
#[derive(Debug)]
pub struct Settings {
    /// Where /proc is.
    pub root: Root,
    /// Above this resident + swapped size a process's smaps_rollup is not
    /// read (0: no cap).
    pub max_process_size: u64,
    /// Above this resident + swapped size a process's figures are summed
    /// from its pagemap, read paced, instead of its smaps_rollup (0:
    /// never).
    pub pagemap_above: u64,
    /// Above this resident size the refs backend leaves a process's
    /// referenced bits alone (0: no cap): clearing them flushes its TLB,
    /// and its next pass over its memory refills it, a stop that grows
    /// with its size.
    pub max_working_set_size: u64,
    /// Label processes with their command lines.
    pub cmdline: bool,
    /// The oldest a process's figures may get: each process is walked
    /// again after between half of this and this (spread by pid, so that
    /// the walks of idle processes do not all fall in one collection).
    pub max_age: Duration,
}

/// The collector, kept across collections.
pub struct Collector {
    settings: Settings,
    page_size: u64,
    working_set: WorkingSet,
    buf: Vec<u8>,
    /// kpageflags and kpagecount, for paced walks (`None`: not readable
    /// here, and every process's smaps_rollup is read).
    frames: Option<Frames>,
    /// The user processes followed.
    procs: HashMap<u32, Tracked>,
    /// Kernel threads and zombies: their stat, and start time.
    no_memory: HashMap<u32, (File, u64)>,
    /// The machine-wide counters at the last collection.
    events: Option<(Events, Vec<u8>)>,
    generation: u64,
}

impl Collector {
    /// A collector with these settings and working-set backend.
    pub fn new(settings: Settings, working_set: WorkingSet) -> Collector {
        // The collector's own first runs of its code paths would map more
        // pages of the C library and walk every process that maps it
        // again (`Reason::FileSharer`); mapped up front, they map none.
        // Where the kernel refuses, those walks happen: no figure
        // depends on it.
        let _ = pagescope_linux::system::map_own_files();
        let frames = match settings.pagemap_above {
            0 => None,
            _ => Frames::open(&settings.root.proc).ok(),
        };
        Collector {
            settings,
            page_size: pagescope_linux::system::page_size(),
            working_set,
            buf: Vec::with_capacity(64 * 1024),
            frames,
            procs: HashMap::new(),
            no_memory: HashMap::new(),
            events: None,
            generation: 0,
        }
    }

    /// Collects once.
    pub fn collect(&mut self) -> Result<Collection> {
        let started = Instant::now();
        let cpu_start = thread_cpu();
        self.generation += 1;
        let proc = self.settings.root.proc.clone();
        let mut out = Collection {
            page_size: self.page_size,
            ..Collection::default()
        };
        let machine = self.machine_events();
        // The cheap signals of every process.
        let mut order: Vec<(u32, Option<Signals>, bool)> = Vec::new();
        let mut gone: Vec<Tracked> = Vec::new();
        for pid in list_pids(&proc)? {
            if let Some((stat, start)) = self.no_memory.get(&pid) {
                let same = pread_all(stat, &mut self.buf).is_ok()
                    && text::stat(&self.buf).is_some_and(|s| s.start_time == *start);
                if same {
                    continue;
                }
                self.no_memory.remove(&pid);
            }
            if let Some(t) = self.procs.get_mut(&pid) {
                let prev = t.signals;
                match t.signals(&mut self.buf) {
                    Ok(Some(s)) => {
                        t.generation = self.generation;
                        order.push((pid, Some(prev), false));
                        t.signals = s;
                        continue;
                    }
                    // A zombie now, or its main thread exited (or the
                    // thread its memory was read through): opened afresh.
                    Ok(None) => gone.extend(self.procs.remove(&pid)),
                    Err(e) if e.is_gone() => gone.extend(self.procs.remove(&pid)),
                    Err(e) => return Err(e),
                }
            }
            match self.open(pid) {
                Ok(true) => order.push((pid, None, true)),
                Ok(false) => {}
                Err(e) if e.is_gone() => {}
                Err(e) => return Err(e),
            }
        }
        let generation = self.generation;
        let left: Vec<u32> = self
            .procs
            .iter()
            .filter(|(_, t)| t.generation != generation)
            .map(|(&p, _)| p)
            .collect();
        for pid in left {
            gone.extend(self.procs.remove(&pid));
        }
        self.no_memory
            .retain(|pid, _| !self.procs.contains_key(pid));
        // What each process's signals say.
        let parents: HashSet<u32> = order
            .iter()
            .filter(|(_, _, new)| *new)
            .map(|(pid, _, _)| self.procs[pid].ppid)
            .collect();
        let now = Instant::now();
        let observed = pagescope_linux::observer::observed(&self.settings.root.run);
        let mut touched: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        let mut flags = Vec::with_capacity(order.len());
        for (pid, prev, new) in &order {
            let t = self.procs.get_mut(pid).expect("listed above");
            t.observed = observed.contains(&(*pid, t.start_time));
            let s = t.signals;
            let p = prev.unwrap_or_default();
            let ran = *new || s.run_ns.is_none() || s.run_ns != p.run_ns;
            let mut f = refresh::Seen {
                new: *new,
                ran,
                faulted: !new && s.faults != p.faults,
                anon_moved: !new && s.resident - s.shared != p.resident - p.shared,
                file_moved: !new && s.shared != p.shared,
                forked: parents.contains(pid),
                due: t.read_at.is_none_or(|r| now.duration_since(r) >= t.max_age),
                swap: t.rollup_last.is_some_and(|r| r.swap > 0),
                anon_shared: t.rollup_last.is_some_and(|r| r.shares_anonymous()),
                no_working_set: no_working_set(t, &self.settings),
                ..refresh::Seen::default()
            };
            if ran {
                match t.read_maps(&mut self.buf) {
                    Ok(m) => {
                        let old = std::mem::replace(&mut t.mapped, m);
                        let m = &t.mapped;
                        if f.file_moved {
                            // Its count of file pages moved: any of its
                            // files, before or now.
                            let mut all = old.files;
                            all.extend_from_slice(&m.files);
                            touched.insert(*pid, all);
                        } else if !new && m.hash != old.hash {
                            // Only its mappings of files: those that came
                            // or went (a mapping moved or split keeps its
                            // pages).
                            f.file_moved = true;
                            let diff = m
                                .files
                                .iter()
                                .filter(|x| old.files.binary_search(x).is_err())
                                .chain(
                                    old.files
                                        .iter()
                                        .filter(|x| m.files.binary_search(x).is_err()),
                                )
                                .copied()
                                .collect();
                            touched.insert(*pid, diff);
                        }
                    }
                    Err(e) if e.is_gone() => {}
                    Err(Error::PermissionDenied { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            f.shmem = t.mapped.shmem;
            flags.push(f);
        }
        let seen: Vec<refresh::Seen<'_>> = order
            .iter()
            .zip(&flags)
            .map(|((pid, _, _), f)| refresh::Seen {
                files: &self.procs[pid].mapped.files,
                touched: match (f.file_moved, touched.get(pid)) {
                    (true, Some(t)) => &t[..],
                    // Its count moved but its maps were not read: all
                    // it maps.
                    (true, None) => &self.procs[pid].mapped.files,
                    (false, _) => &[],
                },
                ..*f
            })
            .collect();
        let gone_seen: Vec<Gone<'_>> = gone
            .iter()
            .map(|t| Gone {
                anon_shared: t.rollup_last.is_none_or(|r| r.shares_anonymous()),
                files: &t.mapped.files,
            })
            .collect();
        let refs = matches!(self.working_set, WorkingSet::Refs);
        out.working_set_skipped = refs.then_some(0);
        let swap_used = swap_used(&proc);
        let mut shmem_swap = pagescope_linux::shmem::SwapCache::new();
        let reasons = refresh::plan(&seen, &gone_seen, machine, refs);
        drop(seen);
        // Walk those the plan names; the others keep their figures.
        let mut walked_seen = Vec::new();
        let mut names = Vec::new();
        for ((pid, _, _), reason) in order.iter().zip(reasons) {
            let t = self.procs.get_mut(pid).expect("listed above");
            let frames = self.frames.as_mut();
            let walk = Walk {
                refs,
                swap_used,
                shmem_swap: &mut shmem_swap,
                frames,
            };
            match Self::refresh(t, reason, &self.settings, walk, &mut self.buf) {
                Ok(true) => {
                    let r = reason.expect("a walk has a reason");
                    *out.walked.entry(reason_name(r)).or_default() += 1;
                    out.paced += u64::from(t.paced);
                }
                Ok(false) => {}
                Err(e) if e.is_gone() => continue,
                Err(e) => return Err(e),
            }
            if t.read_at.is_none() {
                out.skipped += 1;
            } else if let Some(n) = &mut out.working_set_skipped {
                *n += u64::from(no_working_set(t, &self.settings));
            }
            match t.read_cgroup(&mut self.buf) {
                Ok(()) => {}
                Err(e) if e.is_gone() => continue,
                Err(e) => return Err(e),
            }
            let mut figures = t.figures;
            if refs && reason.is_none() && t.cleared {
                // It did not run: it referenced nothing.
                figures.working_set = Some(0);
            }
            walked_seen.push(Seen {
                pid: *pid,
                start_time: t.start_time,
                figures,
                walked: t.read_at.is_some(),
            });
            names.push((
                t.comm.clone(),
                t.cmdline.clone(),
                t.cgroup_path.clone(),
                t.read_at,
            ));
        }
        self.working_set.finish(&mut walked_seen, &observed)?;
        let end = Instant::now();
        for (s, (comm, cmdline, cgroup, read_at)) in walked_seen.into_iter().zip(names) {
            out.cgroups.entry(cgroup).or_default().add(&s.figures);
            out.processes.push(ProcessFigures {
                pid: s.pid,
                comm,
                cmdline,
                figures: s.figures,
                age: read_at.map(|r| end.duration_since(r)),
            });
        }
        out.machine = machine_totals(&proc, self.page_size)?;
        out.elapsed = started.elapsed();
        out.cpu = thread_cpu().saturating_sub(cpu_start);
        Ok(out)
    }

    /// Opens a process first seen: `true` if it is a user process (now
    /// followed), `false` for a kernel thread or a zombie.
    fn open(&mut self, pid: u32) -> Result<bool> {
        let proc = &self.settings.root.proc;
        match Tracked::open(proc, pid, &mut self.buf)? {
            Opened::NoMemory(stat, start) => {
                self.no_memory.insert(pid, (stat, start));
                Ok(false)
            }
            Opened::User(mut t) => {
                let Some(s) = t.signals(&mut self.buf)? else {
                    return Ok(false);
                };
                t.signals = s;
                t.generation = self.generation;
                t.max_age = spread(self.settings.max_age, pid, t.start_time);
                if self.settings.cmdline {
                    t.cmdline = Some(t.mem().cmdline(&mut self.buf)?.join(" "));
                }
                self.procs.insert(pid, *t);
                Ok(true)
            }
        }
    }

    /// Walks `t` again if `reason` says so (or reads its status, above
    /// the size cap, or where the walk is refused): `true` if walked.
    fn refresh(
        t: &mut Tracked,
        reason: Option<Reason>,
        settings: &Settings,
        walk: Walk<'_>,
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        let Walk {
            refs,
            swap_used,
            shmem_swap,
            frames,
        } = walk;
        let Some(reason) = reason else {
            return Ok(false);
        };
        if settings.cmdline && matches!(reason, Reason::Own) {
            t.cmdline = Some(t.mem().cmdline(buf)?.join(" "));
        }
        let page = pagescope_linux::system::page_size();
        let swap = t.rollup_last.map_or(0, |r| r.swap * 1024);
        let cap = settings.max_process_size;
        if cap != 0 && t.signals.resident * page + swap > cap {
            // Above the cap: the counters of status, no walk.
            let status = t.mem().status(buf)?;
            let (Some(rss_kb), swap_kb) = (status.vm_rss_kb, status.vm_swap_kb.unwrap_or(0)) else {
                return Err(Error::NotFound {
                    path: t.mem().file_path("status"),
                });
            };
            let status_swap = swap_kb * 1024;
            if rss_kb * 1024 + status_swap > cap {
                t.figures = Figures {
                    rss: Some(rss_kb * 1024),
                    swap: Some(status_swap),
                    ..Figures::default()
                };
                t.read_at = None;
                t.rollup_last = None;
                t.cleared = false;
                return Ok(false);
            }
        }
        let at = Instant::now();
        let mut r = None;
        // Read from pagemap, the swap of its shared memory may be unknown.
        let mut swap_known = true;
        t.paced = false;
        if let (Some(frames), true) = (frames, paced(t, settings)) {
            if let Some((p, known)) = t.read_paced(frames, page, swap_used, shmem_swap, buf)? {
                (r, swap_known) = (Some(p), known);
            }
            t.paced = r.is_some();
        }
        if r.is_none() {
            r = t.read_rollup(buf)?;
        }
        let Some(r) = r else {
            // Refused: RSS and swap from status.
            let status = t.mem().status(buf)?;
            t.figures = Figures {
                rss: status.vm_rss_kb.map(|k| k * 1024),
                swap: Some(status.vm_swap_kb.unwrap_or(0) * 1024),
                ..Figures::default()
            };
            t.read_at = None;
            return Ok(false);
        };
        t.figures = Figures {
            rss: Some(r.rss * 1024),
            pss: Some(r.pss * 1024),
            uss: Some(r.private * 1024),
            swap: swap_known.then_some(r.swap * 1024),
            working_set: None,
        };
        if refs {
            // The working set is what it referenced since the last clear,
            // which came right after its last walk.
            if t.cleared {
                t.figures.working_set = Some(r.referenced * 1024);
            }
            t.cleared = !no_working_set(t, settings) && t.clear_refs()?;
        }
        t.rollup_last = Some(r);
        t.read_at = Some(at);
        Ok(true)
    }

    /// Reads the machine-wide counters and says what moved since the
    /// last collection.
    fn machine_events(&mut self) -> Machine {
        let vmstat = self.settings.root.proc.join("vmstat");
        let events = std::fs::read(&vmstat)
            .map(|t| text::vmstat(&t))
            .unwrap_or_default();
        let mut ksm = Vec::new();
        for name in ["pages_shared", "pages_sharing"] {
            let path = self.settings.root.sys.join("kernel/mm/ksm").join(name);
            ksm.extend(std::fs::read(path).unwrap_or_default());
        }
        let m = match &self.events {
            Some((e, k)) => Machine {
                swap: e.swap != events.swap,
                all: e.collapse != events.collapse || *k != ksm,
            },
            None => Machine::default(),
        };
        self.events = Some((events, ksm));
        m
    }
}

/// What a walk of one process is given.
struct Walk<'a> {
    /// The refs working set is read (and the bits cleared).
    refs: bool,
    /// The machine has pages in swap ([`swap_used`]).
    swap_used: bool,
    /// The shared memory files' pages in swap counted so far in this
    /// collection.
    shmem_swap: &'a mut pagescope_linux::shmem::SwapCache,
    /// The frame files, for a walk of pagemap (`None`: not readable).
    frames: Option<&'a mut Frames>,
}

/// Whether the machine has pages in swap (meminfo `SwapFree` below
/// `SwapTotal`; taken as so if meminfo cannot be read). Without, no
/// process's shared memory is in swap, and a walk of pagemap asks its
/// files nothing: their count of pages in swap (cachestat(2)) walks each
/// file's page cache, 8 to 38 ms of CPU per GiB here. A page that goes
/// to swap after this read moves the vmstat swap counters, and the next
/// collection walks again every process that maps shared memory
/// (`refresh`).
fn swap_used(proc: &std::path::Path) -> bool {
    let Ok(text) = std::fs::read_to_string(proc.join("meminfo")) else {
        return true;
    };
    let Ok(meminfo) = pagescope_core::parse::meminfo::parse(&text) else {
        return true;
    };
    let kb = |key: &str| meminfo.iter().find(|(k, _)| k == key).map(|&(_, v)| v);
    match (kb("SwapTotal"), kb("SwapFree")) {
        (Some(total), Some(free)) => free < total,
        _ => true,
    }
}

/// Whether the refs backend leaves `t`'s referenced bits alone: observed
/// by another pagescope (whose figures are the bits it clears itself),
/// above the working-set size cap (its resident size as `statm` says), or
/// read from its pagemap, which has no accessed bit.
fn no_working_set(t: &Tracked, settings: &Settings) -> bool {
    let cap = settings.max_working_set_size;
    t.observed
        || (cap != 0 && t.signals.resident * pagescope_linux::system::page_size() > cap)
        || paced(t, settings)
}

/// Whether `t`'s figures are summed from its pagemap: its resident and
/// swapped size (statm, and the swap of its last walk) above
/// `--pagemap-above`.
fn paced(t: &Tracked, settings: &Settings) -> bool {
    let cap = settings.pagemap_above;
    let swap = t.rollup_last.map_or(0, |r| r.swap * 1024);
    cap != 0 && t.signals.resident * pagescope_linux::system::page_size() + swap > cap
}

fn reason_name(r: Reason) -> &'static str {
    match r {
        Reason::New => "new",
        Reason::Own => "own",
        Reason::Forked => "forked",
        Reason::Ran => "ran",
        Reason::Machine => "machine",
        Reason::Swap => "swap",
        Reason::AnonSharer => "anon_sharer",
        Reason::FileSharer => "file_sharer",
        Reason::Age => "age",
    }
}

/// A process's own age limit: between half of `max_age` and all of it,
/// fixed by its pid and start time.
fn spread(max_age: Duration, pid: u32, start_time: u64) -> Duration {
    let h = (u64::from(pid) ^ start_time.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let frac = (h >> 11) as f64 / (1u64 << 53) as f64;
    max_age.mul_f64(0.5 + 0.5 * frac)
}

/// The machine's totals: `report total`'s meminfo figures, by its code.
fn machine_totals(proc: &std::path::Path, page_size: u64) -> Result<TotalFigures> {
    let path = proc.join("meminfo");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let meminfo = pagescope_core::parse::meminfo::parse(&text)
        .map_err(|e| Error::corrupt(&path, e.to_string()))?;
    let mut total = Total::new();
    total.system(&SystemInfo {
        page_size,
        meminfo,
        ..SystemInfo::default()
    })?;
    total.close();
    Ok(total.figures)
}

/// CPU time the calling thread has used.
pub fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}
