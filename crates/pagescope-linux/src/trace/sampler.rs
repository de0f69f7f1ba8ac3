//! `record --backend fault`: a trace session run in a thread of its own,
//! whose faults are sampled and taken at each boundary of the recorder
//! instead of written to a trace file.

use crate::trace::counts::Counts;
use crate::trace::fault::{Command, Shared};
use crate::trace::mm::PAGE;
use crate::trace::os::sys;
use crate::trace::probe::evict_method;
use crate::trace::ptrace::{self as pt};
use crate::trace::session::{run, Target, TraceOutcome};
use crate::trace::sink::{RefSink, Touch, Touched};
use pagescope_core::sample;
use pagescope_core::trace::{Mapping, ProcessEventKind, Residency, TraceEnd};
use pagescope_core::Result;
use pagescope_sys::signals;
use rustix::process::Signal;
use std::any::Any;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

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

/// Whether the page at address `page` is in the fixed random sample of
/// `fraction` of the pages ([`sample::in_sample`]).
fn in_sample(page: u64, fraction: f64) -> bool {
    sample::in_sample(page / PAGE, fraction)
}

/// The sampler's sink: the pages faulted in since the last boundary,
/// each weighed by what it stands for. Pages leave the pool at
/// boundaries only, and pages outside the sample are not watched.
#[derive(Debug)]
struct SampleSink {
    /// The fraction of the pages sampled.
    fraction: f64,
    sampled: Vec<Sampled>,
    /// Pages of the sample out of the program (moved by a boundary, or
    /// when their mapping was registered with a fraction below one).
    moved_out: HashSet<(u32, u64)>,
}

impl RefSink for SampleSink {
    fn replaces(&self) -> bool {
        false
    }

    fn watches(&self, addr: u64) -> bool {
        in_sample(addr, self.fraction)
    }

    fn names_mappings(&self) -> bool {
        false
    }

    fn mapping(&mut self, _m: &Mapping) -> Result<()> {
        Ok(())
    }

    fn event(&mut self, _pid: u32, _kind: ProcessEventKind) -> Result<()> {
        Ok(())
    }

    fn residency(&mut self, _r: &Residency) -> Result<()> {
        Ok(())
    }

