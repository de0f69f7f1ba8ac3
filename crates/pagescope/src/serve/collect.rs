//! One collection of `pagescope serve`: every process's kernel sums from
//! `smaps_rollup` (or, above the size cap, only the counters of `status`,
//! which take no page-table walk), its working set since the last
//! collection, the sums per cgroup, and the machine's totals from
//! meminfo, computed by `report total`'s own code.

use super::figures::{Figures, Seen};
use super::working_set::WorkingSet;
use pagescope_core::analysis::total::{Total, TotalFigures};
use pagescope_core::model::{SnapshotSink, SystemInfo};
use pagescope_core::{Error, Result};
use pagescope_linux::procfs::{list_pids, ProcDir};
use pagescope_linux::Root;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What one collection found, in bytes.
#[derive(Clone, Debug, Default)]
pub struct Collection {
    /// The user processes (kernel threads and zombies are not listed).
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
}

/// What a collection asks.
#[derive(Debug)]
pub struct Settings {
    /// Where /proc is.
    pub root: Root,
    /// Above this resident + swapped size a process's smaps_rollup is not
    /// read (0: no cap).
    pub max_process_size: u64,
    /// Label processes with their command lines.
    pub cmdline: bool,
}

/// The collector, kept across collections (the working-set backend
/// remembers which processes it has reset).
pub struct Collector {
    settings: Settings,
    page_size: u64,
    working_set: WorkingSet,
    buf: Vec<u8>,
}

impl Collector {
    /// A collector with these settings and working-set backend.
    pub fn new(settings: Settings, working_set: WorkingSet) -> Collector {
        Collector {
            settings,
            page_size: pagescope_linux::system::page_size(),
            working_set,
            buf: Vec::with_capacity(64 * 1024),
        }
    }

    /// Collects once.
    pub fn collect(&mut self) -> Result<Collection> {
        let started = Instant::now();
        let cpu_start = thread_cpu();
        let proc = self.settings.root.proc.clone();
        let mut out = Collection {
            page_size: self.page_size,
            ..Collection::default()
        };
        let mut seen = Vec::new();
        let mut names = Vec::new();
        for pid in list_pids(&proc)? {
            let dir = match ProcDir::open(&proc, pid) {
                Ok(d) => d,
                Err(e) if e.is_gone() => continue,
                Err(e) => return Err(e),
            };
            match self.process(&dir) {
                Ok(Some((s, name, skipped))) => {
                    out.skipped += u64::from(skipped);
                    seen.push(s);
                    names.push(name);
                }
                Ok(None) => {}
                Err(e) if e.is_gone() => {}
                Err(e) => return Err(e),
            }
        }
        self.working_set.finish(&mut seen)?;
        for (s, (comm, cmdline, cgroup)) in seen.into_iter().zip(names) {
            out.cgroups.entry(cgroup).or_default().add(&s.figures);
            out.processes.push(ProcessFigures {
                pid: s.pid,
                comm,
                cmdline,
                figures: s.figures,
            });
        }
        out.machine = machine(&proc, self.page_size)?;
        out.elapsed = started.elapsed();
        out.cpu = thread_cpu().saturating_sub(cpu_start);
        Ok(out)
    }

    /// Reads one process: `None` for a kernel thread or a zombie (no
    /// memory); else its figures, its names (comm, command line, cgroup)
    /// and whether its walk was skipped.
    #[allow(clippy::type_complexity)]
    fn process(
        &mut self,
        dir: &ProcDir,
    ) -> Result<Option<(Seen, (String, Option<String>, String), bool)>> {
        let stat = dir.stat(&mut self.buf)?;
        if stat.is_kernel_thread() {
            return Ok(None);
        }
        let status = dir.status(&mut self.buf)?;
        let (Some(rss_kb), swap_kb) = (status.vm_rss_kb, status.vm_swap_kb.unwrap_or(0)) else {
            return Ok(None); // a zombie: its memory is gone
        };
        let cgroup = dir.cgroup(&mut self.buf).unwrap_or_default();
        let cmdline = match self.settings.cmdline {
            true => Some(dir.cmdline(&mut self.buf)?.join(" ")),
            false => None,
        };
        let cap = self.settings.max_process_size;
        let size = (rss_kb + swap_kb) * 1024;
        let from_status = Figures {
            rss: Some(rss_kb * 1024),
            swap: Some(swap_kb * 1024),
            ..Figures::default()
        };
        let mut seen = Seen {
            pid: dir.pid,
            start_time: stat.start_time,
            figures: from_status,
            walked: false,
            referenced: None,
        };
        if cap == 0 || size <= cap {
            match dir.smaps_rollup(&mut self.buf) {
                Ok(r) => {
                    seen.figures = Figures {
                        rss: Some(r.rss * 1024),
                        pss: Some(r.pss * 1024),
                        uss: Some((r.private_clean + r.private_dirty) * 1024),
                        swap: Some(r.swap * 1024),
                        working_set: None,
                    };
                    seen.walked = true;
                    seen.referenced = Some(r.referenced * 1024);
                    // The refs backend clears the bits right after the
                    // walk that read them.
                    self.working_set.walked(dir, &mut seen)?;
                }
                Err(Error::PermissionDenied { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let skipped = !seen.walked;
        Ok(Some((seen, (stat.comm, cmdline, cgroup), skipped)))
    }
}

/// The machine's totals: `report total`'s meminfo figures, by its code.
fn machine(proc: &std::path::Path, page_size: u64) -> Result<TotalFigures> {
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
