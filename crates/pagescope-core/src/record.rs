//! The data model of a reference-pattern recording (`pagescope record`).
//!
//! A recording is a sequence of intervals. At the end of each interval the
//! recorder asks its backend which pages were referenced (and written)
//! since the interval began, and logs one row per block of memory with any
//! reference: how many of its pages were referenced, by class, and how
//! many were written. This is the log of memref, with the page-table walk
//! replaced by whatever interface the kernel offers (the backend).

use serde::{Deserialize, Serialize};

/// Where reference bits come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Backend {
    /// `/sys/kernel/mm/page_idle/bitmap`: exact, per page.
    Idle,
    /// DAMON: adaptive regions, one sampled page per region.
    Damon,
    /// `clear_refs` and smaps `Referenced:`: exact, per VMA.
    Refs,
    /// userfaultfd: pages are evicted at each boundary; what faults back
    /// was referenced. Exact, per page, with writes.
    Fault,
}

impl Backend {
    /// Lower-case name, as `--backend` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Idle => "idle",
            Backend::Damon => "damon",
            Backend::Refs => "refs",
            Backend::Fault => "fault",
        }
    }
}

/// Where written pages come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteSource {
    /// Not known: written counts are zero and reports show them as missing.
    None,
    /// Soft-dirty bits (`clear_refs` 4, pagemap bit 55).
    SoftDirty,
    /// The backend sees writes itself.
    Backend,
    /// `PAGEMAP_SCAN` of pages written under asynchronous userfaultfd
    /// write protection (Linux 6.7); anonymous and shared memory only.
    PagemapScan,
}

/// What was recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scope {
    /// These processes.
    Processes(#[serde(deserialize_with = "crate::format::limits::pids")] Vec<u32>),
    /// The processes of a cgroup (path under the cgroup mount).
    Cgroup(String),
    /// The whole machine.
    System,
    /// A command pagescope launched, and its descendants.
    Command(#[serde(deserialize_with = "crate::format::limits::args")] Vec<String>),
}

/// How finely a row places its references.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Granularity {
    /// Rows are blocks (or block pieces) counted page by page.
    Page,
    /// Rows are whole VMAs: the backend cannot tell where inside a VMA the
    /// referenced pages are.
    Vma,
    /// Rows are sampled regions (DAMON): counts are estimates.
    Region,
}

/// The first record of a recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordHeader {
    /// Bytes per page.
    pub page_size: u64,
    /// Nominal interval length.
    pub interval_ns: u64,
    /// Block size rows are summed over.
    pub block_size: u64,
    /// The backend.
    pub backend: Backend,
    /// Why it was chosen (`--backend auto`) or that it was asked for.
    pub why: String,
    /// How finely rows place references.
    pub granularity: Granularity,
    /// Where written counts come from.
    pub writes: WriteSource,
    /// Whether the recorded processes were stopped while the backend read
    /// and cleared their reference bits at each boundary, so that no
    /// reference fell between the two.
    pub frozen: bool,
    /// What was recorded.
    pub scope: Scope,
    /// Wall-clock start, nanoseconds since the Unix epoch; interval times
    /// are nanoseconds after it.
    pub start_unix_ns: u64,
    /// The same moment on `CLOCK_MONOTONIC`.
    pub start_monotonic_ns: u64,
    /// `uname -r`.
    pub kernel: String,
    /// What the recording does not hold, in words.
    #[serde(deserialize_with = "crate::format::limits::notes")]
    pub notes: Vec<String>,
    /// PFN ranges of each NUMA node (from sysfs memory blocks), to place
    /// physical rows on nodes.
    #[serde(deserialize_with = "crate::format::limits::ranges")]
    pub nodes: Vec<crate::model::NodeRange>,
    /// The fraction of pages the backend watched, each page seen counting
    /// `1 / sample` (1.0: every page counts once; below 1, the `fault`
    /// backend's `--sample`, whose counts are estimates). Stored in a
    /// [`Sampling`] frame of its own after the header, so that readers
    /// older than it still read the header; `None` in recordings made
    /// before it was written.
    #[serde(skip)]
    pub sample: Option<f64>,
    /// The machine and boot it was made on, stored in an origin frame of
    /// its own after the header (see [`crate::model::Origin`]); `None`
    /// in files written before it.
    #[serde(skip)]
    pub origin: Option<crate::model::Origin>,
}

/// The record header's sampling, in a frame of its own (see
/// [`RecordHeader::sample`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// The fraction of pages watched, in (0, 1].
    pub fraction: f64,
}

/// Page counts of one row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Referenced pages mapped by a process (anonymous or file).
    pub user: u64,
    /// Referenced page-cache pages not mapped by any process.
    pub page_cache: u64,
    /// Written pages (a subset of the referenced ones).
    pub written: u64,
}

impl Counts {
    /// Adds `o` in.
    pub fn add(&mut self, o: &Counts) {
        // Saturating: a damaged file's counts must not wrap a sum.
        self.user = self.user.saturating_add(o.user);
        self.page_cache = self.page_cache.saturating_add(o.page_cache);
        self.written = self.written.saturating_add(o.written);
    }

