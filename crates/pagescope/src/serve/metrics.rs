//! A collection as OpenMetrics text, through `prometheus-client`'s
//! registry and encoder. Each collection gets a registry of its own, so
//! that a process that exited is gone from the next scrape.

use super::collect::Collection;
use super::figures::Figures;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::fmt::Write;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

type Labels = Vec<(&'static str, LabelValue)>;

/// A label value, written escaped as the text exposition format asks:
/// backslash as `\\`, double quote as `\"`, newline as `\n`.
/// `prometheus-client` writes a `String` label value as it is, and a
/// process's name, command line or cgroup path may hold any of the three;
/// every label value goes through this type.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct LabelValue(String);

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// One label.
fn label(name: &'static str, value: impl Into<String>) -> (&'static str, LabelValue) {
    (name, LabelValue(value.into()))
}

/// The five per-process (or per-cgroup) figures.
const FIGURES: [(&str, &str); 5] = [
    (
        "rss",
        "resident memory (smaps_rollup Rss; status VmRSS if skipped)",
    ),
    (
        "pss",
        "proportional set size (smaps_rollup Pss, or its sum from pagemap)",
    ),
    (
        "uss",
        "unique set size (smaps_rollup Private_Clean + Private_Dirty, or their sum from pagemap)",
    ),
    (
        "swap",
        "memory in swap (smaps_rollup Swap, or from pagemap and, for shared memory, \
         cachestat(2); status VmSwap if skipped; absent where shared memory's could not \
         be read: a kernel without cachestat(2), before Linux 6.5)",
    ),
    (
        "working_set",
        "pages referenced since the previous collection, by the chosen backend",
    ),
];

fn pick(f: &Figures, i: usize) -> Option<u64> {
    [f.rss, f.pss, f.uss, f.swap, f.working_set][i]
}

fn gauge_family(
    registry: &mut Registry,
    name: &str,
    help: &str,
    rows: impl Iterator<Item = (Labels, Option<u64>)>,
) {
    let family = Family::<Labels, Gauge>::default();
    let mut any = false;
    for (labels, value) in rows {
        if let Some(v) = value {
            family.get_or_create(&labels).set(v as i64);
            any = true;
        }
    }
    // A figure no row has (the working set with `--backend none`) is
    // absent, not 0.
    if any {
        registry.register_with_unit(name, help, Unit::Bytes, family);
    }
}

/// Renders `c`; `cpu_total` is the CPU time of every collection so far.
pub fn render(c: &Collection, cpu_total: Duration) -> String {
    let mut r = Registry::default();
    for (i, (what, help)) in FIGURES.iter().enumerate() {
        gauge_family(
            &mut r,
            &format!("pagescope_process_{what}"),
            &format!("Per process: {help}"),
            c.processes.iter().map(|p| {
                let mut labels = vec![label("pid", p.pid.to_string()), label("comm", &p.comm)];
                if let Some(cmd) = &p.cmdline {
                    labels.push(label("cmdline", cmd));
                }
                (labels, pick(&p.figures, i))
            }),
        );
    }
    for (i, (what, help)) in FIGURES.iter().enumerate() {
        gauge_family(
            &mut r,
            &format!("pagescope_cgroup_{what}"),
            &format!("Per cgroup, summed over its processes: {help}"),
            c.cgroups
                .iter()
                .map(|(name, f)| (vec![label("cgroup", name)], pick(f, i))),
        );
    }
    let m = &c.machine;
    let ps = c.page_size;
    for (what, help, pages) in [
        (
            "user",
            "user processes' anonymous memory (meminfo AnonPages; their file pages are page cache)",
            m.anon_pages_meminfo,
        ),
        (
            "page_cache",
            "page cache (meminfo Cached + Buffers)",
            m.page_cache_pages,
        ),
        (
            "kernel",
            "kernel memory resident (meminfo SReclaimable + SUnreclaim + PageTables + KernelStack)",
            m.slab_pages + m.page_table_pages + m.kernel_stack_pages,
        ),
        ("free", "free memory (meminfo MemFree)", m.free_pages),
    ] {
        let g = Gauge::<i64>::default();
        g.set((pages * ps) as i64);
        r.register_with_unit(
            format!("pagescope_machine_{what}"),
            format!("The machine: {help}"),
            Unit::Bytes,
            g,
        );
    }
    let secs = Gauge::<f64, AtomicU64>::default();
    secs.set(c.elapsed.as_secs_f64());
    r.register(
        "pagescope_collection_seconds",
        "Wall time the last collection took",
        secs,
    );
    let cpu = Counter::<f64, AtomicU64>::default();
    cpu.inc_by(cpu_total.as_secs_f64());
    r.register(
        "pagescope_collection_cpu_seconds",
        "CPU time of every collection so far",
        cpu,
    );
    let skipped = Gauge::<i64>::default();
    skipped.set(c.skipped as i64);
    r.register(
        "pagescope_skipped_processes",
        "Processes whose smaps_rollup was not read in the last collection (above \
         --max-process-size, or refused): no PSS, USS or working set",
        skipped,
    );
    let paced = Gauge::<i64>::default();
    paced.set(c.paced as i64);
    r.register(
        "pagescope_pagemap_processes",
        "Processes the last collection read from their pagemap, paced, instead of \
         their smaps_rollup (above --pagemap-above): the same figures, no refs working set",
        paced,
    );
    if let Some(n) = c.working_set_skipped {
        let ws_skipped = Gauge::<i64>::default();
        ws_skipped.set(n as i64);
        r.register(
            "pagescope_working_set_skipped_processes",
            "Processes the refs working set left out in the last collection (resident \
             above --max-working-set-size: clearing their referenced bits would stall \
             them while their TLB refills; or observed by another pagescope, record \
             --pid or trace --pid, whose figures clearing them would corrupt): no \
             working set",
            ws_skipped,
        );
    }
    let age = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for p in &c.processes {
        if let Some(a) = p.age {
            let labels = vec![label("pid", p.pid.to_string()), label("comm", &p.comm)];
            age.get_or_create(&labels).set(a.as_secs_f64());
        }
    }
    r.register_with_unit(
        "pagescope_process_figures_age",
        "Per process: how long ago the figures of its smaps_rollup (rss, pss, uss, swap) \
         were read; a process is read again when a kernel signal says they may have \
         changed, and at --max-age at the latest",
        Unit::Seconds,
        age,
    );
    let walked = Family::<Labels, Gauge>::default();
    for (reason, n) in &c.walked {
        walked
            .get_or_create(&vec![label("reason", reason.to_string())])
            .set(*n as i64);
    }
    r.register(
        "pagescope_walked_processes",
        "Processes whose smaps_rollup the last collection read, by reason (new, own: it \
         faulted or its counters moved, forked, ran: for its working set or swap, machine, \
         swap, anon_sharer, file_sharer, age)",
        walked,
    );
    let mut text = String::new();
    encode(&mut text, &r).expect("writing to a String does not fail");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::collect::ProcessFigures;

    #[test]
    fn label_values_are_escaped() {
        let odd = "a\\b\"c\nd,e}f";
        let escaped = r#"a\\b\"c\nd,e}f"#;
        let figures = Figures {
            rss: Some(4096),
            ..Figures::default()
        };
        let mut c = Collection {
            page_size: 4096,
            ..Collection::default()
        };
        c.processes.push(ProcessFigures {
            pid: 7,
            comm: odd.into(),
            cmdline: Some(format!("{odd} --x")),
            figures,
            age: Some(Duration::from_secs(1)),
        });
        c.cgroups.insert(format!("/{odd}"), figures);
        let text = render(&c, Duration::ZERO);
        assert!(text.contains(&format!(
            "pagescope_process_rss_bytes{{pid=\"7\",comm=\"{escaped}\",cmdline=\"{escaped} --x\"}} 4096\n"
        )), "{text}");
        assert!(
            text.contains(&format!(
                "pagescope_process_figures_age_seconds{{pid=\"7\",comm=\"{escaped}\"}} 1.0\n"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "pagescope_cgroup_rss_bytes{{cgroup=\"/{escaped}\"}} 4096\n"
            )),
            "{text}"
        );
        // The only newlines are those that end samples and comments.
        assert!(
            text.lines()
                .all(|l| l.starts_with("pagescope_") || l.starts_with('#')),
            "{text}"
        );
    }
}
