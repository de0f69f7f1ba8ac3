//! The views of each process: `processes` (one row a process) and
//! `vmas` (each VMA of the chosen processes, with its page map).

use super::{by_pss, class_cells, class_values, col, float, notes, opt, unread_notes, CLASSES};
use crate::report::{printable, Chart, Quantity, Report, Style, Table, Units, Value};
use pagescope_core::analysis::usage::{map_char, PageCounts, ProcessUsage, Usage};
use std::fmt::Write;

/// Which processes the `processes` view lists, and how it counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessesOptions {
    /// Count mapped (virtual) pages instead of resident ones.
    pub virtual_view: bool,
    /// List kernel threads too. They are told by PF_KTHREAD in
    /// `/proc/PID/stat`'s flags, which every snapshot records
    /// ([`Task::kernel_thread`](pagescope_core::model::Task)); they have
    /// no memory of their own, so the view leaves them out unless asked.
    pub kernel_threads: bool,
}

/// The `processes` view: per process RSS, PSS, USS and swap, then the
/// 2005 suite's basic information (rw and rx pages, pages by class,
/// single- and multi-use pages), resident pages or, with `virtual_view`,
/// mapped pages, then the kernel's own smaps sums read at the same moment
/// (`smaps_*`), to compare. Largest PSS first.
pub fn processes(u: &Usage, options: ProcessesOptions) -> Report {
    let virtual_view = options.virtual_view;
    let mut rows = by_pss(u);
    let kernel_threads = rows.iter().filter(|p| p.kernel_thread).count();
    if !options.kernel_threads {
        rows.retain(|p| !p.kernel_thread);
    }
    let kpp = (u.system.page_size / 1024).max(1);
    let mut columns = vec![
        col("pid", "PID"),
        col("comm", "COMM"),
        col("rss_pages", "RSS").with_bytes(),
        col("pss_pages", "PSS").with_bytes(),
        col("uss_pages", "USS").with_bytes(),
        opt("swap_pages", "SWAP", 60).with_bytes(),
        opt("hugetlb_pages", "HUGETLB", 25).with_bytes(),
        opt("rw_pages", "RW", 30),
        opt("rx_pages", "RX", 30),
        opt("total_pages", "TOTAL", 20),
    ];
    columns.extend(CLASSES.iter().map(|&(k, t)| opt(k, t, 50)));
    columns.extend([
        opt("single", "SINGLE", 40),
        opt("multi", "MULTI", 40),
        opt("anon_pages", "ANON", 10),
        opt("threads", "THREADS", 5),
        opt("kernel_thread", "KTHREAD", 5),
        opt("source", "COUNTED-BY", 8),
        opt("heuristic", "BY-PERMS", 6),
        opt("smaps_rss_pages", "SMAPS-RSS", 1),
        opt("smaps_pss_pages", "SMAPS-PSS", 1),
        opt("smaps_uss_pages", "SMAPS-USS", 1),
        opt("smaps_swap_pages", "SMAPS-SWAP", 1),
        col("cmdline", "COMMAND"),
    ]);
    let table_rows = rows
        .iter()
        .map(|p| {
            let counts = if virtual_view { p.virt } else { p.phys };
            let mut r = vec![
                Value::Int(p.pid as u64),
                Value::from(p.comm.as_str()),
                Value::pages(p.rss),
                float(p.pss),
                Value::pages(p.uss),
                Value::pages(p.swap),
                Value::pages(p.hugetlb),
                Value::pages(counts.map(|c| c.rw)),
                Value::pages(counts.map(|c| c.rx)),
                Value::pages(counts.as_ref().map(PageCounts::total)),
            ];
            r.extend(class_cells(counts.as_ref().map(|c| &c.classes)));
            let (single, multi) = if virtual_view {
                (None, None)
            } else {
                (p.single, p.multi)
            };
            let smaps = p.smaps.as_ref();
            r.extend([
                Value::pages(single),
                Value::pages(multi),
                Value::pages(p.anon),
                Value::Int(p.threads as u64),
                Value::Bool(p.kernel_thread),
                match (smaps, p.from_pages) {
                    (None, _) => Value::Missing,
                    (Some(_), true) => Value::from("pages"),
                    (Some(_), false) => Value::from("smaps"),
                },
                p.heuristic.map_or(Value::Missing, Value::Bool),
                Value::pages(smaps.map(|s| s.rss / kpp)),
                float(smaps.map(|s| s.pss as f64 / kpp as f64)),
                Value::pages(smaps.map(|s| (s.private_clean + s.private_dirty) / kpp)),
                Value::pages(smaps.map(|s| s.swap / kpp)),
                Value::from(p.cmdline.as_str()),
            ]);
            r
        })
        .collect();
    let which = if virtual_view { "virtual" } else { "physical" };
    let mut report_notes = notes(&u.system, &u.notes);
    report_notes.extend(unread_notes(u));
    let mut fields = vec![("pages", "pages counted", Value::from(which))];
    if !options.kernel_threads {
        fields.push((
            "kernel_threads_hidden",
            "kernel threads not listed (--all lists them)",
            Value::Int(kernel_threads as u64),
        ));
    }
    Report {
        view: "processes",
        page_size: u.system.page_size,
        notes: report_notes,
        fields,
        tables: vec![Table {
            key: "processes",
            columns,
            rows: table_rows,
        }],
        text: None,
        chart: Some(processes_chart(&rows, u.system.page_size.max(1))),
        units: Units::Pages,
    }
}

