//! The snapshot collector: walks every selected process, reads its task
//! files, smaps and pagemap, looks up the physical side of each present
//! page, and streams it all into a [`SnapshotSink`].
//!
//! Work is spread over [`Config::jobs`] threads, one process at a time
//! each; every thread has its own open files and buffers. A thread buffers
//! a process's output (at most [`Config::buffer_pages`] pages) and hands it
//! to the sink in one piece, so the stream keeps each process's pages
//! right after its record; a larger process holds the sink while it
//! streams the rest. Memory therefore stays bounded however much a
//! process has resident.
//!
//! A process that exits while it is being read is skipped with a note
//! (or, if part of it was already streamed, kept and marked partial).

use crate::kpage::{FrameInfo, KPageReader};
use crate::pagemap::PagemapReader;
use crate::procfs::{list_pids, ProcDir};
use crate::{system, Root};
use pagescope_core::model::{
    PageChunk, PageRecord, PhysInfo, ProcessRecord, SnapshotSink, SystemInfo, Task, Trailer,
    Unread, Vma,
};
use pagescope_core::parse::stat::Stat;
use pagescope_core::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// How much to read of each process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Task files, smaps and every page: a full snapshot.
    Full,
    /// Task files and smaps_rollup only: the kernel's per-process sums,
    /// for views that need nothing more (much cheaper).
    Rollup,
}

/// What to collect.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where /proc and /sys are.
    pub root: Root,
    /// Processes to collect; empty for all.
    pub pids: Vec<u32>,
    /// How much to read.
    pub detail: Detail,
    /// Pages per chunk handed to the sink.
    pub chunk_pages: usize,
    /// Pages a thread buffers before it holds the sink and streams.
    pub buffer_pages: usize,
    /// Threads reading processes.
    pub jobs: usize,
    /// Also record the whole machine's physical map (every frame classed).
    pub physmap: bool,
    /// Asked between processes and between runs of pages: true stops the
    /// collection, which returns [`Error::Interrupted`] without finishing
    /// the stream (a file then reads as cut short). For Ctrl-C:
    /// [`crate::signals::stop_pending`].
    pub stop: fn() -> bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            root: Root::default(),
            pids: Vec::new(),
            detail: Detail::Full,
            chunk_pages: 64 * 1024,
            buffer_pages: 256 * 1024,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            physmap: false,
            stop: || false,
        }
    }
}

/// Progress, reported after each process.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    /// Processes done.
    pub done: usize,
    /// Processes to do.
    pub total: usize,
    /// Page records emitted so far.
    pub pages: u64,
}

/// The sink as the threads share it.
type SharedSink<'a> = Mutex<&'a mut (dyn SnapshotSink + Send)>;

enum Msg {
    Process(Box<ProcessRecord>),
    Pages(PageChunk),
    /// Pages of hugetlb mappings ([`SnapshotSink::hugetlb`]).
    Hugetlb(PageChunk),
}

/// One process's output on its way to the sink: buffered, or streamed
/// while holding the sink once the buffer is full.
struct Emitter<'a, 's> {
    sink: &'a SharedSink<'s>,
    held: Option<MutexGuard<'a, &'s mut (dyn SnapshotSink + Send)>>,
    buffered: Vec<Msg>,
    buffered_pages: usize,
    limit: usize,
    /// Emptied page vectors, reused for the next chunks.
    spare: Vec<Vec<PageRecord>>,
}

impl<'a, 's> Emitter<'a, 's> {
    fn lock(&mut self) -> Result<()> {
        if self.held.is_none() {
            // A poisoned lock means another thread panicked mid-write;
            // the stream is still well-formed up to its last frame.
            self.held = Some(self.sink.lock().unwrap_or_else(|e| e.into_inner()));
            for msg in std::mem::take(&mut self.buffered) {
                self.send(msg)?;
            }
            self.buffered_pages = 0;
        }
        Ok(())
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let sink = self
            .held
            .as_mut()
            .expect("send only while holding the sink");
        match msg {
            Msg::Process(p) => sink.process(&p),
            Msg::Pages(mut c) => {
                sink.pages(&c)?;
                c.pages.clear();
                self.spare.push(c.pages);
                Ok(())
            }
            Msg::Hugetlb(mut c) => {
                sink.hugetlb(&c)?;
                c.pages.clear();
                self.spare.push(c.pages);
                Ok(())
            }
        }
    }