    /// The page's weight: `1 / fraction` for a page of the sample that a
    /// boundary moved out, or that is touched for the first time (the
    /// first touches outside the sample are not logged: see
    /// [`RefSink::watches`]), else 1.
    fn reference(&mut self, t: Touched, counts: &Counts) -> Result<()> {
        let sampled = match t.how {
            Touch::Back => self.moved_out.remove(&(t.key, t.page)),
            Touch::First => in_sample(t.page, self.fraction),
            Touch::Write => false,
        };
        let weight = if sampled { 1.0 / self.fraction } else { 1.0 };
        self.sampled.push(Sampled {
            pid: t.pid,
            page: t.page,
            write: t.write,
            weight,
            pfn: None,
            vma: None,
        });
        counts.references.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The pages it referenced since the last boundary keep their frames,
    /// which the recorder reads from pagemap at the boundary, when this
    /// process is gone.
    fn exiting(
        &mut self,
        pid: u32,
        frame: &mut dyn FnMut(u64) -> (Option<u64>, Option<(u64, u64)>),
    ) {
        for s in self
            .sampled
            .iter_mut()
            .filter(|s| s.pid == pid && s.pfn.is_none())
        {
            (s.pfn, s.vma) = frame(s.page);
        }
    }

    /// Sampled pages that come back stand for 1 / fraction.
    fn emptied(&mut self, key: u32, pages: Vec<u64>) {
        if self.fraction < 1.0 {
            self.moved_out.extend(pages.into_iter().map(|p| (key, p)));
        }
    }

    fn evicted(&mut self, pages: &[(u32, u64)]) {
        self.moved_out.extend(pages.iter().copied());
    }

    fn forget(&mut self, key: u32, start: u64, end: u64) {
        self.moved_out
            .retain(|&(k, p)| k != key || p < start || p >= end);
    }

    fn finish(&mut self, _end: &TraceEnd, _counts: &Counts) -> Result<u64> {
        Ok(0)
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A program traced for `record --backend fault`: the tracer runs in a
/// thread of its own (ptrace requests must come from the thread that
/// launched the program), and at each boundary the recorder takes the
/// pages faulted in since the last one and has them moved out again.
pub struct Sampler {
    shared: Arc<Shared>,
    root: u32,
    thread: Option<std::thread::JoinHandle<Result<TraceOutcome>>>,
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
    /// `proc`: the procfs the traced processes are read from.
    pub fn start(
        target: &Target,
        fraction: f64,
        proc: &std::path::Path,
        counts: Arc<Counts>,
    ) -> Result<Sampler> {
        // Before the tracer's thread: a bad command is an error here.
        target.command(proc)?;
        let method = evict_method(None)?;
        let caller = rustix::thread::gettid().as_raw_pid() as u32;
        let (tx, rx) = std::sync::mpsc::channel();
        let target = target.clone();
        let proc = proc.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("tracer".into())
            .spawn(move || {
                let stop = [Signal::INT.as_raw(), Signal::TERM.as_raw()];
                let _ = signals::block_in_thread(&stop, false);
                let r = run(
                    &target,
                    method,
                    usize::MAX,
                    Box::new(SampleSink {
                        fraction,
                        sampled: Vec::new(),
                        moved_out: HashSet::new(),
                    }),
                    None,
                    &proc,
                    counts,
                    |shared, root| {
                        let _ = tx.send((shared.clone(), root));
                        Ok(())
                    },
                );
                // The caller thread outlives the recording.
                let _ = signals::kill_thread(caller, Signal::CHILD.as_raw());
                r
            })
            .map_err(|e| sys("thread", e))?;
        match rx.recv() {
            Ok((shared, root)) => Ok(Sampler {
                shared,
                root,
                thread: Some(thread),
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
        // Once held, no page comes in meanwhile; if the tracer has ended,
        // what it logged before.
        let (held, wait) = mpsc::channel();
        if !self.finished() && self.shared.ask(Command::Hold(held)) {
            let _ = wait.recv();
        }
        self.with_sink(|s| std::mem::take(&mut s.sampled))
    }

    /// Moves the resident pages of the sample (every page when `fraction`
    /// is one) out again, so that their next touch faults; then faults
    /// are served again.
    pub fn evict(&self, fraction: f64) -> Result<()> {
        self.with_sink(|s| s.fraction = fraction);
        let (answer, wait) = mpsc::channel();
        if self.finished() || !self.shared.ask(Command::Evict(answer)) {
            return Ok(());
        }
        // No answer: the tracer has ended, with nothing left to move out.
        wait.recv().unwrap_or(Ok(()))
    }

    /// Runs `f` on the sampler's sink.
    fn with_sink<T>(&self, f: impl FnOnce(&mut SampleSink) -> T) -> T {
        let mut st = self.shared.lock();
        let sink = st.sink.as_any_mut().downcast_mut::<SampleSink>();
        f(sink.expect("a sampler's sink"))
    }

    /// Ends tracing: if the program still runs, every page is put back and
    /// it runs on untraced. Returns how the tracer ended.
    pub fn stop(mut self) -> Result<TraceOutcome> {
        let Some(thread) = self.thread.take() else {
            return Err(sys("trace", std::io::Error::other("stopped twice")));
        };
        if !thread.is_finished() {
            pt::request_stop();
            // Not joined until below.
            let _ = signals::signal_thread(&thread, Signal::INT.as_raw());
        }
        thread
            .join()
            .unwrap_or_else(|_| Err(sys("trace", std::io::Error::other("the tracer panicked"))))
    }
}
