//! `pagescope snapshot`.

use crate::cli::SnapshotArgs;
use crate::input::check_pids_exist;
use crate::output::{is_stdout, note, output_name, refuse_binary_to_terminal};
use crate::progress::Bar;
use crate::BadInput;
use anyhow::{Context, Result};
use pagescope_core::format::SnapshotWriter;
use pagescope_linux::snapshot::{collect, Config};

/// Takes a snapshot; returns the exit code: 130 if Ctrl-C or SIGTERM
/// stopped it (the file then has no end and reads as cut short).
pub fn run(args: SnapshotArgs) -> Result<u8> {
    refuse_binary_to_terminal(&args.output, "a snapshot")?;
    if let Some(vmcore) = args.vmcore.clone() {
        return from_dump(args, vmcore);
    }
    if args.kcore {
        let kcore = std::path::PathBuf::from("/proc/kcore");
        if !kcore.exists() {
            anyhow::bail!("this kernel has no /proc/kcore (it was built without CONFIG_PROC_KCORE): --kcore needs it");
        }
        return from_dump(args, kcore);
    }
    let quiet = args.progress.quiet;
    check_pids_exist(&args.select.pids)?;
    // Before any thread starts, so that every thread has them blocked:
    // the collector asks whether one is pending, as it goes.
    pagescope_linux::signals::block().context("cannot block signals")?;
    let mut config = Config {
        pids: args.select.pids.clone(),
        stop: pagescope_linux::signals::stop_pending,
        ..Config::default()
    };
    if let Some(jobs) = args.jobs {
        config.jobs = jobs as usize;
    }
    config.physmap = args.physmap;
    if config.physmap {
        // Refused before the file is made, not after every process.
        let system = pagescope_linux::system::collect(&config.root, &[])?;
        pagescope_linux::physmap::check(&system).context("snapshot failed")?;
    }
    let out = pagescope_linux::output::create(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let mut writer = SnapshotWriter::new(out, &args.output)?;
    let bar = Bar::new(quiet);
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
    if !quiet {
        let system = pagescope_linux::system::collect(&config.root, &[])?;
        for m in &system.missing {
            note(m);
        }
        for n in &trailer.notes {
            note(n);
        }
        if !is_stdout(&args.output) {
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

/// `snapshot --vmcore`: the same stream, from a crash dump.
fn from_dump(args: SnapshotArgs, vmcore: std::path::PathBuf) -> Result<u8> {
    let quiet = args.progress.quiet;
    pagescope_linux::signals::block().context("cannot block signals")?;
    let mut config = pagescope_dump::Config::new(vmcore, args.btf.clone());
    config.pids = args.select.pids.clone();
    config.stop = pagescope_linux::signals::stop_pending;
    config.physmap = args.physmap;
    config.system_map = args.system_map.clone();
    if args.kcore {
        // The running kernel describes itself.
        config.kcore = true;
        config.btf = config
            .btf
            .or_else(|| Some("/sys/kernel/btf/vmlinux".into()));
        if config.system_map.is_none() {
            config.system_map = Some("/proc/kallsyms".into());
            config.map_at_run_time = true;
        }
    }
    let out = pagescope_linux::output::create(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let mut writer = SnapshotWriter::new(out, &args.output)?;
    let bar = Bar::new(quiet);
    let trailer = pagescope_dump::collect(&config, &mut writer, &mut |done, total, pages| {
        bar.update(pagescope_linux::snapshot::Progress { done, total, pages })
    });
    bar.finish();
    let trailer = match trailer {
        Err(pagescope_dump::DumpError::Interrupted) => {
            note(&format!(
                "interrupted: {} holds what was read so far, and reads as cut short",
                output_name(&args.output).display()
            ));
            return Ok(130);
        }
        Err(e @ pagescope_dump::DumpError::Bad { .. }) => {
            return Err(anyhow::Error::new(e).context(BadInput));
        }
        other => other.context("snapshot of the dump failed")?,
    };
    if !quiet {
        for n in &trailer.notes {
            note(n);
        }
        if !is_stdout(&args.output) {
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
