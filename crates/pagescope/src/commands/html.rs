//! `report html` and `analyze FILE html`: every view of one file (a
//! snapshot, a recording or a trace) on one self-contained HTML page
//! (`pagescope_render::html`), written to a private file.

use crate::cli::{AnalyzeArgs, OutputFormat, ReportArgs};
use crate::input::{input_name, open_input, peek_kind};
use crate::output::output_name;
use crate::BadInput;
use anyhow::{anyhow, Context, Result};
use pagescope_core::analysis::mrc::{Mrc, RecordedMrc};
use pagescope_core::analysis::physmap::Physmap;
use pagescope_core::analysis::refs::RefStats;
use pagescope_core::analysis::temporal::{Recording, Select};
use pagescope_core::analysis::total::Total;
use pagescope_core::analysis::usage::{Usage, UsageOptions};
use pagescope_core::analysis::{PidFilter, Tee};
use pagescope_core::format::{
    read_record, read_snapshot, read_trace, Completeness, Kind, TraceVisitor,
};
use pagescope_core::model::SnapshotSink;
use pagescope_core::record::Scope;
use pagescope_core::trace::{ProcessEvent, Ref, Residency, TraceEnd, TraceHeader};
use pagescope_render::html::{self, Page, Section};
use pagescope_render::views::ProcessesOptions;
use pagescope_render::{record_views, views, Report, Units};
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

/// Processes whose VMAs the page of a snapshot shows (largest PSS first)
/// when `--pid` names none.
const VMA_PROCESSES: usize = 3;

/// `-o`: required; `--format` has no say.
fn output_of(output: &Option<PathBuf>, format: OutputFormat, command: &str) -> Result<PathBuf> {
    if format != OutputFormat::Table {
        return Err(anyhow!(
            "--format does not apply to the html view (it writes one HTML page)"
        ))
        .context(BadInput);
    }
    output.clone().ok_or_else(|| {
        anyhow!("the html view needs -o FILE (\"-\" for standard output), e.g. {command}")
            .context(BadInput)
    })
}

/// Writes `page` to `path`: a new file of mode 0600 (it holds command
/// lines), or standard output for `-`. The file reaches the path whole or
/// not at all: a page cut short (a disk full) is no page, and a page
/// already there stays.
fn write_page(page: &Page, path: &Path) -> Result<()> {
    let (file, mut pending) = pagescope_linux::output::create_pending(path)
        .with_context(|| format!("creating {}", output_name(path).display()))?;
    let mut out = std::io::BufWriter::new(file);
    html::write(page, &mut out)
        .and_then(|()| out.flush())
        .and_then(|()| pending.commit())
        .with_context(|| format!("writing {}", output_name(path).display()))?;
    Ok(())
}

/// A moment, nanoseconds since the Unix epoch, as `YYYY-MM-DD hh:mm:ss
/// UTC`.
fn utc(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date: counted in eras of 400
    // years (146 097 days), years starting on 1 March so that the leap
    // day ends one.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

fn section(heading: &str, about: &str, mut report: Report, units: Units) -> Section {
    report.units = units;
    Section {
        heading: heading.to_string(),
        about: about.to_string(),
        report,
    }
}

fn fact(k: &str, v: impl Into<String>) -> (String, String) {
    (k.to_string(), v.into())
}

/// An input read once or more: a file is opened again for each pass;
/// standard input is read into memory, once.
enum Source {
    File(PathBuf),
    Stdin(Vec<u8>),
}

impl Source {
    fn new(path: &Path) -> Result<Source> {
        if path.as_os_str() == "-" {
            let mut buf = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut buf)
                .context("reading standard input")
                .context(BadInput)?;
            Ok(Source::Stdin(buf))
        } else {
            Ok(Source::File(path.to_path_buf()))
        }
    }

    fn open(&self) -> Result<(Box<dyn Read + '_>, PathBuf)> {
        match self {
            Source::File(p) => open_input(p),
            Source::Stdin(b) => Ok((Box::new(&b[..]), input_name(Path::new("-")))),
        }
    }

    /// Replays the snapshot into `sink`, keeping `pids` (all if empty);
    /// a note if it was cut short.
    fn snapshot(&self, pids: &[u32], sink: &mut impl SnapshotSink) -> Result<Option<String>> {
        let (input, name) = self.open()?;
        let mut filtered = PidFilter::new(pids, sink);
        let done = read_snapshot(input, &name, &mut filtered).context(BadInput)?;
        Ok(match done {
            Completeness::Complete => None,
            Completeness::CutShort { .. } => Some(format!(
                "{} was cut short (the recorder stopped before finishing it): this page covers what was written",
                name.display()
            )),
        })
    }
}

