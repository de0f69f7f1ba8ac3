//! `pagescope record`: memref's periodic reference-pattern sampling.
//!
//! At every interval boundary the recorder asks a backend ([`Probe`])
//! which pages the targets referenced since the previous boundary, and
//! writes one interval frame. Between boundaries it sleeps in
//! `sigtimedwait`, woken by the launched command's exit, by a stop of a
//! frozen thread that must be passed on, or by Ctrl-C/SIGTERM. The data
//! flow is described in docs/design.md.
#![allow(unsafe_code)]

mod damon;
mod fault;
pub mod freeze;
mod idle;
mod pages;
mod refs;
mod writes;

use crate::procfs::{self, ProcDir};
use freeze::{Exit, Freezer};
use nix::sys::signal::Signal;
use pagescope_core::format::RecordWriter;
use pagescope_core::parse::meminfo;
use pagescope_core::record::{
    Backend, Granularity, Interval, KernelResident, ProcessInfo, RecordEnd, RecordHeader, Scope,
    WriteSource,
};
use pagescope_core::{Error, Result};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use damon::DamonSettings;
pub use refs::has_soft_dirty;
pub use writes::scan_supported;

/// A source of reference bits.
pub trait Probe {
    /// Which backend this is.
    fn backend(&self) -> Backend;
    /// How finely its rows place references.
    fn granularity(&self) -> Granularity;
    /// Where its written counts come from.
    fn writes(&self) -> WriteSource;
    /// Whether reading and clearing are two passes, so that the targets
    /// must be stopped between them for no reference to be lost.
    fn needs_freeze(&self) -> bool;
    /// Clears the reference bits of `pids`: an interval begins.
    fn reset(&mut self, pids: &[u32]) -> Result<()>;
    /// Adds what `pids` referenced since the last reset or collect to
    /// `out`, and clears the bits again for the next interval.
    fn collect(&mut self, pids: &[u32], out: &mut Interval) -> Result<()>;
    /// Launches the command, or attaches the one process of `--pid`,
    /// for a backend that must follow the program itself; returns its
    /// pid. `None`: the backend does not (the recorder launches a
    /// command).
    fn follow(&mut self, _what: &crate::trace::Target) -> Option<Result<u32>> {
        None
    }
    /// For a backend that follows the program: whether it still runs.
    /// Its children are the backend's: the recorder never waits for them.
    fn launched(&mut self) -> Launched {
        Launched::Running
    }
    /// For a backend that follows the program: stops following it, so
    /// that it runs on unrecorded (or says that it has exited).
    fn let_go(&mut self) -> Launched {
        Launched::LetGo
    }
}

/// The state of a command a backend launched.
#[derive(Debug)]
pub enum Launched {
    /// It runs, followed by the backend.
    Running,
    /// It exited with this code (128 + signal if killed).
    Exited(i32),
    /// The backend let it go (Ctrl-C or SIGTERM): it runs on.
    LetGo,
    /// The backend failed, and let it go.
    Failed(Error),
}

/// What to record.
#[derive(Clone, Debug)]
pub enum Target {
    /// Running processes.
    Pids(Vec<u32>),
    /// The processes of a cgroup directory.
    Cgroup(PathBuf),
    /// Every process.
    System,
    /// Launch this command and record it and its descendants.
    Command(Vec<String>),
}

/// Which backend to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The best one this kernel has for the target.
    Auto,
    /// This one.
    Use(Backend),
}

/// A recording's settings.
#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// What to record.
    pub target: Target,
    /// Interval length.
    pub interval: Duration,
    /// Block size (a power of two, at least a page).
    pub block: u64,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Backend choice.
    pub backend: Choice,
    /// Stop the targets while a two-pass backend reads and clears.
    pub freeze: bool,
    /// Output file.
    pub output: PathBuf,
    /// DAMON's settings (the `damon` backend).
    pub damon: DamonSettings,
    /// The fraction of resident pages the `fault` backend moves out at
    /// each boundary (in (0, 1]).
    pub sample: f64,
}

