//! A recording's tables: `header` (one row, with the end record),
//! `processes`, `intervals` (one row per interval: times, kernel memory
//! resident, the recorder's CPU), `counts` (one row per block or VMA with
//! references in an interval, physical or virtual) and `page_runs` (the
//! referenced pages of page-exact backends, as runs). Each interval is
//! written as it is read.

use crate::layout::{Options, Summary, Tables};
use crate::table::{col, opt, Col, Stamp, Ty, V};
use crate::{read_error, stop, ExportError, Result};
use pagescope_core::format::{read_record, Completeness, RecordVisitor};
use pagescope_core::record::{
    Counts, Granularity, Interval, ProcessInfo, RecordEnd, RecordHeader, Scope, WriteSource,
};
use std::io::Read;
use std::path::Path;

const HEADER: usize = 0;
const PROCESSES: usize = 1;
const INTERVALS: usize = 2;
const COUNTS: usize = 3;
const PAGE_RUNS: usize = 4;

const HEADER_COLS: &[Col] = &[
    col("kernel", Ty::Str),
    col("page_size", Ty::U64),
    col("interval_ns", Ty::U64),
    col("block_size", Ty::U64),
    col("backend", Ty::Str),
    col("why", Ty::Str),
    col("granularity", Ty::Str),
    col("writes", Ty::Str),
    col("frozen", Ty::Bool),
    col("scope", Ty::Str),
    col("scope_targets", Ty::Strs),
    col("start_monotonic_ns", Ty::U64),
    opt("sample", Ty::F64),
    col("notes", Ty::Strs),
    col("complete", Ty::Bool),
    opt("intervals", Ty::U64),
    opt("end_reason", Ty::Str),
    opt("end_notes", Ty::Strs),
    opt("overruns", Ty::U64),
];

const PROCESS_COLS: &[Col] = &[
    col("pid", Ty::U32),
    col("command", Ty::Strs),
    col("first_seq", Ty::U64),
];

const INTERVAL_COLS: &[Col] = &[
    col("seq", Ty::U64),
    col("start_ns", Ty::U64),
    col("end_ns", Ty::U64),
    col("start", Ty::Time),
    col("end", Ty::Time),
    col("kernel_slab_pages", Ty::U64),
    col("kernel_page_table_pages", Ty::U64),
    col("kernel_stack_pages", Ty::U64),
    col("recorder_cpu_ns", Ty::U64),
    col("physical_rows", Ty::U64),
    col("virtual_rows", Ty::U64),
];

const COUNT_COLS: &[Col] = &[
    col("seq", Ty::U64),
    col("space", Ty::Str),
    opt("pid", Ty::U32),
    opt("block", Ty::U64),
    col("start", Ty::U64),
    col("end", Ty::U64),
    col("user_pages", Ty::U64),
    col("page_cache_pages", Ty::U64),
    col("written_pages", Ty::U64),
];

const RUN_COLS: &[Col] = &[
    col("seq", Ty::U64),
    col("pid", Ty::U32),
    col("start", Ty::U64),
    col("pages", Ty::U64),
];

/// Exports a recording.
pub fn export(input: impl Read, name: &Path, o: &Options) -> Result<Summary> {
    let mut e = Exporter {
        o,
        tables: None,
        stamp: Stamp::default(),
        header: None,
        end: None,
        failed: None,
    };
    let done = read_record(input, name, &mut e).map_err(|err| read_error(e.failed.take(), err))?;
    let (Some(mut tables), Some(h)) = (e.tables, e.header) else {
        return Err(ExportError::Input(pagescope_core::Error::corrupt(
            name,
            "no record header",
        )));
    };
    let complete = done == Completeness::Complete;
    let (scope, targets): (&str, Vec<String>) = match &h.scope {
        Scope::Processes(p) => ("processes", p.iter().map(u32::to_string).collect()),
        Scope::Cgroup(c) => ("cgroup", vec![c.clone()]),
        Scope::System => ("system", vec![]),
        Scope::Command(c) => ("command", c.clone()),
    };
    let end = e.end.as_ref();
    let end_notes: Option<Vec<String>> =
        end.map(|e| e.notes.iter().map(|n| n.to_string()).collect());
    let reason = end.map(|e| e.reason.to_string());
    tables.get(HEADER).push(&[
        V::Str(Some(&h.kernel)),
        V::U64(Some(h.page_size)),
        V::U64(Some(h.interval_ns)),
        V::U64(Some(h.block_size)),
        V::Str(Some(h.backend.name())),
        V::Str(Some(&h.why)),
        V::Str(Some(match h.granularity {
            Granularity::Page => "page",
            Granularity::Vma => "vma",
            Granularity::Region => "region",
        })),
        V::Str(Some(match h.writes {
            WriteSource::None => "none",
            WriteSource::SoftDirty => "soft_dirty",
            WriteSource::Backend => "backend",
            WriteSource::PagemapScan => "pagemap_scan",
        })),
        V::Bool(Some(h.frozen)),
        V::Str(Some(scope)),
        V::Strs(Some(&targets)),
        V::U64(Some(h.start_monotonic_ns)),
        V::F64(h.sample),
        V::Strs(Some(&h.notes)),
        V::Bool(Some(complete)),
        V::U64(end.map(|e| e.intervals)),
        V::Str(reason.as_deref()),
        V::Strs(end_notes.as_deref()),
        V::U64(end.map(|e| e.overruns)),
    ])?;
    Ok(Summary {
        kind: "record",
        tables: tables.close()?,
        complete,
        stamp: e.stamp,
    })
}

