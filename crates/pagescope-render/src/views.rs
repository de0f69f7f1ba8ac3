//! Builds each view's [`Report`] from the analyses of `pagescope-core`.

use crate::report::{Chart, Column, Report, Style, Table, Value};
use pagescope_core::analysis::mrc::Mrc;
use pagescope_core::analysis::refs::{RefCounts, RefStats, TraceMaps};
use pagescope_core::analysis::total::Total;
use pagescope_core::analysis::usage::{
    map_char, ClassCounts, PageCounts, ProcessUsage, Usage, MAX_MAP_PAGES,
};
use pagescope_core::model::SystemInfo;
use std::fmt::Write;

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
    }
}

/// A column a narrow terminal may drop, lower `keep` first.
pub(crate) const fn opt(key: &'static str, title: &'static str, keep: u8) -> Column {
    Column { key, title, keep }
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
    (0..8).map(move |i| values.map_or(Value::Missing, |v| Value::Int(v[i])))
}

/// A page count (with one decimal in tables), or missing.
fn float(v: Option<f64>) -> Value {
    v.map_or(Value::Missing, |f| Value::Float(f, 1))
}

/// The notes on processes that could not be read.
fn unread_notes(u: &Usage) -> Vec<String> {
    let mut n = Vec::new();
    if u.processes.iter().any(|p| p.rollup_only) {
        n.push(
            "page classes need each process's VMAs and pages: they are missing for processes read from smaps_rollup only (take a snapshot, or run the live report with --classes)".into(),
        );
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

/// The `processes` view: per process RSS, PSS, USS and swap, then the
/// 2005 suite's basic information (rw and rx pages, pages by class,
/// single- and multi-use pages), resident pages or, with `virtual_view`,
/// mapped pages, then the kernel's own smaps sums read at the same moment
/// (`smaps_*`), to compare. Largest PSS first.
pub fn processes(u: &Usage, virtual_view: bool) -> Report {
    let rows = by_pss(u);
    let kpp = (u.system.page_size / 1024).max(1);
    let mut columns = vec![
        col("pid", "PID"),
        col("comm", "COMM"),
        col("rss_pages", "RSS"),
        col("pss_pages", "PSS"),
        col("uss_pages", "USS"),
        opt("swap_pages", "SWAP", 60),
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
        opt("source", "FROM", 8),
        opt("heuristic", "HEUR", 6),
        opt("smaps_rss_pages", "K-RSS", 1),
        opt("smaps_pss_pages", "K-PSS", 1),
        opt("smaps_uss_pages", "K-USS", 1),
        opt("smaps_swap_pages", "K-SWAP", 1),
        col("cmdline", "COMMAND"),
    ]);
    let table_rows = rows
        .iter()
        .map(|p| {
            let counts = if virtual_view { p.virt } else { p.phys };
            let mut r = vec![
                Value::Int(p.pid as u64),
                Value::from(p.comm.as_str()),
                p.rss.into(),
                float(p.pss),
                p.uss.into(),
                p.swap.into(),
                counts.map(|c| c.rw).into(),
                counts.map(|c| c.rx).into(),
                counts.as_ref().map(PageCounts::total).into(),
            ];
            r.extend(class_cells(counts.as_ref().map(|c| &c.classes)));
            let (single, multi) = if virtual_view {
                (None, None)
            } else {
                (p.single, p.multi)
            };
            let smaps = p.smaps.as_ref();
            r.extend([
                single.into(),
                multi.into(),
                p.anon.into(),
                Value::Int(p.threads as u64),
                Value::Bool(p.kernel_thread),
                match (smaps, p.from_pages) {
                    (None, _) => Value::Missing,
                    (Some(_), true) => Value::from("pages"),
                    (Some(_), false) => Value::from("smaps"),
                },
                p.heuristic.map_or(Value::Missing, Value::Bool),
                smaps.map(|s| s.rss / kpp).into(),
                float(smaps.map(|s| s.pss as f64 / kpp as f64)),
                smaps
                    .map(|s| (s.private_clean + s.private_dirty) / kpp)
                    .into(),
                smaps.map(|s| s.swap / kpp).into(),
                Value::from(p.cmdline.as_str()),
            ]);
            r
        })
        .collect();
    let which = if virtual_view { "virtual" } else { "physical" };
    let mut report_notes = notes(&u.system, &u.notes);
    report_notes.extend(unread_notes(u));
    Report {
        view: "processes",
        page_size: u.system.page_size,
        notes: report_notes,
        fields: vec![("pages", "pages counted", Value::from(which))],
        tables: vec![Table {
            key: "processes",
            columns,
            rows: table_rows,
        }],
        text: None,
        chart: Some(processes_chart(&rows)),
    }
}

/// The paper's Figure 3: per process, stacked bars by class, the virtual
/// size beside the physical one.
fn processes_chart(rows: &[&ProcessUsage]) -> Chart {
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
        bars.push((format!("{} {} physical", p.pid, p.comm), phys));
        bars.push((format!("{} {} virtual", p.pid, p.comm), virt));
        if bars.len() >= 40 {
            break;
        }
    }
    Chart {
        title: "Pages per process by class (physical beside virtual)".into(),
        y_label: "pages".into(),
        series: CLASSES.iter().map(|(k, _)| k.to_string()).collect(),
        bars,
        style: Style::Bars,
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
        let _ = writeln!(text, "{} (pid {}):", p.comm, p.pid);
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
            let (single, shared) = (Value::from(v.single), Value::from(v.shared));
            rows.push(vec![
                Value::Int(p.pid as u64),
                Value::Int(v.vma.start),
                Value::Int(v.vma.end),
                Value::Int(pages),
                v.resident.into(),
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
                name,
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
            p.comm,
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
            phys.map(|c| c.rw).into(),
            phys.map(|c| c.rx).into(),
        ];
        summary.extend(class_cells(c));
        summary.extend([p.single.into(), p.multi.into()]);
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
                Value::Int(i) => Some(*i as f64),
                _ => None,
            };
            let resident = n(&r[4]).filter(|&n| n > 0.0)?;
            let label = format!("{} {}", r[0].display(), r[9].display());
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
                    col("heuristic", "HEUR"),
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
            y_label: "pages".into(),
            series: vec!["single".into(), "shared".into(), "sharing unknown".into()],
            bars,
            style: Style::Bars,
        }),
    }
}