/// `pagescope report html --input FILE -o OUT`.
pub fn snapshot(args: &ReportArgs) -> Result<()> {
    let out = output_of(
        &args.output,
        args.rendering.format,
        "pagescope report html --input FILE -o report.html",
    )?;
    let Some(path) = &args.input else {
        return Err(anyhow!(
            "the html view reads a snapshot file: give --input FILE (`pagescope snapshot -o FILE` takes one)"
        ))
        .context(BadInput);
    };
    if args.flags.is_some() || args.classes {
        return Err(anyhow!(
            "--flags and --classes do not apply to the html view"
        ))
        .context(BadInput);
    }
    let units = args.rendering.units();
    let pids = &args.select.pids;
    let source = Source::new(path)?;
    let name = input_name(path);

    // One pass for the machine's and the processes' views...
    let mut total = Total::new();
    let mut usage = Usage::new(UsageOptions::default());
    let mut phys = Physmap::new(args.block.unwrap_or(0));
    let cut = {
        let mut rest = Tee(&mut usage, &mut phys);
        let mut all = Tee(&mut total, &mut rest);
        source.snapshot(pids, &mut all)
    };
    super::report::block_refused(&phys, true)?;
    let cut = cut?;
    for pid in pids {
        if !usage.processes.iter().any(|p| p.pid == *pid) {
            anyhow::bail!("pid {pid} is not in {}", name.display());
        }
    }
    // ...and one for the page maps of the processes shown.
    let vma_pids: Vec<u32> = if pids.is_empty() {
        let mut user: Vec<_> = usage
            .processes
            .iter()
            .filter(|p| !p.kernel_thread && p.pss.is_some_and(|v| v > 0.0))
            .collect();
        user.sort_by(|a, b| b.pss.unwrap_or(0.0).total_cmp(&a.pss.unwrap_or(0.0)));
        user.iter().take(VMA_PROCESSES).map(|p| p.pid).collect()
    } else {
        pids.clone()
    };
    let mut maps = Usage::new(UsageOptions {
        maps_for: vma_pids.clone(),
        all_maps: false,
    });
    if !vma_pids.is_empty() {
        source.snapshot(&vma_pids, &mut maps)?;
    }

    let sys = &usage.system;
    let listed = usage.processes.iter().filter(|p| !p.kernel_thread).count();
    let mut page = Page {
        title: format!("pagescope: snapshot of {}", sys.hostname),
        facts: vec![
            fact("file", name.display().to_string()),
            fact("host", &sys.hostname),
            fact("kernel", &sys.kernel_release),
            fact("taken", utc(sys.time_unix_ns)),
            fact("page size", format!("{} bytes", sys.page_size)),
            fact(
                "processes",
                format!(
                    "{} ({listed} with memory of their own, {} kernel threads)",
                    usage.processes.len(),
                    usage.processes.len() - listed
                ),
            ),
            fact(
                "page frames",
                if sys.pfns_visible {
                    "visible (frame numbers, flags and share counts were read)"
                } else {
                    "not visible (the snapshot was taken without CAP_SYS_ADMIN)"
                },
            ),
        ],
        ..Page::default()
    };
    if !sys.selected_pids.is_empty() || !pids.is_empty() {
        let which: Vec<String> = if pids.is_empty() {
            sys.selected_pids.iter().map(u32::to_string).collect()
        } else {
            pids.iter().map(u32::to_string).collect()
        };
        page.facts
            .push(fact("processes shown", format!("pid {}", which.join(", "))));
    }
    let mut add = |heading: &str, about: &str, mut report: Report| {
        if let Some(c) = &cut {
            report.notes.insert(0, c.clone());
        }
        page.sections.push(section(heading, about, report, units));
    };
    add(
        "Total",
        "The machine's memory: user pages, page cache, kernel, free.",
        views::total(&total),
    );
    add(
        "Processes",
        "Per process RSS, PSS, USS and swap, then pages by class; largest PSS first.",
        views::processes(
            &usage,
            ProcessesOptions {
                virtual_view: args.virtual_view,
                kernel_threads: args.all || !pids.is_empty(),
            },
        ),
    );
    if !vma_pids.is_empty() {
        let named: Vec<String> = vma_pids
            .iter()
            .map(|pid| {
                let comm = usage
                    .processes
                    .iter()
                    .find(|p| p.pid == *pid)
                    .map_or("", |p| p.comm.as_str());
                format!("{pid} ({comm})")
            })
            .collect();
        let about = if pids.is_empty() {
            format!(
                "Each VMA and its page map, of the {} processes with the largest PSS: {}.",
                vma_pids.len(),
                named.join(", ")
            )
        } else {
            format!("Each VMA and its page map, of {}.", named.join(", "))
        };
        add("VMAs", &about, views::vmas(&maps, &vma_pids));
    }
    add(
        "Units",
        "Each executable unit's segments across processes, with maps.",
        views::units(&usage),
    );
    add(
        "Unit totals",
        "Per unit .text, .data and .bss pages summed over processes.",
        views::unit_totals(&usage),
    );
    add(
        "Alerts",
        "VMAs holding both single-use and shared pages.",
        views::alerts(&usage),
    );
    if phys.frames > 0 {
        add(
            "Physical map",
            "The whole machine by physical address: frames by class per block.",
            views::physmap(&phys),
        );
    } else {
        page.left_out.push((
            "physmap".into(),
            "the snapshot has no physical map (take it with `pagescope snapshot --physmap`)".into(),
        ));
    }
    if pids.is_empty() {
        page.left_out.push((
            "vmas of other processes".into(),
            format!(
                "`pagescope report vmas --input {} --pid PID`",
                name.display()
            ),
        ));
    }
    page.left_out.push((
        "pages".into(),
        format!(
            "one row per resident page, too many for a page: `pagescope report pages --input {}`",
            name.display()
        ),
    ));
    write_page(&page, &out)
}

