//! A snapshot's tables: `system` (one row), `processes`, `vmas`, `pages`
//! (one row per page the snapshot holds) and `physmap` (runs of frames of
//! one class). Pages are written as their chunks are read, classed with
//! the same code as `report` (`analysis::classify`) and marked resident by
//! smaps' rule (`analysis::is_resident`), so that SQL over them gives
//! `report`'s figures. The pages of hugetlb mappings are rows too, marked
//! `hugetlb` and never `resident` (smaps counts them in no RSS).

use crate::layout::{Options, Summary, Tables};
use crate::table::{col, opt, Col, Stamp, Ty, V};
use crate::{read_error, stop, ExportError, Result};
use pagescope_core::analysis::classify::{classify_vmas, ElfTable, VmaClass};
use pagescope_core::analysis::{is_resident, VmaCursor};
use pagescope_core::format::{read_snapshot, Completeness};
use pagescope_core::model::{
    ElfFile, PageChunk, PhysChunk, ProcessRecord, SmapsCounters, SnapshotSink, SystemInfo, Trailer,
    Unread, Vma,
};
use pagescope_core::physclass::PhysClass;
use std::io::Read;
use std::path::Path;

const SYSTEM: usize = 0;
const PROCESSES: usize = 1;
const VMAS: usize = 2;
const PAGES: usize = 3;
const PHYSMAP: usize = 4;

/// The smaps counters' columns, in kB, as the kernel prints them.
const SMAPS: [&str; 13] = [
    "size_kb",
    "rss_kb",
    "pss_kb",
    "shared_clean_kb",
    "shared_dirty_kb",
    "private_clean_kb",
    "private_dirty_kb",
    "referenced_kb",
    "anonymous_kb",
    "anon_huge_pages_kb",
    "swap_kb",
    "swap_pss_kb",
    "locked_kb",
];

fn smaps_values(s: Option<&SmapsCounters>) -> [Option<u64>; 13] {
    match s {
        Some(s) => [
            s.size,
            s.rss,
            s.pss,
            s.shared_clean,
            s.shared_dirty,
            s.private_clean,
            s.private_dirty,
            s.referenced,
            s.anonymous,
            s.anon_huge_pages,
            s.swap,
            s.swap_pss,
            s.locked,
        ]
        .map(Some),
        None => [None; 13],
    }
}

const SYSTEM_COLS: &[Col] = &[
    col("hostname", Ty::Str),
    col("kernel_release", Ty::Str),
    col("page_size", Ty::U64),
    col("clock_ticks", Ty::U64),
    col("pfns_visible", Ty::Bool),
    col("memcg_visible", Ty::Bool),
    col("memory_block_size", Ty::U64),
    col("missing", Ty::Strs),
    col("meminfo_kb", Ty::Map),
    col("complete", Ty::Bool),
    opt("processes", Ty::U64),
    opt("pages", Ty::U64),
    opt("duration_ns", Ty::U64),
    opt("notes", Ty::Strs),
    col("hugetlb_read", Ty::Bool),
];

fn process_cols() -> Vec<Col> {
    let mut c = vec![
        col("pid", Ty::U32),
        col("start_time", Ty::U64),
        col("tgid", Ty::U32),
        col("ppid", Ty::U32),
        col("comm", Ty::Str),
        col("cmdline", Ty::Strs),
        col("uid", Ty::U32),
        col("cgroup", Ty::Str),
        col("threads", Ty::U32),
        col("minflt", Ty::U64),
        col("majflt", Ty::U64),
        col("utime", Ty::U64),
        col("stime", Ty::U64),
        col("kernel_thread", Ty::Bool),
        col("exe", Ty::Str),
        col("unread", Ty::Str),
        col("rollup_only", Ty::Bool),
    ];
    c.extend(SMAPS.iter().map(|n| opt(n, Ty::U64)));
    c
}