/// The `units` view: per segment of each executable unit, across all
/// processes: how many map it, its pages, how many are resident anywhere,
/// and a map where each digit is the number of processes with that page
/// resident.
pub fn units(u: &Usage) -> Report {
    let mut rows = Vec::new();
    let mut text = String::new();
    let mut segs: Vec<_> = u.segments.values().collect();
    segs.sort_by(|a, b| a.path.cmp(&b.path).then(a.start.cmp(&b.start)));
    for s in &segs {
        let resident = s.resident_by.len() as u64;
        // One character a page, for segments small enough to draw.
        let map: String = if s.pages <= MAX_MAP_PAGES {
            (0..s.pages)
                .map(|k| map_char(s.resident_by.get(&k).copied().unwrap_or(0)))
                .collect()
        } else {
            String::new()
        };
        rows.push(vec![
            Value::from(s.path.as_str()),
            Value::Int(s.start),
            Value::from(s.perms.as_str()),
            Value::Int(s.processes as u64),
            Value::Int(s.pages),
            Value::Int(resident),
            Value::Int(s.resident_by.values().map(|&n| n as u64).sum()),
            Value::Bool(s.heuristic),
            Value::from(map.as_str()),
        ]);
        let _ = writeln!(
            text,
            "{} [{:#x} {}]: {} processes, vsize {}, resident {}{}",
            s.path,
            s.start,
            s.perms,
            s.processes,
            s.pages,
            resident,
            if s.heuristic { " (by permissions)" } else { "" }
        );
        for chunk in map.as_bytes().chunks(64) {
            let _ = writeln!(text, "  [{:<64}]", String::from_utf8_lossy(chunk));
        }
    }
    Report {
        view: "units",
        page_size: u.system.page_size,
        notes: notes(&u.system, &u.notes),
        fields: Vec::new(),
        tables: vec![Table {
            key: "units",
            columns: vec![
                col("unit", "UNIT"),
                col("segment", "SEGMENT"),
                col("perms", "PERMS"),
                col("processes", "PROCS"),
                col("virtual_pages", "VIRT"),
                col("resident_pages", "RES"),
                col("resident_sum", "RESSUM"),
                col("heuristic", "HEUR"),
                col("map", "MAP"),
            ],
            rows,
        }],
        text: Some(text),
        chart: Some(Chart {
            title: "Unit segments: resident pages".into(),
            y_label: "pages".into(),
            series: vec!["resident".into(), "not resident".into()],
            bars: segs
                .iter()
                .map(|s| {
                    let res = s.resident_by.len() as f64;
                    (
                        format!("{} {}", s.path.rsplit('/').next().unwrap_or(""), s.perms),
                        vec![res, s.pages as f64 - res],
                    )
                })
                .collect(),
            style: Style::Bars,
        }),
    }
}

