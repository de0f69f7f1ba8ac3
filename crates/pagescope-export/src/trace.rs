//! A trace's tables: `header` (one row, with the end record), `mappings`
//! (every mapping record in file order: a mapping that moved or grew has
//! a row per record, the last one winning), `refs` (one row per
//! reference, written chunk by chunk as they are read), `events` (process
//! starts, forks, execs and exits) and `residency` (untraced file
//! mappings' resident pages).
//!
//! A reference to shared memory names the object page it touched
//! (`shared_dev`, `shared_inode`, `shared_offset`) by its mapping as it
//! stood when the reference was read, as `analyze refs` counts distinct
//! pages (`analysis::refs::page_key`): the mapping table alone can't say
//! where a mapping was at the time.

use crate::layout::{Options, Summary, Tables};
use crate::table::{col, opt, Col, Stamp, Ty, V};
use crate::{read_error, stop, ExportError, Result};
use pagescope_core::analysis::refs::{PageKey, TraceMaps};
use pagescope_core::format::{read_trace, Completeness, TraceVisitor};
use pagescope_core::trace::{
    EvictMethod, Mapping, ProcessEvent, ProcessEventKind, Ref, Residency, TraceEnd, TraceHeader,
};
use std::io::Read;
use std::path::Path;

const HEADER: usize = 0;
const MAPPINGS: usize = 1;
const REFERENCES: usize = 2;
const EVENTS: usize = 3;
const RESIDENCY: usize = 4;

const HEADER_COLS: &[Col] = &[
    col("kernel", Ty::Str),
    col("page_size", Ty::U64),
    col("pool_pages", Ty::U64),
    col("policy", Ty::Str),
    col("evict", Ty::Str),
    col("command", Ty::Strs),
    col("start_monotonic_ns", Ty::U64),
    col("untraced", Ty::Str),
    col("complete", Ty::Bool),
    opt("references", Ty::U64),
    opt("evictions", Ty::U64),
    opt("unevictable", Ty::U64),
    opt("end_reason", Ty::Str),
    opt("end_notes", Ty::Strs),
];

const MAPPING_COLS: &[Col] = &[
    col("record", Ty::U64),
    col("mapping", Ty::U32),
    col("pid", Ty::U32),
    col("start", Ty::U64),
    col("end", Ty::U64),
    col("perms", Ty::Str),
    col("offset", Ty::U64),
    col("path", Ty::Str),
    col("inode", Ty::U64),
    col("dev", Ty::U64),
    col("kind", Ty::Str),
    col("traced", Ty::Bool),
];

const REF_COLS: &[Col] = &[
    col("time_ns", Ty::U64),
    col("time", Ty::Time),
    col("pid", Ty::U32),
    col("tid", Ty::U32),
    col("addr", Ty::U64),
    col("write", Ty::Bool),
    col("mapping", Ty::U32),
    opt("shared_dev", Ty::U64),
    opt("shared_inode", Ty::U64),
    opt("shared_offset", Ty::U64),
];

const EVENT_COLS: &[Col] = &[
    col("time_ns", Ty::U64),
    col("time", Ty::Time),
    col("pid", Ty::U32),
    col("event", Ty::Str),
    opt("parent", Ty::U32),
    opt("command", Ty::Strs),
    opt("status", Ty::I32),
];

const RESIDENCY_COLS: &[Col] = &[
    col("mapping", Ty::U32),
    col("pages", Ty::U64),
    col("resident", Ty::U64),
];

/// Exports a trace.
pub fn export(input: impl Read, name: &Path, o: &Options) -> Result<Summary> {
    let mut e = Exporter {
        o,
        tables: None,
        stamp: Stamp::default(),
        maps: TraceMaps::default(),
        records: 0,
        failed: None,
    };
    let done = read_trace(input, name, &mut e).map_err(|err| read_error(e.failed.take(), err))?;
    let (Some(mut tables), Some(h)) = (e.tables, e.maps.header.as_ref()) else {
        return Err(ExportError::Input(pagescope_core::Error::corrupt(
            name,
            "no trace header",
        )));
    };
    let complete = done == Completeness::Complete;
    let end = e.maps.end.as_ref();
    let end_notes: Option<Vec<String>> =
        end.map(|e| e.notes.iter().map(|n| n.to_string()).collect());
    let reason = end.map(|e| e.reason.to_string());
    tables.get(HEADER).push(&[
        V::Str(Some(&h.kernel)),
        V::U64(Some(h.page_size)),
        V::U64(Some(h.pool_pages)),
        V::Str(Some(&h.policy)),
        V::Str(Some(match h.evict {
            EvictMethod::Move => "move",
            EvictMethod::Copy => "copy",
        })),
        V::Strs(Some(&h.command)),
        V::U64(Some(h.start_monotonic_ns)),
        V::Str(Some(&h.untraced)),
        V::Bool(Some(complete)),
        V::U64(end.map(|e| e.references)),
        V::U64(end.map(|e| e.evictions)),
        V::U64(end.map(|e| e.unevictable)),
        V::Str(reason.as_deref()),
        V::Strs(end_notes.as_deref()),
    ])?;
    Ok(Summary {
        kind: "trace",
        tables: tables.close()?,
        complete,
        stamp: e.stamp,
    })
}

