//! How each process uses its pages, by class, and how each executable
//! unit is shared: the analysis behind the `processes`, `vmas`, `units`,
//! `unit-totals` and `alerts` views (the 2005 suite's basic information,
//! per-VMA maps, unit maps, unit totals and single/multiple-use alerts).
//!
//! One pass over the snapshot stream: each process's VMAs are classified
//! ([`super::classify`]) when its record arrives, then each of its pages
//! is counted as it streams by. Per-page maps are kept only where a view
//! needs them (the VMAs of the processes asked for; the units' segments).

use super::classify::{classify_vmas, ElfTable, PageClass, UnitRef, VmaClass};
use super::{is_resident, VmaCursor};
use crate::kpageflags::KPageFlags;
use crate::model::{
    ElfFile, PageChunk, ProcessRecord, SmapsCounters, SnapshotSink, SystemInfo, Trailer, Unread,
    Vma,
};
use crate::Result;
use std::collections::{BTreeMap, HashSet};

/// Pages per class, in the paper's columns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCounts {
    /// Main and thread stacks.
    pub stack: u64,
    /// The application's .data.
    pub data: u64,
    /// The application's .text (and its read-only data).
    pub text: u64,
    /// Heap, anonymous memory, and the application's .bss.
    pub heap: u64,
    /// Libraries' .bss.
    pub lib_bss: u64,
    /// Libraries' .data.
    pub lib_data: u64,
    /// Libraries' .text (and their read-only data).
    pub lib_text: u64,
    /// Shared memory, other mapped files, kernel-provided mappings.
    pub other: u64,
}

impl ClassCounts {
    /// Adds `n` pages of `class` in a VMA of the application or a library.
    pub fn add(&mut self, class: PageClass, app: bool, n: u64) {
        let slot = match (class, app) {
            (PageClass::Stack, _) => &mut self.stack,
            (PageClass::Heap, _) => &mut self.heap,
            (PageClass::Text | PageClass::Rodata, true) => &mut self.text,
            (PageClass::Data, true) => &mut self.data,
            (PageClass::Bss, true) => &mut self.heap,
            (PageClass::Text | PageClass::Rodata, false) => &mut self.lib_text,
            (PageClass::Data, false) => &mut self.lib_data,
            (PageClass::Bss, false) => &mut self.lib_bss,
            (PageClass::Shm | PageClass::File | PageClass::Other, _) => &mut self.other,
        };
        *slot += n;
    }

    /// Sum of all classes.
    pub fn total(&self) -> u64 {
        self.stack
            + self.data
            + self.text
            + self.heap
            + self.lib_bss
            + self.lib_data
            + self.lib_text
            + self.other
    }
}

/// A process's pages counted one way (resident, or mapped): by class,
/// and by the permissions of their VMAs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageCounts {
    /// By class.
    pub classes: ClassCounts,
    /// In writable VMAs.
    pub rw: u64,
    /// In read-only or executable VMAs.
    pub rx: u64,
}

impl PageCounts {
    /// Adds `n` pages of `class` in `vma` (of the application or not).
    fn add(&mut self, vma: &Vma, class: PageClass, app: bool, n: u64) {
        self.classes.add(class, app, n);
        if vma.is_write() {
            self.rw += n;
        } else {
            self.rx += n;
        }
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.rw + self.rx
    }
}

/// Adds one to a count that is known.
fn bump(count: &mut Option<u64>) {
    if let Some(n) = count {
        *n += 1;
    }
}

/// One VMA's use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmaUsage {
    /// The VMA.
    pub vma: Vma,
    /// Resident pages (`None`: the process's pages could not be read).
    pub resident: Option<u64>,
    /// Resident pages mapped once (`None`: unknown, as share counts need
    /// page frame numbers).
    pub single: Option<u64>,
    /// Resident pages mapped more than once (`None` as for `single`).
    pub shared: Option<u64>,
    /// Of the single pages, the anonymous ones: in a file mapping, private
    /// copies (copy-on-write, relocations). Meaningful where `single` is
    /// known.
    pub single_anon: u64,
    /// The paper's flags: `S` stack, `X` the application's own, `r` `w`
    /// `x`, `B` .bss or heap; `.` where a flag is clear.
    pub flags: String,
    /// The unit's path, if the VMA belongs to one.
    pub unit: Option<String>,
    /// Classified by permissions, not ELF headers.
    pub heuristic: bool,
    /// Per page: 0 not resident, else the mapping count (capped at 255).
    /// Kept only for the processes whose maps were asked for.
    pub map: Option<Vec<u8>>,
}