/// Figures for the live line, updated at every boundary.
#[derive(Debug, Default)]
pub struct Live {
    /// Intervals written.
    pub intervals: AtomicU64,
    /// Pages referenced in the last interval.
    pub referenced: AtomicU64,
    /// Recorder CPU in the last interval, per mille of one core.
    pub cpu_permille: AtomicU64,
    /// Bytes written.
    pub bytes: AtomicU64,
}

/// How a recording went.
#[derive(Debug)]
pub struct RecordOutcome {
    /// The header written.
    pub header: RecordHeader,
    /// The end record written.
    pub end: RecordEnd,
    /// Bytes written.
    pub bytes: u64,
    /// The launched command's exit code.
    pub exit_code: Option<i32>,
    /// Processes that started during the recording and could not be read
    /// (those of the start are in the header's notes).
    pub denied_later: Vec<u32>,
}

/// What the note on processes that could not be read says is missing.
pub const DENIED_MISSING: &str = "their references are not recorded";

fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is valid for the call.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of this process (user and system), nanoseconds.
fn own_cpu_ns() -> u64 {
    now_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Kernel memory resident now, from `/proc/meminfo`.
pub fn kernel_resident(proc_root: &Path, page_size: u64) -> Result<KernelResident> {
    let path = proc_root.join("meminfo");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let m = meminfo::parse(&text).map_err(|e| Error::corrupt(&path, e.to_string()))?;
    let kb = |key: &str| m.iter().find(|(k, _)| k == key).map_or(0, |(_, v)| *v);
    let pages = |kb: u64| kb * 1024 / page_size;
    Ok(KernelResident {
        slab: pages(kb("Slab")),
        page_tables: pages(kb("PageTables") + kb("SecPageTables")),
        kernel_stack: pages(kb("KernelStack")),
    })
}

/// Whether the machine has swap switched on (`SwapTotal` of
/// `/proc/meminfo` above 0).
fn has_swap(proc_root: &Path) -> bool {
    std::fs::read_to_string(proc_root.join("meminfo"))
        .ok()
        .and_then(|t| meminfo::parse(&t).ok())
        .and_then(|m| m.into_iter().find(|(k, _)| k == "SwapTotal"))
        .is_some_and(|(_, kb)| kb > 0)
}

/// Picks the backend: the best this kernel offers for the target, or the
/// one asked for if the kernel has it. Returns it with the reason.
///
/// `auto` picks `idle`, else `refs`: both exact. `damon` must be asked
/// for: its counts are estimates, and its kdamonds are a machine-wide
/// facility that pagescope takes only when told to.
fn choose(
    config: &RecordConfig,
    root: &crate::Root,
    page_size: u64,
) -> Result<(Box<dyn Probe>, String)> {
    let system = matches!(config.target, Target::System);
    let named = matches!(config.target, Target::Pids(_) | Target::Command(_));
    let writes = || writes::Writes::new(&root.proc, page_size, system, named);
    let idle = || -> Result<Box<dyn Probe>> {
        Ok(Box::new(idle::Idle::new(
            root,
            page_size,
            config.block,
            system,
            writes(),
        )?))
    };
    let damon = || -> Result<Box<dyn Probe>> {
        Ok(Box::new(damon::Damon::new(
            root,
            page_size,
            config.block,
            config.interval,
            config.damon,
            system,
            writes(),
        )?))
    };
    let refs = || -> Box<dyn Probe> { Box::new(refs::Refs::new(&root.proc, page_size, writes())) };
    let damon_why = || format!("asked for; {}", config.damon.describe());
    match config.backend {
        Choice::Use(Backend::Refs) => Ok((refs(), "asked for".into())),
        Choice::Use(Backend::Idle) => match idle::unavailable(root, page_size) {
            Some(why) => Err(Error::Unsupported {
                what: "the idle backend".into(),
                needs: why,
            }),
            None => Ok((idle()?, "asked for".into())),
        },
        Choice::Use(Backend::Damon) => Ok((damon()?, damon_why())),
        Choice::Use(Backend::Fault) => match &config.target {
            Target::Pids(p) if p.len() > 1 => Err(fault::refuse("more than one running process")),
            Target::Command(_) | Target::Pids(_) => Ok(fault_probe(root, page_size, config)),
            Target::Cgroup(_) => Err(fault::refuse("a cgroup")),
            Target::System => Err(fault::refuse("the whole machine")),
        },
        Choice::Auto => match idle::unavailable(root, page_size) {
            None => Ok((
                idle()?,
                "idle: exact per page, with physical and virtual placement".into(),
            )),
            Some(why) => Ok((refs(), format!("refs: {why}"))),
        },
    }
}

/// The fault backend for a launched command or one attached process, and
/// why.
fn fault_probe(
    root: &crate::Root,
    page_size: u64,
    config: &RecordConfig,
) -> (Box<dyn Probe>, String) {
    let probe = Box::new(fault::Fault::new(
        root,
        page_size,
        config.block,
        config.sample,
    ));
    let why = if config.sample < 1.0 {
        format!(
            "asked for; a fixed random {:.0}% of the pages moved out at each boundary, each \
             that comes back counting {:.1} pages",
            config.sample * 100.0,
            1.0 / config.sample
        )
    } else {
        "asked for".into()
    };
    (probe, why)
}

/// Reads the pids of a cgroup directory (`cgroup.procs`).
fn cgroup_pids(dir: &Path) -> Result<Vec<u32>> {
    let path = dir.join("cgroup.procs");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// The recorder's running state.
struct Recorder<'a> {
    config: &'a RecordConfig,
    root: crate::Root,
    probe: Box<dyn Probe>,
    freezer: Option<Freezer>,
    /// The launched command.
    child: Option<u32>,
    /// Whether the backend launched it (and waits for its processes).
    probe_launched: bool,
    exit_code: Option<i32>,
    seen: HashSet<u32>,
    /// The command line last recorded for each process named by --pid or
    /// launched (and theirs), read again at each boundary (see
    /// [`Recorder::new_processes`]).
    commands: HashMap<u32, (u64, Vec<String>)>,
    /// Processes of the machine or of a cgroup whose memory pagescope may
    /// not read: left out of the recording, and named in a note.
    denied: BTreeSet<u32>,
    /// Boundaries after which a full interval could not be kept.
    overruns: u64,
    page_size: u64,
    buf: Vec<u8>,
}

impl Recorder<'_> {
    /// The processes to record now.
    fn targets(&mut self) -> Result<Vec<u32>> {
        let alive = |p: &u32| self.root.proc.join(p.to_string()).exists();
        let mut pids = match &self.config.target {
            Target::Pids(p) => p.iter().copied().filter(alive).collect(),
            // A cgroup removed (its service stopped) has no processes.
            Target::Cgroup(dir) => match cgroup_pids(dir) {
                Err(e) if e.is_gone() => Vec::new(),
                other => other?,
            },
            Target::System => procfs::list_pids(&self.root.proc)?,
            Target::Command(_) => match self.child {
                Some(c) if self.exit_code.is_none() => procfs::descendants(&self.root.proc, c),
                _ => Vec::new(),
            },
        };
        // A process named by --pid that can't be read is an error (the
        // backend says so); one of many is left out, as a snapshot does.
        if matches!(self.config.target, Target::System | Target::Cgroup(_)) {
            pids.retain(|&p| self.readable(p));
        }
        Ok(pids)
    }

    /// Whether pagescope may read the memory of `pid` (its pagemap, as
    /// its smaps, needs ptrace read access); a process that refuses is
    /// remembered in `denied`, and one that is gone is left to the backend.
    fn readable(&mut self, pid: u32) -> bool {
        if self.seen.contains(&pid) {
            return true;
        }
        if self.denied.contains(&pid) {
            return false;
        }
        let refused = matches!(
            ProcDir::open(&self.root.proc, pid).and_then(|d| d.open_file("pagemap")),
            Err(Error::PermissionDenied { .. })
        );
        if refused {
            self.denied.insert(pid);
        }
        !refused
    }

    /// Takes the exit of a process; notes the launched command's.
    fn on_exit(&mut self, e: Exit) {
        if Some(e.pid) == self.child {
            self.exit_code = Some(e.code);
        }
    }

    /// Passes on stops and reaps exits until nothing is pending.
    fn drain_children(&mut self) {
        while let Ok(Some(st)) = freeze::wait_any(true) {
            let exit = match self.freezer.as_mut() {
                Some(f) => f.on_status(st, false),
                None => freeze::exit_of(st),
            };
            if let Some(e) = exit {
                self.on_exit(e);
            }
        }
    }

    /// After a failure, ends the launched command (if it still runs) and
    /// the processes below it, and reaps it: pagescope does not exit and
    /// leave it running unrecorded. Called once the freezer has let go;
    /// a backend that follows the program lets go of it here, after the
    /// kill. Returns whether there was one to end.
    fn end_launched(&mut self) -> bool {
        let Some(child) = self.child.filter(|_| self.exit_code.is_none()) else {
            return false;
        };
        crate::launched::kill_tree(&self.root.proc, child);
        if self.probe_launched {
            // Its tracer sees the exits, and reaps what it launched.
            let _ = self.probe.let_go();
        }
        crate::launched::reap(child);
        self.exit_code = Some(128 + libc::SIGKILL);
        true
    }

    /// Attaches the freezer to targets it does not hold yet.
    fn attach_new(&mut self, pids: &[u32]) -> Result<()> {
        if let Some(f) = self.freezer.as_mut() {
            for &pid in pids {
                if !self.seen.contains(&pid) {
                    f.attach(pid)
                        .map_err(|e| Error::io(format!("/proc/{pid}"), e))?;
                }
            }
        }
        Ok(())
    }

    /// The processes first seen now, and, in a recording of processes
    /// (not of the machine or a cgroup, where reading every command line
    /// at every boundary would cost too much), those whose command line
    /// changed: an exec, or the launched command, first seen as
    /// pagescope's own fork before its exec. A process recorded again
    /// carries its new command line; readers keep the last.
    fn new_processes(&mut self, pids: &[u32], seq: u64) -> Vec<ProcessInfo> {
        let per_process = matches!(self.config.target, Target::Pids(_) | Target::Command(_));
        let mut out = Vec::new();
        for &pid in pids {
            let new = self.seen.insert(pid);
            if !new && !per_process {
                continue;
            }
            let mut command = ProcDir::open(&self.root.proc, pid)
                .and_then(|d| d.cmdline(&mut self.buf))
                .unwrap_or_default();
            // The launched command is named by the command it runs when
            // first seen (it may be pagescope's fork still, or in the
            // middle of its exec, whose arguments are not all in place),
            // and later by what it shows, once that is its own.
            if Some(pid) == self.child {
                if let Target::Command(argv) = &self.config.target {
                    if new || command.is_empty() || command == std::env::args().collect::<Vec<_>>()
                    {
                        command = argv.clone();
                    }
                }
            }
            let first_seq = match self.commands.get(&pid) {
                Some((_, c)) if command.is_empty() || c == &command => continue,
                Some(&(first, _)) => first,
                None => seq,
            };
            if per_process {
                self.commands.insert(pid, (first_seq, command.clone()));
            }
            out.push(ProcessInfo {
                pid,
                command,
                first_seq,
            });
        }
        if per_process {
            self.commands.retain(|p, _| pids.contains(p));
        }
        out
    }
}

