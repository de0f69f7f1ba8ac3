//! Builds each view's [`Report`] from the analyses of `pagescope-core`.

use crate::report::{Column, Report, Table, Value};
use pagescope_core::analysis::processes::{Processes, Source};
use pagescope_core::analysis::total::Total;
use pagescope_core::model::SystemInfo;

/// The notes every report carries: what the snapshot could not see, then
/// the collector's own notes.
fn notes(system: &SystemInfo, trailer_notes: &[String]) -> Vec<String> {
    let mut n = system.missing.clone();
    n.extend(trailer_notes.iter().cloned());
    n
}

const fn col(key: &'static str, title: &'static str) -> Column {
    Column { key, title }
}

/// The `processes` view: per process RSS, PSS, USS and swap, in pages,
/// largest PSS first.
pub fn processes(p: &Processes) -> Report {
    let mut rows: Vec<_> = p.rows.iter().collect();
    rows.sort_by(|a, b| b.pss_pages.total_cmp(&a.pss_pages).then(a.pid.cmp(&b.pid)));
    let table = Table {
        key: "processes",
        columns: vec![
            col("pid", "PID"),
            col("comm", "COMM"),
            col("threads", "THREADS"),
            col("rss_pages", "RSS"),
            col("pss_pages", "PSS"),
            col("uss_pages", "USS"),
            col("swap_pages", "SWAP"),
            col("anon_pages", "ANON"),
            col("kernel_thread", "KTHREAD"),
            col("source", "FROM"),
            col("cmdline", "COMMAND"),
        ],
        rows: rows
            .iter()
            .map(|r| {
                vec![
                    Value::Int(r.pid as u64),
                    Value::from(r.comm.as_str()),
                    Value::Int(r.threads as u64),
                    Value::Int(r.rss_pages),
                    Value::Float(r.pss_pages, 1),
                    Value::Int(r.uss_pages),
                    Value::Int(r.swap_pages),
                    Value::Int(r.anon_pages),
                    Value::Bool(r.kernel_thread),
                    Value::from(match r.source {
                        Source::Pages => "pages",
                        Source::Smaps => "smaps",
                    }),
                    Value::from(r.cmdline.as_str()),
                ]
            })
            .collect(),
    };
    Report {
        view: "processes",
        page_size: p.system.page_size,
        notes: notes(&p.system, &p.notes),
        fields: Vec::new(),
        tables: vec![table],
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
    }
}
