//! The recorder: the interval loop around a backend, with the launched
//! command, the freezer and the output file.

use super::choose::choose;
use super::config::{Live, RecordConfig, RecordOutcome, Target, DENIED_MISSING};
use super::freeze::{self, Born, Exit, Freezer};
use super::machine::kernel_resident;
use super::notes::{header_notes, NOT_HELD};
use super::probe::{Follow, Followed, Launched, Probe};
use crate::procfs::{self, ProcDir};
use pagescope_core::format::RecordWriter;
use pagescope_core::record::{
    Backend, EndNote, EndReason, Interval, ProcessInfo, RecordEnd, RecordHeader, Scope, VirtRow,
    WriteSource,
};
use pagescope_core::{Error, Result};
use pagescope_sys::ptrace;
use rustix::process::Signal;
use rustix::time::ClockId;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The time of `clock`, nanoseconds.
fn now_ns(clock: ClockId) -> u64 {
    let ts = rustix::time::clock_gettime(clock);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of this process (user and system), nanoseconds.
fn own_cpu_ns() -> u64 {
    now_ns(ClockId::ProcessCPUTime)
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
    /// The launched command while it is held at its exec, until its bits
    /// are first cleared ([`crate::launched::hold_at_exec`]).
    held: Option<u32>,
    /// The rows of the processes collected on their way out since the
    /// last boundary ([`Recorder::drain_children`]), and their pids.
    at_exit: (Vec<VirtRow>, HashSet<u32>),
    /// Whether the backend follows the program (launched it, or attached
    /// it, and waits for its processes).
    probe_launched: bool,
    exit_code: Option<i32>,
    seen: HashSet<u32>,
    /// With `--pid`: the processes below those named when the recording
    /// began (pid and start time), listed at the first boundary. They are
    /// not recorded, nor what they fork; what the named processes fork
    /// from then on is ([`Recorder::targets`]).
    before: Option<HashSet<(u32, u64)>>,
    /// The processes first set up between boundaries, where they started
    /// ([`Recorder::set_up_born`]), since the last boundary, with their
    /// command lines then: each has rows in the interval that ends.
    early: HashMap<u32, Vec<String>>,
    /// The processes recorded as the command's or as forked by a `--pid`
    /// target, with their start times: one whose parent exits (moved to
    /// init or a subreaper, out of the tree below the command) stays a
    /// target for as long as it lives ([`Recorder::targets`]).
    followed: HashMap<u32, u64>,
    /// The command line last recorded for each process named by --pid or
    /// launched (and theirs), read again at each boundary (see
    /// [`Recorder::new_processes`]).
    commands: HashMap<u32, (u64, Vec<String>)>,
    /// Processes of the machine or of a cgroup whose memory pagescope may
    /// not read: left out of the recording, and named in a note.
    denied: BTreeSet<u32>,
    /// Processes of the machine or of a cgroup left to another pagescope
    /// that observes them ([`Recorder::leave_observed`]).
    observed: BTreeSet<u32>,
    /// Boundaries after which a full interval could not be kept.
    overruns: u64,
    page_size: u64,
    buf: Vec<u8>,
}

impl Recorder<'_> {
    /// The processes to record now.
    fn targets(&mut self) -> Result<Vec<u32>> {
        let alive = |p: &u32| crate::procfs::ProcDir::at(&self.root.proc, *p).exists();
        let mut pids = match &self.config.target {
            Target::Pids(p) => {
                let mut pids: Vec<u32> = p.iter().copied().filter(alive).collect();
                let proc = &self.root.proc;
                let before = self.before.get_or_insert_with(|| {
                    procfs::descendants_where(proc, &pids, |_, _| true)
                        .into_iter()
                        .collect()
                });
                let forked = procfs::subtree_where(proc, &pids, |pid, start| {
                    !before.contains(&(pid, start))
                });
                for (pid, _) in forked {
                    if !pids.contains(&pid) {
                        pids.push(pid);
                    }
                }
                pids
            }
            // A cgroup removed (its service stopped) has no processes.
            Target::Cgroup(dir) => match cgroup_pids(dir) {
                Err(e) if e.is_gone() => Vec::new(),
                other => other?,
            },
            Target::System => procfs::list_pids(&self.root.proc)?,
            Target::Command(_) => match self.child {
                Some(c) if self.exit_code.is_none() => std::iter::once(c)
                    .chain(
                        procfs::subtree_where(&self.root.proc, &[c], |_, _| true)
                            .into_iter()
                            .map(|d| d.0),
                    )
                    .collect(),
                _ => Vec::new(),
            },
        };
        let following = match self.config.target {
            Target::Command(_) => self.exit_code.is_none(),
            Target::Pids(_) => true,
            Target::System | Target::Cgroup(_) => false,
        };
        if following {
            self.follow(&mut pids);
        }
        // A process named by --pid that can't be read is an error (the
        // backend says so); one of many is left out, as a snapshot does,
        // and so is one the user did not name (forked by one named, or
        // the command's) that pagescope may not read (a setuid program,
        // one made not dumpable) or that another pagescope observes.
        let named: Vec<u32> = match &self.config.target {
            Target::Pids(p) => p.clone(),
            Target::Command(_) => self.child.into_iter().collect(),
            Target::System | Target::Cgroup(_) => Vec::new(),
        };
        pids.retain(|&p| named.contains(&p) || self.readable(p));
        let mut others: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| !named.contains(p))
            .collect();
        let listed = others.len();
        self.leave_observed(&mut others);
        if others.len() != listed {
            pids.retain(|p| named.contains(p) || others.contains(p));
        }
        Ok(pids)
    }

    /// Adds to `pids` (the tree below the command or the named processes)
    /// the processes followed before that have left it, their parent
    /// having exited, and are still alive (the same start time); notes
    /// the start time of each of `pids` for the next boundaries.
    fn follow(&mut self, pids: &mut Vec<u32>) {
        let proc = &self.root.proc;
        let buf = &mut self.buf;
        let mut start = |pid: u32| ProcDir::at(proc, pid).stat(buf).ok().map(|s| s.start_time);
        for &pid in pids.iter() {
            if let Some(t) = start(pid) {
                self.followed.insert(pid, t);
            }
        }
        self.followed.retain(|&pid, &mut t| start(pid) == Some(t));
        for &pid in self.followed.keys() {
            if !pids.contains(&pid) {
                pids.push(pid);
            }
        }
    }

    /// Takes out of `pids` the processes another pagescope observes
    /// (`record --pid`, `trace --pid`, the command a `record` launched:
    /// [`crate::observer::observed`]), where this recording clears bits
    /// process by process (the `refs` backend): its clears would be theirs
    /// too, and their figures wrong. Once left out, a process stays out
    /// (in `observed`, named in a note). The backends that clear page
    /// frames over the whole machine can't leave one process out.
    fn leave_observed(&mut self, pids: &mut Vec<u32>) {
        if self.probe.backend() != Backend::Refs {
            return;
        }
        let locked = crate::observer::observed(&self.root.run);
        let proc = &self.root.proc;
        let buf = &mut self.buf;
        for &(pid, start) in &locked {
            if self.observed.contains(&pid) || !pids.contains(&pid) {
                continue;
            }
            // The pid names the observed process only with its start time.
            let same = ProcDir::at(proc, pid)
                .stat(buf)
                .is_ok_and(|s| s.start_time == start);
            if same {
                self.observed.insert(pid);
            }
        }
        if !self.observed.is_empty() {
            pids.retain(|p| !self.observed.contains(p));
        }
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

    /// Passes on stops and reaps exits until nothing is pending. A
    /// recorded process that ends by itself (`exit`, `exit_group`) stops
    /// on its way out, before its address space goes, where the backend
    /// can collect it (see [`Probe::collects_at_exit`]): what it
    /// referenced since the last boundary joins the interval's rows.
    fn drain_children(&mut self) -> Result<()> {
        while let Ok(Some(st)) = freeze::wait_any(true) {
            let exit = match self.freezer.as_mut() {
                Some(f) => f.on_status(st, false),
                None => freeze::exit_of(st),
            };
            if let Some(e) = exit {
                self.on_exit(e);
            }
        }
        let (exiting, born) = match self.freezer.as_mut() {
            Some(f) => (f.take_exiting(), f.take_born()),
            None => return Ok(()),
        };
        let mut collected = Ok(());
        for b in born {
            if collected.is_ok() {
                collected = self.set_up_born(b);
            }
            if let Some(f) = self.freezer.as_mut() {
                f.resume(b.pid);
            }
        }
        for tid in exiting {
            let pid = ProcDir::at(&self.root.proc, tid)
                .tgid(&mut self.buf)
                .unwrap_or(tid);
            if collected.is_ok()
                && self.seen.contains(&pid)
                && !self.at_exit.1.contains(&pid)
                && ending(&self.root.proc, pid, tid)
            {
                let mut part = Interval::default();
                collected = self.probe.collect(&[pid], &mut part);
                self.at_exit.0.append(&mut part.virt);
                self.at_exit.1.insert(pid);
            }
            if let Some(f) = self.freezer.as_mut() {
                f.resume(tid);
            }
        }
        collected
    }

    /// Sets up a process held before its first instruction (see
    /// [`Freezer::hold_born`]) as a process first seen at a boundary is:
    /// reset, so that what it references from its first instruction on
    /// counts in the interval that runs, and nothing before. A process of
    /// the launched command, or named by `--pid`, or forked by one of
    /// them after the recording began, is set up at its fork and after
    /// each exec (the freezer holds no other). A child that shares its
    /// creator's address space (vfork, `CLONE_VM`: [`Born::own_memory`])
    /// is not reset: that would clear its creator's bits; it is set up at
    /// its exec, or first seen at a boundary.
    fn set_up_born(&mut self, b: Born) -> Result<()> {
        let wanted = matches!(self.config.target, Target::Command(_) | Target::Pids(_));
        if !wanted || !b.own_memory {
            return Ok(());
        }
        self.probe.reset(&[b.pid])?;
        // Followed from here, even if its parent exits before the next
        // boundary lists the tree.
        if let Ok(s) = ProcDir::at(&self.root.proc, b.pid).stat(&mut self.buf) {
            self.followed.insert(b.pid, s.start_time);
        }
        // A forked process is new even where its pid was seen before (a
        // pid used again): its rows start in the interval that runs.
        let new = self.seen.insert(b.pid) || !b.exec;
        if new || self.early.contains_key(&b.pid) {
            let command = ProcDir::open_memory(&self.root.proc, b.pid)
                .and_then(|d| d.cmdline(&mut self.buf))
                .unwrap_or_default();
            self.early.insert(b.pid, command);
        }
        Ok(())
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
        if let Some(f) = self.follower() {
            // Its tracer sees the exits, and reaps what it launched.
            let _ = f.let_go();
        }
        crate::launched::reap(&self.root.proc, child);
        self.exit_code = Some(128 + rustix::process::Signal::KILL.as_raw());
        true
    }

    /// The backend, if it follows the program.
    fn follower(&mut self) -> Option<&mut dyn Follow> {
        if self.probe_launched {
            self.probe.follower()
        } else {
            None
        }
    }

    /// Attaches the freezer to targets it does not hold yet.
    fn attach_new(&mut self, pids: &[u32]) -> Result<()> {
        if let Some(f) = self.freezer.as_mut() {
            for &pid in pids {
                if !self.seen.contains(&pid) {
                    f.attach(pid).map_err(|e| {
                        Error::io(crate::procfs::ProcDir::at(&self.root.proc, pid).path(), e)
                    })?;
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
            let mut command = ProcDir::open_memory(&self.root.proc, pid)
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
                None => match self.early.remove(&pid) {
                    // Set up in the interval that ends.
                    Some(then) => {
                        if command.is_empty() {
                            command = then;
                        }
                        seq.saturating_sub(1)
                    }
                    None => seq,
                },
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
        // Those set up in the interval that ends and gone since, which
        // have rows in it (collected on their way out).
        for (pid, command) in self.early.drain() {
            out.push(ProcessInfo {
                pid,
                command,
                first_seq: seq.saturating_sub(1),
            });
        }
        out
    }
}

/// Whether `pid` ends with its thread `tid`, stopped on its way out
/// (`PTRACE_EVENT_EXIT`): every other thread is on its way out too
/// (`PF_EXITING`, or SIGKILL pending, which `exit_group` sends them), or
/// gone. A thread that ends alone (`pthread_exit`) leaves the process
/// running.
fn ending(proc_root: &Path, pid: u32, tid: u32) -> bool {
    let sigkill = 1u64 << (Signal::KILL.as_raw() - 1);
    let Ok(tasks) = ProcDir::at(proc_root, pid).tasks() else {
        return true;
    };
    let mut buf = Vec::new();
    tasks.into_iter().filter(|&t| t != tid).all(|t| {
        let task = ProcDir::at(proc_root, t);
        task.stat(&mut buf).map_or(true, |s| s.is_exiting())
            || task
                .status(&mut buf)
                .map_or(true, |s| s.sig_pending & sigkill != 0)
    })
}

/// Records until the command exits, the targets are gone, the duration
/// is over, or SIGINT/SIGTERM; the file is complete in every case.
pub fn record(config: &RecordConfig, live: &Live) -> Result<RecordOutcome> {
    let root = config.root.clone();
    let page_size = crate::system::page_size();
    crate::signals::block().map_err(|e| Error::sys("sigprocmask", e))?;
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
    // Two that clear many processes' accessed bits clear each other's.
    let _machine = match &config.target {
        Target::System | Target::Cgroup(_) if probe.backend() != Backend::Fault => {
            let what = match config.target {
                Target::System => "record --system",
                _ => "record --cgroup",
            };
            crate::observer::ObserverLock::acquire_machine(&root.run, what)?
        }
        _ => None,
    };
    let scope = match &config.target {
        Target::Pids(p) => Scope::Processes(p.clone()),
        Target::Cgroup(d) => Scope::Cgroup(d.display().to_string()),
        Target::System => Scope::System,
        Target::Command(argv) => Scope::Command(argv.clone()),
    };
    let per_process = matches!(config.target, Target::Pids(_) | Target::Command(_));
    let frozen = config.freeze && probe.needs_freeze() && per_process;
    let mut notes = header_notes(config, &*probe, &root, page_size, frozen, per_process);
    let at_exit = probe.collects_at_exit();
    let born = probe.resets_alone() && per_process;
    let writes_scanned = probe.writes() == WriteSource::PagemapScan;
    let mut rec = Recorder {
        config,
        root,
        probe,
        freezer: frozen.then(|| {
            let mut f = Freezer::new(&config.root.proc, at_exit);
            if born {
                f.hold_born();
            }
            if writes_scanned {
                f.writes_need_ptrace();
            }
            f
        }),
        child: None,
        held: None,
        at_exit: Default::default(),
        probe_launched: false,
        exit_code: None,
        seen: HashSet::new(),
        before: None,
        early: HashMap::new(),
        followed: HashMap::new(),
        commands: HashMap::new(),
        denied: BTreeSet::new(),
        observed: BTreeSet::new(),
        overruns: 0,
        page_size,
        buf: Vec::new(),
    };
    // A command that can't run is found before the file is made, so that
    // a file already at -o is left as it was.
    if let Target::Command(argv) = &config.target {
        crate::launched::resolve(&argv[0]).map_err(|e| Error::sys("cannot run", e))?;
    }
    // The file first: a bad -o must not leave a launched command behind.
    // It is put at its path once the processes are attached (in `run`): a
    // process that refuses leaves what was there.
    let (file, pending) =
        crate::output::create_pending(&config.output).map_err(|e| Error::io(&config.output, e))?;
    let follow = match &config.target {
        Target::Command(argv) => Some(Followed::Launch(argv.clone())),
        Target::Pids(p) if p.len() == 1 => Some(Followed::Attach(p[0])),
        _ => None,
    };
    if let Some(what) = follow {
        let pid = match rec.probe.follower() {
            Some(f) => {
                rec.probe_launched = true;
                Some(f.follow(&what)?)
            }
            None => None,
        };
        if let Target::Command(argv) = &config.target {
            rec.child = Some(match pid {
                Some(pid) => pid,
                None => {
                    let options = rec.freezer.as_ref().map_or(0, |f| f.options());
                    let launched = crate::launched::hold_at_exec(argv, options)
                        .map_err(|e| Error::io(&argv[0], e))?;
                    if launched.held {
                        rec.held = Some(launched.pid);
                        if let Some(f) = rec.freezer.as_mut() {
                            f.hold(launched.pid);
                        }
                    } else {
                        notes.push(NOT_HELD.into());
                    }
                    launched.pid
                }
            });
        }
    }
    // The launched command is observed as a process of `--pid` is, so
    // that what else of pagescope clears referenced bits (the working set
    // of `serve` and `top`) leaves it alone. Best effort: one that has
    // already exited has nothing to guard.
    if let Some(child) = rec.child {
        let lock = crate::observer::ObserverLock::acquire(&rec.root.proc, child, "record");
        _observing.extend(lock.ok().flatten());
    }
    // The processes that can't be read so far go into the header's notes.
    if matches!(config.target, Target::System | Target::Cgroup(_)) {
        rec.targets()?;
    }
    let denied_at_start = rec.denied.clone();
    if !denied_at_start.is_empty() {
        let pids: Vec<u32> = denied_at_start.iter().copied().collect();
        notes.push(crate::cause::denied_note(
            &rec.root.proc,
            &pids,
            DENIED_MISSING,
        ));
    }
    let observed_at_start = rec.observed.clone();
    if !observed_at_start.is_empty() {
        let pids: Vec<u32> = observed_at_start.iter().copied().collect();
        notes.push(pagescope_core::record::observed_note(&pids, false));
    }
    // Read together, so that times in the recording (from `start`) and
    // the header's clocks agree: the header takes a while to build.
    let start = Instant::now();
    let (start_unix_ns, start_monotonic_ns) =
        (now_ns(ClockId::Realtime), now_ns(ClockId::Monotonic));
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
        start_unix_ns,
        start_monotonic_ns,
        kernel: crate::system::kernel_release(),
        notes,
        nodes: crate::node::block_size(&rec.root.sys)
            .and_then(|bs| crate::node::node_ranges(&rec.root.sys, bs, page_size))
            .unwrap_or_default(),
        origin: Some(crate::system::origin(&rec.root)),
    };
    let mut out = match RecordWriter::new(file, &config.output, &header) {
        Ok(out) => out,
        Err(e) => {
            rec.end_launched();
            return Err(e);
        }
    };
    let result = run(&mut rec, &mut out, pending, start, live);
    if let Some(f) = rec.freezer.as_mut() {
        for e in f.detach_all() {
            rec.on_exit(e);
        }
    }
    let mut notes = Vec::new();
    let denied_later: Vec<u32> = rec.denied.difference(&denied_at_start).copied().collect();
    if !denied_later.is_empty() {
        notes.push(EndNote::Unreadable(denied_later));
    }
    let observed_later: Vec<u32> = rec
        .observed
        .difference(&observed_at_start)
        .copied()
        .collect();
    if !observed_later.is_empty() {
        notes.push(EndNote::Observed(observed_later));
    }
    let untracked = rec.probe.writes_untracked();
    if !untracked.is_empty() {
        let pids: Vec<String> = untracked.iter().map(u32::to_string).collect();
        notes.push(EndNote::Other(format!(
            "written pages of pid {} are not recorded (0 in their rows): the main thread had \
             exited when pagescope was to track them, and tracking writes needs it",
            pids.join(", ")
        )));
    }
    let (intervals, reason) = match result {
        Ok(r) => r,
        Err(e) => {
            if rec.end_launched() {
                notes.push(EndNote::LaunchedKilled);
            }
            // Finish the file so that it reads as complete up to here.
            let _ = out.finish(&RecordEnd {
                intervals: live.intervals.load(Ordering::Relaxed),
                reason: EndReason::Error(e.to_string()),
                notes,
                overruns: rec.overruns,
            });
            return Err(e);
        }
    };
    if rec.exit_code.is_none() {
        match rec.follower().map(|f| f.let_go()) {
            Some(Launched::Exited(code)) if rec.child.is_some() => rec.exit_code = Some(code),
            Some(Launched::Failed(e)) => notes.push(EndNote::NotLetGo(e.to_string())),
            Some(Launched::Exited(_) | Launched::Running | Launched::LetGo) | None => {}
        }
    }
    // Ended by --duration or Ctrl-C, the command runs on: the caller
    // waits for it, as a shell would, once the file is complete.
    let runs_on = rec.child.filter(|_| rec.exit_code.is_none());
    let end = RecordEnd {
        intervals,
        reason,
        notes,
        overruns: rec.overruns,
    };
    out.finish(&end)?;
    Ok(RecordOutcome {
        header,
        end,
        bytes: out.bytes(),
        exit_code: rec.exit_code,
        runs_on,
    })
}

/// Waits for a launched command that ran on after its recording
/// ([`RecordOutcome::runs_on`]); returns its exit code (128 plus the
/// signal that ended it).
pub fn wait_launched(pid: u32) -> Option<i32> {
    freeze::wait_pid(pid).map(|e| e.code)
}

/// The interval loop; returns the intervals written and why it stopped.
fn run(
    rec: &mut Recorder<'_>,
    out: &mut RecordWriter<std::fs::File>,
    mut pending: crate::output::Pending,
    start: Instant,
    live: &Live,
) -> Result<(u64, EndReason)> {
    let config = rec.config;
    let pids = rec.targets()?;
    rec.attach_new(&pids)?;
    for p in rec.new_processes(&pids, 0) {
        out.process(&p)?;
    }
    rec.probe.reset(&pids)?;
    pending.commit().map_err(|e| Error::io(&config.output, e))?;
    // A launched command runs from here: nothing it did is lost to the
    // first reset, and nothing before it counts.
    if let Some(pid) = rec.held.take() {
        match rec.freezer.as_mut() {
            Some(f) => f.thaw(),
            None => ptrace::detach(pid, 0).map_err(|e| Error::sys("ptrace", e))?,
        }
    }
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
                Some(Signal::INT | Signal::TERM) => reason = Some(EndReason::Interrupted),
                Some(_) if !rec.probe_launched => rec.drain_children()?,
                _ => {}
            }
            if let Some(state) = rec.follower().map(|f| f.launched()) {
                match state {
                    Launched::Running => {}
                    Launched::Exited(code) if rec.child.is_some() => rec.exit_code = Some(code),
                    // An attached process: its exit code is its parent's.
                    Launched::Exited(_) => reason = Some(EndReason::Exited),
                    Launched::LetGo => reason = Some(EndReason::Interrupted),
                    Launched::Failed(e) => return Err(e),
                }
            }
            if rec.child.is_some() && rec.exit_code.is_some() {
                reason = Some(EndReason::Exited);
            }
        }
        if let Some(f) = rec.freezer.as_mut() {
            let exits = f.freeze().map_err(|e| Error::sys("ptrace", e))?;
            for e in exits {
                rec.on_exit(e);
            }
        }
        // The interval ends once the targets are known: listing them
        // (from /proc, 6 to 10 ms on a busy machine) comes before any of
        // them is collected.
        let pids = rec.targets()?;
        let mut ended = Instant::now();
        let mut interval = Interval {
            seq,
            start_ns: (begun - start).as_nanos() as u64,
            end_ns: (ended - start).as_nanos() as u64,
            ..Interval::default()
        };
        // Only processes reset at an earlier boundary: a newcomer's bits
        // hold references from before it was recorded. One collected on
        // its way out is in the rows taken then.
        let known: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| rec.seen.contains(p) && !rec.at_exit.1.contains(p))
            .collect();
        let collected = rec.probe.collect(&known, &mut interval);
        interval.virt.append(&mut rec.at_exit.0);
        rec.at_exit.1.clear();
        if let Some(cut) = rec.probe.cut() {
            ended = cut.max(begun);
            interval.end_ns = (ended - start).as_nanos() as u64;
        }
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
            return Ok((seq, r));
        }
        if config.duration.is_some_and(|d| ended - start >= d) {
            return Ok((seq, EndReason::Duration));
        }
        if !matches!(config.target, Target::Command(_)) && pids.is_empty() {
            return Ok((seq, EndReason::Exited));
        }
    }
}
