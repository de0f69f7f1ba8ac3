//! The views of a trace: `refs` (counts per thread and mapping) and
//! `mrc` (miss-ratio curves).

use super::{col, opt};
use crate::report::{human_size, Chart, Column, Quantity, Report, Style, Table, Units, Value};
use pagescope_core::analysis::mrc::Mrc;
use pagescope_core::analysis::refs::{RefCounts, RefStats, TraceMaps};
use pagescope_core::trace::EndReason;

/// Notes every trace report carries: what the trace can't hold, and
/// whether it is complete.
fn trace_notes(maps: &TraceMaps) -> Vec<String> {
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
    let mut per: Vec<(u32, &RefCounts)> = s.per_mapping().collect();
    per.sort_by_key(|(_, c)| std::cmp::Reverse(c.references));
    for (id, c) in per {
        let m = s.maps.mappings.get(&id);
        let mut row = vec![
            Value::Int(id as u64),
            m.map_or(Value::Missing, |m| Value::Int(m.pid as u64)),
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

fn ratio(v: Option<f64>) -> Value {
    v.map_or(Value::Missing, |v| Value::Float(v, 4))
}

/// The `mrc` view: miss ratio by memory size under LRU (exact, or a SHARDS
/// estimate), FIFO and CLOCK.
pub fn mrc(m: &Mrc) -> Report {
    let ps = m.maps.header.as_ref().map_or(4096, |h| h.page_size);
    let curve = m.curve();
    // The chart draws the sizes where every policy has a ratio (a
    // sampled curve has none for FIFO and CLOCK in less than a page of
    // the sample); the table has them all.
    let lru_only = m.is_lru_only();
    let drawn: Vec<(u64, Vec<f64>)> = curve
        .iter()
        .filter_map(|p| {
            Some((
                p.pages,
                if lru_only {
                    vec![p.lru?]
                } else {
                    vec![p.lru?, p.fifo?, p.clock?]
                },
            ))
        })
        .collect();
    // Below the tracer's pool the trace holds only the references that
    // missed the pool: what the curve says there is not known.
    let pool = m.maps.header.as_ref().map_or(0, |h| h.pool_pages);
    let below = drawn.iter().filter(|(pages, _)| *pages < pool).count();
    let unknown = (below > 0).then(|| {
        (
            below,
            format!(
                "not known: below the tracer's pool ({})",
                human_size((pool * ps) as f64)
            ),
        )
    });
    let rows = curve
        .iter()
        .map(|p| {
            vec![
                Value::Int(p.pages),
                Value::Int(p.pages * ps),
                ratio(p.lru),
                ratio(p.fifo),
                ratio(p.clock),
            ]
        })
        .collect();
    let chart = Chart {
        title: "Miss ratio by memory size".into(),
        y_label: "miss ratio".into(),
        series: if lru_only {
            vec!["LRU".into()]
        } else {
            vec!["LRU".into(), "FIFO".into(), "CLOCK".into()]
        },
        bars: drawn
            .iter()
            .map(|(pages, v)| (human_size((pages * ps) as f64), v.clone()))
            .collect(),
        style: Style::Lines,
        y_unit: Quantity::Ratio,
        x_label: "memory size".into(),
        unknown,
    };
    let mut notes = trace_notes(&m.maps);
    notes.push(
        "the trace holds the references that missed the tracer's pool, so sizes below the pool \
         see only those"
            .into(),
    );
    if lru_only {
        notes.push("LRU only (--lru-only): FIFO and CLOCK were not simulated".into());
    }
    if let Some(s) = m.sampling() {
        notes.push(format!(
            "sampled: estimates (SHARDS) from the references to the pages a hash keeps at rate \
             {} ({} of {} references); FIFO and CLOCK are simulated in memories scaled down by \
             the rate, so not in memories of less than one page of the sample",
            s.rate(),
            m.sampled_references(),
            m.references(),
        ));
    }
    Report {
        view: "mrc",
        page_size: ps,
        notes,
        fields: vec![
            ("references", "references", m.references().into()),
            (
                "distinct_pages",
                "distinct pages",
                m.distinct_pages().into(),
            ),
            ("cold_misses", "cold (first) references", m.cold().into()),
            (
                "sample_rate",
                "sample rate (1: exact)",
                Value::Float(m.sampling().map_or(1.0, |s| s.rate()), 6),
            ),
            (
                "sampled_references",
                "references in the sample",
                m.sampled_references().into(),
            ),
        ],
        tables: vec![Table {
            key: "curve",
            columns: vec![
                col("pages", "PAGES"),
                col("bytes", "BYTES"),
                col("lru_miss_ratio", "LRU"),
                col("fifo_miss_ratio", "FIFO"),
                col("clock_miss_ratio", "CLOCK"),
            ],
            rows,
        }],
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

    /// A sampled curve says so, with its rate, in a note and a field;
    /// an exact one has rate 1 and no such note; --lru-only leaves FIFO
    /// and CLOCK empty and says so.
    #[test]
    fn sampled_and_lru_only_curves_say_so() {
        use pagescope_core::analysis::mrc::Sampling;
        use pagescope_core::format::TraceVisitor;
        use pagescope_core::trace::Ref;
        let refs: Vec<Ref> = (0..200_000u64)
            .map(|i| Ref {
                time_ns: i,
                pid: 1,
                tid: 1,
                addr: ((i * 7919) % 5000) << 12,
                write: false,
                mapping: 0,
            })
            .collect();
        let field = |r: &Report, key: &str| {
            r.fields
                .iter()
                .find(|f| f.0 == key)
                .map(|f| f.2.display())
                .unwrap()
        };
        let mut m = Mrc::new().sampled(Sampling::new(0.01).unwrap());
        m.refs(&refs).unwrap();
        let r = mrc(&m);
        assert_eq!(field(&r, "sample_rate"), "0.010000");
        assert!(r
            .notes
            .iter()
            .any(|n| n.starts_with("sampled: ") && n.contains("at rate 0.01 (")));
        // FIFO and CLOCK are empty where a memory holds less than a page
        // of the sample, and only there.
        let rows = &r.tables[0].rows;
        assert_eq!(rows[0][3], Value::Missing);
        assert!(matches!(rows.last().unwrap()[4], Value::Float(..)));
        let mut m = Mrc::new().lru_only();
        m.refs(&refs).unwrap();
        let r = mrc(&m);
        assert_eq!(field(&r, "sample_rate"), "1.000000");
        assert!(!r.notes.iter().any(|n| n.starts_with("sampled")));
        assert!(r.notes.iter().any(|n| n.starts_with("LRU only")));
        assert!(r.tables[0].rows.iter().all(|row| row[3] == Value::Missing));
        assert_eq!(r.chart.unwrap().series, ["LRU"]);
    }
}
