//! `pagescope record`.

use crate::cli::{BackendArg, RecordArgs};
use crate::idle::idle_poll;
use crate::input::process_exists;
use crate::output::{note, output_name, refuse_binary_to_terminal};
use crate::progress::Spinner;
use crate::BadInput;
use anyhow::{anyhow, Context, Result};
use pagescope_core::record::{Backend, EndReason};
use pagescope_linux::record::{Choice, DamonSettings, Live, RecordConfig, Target};
use std::path::{Path, PathBuf};

/// The smallest `--sample`: one page in a million (4 GiB of 4 KiB pages).
const MIN_SAMPLE: f64 = 1e-6;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Finds a cgroup directory: as given, or under the cgroup mounts.
fn cgroup_dir(p: &Path) -> Result<PathBuf> {
    let candidates = [
        p.to_path_buf(),
        Path::new("/sys/fs/cgroup").join(p.strip_prefix("/").unwrap_or(p)),
        Path::new("/sys/fs/cgroup/unified").join(p.strip_prefix("/").unwrap_or(p)),
    ];
    candidates
        .into_iter()
        .find(|d| d.join("cgroup.procs").is_file())
        .ok_or_else(|| anyhow!("{}: not a cgroup directory (no cgroup.procs)", p.display()))
        .context(BadInput)
}

fn target(args: &RecordArgs) -> Result<Target> {
    if !args.command.is_empty() {
        return Ok(Target::Command(args.command.clone()));
    }
    if let Some(c) = &args.cgroup {
        return Ok(Target::Cgroup(cgroup_dir(c)?));
    }
    if args.system {
        return Ok(Target::System);
    }
    if let Some(pid) = args.pids.iter().find(|&&pid| !process_exists(pid)) {
        return Err(anyhow!("no process {pid}"));
    }
    let mut pids = args.pids.clone();
    pids.sort_unstable();
    pids.dedup();
    Ok(Target::Pids(pids))
}

/// Runs `record`; returns the exit code: the launched command's own.
pub fn run(args: RecordArgs) -> Result<u8> {
    refuse_binary_to_terminal(&args.output, "a recording")?;
    let quiet = args.progress.quiet;
    let config = RecordConfig {
        target: target(&args)?,
        interval: args.interval,
        block: args.block,
        duration: args.duration,
        backend: match args.backend {
            BackendArg::Auto => Choice::Auto,
            BackendArg::Idle => Choice::Use(Backend::Idle),
            BackendArg::Refs => Choice::Use(Backend::Refs),
            BackendArg::Damon => Choice::Use(Backend::Damon),
            BackendArg::Fault => Choice::Use(Backend::Fault),
        },
        freeze: !args.no_freeze,
        output: args.output.clone(),
        damon: DamonSettings {
            sample: args.damon_sample,
            min_regions: args.damon_regions.0,
            max_regions: args.damon_regions.1,
        },
        sample: args.sample,
        root: pagescope_linux::Root::default(),
    };
    if args.sample < 1.0 && args.backend != BackendArg::Fault {
        return Err(anyhow!("--sample applies to --backend fault only").context(BadInput));
    }
    if args.sample < MIN_SAMPLE {
        return Err(anyhow!(
            "--sample {:?}: below the smallest fraction, {MIN_SAMPLE:?} (a page in a million: \
             a sample of fewer would watch no page of most programs, and count nothing)",
            args.sample
        )
        .context(BadInput));
    }
    if args.no_idle_poll && args.backend != BackendArg::Fault {
        return Err(anyhow!("--no-idle-poll applies to --backend fault only").context(BadInput));
    }
    if args.backend == BackendArg::Damon {
        config
            .damon
            .check(config.interval)
            .map_err(|e| anyhow!("--damon-sample/--damon-regions: {e}"))
            .context(BadInput)?;
    }
    // Before any thread starts, so that every thread has them blocked.
    pagescope_linux::signals::block().context("cannot block signals")?;
    let live = Arc::new(Live::default());
    let progress = {
        let live = live.clone();
        let page_size = pagescope_linux::system::page_size();
        Spinner::start(quiet, move || {
            format!(
                "interval {} · referenced {:.1} MiB · recorder CPU {:.1}% · {} KiB written",
                live.intervals.load(Ordering::Relaxed),
                (live.referenced.load(Ordering::Relaxed) * page_size) as f64 / (1 << 20) as f64,
                live.cpu_permille.load(Ordering::Relaxed) as f64 / 10.0,
                live.bytes.load(Ordering::Relaxed) / 1024
            )
        })
    };
    let _idle_poll = (args.backend == BackendArg::Fault)
        .then(|| idle_poll(args.no_idle_poll, quiet, None, &args.pids));
    let outcome = pagescope_linux::record::record(&config, &live);
    progress.finish();
    let outcome = outcome.context("record failed")?;
    if !quiet {
        let h = &outcome.header;
        eprintln!(
            "wrote {}: {} intervals of {:?} with the {} backend ({}), {} bytes; {}",
            output_name(&args.output).display(),
            outcome.end.intervals,
            args.interval,
            h.backend.name(),
            h.why,
            outcome.bytes,
            outcome.end.reason
        );
        for n in &h.notes {
            note(n);
        }
        for n in &outcome.end.notes {
            note(&n.to_string());
        }
        if outcome.end.overruns > 0 {
            note(&format!(
                "{} boundaries took longer than half an interval, and the next interval \
                 was started late so that the programs ran (try a longer --interval)",
                outcome.end.overruns
            ));
        }
    }
    // A launched command's exit code is its own: one that runs on past the
    // recording is waited for, the file complete meanwhile. A recording of
    // running processes stopped by Ctrl-C or SIGTERM (its file complete,
    // its end saying `interrupted`) exits 130, as the shell's convention
    // has it.
    let mut exit_code = outcome.exit_code;
    if let Some(pid) = outcome.runs_on {
        if !quiet {
            note(&format!(
                "the recording is complete; the command (pid {pid}) runs on, and pagescope \
                 exits with its exit status when it ends"
            ));
        }
        exit_code = pagescope_linux::record::wait_launched(pid);
    }
    let interrupted = outcome.end.reason == EndReason::Interrupted;
    Ok(match exit_code {
        Some(c) => u8::try_from(c).unwrap_or(1),
        None if interrupted => 130,
        None => 0,
    })
}