fn vma_cols() -> Vec<Col> {
    let mut c = vec![
        col("pid", Ty::U32),
        col("start_time", Ty::U64),
        col("start", Ty::U64),
        col("end", Ty::U64),
        col("perms", Ty::Str),
        col("offset", Ty::U64),
        col("dev_major", Ty::U32),
        col("dev_minor", Ty::U32),
        col("inode", Ty::U64),
        col("path", Ty::Str),
        col("vm_flags", Ty::Strs),
        col("class", Ty::Str),
        opt("unit", Ty::Str),
    ];
    c.extend(SMAPS.iter().map(|n| col(n, Ty::U64)));
    c
}

const PAGE_COLS: &[Col] = &[
    col("pid", Ty::U32),
    col("start_time", Ty::U64),
    col("vaddr", Ty::U64),
    opt("vma_start", Ty::U64),
    opt("class", Ty::Str),
    col("present", Ty::Bool),
    col("in_swap", Ty::Bool),
    col("exclusive", Ty::Bool),
    col("soft_dirty", Ty::Bool),
    col("file_or_shared", Ty::Bool),
    col("resident", Ty::Bool),
    col("pagemap", Ty::U64),
    opt("pfn", Ty::U64),
    opt("swap_type", Ty::U16),
    opt("swap_offset", Ty::U64),
    opt("kpageflags", Ty::U64),
    opt("map_count", Ty::U64),
    opt("cgroup", Ty::U64),
    opt("node", Ty::U16),
    col("hugetlb", Ty::Bool),
];

const PHYSMAP_COLS: &[Col] = &[
    col("start_pfn", Ty::U64),
    col("frames", Ty::U64),
    col("class", Ty::Str),
];

/// Exports a snapshot.
pub fn export(input: impl Read, name: &Path, o: &Options) -> Result<Summary> {
    let mut e = Exporter {
        o,
        tables: None,
        stamp: Stamp::default(),
        system: SystemInfo::default(),
        trailer: None,
        elfs: ElfTable::default(),
        current: None,
        vmas: Vec::new(),
        classes: Vec::new(),
        cursor: VmaCursor::default(),
        run: None,
        failed: None,
    };
    let done =
        read_snapshot(input, name, &mut e).map_err(|err| read_error(e.failed.take(), err))?;
    e.close(name, done == Completeness::Complete)
}

struct Exporter<'a> {
    o: &'a Options,
    tables: Option<Tables>,
    stamp: Stamp,
    system: SystemInfo,
    trailer: Option<Trailer>,
    elfs: ElfTable,
    /// The process whose pages come next: pid, start time, VMAs and their
    /// classes, and whether its pages were read.
    current: Option<(u32, u64)>,
    vmas: Vec<Vma>,
    classes: Vec<VmaClass>,
    cursor: VmaCursor,
    /// The physical map's run being gathered: first frame, frames, class.
    run: Option<(u64, u64, u8)>,
    failed: Option<ExportError>,
}

