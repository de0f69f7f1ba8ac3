//! A trace session: what to trace ([`TraceConfig`], [`Target`]), and
//! [`run`], which launches or attaches the program, starts the fault
//! thread and runs the ptrace thread's loop until the program exits or a
//! stop is asked for; [`trace`] does that into a trace file.

use crate::procfs::ProcDir;
use crate::trace::counts::Counts;
use crate::trace::fault::{fault_thread, Command, Shared};
use crate::trace::holder::Holder;
use crate::trace::mm::PAGE;
use crate::trace::os::{now_mono, pin, sys};
use crate::trace::probe::{evict_method, shmem_supported};
use crate::trace::ptrace::{self as pt};
use crate::trace::ptracer::{Ptracer, ThreadState};
use crate::trace::sink::{RefSink, TraceSink};
use crate::trace::state::State;
use pagescope_core::evict::Pool;
use pagescope_core::format::TraceWriter;
use pagescope_core::parse;
use pagescope_core::trace::{
    EndNote, EndReason, EvictMethod, ProcessEventKind, TraceEnd, TraceHeader,
};
use pagescope_core::{Error, Result};
use pagescope_sys::wait::{self, waitpid};
use rustix::io::Errno;
use rustix::process::Signal;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

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
    /// Where `/proc` and `/sys` are.
    pub root: crate::Root,
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
    /// be run), or the attached process's (an error if there is none), from
    /// the procfs `proc`.
    pub(super) fn command(&self, proc: &Path) -> Result<Vec<String>> {
        match self {
            Target::Launch(argv) => {
                crate::launched::resolve(&argv[0]).map_err(|e| sys("cannot run", e))?;
                Ok(argv.clone())
            }
            Target::Attach(pid) => std::fs::read(ProcDir::at(proc, *pid).file_path("cmdline"))
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

/// Traces the program of `config` into its trace file. `started` gets the
/// program's pid once it is traced (an attached one: every page it had
/// is out, and it runs on).
pub fn trace(
    config: &TraceConfig,
    counts: Arc<Counts>,
    started: impl FnOnce(u32),
) -> Result<TraceOutcome> {
    let proc = &config.root.proc;
    let command = config.target.command(proc)?;
    evict_method(Some(config.evict))?;
    // Another pagescope observing the process would corrupt this trace
    // (and this trace its figures).
    let _observing = match config.target {
        Target::Attach(pid) => crate::observer::ObserverLock::acquire(proc, pid, "trace")?,
        Target::Launch(_) => None,
    };
    // At the path only once the program is traced: an attach refused
    // leaves what was there.
    let (file, mut pending) =
        crate::output::create_pending(&config.output).map_err(|e| Error::io(&config.output, e))?;
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
        origin: Some(crate::system::origin(&config.root)),
    };
    let writer = TraceWriter::new(file, &config.output, &header, config.time_resolution_ns)?;
    run(
        &config.target,
        config.evict,
        config.pool_pages.max(1) as usize,
        Box::new(TraceSink::new(writer, start_mono)),
        config.cpu,
        proc,
        counts,
        |_, pid| {
            pending.commit().map_err(|e| Error::io(&config.output, e))?;
            started(pid);
            Ok(())
        },
    )
}

/// Launches or attaches the program and traces it until it exits or a
/// stop is asked for (SIGINT or SIGTERM in this thread). `started` gets
/// the shared state and the program's pid once it runs; an error from it
/// lets the program go and ends the trace with that error. References go to
/// `sink`; a pool of `pool_cap` pages. `cpu`: see [`TraceConfig::cpu`].
/// `proc`: the procfs the traced processes are read from.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    target: &Target,
    method: EvictMethod,
    pool_cap: usize,
    sink: Box<dyn RefSink>,
    cpu: Option<usize>,
    proc: &Path,
    counts: Arc<Counts>,
    started: impl FnOnce(&Arc<Shared>, u32) -> Result<()>,
) -> Result<TraceOutcome> {
    pt::catch_stop_signals().map_err(|e| sys("sigaction", e))?;
    let command = target.command(proc)?;
    let (root, seized) = match target {
        Target::Launch(argv) => {
            let program = crate::launched::resolve(&argv[0]).map_err(|e| sys("cannot run", e))?;
            let child = pt::spawn(&program, argv).map_err(|e| sys("trace", e))?;
            if let Some(cpu) = cpu {
                // Stopped before its exec: its threads and children, and
                // their movers, inherit the mask.
                if let Err(e) = pin(child, cpu) {
                    let _ = pagescope_sys::signals::kill(child, Signal::KILL.as_raw());
                    return Err(e);
                }
            }
            (child, Vec::new())
        }
        Target::Attach(pid) => {
            let seized = pt::seize_process(*pid, pt::options())
                .map_err(|e| sys(&format!("cannot attach to process {pid}"), e))?;
            (*pid, seized)
        }
    };
    // From here on, a descriptor only pagescope holds outlives its death.
    let holder = Holder::start(root).map_err(|e| sys("starting pagescope's holder", e))?;
    let (wake_r, wake_w) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )
    .map_err(|e| sys("pipe", e))?;
    let (commands, received) = mpsc::channel();
    let state = State {
        fault_at: 0,
        spaces: HashMap::new(),
        next_space: 0,
        pool: Pool::new(pool_cap, sink.replaces()),
        sink,
        next_mapping: 0,
        forks: HashMap::new(),
        retired: Vec::new(),
        dying: Vec::new(),
        reap: Vec::new(),
        failure: None,
        zero: Box::new([0; PAGE as usize]),
        method,
        shmem: shmem_supported(),
        continue_wp: true,
    };
    let shared = Arc::new(Shared::new(state, counts.clone(), commands, wake_w));
    let handler = {
        let shared = shared.clone();
        pt::with_stop_signals_blocked(|| {
            std::thread::Builder::new()
                .name("faults".into())
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        // Checked on the program above.
                        let _ = pin(0, cpu);
                    }
                    fault_thread(shared, received, wake_r)
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
        proc: proc.to_path_buf(),
    };
    shared
        .lock()
        .event(root, ProcessEventKind::Start { command })?;
    let mut reason = EndReason::Exited;
    let mut error = None;
    if !seized.is_empty() {
        if let Err(e) = tracer
            .attach_running(root, &seized)
            .and_then(|()| tracer.attach_descendants())
        {
            reason = EndReason::Error(e.to_string());
            let _ = tracer.detach_all();
            error = Some(e);
        }
    }
    if error.is_none() {
        if let Err(e) = started(&shared, root) {
            reason = EndReason::Error(e.to_string());
            let _ = tracer.detach_all();
            error = Some(e);
        }
    }
    while error.is_none() {
        if pt::stop_requested() {
            reason = EndReason::Interrupted;
            if let Err(e) = tracer.detach_all() {
                error = Some(e);
            }
            break;
        }
        match waitpid(None, wait::ALL | wait::NOTHREAD) {
            Err(Errno::INTR) => continue,
            Err(Errno::CHILD) => break,
            Err(e) => {
                error = Some(sys("waitpid", e));
                break;
            }
            // Only with NOHANG.
            Ok(None) => {}
            Ok(Some((tid, status))) => {
                if let Err(e) = tracer.on_status(tid, status) {
                    // Leave the program running untraced rather than stuck.
                    reason = EndReason::Error(e.to_string());
                    let _ = tracer.detach_all();
                    error = Some(e);
                    break;
                }
            }
        }
        let failure = shared.lock().failure.take();
        if let Some(e) = failure {
            reason = EndReason::Error(e.to_string());
            let _ = tracer.detach_all();
            error = Some(e);
            break;
        }
    }
    // A command asked from now on is dropped unanswered: the tracer has
    // ended.
    shared.ask(Command::Quit);
    let _ = handler.join();
    // Everything is released (or the program is gone): nothing to hold.
    drop(holder);
    // A trace that caught nothing says so in its end record, so that an
    // empty result never reads as a clean one.
    let mut notes = Vec::new();
    if counts.references.load(Ordering::Relaxed) == 0 {
        notes.push(EndNote::NoReference);
    }
    let end = TraceEnd {
        references: counts.references.load(Ordering::Relaxed),
        evictions: counts.evictions.load(Ordering::Relaxed),
        unevictable: counts.unevictable.load(Ordering::Relaxed),
        reason,
        notes,
    };
    let bytes = shared.lock().sink.finish(&end, &counts)?;
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
