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
    ElfFile, PageChunk, ProcessRecord, SmapsCounters, SnapshotSink, SystemInfo, Trailer, Vma,
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

/// One VMA's use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmaUsage {
    /// The VMA.
    pub vma: Vma,
    /// Resident pages.
    pub resident: u64,
    /// Resident pages mapped once.
    pub single: u64,
    /// Resident pages mapped more than once.
    pub shared: u64,
    /// Of the single pages, the anonymous ones: in a file mapping, private
    /// copies (copy-on-write, relocations).
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
    /// Figures come from pages (true) or from smaps sums (false).
    pub from_pages: bool,
    /// Only the kernel's smaps_rollup sums were read: no VMAs, no classes.
    pub rollup_only: bool,
    /// RSS in pages.
    pub rss: u64,
    /// PSS in pages.
    pub pss: f64,
    /// USS in pages.
    pub uss: u64,
    /// Swapped pages.
    pub swap: u64,
    /// Resident anonymous pages.
    pub anon: u64,
    /// Resident pages by class.
    pub phys: ClassCounts,
    /// Mapped (virtual) pages by class.
    pub virt: ClassCounts,
    /// Resident pages in writable VMAs.
    pub rw_phys: u64,
    /// Resident pages in read-only or executable VMAs.
    pub rx_phys: u64,
    /// Mapped pages in writable VMAs.
    pub rw_virt: u64,
    /// Mapped pages in read-only or executable VMAs.
    pub rx_virt: u64,
    /// Resident pages mapped once (kpagecount 1).
    pub single: u64,
    /// Resident pages mapped more than once.
    pub multi: u64,
    /// Some VMAs were classified by permissions.
    pub heuristic: bool,
    /// The smaps sums.
    pub smaps: SmapsCounters,
    /// The VMAs.
    pub vmas: Vec<VmaUsage>,
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
        let smaps = p.rollup.unwrap_or_else(|| {
            let mut sum = SmapsCounters::default();
            for v in &p.vmas {
                sum.add(&v.smaps);
            }
            sum
        });
        let from_pages = self.system.pfns_visible && p.rollup.is_none();
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
            from_pages,
            rollup_only: p.rollup.is_some(),
            smaps,
            ..ProcessUsage::default()
        };
        if !from_pages {
            u.rss = smaps.rss / kpp;
            u.pss = smaps.pss as f64 / kpp as f64;
            u.uss = (smaps.private_clean + smaps.private_dirty) / kpp;
            u.swap = smaps.swap / kpp;
            u.anon = smaps.anonymous / kpp;
        }
        let mut unit_procs: Vec<(String, u64)> = Vec::new();
        let mut units_seen: Vec<String> = Vec::new();
        for (v, c) in p.vmas.iter().zip(&self.classes) {
            let pages = v.pages(ps);
            u.heuristic |= c.heuristic;
            // Virtual view: unit VMAs run by run (the pages up to the next
            // section or segment boundary share a class), others whole.
            if c.unit.is_some() {
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
                    u.virt.add(class, c.is_app(), n);
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
            } else {
                u.virt.add(c.base, false, pages);
            }
            if v.is_write() {
                u.rw_virt += pages;
            } else {
                u.rx_virt += pages;
            }
            u.vmas.push(VmaUsage {
                vma: v.clone(),
                flags: c.paper_flags(v),
                unit: c.unit_path().map(str::to_string),
                heuristic: c.heuristic,
                map: (keep_maps && pages <= MAX_MAP_PAGES).then(|| vec![0; pages as usize]),
                ..VmaUsage::default()
            });
        }
        self.processes.push(u);
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
        for page in &chunk.pages {
            let u = self.processes.last_mut().expect("checked above");
            if page.entry.is_swapped() {
                if u.from_pages {
                    u.swap += 1;
                }
                continue;
            }
            let idx = self.cursor.index_by(&u.vmas, page.vaddr, |v| &v.vma);
            let vma = idx.map(|i| &u.vmas[i].vma);
            if !is_resident(vma, page) {
                continue;
            }
            let count = page.phys.map(|p| p.count);
            if u.from_pages {
                u.rss += 1;
                if let Some(ph) = page.phys {
                    if ph.flags.contains(KPageFlags::ANON) {
                        u.anon += 1;
                    }
                    u.pss += 1.0 / ph.count.max(1) as f64;
                }
                if page.entry.is_exclusive() {
                    u.uss += 1;
                }
            }
            let Some(i) = idx else { continue };
            let c = &self.classes[i];
            let class = c.page_class(&self.elfs, page.vaddr, ps);
            u.phys.add(class, c.is_app(), 1);
            let vu = &mut u.vmas[i];
            if vu.vma.is_write() {
                u.rw_phys += 1;
            } else {
                u.rx_phys += 1;
            }
            vu.resident += 1;
            if let Some(n) = count {
                if n <= 1 {
                    vu.single += 1;
                    u.single += 1;
                    if page
                        .phys
                        .is_some_and(|p| p.flags.contains(KPageFlags::ANON))
                    {
                        vu.single_anon += 1;
                    }
                } else {
                    vu.shared += 1;
                    u.multi += 1;
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
            rollup: None,
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
        assert_eq!(p.virt.lib_text, pages, "{:?}", p.virt);
        let totals = &u.unit_totals["/lib/libhuge.so"];
        assert_eq!((totals.rodata.0, totals.text.0), (3, pages - 3));
        let seg = &u.segments[&("/lib/libhuge.so".to_string(), 0)];
        assert_eq!((seg.pages, seg.processes), (pages, 1));
        assert!(seg.resident_by.is_empty());
    }
}