/// The `unit-totals` view: per unit, .text, read-only data, .data and
/// .bss pages, mapped and resident, summed over all processes. Largest
/// resident first.
pub fn unit_totals(u: &Usage) -> Report {
    let mut units: Vec<_> = u.unit_totals.iter().collect();
    let res = |t: &pagescope_core::analysis::usage::UnitTotals| {
        t.text.1 + t.rodata.1 + t.data.1 + t.bss.1
    };
    units.sort_by(|a, b| res(b.1).cmp(&res(a.1)).then(a.0.cmp(b.0)));
    let rows = units
        .iter()
        .map(|(path, t)| {
            vec![
                Value::from(path.as_str()),
                Value::Int(t.processes as u64),
                Value::Int(t.text.0),
                Value::Int(t.text.1),
                Value::Int(t.rodata.0),
                Value::Int(t.rodata.1),
                Value::Int(t.data.0),
                Value::Int(t.data.1),
                Value::Int(t.bss.0),
                Value::Int(t.bss.1),
            ]
        })
        .collect();
    Report {
        view: "unit-totals",
        page_size: u.system.page_size,
        notes: notes(&u.system, &u.notes),
        fields: Vec::new(),
        tables: vec![Table {
            key: "units",
            columns: vec![
                col("unit", "UNIT"),
                col("processes", "PROCS"),
                col("text_virtual", "TEXT-V"),
                col("text_physical", "TEXT-P"),
                col("rodata_virtual", "RODATA-V"),
                col("rodata_physical", "RODATA-P"),
                col("data_virtual", "DATA-V"),
                col("data_physical", "DATA-P"),
                col("bss_virtual", "BSS-V"),
                col("bss_physical", "BSS-P"),
            ],
            rows,
        }],
        text: None,
        chart: Some(Chart {
            title: "Resident pages per unit, summed over processes".into(),
            y_label: "pages".into(),
            series: vec!["text".into(), "rodata".into(), "data".into(), "bss".into()],
            bars: units
                .iter()
                .take(40)
                .map(|(p, t)| {
                    (
                        p.rsplit('/').next().unwrap_or(p).to_string(),
                        vec![
                            t.text.1 as f64,
                            t.rodata.1 as f64,
                            t.data.1 as f64,
                            t.bss.1 as f64,
                        ],
                    )
                })
                .collect(),
            style: Style::Bars,
        }),
    }
}

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
                "Alert! VMA [{short}] in \"{}\" (pid {}) has {} single usage and {} shared usage, flags {}\n  hint: {hint}",
                p.comm, p.pid, single, shared, v.vma.perms
            );
            vec![
                Value::Int(p.pid as u64),
                Value::from(p.comm.as_str()),
                Value::Int(v.vma.start),
                Value::Int(v.vma.end),
                Value::from(name),
                Value::from(v.vma.perms.as_str()),
                Value::Int(single),
                Value::Int(shared),
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
            y_label: "pages".into(),
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
        }),
    }
}

/// The `total` view.
pub fn total(t: &Total) -> Report {
    let f = &t.figures;
    Report {
        view: "total",
        page_size: t.system.page_size,
        notes: notes(&t.system, &t.notes),
        fields: vec![
            (
                "user_pages",
                "user pages (distinct frames mapped by processes)",
                f.user_pages.into(),
            ),
            ("user_anon_pages", "  anonymous", f.user_anon_pages.into()),
            (
                "user_file_pages",
                "  file-backed or shared memory",
                f.user_file_pages.into(),
            ),
            (
                "rss_sum_pages",
                "sum of process RSS",
                f.rss_sum_pages.into(),
            ),
            ("processes", "processes", f.processes.into()),
            (
                "processes_unread",
                "  of which could not be read (not in the sums)",
                f.processes_unread.into(),
            ),
            (
                "page_cache_pages",
                "page cache (meminfo Cached + Buffers)",
                f.page_cache_pages.into(),
            ),
            (
                "shmem_pages",
                "  of which shmem/tmpfs (meminfo Shmem)",
                f.shmem_pages.into(),
            ),
            (
                "kernel_slab_pages",
                "kernel slab (meminfo SReclaimable + SUnreclaim)",
                f.slab_pages.into(),
            ),
            (
                "kernel_page_table_pages",
                "kernel page tables (meminfo PageTables)",
                f.page_table_pages.into(),
            ),
            (
                "kernel_stack_pages",
                "kernel stacks (meminfo KernelStack)",
                f.kernel_stack_pages.into(),
            ),
            ("free_pages", "free (meminfo MemFree)", f.free_pages.into()),
            (
                "mem_total_pages",
                "total RAM (meminfo MemTotal)",
                f.mem_total_pages.into(),
            ),
        ],
        tables: Vec::new(),
        text: None,
        chart: None,
    }
}

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