/// Records until the command exits, the targets are gone, the duration
/// is over, or SIGINT/SIGTERM; the file is complete in every case.
pub fn record(config: &RecordConfig, live: &Live) -> Result<RecordOutcome> {
    let root = crate::Root::default();
    let page_size = crate::system::page_size();
    crate::signals::block().map_err(|e| Error::io("sigprocmask", e))?;
    let (probe, why) = choose(config, &root, page_size)?;
    // Two observers of one process corrupt each other's figures (two
    // refs recorders clear each other's accessed bits).
    let mut _observing = Vec::new();
    if let Target::Pids(pids) = &config.target {
        for &pid in pids {
            _observing.extend(crate::observer::ObserverLock::acquire(
                &root.proc, pid, "record",
            )?);
        }
    }
    let scope = match &config.target {
        Target::Pids(p) => Scope::Processes(p.clone()),
        Target::Cgroup(d) => Scope::Cgroup(d.display().to_string()),
        Target::System => Scope::System,
        Target::Command(argv) => Scope::Command(argv.clone()),
    };
    let per_process = matches!(config.target, Target::Pids(_) | Target::Command(_));
    let frozen = config.freeze && probe.needs_freeze() && per_process;
    let mut notes = Vec::new();
    if probe.needs_freeze() && !frozen {
        notes.push(format!(
            "the {} backend reads and clears in two passes and the targets ran on between them \
             ({}): pages touched in that moment at each boundary are missed",
            probe.backend().name(),
            if per_process {
                "--no-freeze"
            } else {
                "only processes named by --pid or launched are stopped"
            }
        ));
    }
    if probe.backend() != Backend::Fault && matches!(config.target, Target::Command(_)) {
        notes.push(format!(
            "the {} backend reads each process at the boundaries: a process that starts \
             and exits between two of them (a short-lived child) is not seen, nor are the \
             references a process made after the last boundary before it exited",
            probe.backend().name()
        ));
    }
    if probe.backend() == Backend::Fault {
        notes.push(
            if crate::trace::shmem_supported() {
                "the fault backend traps private anonymous memory (heap, stacks, anonymous \
                 mappings) and shared memory: references to mapped files and program text \
                 are not counted"
            } else {
                "the fault backend traps private anonymous memory (heap, stacks, anonymous \
                 mappings): references to mapped files, program text and shared memory (which \
                 needs Linux 5.19 here) are not counted"
            }
            .into(),
        );
    }
    // A page's reference bit lives with its frame, and every other
    // backend counts pages in RAM at the boundary.
    if probe.backend() != Backend::Fault && has_swap(&root.proc) {
        notes.push(format!(
            "this machine has swap: a page referenced and then swapped out before the end of \
             its interval is not counted (the {} backend counts the pages in RAM at each \
             boundary); a page read back from swap counts as referenced",
            probe.backend().name()
        ));
    }
    if probe.writes() == WriteSource::PagemapScan {
        notes.push(
            "written pages come from PAGEMAP_SCAN: each recorded process was given a \
             userfaultfd in asynchronous write-protect mode at the first boundary it was \
             seen (its first write to a page in each interval takes a fault the kernel \
             resolves); not counted, so written_pages is short there: writes to mapped \
             files, a process's writes before that boundary (the first interval of a \
             launched command, the interval of an exec), and writes to mappings made and \
             unmapped between two boundaries (short-lived heap arenas and large malloc \
             blocks)"
                .into(),
        );
    }
    if probe.writes() == WriteSource::None {
        notes.push(if matches!(config.target, Target::System) {
            // Say why by what this kernel has: each way of knowing writes
            // belongs to one process, and clearing every process's would
            // disturb their other users (CRIU, another recorder).
            if refs::has_soft_dirty(&root.proc, page_size) {
                "written pages are not recorded for the whole machine: soft-dirty bits \
                 belong to each process, and clearing every process's would disturb their \
                 other users (such as CRIU)"
                    .into()
            } else {
                "written pages are not recorded for the whole machine: this kernel has no \
                 soft-dirty bits (CONFIG_MEM_SOFT_DIRTY), and PAGEMAP_SCAN needs a \
                 userfaultfd in each process, which pagescope gives only to processes named \
                 by --pid or launched"
                    .into()
            }
        } else if matches!(config.target, Target::Cgroup(_)) && writes::scan_supported() {
            "written pages are not known: this kernel has no soft-dirty bits \
             (CONFIG_MEM_SOFT_DIRTY), and pagescope gives the userfaultfd that PAGEMAP_SCAN \
             needs only to processes named by --pid or launched, not to a cgroup's"
                .into()
        } else {
            format!(
                "written pages are not known: this kernel has no soft-dirty bits \
                 (CONFIG_MEM_SOFT_DIRTY), and {}",
                writes::scan_unavailable()
            )
        });
    }
    let mut rec = Recorder {
        config,
        root,
        probe,
        freezer: frozen.then(Freezer::default),
        child: None,
        probe_launched: false,
        exit_code: None,
        seen: HashSet::new(),
        commands: HashMap::new(),
        denied: BTreeSet::new(),
        overruns: 0,
        page_size,
        buf: Vec::new(),
    };
    // The file first: a bad -o must not leave a launched command behind.
    let file = crate::output::create(&config.output).map_err(|e| Error::io(&config.output, e))?;
    let follow = match &config.target {
        Target::Command(argv) => Some(crate::trace::Target::Launch(argv.clone())),
        Target::Pids(p) if p.len() == 1 => Some(crate::trace::Target::Attach(p[0])),
        _ => None,
    };
    if let Some(what) = follow {
        let pid = match rec.probe.follow(&what) {
            Some(pid) => {
                rec.probe_launched = true;
                Some(pid?)
            }
            None => None,
        };
        if let Target::Command(argv) = &config.target {
            rec.child = Some(match pid {
                Some(pid) => pid,
                None => std::process::Command::new(&argv[0])
                    .args(&argv[1..])
                    .spawn()
                    .map_err(|e| Error::io(&argv[0], e))?
                    .id(),
            });
        }
    }
    // The processes that can't be read so far go into the header's notes.
    if matches!(config.target, Target::System | Target::Cgroup(_)) {
        rec.targets()?;
    }
    let denied_at_start = rec.denied.clone();
    if !denied_at_start.is_empty() {
        let pids: Vec<u32> = denied_at_start.iter().copied().collect();
        notes.push(procfs::denied_note(&pids, DENIED_MISSING));
    }
    let start = Instant::now();
    let backend = rec.probe.backend();
    let header = RecordHeader {
        sample: Some(if backend == Backend::Fault {
            config.sample
        } else {
            1.0
        }),
        page_size,
        interval_ns: config.interval.as_nanos() as u64,
        block_size: config.block,
        backend,
        why,
        granularity: rec.probe.granularity(),
        writes: rec.probe.writes(),
        frozen,
        scope,
        start_unix_ns: now_ns(libc::CLOCK_REALTIME),
        start_monotonic_ns: now_ns(libc::CLOCK_MONOTONIC),
        kernel: crate::system::kernel_release(),
        notes,
        nodes: crate::node::block_size(&rec.root.sys)
            .and_then(|bs| crate::node::node_ranges(&rec.root.sys, bs, page_size))
            .unwrap_or_default(),
    };
    let mut out = match RecordWriter::new(file, &config.output, &header) {
        Ok(out) => out,
        Err(e) => {
            rec.end_launched();
            return Err(e);
        }
    };
    let result = run(&mut rec, &mut out, start, live);
    if let Some(f) = rec.freezer.as_mut() {
        for e in f.detach_all() {
            rec.on_exit(e);
        }
    }
    let (intervals, mut reason) = match result {
        Ok(r) => r,
        Err(e) => {
            let mut reason = format!("error: {e}");
            if rec.end_launched() {
                reason.push_str("; the launched command was killed");
            }
            // Finish the file so that it reads as complete up to here.
            let _ = out.finish(&RecordEnd {
                intervals: live.intervals.load(Ordering::Relaxed),
                reason,
                overruns: rec.overruns,
            });
            return Err(e);
        }
    };
    if rec.probe_launched && rec.exit_code.is_none() {
        match rec.probe.let_go() {
            Launched::Exited(code) if rec.child.is_some() => rec.exit_code = Some(code),
            Launched::Failed(e) => reason = format!("{reason}; letting the program go: {e}"),
            Launched::Exited(_) | Launched::Running | Launched::LetGo => {}
        }
    }
    if let (Some(c), None) = (rec.child, rec.exit_code) {
        // Interrupted: the command runs on; wait for it as a shell would.
        rec.exit_code = freeze::wait_pid(c).map(|e| e.code);
    }
    let end = RecordEnd {
        intervals,
        reason,
        overruns: rec.overruns,
    };
    out.finish(&end)?;
    Ok(RecordOutcome {
        header,
        end,
        bytes: out.bytes(),
        exit_code: rec.exit_code,
        denied_later: rec.denied.difference(&denied_at_start).copied().collect(),
    })
}