    /// Referenced pages of every class.
    pub fn referenced(&self) -> u64 {
        self.user.saturating_add(self.page_cache)
    }
}

/// References to one block of physical memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhysRow {
    /// Block number: the block starts at `block * block_size`.
    pub block: u64,
    /// Its counts.
    pub counts: Counts,
}

/// References to one virtual range of one process: the part of a virtual
/// block inside one VMA (page granularity), or a whole VMA.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VirtRow {
    /// The process.
    pub pid: u32,
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Its counts.
    pub counts: Counts,
}

/// Kernel memory resident at the end of an interval, in pages. No
/// user-space interface reveals references to kernel pages, so these are
/// resident counts, never referenced ones (from `/proc/meminfo`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelResident {
    /// Slab caches (`Slab`).
    pub slab: u64,
    /// Page tables (`PageTables`, plus `SecPageTables`).
    pub page_tables: u64,
    /// Kernel stacks (`KernelStack`).
    pub kernel_stack: u64,
}

impl KernelResident {
    /// All three.
    pub fn total(&self) -> u64 {
        self.slab + self.page_tables + self.kernel_stack
    }
}

/// One interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interval {
    /// Sequence number, from 0.
    pub seq: u64,
    /// Start, nanoseconds after the recording start.
    pub start_ns: u64,
    /// End, nanoseconds after the recording start.
    pub end_ns: u64,
    /// Physical blocks with references, when the backend knows frames.
    #[serde(deserialize_with = "crate::format::limits::phys_rows")]
    pub phys: Vec<PhysRow>,
    /// Virtual ranges with references, when recording processes.
    #[serde(deserialize_with = "crate::format::limits::virt_rows")]
    pub virt: Vec<VirtRow>,
    /// Kernel memory resident at the end.
    pub kernel: KernelResident,
    /// CPU time the recorder used in the interval.
    pub recorder_cpu_ns: u64,
    /// How densely the 2 MiB regions with a reference were referenced:
    /// `(pages referenced in the region, regions)`, ascending, when the
    /// backend knows pages (virtual regions for processes, physical ones
    /// for the machine). A region referenced in all its pages (512 of
    /// 4 KiB) would have paid as one huge page.
    #[serde(deserialize_with = "crate::format::limits::huge")]
    pub huge: Vec<(u16, u32)>,
    /// The referenced pages themselves, per process, when a page-exact
    /// backend records processes: what working sets over several
    /// intervals are computed from.
    #[serde(deserialize_with = "crate::format::limits::run_processes")]
    pub pages: Vec<PageRuns>,
}

/// Referenced virtual pages of one process, as runs of consecutive pages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRuns {
    /// The process.
    pub pid: u32,
    /// `(first page number, pages)`, ascending, the first page stored as
    /// the distance from the end of the run before (small numbers, which
    /// compress well).
    #[serde(deserialize_with = "crate::format::limits::runs")]
    pub runs: Vec<(u64, u64)>,
}

impl PageRuns {
    /// Runs of the sorted, distinct page numbers `pages`.
    pub fn from_sorted(pid: u32, pages: &[u64]) -> PageRuns {
        let mut runs = Vec::new();
        let mut end = 0;
        for run in pages.chunk_by(|a, b| b == &(a + 1)) {
            runs.push((run[0] - end, run.len() as u64));
            end = run[0] + run.len() as u64;
        }
        PageRuns { pid, runs }
    }

    /// The runs as `(first page, pages)`.
    pub fn absolute(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut end = 0u64;
        self.runs.iter().map(move |&(gap, len)| {
            let start = end.saturating_add(gap);
            end = start.saturating_add(len);
            (start, len)
        })
    }
}

/// Builds an interval's `huge` histogram from the 2 MiB region of each
/// referenced page (any order, one entry per page).
pub fn huge_histogram<T: Ord>(mut regions: Vec<T>) -> Vec<(u16, u32)> {
    regions.sort_unstable();
    let mut per: std::collections::BTreeMap<u16, u32> = std::collections::BTreeMap::new();
    for run in regions.chunk_by(|a, b| a == b) {
        *per.entry(run.len().min(u16::MAX as usize) as u16)
            .or_default() += 1;
    }
    per.into_iter().collect()
}

impl Interval {
    /// Totals over the physical rows, or over the virtual ones when there
    /// are no physical rows.
    pub fn total(&self) -> Counts {
        let mut c = Counts::default();
        if self.phys.is_empty() {
            self.virt.iter().for_each(|r| c.add(&r.counts));
        } else {
            self.phys.iter().for_each(|r| c.add(&r.counts));
        }
        c
    }
}

/// A process seen by the recorder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Its pid.
    pub pid: u32,
    /// Its command line.
    #[serde(deserialize_with = "crate::format::limits::args")]
    pub command: Vec<String>,
    /// The first interval it was recorded in.
    pub first_seq: u64,
}