/// `pagescope analyze FILE html -o OUT`: a recording or a trace.
pub fn analyze(args: &AnalyzeArgs) -> Result<()> {
    let out = output_of(
        &args.output,
        args.rendering.format,
        "pagescope analyze FILE html -o report.html",
    )?;
    let (input, name) = open_input(&args.file)?;
    let mut input = BufReader::new(input);
    // The file's kind says which reader to use; a file too short or
    // foreign to say is left to the record reader.
    let page = match peek_kind(&mut input)? {
        Some(k) if k == Kind::Trace as u16 => trace_page(args, input, &name)?,
        Some(k) if k == Kind::Snapshot as u16 => {
            return Err(anyhow!(
                "{} is a snapshot: its page is `pagescope report html --input {} -o OUT`",
                name.display(),
                args.file.display()
            ))
            .context(BadInput)
        }
        _ => recording_page(args, input, &name)?,
    };
    write_page(&page, &out)
}

/// The `mrc` view of a recording already read (`--range` does not apply).
fn recorded_mrc(r: &Recording, sel: Select) -> pagescope_core::Result<Report> {
    use pagescope_core::format::RecordVisitor;
    if sel.range.is_some() {
        return Err(pagescope_core::Error::Unsupported {
            what: "--range in the miss-ratio curve".into(),
            needs: "a whole address space: the curve is of every page of the selection".into(),
        });
    }
    let mut m = sel
        .pid
        .map_or_else(RecordedMrc::new, RecordedMrc::of_process);
    m.header(r.header())?;
    for i in &r.intervals {
        m.interval(i)?;
    }
    if let Some(e) = &r.end {
        m.end(e)?;
    }
    Ok(views::recorded_mrc(&m, None))
}

