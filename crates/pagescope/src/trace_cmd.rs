//! `pagescope trace` and `pagescope analyze`.

use crate::cli::{AnalyzeArgs, AnalyzeView, EvictArg, TraceArgs};
use crate::progress::Spinner;
use crate::BadInput;
use anyhow::{Context, Result};
use pagescope_core::analysis::mrc::Mrc;
use pagescope_core::analysis::refs::RefStats;
use pagescope_core::format::{read_trace, TraceVisitor};
use pagescope_core::trace::EvictMethod;
use pagescope_linux::trace::Target;
use pagescope_render::views;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Runs `trace`; returns the exit code: a launched program's own.
pub fn trace(args: TraceArgs) -> Result<u8> {
    if let Some(root) = args.release {
        if !Path::new(&format!("/proc/{root}")).exists() {
            anyhow::bail!("cannot release process {root}: no such process");
        }
        // The traced processes it forked were traced too: release them all.
        let order = pagescope_linux::trace::release_order(root);
        // Descriptors of children forked just before pagescope died, kept
        // by its holder.
        let mut held = pagescope_linux::trace::Held::gather(&order);
        for &pid in &order {
            if pid != root && pagescope_linux::trace::end_stray_mover(pid) {
                if !args.quiet {
                    eprintln!("ended mover {pid} left by a killed pagescope");
                }
                continue;
            }
            let parked_here = pagescope_linux::trace::is_parked(pid);
            if let Some(done) = held
                .release(pid, parked_here)
                .with_context(|| format!("cannot release process {pid}"))?
            {
                if !args.quiet {
                    eprintln!(
                        "released {pid}: {} pages put back through the descriptor \
                         pagescope's holder kept",
                        done.copied
                    );
                }
            }
            // A process caught in the middle of pagescope's setting it up
            // goes on first.
            let parked = pagescope_linux::trace::unpark(pid)
                .with_context(|| format!("cannot release process {pid}"))?;
            if parked > 0 && !args.quiet {
                let threads = if parked == 1 { "thread" } else { "threads" };
                eprintln!(
                    "released {pid}: {parked} {threads} went on from where pagescope stopped them"
                );
            }
            if (pid != root || parked > 0) && !pagescope_linux::trace::still_traced(pid) {
                continue;
            }
            let done = match pagescope_linux::trace::release(pid) {
                Ok(done) => done,
                // A child that exited meanwhile, or was released through
                // its parent and then exec'd (its descriptor and store went
                // with its old image), has nothing left to release.
                Err(_) if pid != root && !pagescope_linux::trace::still_traced(pid) => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot release process {pid}")),
            };
            if !args.quiet {
                eprintln!(
                    "released {pid}: {} pages put back; it runs on untraced",
                    done.copied
                );
            }
        }
        // Movers left behind programs that exited hold copies of their
        // descriptors (a pipe's write end keeps its reader waiting).
        let orphans = pagescope_linux::trace::end_orphaned_movers();
        if !orphans.is_empty() && !args.quiet {
            eprintln!(
                "ended {} mover(s) left by a killed pagescope behind a program that exited",
                orphans.len()
            );
        }
        // Closing what they held wakes whatever still waits on it.
        let ended = held.end();
        if ended > 0 && !args.quiet {
            eprintln!("ended {ended} holder(s) left by a killed pagescope");
        }
        // Every page is back and nothing waits: what pagescope put into
        // each process (descriptors, store, index, code, dead movers) goes.
        for &pid in &order {
            let removed = pagescope_linux::trace::remove_leftovers(pid)
                .with_context(|| format!("cannot release process {pid}"))?;
            if removed && !args.quiet {
                eprintln!("released {pid}: pagescope's descriptors and mappings removed");
            }
        }
        return Ok(0);
    }
    if let Some(cpu) = args.cpu {
        let allowed = pagescope_linux::system::allowed_cpus();
        if !allowed.contains(&cpu) {
            let list: Vec<String> = allowed.iter().map(usize::to_string).collect();
            return Err(anyhow::anyhow!(
                "--cpu {cpu}: pagescope may run on CPUs {} only",
                list.join(" ")
            ))
            .context(BadInput);
        }
    }
    let want = match args.evict {
        EvictArg::Auto => None,
        EvictArg::Move => Some(EvictMethod::Move),
        EvictArg::Copy => Some(EvictMethod::Copy),
    };
    let evict = pagescope_linux::trace::evict_method(want).context("cannot trace")?;
    if want.is_none() && evict == EvictMethod::Copy && !args.quiet {
        eprintln!(
            "note: this kernel has no UFFDIO_MOVE (Linux 6.8): evicted pages are copied out \
             and back, which is slower"
        );
    }
    let target = match args.pid {
        Some(pid) => Target::Attach(pid),
        None => Target::Launch(args.command.clone()),
    };
    let config = pagescope_linux::trace::TraceConfig {
        target,
        pool_pages: args.pool.div_ceil(4096),
        output: args.output.clone(),
        evict,
        time_resolution_ns: args.time_resolution.as_nanos() as u32,
        cpu: args.cpu,
    };
    let _idle_poll = idle_poll(args.no_idle_poll, args.quiet);
    let counts = Arc::new(pagescope_linux::trace::Counts::default());
    let progress = {
        let counts = counts.clone();
        pagescope_linux::trace::with_stop_signals_blocked(|| {
            Spinner::start(args.quiet, move || {
                format!(
                    "{} references, {} evictions, {} KiB written",
                    counts.references.load(Ordering::Relaxed),
                    counts.evictions.load(Ordering::Relaxed),
                    counts.bytes.load(Ordering::Relaxed) / 1024
                )
            })
        })
    };
    let quiet = args.quiet;
    let traced = std::cell::Cell::new(None);
    let outcome = pagescope_linux::trace::trace(&config, counts, |pid| {
        traced.set(Some(pid));
        if args.pid.is_some() && !quiet {
            eprintln!("tracing process {pid}: Ctrl-C puts its pages back and lets it run on");
        }
    });
    progress.finish();
    if outcome.is_err() && args.pid.is_none() {
        end_launched(traced.get());
    }
    let outcome = outcome.context("trace failed")?;
    if outcome.end.references == 0 && args.quiet {
        // Said even when quiet: an empty trace must not pass for a clean one.
        eprintln!("note: {}", outcome.end.reason);
    }
    if !args.quiet {
        let e = &outcome.end;
        eprintln!(
            "wrote {}: {} references ({} writes), {} evictions, {} bytes ({:.2} bytes per reference); {}",
            crate::commands::output_name(&args.output).display(),
            e.references,
            outcome.writes,
            e.evictions,
            outcome.bytes,
            outcome.bytes as f64 / e.references.max(1) as f64,
            e.reason
        );
        if e.unevictable > 0 {
            eprintln!(
                "note: {} pages could not be evicted (locked with mlock, or in a process forked \
                 while pagescope attached)",
                e.unevictable
            );
        }
    }
    // An attached program's exit status is its parent's business; a trace
    // stopped by Ctrl-C or SIGTERM (the program let go, the file complete,
    // its end saying `interrupted`) exits 130.
    let interrupted = outcome.end.reason.starts_with("interrupted");
    Ok(match (args.pid, outcome.exit_status) {
        (None, Some(s)) => u8::try_from(s).unwrap_or(1),
        _ if interrupted => 130,
        _ => 0,
    })
}

