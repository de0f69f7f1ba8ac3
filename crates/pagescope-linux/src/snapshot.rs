//! The snapshot collector: walks every selected process, reads its task
//! files, smaps and pagemap, looks up the physical side of each present
//! page, and streams it all into a [`SnapshotSink`].
//!
//! Memory stays bounded: pages are emitted in chunks of at most
//! [`Config::chunk_pages`], so a process with hundreds of GiB resident
//! costs no more memory than a small one. A process that exits while it
//! is being read is skipped with a note (or, if part of it was already
//! written, kept and marked partial in a note).

use crate::kpage::{FrameInfo, KPageReader};
use crate::pagemap::PagemapReader;
use crate::procfs::{list_pids, ProcDir};
use crate::{system, Root};
use pagescope_core::model::{
    PageChunk, PageRecord, PhysInfo, ProcessRecord, SnapshotSink, SystemInfo, Task, Trailer, Vma,
};
use pagescope_core::{Error, Result};
use std::time::Instant;

/// What to collect.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where /proc and /sys are.
    pub root: Root,
    /// Processes to collect; empty for all.
    pub pids: Vec<u32>,
    /// Pages per emitted chunk.
    pub chunk_pages: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            root: Root::default(),
            pids: Vec::new(),
            chunk_pages: 64 * 1024,
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

enum Outcome {
    Recorded,
    Gone,
}

struct Collector<'a> {
    root: &'a Root,
    system: &'a SystemInfo,
    chunk_pages: usize,
    kpage: Option<KPageReader>,
    text: Vec<u8>,
    pfns: Vec<u64>,
    infos: Vec<FrameInfo>,
    pages_emitted: u64,
    notes: Vec<String>,
    denied: Vec<u32>,
}

/// One process's pending output: the record is held back until its first
/// chunk of pages is ready, so a process that exits early is dropped whole.
struct Pending {
    record: Option<ProcessRecord>,
    chunk: PageChunk,
}

impl Collector<'_> {
    fn flush(&mut self, pending: &mut Pending, sink: &mut dyn SnapshotSink) -> Result<()> {
        if let Some(kp) = self.kpage.as_mut() {
            self.pfns.clear();
            self.pfns.extend(
                pending
                    .chunk
                    .pages
                    .iter()
                    .filter_map(|p| p.entry.pfn())
                    .map(|p| p.0),
            );
            kp.lookup(&self.pfns, &mut self.infos)?;
            let mut k = 0;
            for page in pending.chunk.pages.iter_mut() {
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
        if let Some(rec) = pending.record.take() {
            sink.process(&rec)?;
        }
        if !pending.chunk.pages.is_empty() {
            sink.pages(&pending.chunk)?;
            self.pages_emitted += pending.chunk.pages.len() as u64;
            pending.chunk.pages.clear();
        }
        Ok(())
    }

    fn process(&mut self, pid: u32, sink: &mut dyn SnapshotSink) -> Result<Outcome> {
        let dir = match ProcDir::open(&self.root.proc, pid) {
            Ok(d) => d,
            Err(e) if e.is_gone() => return Ok(Outcome::Gone),
            Err(e) => return Err(e),
        };
        macro_rules! or_gone {
            ($e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(e) if e.is_gone() => return Ok(Outcome::Gone),
                    Err(e) => return Err(e),
                }
            };
        }
        let stat = or_gone!(dir.stat(&mut self.text));
        let status = or_gone!(dir.status(&mut self.text));
        let cmdline = or_gone!(dir.cmdline(&mut self.text));
        let cgroup = dir.cgroup(&mut self.text).unwrap_or_default();
        let task = Task {
            pid,
            tgid: status.tgid,
            ppid: stat.ppid,
            comm: stat.comm.clone(),
            cmdline,
            uid: status.uid,
            cgroup,
            threads: stat.num_threads,
            minflt: stat.minflt,
            majflt: stat.majflt,
            utime: stat.utime,
            stime: stat.stime,
            start_time: stat.start_time,
            kernel_thread: stat.is_kernel_thread(),
        };
        let label = format!("pid {pid} ({})", task.comm);
        let mut pending = Pending {
            record: None,
            chunk: PageChunk {
                pid,
                start_time: task.start_time,
                pages: Vec::new(),
            },
        };
        if task.kernel_thread {
            pending.record = Some(ProcessRecord {
                task,
                vmas: Vec::new(),
            });
            self.flush(&mut pending, sink)?;
            return Ok(Outcome::Recorded);
        }
        let vmas: Vec<Vma> = match dir.smaps(&mut self.text) {
            Ok(entries) => entries
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
                .collect(),
            Err(e) if e.is_gone() => return Ok(Outcome::Gone),
            Err(Error::PermissionDenied { .. }) => {
                self.denied.push(pid);
                pending.record = Some(ProcessRecord {
                    task,
                    vmas: Vec::new(),
                });
                self.flush(&mut pending, sink)?;
                return Ok(Outcome::Recorded);
            }
            Err(e) => return Err(e),
        };
        let pagemap = match dir.open_file("pagemap") {
            Ok(f) => Some(PagemapReader::new(
                f,
                dir.path().join("pagemap"),
                self.system.page_size,
            )),
            Err(e) if e.is_gone() => return Ok(Outcome::Gone),
            Err(Error::PermissionDenied { .. }) => {
                self.notes
                    .push(format!("{label}: pagemap unreadable: pages missing"));
                None
            }
            Err(e) => return Err(e),
        };
        pending.record = Some(ProcessRecord {
            task,
            vmas: vmas.clone(),
        });
        let page_size = self.system.page_size;
        if let Some(mut pagemap) = pagemap {
            'vmas: for vma in &vmas {
                // smaps says whether the VMA has any page in RAM or swap;
                // a VMA with neither has only empty pagemap entries.
                if vma.smaps.rss == 0 && vma.smaps.swap == 0 {
                    continue;
                }
                let mut cursor = vma.start;
                while cursor < vma.end {
                    let room = (self.chunk_pages - pending.chunk.pages.len()) as u64;
                    let stop = cursor.saturating_add(room * page_size).min(vma.end);
                    let chunk = &mut pending.chunk;
                    let read = pagemap.for_each(cursor, stop, |vaddr, entry| {
                        if !entry.is_empty() {
                            chunk.pages.push(PageRecord {
                                vaddr,
                                entry,
                                phys: None,
                            });
                        }
                    });
                    match read {
                        // A short read: the end of the user address space
                        // (e.g. [vsyscall]), or the process is gone.
                        Ok(n) if n < (stop - cursor) / page_size => cursor = vma.end,
                        Ok(_) => cursor = stop,
                        Err(e) if e.is_gone() => break 'vmas,
                        Err(e) => return Err(e),
                    }
                    if pending.chunk.pages.len() >= self.chunk_pages {
                        self.flush(&mut pending, sink)?;
                    }
                }
            }
        }
        // Did the process exit while we read it? A zombie has no memory
        // left to read; a reaped process fails to stat.
        let alive = matches!(dir.stat(&mut self.text), Ok(s) if s.state != 'Z' && s.state != 'X');
        if !alive {
            if pending.record.is_some() {
                return Ok(Outcome::Gone);
            }
            self.notes.push(format!(
                "{label}: exited during the scan; its pages are partial"
            ));
        }
        self.flush(&mut pending, sink)?;
        Ok(Outcome::Recorded)
    }
}