impl Exporter<'_> {
    fn table(&mut self, i: usize) -> &mut crate::table::Table {
        self.tables
            .as_mut()
            .expect("opened at the system record")
            .get(i)
    }

    fn push(&mut self, i: usize, row: &[V<'_>]) -> pagescope_core::Result<()> {
        let r = self.table(i).push(row);
        r.map_err(|e| stop(&mut self.failed, e))
    }

    fn flush_run(&mut self) -> pagescope_core::Result<()> {
        if let Some((start, frames, class)) = self.run.take() {
            let name = PhysClass::from_code(class).map_or("unknown", PhysClass::name);
            self.push(
                PHYSMAP,
                &[
                    V::U64(Some(start)),
                    V::U64(Some(frames)),
                    V::Str(Some(name)),
                ],
            )?;
        }
        Ok(())
    }

    /// One row per page of `chunk`; `hugetlb`: a hugetlb mapping's pages,
    /// which smaps counts in no RSS.
    fn page_rows(&mut self, chunk: &PageChunk, hugetlb: bool) -> pagescope_core::Result<()> {
        let ps = self.system.page_size.max(1);
        let ours = self.current == Some((chunk.pid, chunk.start_time));
        let pfns = self.system.pfns_visible;
        for page in &chunk.pages {
            let e = page.entry;
            let idx = if ours {
                self.cursor.index_by(&self.vmas, page.vaddr, |v| v)
            } else {
                None
            };
            let vma = idx.map(|i| &self.vmas[i]);
            let class = idx.map(|i| {
                self.classes[i]
                    .page_class(&self.elfs, page.vaddr, ps)
                    .name()
            });
            let resident = !hugetlb && is_resident(vma, page);
            let ph = page.phys;
            let row = [
                V::U32(Some(chunk.pid)),
                V::U64(Some(chunk.start_time)),
                V::U64(Some(page.vaddr)),
                V::U64(vma.map(|v| v.start)),
                V::Str(class),
                V::Bool(Some(e.is_present())),
                V::Bool(Some(e.is_in_swap())),
                V::Bool(Some(e.is_exclusive())),
                V::Bool(Some(e.is_soft_dirty())),
                V::Bool(Some(e.is_file_or_shared())),
                V::Bool(Some(resident)),
                V::U64(Some(e.0)),
                V::U64(e.pfn().filter(|_| pfns).map(|p| p.0)),
                V::U16(e.swap_type().map(u16::from)),
                V::U64(e.swap_offset()),
                V::U64(ph.map(|p| p.flags.bits())),
                V::U64(ph.map(|p| p.count)),
                V::U64(ph.map(|p| p.memcg).filter(|&m| m != 0)),
                V::U16(ph.map(|p| p.node).filter(|&n| n != u16::MAX)),
                V::Bool(Some(hugetlb)),
            ];
            let r = self.table(PAGES).push(&row);
            r.map_err(|e| stop(&mut self.failed, e))?;
        }
        Ok(())
    }

    fn close(mut self, name: &Path, complete: bool) -> Result<Summary> {
        if self.tables.is_none() {
            return Err(ExportError::Input(pagescope_core::Error::corrupt(
                name,
                "no system record",
            )));
        }
        self.flush_run()
            .map_err(|e| read_error(self.failed.take(), e))?;
        let s = std::mem::take(&mut self.system);
        let t = self.trailer.take();
        let row = [
            V::Str(Some(&s.hostname)),
            V::Str(Some(&s.kernel_release)),
            V::U64(Some(s.page_size)),
            V::U64(Some(s.clock_ticks)),
            V::Bool(Some(s.pfns_visible)),
            V::Bool(Some(s.memcg_visible)),
            V::U64(Some(s.memory_block_size)),
            V::Strs(Some(&s.missing)),
            V::Map(&s.meminfo),
            V::Bool(Some(complete)),
            V::U64(t.as_ref().map(|t| t.processes)),
            V::U64(t.as_ref().map(|t| t.pages)),
            V::U64(t.as_ref().map(|t| t.duration_ns)),
            V::Strs(t.as_ref().map(|t| &t.notes[..])),
            V::Bool(Some(s.hugetlb_read)),
        ];
        self.table(SYSTEM).push(&row)?;
        let tables = self.tables.take().expect("checked above").close()?;
        Ok(Summary {
            kind: "snapshot",
            tables,
            complete,
            stamp: self.stamp,
        })
    }
}

