//! `pagescope report`: the views of one snapshot, or of the live system.

use super::feed::feed;
use crate::cli::{ReportArgs, View};
use crate::input::input_name;
use crate::output::emit;
use crate::BadInput;
use anyhow::{Context, Result};
use pagescope_core::analysis::physmap::Physmap;
use pagescope_core::analysis::total::Total;
use pagescope_core::analysis::usage::{Usage, UsageOptions};
use pagescope_linux::snapshot::Detail;
use pagescope_render::views::ProcessesOptions;
use pagescope_render::{views, Report};

/// A usage error if `--block` was too small for the map `a` was fed
/// (from a snapshot file if `file`): it names the smallest block allowed.
pub fn block_refused(a: &Physmap, file: bool) -> Result<()> {
    use pagescope_core::analysis::physmap::{block_name, MAX_BLOCKS};
    match a.too_small {
        None => Ok(()),
        Some(smallest) => Err(anyhow::anyhow!(
            "--block {}: the physical map would have more than {MAX_BLOCKS} blocks (a report holds every one in memory); the smallest --block for this {} is {}",
            block_name(a.block_frames * a.system.page_size.max(1)).replace(' ', ""),
            if file { "snapshot" } else { "machine" },
            block_name(smallest).replace(' ', "")
        ))
        .context(BadInput),
    }
}

/// Runs `report`.
pub fn run(args: ReportArgs) -> Result<()> {
    if args.view == View::Html {
        return super::html::snapshot(&args);
    }
    if args.output.is_some() {
        return Err(anyhow::anyhow!(
            "--output applies to the html view only (the other views print to standard output)"
        ))
        .context(BadInput);
    }
    if args.view == View::Pages {
        return super::pages::run(&args);
    }
    if args.flags.is_some() {
        return Err(anyhow::anyhow!("--flags applies to the pages view only")).context(BadInput);
    }
    let format = args.rendering.format;
    let units = args.rendering.units();
    if args.view == View::Physmap {
        let mut a = Physmap::new(args.block.unwrap_or(0));
        // Live, the process side is not needed: the quick rollup read.
        let cut = feed(&args, Detail::Rollup, &mut a);
        block_refused(&a, args.input.is_some())?;
        let cut = cut?;
        if a.frames == 0 {
            match &args.input {
                // The map is the last part of a snapshot: a file cut short
                // may have lost it.
                Some(path) if cut.is_some() => anyhow::bail!(
                    "{} has no physical map: it was cut short before its map (the map comes \
                     last, after the processes), or taken without `--physmap`",
                    input_name(path).display()
                ),
                Some(path) => anyhow::bail!(
                    "{} has no physical map: take the snapshot with `pagescope snapshot --physmap`",
                    input_name(path).display()
                ),
                None => {
                    anyhow::bail!("the physical map is empty: no System RAM ranges were readable")
                }
            }
        }
        let mut report = views::physmap(&a);
        report.notes.splice(0..0, cut);
        report.units = units;
        return emit(&report, format);
    }
    let pids = &args.select.pids;
    if args.view == View::Vmas && pids.is_empty() {
        return Err(anyhow::anyhow!(
            "the vmas view needs --pid PID (the processes whose page maps to show)"
        ))
        .context(BadInput);
    }
    let (mut report, cut): (Report, Option<String>) = match args.view {
        View::Total => {
            let mut a = Total::new();
            let cut = feed(&args, Detail::Full, &mut a)?;
            (views::total(&a), cut)
        }
        view => {
            let mut a = Usage::new(UsageOptions {
                maps_for: if view == View::Vmas {
                    pids.clone()
                } else {
                    Vec::new()
                },
                all_maps: false,
            });
            // Live, the per-process figures need only the kernel's
            // smaps_rollup sums: the cheapest read that gives them.
            let detail = if view == View::Processes && !args.classes {
                Detail::Rollup
            } else {
                Detail::Full
            };
            let cut = feed(&args, detail, &mut a)?;
            if matches!(view, View::Processes | View::Vmas) {
                check_pids_present(&args, &a)?;
            }
            let report = match view {
                View::Processes => views::processes(
                    &a,
                    ProcessesOptions {
                        virtual_view: args.virtual_view,
                        // A kernel thread that --pid names is listed.
                        kernel_threads: args.all || !pids.is_empty(),
                    },
                ),
                View::Vmas => views::vmas(&a, pids),
                View::Units => views::units(&a),
                View::UnitTotals => views::unit_totals(&a),
                View::Alerts => views::alerts(&a),
                View::Total | View::Pages | View::Physmap | View::Html => {
                    unreachable!("handled above")
                }
            };
            (report, cut)
        }
    };
    if let Some(c) = cut {
        report.notes.insert(0, c);
    }
    report.units = units;
    emit(&report, format)
}

/// With `--pid` on a file, a pid that the snapshot does not hold is an
/// error, as it is on the live system.
fn check_pids_present(args: &ReportArgs, usage: &Usage) -> Result<()> {
    let Some(input) = &args.input else {
        return Ok(());
    };
    for pid in &args.select.pids {
        if !usage.processes.iter().any(|p| p.pid == *pid) {
            anyhow::bail!("pid {pid} is not in {}", input_name(input).display());
        }
    }
    Ok(())
}
