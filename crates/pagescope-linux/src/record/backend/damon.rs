//! The `damon` backend: DAMON through its sysfs interface
//! (CONFIG_DAMON_SYSFS), `vaddr` operations for processes
//! (CONFIG_DAMON_VADDR) and `paddr` for the machine (CONFIG_DAMON_PADDR).
//!
//! DAMON splits the monitored address space into regions. Every sampling
//! interval it checks the accessed bit of one random page per region, and
//! at every aggregation interval it reports how many of the samples found
//! each region accessed, then adapts the regions: it splits them, and
//! merges neighbours that were alike. It
//! costs little whatever the memory size, and is an estimate: a region
//! seen accessed counts as referenced in every resident page, and one
//! whose sampled pages were all left alone counts as not referenced.
//!
//! pagescope creates a kdamond of its own, and reads the regions' counts
//! from the `damon:damon_aggregated` trace event in a tracefs instance of
//! its own (the only way on kernels before 6.2, which have no
//! `tried_regions` directory). DAMON aggregates [`AGGREGATIONS`] times per
//! recording interval, on its own clock: an interval is the union of the
//! regions seen accessed in the aggregations that ended inside it, so
//! that no interval is left without one when the two clocks drift apart.
//! These regions are resolved to pages: for processes, their resident pages
//! from pagemap, placed physically and virtually (written: those with
//! their soft-dirty bit, where the kernel has them); for the machine, their
//! frames on the LRU, classed by kpageflags as user or page cache.
//!
//! A kdamond that pagescope did not create is never touched: if any
//! exists, the backend refuses. Writing `nr_kdamonds` destroys every
//! kdamond, so pagescope writes it only when none exists (to make its
//! own) and when its own is the only one (to remove it).

use crate::kpage::PfnFile;
use crate::record::pages::{per_process, resident, set_frame, tracked, FrameTally, ProcessTally};
use crate::record::probe::Probe;
use crate::record::writes::Writes;
use crate::Root;
use pagescope_core::record::{Backend, Granularity, Interval, WriteSource};
use pagescope_core::{Error, Result};
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// DAMON's sysfs directory under sysfs.
pub const ADMIN: &str = "kernel/mm/damon/admin";

/// Initial RAM ranges smaller than this are not monitored with `paddr`
/// (the few small ranges below 1 MiB hold firmware and DMA pages).
const MIN_RAM_RANGE: u64 = 4 << 20;

/// DAMON aggregations per recording interval.
pub const AGGREGATIONS: u32 = 2;

/// DAMON's aggregation interval for a recording interval: half of it,
/// but at least one sample.
fn aggregation(interval: Duration, sample: Duration) -> Duration {
    (interval / AGGREGATIONS).max(sample)
}

/// DAMON's monitoring settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DamonSettings {
    /// Sampling interval: how often one page per region is checked.
    pub sample: Duration,
    /// Fewest regions DAMON keeps (at least 3).
    pub min_regions: u32,
    /// Most regions DAMON keeps.
    pub max_regions: u32,
}

impl Default for DamonSettings {
    /// DAMON's own sampling interval, and more regions than its default
    /// (10-1000): at 10 regions a region is a tenth of the address space,
    /// and pagetest's spikes came out up to 15% off with 100-1000, 3%
    /// with 1000-2000 (docs/performance.md).
    fn default() -> DamonSettings {
        DamonSettings {
            sample: Duration::from_millis(5),
            min_regions: 1000,
            max_regions: 2000,
        }
    }
}

impl DamonSettings {
    /// Checks the settings against an interval (DAMON's aggregation
    /// interval); the message says what is wrong.
    pub fn check(&self, interval: Duration) -> std::result::Result<(), String> {
        if self.min_regions < 3 {
            return Err(format!(
                "DAMON keeps at least 3 regions (asked for {})",
                self.min_regions
            ));
        }
        if self.max_regions < self.min_regions {
            return Err(format!(
                "the most regions ({}) is below the fewest ({})",
                self.max_regions, self.min_regions
            ));
        }
        if self.sample.is_zero() || self.sample > interval {
            return Err(format!(
                "the sampling interval ({:?}) must be positive and no longer than the \
                 interval ({interval:?})",
                self.sample
            ));
        }
        Ok(())
    }