/// The last record of a complete recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordEnd {
    /// Intervals written.
    pub intervals: u64,
    /// Why the recording ended.
    pub reason: EndReason,
    /// What else is to be known about its end, in order.
    #[serde(deserialize_with = "crate::format::limits::notes")]
    pub notes: Vec<EndNote>,
    /// Boundaries that took so long that the next interval was started a
    /// full interval later than planned (the intervals' own times are
    /// exact either way).
    pub overruns: u64,
}

impl RecordEnd {
    /// The reason followed by the notes, as one line (`error: ...; the
    /// launched command was killed`): what version 1 of the format
    /// stored.
    pub fn why(&self) -> String {
        crate::end_line(&self.reason, &self.notes)
    }
}

/// Why a recording ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    /// The recorded processes exited (with a launched command: it did).
    #[default]
    Exited,
    /// `--duration` ran out.
    Duration,
    /// SIGINT or SIGTERM; or the launched program was let go.
    Interrupted,
    /// The recording failed: the error's message.
    Error(String),
    /// A reason of a version-1 recording that none of the others
    /// matches, as written.
    Other(String),
}

impl std::fmt::Display for EndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndReason::Exited => f.write_str("exited"),
            EndReason::Duration => f.write_str("duration"),
            EndReason::Interrupted => f.write_str("interrupted"),
            EndReason::Error(e) => write!(f, "error: {e}"),
            EndReason::Other(s) => f.write_str(s),
        }
    }
}

/// Something to know about how a recording ended, besides its reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndNote {
    /// The recording failed, and the command it launched was killed.
    LaunchedKilled,
    /// The program the `fault` backend followed could not be let go: the
    /// error's message.
    NotLetGo(String),
    /// A note of a version-1 recording that none of the others matches,
    /// as written.
    Other(String),
    /// Processes that started while recording (with `--system` or
    /// `--cgroup`) whose memory pagescope was refused: their pids, sorted.
    /// Those refused at the start are in the header's notes. Version 3.
    Unreadable(Vec<u32>),
    /// Processes that another pagescope began to observe while a
    /// `--system` or `--cgroup` recording with the `refs` backend ran,
    /// left out of it from then on (their pids, sorted). Those observed at
    /// the start are in the header's notes. Version 3.
    Observed(Vec<u32>),
}

impl std::fmt::Display for EndNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndNote::LaunchedKilled => f.write_str("the launched command was killed"),
            EndNote::NotLetGo(e) => write!(f, "letting the program go: {e}"),
            EndNote::Other(s) => f.write_str(s),
            EndNote::Unreadable(pids) => write!(
                f,
                "of the processes that started while recording, {}",
                denied_note(pids, DENIED_MISSING)
            ),
            EndNote::Observed(pids) => f.write_str(&observed_note(pids, true)),
        }
    }
}

/// The note for processes left out of a recording because another
/// pagescope observes them (`pids`, sorted): since the start, or, `later`,
/// since they came to be observed while it ran.
pub fn observed_note(pids: &[u32], later: bool) -> String {
    let one = pids.len() == 1;
    format!(
        "{} {} by another pagescope (record --pid, trace --pid, or the command a record \
         launched) {}, so that this recording's clears of referenced bits are not that \
         observer's too (pids {})",
        match pids.len() {
            1 => "1 process".to_string(),
            n => format!("{n} processes"),
        },
        match (later, one) {
            (false, true) => "is observed",
            (false, false) => "are observed",
            (true, _) => "came to be observed",
        },
        match (later, one) {
            (false, true) => "and was left out",
            (false, false) => "and were left out",
            (true, true) => "while recording and was left out from then on",
            (true, false) => "while recording and were left out from then on",
        },
        shown_pids(pids)
    )
}

/// The first few of `pids`, for a note.
fn shown_pids(pids: &[u32]) -> String {
    let shown: Vec<String> = pids.iter().take(8).map(|p| p.to_string()).collect();
    format!(
        "{}{}",
        shown.join(" "),
        if pids.len() > 8 { " ..." } else { "" }
    )
}

/// What the note on processes that could not be read says a recording
/// is missing.
pub const DENIED_MISSING: &str = "their references are not recorded";

/// The note for processes whose memory pagescope may not read (`pids`,
/// sorted): how many, what grants access, `missing` (what is therefore
/// missing), and the first few pids.
pub fn denied_note(pids: &[u32], missing: &str) -> String {
    denied_note_because(
        pids,
        "needs root with CAP_SYS_PTRACE, or the processes' own user",
        missing,
    )
}

/// [`denied_note`] with `why` for what grants access: the cause found on
/// the machine, where pagescope has what usually grants it.
pub fn denied_note_because(pids: &[u32], why: &str, missing: &str) -> String {
    format!(
        "{} could not be read (permission denied: {why}): {missing} (pids {})",
        match pids.len() {
            1 => "1 process".to_string(),
            n => format!("{n} processes"),
        },
        shown_pids(pids)
    )
}