    fn emit(&mut self, msg: Msg) -> Result<()> {
        if let Msg::Pages(c) | Msg::Hugetlb(c) = &msg {
            self.buffered_pages += c.pages.len();
        }
        if self.held.is_some() {
            return self.send(msg);
        }
        self.buffered.push(msg);
        if self.buffered_pages > self.limit {
            self.lock()?;
        }
        Ok(())
    }

    /// Whether any of the process already reached the sink.
    fn streamed(&self) -> bool {
        self.held.is_some()
    }

    /// Hands over what is buffered and lets go of the sink.
    fn finish(&mut self) -> Result<()> {
        self.lock()?;
        self.held = None;
        Ok(())
    }

    /// Drops the process's buffered output.
    fn discard(&mut self) {
        for msg in self.buffered.drain(..) {
            if let Msg::Pages(mut c) | Msg::Hugetlb(mut c) = msg {
                c.pages.clear();
                self.spare.push(c.pages);
            }
        }
        self.buffered_pages = 0;
        self.held = None;
    }

    fn fresh_pages(&mut self) -> Vec<PageRecord> {
        self.spare.pop().unwrap_or_default()
    }
}

/// What one thread did.
struct WorkerResult {
    recorded: u64,
    notes: Vec<String>,
    denied: Vec<u32>,
    pages_denied: Vec<u32>,
}

enum Outcome {
    Recorded { pages: u64 },
    Gone,
}

/// One thread's reader state.
struct Collector<'c, 's> {
    config: &'c Config,
    /// Files whose ELF headers are recorded (or are not ELF).
    elf_seen: &'c Mutex<std::collections::HashSet<(u32, u32, u64)>>,
    sink: &'c SharedSink<'s>,
    system: &'c SystemInfo,
    kpage: Option<KPageReader>,
    text: Vec<u8>,
    keys: Vec<u64>,
    pfns: Vec<u64>,
    infos: Vec<FrameInfo>,
    notes: Vec<String>,
    /// Processes whose memory could not be read.
    denied: Vec<u32>,
    /// Processes whose smaps could be read but not their pagemap.
    pages_denied: Vec<u32>,
    /// The pages being gathered are of a hugetlb mapping.
    hugetlb_pending: bool,
}

impl Collector<'_, '_> {
    /// Fills the physical side of a chunk's present pages with one batched
    /// lookup, then emits it (as hugetlb pages if `hugetlb`).
    fn emit_chunk(
        &mut self,
        em: &mut Emitter<'_, '_>,
        (pid, start_time): (u32, u64),
        pages: Vec<PageRecord>,
        hugetlb: bool,
    ) -> Result<u64> {
        let mut chunk = PageChunk {
            pid,
            start_time,
            pages,
        };
        if let Some(kp) = self.kpage.as_mut() {
            self.pfns.clear();
            self.pfns.extend(
                chunk
                    .pages
                    .iter()
                    .filter_map(|p| p.entry.pfn())
                    .map(|p| p.0),
            );
            kp.lookup(&self.pfns, &mut self.keys, &mut self.infos)?;
            let mut k = 0;
            for page in chunk.pages.iter_mut() {
                if let Some(pfn) = page.entry.pfn() {
                    let info = self.infos[k];
                    k += 1;
                    page.phys = Some(PhysInfo {
                        flags: info.flags,
                        count: info.count,
                        memcg: info.memcg,
                        node: self.system.node_of(pfn.0).unwrap_or(u16::MAX),
                    });
                }
            }
        }
        let n = chunk.pages.len() as u64;
        if n > 0 {
            em.emit(match hugetlb {
                false => Msg::Pages(chunk),
                true => Msg::Hugetlb(chunk),
            })?;
        }
        Ok(n)
    }