    /// The settings in words, for the recording's header.
    pub fn describe(&self) -> String {
        format!(
            "sampling every {:?}, {}-{} regions",
            self.sample, self.min_regions, self.max_regions
        )
    }
}

/// The kdamonds directory.
fn kdamonds(root: &Root) -> PathBuf {
    root.sys.join(ADMIN).join("kdamonds")
}

fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn put(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|e| Error::io(path, e))
}

/// Describes the kdamonds that exist, if any: none of them is
/// pagescope's own at the time this is asked.
pub fn foreign(root: &Root) -> Option<String> {
    let dir = kdamonds(root);
    let n: u32 = read_trim(&dir.join("nr_kdamonds"))?.parse().ok()?;
    if n == 0 {
        return None;
    }
    let list: Vec<String> = (0..n)
        .map(|i| {
            let k = dir.join(i.to_string());
            format!(
                "kdamond {i} (state {}, pid {})",
                read_trim(&k.join("state")).unwrap_or_else(|| "?".into()),
                read_trim(&k.join("pid")).unwrap_or_else(|| "?".into())
            )
        })
        .collect();
    Some(list.join(", "))
}

/// Whether DAMON has `vaddr` (processes) or `paddr` (machine) operations,
/// from `/proc/kallsyms` when it lists DAMON's functions; `None` when it
/// can't tell (no kallsyms), and the kernel is asked at start instead.
fn has_operations(root: &Root, system: bool) -> Option<bool> {
    let text = std::fs::read_to_string(root.proc.join("kallsyms")).ok()?;
    let mut any = false;
    let want = if system {
        " damon_pa_initcall"
    } else {
        " damon_va_initcall"
    };
    for line in text.lines() {
        if line.ends_with(want) {
            return Some(true);
        }
        any |= line.contains(" damon_");
    }
    any.then_some(false)
}

/// The kernel option providing the operations.
fn operations_option(system: bool) -> &'static str {
    if system {
        "CONFIG_DAMON_PADDR"
    } else {
        "CONFIG_DAMON_VADDR"
    }
}

/// Why the backend can't be used here, if it can't: no DAMON sysfs, a
/// kdamond that isn't pagescope's, or no operations for the target.
pub fn unavailable(root: &Root, system: bool) -> Option<String> {
    if !kdamonds(root).join("nr_kdamonds").exists() {
        return Some("no DAMON sysfs interface here (CONFIG_DAMON_SYSFS)".into());
    }
    if let Some(k) = foreign(root) {
        return Some(format!(
            "a kdamond exists that pagescope did not create: {k}; pagescope never stops or \
             reconfigures a kdamond it did not create{}",
            stale_hint(root)
        ));
    }
    if has_operations(root, system) == Some(false) {
        return Some(format!(
            "DAMON here has no {} operations ({})",
            if system { "paddr" } else { "vaddr" },
            operations_option(system)
        ));
    }
    None
}

/// If a trace instance of a killed pagescope recorder is left, the
/// kdamond is likely its own: says how to remove it.
fn stale_hint(root: &Root) -> String {
    let Ok(t) = find_tracefs(root) else {
        return String::new();
    };
    let Ok(entries) = std::fs::read_dir(t.join("instances")) else {
        return String::new();
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix("pagescope-damon-") {
            let alive = |p: u32| crate::procfs::ProcDir::at(&root.proc, p).exists();
            if !pid.parse().is_ok_and(alive) {
                let k = kdamonds(root);
                return format!(
                    " (a pagescope recorder, pid {pid}, was killed while recording with DAMON \
                     and likely left it: if so, remove it with `echo off > {}/0/state; \
                     echo 0 > {}/nr_kdamonds; rmdir {}`)",
                    k.display(),
                    k.display(),
                    e.path().display()
                );
            }
        }
    }
    String::new()
}