/// One process's use.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessUsage {
    /// Process id.
    pub pid: u32,
    /// Start time (ticks after boot).
    pub start_time: u64,
    /// Command name.
    pub comm: String,
    /// Command line.
    pub cmdline: String,
    /// Threads.
    pub threads: u32,
    /// Kernel thread.
    pub kernel_thread: bool,
    /// What of it could not be read. Every figure that depends on it is
    /// `None`: unknown, not zero.
    pub unread: Unread,
    /// Figures come from pages (true) or from smaps sums (false).
    pub from_pages: bool,
    /// Only the kernel's smaps_rollup sums were read: no VMAs, no classes.
    pub rollup_only: bool,
    /// RSS in pages.
    pub rss: Option<u64>,
    /// PSS in pages.
    pub pss: Option<f64>,
    /// USS in pages.
    pub uss: Option<u64>,
    /// Swapped pages, as smaps counts them (shared memory in swap too).
    pub swap: Option<u64>,
    /// Pages of its hugetlb mappings in memory, in base pages: what
    /// smaps counts as `Private_Hugetlb + Shared_Hugetlb` and in no
    /// other figure (not in `rss`). `None` unless its pages were read.
    pub hugetlb: Option<u64>,
    /// Resident anonymous pages.
    pub anon: Option<u64>,
    /// Resident pages by class and permissions (`None` unless its VMAs and
    /// pages were read).
    pub phys: Option<PageCounts>,
    /// Mapped (virtual) pages by class and permissions (`None` unless its
    /// VMAs were read).
    pub virt: Option<PageCounts>,
    /// Resident pages mapped once (kpagecount 1; `None` without page
    /// frame numbers).
    pub single: Option<u64>,
    /// Resident pages mapped more than once (`None` as for `single`).
    pub multi: Option<u64>,
    /// Some VMAs were classified by permissions (`None`: none was read).
    pub heuristic: Option<bool>,
    /// The smaps sums (`None`: its memory could not be read).
    pub smaps: Option<SmapsCounters>,
    /// The VMAs.
    pub vmas: Vec<VmaUsage>,
}

impl ProcessUsage {
    /// A process with no memory at all, every figure known: the other side
    /// of a process that one of two snapshots does not hold.
    pub fn absent() -> ProcessUsage {
        ProcessUsage {
            rss: Some(0),
            pss: Some(0.0),
            uss: Some(0),
            swap: Some(0),
            hugetlb: Some(0),
            anon: Some(0),
            phys: Some(PageCounts::default()),
            virt: Some(PageCounts::default()),
            single: Some(0),
            multi: Some(0),
            heuristic: Some(false),
            smaps: Some(SmapsCounters::default()),
            ..ProcessUsage::default()
        }
    }
}

/// One segment of an executable unit, across processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnitSegment {
    /// The unit's file.
    pub path: String,
    /// Link-time start of the segment (or file offset when classified by
    /// permissions).
    pub start: u64,
    /// `r-x`-style permissions of the segment.
    pub perms: String,
    /// Processes that map it.
    pub processes: u32,
    /// Its length in pages.
    pub pages: u64,
    /// Per page of the segment resident in any process (by its index in
    /// the segment): how many processes have it resident.
    pub resident_by: BTreeMap<u64, u32>,
    /// Classified by permissions, not ELF headers.
    pub heuristic: bool,
}

/// Per unit, pages by class summed over processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnitTotals {
    /// .text pages mapped / resident.
    pub text: (u64, u64),
    /// Read-only data pages mapped / resident.
    pub rodata: (u64, u64),
    /// .data pages mapped / resident.
    pub data: (u64, u64),
    /// .bss pages mapped / resident.
    pub bss: (u64, u64),
    /// Processes that map the unit.
    pub processes: u32,
}

