//! The views of a recording: `temporal`, `spatial`, `heatmap`,
//! `hugepages`, `numa`, `wss` and `processes`.

use crate::report::{Chart, Quantity, Report, Style, Table, Units, Value};
use crate::views::{col, opt};
use pagescope_core::analysis::temporal::{
    HeatCell, ProcessRow, Recording, Select, SpatialRow, TemporalRow,
};
use pagescope_core::record::{Counts, WriteSource};
use pagescope_core::Result;

fn written(r: &Recording, n: u64) -> Value {
    if r.header().writes == WriteSource::None {
        Value::Missing
    } else {
        Value::Pages(n as f64, 0)
    }
}

type Field = (&'static str, &'static str, Value);

fn backend_field(r: &Recording) -> Field {
    ("backend", "backend", Value::from(r.header().backend.name()))
}

fn intervals_field(r: &Recording) -> Field {
    (
        "intervals",
        "intervals",
        Value::Int(r.intervals.len() as u64),
    )
}

/// The user, page-cache and written cells of a row.
fn count_values(r: &Recording, c: &Counts) -> [Value; 3] {
    [
        Value::Pages(c.user as f64, 0),
        Value::Pages(c.page_cache as f64, 0),
        written(r, c.written),
    ]
}

fn select_notes(r: &Recording, sel: Select) -> Vec<String> {
    let mut notes = r.notes();
    let partial = r.partial_rows(sel);
    if partial > 0 {
        notes.push(format!(
            "{partial} rows overlap --range only in part and are counted whole"
        ));
    }
    if let Some(pid) = sel.pid {
        // A process first seen as it exited: its memory, and the command
        // line in it, were gone.
        if r.processes
            .iter()
            .any(|p| p.pid == pid && p.command.is_empty())
        {
            notes.push(format!(
                "process {pid} was exiting when first seen: its pages were read, its \
                 command line was gone"
            ));
        }
        if !r.processes.iter().any(|p| p.pid == pid) {
            // A process that started and exited between two boundaries
            // has rows (the fault backend reads its pages at its exit)
            // but was never seen to read its command line.
            let has_rows = r
                .intervals
                .iter()
                .any(|i| i.virt.iter().any(|v| v.pid == pid));
            notes.push(if has_rows {
                format!(
                    "process {pid} lived between two boundaries: its pages were read at its \
                     exit, its command line was not"
                )
            } else {
                format!("process {pid} is not in the recording")
            });
        }
    }
    notes
}

/// The `temporal` view: one row per interval.
pub fn temporal(r: &Recording, sel: Select) -> Result<Report> {
    let rows: Vec<TemporalRow> = r.temporal(sel)?;
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
                    Value::Pages((t.counts.user) as f64, 0),
                    Value::Pages((t.counts.page_cache) as f64, 0),
                    Value::Pages((t.kernel_resident) as f64, 0),
                    written(r, t.counts.written),
                    Value::Int(t.blocks),
                    Value::Int(t.recorder_cpu_ns),
                ]
            })
            .collect(),
    };
    let chart = Chart {
        title: "Referenced pages per interval".into(),
        y_label: "referenced memory".into(),
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
        style: Style::Bars,
        y_unit: Quantity::Pages(h.page_size.max(1)),
        x_label: "interval".into(),
        ..Chart::default()
    };
    let sum = |f: fn(&TemporalRow) -> u64| rows.iter().map(f).sum::<u64>();
    Ok(Report {
        view: "temporal",
        page_size: h.page_size,
        notes: select_notes(r, sel),
        fields: vec![
            backend_field(r),
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
                Value::Pages((sum(|t| t.counts.user)) as f64, 0),
            ),
            (
                "page_cache_pages",
                "page-cache pages referenced (summed)",
                Value::Pages((sum(|t| t.counts.page_cache)) as f64, 0),
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
        units: Units::Pages,
    })
}

/// The `spatial` view: one row per block, how often it was referenced.
pub fn spatial(r: &Recording, sel: Select) -> Result<Report> {
    let rows: Vec<SpatialRow> = r.spatial(sel)?;
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
                let mut row = vec![
                    s.pid.map_or(Value::Missing, |p| Value::Int(p as u64)),
                    Value::Hex(s.start),
                    Value::Hex(s.end),
                    Value::Int(s.intervals),
                ];
                row.extend(count_values(r, &s.counts));
                row
            })
            .collect(),
    };
    let chart = Chart {
        title: "Intervals with a reference, per block".into(),
        y_label: "intervals with a reference".into(),
        series: vec!["intervals".into()],
        bars: rows
            .iter()
            .map(|s| (format!("{:#x}", s.start), vec![s.intervals as f64]))
            .collect(),
        style: Style::Bars,
        x_label: "block (address, hex)".into(),
        ..Chart::default()
    };
    Ok(Report {
        view: "spatial",
        page_size: h.page_size,
        notes: select_notes(r, sel),
        fields: vec![
            backend_field(r),
            intervals_field(r),
            ("blocks", "blocks referenced", Value::Int(rows.len() as u64)),
        ],
        tables: vec![table],
        text: None,
        chart: Some(chart),
        units: Units::Pages,
    })
}

