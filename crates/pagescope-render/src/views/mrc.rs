//! The `mrc` view: miss-ratio curves of a trace (exact, or SHARDS
//! estimates) and the LRU curve estimated from a recording.

use super::col;
use super::trace::trace_notes;
use crate::report::{human_size, Chart, Quantity, Report, Style, Table, Units, Value};
use pagescope_core::analysis::mrc::{Comparison, Mrc, RecordedMrc, CALIBRATION};

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
    if m.references() == 0 {
        notes.push("no reference in the trace (or of the process asked): there is no curve".into());
    } else if m.sampled_references() == 0 {
        notes
            .push("no reference in the sample: there is no curve (sample at a higher rate)".into());
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

/// The `mrc` view of a recording: the LRU miss ratio by memory size,
/// estimated from the pages each interval referenced (see
/// [`RecordedMrc`]), with notes that say it is an estimate and how far
/// such estimates were from a trace's exact curve; `against`, beside the
/// exact curve of a trace of the same program, with their difference.
pub fn recorded_mrc(m: &RecordedMrc, against: Option<&Comparison>) -> Report {
    let ps = m.header.as_ref().map_or(4096, |h| h.page_size);
    let interval_ns = m.header.as_ref().map_or(0, |h| h.interval_ns);
    let sizes = m.sizes();
    let curve = m.lru_curve(&sizes);
    let exact = |i: usize| against.and_then(|c| c.exact.get(i).copied().flatten());
    let rows = sizes
        .iter()
        .zip(&curve)
        .enumerate()
        .map(|(i, (&pages, &lru))| {
            let mut row = vec![Value::Int(pages), Value::Int(pages * ps), ratio(lru)];
            if against.is_some() {
                row.push(ratio(exact(i)));
            }
            row
        })
        .collect();
    // With a trace, the chart sets the two curves side by side where the
    // trace knows its curve: at and above its pool.
    let (series, bars) = if against.is_some() {
        let bars = sizes
            .iter()
            .zip(&curve)
            .enumerate()
            .filter_map(|(i, (&pages, lru))| {
                Some((human_size((pages * ps) as f64), vec![(*lru)?, exact(i)?]))
            })
            .collect();
        let series = vec!["LRU (estimate)".into(), "LRU (trace, exact)".into()];
        (series, bars)
    } else {
        let bars = sizes
            .iter()
            .zip(&curve)
            .filter_map(|(&pages, lru)| Some((human_size((pages * ps) as f64), vec![(*lru)?])))
            .collect();
        (vec!["LRU (estimate)".into()], bars)
    };
    let (intervals, empty) = m.intervals();
    let chart = Chart {
        title: "Miss ratio by memory size (estimated from a recording)".into(),
        y_label: "miss ratio".into(),
        series,
        bars,
        style: Style::Lines,
        y_unit: Quantity::Ratio,
        x_label: "memory size".into(),
        unknown: None,
    };
    let mut notes = vec![format!(
        "an estimate: each page an interval referenced counts as one reference, the pages of \
         an interval in address order, so reuse is measured in intervals of {}; how often a \
         page was referenced inside an interval is not known. On the calibration workloads \
         its mean absolute error against the exact LRU curve of a trace was from {} ({}) to {} \
         ({}): docs/performance.md",
        human_duration(interval_ns),
        CALIBRATION.least.0,
        CALIBRATION.least.1,
        CALIBRATION.most.0,
        CALIBRATION.most.1,
    )];
    if m.rate() < 1.0 {
        notes.push(format!(
            "sampled: the recording watched {} of the pages (the same ones at every interval); \
             distances are scaled up by the inverse of that rate",
            m.rate()
        ));
    }
    if m.long_intervals() > 0 {
        notes.push(format!(
            "{} of the {} intervals lasted more than twice the {} asked for (the recorder fell \
             behind): reuse inside them is not seen, so the estimate is coarser there",
            m.long_intervals(),
            intervals,
            human_duration(interval_ns),
        ));
    }
    if m.end.is_none() {
        notes.push(
            "the recording was cut short (the recorder was killed): this curve covers the \
             intervals written"
                .into(),
        );
    }
    if m.references() == 0 {
        notes.push("no page was referenced in the recording: there is no curve".into());
    }
    if let Some(c) = against {
        notes.push(format!(
            "against the trace: its exact LRU curve is known at and above the tracer's pool \
             ({}); the error is the mean absolute difference of the two curves over those sizes",
            human_size((c.pool_pages * ps) as f64)
        ));
    }
    let mut columns = vec![
        col("pages", "PAGES"),
        col("bytes", "BYTES"),
        col("lru_miss_ratio", "LRU (ESTIMATE)"),
    ];
    let mut fields = Vec::new();
    if let Some(c) = against {
        columns.push(col("trace_lru_miss_ratio", "TRACE (EXACT)"));
        fields.push((
            "trace_mae",
            "error against the trace (mean absolute)",
            c.mae.map_or(Value::Missing, |e| Value::Float(e, 4)),
        ));
        fields.push((
            "trace_largest_error",
            "error against the trace (largest)",
            c.largest.map_or(Value::Missing, |e| Value::Float(e, 4)),
        ));
    }
    Report {
        view: "mrc",
        page_size: ps,
        notes,
        fields: [
            vec![("estimated", "estimated from a recording", Value::Bool(true))],
            fields,
            vec![
                ("intervals", "intervals", intervals.into()),
                (
                    "intervals_without_references",
                    "intervals without references",
                    empty.into(),
                ),
                (
                    "references",
                    "references (pages referenced, summed over intervals)",
                    m.references().into(),
                ),
                (
                    "distinct_pages",
                    "distinct pages",
                    m.distinct_pages().into(),
                ),
                (
                    "sample_rate",
                    "sample rate (1: every page)",
                    Value::Float(m.rate(), 6),
                ),
                (
                    "calibration_mae_least",
                    "error on the calibration workloads (mean absolute), least",
                    Value::Float(CALIBRATION.least.0, 4),
                ),
                (
                    "calibration_mae_most",
                    "error on the calibration workloads (mean absolute), most",
                    Value::Float(CALIBRATION.most.0, 4),
                ),
            ],
        ]
        .concat(),
        tables: vec![Table {
            key: "curve",
            columns,
            rows,
        }],
        text: None,
        chart: Some(chart),
        units: Units::Pages,
    }
}

/// `ns` as people read an interval: `100ms`, `1s`, `2.5s`.
fn human_duration(ns: u64) -> String {
    match ns {
        0 => "unknown length".into(),
        n if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        n if n >= 1_000_000_000 => format!("{:.1}s", n as f64 / 1e9),
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n => format!("{:.1}ms", n as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