/// The tracefs mount point, if tracefs is mounted.
fn find_tracefs(root: &Root) -> Result<PathBuf> {
    let path = root.proc.join("mounts");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, dir, kind) = (f.next()?, f.next()?, f.next()?);
            (kind == "tracefs").then(|| PathBuf::from(dir))
        })
        .min_by_key(|d| d != Path::new("/sys/kernel/tracing"))
        .ok_or_else(|| Error::Failed {
            what: "tracefs".into(),
            why: "not mounted".into(),
        })
}

/// The tracefs mount point; mounts tracefs at `/sys/kernel/tracing` if it
/// isn't mounted (as tracing tools do).
fn tracefs(root: &Root) -> Result<PathBuf> {
    if let Ok(d) = find_tracefs(root) {
        return Ok(d);
    }
    let dir = root.sys.join("kernel/tracing");
    pagescope_sys::damon::mount_tracefs(&dir).map_err(|_| Error::Unsupported {
        what: "the damon backend".into(),
        needs: "tracefs, to read DAMON's damon_aggregated events (CONFIG_FTRACE); \
                mount it at /sys/kernel/tracing"
            .into(),
    })?;
    Ok(dir)
}

/// One `damon_aggregated` event: target index, region, sampled accesses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Aggregated {
    target: usize,
    start: u64,
    end: u64,
    accesses: u32,
}

/// Parses a trace line such as
/// `kdamond.0-81 [000] ..... 12.345: damon_aggregated: target_id=0
/// nr_regions=12 140000-150000: 3 7`.
fn parse_event(line: &str) -> Option<Aggregated> {
    let rest = &line[line.find("damon_aggregated: ")? + "damon_aggregated: ".len()..];
    let mut target = None;
    let mut words = rest.split_whitespace();
    while let Some(w) = words.next() {
        if let Some(t) = w.strip_prefix("target_id=") {
            target = t.parse().ok();
        } else if let Some(range) = w.strip_suffix(':') {
            let (s, e) = range.split_once('-')?;
            return Some(Aggregated {
                target: target?,
                start: s.parse().ok()?,
                end: e.parse().ok()?,
                accesses: words.next()?.parse().ok()?,
            });
        }
    }
    None
}

/// Sorts and merges ranges.
fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// See the module documentation.
#[derive(Debug)]
pub struct Damon {
    root: Root,
    /// The tracefs mount point.
    tracing: PathBuf,
    /// `kdamonds/`.
    dir: PathBuf,
    /// The tracefs instance.
    instance: PathBuf,
    pipe: Option<std::fs::File>,
    /// A line of the pipe not yet complete.
    partial: Vec<u8>,
    flags: Option<PfnFile>,
    page_size: u64,
    block: u64,
    /// RAM ranges `[start, end)` in bytes when recording the machine.
    system: Option<Vec<(u64, u64)>>,
    /// Target index to pid (processes).
    targets: Vec<u32>,
    /// Whether the kdamond runs (it stops by itself when every process
    /// it watches has exited).
    running: bool,
    /// Whether the kdamond exists (and is pagescope's).
    created: bool,
    writes: Writes,
    /// Regions seen accessed since the last collect: (pid, start, end);
    /// pid 0 for physical regions.
    accessed: Vec<(u32, u64, u64)>,
    buf: Vec<u8>,
}

