//! The snapshot stream from a dump: the machine ([`SystemInfo`]), then
//! each process's record and pages, then the trailer, as
//! `pagescope_linux::snapshot::collect` makes it from the live system.
//!
//! What a live snapshot reads from /proc is made here from the kernel's
//! own structures by the kernel's own rules (6.1): pagemap entries as
//! `pagemap_pmd_range` builds them, kpageflags and kpagecount as
//! fs/proc/page.c does, and each VMA's smaps counters as `smaps_account`
//! sums them. What a dump can't give is listed in `SystemInfo::missing`.

use crate::dumpfile::Dump;
use crate::dumpfile::Machine;
use crate::kernel::Kernel;
use crate::kernelfile::KernelFile;
use crate::mmu::{Arch, Entry, Mmu};
use crate::page::{Frame, Frames};
use crate::proc::{self, TaskInfo, VmaInfo, USER_HZ};
use crate::vmcoreinfo::VmcoreInfo;
use crate::{DumpError, Result};
use pagescope_core::model::{
    NodeRange, PageChunk, PageRecord, PhysInfo, ProcessRecord, SmapsCounters, SnapshotSink,
    SystemInfo, Task, Trailer,
};
use pagescope_core::pagemap::{PagemapEntry, PagemapFlags, FRAME_MASK};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What to read.
#[derive(Clone, Debug)]
pub struct Config {
    /// The dump (an ELF core or a compressed kdump file).
    pub vmcore: PathBuf,
    /// The crashed kernel's vmlinux or BTF.
    pub btf: Option<PathBuf>,
    /// The crashed kernel's System.map, for the symbols a BTF file (or a
    /// stripped vmlinux) lacks.
    pub system_map: Option<PathBuf>,
    /// Processes to record; empty for all.
    pub pids: Vec<u32>,
    /// Pages per chunk handed to the sink.
    pub chunk_pages: usize,
    /// Pages of one process held until its record is written; a larger
    /// process is walked twice (its sums, then its pages streamed).
    pub buffer_pages: usize,
    /// Asked between processes: true stops with [`DumpError::Interrupted`].
    pub stop: fn() -> bool,
    /// Also class every frame of the machine (`--physmap`).
    pub physmap: bool,
    /// `vmcore` is the running kernel's `/proc/kcore` (`--kcore`).
    pub kcore: bool,
    /// The System.map's addresses are the running kernel's
    /// (`/proc/kallsyms`), not link-time ones.
    pub map_at_run_time: bool,
}

impl Config {
    /// Reads `vmcore` with the types of `btf`.
    pub fn new(vmcore: PathBuf, btf: Option<PathBuf>) -> Config {
        Config {
            vmcore,
            btf,
            system_map: None,
            pids: Vec::new(),
            chunk_pages: 64 * 1024,
            buffer_pages: 256 * 1024,
            stop: || false,
            physmap: false,
            kcore: false,
            map_at_run_time: false,
        }
    }
}

/// `KPF_NOPAGE`.
const KPF_NOPAGE: u64 = 1 << 20;
/// `PSS_SHIFT` (fs/proc/task_mmu.c).
const PSS_SHIFT: u32 = 12;