fn recording_page(args: &AnalyzeArgs, input: impl Read, name: &Path) -> Result<Page> {
    let units = args.rendering.units();
    let mut r = Recording::default();
    read_record(input, name, &mut r).context(BadInput)?;
    let sel = Select {
        range: args.range,
        pid: args.pid,
    };
    let h = r.header().clone();
    let scope = match &h.scope {
        Scope::Processes(pids) => {
            let p: Vec<String> = pids.iter().map(u32::to_string).collect();
            format!("processes {}", p.join(", "))
        }
        Scope::Cgroup(c) => format!("cgroup {c}"),
        Scope::System => "the whole machine".to_string(),
        Scope::Command(c) => format!("the command {}", c.join(" ")),
    };
    let mut page = Page {
        title: format!("pagescope: recording {}", name.display()),
        facts: vec![
            fact("file", name.display().to_string()),
            fact("kernel", &h.kernel),
            fact("started", utc(h.start_unix_ns)),
            fact("recorded", scope),
            fact(
                "backend",
                format!("{} ({})", h.backend.name(), h.why.trim()),
            ),
            fact("interval", format!("{} ms", h.interval_ns as f64 / 1e6)),
            fact("intervals", r.intervals.len().to_string()),
            fact(
                "ended",
                r.end
                    .as_ref()
                    .map_or("cut short: no end record".to_string(), |e| e.why()),
            ),
        ],
        ..Page::default()
    };
    if let Some(f) = h.sample.filter(|f| *f < 1.0) {
        page.facts.push(fact(
            "sampled",
            format!("{:.1}% of pages watched: counts are estimates", f * 100.0),
        ));
    }
    for p in &r.processes {
        page.facts
            .push(fact(&format!("process {}", p.pid), p.command.join(" ")));
    }
    let mrc = recorded_mrc(&r, sel);
    let views: [(&str, &str, &str, pagescope_core::Result<Report>); 8] = [
        (
            "temporal",
            "Temporal",
            "Referenced pages per interval, by class.",
            record_views::temporal(&r, sel),
        ),
        (
            "wss",
            "Working set",
            &format!(
                "Working set size per interval and over windows of {} intervals.",
                args.window
            ),
            record_views::wss(&r, args.window as usize, sel),
        ),
        (
            "heatmap",
            "Heat map",
            "Referenced pages by interval and block.",
            record_views::heatmap(&r, sel),
        ),
        (
            "spatial",
            "Spatial",
            "How often each block was referenced over the run.",
            record_views::spatial(&r, sel),
        ),
        (
            "processes",
            "Processes",
            "Totals per process over the run.",
            record_views::processes(&r, sel),
        ),
        (
            "hugepages",
            "Huge pages",
            "How densely referenced 2 MiB regions were used.",
            if sel.is_all() {
                record_views::hugepages(&r)
            } else {
                Err(unselected("hugepages"))
            },
        ),
        (
            "numa",
            "NUMA",
            "Referenced pages per NUMA node.",
            if sel.is_all() {
                record_views::numa(&r)
            } else {
                Err(unselected("numa"))
            },
        ),
        (
            "mrc",
            "Miss-ratio curve (estimate)",
            "The LRU miss ratio by memory size, estimated from the pages each interval \
             referenced.",
            mrc,
        ),
    ];
    for (view, heading, about, report) in views {
        match report {
            Ok(report) => page.sections.push(section(heading, about, report, units)),
            Err(e) => page.left_out.push((view.to_string(), e.to_string())),
        }
    }
    Ok(page)
}

