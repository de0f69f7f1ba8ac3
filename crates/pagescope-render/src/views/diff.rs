//! The `diff` view: what grew and shrank between two snapshots.

use super::{class_values, col, float, notes, opt, CLASSES};
use crate::report::{Chart, Quantity, Report, Style, Table, Units, Value};
use pagescope_core::analysis::total::Total;
use pagescope_core::analysis::usage::{ProcessUsage, Usage};

/// Matches the processes of two snapshots: by pid and start time, then
/// (for the rest) by command line. Returns (old, new) index pairs, then
/// the unmatched old and new indexes.
type Matching = (Vec<(usize, usize)>, Vec<usize>, Vec<usize>);

fn match_processes(old: &Usage, new: &Usage) -> Matching {
    let mut pairs = Vec::new();
    let mut used_new = vec![false; new.processes.len()];
    let mut unmatched_old = Vec::new();
    for (i, o) in old.processes.iter().enumerate() {
        match new
            .processes
            .iter()
            .position(|n| n.pid == o.pid && n.start_time == o.start_time)
        {
            Some(j) => {
                used_new[j] = true;
                pairs.push((i, j));
            }
            None => unmatched_old.push(i),
        }
    }
    let mut still_old = Vec::new();
    for i in unmatched_old {
        let o = &old.processes[i];
        let found = new
            .processes
            .iter()
            .enumerate()
            .position(|(j, n)| !used_new[j] && !o.cmdline.is_empty() && n.cmdline == o.cmdline);
        match found {
            Some(j) => {
                used_new[j] = true;
                pairs.push((i, j));
            }
            None => still_old.push(i),
        }
    }
    let new_only = (0..new.processes.len()).filter(|&j| !used_new[j]).collect();
    (pairs, still_old, new_only)
}

/// The change in a count of pages.
fn delta(a: u64, b: u64) -> Value {
    Value::pages_delta(b as i64 - a as i64)
}

/// The change of a figure known on both sides, or missing.
fn opt_delta(a: Option<u64>, b: Option<u64>) -> Value {
    match (a, b) {
        (Some(a), Some(b)) => delta(a, b),
        _ => Value::Missing,
    }
}