/// The `heatmap` view: time by address, one cell per row of each
/// interval; the SVG colours each block's cell by its referenced pages.
pub fn heatmap(r: &Recording, sel: Select) -> Result<Report> {
    let cells = r.heatmap(sel)?;
    let h = r.header();
    let label = |c: &HeatCell| match c.pid {
        Some(p) => format!("{p}:{:#x}", c.start),
        None => format!("{:#x}", c.start),
    };
    let mut keys: Vec<(Option<u32>, u64)> = cells.iter().map(|c| (c.pid, c.start)).collect();
    keys.sort_unstable();
    keys.dedup();
    let series: Vec<String> = keys
        .iter()
        .map(|&(pid, start)| {
            label(&HeatCell {
                seq: 0,
                pid,
                start,
                end: 0,
                counts: Default::default(),
            })
        })
        .collect();
    let mut bars: Vec<(String, Vec<f64>)> = r
        .intervals
        .iter()
        .map(|i| (i.seq.to_string(), vec![0.0; keys.len()]))
        .collect();
    let index: std::collections::HashMap<u64, usize> = r
        .intervals
        .iter()
        .enumerate()
        .map(|(k, i)| (i.seq, k))
        .collect();
    for c in &cells {
        if let (Some(&col), Ok(row)) = (index.get(&c.seq), keys.binary_search(&(c.pid, c.start))) {
            bars[col].1[row] = c.counts.referenced() as f64;
        }
    }
    let table = Table {
        key: "cells",
        columns: vec![
            col("seq", "SEQ"),
            opt("pid", "PID", 2),
            col("start", "START"),
            opt("end", "END", 1),
            col("user_pages", "USER"),
            col("page_cache_pages", "CACHE"),
            col("written_pages", "WRITTEN"),
        ],
        rows: cells
            .iter()
            .map(|c| {
                let mut row = vec![
                    Value::Int(c.seq),
                    c.pid.map_or(Value::Missing, |p| Value::Int(p as u64)),
                    Value::Hex(c.start),
                    Value::Hex(c.end),
                ];
                row.extend(count_values(r, &c.counts));
                row
            })
            .collect(),
    };
    Ok(Report {
        view: "heatmap",
        page_size: h.page_size,
        notes: select_notes(r, sel),
        fields: vec![
            backend_field(r),
            intervals_field(r),
            (
                "blocks",
                "blocks (rows of the map)",
                Value::Int(keys.len() as u64),
            ),
        ],
        tables: vec![table],
        text: None,
        chart: Some(Chart {
            title: "Referenced pages by interval and block".into(),
            y_label: "block (address, hex)".into(),
            series,
            bars,
            style: Style::Heat,
            y_unit: Quantity::Pages(h.page_size.max(1)),
            x_label: "interval".into(),
            ..Chart::default()
        }),
        units: Units::Pages,
    })
}