/// The paper's Figure 3: per process, stacked bars by class, the virtual
/// size beside the physical one.
fn processes_chart(rows: &[&ProcessUsage], page_size: u64) -> Chart {
    let mut bars = Vec::new();
    for p in rows.iter().filter(|p| !p.kernel_thread) {
        // Processes whose pages are unknown are left out.
        let (Some(phys), Some(virt)) = (&p.phys, &p.virt) else {
            continue;
        };
        let phys = class_values(&phys.classes)
            .iter()
            .map(|&v| v as f64)
            .collect();
        let virt = class_values(&virt.classes)
            .iter()
            .map(|&v| v as f64)
            .collect();
        bars.push((format!("{} {} res", p.pid, p.comm), phys));
        bars.push((format!("{} {} map", p.pid, p.comm), virt));
        if bars.len() >= 40 {
            break;
        }
    }
    Chart {
        title: "Memory per process by class: resident beside mapped".into(),
        y_label: "memory".into(),
        series: CLASSES.iter().map(|(k, _)| k.to_string()).collect(),
        bars,
        style: Style::Bars,
        y_unit: Quantity::Pages(page_size),
        x_label: "process: resident (res) beside mapped (map)".into(),
        ..Chart::default()
    }
}

fn map_string(map: &[u8]) -> String {
    map.iter().map(|&c| map_char(c as u32)).collect()
}