/// What to keep.
#[derive(Clone, Debug, Default)]
pub struct UsageOptions {
    /// Keep per-page maps of these processes' VMAs (empty: none).
    pub maps_for: Vec<u32>,
    /// Keep every process's maps.
    pub all_maps: bool,
}

/// The analysis.
#[derive(Debug, Default)]
pub struct Usage {
    /// The machine.
    pub system: SystemInfo,
    /// The ELF files seen.
    pub elfs: ElfTable,
    /// Processes, in stream order.
    pub processes: Vec<ProcessUsage>,
    /// Unit segments by (path, start).
    pub segments: BTreeMap<(String, u64), UnitSegment>,
    /// Unit totals by path.
    pub unit_totals: BTreeMap<String, UnitTotals>,
    /// Notes from the end record.
    pub notes: Vec<String>,
    /// Whether the end record was seen.
    pub complete: bool,
    /// The process (pid, command) in whose pages the file was cut short:
    /// its figures are its smaps sums, as for a process whose pages were
    /// not read.
    pub pages_cut: Option<(u32, String)>,
    /// The last process given, as given.
    last: Option<ProcessRecord>,
    options: UsageOptions,
    classes: Vec<VmaClass>,
    cursor: VmaCursor,
    /// Per unit segment of the current process: pages seen resident.
    seen: BTreeMap<(String, u64), HashSet<u64>>,
}

/// The most pages of a VMA or unit segment that get a page map (one
/// entry per page): larger ones are counted, not drawn.
pub const MAX_MAP_PAGES: u64 = 1 << 20;

impl Usage {
    /// A fresh analysis.
    pub fn new(options: UsageOptions) -> Usage {
        Usage {
            options,
            ..Usage::default()
        }
    }

    fn page_size(&self) -> u64 {
        self.system.page_size.max(1)
    }
}

/// Where a page sits in its unit: the segment's key (path, start), the
/// page's index in it, the segment's length in pages, its permissions, and
/// whether permissions (not ELF headers) decided.
type SegmentPlace = ((String, u64), u64, u64, String, bool);

/// The unit segment holding the page at `vaddr` of `vma`.
fn segment_of(
    elfs: &ElfTable,
    ps: u64,
    class: &VmaClass,
    vma: &Vma,
    vaddr: u64,
) -> Option<SegmentPlace> {
    let unit = class.unit.as_ref()?;
    {
        match unit.elf {
            Some(i) => {
                let link = vaddr.wrapping_sub(unit.bias);
                let f = &elfs.files[i];
                f.segments.iter().find_map(|s| {
                    let lo = s.vaddr & !(ps - 1);
                    let hi = s
                        .vaddr
                        .saturating_add(s.memsz)
                        .div_ceil(ps)
                        .saturating_mul(ps);
                    (link >= lo && link < hi).then(|| {
                        let perms = format!(
                            "{}{}{}",
                            if s.flags & 4 != 0 { 'r' } else { '-' },
                            if s.flags & 2 != 0 { 'w' } else { '-' },
                            if s.flags & 1 != 0 { 'x' } else { '-' }
                        );
                        (
                            (unit.path.clone(), lo),
                            (link - lo) / ps,
                            (hi - lo) / ps,
                            perms,
                            false,
                        )
                    })
                })
            }
            None => Some((
                (unit.path.clone(), vma.offset),
                (vaddr - vma.start) / ps,
                (vma.end - vma.start) / ps,
                vma.perms.get(..3).unwrap_or("---").to_string(),
                true,
            )),
        }
    }
}

impl SnapshotSink for Usage {
    fn system(&mut self, system: &SystemInfo) -> Result<()> {
        self.system = system.clone();
        Ok(())
    }

    fn elf(&mut self, elf: &ElfFile) -> Result<()> {
        self.elfs.add(elf.clone());
        Ok(())
    }