struct Exporter<'a> {
    o: &'a Options,
    tables: Option<Tables>,
    stamp: Stamp,
    header: Option<RecordHeader>,
    end: Option<RecordEnd>,
    failed: Option<ExportError>,
}

impl Exporter<'_> {
    fn push(&mut self, i: usize, row: &[V<'_>]) -> pagescope_core::Result<()> {
        let t = self.tables.as_mut().expect("opened at the header").get(i);
        t.push(row).map_err(|e| stop(&mut self.failed, e))
    }

    fn counts(
        &mut self,
        seq: u64,
        space: &str,
        pid: Option<u32>,
        block: Option<u64>,
        (start, end): (u64, u64),
        c: &Counts,
    ) -> pagescope_core::Result<()> {
        self.push(
            COUNTS,
            &[
                V::U64(Some(seq)),
                V::Str(Some(space)),
                V::U32(pid),
                V::U64(block),
                V::U64(Some(start)),
                V::U64(Some(end)),
                V::U64(Some(c.user)),
                V::U64(Some(c.page_cache)),
                V::U64(Some(c.written)),
            ],
        )
    }
}

impl RecordVisitor for Exporter<'_> {
    fn header(&mut self, h: &RecordHeader) -> pagescope_core::Result<()> {
        let origin = h.origin.as_ref();
        self.stamp = Stamp {
            host: self
                .o
                .host
                .clone()
                .or_else(|| origin.map(|o| o.host.clone())),
            boot_id: origin.and_then(|o| o.boot_id.clone()),
            taken_at_ns: h.start_unix_ns,
        };
        self.header = Some(h.clone());
        let specs: [(&'static str, &[Col]); 5] = [
            ("header", HEADER_COLS),
            ("processes", PROCESS_COLS),
            ("intervals", INTERVAL_COLS),
            ("counts", COUNT_COLS),
            ("page_runs", RUN_COLS),
        ];
        match Tables::open(self.o, "record", &self.stamp, &specs) {
            Ok(t) => self.tables = Some(t),
            Err(e) => return Err(stop(&mut self.failed, e)),
        }
        Ok(())
    }

    fn process(&mut self, p: &ProcessInfo) -> pagescope_core::Result<()> {
        self.push(
            PROCESSES,
            &[
                V::U32(Some(p.pid)),
                V::Strs(Some(&p.command)),
                V::U64(Some(p.first_seq)),
            ],
        )
    }

    fn interval(&mut self, i: &Interval) -> pagescope_core::Result<()> {
        let Some(h) = self.header.as_ref() else {
            return Ok(());
        };
        let (t0, block, ps) = (h.start_unix_ns, h.block_size, h.page_size);
        self.push(
            INTERVALS,
            &[
                V::U64(Some(i.seq)),
                V::U64(Some(i.start_ns)),
                V::U64(Some(i.end_ns)),
                V::TimeNs(Some(t0.saturating_add(i.start_ns))),
                V::TimeNs(Some(t0.saturating_add(i.end_ns))),
                V::U64(Some(i.kernel.slab)),
                V::U64(Some(i.kernel.page_tables)),
                V::U64(Some(i.kernel.kernel_stack)),
                V::U64(Some(i.recorder_cpu_ns)),
                V::U64(Some(i.phys.len() as u64)),
                V::U64(Some(i.virt.len() as u64)),
            ],
        )?;
        for r in &i.phys {
            let start = r.block.saturating_mul(block);
            let range = (start, start.saturating_add(block));
            self.counts(i.seq, "physical", None, Some(r.block), range, &r.counts)?;
        }
        for r in &i.virt {
            self.counts(
                i.seq,
                "virtual",
                Some(r.pid),
                None,
                (r.start, r.end),
                &r.counts,
            )?;
        }
        for p in &i.pages {
            for (first, pages) in p.absolute() {
                self.push(
                    PAGE_RUNS,
                    &[
                        V::U64(Some(i.seq)),
                        V::U32(Some(p.pid)),
                        V::U64(Some(first.saturating_mul(ps))),
                        V::U64(Some(pages)),
                    ],
                )?;
            }
        }
        Ok(())
    }

    fn end(&mut self, e: &RecordEnd) -> pagescope_core::Result<()> {
        self.end = Some(e.clone());
        Ok(())
    }
}
