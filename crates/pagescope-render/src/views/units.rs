//! The views of executable units: `units` (each segment across the
//! processes that map it) and `unit_totals`.

use super::{col, notes};
use crate::report::{Chart, Quantity, Report, Style, Table, Units, Value};
use pagescope_core::analysis::usage::{map_char, Usage, MAX_MAP_PAGES};
use std::fmt::Write;

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
            Value::Pages(s.pages as f64, 0),
            Value::Pages(resident as f64, 0),
            Value::Pages(s.resident_by.values().map(|&n| n as f64).sum(), 0),
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
                col("heuristic", "BY-PERMS"),
                col("map", "MAP"),
            ],
            rows,
        }],
        text: Some(text),
        chart: Some(Chart {
            title: "Unit segments: resident pages".into(),
            y_label: "memory".into(),
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
            y_unit: Quantity::Pages(u.system.page_size.max(1)),
            x_label: "unit segment (file and permissions)".into(),
            ..Chart::default()
        }),
        units: Units::Pages,
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
                Value::Pages(t.text.0 as f64, 0),
                Value::Pages(t.text.1 as f64, 0),
                Value::Pages(t.rodata.0 as f64, 0),
                Value::Pages(t.rodata.1 as f64, 0),
                Value::Pages(t.data.0 as f64, 0),
                Value::Pages(t.data.1 as f64, 0),
                Value::Pages(t.bss.0 as f64, 0),
                Value::Pages(t.bss.1 as f64, 0),
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
            y_label: "resident memory".into(),
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
            y_unit: Quantity::Pages(u.system.page_size.max(1)),
            x_label: "unit".into(),
            ..Chart::default()
        }),
        units: Units::Pages,
    }
}