    /// The task of `dir`, whose `stat` is read already; its command line
    /// and executable come from `mem`, the directory its memory is read
    /// through ([`ProcDir::live_thread`]).
    fn task(&mut self, dir: &ProcDir, mem: &ProcDir, stat: Stat) -> Result<Task> {
        let status = dir.status(&mut self.text)?;
        let cmdline = mem.cmdline(&mut self.text)?;
        let cgroup = dir.cgroup(&mut self.text).unwrap_or_default();
        let kernel_thread = stat.is_kernel_thread();
        let exe = if kernel_thread {
            String::new()
        } else {
            mem.exe()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let thread_sps = if stat.num_threads > 1 {
            self.thread_sps(dir)
        } else {
            Vec::new()
        };
        Ok(Task {
            pid: dir.pid,
            tgid: status.tgid,
            ppid: stat.ppid,
            comm: stat.comm,
            cmdline,
            uid: status.uid,
            cgroup,
            threads: stat.num_threads,
            minflt: stat.minflt,
            majflt: stat.majflt,
            utime: stat.utime,
            stime: stat.stime,
            start_time: stat.start_time,
            kernel_thread,
            exe,
            thread_sps,
        })
    }

    /// The stack pointers of a process's threads from
    /// `/proc/PID/task/TID/syscall` ("NR args... sp pc", or "-1 sp pc";
    /// "running" gives none). Needs ptrace access; empty without it.
    fn thread_sps(&mut self, dir: &ProcDir) -> Vec<u64> {
        let Ok(tasks) = dir.tasks() else {
            return Vec::new();
        };
        let mut buf = Vec::new();
        tasks
            .into_iter()
            .filter_map(|t| dir.task_text(t, "syscall", &mut buf).ok())
            .filter_map(|text| pagescope_core::parse::syscall::stack_pointer(&text))
            .collect()
    }

    /// Records the ELF headers of every file the VMAs map that no earlier
    /// process mapped, straight into the sink, so that they precede every
    /// process that maps them.
    fn record_elf_files(&mut self, dir: &ProcDir, vmas: &[Vma]) -> Result<()> {
        for v in vmas {
            if v.inode == 0 || !v.path.starts_with('/') {
                continue;
            }
            let key = (v.dev_major, v.dev_minor, v.inode);
            let mut seen = self.elf_seen.lock().unwrap_or_else(|e| e.into_inner());
            if !seen.insert(key) {
                continue;
            }
            // map_files reaches deleted files and other mount namespaces;
            // the path is the fallback.
            let via = dir
                .path()
                .join(format!("map_files/{:x}-{:x}", v.start, v.end));
            let elf = crate::elf::read(&via, key, &v.path)
                .or_else(|| crate::elf::read(std::path::Path::new(&v.path), key, &v.path));
            if let Some(elf) = elf {
                let mut sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
                sink.elf(&elf)?;
            }
            drop(seen);
        }
        Ok(())
    }

    fn vmas(&mut self, dir: &ProcDir) -> Result<Vec<Vma>> {
        Ok(dir
            .smaps(&mut self.text)?
            .into_iter()
            .map(|e| Vma {
                start: e.map.start,
                end: e.map.end,
                perms: e.map.perms,
                offset: e.map.offset,
                dev_major: e.map.dev_major,
                dev_minor: e.map.dev_minor,
                inode: e.map.inode,
                path: e.map.path,
                vm_flags: e.vm_flags,
                smaps: e.counters,
            })
            .collect())
    }

    /// Reads one process into the emitter ([`Collector::process`]). A
    /// process read through one of its threads (its main thread exited)
    /// is read again through another if that thread exits during the read
    /// while others run on, up to [`THREAD_TRIES`] times.
    fn process_retrying(&mut self, pid: u32, em: &mut Emitter<'_, '_>) -> Result<Outcome> {
        for _ in 1..THREAD_TRIES {
            let notes = self.notes.len();
            match self.process(pid, em)? {
                Outcome::Gone if crate::procfs::leader_exited(&self.config.root.proc, pid) => {
                    em.discard();
                    self.notes.truncate(notes);
                }
                read => return Ok(read),
            }
        }
        self.process(pid, em)
    }

    /// Reads one process into the emitter.
    fn process(&mut self, pid: u32, em: &mut Emitter<'_, '_>) -> Result<Outcome> {
        let dir = match ProcDir::open(&self.config.root.proc, pid) {
            Ok(d) => d,
            Err(e) if e.is_gone() => return Ok(Outcome::Gone),
            Err(e) => return Err(e),
        };
        let stat = match dir.stat(&mut self.text) {
            Ok(s) => s,
            Err(e) if e.is_gone() => return Ok(Outcome::Gone),
            Err(e) => return Err(e),
        };
        // A process whose main thread has exited while its other threads
        // run on: its memory is read through one of those.
        let thread = match stat.state == 'Z' && stat.num_threads > 1 {
            true => match dir.live_thread(&mut self.text) {
                Some(t) => {
                    pause_for_tests(t.pid);
                    Some(t)
                }
                None => return Ok(Outcome::Gone),
            },
            false => None,
        };
        let mem = thread.as_ref().unwrap_or(&dir);
        let task = match self.task(&dir, mem, stat) {
            Ok(t) => t,
            Err(e) if e.is_gone() => return Ok(Outcome::Gone),
            Err(e) => return Err(e),
        };
        let start_time = task.start_time;
        if task.kernel_thread {
            em.emit(Msg::Process(Box::new(ProcessRecord {
                task,
                ..ProcessRecord::default()
            })))?;
            return Ok(Outcome::Recorded { pages: 0 });
        }
        if self.config.detail == Detail::Rollup {
            let (rollup, unread) = match mem.smaps_rollup(&mut self.text) {
                Ok(r) => (Some(r), Unread::Nothing),
                Err(e) if e.is_gone() => return Ok(Outcome::Gone),
                Err(Error::PermissionDenied { .. }) => {
                    self.denied.push(pid);
                    (None, Unread::Memory)
                }
                Err(e) => return Err(e),
            };
            em.emit(Msg::Process(Box::new(ProcessRecord {
                task,
                vmas: Vec::new(),
                rollup,
                unread,
            })))?;
            return Ok(Outcome::Recorded { pages: 0 });
        }
        let vmas = match self.vmas(mem) {
            Ok(v) => v,
            Err(e) if e.is_gone() => return Ok(Outcome::Gone),
            Err(Error::PermissionDenied { .. }) => {
                self.denied.push(pid);
                em.emit(Msg::Process(Box::new(ProcessRecord {
                    task,
                    unread: Unread::Memory,
                    ..ProcessRecord::default()
                })))?;
                return Ok(Outcome::Recorded { pages: 0 });
            }
            Err(e) => return Err(e),
        };
        let pagemap = match mem.open_file("pagemap") {
            Ok(f) => Some(PagemapReader::new(
                f,
                mem.file_path("pagemap"),
                self.system.page_size,
            )),
            Err(e) if e.is_gone() => return Ok(Outcome::Gone),
            Err(Error::PermissionDenied { .. }) => None,
            Err(e) => return Err(e),
        };
        self.record_elf_files(&dir, &vmas)?;
        let label = format!("pid {pid} ({})", task.comm);
        em.emit(Msg::Process(Box::new(ProcessRecord {
            task,
            vmas,
            rollup: None,
            unread: if pagemap.is_some() {
                Unread::Nothing
            } else {
                Unread::Pages
            },
        })))?;
        let mut emitted = 0;
        let pages_denied = pagemap.is_none();
        if let Some(mut pagemap) = pagemap {
            // The VMAs live in the record just emitted (buffered, or already
            // in the sink): take their ranges.
            let ranges = self.ranges_to_read(em);
            let page_size = self.system.page_size;
            let limit = self.config.chunk_pages;
            let mut pages = em.fresh_pages();
            let mut read_whole = Vec::new();
            let who = (pid, start_time);
            self.hugetlb_pending = false;
            'ranges: for range in ranges {
                // Hugetlb mappings' pages go in chunks of their own: hand
                // over those gathered of the other kind.
                if range.hugetlb != self.hugetlb_pending {
                    let done = std::mem::replace(&mut pages, em.fresh_pages());
                    emitted += self.emit_chunk(em, who, done, self.hugetlb_pending)?;
                    self.hugetlb_pending = range.hugetlb;
                }
                // A large VMA with few pages: read only where the page
                // tables hold something.
                let parts = match range.sparse {
                    true => match pagemap.populated(range.start, range.end) {
                        Ok(Some(parts)) => parts,
                        Ok(None) => {
                            read_whole.push(range);
                            vec![(range.start, range.end)]
                        }
                        Err(e) if e.is_gone() => break 'ranges,
                        Err(e) => return Err(e),
                    },
                    false => vec![(range.start, range.end)],
                };
                for (start, end) in parts {
                    let mut cursor = start;
                    while cursor < end {
                        if (self.config.stop)() {
                            return Err(Error::Interrupted);
                        }
                        let room = (limit - pages.len()) as u64;
                        let stop = cursor.saturating_add(room * page_size).min(end);
                        let read = pagemap.for_each(cursor, stop, |vaddr, entry| {
                            if !entry.is_empty() {
                                pages.push(PageRecord {
                                    vaddr,
                                    entry,
                                    phys: None,
                                });
                            }
                        });
                        match read {
                            // A short read: the end of the user address
                            // space (e.g. [vsyscall]), or the process is
                            // gone.
                            Ok(n) if n < (stop - cursor) / page_size => cursor = end,
                            Ok(_) => cursor = stop,
                            Err(e) if e.is_gone() => break 'ranges,
                            Err(e) => return Err(e),
                        }
                        if pages.len() >= limit {
                            let full = std::mem::replace(&mut pages, em.fresh_pages());
                            emitted += self.emit_chunk(em, who, full, range.hugetlb)?;
                        }
                    }
                }
            }
            if let Some(note) = read_whole_note(&label, &read_whole, page_size) {
                self.notes.push(note);
            }
            let hugetlb = std::mem::take(&mut self.hugetlb_pending);
            emitted += self.emit_chunk(em, who, pages, hugetlb)?;
        }
        // Did the process (or the thread read) exit while we read it? A
        // zombie has no memory left to read; a reaped process fails to
        // stat.
        let alive = matches!(mem.stat(&mut self.text), Ok(s) if !s.is_dead());
        if !alive {
            if !em.streamed() {
                return Ok(Outcome::Gone);
            }
            self.notes.push(match thread {
                Some(t) if crate::procfs::leader_exited(&self.config.root.proc, pid) => format!(
                    "{label}: read through its thread {} (its main thread has exited), \
                     which exited during the scan; its pages are partial",
                    t.pid
                ),
                _ => format!("{label}: exited during the scan; its pages are partial"),
            });
        }
        if pages_denied {
            self.pages_denied.push(pid);
        }
        Ok(Outcome::Recorded { pages: emitted })
    }

