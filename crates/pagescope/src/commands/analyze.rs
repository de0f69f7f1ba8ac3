//! `pagescope analyze`: the views of a recording or of a trace.

use crate::cli::{AnalyzeArgs, AnalyzeView};
use crate::input::{input_name, open_input, peek_kind};
use crate::output::emit;
use crate::BadInput;
use anyhow::{anyhow, Context, Result};
use pagescope_core::analysis::mrc::{Comparison, Mrc, RecordedMrc, Sampling};
use pagescope_core::analysis::refs::{RefStats, TraceMaps};
use pagescope_core::analysis::temporal::{Recording, Select};
use pagescope_core::format::{read_record, read_trace, Kind, TraceVisitor};
use pagescope_render::{record_views, views, Report};
use std::collections::BTreeSet;
use std::io::{BufReader, Read};
use std::path::Path;

/// Runs `analyze`.
pub fn run(args: AnalyzeArgs) -> Result<()> {
    if args.view == AnalyzeView::Html {
        return super::html::analyze(&args);
    }
    if args.output.is_some() {
        return Err(anyhow!(
            "--output applies to the html view only (the other views print to standard output)"
        )
        .context(BadInput));
    }
    if args.against.is_some() && args.view != AnalyzeView::Mrc {
        return Err(anyhow!("--against applies to the `mrc` of a recording").context(BadInput));
    }
    if (args.sample.is_some() || args.lru_only) && args.view != AnalyzeView::Mrc {
        return Err(anyhow!("--sample and --lru-only apply to `mrc` only").context(BadInput));
    }
    let mut report = match args.view {
        AnalyzeView::Temporal
        | AnalyzeView::Spatial
        | AnalyzeView::Heatmap
        | AnalyzeView::Wss
        | AnalyzeView::Hugepages
        | AnalyzeView::Numa
        | AnalyzeView::Processes => recording(&args)?,
        AnalyzeView::Refs => {
            let mut s = RefStats::new(args.range, args.pid);
            read_trace_file(&args.file, &mut s)?;
            check_pid_traced(&s.maps, &args.file)?;
            views::refs(&s)
        }
        AnalyzeView::Mrc => {
            if args.range.is_some() {
                return Err(anyhow!("--range applies to `refs` only").context(BadInput));
            }
            let (input, name) = open_input(&args.file)?;
            let mut input = BufReader::new(input);
            if peek_kind(&mut input)? == Some(Kind::Record as u16) {
                return recorded_mrc(&args, input, &name);
            }
            if args.against.is_some() {
                return Err(anyhow!(
                    "--against applies to the `mrc` of a recording: it sets the recording's \
                     estimate beside the trace's exact curve"
                )
                .context(BadInput));
            }
            let mut m = args.pid.map_or_else(Mrc::new, Mrc::of_process);
            if let Some(rate) = args.sample {
                let s = Sampling::new(rate).ok_or_else(|| {
                    anyhow!("--sample {rate:?}: the rate is below the smallest, 1e-9")
                        .context(BadInput)
                })?;
                m = m.sampled(s);
            }
            if args.lru_only {
                m = m.lru_only();
            }
            read_trace(input, &name, &mut m).context(BadInput)?;
            check_pid_traced(&m.maps, &args.file)?;
            views::mrc(&m)
        }
        AnalyzeView::Html => unreachable!("handled above"),
    };
    report.units = args.rendering.units();
    emit(&report, args.rendering.format)
}

/// `analyze REC mrc`: the LRU curve estimated from a recording.
fn recorded_mrc(args: &AnalyzeArgs, input: impl Read, name: &Path) -> Result<()> {
    if args.sample.is_some() {
        return Err(anyhow!(
            "--sample applies to the mrc of a trace; a recording's curve is estimated from all \
             it holds (record with --backend fault --sample to record a sample)"
        )
        .context(BadInput));
    }
    let mut m = args
        .pid
        .map_or_else(RecordedMrc::new, RecordedMrc::of_process);
    read_record(input, name, &mut m).context(BadInput)?;
    check_pid_in(args.pid, m.pids(), &args.file)?;
    let against = match &args.against {
        Some(path) => {
            let mut exact = Mrc::new().lru_only();
            read_trace_file(path, &mut exact)?;
            let sizes = m.sizes();
            Some(Comparison::new(&sizes, &m, &exact))
        }
        None => None,
    };
    let mut report = views::recorded_mrc(&m, against.as_ref());
    report.units = args.rendering.units();
    emit(&report, args.rendering.format)
}

/// The view of a recording.
fn recording(args: &AnalyzeArgs) -> Result<Report> {
    let mut r = Recording::default();
    let (input, name) = open_input(&args.file)?;
    read_record(input, &name, &mut r).context(BadInput)?;
    check_pid_in(args.pid, &r.pids(), &args.file)?;
    let sel = Select {
        range: args.range,
        pid: args.pid,
    };
    match args.view {
        AnalyzeView::Temporal => record_views::temporal(&r, sel),
        AnalyzeView::Spatial => record_views::spatial(&r, sel),
        AnalyzeView::Heatmap => record_views::heatmap(&r, sel),
        AnalyzeView::Wss => record_views::wss(&r, args.window as usize, sel),
        AnalyzeView::Processes => record_views::processes(&r, sel),
        AnalyzeView::Hugepages | AnalyzeView::Numa if !sel.is_all() => {
            return Err(anyhow!(
                "--range and --pid apply to temporal, spatial, heatmap, wss and processes"
            )
            .context(BadInput))
        }
        AnalyzeView::Hugepages => record_views::hugepages(&r),
        AnalyzeView::Numa => record_views::numa(&r),
        AnalyzeView::Refs | AnalyzeView::Mrc | AnalyzeView::Html => {
            unreachable!("views of a trace, and the page")
        }
    }
    .context(BadInput)
}

/// With `--pid`, a pid that the trace does not hold is an error, as it
/// is for `report` and `diff` of a snapshot: the message names the
/// processes the trace has.
fn check_pid_traced(maps: &TraceMaps, file: &Path) -> Result<()> {
    match maps.selected_but_absent() {
        Some(pid) => check_pid_in(Some(pid), &maps.pids, file),
        None => Ok(()),
    }
}

/// With `--pid`, a pid that the trace or recording `file` does not hold
/// (`pids`) is an error, as it is for `report` and `diff` of a snapshot:
/// the message names the processes it has.
fn check_pid_in(pid: Option<u32>, pids: &BTreeSet<u32>, file: &Path) -> Result<()> {
    let Some(pid) = pid.filter(|p| !pids.contains(p)) else {
        return Ok(());
    };
    let known: Vec<String> = pids.iter().map(u32::to_string).collect();
    anyhow::bail!(
        "pid {pid} is not in {} (its processes: {})",
        input_name(file).display(),
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(" ")
        }
    )
}

/// Reads a trace (a file, or standard input for `-`) into an analysis. A
/// file cut short is read up to its last complete frame; the report's
/// notes say so (no end record).
fn read_trace_file(path: &Path, visitor: &mut dyn TraceVisitor) -> Result<()> {
    let (input, name) = open_input(path)?;
    read_trace(input, &name, visitor).context(BadInput)?;
    Ok(())
}
