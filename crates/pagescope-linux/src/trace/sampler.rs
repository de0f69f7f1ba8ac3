//! `record --backend fault`: a trace session run in a thread of its own,
//! whose faults are sampled and taken at each boundary of the recorder
//! instead of written to a trace file.

use crate::trace::fault::{Boundary, Shared};
use crate::trace::os::{now_mono, sys};
use crate::trace::probe::evict_method;
use crate::trace::ptrace::{self as pt};
use crate::trace::session::{run, Sink, Target, TraceOutcome};
use crate::trace::state::{Counts, Sampled};
use nix::sys::signal::Signal;
use pagescope_core::Result;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

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
    pub(super) fn ask<T>(
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