    fn process(&mut self, p: &ProcessRecord) -> Result<()> {
        let ps = self.page_size();
        let kpp = (ps / 1024).max(1);
        let memory = p.memory_read();
        let vmas_read = memory && p.rollup.is_none();
        let pages_read = vmas_read && p.pages_read();
        let smaps = memory.then(|| {
            p.rollup.unwrap_or_else(|| {
                let mut sum = SmapsCounters::default();
                for v in &p.vmas {
                    sum.add(&v.smaps);
                }
                sum
            })
        });
        let from_pages = self.system.pfns_visible && pages_read;
        self.classes = classify_vmas(&p.task, &p.vmas, &self.elfs, ps);
        self.seen.clear();
        self.cursor = VmaCursor::default();
        let keep_maps = self.options.all_maps || self.options.maps_for.contains(&p.task.pid);
        let mut u = ProcessUsage {
            pid: p.task.pid,
            start_time: p.task.start_time,
            comm: p.task.comm.clone(),
            cmdline: p.task.cmdline.join(" "),
            threads: p.task.threads,
            kernel_thread: p.task.kernel_thread,
            unread: p.unread,
            from_pages,
            rollup_only: p.rollup.is_some(),
            smaps,
            phys: pages_read.then(PageCounts::default),
            virt: vmas_read.then(PageCounts::default),
            heuristic: vmas_read.then_some(false),
            hugetlb: (pages_read && self.system.hugetlb_read).then_some(0),
            ..ProcessUsage::default()
        };
        if from_pages {
            u.rss = Some(0);
            u.pss = Some(0.0);
            u.uss = Some(0);
            // Swap is smaps's (the kernel's own count): pagemap shows no
            // swap entry for a shared-memory page in swap, whose page
            // table entry is empty.
            u.swap = smaps.map(|s| s.swap / kpp);
            u.anon = Some(0);
            u.single = Some(0);
            u.multi = Some(0);
        } else if let Some(smaps) = smaps {
            u.rss = Some(smaps.rss / kpp);
            u.pss = Some(smaps.pss as f64 / kpp as f64);
            u.uss = Some((smaps.private_clean + smaps.private_dirty) / kpp);
            u.swap = Some(smaps.swap / kpp);
            u.anon = Some(smaps.anonymous / kpp);
        }
        // Sums over processes (the units) cover the processes read in full.
        let units = pages_read;
        let mut unit_procs: Vec<(String, u64)> = Vec::new();
        let mut units_seen: Vec<String> = Vec::new();
        for (v, c) in p.vmas.iter().zip(&self.classes) {
            let pages = v.pages(ps);
            if let Some(h) = u.heuristic.as_mut() {
                *h |= c.heuristic;
            }
            let virt = u.virt.as_mut();
            // Virtual view: unit VMAs run by run (the pages up to the next
            // section or segment boundary share a class), others whole.
            if c.unit.is_some() {
                let mut virt = virt;
                let mut addr = v.start;
                while addr < v.end {
                    let run = match &c.unit {
                        Some(UnitRef {
                            elf: Some(i), bias, ..
                        }) => self.elfs.next_change(*i, addr.wrapping_sub(*bias), ps),
                        _ => u64::MAX,
                    };
                    let next = addr.saturating_add(run).min(v.end);
                    let n = (next - addr) / ps;
                    let class = c.page_class(&self.elfs, addr, ps);
                    if let Some(virt) = virt.as_mut() {
                        virt.add(v, class, c.is_app(), n);
                    }
                    if !units {
                        addr = next;
                        continue;
                    }
                    if let Some((key, _, seg_pages, perms, heuristic)) =
                        segment_of(&self.elfs, ps, c, v, addr)
                    {
                        if !unit_procs.contains(&key) {
                            unit_procs.push(key.clone());
                            let seg =
                                self.segments
                                    .entry(key.clone())
                                    .or_insert_with(|| UnitSegment {
                                        path: key.0.clone(),
                                        start: key.1,
                                        perms,
                                        heuristic,
                                        pages: seg_pages,
                                        ..UnitSegment::default()
                                    });
                            seg.processes += 1;
                        }
                    }
                    let path = c.unit_path().unwrap_or_default().to_string();
                    if !units_seen.contains(&path) {
                        units_seen.push(path.clone());
                        self.unit_totals.entry(path.clone()).or_default().processes += 1;
                    }
                    let t = self.unit_totals.entry(path).or_default();
                    match class {
                        PageClass::Text => t.text.0 += n,
                        PageClass::Rodata => t.rodata.0 += n,
                        PageClass::Data => t.data.0 += n,
                        PageClass::Bss => t.bss.0 += n,
                        _ => {}
                    }
                    addr = next;
                }
            } else if let Some(virt) = virt {
                virt.add(v, c.base, false, pages);
            }
            u.vmas.push(VmaUsage {
                vma: v.clone(),
                resident: pages_read.then_some(0),
                single: from_pages.then_some(0),
                shared: from_pages.then_some(0),
                flags: c.paper_flags(v),
                unit: c.unit_path().map(str::to_string),
                heuristic: c.heuristic,
                map: (keep_maps && pages_read && pages <= MAX_MAP_PAGES)
                    .then(|| vec![0; pages as usize]),
                ..VmaUsage::default()
            });
        }
        self.processes.push(u);
        // Kept in case the file ends in its pages.
        self.last = p.pages_read().then(|| p.clone());
        Ok(())
    }

