//! The `alerts` view: VMAs holding both single-use and shared pages.

use super::{col, notes};
use crate::report::{printable, Chart, Quantity, Report, Style, Table, Units, Value};
use pagescope_core::analysis::usage::Usage;
use std::fmt::Write;

/// Why a VMA holds both single-use and shared pages, usually.
fn alert_hint(v: &pagescope_core::analysis::usage::VmaUsage) -> &'static str {
    let file = v.vma.inode != 0;
    if !file {
        "copy-on-write after fork: this process wrote to part of memory it shares with its parent or children"
    } else if v.single_anon == 0 {
        "file pages only this process has touched so far: the others share the rest"
    } else if v.vma.is_exec() {
        "private copies of code: text relocations from non-PIC code, or breakpoints"
    } else {
        "copy-on-write: this process wrote to library or file data that others share clean"
    }
}

/// The `alerts` view: VMAs holding both single-use and shared pages,
/// worst (most single-use pages) first.
pub fn alerts(u: &Usage) -> Report {
    let mut found = Vec::new();
    let mut unknown = Vec::new();
    for p in u.processes.iter().filter(|p| !p.kernel_thread) {
        if p.single.is_none() {
            unknown.push(p.pid);
        }
        for v in &p.vmas {
            if let (Some(single), Some(shared)) = (v.single, v.shared) {
                if single > 0 && shared > 0 {
                    found.push((p, v, single, shared));
                }
            }
        }
    }
    found.sort_by(|a, b| b.2.cmp(&a.2).then(b.3.cmp(&a.3)));
    let mut text = String::new();
    let rows = found
        .iter()
        .map(|&(p, v, single, shared)| {
            let name = if v.vma.path.is_empty() { "[anon]" } else { v.vma.path.as_str() };
            let short = name.rsplit('/').next().unwrap_or(name);
            let hint = alert_hint(v);
            let _ = writeln!(
                text,
                "Alert! VMA [{}] in \"{}\" (pid {}) has {} single usage and {} shared usage, flags {}\n  hint: {hint}",
                printable(short),
                printable(&p.comm),
                p.pid,
                single,
                shared,
                v.vma.perms
            );
            vec![
                Value::Int(p.pid as u64),
                Value::from(p.comm.as_str()),
                Value::Int(v.vma.start),
                Value::Int(v.vma.end),
                Value::from(name),
                Value::from(v.vma.perms.as_str()),
                Value::Pages(single as f64, 0),
                Value::Pages(shared as f64, 0),
                Value::from(hint),
            ]
        })
        .collect();
    let mut report_notes = notes(&u.system, &u.notes);
    if !unknown.is_empty() {
        let shown: Vec<String> = unknown.iter().take(8).map(u32::to_string).collect();
        report_notes.push(format!(
            "the share counts of {} processes are unknown (they need page frame numbers, and the processes' pages): they were not checked (pids {}{})",
            unknown.len(),
            shown.join(" "),
            if unknown.len() > 8 { " ..." } else { "" }
        ));
    }
    if found.is_empty() {
        text.push_str(if unknown.is_empty() {
            "no VMA holds both single-use and shared pages\n"
        } else {
            "no VMA of the processes whose share counts are known holds both single-use and shared pages\n"
        });
    }
    Report {
        view: "alerts",
        page_size: u.system.page_size,
        notes: report_notes,
        fields: Vec::new(),
        tables: vec![Table {
            key: "alerts",
            columns: vec![
                col("pid", "PID"),
                col("comm", "COMM"),
                col("start", "START"),
                col("end", "END"),
                col("name", "NAME"),
                col("perms", "PERMS"),
                col("single", "SINGLE"),
                col("shared", "SHARED"),
                col("hint", "HINT"),
            ],
            rows,
        }],
        text: Some(text),
        chart: Some(Chart {
            title: "VMAs with both single-use and shared pages".into(),
            y_label: "resident memory".into(),
            series: vec!["single".into(), "shared".into()],
            bars: found
                .iter()
                .take(40)
                .map(|&(p, v, single, shared)| {
                    (
                        format!("{} {}", p.comm, v.vma.path.rsplit('/').next().unwrap_or("")),
                        vec![single as f64, shared as f64],
                    )
                })
                .collect(),
            style: Style::Bars,
            y_unit: Quantity::Pages(u.system.page_size.max(1)),
            x_label: "process and VMA".into(),
            ..Chart::default()
        }),
        units: Units::Pages,
    }
}
