//! What `pagescope trace --release` did ([`super::release::release_all`]):
//! its steps, each of which says itself in one line, and why it stopped.

use pagescope_core::Error;

/// What a release did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Pages copied back. (Their copies in the store go with the store,
    /// which [`super::release::remove_leftovers`] unmaps through a thread of the process.)
    pub copied: u64,
}

/// What [`super::release::release_all`] did, step by step in the order it did them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseReport {
    /// The steps; each says itself in one line (its `Display`).
    pub steps: Vec<ReleaseStep>,
}

impl ReleaseReport {
    /// Whether anything was given back or taken out (a process left to
    /// its running tracer is not).
    pub fn did_something(&self) -> bool {
        self.steps
            .iter()
            .any(|s| !matches!(s, ReleaseStep::LeftToItsTracer { .. }))
    }
}

/// One thing [`super::release::release_all`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseStep {
    /// A mover that pagescope never attached, found among the released
    /// processes, was ended.
    EndedStrayMover(u32),
    /// A child forked just before pagescope died got its pages back
    /// through the descriptor a holder kept.
    ReleasedThroughHolder {
        /// The process.
        pid: u32,
        /// Pages copied back.
        copied: u64,
    },
    /// Threads of a process, parked by pagescope in the middle of setting
    /// it up, went on.
    Unparked {
        /// The process.
        pid: u32,
        /// How many threads.
        threads: usize,
    },
    /// A process got its pages back through its own userfaultfd, and runs
    /// on untraced.
    Released {
        /// The process.
        pid: u32,
        /// Pages copied back.
        copied: u64,
    },
    /// Movers left behind programs that exited were ended (their pids).
    EndedOrphanedMovers(Vec<u32>),
    /// Holders left by killed pagescopes were ended (how many).
    EndedHolders(usize),
    /// What pagescope had put into a process (descriptors, store, index,
    /// code, dead movers) was removed.
    RemovedLeftovers(u32),
    /// CPUs that killed pagescopes had held polling got their resume
    /// latency limits back ([`crate::resume_latency`]).
    RestoredCpuLatency(Vec<crate::resume_latency::Restored>),
    /// A process among those to release was left alone: a running tracer
    /// (ptrace) has it, a pagescope that lets it go itself.
    LeftToItsTracer {
        /// The process.
        pid: u32,
        /// Its tracer.
        tracer: u32,
    },
}

impl std::fmt::Display for ReleaseStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReleaseStep::EndedStrayMover(pid) => {
                write!(f, "ended mover {pid} left by a killed pagescope")
            }
            ReleaseStep::ReleasedThroughHolder { pid, copied } => write!(
                f,
                "released {pid}: {copied} pages put back through the descriptor \
                 pagescope's holder kept"
            ),
            ReleaseStep::Unparked { pid, threads } => {
                let noun = if *threads == 1 { "thread" } else { "threads" };
                write!(
                    f,
                    "released {pid}: {threads} {noun} went on from where pagescope stopped them"
                )
            }
            ReleaseStep::Released { pid, copied } => write!(
                f,
                "released {pid}: {copied} pages put back; it runs on untraced"
            ),
            ReleaseStep::EndedOrphanedMovers(pids) => write!(
                f,
                "ended {} mover(s) left by a killed pagescope behind a program that exited",
                pids.len()
            ),
            ReleaseStep::EndedHolders(n) => {
                write!(f, "ended {n} holder(s) left by a killed pagescope")
            }
            ReleaseStep::RemovedLeftovers(pid) => {
                write!(
                    f,
                    "released {pid}: pagescope's descriptors and mappings removed"
                )
            }
            ReleaseStep::LeftToItsTracer { pid, tracer } => write!(
                f,
                "left {pid} alone: process {tracer}, which is running, traces it"
            ),
            ReleaseStep::RestoredCpuLatency(cpus) => {
                let each: Vec<String> = cpus
                    .iter()
                    .map(|r| format!("CPU {} to {}", r.cpu, r.value))
                    .collect();
                write!(
                    f,
                    "gave back the resume latency limits a killed pagescope held: {}",
                    each.join(", ")
                )
            }
        }
    }
}

/// Why [`super::release::release_all`] stopped.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReleaseError {
    /// The process to release does not exist.
    NoSuchProcess(u32),
    /// Releasing one of the processes failed.
    Failed {
        /// The process.
        pid: u32,
        /// What was done before the failure.
        done: ReleaseReport,
        /// What failed.
        source: Error,
    },
}

impl ReleaseError {
    /// What was done before the release stopped.
    pub fn done(&self) -> Option<&ReleaseReport> {
        match self {
            ReleaseError::NoSuchProcess(_) => None,
            ReleaseError::Failed { done, .. } => Some(done),
        }
    }
}

impl std::fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReleaseError::NoSuchProcess(pid) => {
                write!(f, "cannot release process {pid}: no such process")
            }
            ReleaseError::Failed { pid, .. } => write!(f, "cannot release process {pid}"),
        }
    }
}

impl std::error::Error for ReleaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReleaseError::NoSuchProcess(_) => None,
            ReleaseError::Failed { source, .. } => Some(source),
        }
    }
}