/// The `vmas` view: each VMA of the processes asked for, its size,
/// single and shared pages, flags and name, then its page map (64 pages a
/// line), then the process's summary lines (also a table of their own,
/// `processes`).
pub fn vmas(u: &Usage, pids: &[u32]) -> Report {
    let ps = u.system.page_size.max(1);
    let mut rows = Vec::new();
    let mut summaries = Vec::new();
    let mut text = String::new();
    for p in u
        .processes
        .iter()
        .filter(|p| pids.is_empty() || pids.contains(&p.pid))
    {
        let _ = writeln!(text, "{} (pid {}):", printable(&p.comm), p.pid);
        if p.smaps.is_none() {
            let _ = writeln!(
                text,
                "  its memory could not be read: its VMAs and pages are unknown"
            );
        } else if p.phys.is_none() && !p.kernel_thread {
            let _ = writeln!(
                text,
                "  its pages could not be read: which pages are resident is unknown"
            );
        }
        for v in &p.vmas {
            let pages = v.vma.pages(ps);
            let map = v.map.as_deref().map(map_string).unwrap_or_default();
            let name = if v.vma.path.is_empty() {
                "[anon]".to_string()
            } else {
                v.vma.path.clone()
            };
            let (single, shared) = (Value::pages(v.single), Value::pages(v.shared));
            rows.push(vec![
                Value::Int(p.pid as u64),
                Value::Int(v.vma.start),
                Value::Int(v.vma.end),
                Value::Pages(pages as f64, 0),
                Value::pages(v.resident),
                single.clone(),
                shared.clone(),
                Value::from(v.flags.as_str()),
                Value::from(v.vma.perms.as_str()),
                Value::from(name.as_str()),
                Value::Bool(v.heuristic),
                Value::from(map.as_str()),
            ]);
            let _ = writeln!(
                text,
                "  vsize: {pages:6}, single: {:>6}, shared: {:>6}, flags: {}, {:#014x}, {:#014x}, name: {}{}",
                single.display(),
                shared.display(),
                v.flags,
                v.vma.start,
                v.vma.end - 1,
                printable(&name),
                if v.heuristic { " (by permissions)" } else { "" }
            );
            if v.map.is_some() {
                let mut line = String::new();
                for (i, ch) in map.chars().enumerate() {
                    line.push(ch);
                    if i % 64 == 63 {
                        let _ = writeln!(text, "  [{line}]");
                        line.clear();
                    }
                }
                if !line.is_empty() {
                    let _ = writeln!(text, "  [{line:<64}]");
                }
            } else if v.resident.is_some_and(|n| n > 0) {
                let _ = writeln!(text, "  (map not kept: the VMA spans more than 2^20 pages)");
            }
        }
        let phys = p.phys.as_ref();
        let c = phys.map(|c| &c.classes);
        let show = |v: Option<u64>| Value::from(v).display();
        let _ = writeln!(
            text,
            "{} has {} rw and {} rx pages",
            printable(&p.comm),
            show(phys.map(|c| c.rw)),
            show(phys.map(|c| c.rx))
        );
        let _ = writeln!(
            text,
            "  stack: {}, data: {}, text: {}, heap: {}",
            show(c.map(|c| c.stack)),
            show(c.map(|c| c.data)),
            show(c.map(|c| c.text)),
            show(c.map(|c| c.heap))
        );
        let _ = writeln!(
            text,
            "  library bss: {}, data: {}, text: {}, other: {}",
            show(c.map(|c| c.lib_bss)),
            show(c.map(|c| c.lib_data)),
            show(c.map(|c| c.lib_text)),
            show(c.map(|c| c.other))
        );
        let _ = writeln!(
            text,
            "  {} pages used only here, {} shared",
            show(p.single),
            show(p.multi)
        );
        text.push('\n');
        let mut summary = vec![
            Value::Int(p.pid as u64),
            Value::from(p.comm.as_str()),
            Value::pages(phys.map(|c| c.rw)),
            Value::pages(phys.map(|c| c.rx)),
        ];
        summary.extend(class_cells(c));
        summary.extend([Value::pages(p.single), Value::pages(p.multi)]);
        summaries.push(summary);
    }
    let mut summary_columns = vec![
        col("pid", "PID"),
        col("comm", "COMM"),
        col("rw_pages", "RW"),
        col("rx_pages", "RX"),
    ];
    summary_columns.extend(CLASSES.iter().map(|&(k, t)| col(k, t)));
    summary_columns.extend([col("single", "SINGLE"), col("multi", "MULTI")]);
    // The picture: single and shared pages per VMA, or its resident pages
    // where share counts are unknown; VMAs whose pages are unknown are
    // left out.
    let bars = rows
        .iter()
        .filter_map(|r| {
            let n = |v: &Value| match v {
                Value::Pages(i, _) => Some(*i),
                _ => None,
            };
            let resident = n(&r[4]).filter(|&n| n > 0.0)?;
            let name = r[9].display();
            let label = format!(
                "{} {}",
                r[0].display(),
                name.rsplit('/').next().unwrap_or(&name)
            );
            Some(match (n(&r[5]), n(&r[6])) {
                (Some(single), Some(shared)) => (label, vec![single, shared, 0.0]),
                _ => (label, vec![0.0, 0.0, resident]),
            })
        })
        .collect();
    let mut report_notes = notes(&u.system, &u.notes);
    report_notes.extend(unread_notes(u));
    Report {
        view: "vmas",
        page_size: ps,
        notes: report_notes,
        fields: Vec::new(),
        tables: vec![
            Table {
                key: "vmas",
                columns: vec![
                    col("pid", "PID"),
                    col("start", "START"),
                    col("end", "END"),
                    col("pages", "PAGES"),
                    col("resident", "RES"),
                    col("single", "SINGLE"),
                    col("shared", "SHARED"),
                    col("flags", "FLAGS"),
                    col("perms", "PERMS"),
                    col("name", "NAME"),
                    col("heuristic", "BY-PERMS"),
                    col("map", "MAP"),
                ],
                rows,
            },
            Table {
                key: "processes",
                columns: summary_columns,
                rows: summaries,
            },
        ],
        text: Some(text),
        chart: Some(Chart {
            title: "Resident pages per VMA: used once or shared".into(),
            y_label: "resident memory".into(),
            series: vec!["single".into(), "shared".into(), "sharing unknown".into()],
            bars,
            style: Style::Bars,
            y_unit: Quantity::Pages(ps),
            x_label: "VMA (pid and mapping)".into(),
            ..Chart::default()
        }),
        units: Units::Pages,
    }
}
