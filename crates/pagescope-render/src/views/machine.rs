//! The views of the whole machine: `total` (by what holds the pages)
//! and `physmap` (by physical address).

use super::{col, notes, opt};
use crate::report::{Chart, Column, Quantity, Report, Style, Table, Units, Value};
use pagescope_core::analysis::total::Total;
use std::fmt::Write;

/// The `total` view.
pub fn total(t: &Total) -> Report {
    let f = &t.figures;
    // A snapshot without meminfo (read from a crash dump) knows none of
    // its figures: null, not 0.
    // A snapshot read from a crash dump has no meminfo: its figures are
    // not known.
    let mem = |v: u64| Value::pages((!t.system.meminfo.is_empty()).then_some(v));
    Report {
        view: "total",
        page_size: t.system.page_size,
        notes: notes(&t.system, &t.notes),
        fields: vec![
            (
                "user_pages",
                "user pages (distinct frames mapped by processes)",
                Value::pages(f.user_pages),
            ),
            (
                "user_anon_pages",
                "  anonymous",
                Value::pages(f.user_anon_pages),
            ),
            (
                "user_file_pages",
                "  file-backed or shared memory",
                Value::pages(f.user_file_pages),
            ),
            (
                "user_hugetlb_pages",
                "user hugetlb pages (distinct frames, not in the above)",
                Value::pages(f.user_hugetlb_pages),
            ),
            (
                "rss_sum_pages",
                "sum of process RSS",
                Value::pages(f.rss_sum_pages.into()),
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
                mem(f.page_cache_pages),
            ),
            (
                "shmem_pages",
                "  of which shmem/tmpfs (meminfo Shmem)",
                mem(f.shmem_pages),
            ),
            (
                "kernel_slab_pages",
                "kernel slab (meminfo SReclaimable + SUnreclaim)",
                mem(f.slab_pages),
            ),
            (
                "kernel_page_table_pages",
                "kernel page tables (meminfo PageTables)",
                mem(f.page_table_pages),
            ),
            (
                "kernel_stack_pages",
                "kernel stacks (meminfo KernelStack)",
                mem(f.kernel_stack_pages),
            ),
            (
                "hugetlb_pages",
                "hugetlb in use (meminfo HugePages_Total - HugePages_Free)",
                mem(f.hugetlb_pages),
            ),
            ("free_pages", "free (meminfo MemFree)", mem(f.free_pages)),
            (
                "mem_total_pages",
                "total RAM (meminfo MemTotal)",
                mem(f.mem_total_pages),
            ),
        ],
        tables: Vec::new(),
        text: None,
        chart: None,
        units: Units::Pages,
    }
}

/// The `physmap` view: every page frame of the machine by class, in
/// total, per block of physical memory (with a strip of each block's
/// dominant class) and per NUMA node.
pub fn physmap(p: &pagescope_core::analysis::physmap::Physmap) -> Report {
    use pagescope_core::analysis::physmap::{block_name, Physmap};
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
        fields.push((k, t, Value::Pages(p.totals[i] as f64, 0)));
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
            r.extend(counts.iter().map(|&n| Value::Pages(n as f64, 0)));
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
            r.extend(counts.iter().map(|&c| Value::Pages(c as f64, 0)));
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
        "\nblocks of {}, 64 a line ({}):",
        block_name(block_bytes),
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
                "Page frames by class, per {} block of physical memory",
                block_name(block_bytes)
            ),
            y_label: "memory".into(),
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
            y_unit: Quantity::Pages(ps),
            x_label: format!(
                "physical address of the block (hex; blocks of {})",
                block_name(block_bytes)
            ),
            ..Chart::default()
        }),
        units: Units::Pages,
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