fn delta(a: u64, b: u64) -> Value {
    Value::Signed(b as i64 - a as i64)
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
/// bytes and per second.
pub fn diff(old: &Usage, new: &Usage, old_total: &Total, new_total: &Total) -> Report {
    let ps = new.system.page_size.max(1);
    let secs = (new
        .system
        .time_unix_ns
        .saturating_sub(old.system.time_unix_ns)) as f64
        / 1e9;
    let (pairs, gone, born) = match_processes(old, new);
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
        *status != "both"
            || o.rss.is_none()
            || n.rss.is_none()
            || o.rss != n.rss
            || o.swap != n.swap
            || o.anon != n.anon
            || o.phys != n.phys
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
                Value::Int(n_anon - o_anon),
                Value::Int(bytes),
                Value::Float(if secs > 0.0 { bytes as f64 / secs } else { 0.0 }, 0),
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
            units.push((name.clone(), delta(a, b), delta(procs(old), procs(new))));
        }
    }
    let (of, nf) = (&old_total.figures, &new_total.figures);
    let mut columns = vec![
        col("pid", "PID"),
        col("comm", "COMM"),
        col("status", "STATUS"),
        col("rss_pages_delta", "RSS"),
        col("pss_pages_delta", "PSS"),
        opt("uss_pages_delta", "USS", 40),
        opt("swap_pages_delta", "SWAP", 30),
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
            y_label: "pages".into(),
            series: vec!["rss delta".into()],
            bars: rows
                .iter()
                .filter_map(|r| match r[3] {
                    Value::Signed(d) => Some((
                        format!("{} {}", r[0].display(), r[1].display()),
                        vec![d as f64],
                    )),
                    _ => None,
                })
                .take(30)
                .collect(),
            style: Style::Bars,
        }),
    }
}

