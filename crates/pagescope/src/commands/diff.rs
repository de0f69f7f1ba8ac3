//! `pagescope diff`: what grew and shrank between two snapshots.

use crate::cli::DiffArgs;
use crate::input::read_snapshot_file;
use crate::output::emit;
use crate::BadInput;
use anyhow::Result;
use pagescope_core::analysis::total::Total;
use pagescope_core::analysis::usage::{Usage, UsageOptions};
use pagescope_core::analysis::Tee;
use pagescope_render::views;

/// Runs `diff`.
pub fn run(args: DiffArgs) -> Result<()> {
    if args.old.as_os_str() == "-" && args.new.as_os_str() == "-" {
        return Err(anyhow::anyhow!(
            "only one of the two snapshots can be read from standard input (-)"
        )
        .context(BadInput));
    }
    let pids = &args.select.pids;
    let mut usage = Vec::new();
    let mut totals = Vec::new();
    let mut cut_notes = Vec::new();
    for path in [&args.old, &args.new] {
        let mut u = Usage::new(UsageOptions::default());
        let mut t = Total::new();
        // One read feeds both: standard input can't be read twice.
        let cut = read_snapshot_file(path, pids, &mut Tee(&mut u, &mut t))?;
        cut_notes.extend(cut);
        usage.push(u);
        totals.push(t);
    }
    // A pid that neither snapshot holds is an error, as it is for report.
    for pid in pids {
        if !usage
            .iter()
            .any(|u| u.processes.iter().any(|p| p.pid == *pid))
        {
            anyhow::bail!(
                "pid {pid} is in neither {} nor {}",
                args.old.display(),
                args.new.display()
            );
        }
    }
    let mut report = views::diff(
        &usage[0],
        &usage[1],
        &totals[0],
        &totals[1],
        args.all || !pids.is_empty(),
    );
    report.units = args.rendering.units();
    for (i, n) in cut_notes.into_iter().enumerate() {
        report.notes.insert(i, n);
    }
    if usage[1].system.time_unix_ns < usage[0].system.time_unix_ns {
        report.notes.push(format!(
            "{} was taken before {}: the deltas are negative growth",
            args.new.display(),
            args.old.display()
        ));
    }
    emit(&report, args.rendering.format)
}
