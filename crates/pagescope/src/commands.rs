//! The subcommands: each validates its arguments, runs the collector or
//! reader from the libraries, and hands the result to a renderer.

use crate::cli::{Cli, Command, DiffArgs, OutputFormat, ReportArgs, SnapshotArgs, View};
use crate::progress::Bar;
use crate::BadInput;
use anyhow::{Context, Result};
use pagescope_core::analysis::pages::{FlagFilter, PageDump, PageRow};
use pagescope_core::analysis::physmap::Physmap;
use pagescope_core::analysis::total::Total;
use pagescope_core::analysis::usage::{Usage, UsageOptions};
use pagescope_core::analysis::{PidFilter, Tee};
use pagescope_core::format::{read_snapshot, Completeness, SnapshotWriter};
use pagescope_core::model::SnapshotSink;
use pagescope_linux::snapshot::{collect, Config, Detail};
use pagescope_render::stream::{row_stream, Cell, StreamColumn};
use pagescope_render::{renderer, views, Format, Report};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Runs a parsed command line; returns the exit code.
pub fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Snapshot(a) => snapshot(a),
        Command::Report(a) => report(a).map(|()| 0),
        Command::Diff(a) => diff(a).map(|()| 0),
        Command::Record(a) => crate::record_cmd::record(a),
        Command::Trace(a) => crate::trace_cmd::trace(a),
        Command::Analyze(a) => crate::trace_cmd::analyze(a),
    }
}

/// Opens an input file for reading, or standard input for `-`; returns it
/// with the name messages give it. A file that can't be opened is bad
/// input.
pub(crate) fn open_input(path: &Path) -> Result<(Box<dyn Read>, PathBuf)> {
    if path.as_os_str() == "-" {
        return Ok((Box::new(std::io::stdin().lock()), input_name(path)));
    }
    let file = std::fs::File::open(path)
        .map_err(|e| pagescope_core::Error::io(path, e))
        .context(BadInput)?;
    Ok((Box::new(BufReader::new(file)), path.to_path_buf()))
}

/// How messages name an input: `-` is standard input.
pub(crate) fn input_name(path: &Path) -> PathBuf {
    if path.as_os_str() == "-" {
        PathBuf::from("standard input")
    } else {
        path.to_path_buf()
    }
}

/// How messages name an output: `-` is standard output.
pub(crate) fn output_name(path: &Path) -> PathBuf {
    if pagescope_linux::output::is_stdout(path) {
        PathBuf::from("standard output")
    } else {
        path.to_path_buf()
    }
}

/// Replays a snapshot file (or standard input) into a sink; the note says
/// if it was cut short.
fn read_file(path: &Path, pids: &[u32], sink: &mut impl SnapshotSink) -> Result<Option<String>> {
    let mut filtered = PidFilter::new(pids, sink);
    let (input, name) = open_input(path)?;
    let done = read_snapshot(input, &name, &mut filtered).context(BadInput)?;
    Ok(match done {
        Completeness::Complete => None,
        Completeness::CutShort { .. } => Some(format!(
            "{} was cut short (the recorder stopped before finishing it): this report covers what was written",
            name.display()
        )),
    })
}