/// The `diff` view: what grew and shrank between two snapshots, per
/// process (with its classes; unchanged processes left out), per unit and
/// in total; processes whose
/// anonymous memory grew are listed as suspected leaks with the growth in
/// bytes and per second. Kernel threads (which come and go, with no
/// memory) are left out unless `kernel_threads`.
pub fn diff(
    old: &Usage,
    new: &Usage,
    old_total: &Total,
    new_total: &Total,
    kernel_threads: bool,
) -> Report {
    let ps = new.system.page_size.max(1);
    // Negative when the second snapshot is the older one.
    let secs = (new.system.time_unix_ns as i128 - old.system.time_unix_ns as i128) as f64 / 1e9;
    let (pairs, mut gone, mut born) = match_processes(old, new);
    if !kernel_threads {
        gone.retain(|&i| !old.processes[i].kernel_thread);
        born.retain(|&j| !new.processes[j].kernel_thread);
    }
    let empty = ProcessUsage::absent();
    let mut rows = Vec::new();
    let mut leaks = Vec::new();
    let mut entries: Vec<(&ProcessUsage, &ProcessUsage, &str)> = pairs
        .iter()
        .map(|&(i, j)| (&old.processes[i], &new.processes[j], "both"))
        .collect();
    entries.extend(gone.iter().map(|&i| (&old.processes[i], &empty, "gone")));
    entries.extend(born.iter().map(|&j| (&empty, &new.processes[j], "new")));
    // Processes that did not change at all are left out; one whose
    // figures are unknown on either side is not known to be unchanged.
    entries.retain(|(o, n, status)| {
        (kernel_threads || !(o.kernel_thread || n.kernel_thread))
            && (*status != "both"
                || o.rss.is_none()
                || n.rss.is_none()
                || o.rss != n.rss
                || o.swap != n.swap
                || o.anon != n.anon
                || o.phys != n.phys)
    });
    // Largest change in RSS first, unknown changes last.
    let rss_change = |o: &ProcessUsage, n: &ProcessUsage| match (o.rss, n.rss) {
        (Some(a), Some(b)) => Some((b as i64 - a as i64).abs()),
        _ => None,
    };
    entries.sort_by_key(|(o, n, _)| std::cmp::Reverse(rss_change(o, n)));
    for (o, n, status) in &entries {
        let who = if *status == "gone" { o } else { n };
        let mut r = vec![
            Value::Int(who.pid as u64),
            Value::from(who.comm.as_str()),
            Value::from(*status),
            opt_delta(o.rss, n.rss),
            float(o.pss.zip(n.pss).map(|(a, b)| b - a)),
            opt_delta(o.uss, n.uss),
            opt_delta(o.swap, n.swap),
            opt_delta(o.anon, n.anon),
        ];
        match (&o.phys, &n.phys) {
            (Some(a), Some(b)) => r.extend(
                class_values(&a.classes)
                    .iter()
                    .zip(class_values(&b.classes))
                    .map(|(&a, b)| delta(a, b)),
            ),
            _ => r.extend([const { Value::Missing }; 8]),
        }
        rows.push(r);
        let (Some(o_anon), Some(n_anon)) = (o.anon, n.anon) else {
            continue;
        };
        if *status == "both" && n_anon > o_anon {
            let bytes = (n_anon - o_anon) * ps;
            leaks.push(vec![
                Value::Int(n.pid as u64),
                Value::from(n.comm.as_str()),
                Value::Pages((n_anon - o_anon) as f64, 0),
                Value::Int(bytes),
                // No rate over no time, or backwards in time.
                if secs > 0.0 {
                    Value::Float(bytes as f64 / secs, 0)
                } else {
                    Value::Missing
                },
                Value::from(n.cmdline.as_str()),
            ]);
        }
    }
    leaks.sort_by_key(|r| std::cmp::Reverse(if let Value::Int(b) = r[3] { b } else { 0 }));
    let mut units: Vec<(String, Value, Value)> = Vec::new();
    let res = |t: Option<&pagescope_core::analysis::usage::UnitTotals>| {
        t.map_or(0, |t| t.text.1 + t.rodata.1 + t.data.1 + t.bss.1)
    };
    let mut names: Vec<&String> = old
        .unit_totals
        .keys()
        .chain(new.unit_totals.keys())
        .collect();
    names.sort();
    names.dedup();
    for name in names {
        let (a, b) = (
            res(old.unit_totals.get(name)),
            res(new.unit_totals.get(name)),
        );
        if a != b {
            let procs = |u: &Usage| u.unit_totals.get(name).map_or(0, |t| t.processes as u64);
            units.push((
                name.clone(),
                delta(a, b),
                Value::Signed(procs(new) as i64 - procs(old) as i64),
            ));
        }
    }
    let (of, nf) = (&old_total.figures, &new_total.figures);
    let mut columns = vec![
        col("pid", "PID"),
        col("comm", "COMM"),
        col("status", "STATUS"),
        col("rss_pages_delta", "RSS").with_bytes(),
        col("pss_pages_delta", "PSS").with_bytes(),
        opt("uss_pages_delta", "USS", 40).with_bytes(),
        opt("swap_pages_delta", "SWAP", 30).with_bytes(),
        col("anon_pages_delta", "ANON"),
    ];
    const DELTA_KEYS: [&str; 8] = [
        "stack_delta",
        "data_delta",
        "text_delta",
        "heap_delta",
        "lib_bss_delta",
        "lib_data_delta",
        "lib_text_delta",
        "other_delta",
    ];
    columns.extend(
        CLASSES
            .iter()
            .zip(DELTA_KEYS)
            .map(|(&(_, t), k)| opt(k, t, 20)),
    );
    let mut notes_all = notes(&new.system, &new.notes);
    notes_all.extend(old.notes.iter().cloned());
    if of.processes_unread != nf.processes_unread {
        notes_all.push(format!(
            "the sums over processes (user pages, sum of process RSS) leave out {} unread \
             processes in the first snapshot and {} in the second, so their change is partly \
             which processes could be read",
            of.processes_unread, nf.processes_unread
        ));
    }
    Report {
        view: "diff",
        page_size: ps,
        notes: notes_all,
        fields: vec![
            ("interval_seconds", "interval (s)", Value::Float(secs, 1)),
            (
                "user_pages_delta",
                "user pages",
                opt_delta(of.user_pages, nf.user_pages),
            ),
            (
                "rss_sum_pages_delta",
                "sum of process RSS",
                delta(of.rss_sum_pages, nf.rss_sum_pages),
            ),
            (
                "page_cache_pages_delta",
                "page cache",
                delta(of.page_cache_pages, nf.page_cache_pages),
            ),
            (
                "kernel_slab_pages_delta",
                "kernel slab",
                delta(of.slab_pages, nf.slab_pages),
            ),
            (
                "free_pages_delta",
                "free",
                delta(of.free_pages, nf.free_pages),
            ),
            (
                "processes_new",
                "processes started",
                Value::Int(born.len() as u64),
            ),
            (
                "processes_gone",
                "processes ended",
                Value::Int(gone.len() as u64),
            ),
        ],
        tables: vec![
            Table {
                key: "processes",
                columns,
                rows: rows.clone(),
            },
            Table {
                key: "leaks",
                columns: vec![
                    col("pid", "PID"),
                    col("comm", "COMM"),
                    col("anon_pages_delta", "ANON+"),
                    col("bytes", "BYTES"),
                    col("bytes_per_second", "BYTES/S"),
                    col("cmdline", "COMMAND"),
                ],
                rows: leaks,
            },
            Table {
                key: "units",
                columns: vec![
                    col("unit", "UNIT"),
                    col("resident_pages_delta", "RESIDENT"),
                    col("processes_delta", "PROCS"),
                ],
                rows: units
                    .into_iter()
                    .map(|(n, r, p)| vec![Value::Text(n), r, p])
                    .collect(),
            },
        ],
        text: None,
        chart: Some(Chart {
            title: "Largest changes in resident pages per process".into(),
            y_label: "change in RSS".into(),
            series: vec!["rss delta".into()],
            bars: rows
                .iter()
                .filter_map(|r| match r[3] {
                    Value::Pages(d, _) => {
                        Some((format!("{} {}", r[0].display(), r[1].display()), vec![d]))
                    }
                    _ => None,
                })
                .take(30)
                .collect(),
            style: Style::Bars,
            y_unit: Quantity::Pages(ps),
            x_label: "process (pid and name)".into(),
            ..Chart::default()
        }),
        units: Units::Pages,
    }
}