fn unselected(view: &str) -> pagescope_core::Error {
    pagescope_core::Error::Unsupported {
        what: format!("--range and --pid on `{view}`"),
        needs: "the whole recording (run the page without them for this view)".into(),
    }
}

/// Both analyses of a trace, fed from one read.
struct Both<'a>(&'a mut RefStats, &'a mut Mrc);

impl TraceVisitor for Both<'_> {
    fn header(&mut self, h: &TraceHeader) -> pagescope_core::Result<()> {
        self.0.header(h)?;
        self.1.header(h)
    }
    fn mapping(&mut self, m: &pagescope_core::trace::Mapping) -> pagescope_core::Result<()> {
        self.0.mapping(m)?;
        self.1.mapping(m)
    }
    fn event(&mut self, e: &ProcessEvent) -> pagescope_core::Result<()> {
        self.0.event(e)?;
        self.1.event(e)
    }
    fn refs(&mut self, refs: &[Ref]) -> pagescope_core::Result<()> {
        self.0.refs(refs)?;
        self.1.refs(refs)
    }
    fn refs_owned(&mut self, refs: Vec<Ref>) -> pagescope_core::Result<Vec<Ref>> {
        self.0.refs(&refs)?;
        self.1.refs_owned(refs)
    }
    fn residency(&mut self, r: &Residency) -> pagescope_core::Result<()> {
        self.0.residency(r)?;
        self.1.residency(r)
    }
    fn end(&mut self, e: &TraceEnd) -> pagescope_core::Result<()> {
        self.0.end(e)?;
        self.1.end(e)
    }
}

fn trace_page(args: &AnalyzeArgs, input: impl Read, name: &Path) -> Result<Page> {
    let units = args.rendering.units();
    let mut stats = RefStats::new(args.range, args.pid);
    let mut mrc = args.pid.map_or_else(Mrc::new, Mrc::of_process);
    read_trace(input, name, &mut Both(&mut stats, &mut mrc)).context(BadInput)?;
    let mut page = Page {
        title: format!("pagescope: trace {}", name.display()),
        facts: vec![fact("file", name.display().to_string())],
        ..Page::default()
    };
    if let Some(h) = &mrc.maps.header {
        page.facts.extend([
            fact("command", h.command.join(" ")),
            fact("kernel", &h.kernel),
            fact("started", utc(h.start_unix_ns)),
            fact(
                "tracer's pool",
                format!(
                    "{} ({} pages, {}, eviction by {})",
                    pagescope_render::report::human_size((h.pool_pages * h.page_size) as f64),
                    h.pool_pages,
                    h.policy,
                    format!("{:?}", h.evict).to_lowercase()
                ),
            ),
        ]);
    }
    page.sections.push(section(
        "References",
        "References, reads, writes and distinct pages, per thread and mapping.",
        views::refs(&stats),
        units,
    ));
    if args.range.is_some() {
        page.left_out.push((
            "mrc".into(),
            "--range applies to the references only: run the page without it for the miss-ratio curve"
                .into(),
        ));
    } else {
        page.sections.push(section(
            "Miss-ratio curve",
            "Miss ratio by memory size: LRU (exact), FIFO and CLOCK.",
            views::mrc(&mrc),
            units,
        ));
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        // 2000-02-29, a leap day of a century year.
        assert_eq!(utc(951_782_400 * 1_000_000_000), "2000-02-29 00:00:00 UTC");
        // `date -u -d @1764115200`: 2025-11-26 00:00:00.
        assert_eq!(
            utc(1_764_115_200_000_000_000 + 3_723_000_000_000),
            "2025-11-26 01:02:03 UTC"
        );
    }
}