/// The `numa` view: referenced pages per node per interval.
pub fn numa(r: &Recording) -> Result<Report> {
    let (rows, unplaced) = r.numa()?;
    let h = r.header();
    let mut nodes: Vec<u16> = rows.iter().map(|n| n.node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let bars = r
        .intervals
        .iter()
        .map(|i| {
            let vals = nodes
                .iter()
                .map(|&node| {
                    rows.iter()
                        .find(|n| n.seq == i.seq && n.node == node)
                        .map_or(0.0, |n| n.counts.referenced() as f64)
                })
                .collect();
            (i.seq.to_string(), vals)
        })
        .collect();
    let mut notes = r.notes();
    if unplaced > 0 {
        notes.push(format!(
            "{unplaced} referenced pages lie in blocks of no known node (no NUMA information in sysfs)"
        ));
    }
    let total = |node: u16| -> u64 {
        rows.iter()
            .filter(|n| n.node == node)
            .map(|n| n.counts.referenced())
            .sum()
    };
    let mut totals = Table {
        key: "nodes",
        columns: vec![col("node", "NODE"), col("referenced_pages", "REFERENCED")],
        rows: nodes
            .iter()
            .map(|&n| vec![Value::Int(n as u64), Value::Pages((total(n)) as f64, 0)])
            .collect(),
    };
    totals.rows.sort_by_key(|row| match row[0] {
        Value::Int(n) => n,
        _ => 0,
    });
    Ok(Report {
        view: "numa",
        page_size: h.page_size,
        notes,
        fields: vec![
            backend_field(r),
            ("nodes", "nodes", Value::Int(nodes.len() as u64)),
        ],
        tables: vec![
            Table {
                key: "intervals",
                columns: vec![
                    col("seq", "SEQ"),
                    col("node", "NODE"),
                    col("user_pages", "USER"),
                    col("page_cache_pages", "CACHE"),
                    col("written_pages", "WRITTEN"),
                ],
                rows: rows
                    .iter()
                    .map(|n| {
                        let mut row = vec![Value::Int(n.seq), Value::Int(n.node as u64)];
                        row.extend(count_values(r, &n.counts));
                        row
                    })
                    .collect(),
            },
            totals,
        ],
        text: None,
        chart: Some(Chart {
            title: "Referenced pages per node".into(),
            y_label: "referenced memory".into(),
            series: nodes.iter().map(|n| format!("node {n}")).collect(),
            bars,
            style: Style::Bars,
            y_unit: Quantity::Pages(h.page_size.max(1)),
            x_label: "interval".into(),
            ..Chart::default()
        }),
        units: Units::Pages,
    })
}

/// The `hugepages` view: how densely the referenced 2 MiB regions were
/// referenced, per interval and over the run.
pub fn hugepages(r: &Recording) -> Result<Report> {
    let (rows, hist) = r.hugepages()?;
    let h = r.header();
    let per_region = (2 << 20) / h.page_size;
    let density = |pages: u64, regions: u64| {
        if regions == 0 {
            Value::Missing
        } else {
            Value::Float(pages as f64 / (regions * per_region) as f64, 3)
        }
    };
    let regions: u64 = rows.iter().map(|x| x.regions).sum();
    let full: u64 = rows.iter().map(|x| x.full).sum();
    let pages: u64 = rows.iter().map(|x| x.pages).sum();
    Ok(Report {
        view: "hugepages",
        page_size: h.page_size,
        notes: r.notes(),
        fields: vec![
            backend_field(r),
            (
                "regions",
                "2 MiB regions referenced (summed over intervals)",
                Value::Int(regions),
            ),
            (
                "full_regions",
                "of those, referenced in every page",
                Value::Int(full),
            ),
            (
                "density",
                "pages referenced per page of those regions",
                density(pages, regions),
            ),
        ],
        tables: vec![
            Table {
                key: "intervals",
                columns: vec![
                    col("seq", "SEQ"),
                    col("regions", "REGIONS"),
                    col("full_regions", "FULL"),
                    col("referenced_pages", "PAGES"),
                    col("density", "DENSITY"),
                ],
                rows: rows
                    .iter()
                    .map(|x| {
                        vec![
                            Value::Int(x.seq),
                            Value::Int(x.regions),
                            Value::Int(x.full),
                            Value::Pages((x.pages) as f64, 0),
                            density(x.pages, x.regions),
                        ]
                    })
                    .collect(),
            },
            Table {
                key: "histogram",
                columns: vec![
                    col("pages_referenced", "PAGES/REGION"),
                    col("regions", "REGIONS"),
                ],
                rows: hist
                    .iter()
                    .map(|&(p, n)| vec![Value::Int(p), Value::Int(n)])
                    .collect(),
            },
        ],
        text: None,
        chart: Some(Chart {
            title: "2 MiB regions by pages referenced in them".into(),
            y_label: "regions".into(),
            series: vec!["regions".into()],
            bars: hist
                .iter()
                .map(|&(p, n)| (p.to_string(), vec![n as f64]))
                .collect(),
            style: Style::Bars,
            x_label: "pages referenced in a 2 MiB region".into(),
            ..Chart::default()
        }),
        units: Units::Pages,
    })
}

/// The `wss` view: the working set per interval and over a window of
/// intervals.
pub fn wss(r: &Recording, window: usize, sel: Select) -> Result<Report> {
    let rows = r.wss(window, sel)?;
    let h = r.header();
    let max = |f: fn(&pagescope_core::analysis::temporal::WssRow) -> u64| {
        rows.iter().map(f).max().unwrap_or(0)
    };
    Ok(Report {
        view: "wss",
        page_size: h.page_size,
        notes: r.notes(),
        fields: vec![
            backend_field(r),
            ("window", "window (intervals)", Value::Int(window as u64)),
            (
                "window_ns",
                "window (ns)",
                Value::Int(window as u64 * h.interval_ns),
            ),
            (
                "max_pages",
                "largest working set of an interval",
                Value::Pages((max(|x| x.pages)) as f64, 0),
            ),
            (
                "max_window_pages",
                "largest working set of a window",
                Value::Pages((max(|x| x.window_pages)) as f64, 0),
            ),
        ],
        tables: vec![Table {
            key: "intervals",
            columns: vec![
                col("seq", "SEQ"),
                col("start_ns", "START_NS"),
                col("wss_pages", "WSS"),
                col("window_wss_pages", "WINDOW_WSS"),
            ],
            rows: rows
                .iter()
                .map(|x| {
                    vec![
                        Value::Int(x.seq),
                        Value::Int(x.start_ns),
                        Value::Pages((x.pages) as f64, 0),
                        Value::Pages((x.window_pages) as f64, 0),
                    ]
                })
                .collect(),
        }],
        text: None,
        chart: Some(Chart {
            title: format!("Working set: per interval and over {window} intervals"),
            y_label: "working set".into(),
            series: vec!["interval".into(), format!("{window} intervals")],
            bars: rows
                .iter()
                .map(|x| {
                    (
                        x.seq.to_string(),
                        vec![x.pages as f64, x.window_pages as f64],
                    )
                })
                .collect(),
            style: Style::Lines,
            y_unit: Quantity::Pages(h.page_size.max(1)),
            x_label: "interval".into(),
            ..Chart::default()
        }),
        units: Units::Pages,
    })
}

/// The `processes` view: per-process totals over the run, most
/// referenced first.
pub fn processes(r: &Recording, sel: Select) -> Result<Report> {
    let rows: Vec<ProcessRow> = r.processes(sel)?;
    let h = r.header();
    let name = |p: &ProcessRow| match p.command.first() {
        Some(c) => c.rsplit('/').next().unwrap_or(c).to_string(),
        None => p.pid.to_string(),
    };
    let table = Table {
        key: "processes",
        columns: vec![
            col("pid", "PID"),
            col("intervals", "INTERVALS"),
            col("user_pages", "USER"),
            col("page_cache_pages", "CACHE"),
            col("written_pages", "WRITTEN"),
            col("peak_pages", "PEAK"),
            col("command", "COMMAND"),
        ],
        rows: rows
            .iter()
            .map(|p| {
                let mut row = vec![Value::Int(p.pid as u64), Value::Int(p.intervals)];
                row.extend(count_values(r, &p.counts));
                row.push(Value::Pages((p.peak) as f64, 0));
                // Long command lines (a whole environment in JSON) are cut.
                let command = p.command.join(" ");
                let command: String = match command.char_indices().nth(80) {
                    Some((at, _)) => format!("{}...", &command[..at]),
                    None => command,
                };
                row.push(Value::from(command.as_str()));
                row
            })
            .collect(),
    };
    let chart = Chart {
        title: "Referenced pages per process (summed over intervals)".into(),
        y_label: "referenced memory".into(),
        series: vec!["user".into(), "page cache".into()],
        bars: rows
            .iter()
            .take(40)
            .map(|p| {
                (
                    format!("{} {}", p.pid, name(p)),
                    vec![p.counts.user as f64, p.counts.page_cache as f64],
                )
            })
            .collect(),
        style: Style::Bars,
        y_unit: Quantity::Pages(h.page_size.max(1)),
        x_label: "process".into(),
        ..Chart::default()
    };
    Ok(Report {
        view: "processes",
        page_size: h.page_size,
        notes: select_notes(r, sel),
        fields: vec![
            backend_field(r),
            intervals_field(r),
            (
                "processes",
                "processes with a reference",
                Value::Int(rows.len() as u64),
            ),
        ],
        tables: vec![table],
        text: None,
        chart: Some(chart),
        units: Units::Pages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagescope_core::record::ProcessInfo;

    /// A process whose command line could not be read (it was exiting)
    /// and one never seen at a boundary each get a note that says which.
    #[test]
    fn a_row_without_a_command_line_says_why() {
        use pagescope_core::record::{Backend, Granularity, RecordHeader, Scope, WriteSource};
        let mut r = Recording {
            header: Some(RecordHeader {
                page_size: 4096,
                interval_ns: 100,
                block_size: 1 << 20,
                backend: Backend::Fault,
                why: String::new(),
                granularity: Granularity::Vma,
                writes: WriteSource::Backend,
                frozen: false,
                scope: Scope::Processes(vec![7, 8]),
                start_unix_ns: 0,
                start_monotonic_ns: 0,
                kernel: String::new(),
                notes: vec![],
                nodes: vec![],
                sample: Some(1.0),
                origin: None,
            }),
            ..Recording::default()
        };
        r.processes.push(ProcessInfo {
            pid: 7,
            command: vec![],
            first_seq: 0,
        });
        r.processes.push(ProcessInfo {
            pid: 8,
            command: vec!["sh".into()],
            first_seq: 0,
        });
        let notes = |pid| {
            select_notes(
                &r,
                Select {
                    pid: Some(pid),
                    range: None,
                },
            )
            .join("; ")
        };
        assert!(notes(7).contains("process 7 was exiting when first seen"));
        assert!(!notes(8).contains("process 8"), "{}", notes(8));
        assert!(notes(9).contains("process 9 is not in the recording"));
    }
}
