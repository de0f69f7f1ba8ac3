//! Machine-wide facts: kernel, page size, meminfo, slabinfo, RAM ranges,
//! NUMA layout, and whether page frame numbers are visible to this
//! process.

use crate::procfs::ProcDir;
use crate::{kpage::KPageReader, node, pagemap::PagemapReader, Root};
use pagescope_core::model::{Origin, SystemInfo};
use pagescope_core::parse;
use pagescope_core::{Error, Result};
use std::io;

/// The note printed when page frame numbers are hidden.
pub const PFNS_HIDDEN: &str = "page frame numbers are hidden (needs CAP_SYS_ADMIN, e.g. run as root): no per-page flags, share counts, memcg or NUMA node; distinct user pages and USS/PSS from pages are missing, RSS/PSS/USS/swap come from smaps instead";

/// The page size in bytes.
pub fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// The CPUs this process may run on (its affinity mask).
pub fn allowed_cpus() -> Vec<usize> {
    use rustix::thread::{sched_getaffinity, CpuSet};
    sched_getaffinity(None).map_or_else(
        |_| Vec::new(),
        |set| (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
    )
}

/// The CPUs any thread of process `pid` may run on (empty where it can't
/// be asked: gone, or another user's).
pub fn process_cpus(pid: u32) -> Vec<usize> {
    use rustix::thread::{sched_getaffinity, CpuSet, Pid};
    let tids = crate::procfs::ProcDir::live(pid)
        .tasks()
        .unwrap_or_default();
    let mut cpus: Vec<usize> = tids
        .into_iter()
        .filter_map(|t| sched_getaffinity(Pid::from_raw(t as i32)).ok())
        .flat_map(|set| (0..CpuSet::MAX_CPU).filter(move |&c| set.is_set(c)))
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// `uname -r`.
pub fn kernel_release() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

/// Maps in every page of this process's private file mappings (its
/// executable, its shared libraries, locale files) with
/// `MADV_POPULATE_READ`, and returns the bytes they span.
///
/// A collector of other processes' figures calls it once, at start. A
/// process that maps more pages of a file moves the PSS of every other
/// process mapping them, the C library's above all, so the first run of
/// each code path of a collector would make it walk every such process
/// again. With its files mapped up front, its own running maps no more
/// file pages (reclaim may unmap some, which moves the counters of every
/// process that mapped them, and is seen as such).
///
/// A mapping the kernel refuses (a file shorter than its mapping; a
/// kernel before 5.14, which refuses them all) is left as it is: the
/// error is returned only if no mapping could be mapped in.
pub fn map_own_files() -> io::Result<u64> {
    let text = std::fs::read_to_string("/proc/self/maps")?;
    let lines =
        parse::maps::parse(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let mut bytes = 0;
    let mut refused = None;
    for l in lines {
        let private_readable = l.perms.starts_with('r') && l.perms.ends_with('p');
        if l.inode == 0 || !private_readable {
            continue;
        }
        let len = l.end - l.start;
        match pagescope_sys::mem::populate_read(l.start as usize, len as usize) {
            Ok(()) => bytes += len,
            Err(e) => refused = Some(e),
        }
    }
    match refused {
        Some(e) if bytes == 0 => Err(e),
        _ => Ok(bytes),
    }
}

/// This machine and its boot: the host name (`uname -n`) and the boot
/// id the kernel drew at this boot (`sys/kernel/random/boot_id` under
/// the root's procfs; `None` where it can't be read).
pub fn origin(root: &Root) -> Origin {
    let boot_id = std::fs::read_to_string(root.proc.join("sys/kernel/random/boot_id"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    Origin {
        host: rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned(),
        boot_id,
    }
}

/// Whether this process sees PFNs: pagemap of one of our own resident
/// pages shows a non-zero frame, and kpageflags opens.
pub fn pfns_visible(root: &Root, page_size: u64) -> bool {
    let probe = vec![1u8; 2 * page_size as usize];
    let addr = (probe.as_ptr() as u64).div_ceil(page_size) * page_size;
    std::hint::black_box(&probe);
    let Ok(dir) = ProcDir::open(&root.proc, std::process::id()) else {
        return false;
    };
    let Ok(file) = dir.open_file("pagemap") else {
        return false;
    };
    let mut reader = PagemapReader::new(file, "pagemap".into(), page_size);
    let mut pfn = 0;
    let ok = reader
        .for_each(addr, addr + page_size, |_, e| {
            pfn = e.pfn().map_or(0, |p| p.0)
        })
        .is_ok();
    ok && pfn != 0 && KPageReader::open(&root.proc).is_ok()
}

/// Collects the machine-wide facts. What can't be read goes into
/// `missing` as a sentence; only an unreadable meminfo is an error.
pub fn collect(root: &Root, selected_pids: &[u32]) -> Result<SystemInfo> {
    let page_size = page_size();
    let uname = rustix::system::uname();
    let mut s = SystemInfo {
        kernel_release: uname.release().to_string_lossy().into_owned(),
        hostname: uname.nodename().to_string_lossy().into_owned(),
        page_size,
        time_unix_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        clock_ticks: rustix::param::clock_ticks_per_second(),
        selected_pids: selected_pids.to_vec(),
        origin: Some(origin(root)),
        ..SystemInfo::default()
    };

    let meminfo_path = root.proc.join("meminfo");
    let text = std::fs::read_to_string(&meminfo_path).map_err(|e| Error::io(&meminfo_path, e))?;
    s.meminfo =
        parse::meminfo::parse(&text).map_err(|e| Error::corrupt(&meminfo_path, e.to_string()))?;

    let slab_path = root.proc.join("slabinfo");
    match std::fs::read_to_string(&slab_path) {
        Ok(text) => match parse::slabinfo::parse(&text) {
            Ok(slabs) => s.slabs = slabs,
            Err(e) => s.missing.push(format!("slab caches: {e}")),
        },
        Err(e) => s.missing.push(format!(
            "slab caches: {} unreadable ({e}; needs root)",
            slab_path.display()
        )),
    }

    let iomem_path = root.proc.join("iomem");
    match std::fs::read_to_string(&iomem_path)
        .map_err(|e| e.to_string())
        .and_then(|t| parse::iomem::system_ram(&t).map_err(|e| e.to_string()))
    {
        Ok(r) if r.is_empty() => s
            .missing
            .push("System RAM ranges: /proc/iomem hides addresses (needs root)".into()),
        Ok(r) => s.ram_ranges = r,
        Err(e) => s.missing.push(format!("System RAM ranges: {e}")),
    }

    match node::block_size(&root.sys) {
        Ok(bs) => {
            s.memory_block_size = bs;
            match node::node_ranges(&root.sys, bs, page_size) {
                Ok(n) => s.nodes = n,
                Err(e) => s
                    .missing
                    .push(format!("NUMA node ranges: {e} (needs CONFIG_NUMA)")),
            }
        }
        Err(e) => s.missing.push(format!(
            "memory blocks: {e} (needs CONFIG_MEMORY_HOTPLUG sysfs)"
        )),
    }

    s.pfns_visible = pfns_visible(root, page_size);
    if !s.pfns_visible {
        s.missing.push(PFNS_HIDDEN.into());
    }
    s.memcg_visible = s.pfns_visible && root.proc.join("kpagecgroup").exists();
    if s.pfns_visible && !s.memcg_visible {
        s.missing
            .push("memory cgroup per page: /proc/kpagecgroup absent (needs CONFIG_MEMCG)".into());
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After `map_own_files`, the kernel's own accounting (smaps) has
    /// every page of this process's executable and C library resident.
    /// (Other tests of this process may map other files meanwhile.)
    #[test]
    fn own_file_mappings_are_mapped_in_whole() {
        let bytes = map_own_files().expect("MADV_POPULATE_READ (Linux 5.14)");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let smaps = ProcDir::live(std::process::id())
            .smaps(&mut Vec::new())
            .unwrap();
        let mut spanned = 0;
        let mut files = std::collections::BTreeSet::new();
        for e in &smaps {
            let l = &e.map;
            let ours = l.path == exe.to_string_lossy() || l.path.contains("/libc.so");
            if l.inode == 0 || !ours || !l.perms.starts_with('r') || !l.perms.ends_with('p') {
                continue;
            }
            spanned += l.end - l.start;
            files.insert(l.path.clone());
            assert_eq!(
                e.counters.rss, e.counters.size,
                "{} at {:x} is not wholly resident",
                l.path, l.start
            );
        }
        assert_eq!(files.len(), 2, "{files:?}");
        assert!(bytes >= spanned, "{bytes} < {spanned}");
    }
}