impl SnapshotSink for Exporter<'_> {
    fn system(&mut self, s: &SystemInfo) -> pagescope_core::Result<()> {
        let origin = s.origin.as_ref();
        self.stamp = Stamp {
            host: self
                .o
                .host
                .clone()
                .or_else(|| origin.map(|o| o.host.clone()))
                .or_else(|| (!s.hostname.is_empty()).then(|| s.hostname.clone())),
            boot_id: origin.and_then(|o| o.boot_id.clone()),
            taken_at_ns: s.time_unix_ns,
        };
        self.system = s.clone();
        let (processes, vmas) = (process_cols(), vma_cols());
        let specs: [(&'static str, &[Col]); 5] = [
            ("system", SYSTEM_COLS),
            ("processes", &processes),
            ("vmas", &vmas),
            ("pages", PAGE_COLS),
            ("physmap", PHYSMAP_COLS),
        ];
        match Tables::open(self.o, "snapshot", &self.stamp, &specs) {
            Ok(t) => self.tables = Some(t),
            Err(e) => return Err(stop(&mut self.failed, e)),
        }
        Ok(())
    }

    fn elf(&mut self, elf: &ElfFile) -> pagescope_core::Result<()> {
        self.elfs.add(elf.clone());
        Ok(())
    }

    fn process(&mut self, p: &ProcessRecord) -> pagescope_core::Result<()> {
        let t = &p.task;
        let ps = self.system.page_size.max(1);
        self.classes = classify_vmas(t, &p.vmas, &self.elfs, ps);
        self.vmas = p.vmas.clone();
        self.cursor = VmaCursor::default();
        self.current = Some((t.pid, t.start_time));
        let smaps = p.memory_read().then(|| {
            p.rollup.unwrap_or_else(|| {
                let mut sum = SmapsCounters::default();
                p.vmas.iter().for_each(|v| sum.add(&v.smaps));
                sum
            })
        });
        let unread = match p.unread {
            Unread::Nothing => "nothing",
            Unread::Memory => "memory",
            Unread::Pages => "pages",
        };
        let mut row = vec![
            V::U32(Some(t.pid)),
            V::U64(Some(t.start_time)),
            V::U32(Some(t.tgid)),
            V::U32(Some(t.ppid)),
            V::Str(Some(&t.comm)),
            V::Strs(Some(&t.cmdline)),
            V::U32(Some(t.uid)),
            V::Str(Some(&t.cgroup)),
            V::U32(Some(t.threads)),
            V::U64(Some(t.minflt)),
            V::U64(Some(t.majflt)),
            V::U64(Some(t.utime)),
            V::U64(Some(t.stime)),
            V::Bool(Some(t.kernel_thread)),
            V::Str(Some(&t.exe)),
            V::Str(Some(unread)),
            V::Bool(Some(p.rollup.is_some())),
        ];
        row.extend(smaps_values(smaps.as_ref()).map(V::U64));
        self.push(PROCESSES, &row)?;
        let tables = self.tables.as_mut().expect("opened at the system record");
        for (v, c) in p.vmas.iter().zip(&self.classes) {
            let mut row = vec![
                V::U32(Some(t.pid)),
                V::U64(Some(t.start_time)),
                V::U64(Some(v.start)),
                V::U64(Some(v.end)),
                V::Str(Some(&v.perms)),
                V::U64(Some(v.offset)),
                V::U32(Some(v.dev_major)),
                V::U32(Some(v.dev_minor)),
                V::U64(Some(v.inode)),
                V::Str(Some(&v.path)),
                V::Strs(Some(&v.vm_flags)),
                V::Str(Some(c.base.name())),
                V::Str(c.unit_path()),
            ];
            row.extend(smaps_values(Some(&v.smaps)).map(V::U64));
            if let Err(e) = tables.get(VMAS).push(&row) {
                return Err(stop(&mut self.failed, e));
            }
        }
        Ok(())
    }

    fn pages(&mut self, chunk: &PageChunk) -> pagescope_core::Result<()> {
        self.page_rows(chunk, false)
    }

    fn hugetlb(&mut self, chunk: &PageChunk) -> pagescope_core::Result<()> {
        self.page_rows(chunk, true)
    }

    fn physmap(&mut self, chunk: &PhysChunk) -> pagescope_core::Result<()> {
        for (i, &class) in chunk.classes.iter().enumerate() {
            let pfn = chunk.start_pfn + i as u64;
            match &mut self.run {
                Some((start, frames, c)) if *c == class && *start + *frames == pfn => *frames += 1,
                _ => {
                    self.flush_run()?;
                    self.run = Some((pfn, 1, class));
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self, trailer: &Trailer) -> pagescope_core::Result<()> {
        self.trailer = Some(trailer.clone());
        Ok(())
    }
}
