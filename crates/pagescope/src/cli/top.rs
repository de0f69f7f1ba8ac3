//! `pagescope top`: a live view of the processes' memory in a terminal.

use super::parse;
use clap::{Args, ValueEnum};
use std::time::Duration;

/// `pagescope top`.
#[derive(Debug, Args)]
#[command(
    after_help = "Columns: PSS (proportional set size: shared pages split among \
        their sharers), USS (unique: private pages), RSS (resident), SWAP (in swap), \
        WSET (working set: pages referenced since the last refresh).\n\n\
        Keys:\n  \
        p u r s w    sort by PSS, USS, RSS, swap, working set (largest first)\n  \
        n i          sort by name, by pid\n  \
        /            filter by name (type, Enter keeps it, Esc clears it)\n  \
        c            processes or cgroups\n  \
        Up Down PgUp PgDn Home End   move the selection\n  \
        Enter        the selected process's VMAs and working-set history (Esc back)\n  \
        q, Ctrl-C    quit (the terminal is left as it was)\n\n\
        Without root, the figures of processes that cannot be read show `-`.\n\n\
        Examples:\n  pagescope top\n  pagescope top --interval 5s --backend none"
)]
pub struct TopArgs {
    /// Time between refreshes.
    #[arg(long, value_name = "DUR", default_value = "2s", value_parser = parse::interval)]
    pub interval: Duration,
    /// CPU budget in percent of one core: after a refresh whose
    /// collection took C seconds of CPU, the next comes no sooner than
    /// C / budget later (the header then says how long the refresh took).
    /// A refresh walks the page tables (smaps_rollup, and clear_refs with
    /// `refs`) of each process a kernel signal says may have changed
    /// (see `--max-age`): on a busy machine with many GiB resident, more
    /// than a 2 s refresh can afford at this budget.
    #[arg(long, value_name = "PCT", default_value_t = 2.0, value_parser = super::serve::parse_budget)]
    pub budget: f64,
    /// Skip the smaps_rollup walk of a process whose resident and swapped
    /// memory (status VmRSS + VmSwap) is above this, as `serve` does: its
    /// PSS, USS and working set show `-`. `0` walks every process.
    #[arg(long, value_name = "SIZE", default_value = "16G", value_parser = pagescope_core::units::parse_size)]
    pub max_process_size: u64,
    /// Sum the figures of a process whose resident and swapped memory is
    /// above this from its pagemap, read with pauses so as not to hold up
    /// its mmap and munmap, as `serve --pagemap-above` does (its WSET
    /// shows `-`). `0` reads every smaps_rollup.
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = pagescope_core::units::parse_size)]
    pub pagemap_above: u64,
    /// With `refs`, leave out the working set (WSET `-`) of a process
    /// whose resident memory is above this, as `serve` does: clearing its
    /// referenced bits flushes its TLB, which stalls it about 10 ms per
    /// 128 MiB it touches on a VM. `0` clears every process.
    #[arg(long, value_name = "SIZE", default_value = "128M", value_parser = pagescope_core::units::parse_size)]
    pub max_working_set_size: u64,
    /// The oldest a process's figures may get (as `serve --max-age`):
    /// a process is walked again when a kernel signal says its figures
    /// may have changed, and at the latest after between half of this
    /// and this. The AGE column says how old each row's figures are.
    #[arg(long, value_name = "DUR", default_value = "1m", value_parser = parse::interval)]
    pub max_age: Duration,
    /// What finds the pages each process referenced per refresh (WSET);
    /// `none` leaves the column empty and the reference bits alone.
    #[arg(long, value_enum, default_value_t = TopBackend::Refs)]
    pub backend: TopBackend,
}

/// The working-set backends of `top`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TopBackend {
    /// smaps_rollup `Referenced:` then `clear_refs` (any kernel).
    Refs,
    /// No working set.
    None,
}