    /// The address ranges whose pagemap is worth reading: VMAs that smaps
    /// says have a page in RAM or swap (the others hold only empty
    /// entries), each marked sparse if it is worth asking the kernel first
    /// which parts of it hold anything ([`Range::sparse`]), and every
    /// hugetlb VMA (VmFlags `ht`: smaps counts its pages in neither Rss
    /// nor Swap, and the counters it has for them are not recorded).
    fn ranges_to_read(&self, em: &Emitter<'_, '_>) -> Vec<Range> {
        let vmas = em.buffered.iter().rev().find_map(|m| match m {
            Msg::Process(p) => Some(&p.vmas),
            Msg::Pages(_) | Msg::Hugetlb(_) => None,
        });
        let page_kb = self.system.page_size / 1024;
        vmas.map(|v| {
            v.iter()
                .filter(|v| v.smaps.rss > 0 || v.smaps.swap > 0 || v.has_vm_flag("ht"))
                .map(|v| {
                    let pages = (v.end - v.start) / self.system.page_size;
                    let used = (v.smaps.rss + v.smaps.swap) / page_kb.max(1);
                    let hugetlb = v.has_vm_flag("ht");
                    Range {
                        start: v.start,
                        end: v.end,
                        sparse: !hugetlb
                            && pages >= SPARSE_MIN_PAGES
                            && used.saturating_mul(SPARSE_RATIO) < pages
                            && !v.has_vm_flag("sd"),
                        hugetlb,
                    }
                })
                .collect()
        })
        .unwrap_or_default()
    }
}