/// The `physmap` view: every page frame of the machine by class, in
/// total, per block of physical memory (with a strip of each block's
/// dominant class) and per NUMA node.
pub fn physmap(p: &pagescope_core::analysis::physmap::Physmap) -> Report {
    use pagescope_core::analysis::physmap::Physmap;
    use pagescope_core::physclass::ALL;
    let ps = p.system.page_size.max(1);
    let block_bytes = p.block_frames * ps;
    let mut fields: Vec<(&'static str, &'static str, Value)> = vec![
        ("frames", "page frames", Value::Int(p.frames)),
        ("block_bytes", "block size (bytes)", Value::Int(block_bytes)),
    ];
    const KEYS: [(&str, &str); 12] = [
        ("free_pages", "free"),
        ("anon_pages", "user anonymous"),
        ("cache_mapped_pages", "page cache, mapped"),
        ("cache_unmapped_pages", "page cache, unmapped"),
        ("slab_pages", "slab"),
        ("page_table_pages", "page tables"),
        ("kernel_other_pages", "kernel, other"),
        ("reserved_pages", "reserved or offline"),
        ("huge_pages", "hugetlb"),
        ("thp_pages", "transparent huge pages"),
        ("ksm_pages", "KSM"),
        ("zero_pages", "zero page"),
    ];
    for (i, &(k, t)) in KEYS.iter().enumerate() {
        fields.push((k, t, Value::Int(p.totals[i])));
    }
    let class_cols: Vec<Column> = ALL
        .iter()
        .zip(KEYS)
        .map(|(c, (k, _))| opt(k, leak_title(c.name()), 50))
        .collect();
    let mut block_cols = vec![col("start", "START"), opt("node", "NODE", 60)];
    block_cols.extend(class_cols.iter().cloned());
    block_cols.push(col("dominant", "MOST"));
    let blocks: Vec<Vec<Value>> = p
        .blocks
        .iter()
        .map(|(&b, counts)| {
            let start = b * p.block_frames;
            let mut r = vec![
                Value::Hex(start * ps),
                p.system
                    .node_of(start)
                    .map_or(Value::Missing, |n| Value::Int(n as u64)),
            ];
            r.extend(counts.iter().map(|&n| Value::Int(n)));
            r.push(Value::from(
                Physmap::dominant(counts).map_or("none", |c| c.name()),
            ));
            r
        })
        .collect();
    let mut node_cols = vec![col("node", "NODE")];
    node_cols.extend(class_cols.iter().cloned());
    let nodes = p
        .nodes
        .iter()
        .map(|(&n, counts)| {
            let mut r = vec![if n == u16::MAX {
                Value::Missing
            } else {
                Value::Int(n as u64)
            }];
            r.extend(counts.iter().map(|&c| Value::Int(c)));
            r
        })
        .collect();
    // The strip: one letter per block, the block's dominant class; a
    // space for a block with no RAM.
    let mut text = String::new();
    for (_, t, v) in &fields {
        let _ = writeln!(text, "{t:<24} {}", v.display());
    }
    let legend: Vec<String> = ALL
        .iter()
        .map(|c| format!("{} {}", c.letter(), c.name()))
        .collect();
    let _ = writeln!(
        text,
        "\nblocks of {} MiB, 64 a line ({}):",
        block_bytes >> 20,
        legend.join(", ")
    );
    let last = p.blocks.keys().next_back().copied().unwrap_or(0);
    let mut line = String::new();
    for b in 0..=last {
        if b % 64 == 0 {
            line = format!("{:#014x} ", b * p.block_frames * ps);
        }
        line.push(
            p.blocks
                .get(&b)
                .and_then(Physmap::dominant)
                .map_or(' ', |c| c.letter()),
        );
        if b % 64 == 63 || b == last {
            let _ = writeln!(text, "{}", line.trim_end());
        }
    }
    let _ = writeln!(text);
    for (&n, counts) in &p.nodes {
        let node = if n == u16::MAX {
            "?".to_string()
        } else {
            n.to_string()
        };
        let parts: Vec<String> = ALL
            .iter()
            .zip(counts)
            .filter(|(_, &c)| c > 0)
            .map(|(cl, c)| format!("{} {c}", cl.name()))
            .collect();
        let _ = writeln!(text, "node {node}: {}", parts.join(", "));
    }
    Report {
        view: "physmap",
        page_size: ps,
        notes: notes(&p.system, &p.notes),
        fields,
        tables: vec![
            Table {
                key: "blocks",
                columns: block_cols,
                rows: blocks,
            },
            Table {
                key: "nodes",
                columns: node_cols,
                rows: nodes,
            },
        ],
        text: Some(text),
        chart: Some(Chart {
            title: format!(
                "Page frames by class, per {} MiB block of physical memory",
                block_bytes >> 20
            ),
            y_label: "frames".into(),
            series: ALL.iter().map(|c| c.name().to_string()).collect(),
            bars: p
                .blocks
                .iter()
                .map(|(&b, counts)| {
                    (
                        format!("{:#x}", b * p.block_frames * ps),
                        counts.iter().map(|&n| n as f64).collect(),
                    )
                })
                .collect(),
            style: Style::Bars,
        }),
    }
}

/// Column titles for the physmap classes (upper-case names).
fn leak_title(name: &str) -> &'static str {
    match name {
        "free" => "FREE",
        "anon" => "ANON",
        "cache_mapped" => "CACHE",
        "cache_unmapped" => "UNMAPPED",
        "slab" => "SLAB",
        "page_table" => "PGTBL",
        "kernel_other" => "KERNEL",
        "reserved" => "RSVD",
        "huge" => "HUGE",
        "thp" => "THP",
        "ksm" => "KSM",
        _ => "ZERO",
    }
}

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
            if !e.reason.starts_with("exited") {
                n.push(format!("the trace ended: {}", e.reason));
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
    }
}

/// The `mrc` view: miss ratio by memory size under LRU (exact), FIFO and
/// CLOCK.
pub fn mrc(m: &Mrc) -> Report {
    let ps = m.maps.header.as_ref().map_or(4096, |h| h.page_size);
    let curve = m.curve();
    let rows = curve
        .iter()
        .map(|p| {
            vec![
                Value::Int(p.pages),
                Value::Int(p.pages * ps),
                Value::Float(p.lru, 4),
                Value::Float(p.fifo, 4),
                Value::Float(p.clock, 4),
            ]
        })
        .collect();
    let chart = Chart {
        title: "Miss ratio by memory size".into(),
        y_label: "miss ratio".into(),
        series: vec!["LRU".into(), "FIFO".into(), "CLOCK".into()],
        bars: curve
            .iter()
            .map(|p| (p.pages.to_string(), vec![p.lru, p.fifo, p.clock]))
            .collect(),
        style: Style::Lines,
    };
    let mut notes = trace_notes(&m.maps);
    notes.push(
        "the trace holds the references that missed the tracer's pool, so sizes below the pool \
         see only those"
            .into(),
    );
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
    }
}