impl Damon {
    /// Makes pagescope's kdamond and trace instance (the kdamond starts
    /// at the first reset). `system` records the machine with `paddr`,
    /// else processes with `vaddr`.
    pub fn new(
        root: &Root,
        page_size: u64,
        block: u64,
        interval: Duration,
        settings: DamonSettings,
        system: bool,
        writes: Writes,
    ) -> Result<Damon> {
        if let Some(why) = unavailable(root, system) {
            return Err(Error::Unsupported {
                what: "the damon backend".into(),
                needs: why,
            });
        }
        settings.check(interval).map_err(|why| Error::Unsupported {
            what: "these DAMON settings".into(),
            needs: why,
        })?;
        let ram = if system {
            let info = crate::system::collect(root, &[0])?;
            let ranges: Vec<(u64, u64)> = info
                .ram_ranges
                .iter()
                .map(|&(s, e)| {
                    (
                        s.next_multiple_of(page_size),
                        (e + 1) / page_size * page_size,
                    )
                })
                .filter(|&(s, e)| e > s && e - s >= MIN_RAM_RANGE)
                .collect();
            if ranges.is_empty() {
                return Err(Error::Unsupported {
                    what: "recording the machine with the damon backend".into(),
                    needs: "the RAM ranges of /proc/iomem (root)".into(),
                });
            }
            Some(ranges)
        } else {
            None
        };
        let tracing = tracefs(root)?;
        let mut d = Damon {
            root: root.clone(),
            tracing: tracing.clone(),
            dir: kdamonds(root),
            instance: tracing
                .join("instances")
                .join(format!("pagescope-damon-{}", std::process::id())),
            pipe: None,
            partial: Vec::new(),
            flags: if system {
                Some(PfnFile::open(root.proc.join("kpageflags"))?)
            } else {
                None
            },
            page_size,
            block,
            writes,
            system: ram,
            targets: Vec::new(),
            running: false,
            created: false,
            accessed: Vec::new(),
            buf: Vec::new(),
        };
        // From here on, Drop removes whatever was made.
        d.make_instance()?;
        d.make_kdamond(interval, settings)?;
        Ok(d)
    }

    fn make_instance(&mut self) -> Result<()> {
        let event = Path::new("events/damon/damon_aggregated/enable");
        if !self.tracing.join(event).exists() {
            return Err(Error::Unsupported {
                what: "the damon backend".into(),
                needs: "DAMON's damon_aggregated trace event (CONFIG_FTRACE with event \
                        tracing, e.g. CONFIG_ENABLE_DEFAULT_TRACERS)"
                    .into(),
            });
        }
        std::fs::create_dir(&self.instance).map_err(|e| Error::io(&self.instance, e))?;
        put(&self.instance.join("buffer_size_kb"), "4096")?;
        // Only regions seen accessed: the kernel formats every event read
        // from trace_pipe as text, which costs the recorder more than
        // anything else it does.
        put(
            &self.instance.join("events/damon/damon_aggregated/filter"),
            "nr_accesses > 0",
        )?;
        put(&self.instance.join(event), "1")?;
        let path = self.instance.join("trace_pipe");
        self.pipe = Some(
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                .open(&path)
                .map_err(|e| Error::io(&path, e))?,
        );
        Ok(())
    }

    fn make_kdamond(&mut self, interval: Duration, s: DamonSettings) -> Result<()> {
        // Checked again right before the write, to keep the window in
        // which another kdamond could appear as short as can be.
        if let Some(k) = foreign(&self.root) {
            return Err(Error::Unsupported {
                what: "the damon backend".into(),
                needs: format!("a kdamond exists that pagescope did not create: {k}"),
            });
        }
        put(&self.dir.join("nr_kdamonds"), "1")?;
        self.created = true;
        let k = self.dir.join("0");
        put(&k.join("contexts/nr_contexts"), "1")?;
        let c = k.join("contexts/0");
        let system = self.system.is_some();
        put(
            &c.join("operations"),
            if system { "paddr" } else { "vaddr" },
        )?;
        let us = |d: Duration| d.as_micros().to_string();
        let attrs = c.join("monitoring_attrs");
        put(&attrs.join("intervals/sample_us"), &us(s.sample))?;
        put(
            &attrs.join("intervals/aggr_us"),
            &us(aggregation(interval, s.sample)),
        )?;
        // How often vaddr follows the mappings (new ones are monitored
        // from then on): every interval.
        put(&attrs.join("intervals/update_us"), &us(interval))?;
        put(&attrs.join("nr_regions/max"), &s.max_regions.to_string())?;
        put(&attrs.join("nr_regions/min"), &s.min_regions.to_string())?;
        if let Some(ram) = &self.system {
            let t = c.join("targets");
            put(&t.join("nr_targets"), "1")?;
            let r = t.join("0/regions");
            put(&r.join("nr_regions"), &ram.len().to_string())?;
            for (i, (start, end)) in ram.iter().enumerate() {
                put(&r.join(format!("{i}/start")), &start.to_string())?;
                put(&r.join(format!("{i}/end")), &end.to_string())?;
            }
        }
        Ok(())
    }