    /// Counts the present pages of the process's hugetlb mappings.
    fn hugetlb(&mut self, chunk: &PageChunk) -> Result<()> {
        let Some(u) = self.processes.last_mut() else {
            return Ok(());
        };
        if u.pid != chunk.pid || u.start_time != chunk.start_time {
            return Ok(());
        }
        if let Some(h) = u.hugetlb.as_mut() {
            *h += chunk.pages.iter().filter(|p| p.entry.is_present()).count() as u64;
        }
        Ok(())
    }

    fn pages(&mut self, chunk: &PageChunk) -> Result<()> {
        let ps = self.page_size();
        let Some(u) = self.processes.last_mut() else {
            return Ok(());
        };
        if u.pid != chunk.pid || u.start_time != chunk.start_time {
            return Ok(());
        }
        // Pages of a process whose pages were not meant to be read (a
        // damaged file) are not counted.
        if u.phys.is_none() {
            return Ok(());
        }
        for page in &chunk.pages {
            let u = self.processes.last_mut().expect("checked above");
            // Not resident (its swap is counted from smaps).
            if page.entry.is_in_swap() {
                continue;
            }
            let idx = self.cursor.index_by(&u.vmas, page.vaddr, |v| &v.vma);
            let vma = idx.map(|i| &u.vmas[i].vma);
            if !is_resident(vma, page) {
                continue;
            }
            let count = page.phys.map(|p| p.count);
            if u.from_pages {
                bump(&mut u.rss);
                if let Some(ph) = page.phys {
                    if ph.flags.contains(KPageFlags::ANON) {
                        bump(&mut u.anon);
                    }
                    if let Some(pss) = u.pss.as_mut() {
                        *pss += 1.0 / ph.count.max(1) as f64;
                    }
                }
                if page.entry.is_exclusive() {
                    bump(&mut u.uss);
                }
            }
            let Some(i) = idx else { continue };
            let c = &self.classes[i];
            let class = c.page_class(&self.elfs, page.vaddr, ps);
            let vu = &mut u.vmas[i];
            if let Some(phys) = u.phys.as_mut() {
                phys.add(&vu.vma, class, c.is_app(), 1);
            }
            bump(&mut vu.resident);
            if let (Some(n), true) = (count, u.from_pages) {
                if n <= 1 {
                    bump(&mut vu.single);
                    bump(&mut u.single);
                    if page
                        .phys
                        .is_some_and(|p| p.flags.contains(KPageFlags::ANON))
                    {
                        vu.single_anon += 1;
                    }
                } else {
                    bump(&mut vu.shared);
                    bump(&mut u.multi);
                }
            }
            if let Some(map) = vu.map.as_mut() {
                let k = ((page.vaddr - vu.vma.start) / ps) as usize;
                if k < map.len() {
                    map[k] = count.unwrap_or(1).clamp(1, 255) as u8;
                }
            }
            if c.unit.is_some() {
                let path = c.unit_path().unwrap_or_default().to_string();
                let t = self.unit_totals.entry(path).or_default();
                match class {
                    PageClass::Text => t.text.1 += 1,
                    PageClass::Rodata => t.rodata.1 += 1,
                    PageClass::Data => t.data.1 += 1,
                    PageClass::Bss => t.bss.1 += 1,
                    _ => {}
                }
                let vma = &u.vmas[i].vma;
                if let Some((key, k, seg_pages, _, _)) =
                    segment_of(&self.elfs, ps, c, vma, page.vaddr)
                {
                    let fresh =
                        k < seg_pages && self.seen.entry(key.clone()).or_default().insert(k);
                    if fresh {
                        if let Some(seg) = self.segments.get_mut(&key) {
                            *seg.resident_by.entry(k).or_default() += 1;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self, trailer: &Trailer) -> Result<()> {
        self.notes = trailer.notes.clone();
        self.complete = true;
        Ok(())
    }

    fn cut_short(&mut self, pages_cut: bool) -> Result<()> {
        let Some(mut p) = self.last.take().filter(|p| pages_cut && p.pages_read()) else {
            return Ok(());
        };
        // Counted again as a process whose pages were not read. What its
        // pages already added to the unit sums stays: the file holds it.
        self.processes.pop();
        p.unread = Unread::Pages;
        self.process(&p)?;
        self.pages_cut = Some((p.task.pid, p.task.comm));
        Ok(())
    }
}

/// The character the page maps use for a mapping count: `.` none, `1`-`9`,
/// `#` ten or more.
pub fn map_char(count: u32) -> char {
    match count {
        0 => '.',
        1..=9 => char::from(b'0' + count as u8),
        _ => '#',
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ElfSection, ElfSegment, SectionKind, Task};

    /// A library of one text segment mapped over 1 TiB: counted run by
    /// run, at once, and its segment's pages are a count, not a table.
    #[test]
    fn a_huge_unit_mapping_is_counted_by_runs() {
        const PS: u64 = 4096;
        let tib: u64 = 1 << 40;
        let lib = ElfFile {
            path: "/lib/libhuge.so".into(),
            dev_major: 8,
            dev_minor: 1,
            inode: 7,
            elf_type: 3,
            segments: vec![ElfSegment {
                offset: 0,
                vaddr: 0,
                filesz: tib,
                memsz: tib,
                flags: 5,
            }],
            sections: vec![
                ElfSection {
                    name: ".rodata".into(),
                    addr: 0,
                    size: 0x3000,
                    kind: SectionKind::Rodata,
                },
                ElfSection {
                    name: ".text".into(),
                    addr: 0x3000,
                    size: tib - 0x3000,
                    kind: SectionKind::Text,
                },
            ],
        };
        let start = 0x7f00_0000_0000;
        let process = ProcessRecord {
            task: Task {
                pid: 5,
                comm: "huge".into(),
                ..Task::default()
            },
            vmas: vec![Vma {
                start,
                end: start + tib,
                perms: "r-xp".into(),
                dev_major: 8,
                dev_minor: 1,
                inode: 7,
                path: lib.path.clone(),
                ..Vma::default()
            }],
            ..ProcessRecord::default()
        };
        let mut u = Usage::new(UsageOptions::default());
        u.system(&SystemInfo {
            page_size: PS,
            ..SystemInfo::default()
        })
        .unwrap();
        u.elf(&lib).unwrap();
        let t = std::time::Instant::now();
        u.process(&process).unwrap();
        assert!(
            t.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            t.elapsed()
        );
        let pages = tib / PS;
        let p = &u.processes[0];
        let virt = p.virt.as_ref().expect("the VMAs were read");
        assert_eq!(virt.classes.lib_text, pages, "{virt:?}");
        let totals = &u.unit_totals["/lib/libhuge.so"];
        assert_eq!((totals.rodata.0, totals.text.0), (3, pages - 3));
        let seg = &u.segments[&("/lib/libhuge.so".to_string(), 0)];
        assert_eq!((seg.pages, seg.processes), (pages, 1));
        assert!(seg.resident_by.is_empty());
    }
}