fn diff(args: DiffArgs) -> Result<()> {
    if args.old.as_os_str() == "-" && args.new.as_os_str() == "-" {
        return Err(anyhow::anyhow!(
            "only one of the two snapshots can be read from standard input (-)"
        )
        .context(BadInput));
    }
    let mut usage = Vec::new();
    let mut totals = Vec::new();
    let mut cut_notes = Vec::new();
    for path in [&args.old, &args.new] {
        let mut u = Usage::new(UsageOptions::default());
        let mut t = Total::new();
        // One read feeds both: standard input can't be read twice.
        let cut = read_file(path, &args.pids, &mut Tee(&mut u, &mut t))?;
        if cut.is_some() {
            t.close();
        }
        cut_notes.extend(cut);
        usage.push(u);
        totals.push(t);
    }
    // A pid that neither snapshot holds is an error, as it is for report.
    for pid in &args.pids {
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
    let mut report = views::diff(&usage[0], &usage[1], &totals[0], &totals[1]);
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
    emit(&report, args.format)
}

/// Prints the notes and renders the report to stdout.
pub fn emit(report: &Report, format: OutputFormat) -> Result<()> {
    for n in &report.notes {
        note(n);
    }
    let format = output_format(format);
    let width = terminal_size::terminal_size().map(|(w, _)| w.0 as usize);
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    renderer(format, width).render(report, &mut out)?;
    out.flush()?;
    Ok(())
}

fn note(line: &str) {
    eprintln!("note: {line}");
}

/// A `--pid` that names no process is an error before any work starts.
fn check_pids_exist(pids: &[u32]) -> Result<()> {
    let root = pagescope_linux::Root::default();
    for pid in pids {
        if !root.proc.join(pid.to_string()).exists() {
            anyhow::bail!("no process with pid {pid}");
        }
    }
    Ok(())
}

/// Takes a snapshot; returns the exit code: 130 if Ctrl-C or SIGTERM
/// stopped it (the file then has no end and reads as cut short).
fn snapshot(args: SnapshotArgs) -> Result<u8> {
    check_pids_exist(&args.pids)?;
    // Before any thread starts, so that every thread has them blocked:
    // the collector asks whether one is pending, as it goes.
    pagescope_linux::signals::block().context("cannot block signals")?;
    let mut config = Config {
        pids: args.pids.clone(),
        stop: pagescope_linux::signals::stop_pending,
        ..Config::default()
    };
    if let Some(jobs) = args.jobs {
        config.jobs = jobs as usize;
    }
    config.physmap = args.physmap;
    let to_stdout = pagescope_linux::output::is_stdout(&args.output);
    let out = pagescope_linux::output::create(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let mut writer = SnapshotWriter::new(out, &args.output)?;
    let bar = Bar::new(args.quiet);
    let trailer = collect(&config, &mut writer, &mut |p| bar.update(p));
    bar.finish();
    let trailer = match trailer {
        Err(pagescope_core::Error::Interrupted) => {
            note(&format!(
                "interrupted: {} holds what was read so far, and reads as cut short",
                output_name(&args.output).display()
            ));
            return Ok(130);
        }
        other => other.context("snapshot failed")?,
    };
    if !args.quiet {
        let system = pagescope_linux::system::collect(&config.root, &[])?;
        for m in &system.missing {
            note(m);
        }
        for n in &trailer.notes {
            note(n);
        }
        if !to_stdout {
            eprintln!(
                "wrote {}: {} processes, {} pages, {} bytes in {:.2}s",
                args.output.display(),
                trailer.processes,
                trailer.pages,
                writer.bytes(),
                trailer.duration_ns as f64 / 1e9
            );
        }
    }
    Ok(0)
}

/// Feeds the snapshot (file, standard input or live) through `sink`;
/// returns a note if a file was cut short.
fn feed(
    args: &ReportArgs,
    detail: Detail,
    sink: &mut (impl SnapshotSink + Send),
) -> Result<Option<String>> {
    match &args.input {
        Some(path) => read_file(path, &args.pids, sink),
        None => {
            let mut filtered = PidFilter::new(&args.pids, sink);
            check_pids_exist(&args.pids)?;
            let config = Config {
                pids: args.pids.clone(),
                detail,
                physmap: args.view == View::Physmap,
                ..Config::default()
            };
            let bar = Bar::new(false);
            let r = collect(&config, &mut filtered, &mut |p| bar.update(p));
            bar.finish();
            r.context("reading the live system")?;
            Ok(None)
        }
    }
}

fn output_format(format: OutputFormat) -> Format {
    match format {
        OutputFormat::Table => Format::Table,
        OutputFormat::Csv => Format::Csv,
        OutputFormat::Json => Format::Json,
        OutputFormat::Svg => Format::Svg,
    }
}

/// The columns of the page dump.
const PAGE_COLUMNS: [StreamColumn; 15] = [
    StreamColumn {
        key: "pid",
        title: "PID",
        width: 7,
    },
    StreamColumn {
        key: "comm",
        title: "COMM",
        width: 15,
    },
    StreamColumn {
        key: "vaddr",
        title: "VADDR",
        width: 14,
    },
    StreamColumn {
        key: "pfn",
        title: "PFN",
        width: 9,
    },
    StreamColumn {
        key: "phys_addr",
        title: "PHYS",
        width: 12,
    },
    StreamColumn {
        key: "pagemap",
        title: "PAGEMAP",
        width: 7,
    },
    StreamColumn {
        key: "perms",
        title: "PERM",
        width: 4,
    },
    StreamColumn {
        key: "vma_flags",
        title: "VMAFLG",
        width: 6,
    },
    StreamColumn {
        key: "class",
        title: "CLASS",
        width: 6,
    },
    StreamColumn {
        key: "kpageflags",
        title: "KPAGEFLAGS",
        width: 27,
    },
    StreamColumn {
        key: "count",
        title: "COUNT",
        width: 5,
    },
    StreamColumn {
        key: "node",
        title: "NODE",
        width: 4,
    },
    StreamColumn {
        key: "swap_type",
        title: "SWTYPE",
        width: 6,
    },
    StreamColumn {
        key: "swap_offset",
        title: "SWAP-OFFSET",
        width: 11,
    },
    StreamColumn {
        key: "owner",
        title: "OWNER",
        width: 0,
    },
];

/// `report pages`: streamed, since a machine has millions of pages.
fn pages(args: &ReportArgs) -> Result<()> {
    let filter = match &args.flags {
        Some(f) => FlagFilter::parse(f)
            .map_err(|e| anyhow::anyhow!("--flags: {e}"))
            .context(BadInput)?,
        None => FlagFilter::default(),
    };
    let mut out = BufWriter::new(std::io::stdout());
    let mut stream = Some(row_stream(
        output_format(args.format),
        "pages",
        "pages",
        &PAGE_COLUMNS,
        9,
        &mut out,
    )?);
    let (mut pagemap_syms, mut kflags) = (String::new(), String::new());
    let mut dump = PageDump::new(filter, |r: &PageRow<'_>| {
        let phys = r.phys.filter(|_| r.entry.pfn().is_some());
        let pfn = r.entry.pfn().filter(|_| phys.is_some()).map(|p| p.0);
        let swap = r
            .entry
            .swap_type()
            .zip(r.entry.swap_offset())
            .filter(|&(_, o)| r.entry.is_in_swap() && o != 0);
        pagemap_syms.clear();
        pagemap_syms.push_str(&r.entry.symbols());
        if let Some(p) = phys {
            p.flags.write_short_symbols(&mut kflags);
        }
        let cells = [
            Cell::Int(r.pid as u64),
            Cell::Text(r.comm),
            Cell::Hex(r.vaddr),
            pfn.map_or(Cell::Missing, Cell::Hex),
            pfn.map_or(Cell::Missing, |p| Cell::Hex(p * r.page_size)),
            Cell::Text(&pagemap_syms),
            Cell::Text(r.vma.map_or("----", |v| v.perms.as_str())),
            Cell::Text(r.vma_flags),
            Cell::Text(r.class.name()),
            phys.map_or(Cell::Missing, |_| Cell::Text(&kflags)),
            phys.map_or(Cell::Missing, |p| Cell::Int(p.count)),
            phys.map_or(Cell::Missing, |p| {
                if p.node == u16::MAX {
                    Cell::Missing
                } else {
                    Cell::Int(p.node as u64)
                }
            }),
            // A page in swap: its swap entry (zero, and so missing,
            // without CAP_SYS_ADMIN; offset 0 is the swap header).
            swap.map_or(Cell::Missing, |(t, _)| Cell::Int(t as u64)),
            swap.map_or(Cell::Missing, |(_, o)| Cell::Hex(o)),
            Cell::Text(r.owner),
        ];
        stream
            .as_mut()
            .expect("open until the dump ends")
            .row(&cells)
            .map_err(|e| pagescope_core::Error::io("standard output", e))
    });
    let cut = feed(args, Detail::Full, &mut dump)?;
    let mut notes: Vec<String> = cut.into_iter().collect();
    notes.extend(dump.system.missing.iter().cloned());
    notes.extend(dump.notes.iter().cloned());
    if !filter.is_empty() && !dump.system.pfns_visible {
        notes.push("--flags needs page flags, which this snapshot lacks (taken without CAP_SYS_ADMIN): no page passes".into());
    }
    let ps = dump.system.page_size;
    drop(dump);
    for n in &notes {
        note(n);
    }
    // Finishing flushes the output.
    stream.take().expect("still open").finish(ps, &notes)?;
    Ok(())
}

fn report(args: ReportArgs) -> Result<()> {
    if args.view == View::Pages {
        return pages(&args);
    }
    if args.flags.is_some() {
        return Err(anyhow::anyhow!("--flags applies to the pages view only")).context(BadInput);
    }
    if args.view == View::Physmap {
        let mut a = Physmap::new(args.block.unwrap_or(0));
        // Live, the process side is not needed: the quick rollup read.
        let cut = feed(&args, Detail::Rollup, &mut a)?;
        if a.frames == 0 {
            match &args.input {
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
        return emit(&report, args.format);
    }
    if args.view == View::Vmas && args.pids.is_empty() {
        return Err(anyhow::anyhow!(
            "the vmas view needs --pid PID (the processes whose page maps to show)"
        ))
        .context(BadInput);
    }
    let (mut report, cut): (Report, Option<String>) = match args.view {
        View::Total => {
            let mut a = Total::new();
            let cut = feed(&args, Detail::Full, &mut a)?;
            if cut.is_some() {
                a.close();
            }
            (views::total(&a), cut)
        }
        view => {
            let mut a = Usage::new(UsageOptions {
                maps_for: if view == View::Vmas {
                    args.pids.clone()
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
                View::Processes => views::processes(&a, args.virtual_view),
                View::Vmas => views::vmas(&a, &args.pids),
                View::Units => views::units(&a),
                View::UnitTotals => views::unit_totals(&a),
                View::Alerts => views::alerts(&a),
                View::Total | View::Pages | View::Physmap => unreachable!("handled above"),
            };
            (report, cut)
        }
    };
    if let Some(c) = cut {
        report.notes.insert(0, c);
    }
    emit(&report, args.format)
}

/// With `--pid` on a file, a pid that the snapshot does not hold is an
/// error, as it is on the live system.
fn check_pids_present(args: &ReportArgs, usage: &Usage) -> Result<()> {
    let Some(input) = &args.input else {
        return Ok(());
    };
    for pid in &args.pids {
        if !usage.processes.iter().any(|p| p.pid == *pid) {
            anyhow::bail!("pid {pid} is not in {}", input_name(input).display());
        }
    }
    Ok(())
}