/// Collects a snapshot into `sink`: system facts, then each process, then
/// the trailer. `progress` is called after each process.
pub fn collect(
    config: &Config,
    sink: &mut dyn SnapshotSink,
    progress: &mut dyn FnMut(Progress),
) -> Result<Trailer> {
    let started = Instant::now();
    let system = system::collect(&config.root, &config.pids)?;
    let pids = if config.pids.is_empty() {
        list_pids(&config.root.proc)?
    } else {
        for &pid in &config.pids {
            if !config.root.proc.join(pid.to_string()).exists() {
                return Err(Error::NotFound {
                    path: config.root.proc.join(pid.to_string()),
                });
            }
        }
        config.pids.clone()
    };
    sink.system(&system)?;
    let kpage = if system.pfns_visible {
        Some(KPageReader::open(&config.root.proc)?)
    } else {
        None
    };
    let mut c = Collector {
        root: &config.root,
        system: &system,
        chunk_pages: config.chunk_pages.max(1),
        kpage,
        text: Vec::with_capacity(64 * 1024),
        pfns: Vec::new(),
        infos: Vec::new(),
        pages_emitted: 0,
        notes: Vec::new(),
        denied: Vec::new(),
    };
    let mut recorded = 0;
    for (i, &pid) in pids.iter().enumerate() {
        match c.process(pid, sink)? {
            Outcome::Recorded => recorded += 1,
            Outcome::Gone => c
                .notes
                .push(format!("pid {pid}: exited during the scan; skipped")),
        }
        progress(Progress {
            done: i + 1,
            total: pids.len(),
            pages: c.pages_emitted,
        });
    }
    if !c.denied.is_empty() {
        let shown: Vec<String> = c.denied.iter().take(8).map(|p| p.to_string()).collect();
        c.notes.push(format!(
            "smaps and pagemap of {} processes unreadable (needs root, or to be the processes' user): their VMAs and pages are missing (pids {}{})",
            c.denied.len(),
            shown.join(" "),
            if c.denied.len() > 8 { " ..." } else { "" }
        ));
    }
    let trailer = Trailer {
        processes: recorded,
        pages: c.pages_emitted,
        notes: c.notes,
        duration_ns: started.elapsed().as_nanos() as u64,
    };
    sink.finish(&trailer)?;
    Ok(trailer)
}
