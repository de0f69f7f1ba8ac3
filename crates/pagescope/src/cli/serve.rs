//! `pagescope serve`: a Prometheus/OpenMetrics endpoint.

use super::parse;
use clap::{Args, ValueEnum};
use std::time::Duration;

/// `pagescope serve`.
#[derive(Debug, Args)]
#[command(after_help = "Metrics (at /metrics, OpenMetrics text):\n  \
        pagescope_process_{rss,pss,uss,swap,working_set}_bytes{pid,comm[,cmdline]}\n  \
        pagescope_cgroup_{rss,pss,uss,swap,working_set}_bytes{cgroup}\n  \
        pagescope_machine_{user,page_cache,kernel,free}_bytes\n  \
        pagescope_collection_seconds, pagescope_collection_cpu_seconds_total,\n  \
        pagescope_skipped_processes, pagescope_working_set_skipped_processes,\n  \
        pagescope_process_figures_age_seconds{pid,comm}, pagescope_walked_processes{reason}\n\n\
        Collections run on their own schedule; a scrape returns the last one.\n\n\
        Examples:\n  pagescope serve\n  \
        pagescope serve --listen 0.0.0.0:9464 --interval 30s --backend none")]
pub struct ServeArgs {
    /// Address, or host name, and port to listen on (loopback unless
    /// told otherwise). A name is resolved, and the first of its
    /// addresses that can be bound is listened on.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9464")]
    pub listen: String,
    /// Time between collections (at least this; longer if --budget asks).
    #[arg(long, value_name = "DUR", default_value = "15s", value_parser = parse::interval)]
    pub interval: Duration,
    /// What finds the pages each process referenced per interval
    /// (`pagescope_*_working_set_bytes`); `none` leaves those metrics out.
    #[arg(long, value_enum, default_value_t = ServeBackend::Refs)]
    pub backend: ServeBackend,
    /// CPU budget in percent of one core: after a collection that took C
    /// seconds of CPU, the next starts no sooner than C / budget later.
    #[arg(long, value_name = "PCT", default_value_t = 5.0, value_parser = parse_budget)]
    pub budget: f64,
    /// Skip the smaps_rollup walk of a process whose resident and swapped
    /// memory (status VmRSS + VmSwap) is above this: the walk holds its
    /// memory map lock. Its RSS and swap still come from status; PSS, USS
    /// and working set are left out, and it is counted in
    /// `pagescope_skipped_processes`. `0` walks every process.
    #[arg(long, value_name = "SIZE", default_value = "16G", value_parser = pagescope_core::units::parse_size)]
    pub max_process_size: u64,
    /// Sum the figures of a process whose resident and swapped memory is
    /// above this from its pagemap and /proc/kpagecount, read 16 MiB at a
    /// time with pauses, rather than from its smaps_rollup. smaps_rollup
    /// holds the process's memory map lock while it walks each whole
    /// mapping (about 14 ms per GiB here), and the process's mmap, munmap
    /// and mprotect wait for it; the paced walk lets them in between its
    /// 16 MiB steps (a 4 GiB process's longest stall: about 50 ms with
    /// smaps_rollup, the machine's own few ms paced; docs/performance.md).
    /// The figures are the
    /// same; such a process has no refs working set (pagemap has no
    /// accessed bit) and is counted in `pagescope_pagemap_processes`.
    /// Needs root (frame numbers); `0` reads every smaps_rollup.
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = pagescope_core::units::parse_size)]
    pub pagemap_above: u64,
    /// With `refs`, leave out the working set of a process whose resident
    /// memory is above this. Clearing a process's referenced bits
    /// (`clear_refs`) flushes its TLB, and its next pass over its memory
    /// refills it: on a VM that stalls it about 10 ms per 128 MiB it
    /// touches (docs/performance.md). Its PSS, USS, RSS and swap are
    /// still read; it is counted in
    /// `pagescope_working_set_skipped_processes`. `0` clears every process.
    #[arg(long, value_name = "SIZE", default_value = "128M", value_parser = pagescope_core::units::parse_size)]
    pub max_working_set_size: u64,
    /// The oldest a process's figures may get. A process is walked again
    /// (its smaps_rollup read) when a kernel signal says its figures may
    /// have changed (it faulted, its counters moved, it forked, a process
    /// sharing its pages changed, swap or KSM or THP collapse events),
    /// and at the latest after between half of this and this; each
    /// figure's age is `pagescope_process_figures_age_seconds`.
    #[arg(long, value_name = "DUR", default_value = "2m", value_parser = parse::interval)]
    pub max_age: Duration,
    /// Label each process with its command line too (`cmdline`).
    #[arg(long)]
    pub cmdline: bool,
}

/// The working-set backends of `serve`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ServeBackend {
    /// smaps_rollup `Referenced:` then `clear_refs` (any kernel).
    Refs,
    /// The idle page bitmap (CONFIG_IDLE_PAGE_TRACKING).
    Idle,
    /// DAMON's sampled regions (an estimate).
    Damon,
    /// No working set.
    None,
}

pub(super) fn parse_budget(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p),
        _ => Err(format!("{s:?}: expected a percentage above 0, at most 100")),
    }
}