fn bad(path: &Path, why: impl Into<String>) -> DumpError {
    DumpError::Bad {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// The notes every dump snapshot carries: what it can't tell.
fn missing_notes(vmcore: &Path, kcore: bool) -> Vec<String> {
    let what = if kcore {
        "the running kernel through"
    } else {
        "the crash dump"
    };
    let mut notes = vec![
        format!(
            "read from {what} {}: the smaps counters are computed from its page tables and struct pages by smaps' rules (SwapPss takes every page in swap as unshared; shared memory in swap is not counted)",
            vmcore.display()
        ),
        "a dump has no slabinfo, memory cgroups (kpagecgroup), task times or fault counts: they are not read; of meminfo, only the lines the kernel's vm_stat counters give (MemTotal, MemFree, Buffers, Cached, SwapCached, AnonPages, Shmem, SReclaimable, SUnreclaim, KernelStack, PageTables, SecPageTables)".into(),
        "a dump has no mapped files' ELF headers: VMAs are classed by their permissions".into(),
    ];
    if kcore {
        notes.push("the kernel ran while its memory was read: a page freed or moved meanwhile may be missing or counted twice".into());
    }
    notes
}

/// Opens the dump and the brought file and checks that they belong
/// together; returns the kernel's description and symbols.
fn open(
    config: &Config,
    core: &Dump,
) -> Result<(
    Machine,
    VmcoreInfo,
    KernelFile,
    std::collections::HashMap<String, u64>,
)> {
    let path = &config.vmcore;
    let machine = core.machine().map_err(|m| {
        bad(
            path,
            format!("a dump of {m}; pagescope reads x86_64 and arm64 dumps"),
        )
    })?;
    let text = core
        .vmcoreinfo()
        .ok_or_else(|| bad(path, core.vmcoreinfo_hint()))?;
    let info = VmcoreInfo::parse(text).map_err(|e| bad(path, e))?;
    let (sizes, in_words): (&[u64], _) = match machine {
        Machine::X86_64 => (&[4096], "x86_64 dumps have 4 KiB pages"),
        Machine::Arm64 => (
            &[4096, 16384],
            "pagescope reads arm64 dumps with 4 or 16 KiB pages",
        ),
    };
    if !sizes.contains(&info.page_size) {
        return Err(bad(
            path,
            format!("page size {}: {in_words}", info.page_size),
        ));
    }
    let top = machine.top_table();
    let kf = match &config.btf {
        Some(p) => KernelFile::open(p)?,
        None => KernelFile::from_dump(core, machine, &info)?,
    };
    let btf_path = &kf.path.clone();
    if let (Some(a), Some(b)) = (&kf.build_id, &info.build_id) {
        if !b.starts_with(a.as_str()) && !a.starts_with(b.as_str()) {
            return Err(bad(
                btf_path,
                format!("is of another kernel: its build id is {a}, the dump's is {b}"),
            ));
        }
    }
    if let Some(r) = &kf.release {
        if *r != info.release {
            return Err(bad(
                btf_path,
                format!(
                    "is of another kernel: its release is {r}, the dump's is {}",
                    info.release
                ),
            ));
        }
    }
    let mut kf = kf;
    if let Some(map_path) = &config.system_map {
        let map = crate::kernelfile::system_map(map_path)?;
        // The map must be the dump's kernel's: the symbols VMCOREINFO
        // prints too must be where the map puts them.
        // Run-time addresses (kallsyms) are already shifted.
        let shift = if config.map_at_run_time {
            0
        } else {
            info.kernel_offset
        };
        for name in ["_stext", "init_uts_ns", top] {
            if let (Some(&m), Some(v)) = (map.get(name), info.symbol(name)) {
                if m.wrapping_add(shift) != v {
                    return Err(bad(
                        map_path,
                        format!(
                            "is of another kernel: it puts {name} at {m:#x}, the dump's VMCOREINFO at {v:#x} (KERNELOFFSET {:#x})",
                            info.kernel_offset
                        ),
                    ));
                }
            }
        }
        for (name, a) in map {
            if name != "_stext" {
                // As link-time addresses, which KERNELOFFSET shifts below.
                let a = a.wrapping_add(shift).wrapping_sub(info.kernel_offset);
                kf.symbols.entry(name).or_insert(a);
            }
        }
    }
    let mut symbols = std::collections::HashMap::new();
    for &name in crate::kernelfile::SYMBOLS {
        let addr = info.symbol(name).or_else(|| {
            kf.symbols
                .get(name)
                .map(|a| a.wrapping_add(info.kernel_offset))
        });
        if let Some(a) = addr {
            symbols.insert(name.to_string(), a);
        }
    }
    for name in ["init_task", top, "init_uts_ns"] {
        if !symbols.contains_key(name) {
            return Err(bad(
                btf_path,
                if kf.from_dump {
                    format!("the kernel's own kallsyms has no {name} (a kernel built without CONFIG_KALLSYMS_ALL lists no data symbols): bring the crashed kernel's vmlinux (--btf vmlinux, release {r}; Debian ships it in linux-image-{r}-dbg as /usr/lib/debug/boot/vmlinux-{r})", r = info.release)
                } else if config.map_at_run_time {
                    format!("has no symbol {name}, nor has /proc/kallsyms (a kernel built without CONFIG_KALLSYMS_ALL lists no data symbols there): bring the kernel's System.map (--system-map /boot/System.map-{})", info.release)
                } else if config.system_map.is_some() {
                    format!("has no symbol {name}, nor has the System.map, and the dump's VMCOREINFO does not give it")
                } else if kf.is_elf {
                    format!("has no symbol {name}, and the dump's VMCOREINFO does not give it: bring the kernel's System.map too (--system-map /boot/System.map-{})", info.release)
                } else {
                    format!("is BTF alone, and the dump's VMCOREINFO does not give {name}: bring the crashed kernel's vmlinux instead (--btf vmlinux, release {}), or its System.map too (--system-map /boot/System.map-{})", info.release, info.release)
                },
            ));
        }
    }
    Ok((machine, info, kf, symbols))
}

/// Collects a snapshot of the dump into `sink`; `progress(done, total,
/// pages)` after each process.
pub fn collect(
    config: &Config,
    sink: &mut dyn SnapshotSink,
    progress: &mut dyn FnMut(usize, usize, u64),
) -> Result<Trailer> {
    let started = Instant::now();
    let core = if config.kcore {
        Dump::open_kcore(&config.vmcore)?
    } else {
        Dump::open(&config.vmcore)?
    };
    let (machine, info, kf, symbols) = open(config, &core)?;
    let btf_path = kf.path.clone();
    let arch = Arch::of(machine, &info, core.phys_base()).map_err(|e| bad(&config.vmcore, e))?;
    let mut mmu =
        Mmu::new(&core, arch, symbols[machine.top_table()]).map_err(|e| bad(&config.vmcore, e))?;
    // The release in the dump's own init_uts_ns, at the address the
    // brought file gives: another build puts it elsewhere.
    let uts = |s: &str, m: &str| kf.btf.field(s, m).map(|f| f.offset);
    let (Some(name), Some(rel_off)) = (
        info.offset("uts_namespace.name")
            .or_else(|| uts("uts_namespace", "name")),
        uts("new_utsname", "release"),
    ) else {
        return Err(bad(
            &btf_path,
            "its BTF has no uts_namespace or new_utsname",
        ));
    };
    let at = symbols["init_uts_ns"] + name + rel_off;
    let mut rel = vec![0u8; 65];
    if !mmu.read(at, &mut rel)? {
        let mut why = format!(
            "the kernel's release (init_uts_ns, at {at:#x}) is not in the dump, so it can't be matched with the BTF"
        );
        for n in core.read_notes() {
            why.push_str("; ");
            why.push_str(&n);
        }
        return Err(bad(&config.vmcore, why));
    }
    let end = rel.iter().position(|&b| b == 0).unwrap_or(65);
    let release = String::from_utf8_lossy(&rel[..end]).into_owned();
    if release != info.release {
        return Err(bad(
            &btf_path,
            format!(
                "does not match the dump: at its init_uts_ns the dump holds release {release:?}, its VMCOREINFO says {:?} (a vmlinux or BTF of another kernel)",
                info.release
            ),
        ));
    }
    let layout = crate::layout::resolve(&kf.btf, &info).map_err(|e| bad(&btf_path, e))?;
    let zero_pfn = match symbols.get("empty_zero_page") {
        Some(&z) => mmu.kernel_phys(z)?.map(|p| p >> mmu.page_shift()),
        None => None,
    };
    // `huge_zero_page` (6.1) or `huge_zero_folio` (6.12): the head's
    // struct page either way.
    let huge_zero = match symbols
        .get("huge_zero_page")
        .or_else(|| symbols.get("huge_zero_folio"))
    {
        Some(&h) => {
            let mut b = [0u8; 8];
            mmu.read(h, &mut b)?
                .then(|| u64::from_le_bytes(b))
                .filter(|&p| p != 0)
        }
        None => None,
    };
    let frames = Frames::new(&layout, &info, &kf.btf, zero_pfn, huge_zero)
        .map_err(|e| bad(&config.vmcore, e))?;
    let mut k = Kernel {
        mmu,
        layout,
        info,
        frames,
        symbols,
    };
    let items = crate::vmstat::Items::new(&kf.btf);
    let system = system_info(&mut k, config, &items)?;
    sink.system(&system)?;
    let mut notes = Vec::new();
    let init_task = k.symbols["init_task"];
    let mut tasks = proc::tasks(&mut k, init_task, &mut notes)?
        .ok_or_else(|| bad(&config.vmcore, "init_task's task list is not in the dump"))?;
    tasks.retain(|t| t.pid == t.tgid);
    tasks.sort_by_key(|t| t.pid);
    if !config.pids.is_empty() {
        tasks.retain(|t| config.pids.contains(&t.pid));
    }
    let total = tasks.len();
    let mut pages_total = 0;
    let mut recorded = 0;
    for (i, t) in tasks.iter().enumerate() {
        if (config.stop)() {
            return Err(DumpError::Interrupted);
        }
        pages_total += process(&mut k, config, &system, t, sink, &mut notes)?;
        recorded += 1;
        progress(i + 1, total, pages_total);
    }
    if config.physmap {
        let scanned = crate::physmap::scan(&mut k, &system, sink, config.stop)?;
        if scanned.missing > 0 {
            notes.push(format!(
                "physmap: the struct pages of {} of the {} frames of RAM are not in the dump; they are classed reserved",
                scanned.missing, scanned.frames
            ));
        }
    }
    notes.extend(k.mmu.core().read_notes());
    let trailer = Trailer {
        processes: recorded,
        pages: pages_total,
        notes,
        duration_ns: started.elapsed().as_nanos() as u64,
    };
    sink.finish(&trailer)?;
    Ok(trailer)
}

/// The machine: release and host name from `init_uts_ns`, System RAM
/// from `iomem_resource`, NUMA nodes from `node_data`, meminfo's totals
/// from the vm_stat counters.
fn system_info(
    k: &mut Kernel<'_>,
    config: &Config,
    items: &crate::vmstat::Items,
) -> Result<SystemInfo> {
    let l = k.layout.clone();
    let uts = k.symbols["init_uts_ns"] + l.uts_name;
    let hostname = k.cstr(uts + l.utsname_nodename, 65)?.unwrap_or_default();
    // A dump's time is its file's; the running kernel's, now.
    let time = if config.kcore {
        Ok(std::time::SystemTime::now())
    } else {
        std::fs::metadata(&config.vmcore).and_then(|m| m.modified())
    };
    let time_unix_ns = time
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    let mut ram_ranges = Vec::new();
    if let Some(root) = k.symbols.get("iomem_resource").copied() {
        let mut child = k.u64(root + l.resource_child)?.unwrap_or(0);
        let mut n = 0;
        while child != 0 && n < 4096 {
            n += 1;
            let name = match k.u64(child + l.resource_name)? {
                Some(p) if p != 0 => k.cstr(p, 64)?.unwrap_or_default(),
                _ => String::new(),
            };
            if name == "System RAM" {
                if let (Some(s), Some(e)) = (
                    k.u64(child + l.resource_start)?,
                    k.u64(child + l.resource_end)?,
                ) {
                    ram_ranges.push((s, e));
                }
            }
            child = k.u64(child + l.resource_sibling)?.unwrap_or(0);
        }
    }
    if ram_ranges.is_empty() {
        ram_ranges = k
            .mmu
            .core()
            .ranges()
            .into_iter()
            .map(|(s, e)| (s, e - 1))
            .collect();
    }
    let mut nodes = Vec::new();
    let info = k.info.clone();
    if let (Some(nd), Some(len), Some(start), Some(spanned)) = (
        info.symbol("node_data"),
        info.length("node_data"),
        info.offset("pglist_data.node_start_pfn"),
        info.offset("pglist_data.node_spanned_pages"),
    ) {
        for i in 0..len.min(1024) {
            let Some(p) = k.u64(nd + 8 * i)? else {
                continue;
            };
            if p == 0 {
                continue;
            }
            if let (Some(s), Some(n)) = (k.u64(p + start)?, k.u64(p + spanned)?) {
                if n > 0 {
                    nodes.push(NodeRange {
                        node: i as u16,
                        start_pfn: s,
                        end_pfn: s + n,
                    });
                }
            }
        }
    }
    let block = info
        .number("SECTION_SIZE_BITS")
        .map_or(128 << 20, |b| 1u64 << b);
    // The crashed machine's name (its init_uts_ns), not the reader's; its
    // boot id is not read from the dump.
    let origin = Some(pagescope_core::model::Origin {
        host: hostname.clone(),
        boot_id: None,
    });
    Ok(SystemInfo {
        kernel_release: info.release.clone(),
        hostname,
        page_size: info.page_size,
        time_unix_ns,
        clock_ticks: USER_HZ,
        pfns_visible: true,
        memcg_visible: false,
        missing: {
            let mut m = missing_notes(&config.vmcore, config.kcore);
            m.extend(k.mmu.core().open_notes());
            m
        },
        meminfo: crate::vmstat::meminfo(k, items, info.page_size)?,
        slabs: Vec::new(),
        ram_ranges,
        memory_block_size: block,
        nodes,
        selected_pids: config.pids.clone(),
        origin,
        // Hugetlb pages are not told apart from a process's others here.
        hugetlb_read: false,
    })
}

/// The command line from the process's memory (`arg_start`..`arg_end`),
/// argument by argument; `None` if a page of it is not in the dump.
fn cmdline(k: &mut Kernel<'_>, pgd_pa: u64, args: (u64, u64)) -> Result<Option<Vec<String>>> {
    let (start, end) = args;
    if end <= start || end - start > 1 << 20 {
        return Ok(Some(Vec::new()));
    }
    let mut bytes = Vec::new();
    let size = k.mmu.page_size();
    let mut page = start & !(size - 1);
    while page < end {
        let mut found = None;
        k.mmu.walk_user(pgd_pa, page, page + size, &mut |_, e| {
            if let Entry::Present { pfn, .. } = e {
                found = Some(pfn);
            }
        })?;
        let Some(pfn) = found else { return Ok(None) };
        let mut b = vec![0u8; size as usize];
        if !k.mmu.core().read_phys(pfn << k.mmu.page_shift(), &mut b)? {
            return Ok(None);
        }
        let lo = start.max(page) - page;
        let hi = end.min(page + size) - page;
        bytes.extend_from_slice(&b[lo as usize..hi as usize]);
        page += size;
    }
    let text = bytes.strip_suffix(&[0]).unwrap_or(&bytes);
    Ok(Some(
        text.split(|&c| c == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    ))
}

/// One VMA's smaps sums, in bytes (PSS with PSS_SHIFT fraction bits), as
/// `smaps_account` keeps them.
#[derive(Default)]
struct Mss {
    resident: u64,
    pss: u64,
    pss_locked: u64,
    shared_clean: u64,
    shared_dirty: u64,
    private_clean: u64,
    private_dirty: u64,
    referenced: u64,
    anonymous: u64,
    anonymous_thp: u64,
    swap: u64,
    swap_pss: u64,
}

impl Mss {
    fn accumulate(&mut self, size: u64, pss: u64, dirty: bool, locked: bool, private: bool) {
        self.pss += pss;
        if locked {
            self.pss_locked += pss;
        }
        match (dirty, private) {
            (true, true) => self.private_dirty += size,
            (true, false) => self.shared_dirty += size,
            (false, true) => self.private_clean += size,
            (false, false) => self.shared_clean += size,
        }
    }

    fn counters(&self, v: &VmaInfo) -> SmapsCounters {
        SmapsCounters {
            size: (v.end - v.start) >> 10,
            rss: self.resident >> 10,
            pss: (self.pss >> PSS_SHIFT) >> 10,
            shared_clean: self.shared_clean >> 10,
            shared_dirty: self.shared_dirty >> 10,
            private_clean: self.private_clean >> 10,
            private_dirty: self.private_dirty >> 10,
            referenced: self.referenced >> 10,
            anonymous: self.anonymous >> 10,
            anon_huge_pages: self.anonymous_thp >> 10,
            swap: self.swap >> 10,
            swap_pss: (self.swap_pss >> PSS_SHIFT) >> 10,
            locked: (self.pss_locked >> PSS_SHIFT) >> 10,
        }
    }
}

/// `smaps_account`: a page (or a whole PMD-mapped folio) into `mss`.
#[allow(clippy::too_many_arguments)]
fn smaps_account(
    k: &mut Kernel<'_>,
    mss: &mut Mss,
    pfn: u64,
    f: &Frame,
    nr: u64,
    young: bool,
    dirty: bool,
    locked: bool,
) -> Result<()> {
    let page = k.mmu.page_size();
    let size = nr * page;
    if f.anon {
        mss.anonymous += size;
    }
    mss.resident += size;
    if young || f.referenced {
        mss.referenced += size;
    }
    let dirty = dirty || f.dirty;
    if f.refcount == 1 {
        mss.accumulate(size, size << PSS_SHIFT, dirty, locked, true);
        return Ok(());
    }
    for i in 0..nr {
        let mapcount = if i == 0 {
            f.mapcount
        } else {
            match k.frames.frame(&mut k.mmu, pfn + i)? {
                Some(s) => s.mapcount,
                None => 1,
            }
        };
        let mut pss = page << PSS_SHIFT;
        if mapcount >= 2 {
            pss /= mapcount as u64;
        }
        mss.accumulate(page, pss, dirty, locked, mapcount < 2);
    }
    Ok(())
}

/// One process: its record, then its pages in chunks. Returns the pages
/// written.
fn process(
    k: &mut Kernel<'_>,
    config: &Config,
    system: &SystemInfo,
    t: &TaskInfo,
    sink: &mut dyn SnapshotSink,
    notes: &mut Vec<String>,
) -> Result<u64> {
    k.frames.forget();
    let mut task = Task {
        pid: t.pid,
        tgid: t.tgid,
        ppid: t.ppid,
        comm: t.comm.clone(),
        uid: t.uid,
        threads: t.threads,
        start_time: t.start_ns / (1_000_000_000 / USER_HZ),
        kernel_thread: t.is_kernel_thread() || t.mm == 0,
        ..Task::default()
    };
    let label = format!("pid {} ({})", t.pid, t.comm);
    if task.kernel_thread {
        sink.process(&ProcessRecord {
            task,
            ..ProcessRecord::default()
        })?;
        return Ok(0);
    }
    let Some(mm) = proc::mm(k, t.mm)? else {
        notes.push(format!(
            "{label}: its mm is not in the dump; its memory is unknown"
        ));
        sink.process(&ProcessRecord {
            task,
            unread: pagescope_core::model::Unread::Memory,
            ..ProcessRecord::default()
        })?;
        return Ok(0);
    };
    let Some(pgd_pa) = k.mmu.kernel_phys(mm.pgd)? else {
        notes.push(format!(
            "{label}: its page tables are not in the dump; its pages are unknown"
        ));
        sink.process(&ProcessRecord {
            task,
            unread: pagescope_core::model::Unread::Memory,
            ..ProcessRecord::default()
        })?;
        return Ok(0);
    };
    let mut vnotes = Vec::new();
    let vmas = proc::vmas(k, t.mm, &mut vnotes)?;
    for n in vnotes {
        notes.push(format!("{label}: {n}"));
    }
    match cmdline(k, pgd_pa, mm.args)? {
        Some(c) => task.cmdline = c,
        None => notes.push(format!("{label}: its command line is not in the dump")),
    }
    if mm.exe_file != 0 {
        if let Some((p, ..)) = proc::file_path(k, mm.exe_file)? {
            task.exe = p;
        }
    }
    // The pages of each VMA, and its smaps sums; a VMA's pages are kept
    // only where smaps would show Rss or Swap (the live collector reads
    // only those VMAs' pagemap). The record (with the sums) goes first, so
    // the pages are held until it is written: up to `buffer_pages` of
    // them; a larger process is walked again, its pages streamed.
    let mut records = Vec::with_capacity(vmas.len());
    let mut counted = Vec::with_capacity(vmas.len());
    let mut pages: Vec<PageRecord> = Vec::new();
    let mut overflow = false;
    let mut missing_tables = 0;
    for v in &vmas {
        let before = pages.len();
        let limit = config.buffer_pages;
        let (mss, missing) = vma_pages(k, pgd_pa, v, system, &mut |r| {
            if pages.len() < limit {
                pages.push(r);
            } else {
                overflow = true;
            }
            Ok(())
        })?;
        missing_tables += missing;
        let kept = mss.resident > 0 || mss.swap > 0;
        if !kept {
            pages.truncate(before);
        }
        counted.push(kept);
        let mut record = proc::vma_record(k, &mm, v)?;
        record.smaps = mss.counters(v);
        records.push(record);
    }
    if missing_tables > 0 {
        notes.push(format!(
            "{label}: page tables for {missing_tables} of its pages are not in the dump; those pages are missing"
        ));
    }
    let start_time = task.start_time;
    sink.process(&ProcessRecord {
        task,
        vmas: records,
        rollup: None,
        unread: pagescope_core::model::Unread::Nothing,
    })?;
    let chunk_pages = config.chunk_pages.max(1);
    let mut chunk = PageChunk {
        pid: t.pid,
        start_time,
        pages: Vec::new(),
    };
    let mut n = 0u64;
    if !overflow {
        n = pages.len() as u64;
        for c in pages.chunks(chunk_pages) {
            chunk.pages.clear();
            chunk.pages.extend_from_slice(c);
            sink.pages(&chunk)?;
        }
        return Ok(n);
    }
    drop(pages);
    for (v, _) in vmas.iter().zip(&counted).filter(|(_, &c)| c) {
        vma_pages(k, pgd_pa, v, system, &mut |r| {
            chunk.pages.push(r);
            n += 1;
            if chunk.pages.len() >= chunk_pages {
                sink.pages(&chunk)?;
                chunk.pages.clear();
            }
            Ok(())
        })?;
    }
    if !chunk.pages.is_empty() {
        sink.pages(&chunk)?;
    }
    Ok(n)
}

/// Walks one VMA: its pagemap entries (with the physical side of present
/// pages) to `out`, in address order, and its smaps sums. Returns the
/// sums and the pages whose page tables are not in the dump. The tables
/// are walked 1 GiB at a time (a PUD's span, so no huge page is split),
/// which bounds what is held.
fn vma_pages(
    k: &mut Kernel<'_>,
    pgd_pa: u64,
    v: &VmaInfo,
    system: &SystemInfo,
    out: &mut dyn FnMut(PageRecord) -> Result<()>,
) -> Result<(Mss, u64)> {
    const WINDOW: u64 = 1 << 30;
    let mut mss = Mss::default();
    let mut missing = 0;
    let mut next = v.start;
    let mut entries = Vec::new();
    let mut from = v.start;
    while from < v.end {
        let to = ((from & !(WINDOW - 1)).saturating_add(WINDOW)).min(v.end);
        entries.clear();
        missing += k
            .mmu
            .walk_user(pgd_pa, from, to, &mut |a, e| entries.push((a, e)))?;
        window(k, v, system, &entries, &mut next, &mut mss, out)?;
        from = to;
    }
    if v.flags & proc::VM_SOFTDIRTY != 0 {
        soft_dirty_hole(next, v.end, k.mmu.page_size(), out)?;
    }
    Ok((mss, missing))
}

/// pagemap's entry for an empty page of a `VM_SOFTDIRTY` VMA: soft-dirty
/// alone, over `[from, to)`.
fn soft_dirty_hole(
    from: u64,
    to: u64,
    page: u64,
    out: &mut dyn FnMut(PageRecord) -> Result<()>,
) -> Result<()> {
    let mut a = from;
    while a < to {
        out(PageRecord {
            vaddr: a,
            entry: PagemapEntry(PagemapFlags::SOFT_DIRTY.bits()),
            phys: None,
        })?;
        a += page;
    }
    Ok(())
}

/// One window's entries of a VMA into pagemap entries and smaps sums;
/// `next` is the address after the last page given to `out`.
fn window(
    k: &mut Kernel<'_>,
    v: &VmaInfo,
    system: &SystemInfo,
    entries: &[(u64, Entry)],
    next: &mut u64,
    mss: &mut Mss,
    out: &mut dyn FnMut(PageRecord) -> Result<()>,
) -> Result<()> {
    let soft_vma = v.flags & proc::VM_SOFTDIRTY != 0;
    let locked = v.flags & proc::VM_LOCKED != 0;
    let hugetlb = v.flags & proc::VM_HUGETLB != 0;
    let special_vma = v.flags & (proc::VM_PFNMAP | proc::VM_MIXEDMAP) != 0;
    // Swap types in use are below nr_swapfiles; the types at the top
    // (migration, hwpoison, device, PTE markers) are not swap
    // (`non_swap_entry`). Without the symbol, 6.1's lowest such type with
    // every option on.
    let nr_swapfiles = match k.symbol("nr_swapfiles") {
        Some(a) => k.u32(a)?.map_or(23, u64::from),
        None => 23,
    };
    let page = k.mmu.page_size();
    let mut last_head: Option<(u64, Option<Frame>)> = None;
    for &(a, e) in entries {
        if soft_vma {
            soft_dirty_hole(*next, a, page, out)?;
        }
        *next = a + page;
        let mut bits = if soft_vma {
            PagemapFlags::SOFT_DIRTY.bits()
        } else {
            0
        };
        match e {
            Entry::Present { pfn, level, pte } => {
                let frame = k.frames.frame(&mut k.mmu, pfn)?;
                bits |= PagemapFlags::PRESENT.bits() | (pfn & FRAME_MASK);
                if pte.soft_dirty {
                    bits |= PagemapFlags::SOFT_DIRTY.bits();
                }
                if pte.uffd_wp {
                    bits |= PagemapFlags::UFFD_WP.bits();
                }
                // The page pagemap and smaps look at: vm_normal_page for a
                // PTE (none for special entries, such as the zero page),
                // the head for a PMD (vm_normal_page_pmd for smaps, which
                // leaves out the huge zero page).
                let special = pte.special;
                let head = if level == 0 {
                    if special {
                        None
                    } else {
                        frame
                    }
                } else {
                    // The head of a huge page, once for its 512 entries.
                    let head_pfn = pfn & !((1u64 << k.mmu.order(level)) - 1);
                    match last_head {
                        Some((p, h)) if p == head_pfn => h,
                        _ => {
                            let h = k.frames.frame(&mut k.mmu, head_pfn)?;
                            last_head = Some((head_pfn, h));
                            h
                        }
                    }
                };
                if let Some(h) = &head {
                    if !h.anon {
                        bits |= PagemapFlags::FILE_OR_SHARED.bits();
                    }
                    // 6.1 asks the head of a huge page, 6.12 each page.
                    let own = if level > 0 && k.frames.exclusive_per_page() {
                        frame.as_ref()
                    } else {
                        Some(h)
                    };
                    if own.is_some_and(|f| f.mapcount == 1) {
                        bits |= PagemapFlags::EXCLUSIVE.bits();
                    }
                }
                out(PageRecord {
                    vaddr: a,
                    entry: PagemapEntry(bits),
                    phys: Some(match &frame {
                        Some(f) => PhysInfo {
                            flags: pagescope_core::kpageflags::KPageFlags::from_bits_retain(
                                f.kflags,
                            ),
                            count: f.kcount,
                            memcg: 0,
                            node: system.node_of(pfn).unwrap_or(u16::MAX),
                        },
                        None => PhysInfo {
                            flags: pagescope_core::kpageflags::KPageFlags::from_bits_retain(
                                KPF_NOPAGE,
                            ),
                            count: 0,
                            memcg: 0,
                            node: u16::MAX,
                        },
                    }),
                })?;
                if hugetlb {
                    continue;
                }
                let (young, dirty) = (pte.young, pte.dirty);
                if level == 0 {
                    if let (false, Some(f)) = (special || (special_vma && frame.is_none()), frame) {
                        smaps_account(k, mss, pfn, &f, 1, young, dirty, locked)?;
                    }
                } else if a & ((page << k.mmu.order(level)) - 1) == 0 || a == v.start {
                    // A PMD-mapped folio counts whole, once.
                    let head_pfn = pfn & !((1u64 << k.mmu.order(level)) - 1);
                    let is_huge_zero = head.is_some_and(|h| h.kflags & (1 << 24) != 0);
                    if let (false, Some(h)) = (is_huge_zero, head) {
                        let nr = 1u64 << k.mmu.order(level);
                        if h.anon {
                            mss.anonymous_thp += nr * page;
                        }
                        smaps_account(k, mss, head_pfn, &h, nr, young, dirty, locked)?;
                    }
                }
            }
            Entry::Swap {
                swap_type,
                offset,
                pte,
            } => {
                bits |= PagemapFlags::SWAPPED.bits() | ((swap_type | offset << 5) & FRAME_MASK);
                if pte.soft_dirty {
                    bits |= PagemapFlags::SOFT_DIRTY.bits();
                }
                if pte.uffd_wp || (swap_type == 31 && offset & 1 == 1) {
                    bits |= PagemapFlags::UFFD_WP.bits();
                }
                out(PageRecord {
                    vaddr: a,
                    entry: PagemapEntry(bits),
                    phys: None,
                })?;
                if swap_type < nr_swapfiles && !hugetlb {
                    mss.swap += page;
                    mss.swap_pss += page << PSS_SHIFT;
                }
            }
        }
    }
    Ok(())
}