    fn context(&self) -> PathBuf {
        self.dir.join("0/contexts/0")
    }

    /// Writes the process targets, and starts or updates the kdamond.
    fn set_targets(&mut self) -> Result<()> {
        let t = self.context().join("targets");
        put(&t.join("nr_targets"), &self.targets.len().to_string())?;
        for (i, pid) in self.targets.iter().enumerate() {
            put(&t.join(format!("{i}/pid_target")), &pid.to_string())?;
        }
        self.start_or_commit()
    }

    fn start_or_commit(&mut self) -> Result<()> {
        let state = self.dir.join("0/state");
        // A kdamond whose processes have all exited has stopped by itself;
        // it is started again for newcomers.
        if self.running && read_trim(&state).as_deref() != Some("off") {
            return put(&state, "commit");
        }
        let system = self.system.is_some();
        std::fs::write(&state, "on").map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error())
                && has_operations(&self.root, system).is_none()
            {
                Error::Unsupported {
                    what: "the damon backend".into(),
                    needs: format!(
                        "DAMON here refused to start with {} operations ({})",
                        if system { "paddr" } else { "vaddr" },
                        operations_option(system)
                    ),
                }
            } else {
                Error::io(&state, e)
            }
        })?;
        self.running = true;
        Ok(())
    }

    /// Reads what the trace instance holds, and notes the regions seen
    /// accessed.
    fn drain(&mut self) -> Result<()> {
        let Some(pipe) = self.pipe.as_mut() else {
            return Ok(());
        };
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.partial.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(self.instance.join("trace_pipe"), e)),
            }
        }
        let end = self
            .partial
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let text = String::from_utf8_lossy(&self.partial[..end]).into_owned();
        self.partial.drain(..end);
        for ev in text.lines().filter_map(parse_event) {
            if ev.accesses == 0 || ev.end <= ev.start {
                continue;
            }
            let pid = if self.system.is_some() {
                0
            } else {
                match self.targets.get(ev.target) {
                    Some(&p) => p,
                    None => continue,
                }
            };
            self.accessed.push((pid, ev.start, ev.end));
        }
        Ok(())
    }

    /// The machine: the LRU frames of the physical regions seen accessed;
    /// then each of `pids`'s pages on those frames, per process.
    fn collect_frames(&mut self, pids: &[u32], out: &mut Interval) -> Result<()> {
        let ranges = merge(
            self.accessed
                .drain(..)
                .map(|(_, s, e)| (s / self.page_size, e.div_ceil(self.page_size)))
                .collect(),
        );
        let flags_file = self.flags.as_ref().expect("paddr opens kpageflags");
        let mut tally = FrameTally::new(self.page_size, self.block);
        let mut flags = Vec::new();
        let mut seen = Vec::new();
        for (first, last) in ranges {
            let mut pfn = first;
            while pfn < last {
                let n = (last - pfn).min(64 * 1024);
                flags.resize(n as usize, 0);
                flags_file.read(pfn, &mut flags)?;
                for (k, &fl) in flags.iter().enumerate() {
                    if tracked(fl) {
                        tally.add(pfn + k as u64, fl);
                        set_frame(&mut seen, pfn + k as u64);
                    }
                }
                pfn += n;
            }
        }
        tally.finish(out);
        let (ps, block) = (self.page_size, self.block);
        per_process(&self.root.proc, ps, block, pids, &mut self.buf, &seen, out)
    }

    /// Processes: the resident pages of the regions seen accessed.
    fn collect_pages(&mut self, pids: &[u32], out: &mut Interval) -> Result<()> {
        let mut by_pid: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        for (pid, s, e) in self.accessed.drain(..) {
            by_pid.entry(pid).or_default().push((s, e));
        }
        self.writes.gather(pids)?;
        let mut pages = resident(
            &self.root.proc,
            self.page_size,
            pids,
            &mut self.buf,
            |pid| by_pid.remove(&pid).map(merge).unwrap_or_default(),
        )?;
        for p in &mut pages {
            p.dirty = self.writes.dirty(p.pid, p.vaddr, p.dirty);
        }
        let mut tally = ProcessTally::new(self.page_size, self.block, self.writes.known());
        for p in &pages {
            tally.add(p);
        }
        self.writes.end(pids)?;
        tally.finish(out);
        Ok(())
    }
}