/// A VMA's range to read from pagemap.
#[derive(Clone, Copy, Debug)]
struct Range {
    start: u64,
    end: u64,
    /// Large and mostly empty: its pagemap is read only where
    /// `PAGEMAP_SCAN` finds pages ([`PagemapReader::populated`]). Not for
    /// a soft-dirty VMA (`sd`), whose empty entries say so, nor for a
    /// hugetlb one, whose size smaps does not say how much is used of.
    sparse: bool,
    /// A hugetlb mapping (VmFlags `ht`): its pages go to
    /// [`SnapshotSink::hugetlb`].
    hugetlb: bool,
}

/// A VMA of at least this many pages (64 MiB of 4 KiB pages) may be
/// sparse: below it, reading its pagemap whole costs less than a scan.
const SPARSE_MIN_PAGES: u64 = 16 * 1024;

/// ... if smaps counts fewer than one page in this many of it in RAM or
/// swap.
const SPARSE_RATIO: u64 = 8;

/// The note for the sparse VMAs of a process that had to be read whole
/// (a kernel without `PAGEMAP_SCAN`), with what it cost in pages.
fn read_whole_note(label: &str, ranges: &[Range], page_size: u64) -> Option<String> {
    if ranges.is_empty() {
        return None;
    }
    let pages: u64 = ranges.iter().map(|r| (r.end - r.start) / page_size).sum();
    Some(format!(
        "{label}: {} large, mostly empty VMA(s) read whole ({pages} pagemap entries): \
         this kernel has no PAGEMAP_SCAN (Linux 6.7) to find their pages",
        ranges.len()
    ))
}

