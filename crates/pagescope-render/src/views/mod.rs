//! Builds each view's [`Report`](crate::Report) from the analyses of `pagescope-core`:
//! one module per family of views, and here what they share (columns,
//! page classes, notes).

mod alerts;
mod diff;
mod machine;
mod mrc;
mod per_process;
mod trace;
mod units;

pub use alerts::alerts;
pub use diff::diff;
pub use machine::{physmap, total};
pub use mrc::{mrc, recorded_mrc};
pub use per_process::{processes, vmas, ProcessesOptions};
pub use trace::refs;
pub use units::{unit_totals, units};

use crate::report::{Column, Value};
use pagescope_core::analysis::usage::{ClassCounts, ProcessUsage, Usage};
use pagescope_core::model::SystemInfo;

/// The notes every report carries: what the snapshot could not see, then
/// the collector's own notes.
fn notes(system: &SystemInfo, trailer_notes: &[String]) -> Vec<String> {
    let mut n = system.missing.clone();
    n.extend(trailer_notes.iter().cloned());
    n
}

pub(crate) const fn col(key: &'static str, title: &'static str) -> Column {
    Column {
        key,
        title,
        keep: Column::ALWAYS,
        bytes_twin: false,
    }
}

/// A column a narrow terminal may drop, lower `keep` first.
pub(crate) const fn opt(key: &'static str, title: &'static str, keep: u8) -> Column {
    Column {
        key,
        title,
        keep,
        bytes_twin: false,
    }
}

/// The class columns, in the paper's order.
const CLASSES: [(&str, &str); 8] = [
    ("stack", "STACK"),
    ("data", "DATA"),
    ("text", "TEXT"),
    ("heap", "HEAP"),
    ("lib_bss", "LIBBSS"),
    ("lib_data", "LIBDATA"),
    ("lib_text", "LIBTEXT"),
    ("other", "OTHER"),
];

fn class_values(c: &ClassCounts) -> [u64; 8] {
    [
        c.stack, c.data, c.text, c.heap, c.lib_bss, c.lib_data, c.lib_text, c.other,
    ]
}

/// The class cells of a count that may be unknown.
fn class_cells(c: Option<&ClassCounts>) -> impl Iterator<Item = Value> {
    let values = c.map(class_values);
    (0..8).map(move |i| Value::pages(values.map(|v| v[i])))
}

/// A page count with a fraction (one decimal in tables), or missing.
fn float(v: Option<f64>) -> Value {
    Value::pages_f(v)
}

/// The notes on processes that could not be read.
fn unread_notes(u: &Usage) -> Vec<String> {
    let mut n = Vec::new();
    if u.processes.iter().any(|p| p.rollup_only) {
        n.push(
            "page classes need each process's VMAs and pages: they are missing for processes read from smaps_rollup only (take a snapshot, or run the live report with --classes)".into(),
        );
    }
    if let Some((pid, comm)) = &u.pages_cut {
        n.push(format!(
            "the file ends in the pages of pid {pid} ({comm}): its figures are the sums of its \
             smaps, and its page classes are missing"
        ));
    }
    n
}

/// Largest PSS first; processes whose PSS is unknown last.
fn by_pss(u: &Usage) -> Vec<&ProcessUsage> {
    let mut rows: Vec<_> = u.processes.iter().collect();
    rows.sort_by(|a, b| {
        let order = match (a.pss, b.pss) {
            (Some(x), Some(y)) => y.total_cmp(&x),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        };
        order.then(a.pid.cmp(&b.pid))
    });
    rows
}
