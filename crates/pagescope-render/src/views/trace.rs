//! The views of a trace: `refs` (counts per thread and mapping); its
//! `mrc` is in [`super::mrc`].

use super::{col, opt};
use crate::report::{Chart, Column, Report, Style, Table, Units, Value};
use pagescope_core::analysis::refs::{RefCounts, RefStats, TraceMaps};
use pagescope_core::trace::EndReason;

/// Notes every trace report carries: what the trace can't hold, and
/// whether it is complete.
pub(super) fn trace_notes(maps: &TraceMaps) -> Vec<String> {
    let mut n = Vec::new();
    if let Some(h) = &maps.header {
        n.push(format!("not traced: {}", h.untraced));
    }
    if let Some(pid) = maps.selected_but_absent() {
        let known: Vec<String> = maps.pids.iter().map(u32::to_string).collect();
        n.push(format!(
            "process {pid} is not in the trace (its processes: {})",
            known.join(" ")
        ));
    }
    match &maps.end {
        None => n.push(
            "the trace was cut short (the tracer was killed): this report covers what was written"
                .into(),
        ),
        Some(e) => {
            if e.unevictable > 0 {
                n.push(format!(
                    "{} pages could not be evicted (locked with mlock, or in a process forked \
                     while pagescope attached): touches of them after their first were not seen",
                    e.unevictable
                ));
            }
            if e.reason != EndReason::Exited {
                n.push(format!("the trace ended: {}", e.why()));
            }
        }
    }
    n
}

fn count_values(c: &RefCounts) -> [Value; 4] {
    [
        c.references.into(),
        c.reads.into(),
        c.writes.into(),
        c.distinct_pages.into(),
    ]
}

const COUNT_COLUMNS: [Column; 4] = [
    col("references", "REFS"),
    col("reads", "READS"),
    col("writes", "WRITES"),
    col("distinct_pages", "PAGES"),
];

/// The `refs` view of a trace: totals, then per thread and per mapping.
pub fn refs(s: &RefStats) -> Report {
    let t = s.total();
    let mut threads = Table {
        key: "threads",
        columns: vec![col("pid", "PID"), col("tid", "TID")],
        rows: Vec::new(),
    };
    threads.columns.extend(COUNT_COLUMNS);
    threads.columns.push(opt("command", "COMMAND", 1));
    for ((pid, tid), c) in s.threads() {
        let mut row = vec![Value::Int(pid as u64), Value::Int(tid as u64)];
        row.extend(count_values(c));
        row.push(Value::from(s.command(pid)));
        threads.rows.push(row);
    }
    let mut mappings = Table {
        key: "mappings",
        columns: vec![
            col("mapping", "ID"),
            col("pid", "PID"),
            col("kind", "KIND"),
            opt("start", "START", 3),
            opt("end", "END", 3),
        ],
        rows: Vec::new(),
    };
    mappings.columns.extend(COUNT_COLUMNS);
    mappings.columns.push(opt("path", "PATH", 2));
    // A shared page's identity across processes (page_key).
    mappings.columns.push(opt("device", "DEV", 3));
    mappings.columns.push(opt("inode", "INODE", 3));
    let mut per: Vec<((u32, u32), &RefCounts)> = s.per_mapping().collect();
    per.sort_by_key(|(_, c)| std::cmp::Reverse(c.references));
    for ((id, pid), c) in per {
        let m = s.maps.mappings.get(&id);
        let mut row = vec![
            Value::Int(id as u64),
            // The process whose references these are (a child forked with
            // the mapping has a row of its own).
            Value::Int(pid as u64),
            m.map_or(Value::Missing, |m| Value::from(m.kind.name())),
            m.map_or(Value::Missing, |m| Value::Hex(m.start)),
            m.map_or(Value::Missing, |m| Value::Hex(m.end)),
        ];
        row.extend(count_values(c));
        row.push(m.map_or(Value::Missing, |m| Value::from(m.path.as_str())));
        match m {
            Some(m) if m.inode != 0 => {
                row.push(Value::from(
                    format!("{}:{}", m.dev >> 32, m.dev & 0xffff_ffff).as_str(),
                ));
                row.push(Value::Int(m.inode));
            }
            _ => row.extend([Value::Missing, Value::Missing]),
        }
        mappings.rows.push(row);
    }
    let chart = Chart {
        title: "References per mapping".into(),
        y_label: "references".into(),
        series: vec!["reads".into(), "writes".into()],
        bars: mappings
            .rows
            .iter()
            .map(|r| {
                let label = format!("{} {}", r[0].display(), r[2].display());
                let num = |v: &Value| {
                    if let Value::Int(n) = v {
                        *n as f64
                    } else {
                        0.0
                    }
                };
                (label, vec![num(&r[6]), num(&r[7])])
            })
            .collect(),
        style: Style::Bars,
        x_label: "mapping (id and kind)".into(),
        ..Chart::default()
    };
    Report {
        view: "refs",
        page_size: s.maps.header.as_ref().map_or(4096, |h| h.page_size),
        notes: trace_notes(&s.maps),
        fields: vec![
            ("references", "references", t.references.into()),
            ("reads", "reads", t.reads.into()),
            ("writes", "writes", t.writes.into()),
            ("distinct_pages", "distinct pages", t.distinct_pages.into()),
        ],
        tables: vec![threads, mappings],
        text: None,
        chart: Some(chart),
        units: Units::Pages,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagescope_core::trace::{EndNote, TraceEnd};

    fn ended(reason: EndReason, notes: Vec<EndNote>) -> Vec<String> {
        let maps = TraceMaps {
            end: Some(TraceEnd {
                reason,
                notes,
                ..TraceEnd::default()
            }),
            ..TraceMaps::default()
        };
        trace_notes(&maps)
    }

    /// A trace that did not end by its programs' exit says why, with its
    /// notes, in the words of its end record.
    #[test]
    fn how_the_trace_ended() {
        assert!(ended(EndReason::Exited, vec![EndNote::NoReference]).is_empty());
        assert_eq!(
            ended(EndReason::Interrupted, vec![]),
            ["the trace ended: interrupted: the program was detached and runs on"]
        );
        assert_eq!(
            ended(
                EndReason::Error("waitpid: x".into()),
                vec![EndNote::NoReference]
            ),
            [
                "the trace ended: stopped by an error: waitpid: x; no page reference was caught \
                 (the program touched no traced page, or something else held its pages: \
                 another userfaultfd, mlock)"
            ]
        );
    }
}