/// A test hook (the cargo feature `test-hooks`): with
/// `PAGESCOPE_PAUSE_READING_THROUGH=PATH` in its environment, the first
/// time a process is read through thread `tid` ([`ProcDir::live_thread`]),
/// pagescope writes `tid` to PATH and waits (up to a minute) until PATH
/// is removed, so that a test can end that thread first.
#[cfg(feature = "test-hooks")]
fn pause_for_tests(tid: u32) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static DONE: AtomicBool = AtomicBool::new(false);
    let Some(path) = std::env::var_os("PAGESCOPE_PAUSE_READING_THROUGH") else {
        return;
    };
    if DONE.swap(true, Ordering::SeqCst) || std::fs::write(&path, tid.to_string()).is_err() {
        return;
    }
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::exists(&path).unwrap_or(false) && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Without the test hooks: nothing.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
fn pause_for_tests(_tid: u32) {}

/// How many times a process whose main thread exited is read, each
/// through a thread alive at the start of the read ([`ProcDir::live_thread`]).
const THREAD_TRIES: usize = 4;

/// Why process `pid` was skipped as gone: it exited during the scan, or
/// it is a zombie (exited, not reaped), or (where its main thread
/// exited before the others) no thread of it was left to read its
/// memory through.
fn gone_note(proc: &std::path::Path, pid: u32) -> String {
    match ProcDir::at(proc, pid).stat(&mut Vec::new()) {
        Ok(s) if s.state == 'Z' && s.num_threads > 1 => format!(
            "pid {pid}: its main thread has exited, and none of its other threads could \
             be read (they exited during the scan); skipped (its memory is not counted)"
        ),
        Ok(s) if s.state == 'Z' => format!(
            "pid {pid}: a zombie (it has exited; its parent, pid {}, has not reaped it), \
             with no memory; skipped",
            s.ppid
        ),
        _ => format!("pid {pid}: exited during the scan; skipped"),
    }
}