impl Probe for Damon {
    fn backend(&self) -> Backend {
        Backend::Damon
    }

    fn granularity(&self) -> Granularity {
        Granularity::Region
    }

    fn writes(&self) -> WriteSource {
        self.writes.source()
    }

    fn writes_untracked(&self) -> Vec<u32> {
        self.writes.untracked()
    }

    fn needs_freeze(&self) -> bool {
        // DAMON samples on its own; only soft-dirty takes two passes.
        self.writes.two_pass()
    }

    fn reset(&mut self, pids: &[u32]) -> Result<()> {
        if self.system.is_some() {
            if !self.running {
                self.start_or_commit()?;
            }
            return Ok(());
        }
        let fresh: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| !self.targets.contains(p))
            .collect();
        if !fresh.is_empty() {
            // Events already in the pipe name targets by their old index.
            self.drain()?;
            // Processes gone are left out; the kdamond renumbers targets.
            let alive: Vec<u32> = self
                .targets
                .iter()
                .copied()
                .filter(|&p| crate::procfs::ProcDir::at(&self.root.proc, p).exists())
                .collect();
            self.targets = alive;
            self.targets.extend(fresh);
            self.set_targets()?;
        }
        self.writes.begin(pids)
    }

    fn collect(&mut self, pids: &[u32], out: &mut Interval) -> Result<()> {
        self.drain()?;
        if self.system.is_some() {
            self.collect_frames(pids, out)
        } else {
            self.collect_pages(pids, out)
        }
    }
}

impl Drop for Damon {
    fn drop(&mut self) {
        if self.created {
            let _ = std::fs::write(self.dir.join("0/state"), "off");
            // Only while the kdamond is pagescope's alone: the write
            // destroys every kdamond. It fails while one still runs.
            for _ in 0..50 {
                if read_trim(&self.dir.join("nr_kdamonds")).as_deref() != Some("1")
                    || std::fs::write(self.dir.join("nr_kdamonds"), "0").is_ok()
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.pipe = None;
        let _ = std::fs::write(
            self.instance.join("events/damon/damon_aggregated/enable"),
            "0",
        );
        let _ = std::fs::remove_dir(&self.instance);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_trace_lines() {
        let line = "       kdamond.0-81      [000] .....    12.345678: damon_aggregated: \
                    target_id=1 nr_regions=12 140737488289792-140737488355328: 3 7";
        assert_eq!(
            parse_event(line),
            Some(Aggregated {
                target: 1,
                start: 140737488289792,
                end: 140737488355328,
                accesses: 3
            })
        );
        assert_eq!(parse_event("kdamond.0-81 [000] 1.0: sched_switch: x"), None);
        assert_eq!(
            parse_event("x: damon_aggregated: target_id=0 nr_regions=1 5-: 1 1"),
            None
        );
    }

    #[test]
    fn merges_ranges() {
        assert_eq!(
            merge(vec![(10, 20), (0, 5), (15, 30), (30, 31), (40, 50)]),
            vec![(0, 5), (10, 31), (40, 50)]
        );
    }

    #[test]
    fn checks_settings() {
        let i = Duration::from_millis(100);
        assert!(DamonSettings::default().check(i).is_ok());
        let s = DamonSettings {
            min_regions: 2,
            ..DamonSettings::default()
        };
        assert!(s.check(i).unwrap_err().contains("at least 3"));
        let s = DamonSettings {
            max_regions: 5,
            min_regions: 10,
            ..DamonSettings::default()
        };
        assert!(s.check(i).is_err());
        let s = DamonSettings {
            sample: Duration::from_millis(200),
            ..DamonSettings::default()
        };
        assert!(s.check(i).is_err());
    }
}
