//! The views of a recording: `temporal` and `spatial`.

use crate::report::{Chart, Report, Table, Value};
use crate::views::{col, opt};
use pagescope_core::analysis::temporal::{Range, Recording, SpatialRow, TemporalRow};
use pagescope_core::record::WriteSource;
use pagescope_core::Result;

fn written(r: &Recording, n: u64) -> Value {
    if r.header().writes == WriteSource::None {
        Value::Missing
    } else {
        Value::Int(n)
    }
}

fn range_notes(r: &Recording, range: Option<Range>) -> Vec<String> {
    let mut notes = r.notes();
    if let Some(range) = range {
        let partial = r.partial_rows(range);
        if partial > 0 {
            notes.push(format!(
                "{partial} rows overlap --range only in part and are counted whole"
            ));
        }
    }
    notes
}

/// The `temporal` view: one row per interval.
pub fn temporal(r: &Recording, range: Option<Range>) -> Result<Report> {
    let rows: Vec<TemporalRow> = r.temporal(range)?;
    let h = r.header();
    let table = Table {
        key: "intervals",
        columns: vec![
            col("seq", "SEQ"),
            col("start_ns", "START_NS"),
            opt("end_ns", "END_NS", 2),
            col("user_pages", "USER"),
            col("page_cache_pages", "CACHE"),
            opt("kernel_resident_pages", "KERNEL(RES)", 3),
            col("written_pages", "WRITTEN"),
            opt("blocks", "BLOCKS", 1),
            opt("recorder_cpu_ns", "CPU_NS", 0),
        ],
        rows: rows
            .iter()
            .map(|t| {
                vec![
                    Value::Int(t.seq),
                    Value::Int(t.start_ns),
                    Value::Int(t.end_ns),
                    Value::Int(t.counts.user),
                    Value::Int(t.counts.page_cache),
                    Value::Int(t.kernel_resident),
                    written(r, t.counts.written),
                    Value::Int(t.blocks),
                    Value::Int(t.recorder_cpu_ns),
                ]
            })
            .collect(),
    };
    let chart = Chart {
        title: "Referenced pages per interval".into(),
        y_label: "pages".into(),
        series: vec!["user".into(), "page cache".into()],
        bars: rows
            .iter()
            .map(|t| {
                (
                    t.seq.to_string(),
                    vec![t.counts.user as f64, t.counts.page_cache as f64],
                )
            })
            .collect(),
        lines: false,
    };
    let sum = |f: fn(&TemporalRow) -> u64| rows.iter().map(f).sum::<u64>();
    Ok(Report {
        view: "temporal",
        page_size: h.page_size,
        notes: range_notes(r, range),
        fields: vec![
            ("backend", "backend", Value::from(h.backend.name())),
            ("interval_ns", "interval (ns)", Value::Int(h.interval_ns)),
            (
                "start_monotonic_ns",
                "start (CLOCK_MONOTONIC ns; interval times are after it)",
                Value::Int(h.start_monotonic_ns),
            ),
            ("intervals", "intervals", Value::Int(rows.len() as u64)),
            (
                "user_pages",
                "user pages referenced (summed over intervals)",
                Value::Int(sum(|t| t.counts.user)),
            ),
            (
                "page_cache_pages",
                "page-cache pages referenced (summed)",
                Value::Int(sum(|t| t.counts.page_cache)),
            ),
            (
                "written_pages",
                "written pages (summed)",
                written(r, sum(|t| t.counts.written)),
            ),
        ],
        tables: vec![table],
        text: None,
        chart: Some(chart),
    })
}

/// The `spatial` view: one row per block, how often it was referenced.
pub fn spatial(r: &Recording, range: Option<Range>) -> Result<Report> {
    let rows: Vec<SpatialRow> = r.spatial(range)?;
    let h = r.header();
    let table = Table {
        key: "blocks",
        columns: vec![
            opt("pid", "PID", 2),
            col("start", "START"),
            col("end", "END"),
            col("intervals", "INTERVALS"),
            col("user_pages", "USER"),
            col("page_cache_pages", "CACHE"),
            col("written_pages", "WRITTEN"),
        ],
        rows: rows
            .iter()
            .map(|s| {
                vec![
                    s.pid.map_or(Value::Missing, |p| Value::Int(p as u64)),
                    Value::Hex(s.start),
                    Value::Hex(s.end),
                    Value::Int(s.intervals),
                    Value::Int(s.counts.user),
                    Value::Int(s.counts.page_cache),
                    written(r, s.counts.written),
                ]
            })
            .collect(),
    };
    let chart = Chart {
        title: "Intervals with a reference, per block".into(),
        y_label: "intervals".into(),
        series: vec!["intervals".into()],
        bars: rows
            .iter()
            .map(|s| (format!("{:#x}", s.start), vec![s.intervals as f64]))
            .collect(),
        lines: false,
    };
    Ok(Report {
        view: "spatial",
        page_size: h.page_size,
        notes: range_notes(r, range),
        fields: vec![
            ("backend", "backend", Value::from(h.backend.name())),
            (
                "intervals",
                "intervals",
                Value::Int(r.intervals.len() as u64),
            ),
            ("blocks", "blocks referenced", Value::Int(rows.len() as u64)),
        ],
        tables: vec![table],
        text: None,
        chart: Some(chart),
    })
}