/// After a failed trace, ends the program pagescope launched (`pid`, or
/// if the tracer failed before it said which, every child pagescope still
/// has: the tracer's own helpers are gone by then) and the processes
/// below it, and reaps it: pagescope does not exit and leave it running
/// untraced.
fn end_launched(pid: Option<u32>) {
    let proc_root = pagescope_linux::Root::default().proc;
    let roots = pid.map_or_else(
        || pagescope_linux::launched::own_children(&proc_root),
        |p| vec![p],
    );
    for root in roots {
        pagescope_linux::launched::kill_tree(&proc_root, root);
        pagescope_linux::launched::reap(root);
    }
}

/// Holds idle CPUs polling while faults are served, unless `off`; where
/// pagescope may not, says so (unless `quiet`) and goes on without.
pub(crate) fn idle_poll(off: bool, quiet: bool) -> Option<pagescope_linux::cpuidle::IdlePoll> {
    if off {
        return None;
    }
    match pagescope_linux::cpuidle::IdlePoll::hold() {
        Ok(held) => Some(held),
        Err(e) => {
            if !quiet {
                eprintln!(
                    "note: idle CPUs may sleep, which makes each fault slower ({e}); \
                     --no-idle-poll silences this"
                );
            }
            None
        }
    }
}

/// Reads a trace (a file, or standard input for `-`) into an analysis. A
/// file cut short is read up to its last complete frame; the report's
/// notes say so (no end record).
fn read(path: &Path, visitor: &mut dyn TraceVisitor) -> Result<()> {
    let (input, name) = crate::commands::open_input(path)?;
    read_trace(input, &name, visitor).context(BadInput)?;
    Ok(())
}

/// Runs `analyze`.
pub fn analyze(args: AnalyzeArgs) -> Result<u8> {
    let report = match args.view {
        AnalyzeView::Temporal
        | AnalyzeView::Spatial
        | AnalyzeView::Heatmap
        | AnalyzeView::Wss
        | AnalyzeView::Hugepages
        | AnalyzeView::Numa
        | AnalyzeView::Processes => return crate::record_cmd::analyze(&args),
        AnalyzeView::Refs => {
            let mut s = RefStats::new(args.range, args.pid);
            read(&args.file, &mut s)?;
            views::refs(&s)
        }
        AnalyzeView::Mrc => {
            if args.range.is_some() {
                return Err(anyhow::anyhow!("--range applies to `refs` only").context(BadInput));
            }
            let mut m = args.pid.map_or_else(Mrc::new, Mrc::of_process);
            read(&args.file, &mut m)?;
            views::mrc(&m)
        }
    };
    crate::commands::emit(&report, args.format)?;
    Ok(0)
}