/// The interval loop; returns the intervals written and why it stopped.
fn run(
    rec: &mut Recorder<'_>,
    out: &mut RecordWriter<std::fs::File>,
    start: Instant,
    live: &Live,
) -> Result<(u64, String)> {
    let config = rec.config;
    let pids = rec.targets()?;
    rec.attach_new(&pids)?;
    for p in rec.new_processes(&pids, 0) {
        out.process(&p)?;
    }
    rec.probe.reset(&pids)?;
    let mut begun = start;
    let mut cpu = own_cpu_ns();
    let mut seq = 0u64;
    let mut next = start;
    loop {
        // Deadlines are absolute, so intervals don't drift; a boundary that
        // took so long that the next deadline is less than half an interval
        // away starts a full interval from now, so that the programs run.
        next += config.interval;
        let now = Instant::now();
        if next < now + config.interval / 2 {
            next = now + config.interval;
            rec.overruns += 1;
        }
        let deadline = match config.duration {
            Some(d) => next.min(start + d),
            None => next,
        };
        let mut reason = None;
        while reason.is_none() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            match crate::signals::wait(deadline - now) {
                Some(Signal::SIGINT | Signal::SIGTERM) => reason = Some("interrupted"),
                Some(_) if !rec.probe_launched => rec.drain_children(),
                _ => {}
            }
            if rec.probe_launched {
                match rec.probe.launched() {
                    Launched::Running => {}
                    Launched::Exited(code) if rec.child.is_some() => rec.exit_code = Some(code),
                    // An attached process: its exit code is its parent's.
                    Launched::Exited(_) => reason = Some("exited"),
                    Launched::LetGo => reason = Some("interrupted"),
                    Launched::Failed(e) => return Err(e),
                }
            }
            if rec.child.is_some() && rec.exit_code.is_some() {
                reason = Some("exited");
            }
        }
        if let Some(f) = rec.freezer.as_mut() {
            let exits = f.freeze().map_err(|e| Error::io("ptrace", e))?;
            for e in exits {
                rec.on_exit(e);
            }
        }
        let ended = Instant::now();
        let pids = rec.targets()?;
        let mut interval = Interval {
            seq,
            start_ns: (begun - start).as_nanos() as u64,
            end_ns: (ended - start).as_nanos() as u64,
            ..Interval::default()
        };
        // Only processes reset at an earlier boundary: a newcomer's bits
        // hold references from before it was recorded.
        let known: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| rec.seen.contains(p))
            .collect();
        let collected = rec.probe.collect(&known, &mut interval);
        // New processes are attached and reset while everything is stopped.
        let attached = rec.attach_new(&pids);
        let fresh: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| !rec.seen.contains(p))
            .collect();
        let reset = rec.probe.reset(&fresh);
        if let Some(f) = rec.freezer.as_mut() {
            f.thaw();
        }
        collected?;
        attached?;
        reset?;
        for p in rec.new_processes(&pids, seq + 1) {
            out.process(&p)?;
        }
        interval.kernel = kernel_resident(&rec.root.proc, rec.page_size)?;
        let now_cpu = own_cpu_ns();
        interval.recorder_cpu_ns = now_cpu - cpu;
        cpu = now_cpu;
        out.interval(&interval)?;
        let span = (ended - begun).as_nanos().max(1) as u64;
        live.intervals.store(seq + 1, Ordering::Relaxed);
        live.referenced
            .store(interval.total().referenced(), Ordering::Relaxed);
        live.cpu_permille
            .store(interval.recorder_cpu_ns * 1000 / span, Ordering::Relaxed);
        live.bytes.store(out.bytes(), Ordering::Relaxed);
        begun = ended;
        seq += 1;
        if let Some(r) = reason {
            return Ok((seq, r.into()));
        }
        if config.duration.is_some_and(|d| ended - start >= d) {
            return Ok((seq, "duration".into()));
        }
        if !matches!(config.target, Target::Command(_)) && pids.is_empty() {
            return Ok((seq, "exited".into()));
        }
    }
}