struct Exporter<'a> {
    o: &'a Options,
    tables: Option<Tables>,
    stamp: Stamp,
    /// The header, the mappings as they stand, the end record.
    maps: TraceMaps,
    /// Mapping records so far.
    records: u64,
    failed: Option<ExportError>,
}

impl Exporter<'_> {
    fn push(&mut self, i: usize, row: &[V<'_>]) -> pagescope_core::Result<()> {
        let t = self.tables.as_mut().expect("opened at the header").get(i);
        t.push(row).map_err(|e| stop(&mut self.failed, e))
    }
}

impl TraceVisitor for Exporter<'_> {
    fn header(&mut self, h: &TraceHeader) -> pagescope_core::Result<()> {
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
        self.maps.set_header(h);
        let specs: [(&'static str, &[Col]); 5] = [
            ("header", HEADER_COLS),
            ("mappings", MAPPING_COLS),
            ("refs", REF_COLS),
            ("events", EVENT_COLS),
            ("residency", RESIDENCY_COLS),
        ];
        match Tables::open(self.o, "trace", &self.stamp, &specs) {
            Ok(t) => self.tables = Some(t),
            Err(e) => return Err(stop(&mut self.failed, e)),
        }
        Ok(())
    }

    fn mapping(&mut self, m: &Mapping) -> pagescope_core::Result<()> {
        self.maps.add(m);
        let record = self.records;
        self.records += 1;
        self.push(
            MAPPINGS,
            &[
                V::U64(Some(record)),
                V::U32(Some(m.id)),
                V::U32(Some(m.pid)),
                V::U64(Some(m.start)),
                V::U64(Some(m.end)),
                V::Str(Some(&m.perms)),
                V::U64(Some(m.offset)),
                V::Str(Some(&m.path)),
                V::U64(Some(m.inode)),
                V::U64(Some(m.dev)),
                V::Str(Some(m.kind.name())),
                V::Bool(Some(m.traced)),
            ],
        )
    }

    fn event(&mut self, e: &ProcessEvent) -> pagescope_core::Result<()> {
        self.maps.event(e);
        let t0 = self.stamp.taken_at_ns;
        let (event, parent, command, status) = match &e.kind {
            ProcessEventKind::Start { command } => ("start", None, Some(&command[..]), None),
            ProcessEventKind::Fork { parent } => ("fork", Some(*parent), None, None),
            ProcessEventKind::Exec { command } => ("exec", None, Some(&command[..]), None),
            ProcessEventKind::Exit { status } => ("exit", None, None, Some(*status)),
        };
        self.push(
            EVENTS,
            &[
                V::U64(Some(e.time_ns)),
                V::TimeNs(Some(t0.saturating_add(e.time_ns))),
                V::U32(Some(e.pid)),
                V::Str(Some(event)),
                V::U32(parent),
                V::Strs(command),
                V::I32(status),
            ],
        )
    }

    fn refs(&mut self, refs: &[Ref]) -> pagescope_core::Result<()> {
        let t0 = self.stamp.taken_at_ns;
        for r in refs {
            let shared = match self.maps.key(r) {
                PageKey::Shared { dev, inode, offset } => Some((dev, inode, offset)),
                PageKey::Private { .. } => None,
            };
            self.push(
                REFERENCES,
                &[
                    V::U64(Some(r.time_ns)),
                    V::TimeNs(Some(t0.saturating_add(r.time_ns))),
                    V::U32(Some(r.pid)),
                    V::U32(Some(r.tid)),
                    V::U64(Some(r.addr)),
                    V::Bool(Some(r.write)),
                    V::U32(Some(r.mapping)),
                    V::U64(shared.map(|s| s.0)),
                    V::U64(shared.map(|s| s.1)),
                    V::U64(shared.map(|s| s.2)),
                ],
            )?;
        }
        Ok(())
    }

    fn residency(&mut self, r: &Residency) -> pagescope_core::Result<()> {
        self.push(
            RESIDENCY,
            &[
                V::U32(Some(r.mapping)),
                V::U64(Some(r.pages)),
                V::U64(Some(r.resident)),
            ],
        )
    }

    fn end(&mut self, e: &TraceEnd) -> pagescope_core::Result<()> {
        self.maps.end = Some(e.clone());
        Ok(())
    }
}