/// Collects a snapshot into `sink`: system facts, then each process, then
/// the trailer. `progress` is called after each process.
pub fn collect(
    config: &Config,
    sink: &mut (dyn SnapshotSink + Send),
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Trailer> {
    let started = Instant::now();
    let mut system = system::collect(&config.root, &config.pids)?;
    // Every process's hugetlb mappings are read (`Emit`).
    system.hugetlb_read = true;
    if config.physmap {
        crate::physmap::check(&system)?;
    }
    let pids = if config.pids.is_empty() {
        list_pids(&config.root.proc)?
    } else {
        config.pids.clone()
    };
    sink.system(&system)?;
    let shared: SharedSink<'_> = Mutex::new(sink);
    let progress = Mutex::new(progress);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let pages_total = std::sync::atomic::AtomicU64::new(0);
    let abort = AtomicBool::new(false);
    let elf_seen = Mutex::new(std::collections::HashSet::new());
    let jobs = config.jobs.clamp(1, pids.len().max(1));

    let results: Vec<Result<WorkerResult>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| -> Result<WorkerResult> {
                    let kpage = if system.pfns_visible && config.detail == Detail::Full {
                        Some(KPageReader::open(&config.root.proc)?)
                    } else {
                        None
                    };
                    let mut c = Collector {
                        config,
                        elf_seen: &elf_seen,
                        sink: &shared,
                        system: &system,
                        kpage,
                        text: Vec::with_capacity(64 * 1024),
                        keys: Vec::new(),
                        pfns: Vec::new(),
                        infos: Vec::new(),
                        notes: Vec::new(),
                        denied: Vec::new(),
                        pages_denied: Vec::new(),
                        hugetlb_pending: false,
                    };
                    let mut em = Emitter {
                        sink: &shared,
                        held: None,
                        buffered: Vec::new(),
                        buffered_pages: 0,
                        limit: config.buffer_pages,
                        spare: Vec::new(),
                    };
                    let mut recorded = 0;
                    while !abort.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&pid) = pids.get(i) else { break };
                        let read = if (config.stop)() {
                            Err(Error::Interrupted)
                        } else {
                            c.process_retrying(pid, &mut em)
                        };
                        match read {
                            Ok(Outcome::Recorded { pages }) => {
                                em.finish()?;
                                recorded += 1;
                                pages_total.fetch_add(pages, Ordering::Relaxed);
                            }
                            Ok(Outcome::Gone) => {
                                em.discard();
                                c.notes.push(gone_note(&config.root.proc, pid));
                            }
                            Err(e) => {
                                abort.store(true, Ordering::Relaxed);
                                em.discard();
                                return Err(e);
                            }
                        }
                        let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                        let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                        p(Progress {
                            done: d,
                            total: pids.len(),
                            pages: pages_total.load(Ordering::Relaxed),
                        });
                    }
                    Ok(WorkerResult {
                        recorded,
                        notes: c.notes,
                        denied: c.denied,
                        pages_denied: c.pages_denied,
                    })
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let sink = shared.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut recorded = 0;
    let mut notes = Vec::new();
    let mut denied = Vec::new();
    let mut pages_denied = Vec::new();
    for r in results {
        let mut r = r?;
        recorded += r.recorded;
        notes.append(&mut r.notes);
        denied.append(&mut r.denied);
        pages_denied.append(&mut r.pages_denied);
    }
    for (pids, what) in [
        (&mut denied, "their memory is unknown (null per process, left out of sums over processes)"),
        (
            &mut pages_denied,
            "their pages are unknown (null per process, left out of sums over processes); their other figures come from smaps",
        ),
    ] {
        if !pids.is_empty() {
            pids.sort_unstable();
            notes.push(crate::cause::denied_note(&config.root.proc, pids, what));
        }
    }
    if config.physmap {
        crate::physmap::scan(&config.root, &system, sink, config.stop)?;
    }
    let trailer = Trailer {
        processes: recorded,
        pages: pages_total.load(Ordering::Relaxed),
        notes,
        duration_ns: started.elapsed().as_nanos() as u64,
    };
    sink.finish(&trailer)?;
    Ok(trailer)
}
