//! `pagescope trace` of a command or of a running process (`--release`
//! is [`super::release`]).

use crate::cli::{EvictArg, TraceArgs};
use crate::idle::idle_poll;
use crate::output::{note, output_name, refuse_binary_to_terminal};
use crate::progress::Spinner;
use crate::BadInput;
use anyhow::{Context, Result};
use pagescope_core::trace::{EndReason, EvictMethod};
use pagescope_linux::trace::{Counts, Target, TraceConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Runs `trace`; returns the exit code: a launched program's own.
pub fn run(args: TraceArgs) -> Result<u8> {
    refuse_binary_to_terminal(&args.output, "a trace")?;
    let quiet = args.progress.quiet;
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
    if want.is_none() && evict == EvictMethod::Copy && !quiet {
        note(
            "this kernel has no UFFDIO_MOVE (Linux 6.8): evicted pages are copied out \
             and back, which is slower",
        );
    }
    let target = match args.pid {
        Some(pid) => Target::Attach(pid),
        None => Target::Launch(args.command.clone()),
    };
    let config = TraceConfig {
        target,
        pool_pages: args.pool.div_ceil(pagescope_linux::system::page_size()),
        output: args.output.clone(),
        evict,
        time_resolution_ns: args.time_resolution.as_nanos() as u32,
        cpu: args.cpu,
        root: pagescope_linux::Root::default(),
    };
    let attached: Vec<u32> = args.pid.into_iter().collect();
    let _idle_poll = idle_poll(args.no_idle_poll, quiet, args.cpu, &attached);
    let counts = Arc::new(Counts::default());
    let progress = {
        let counts = counts.clone();
        pagescope_linux::trace::with_stop_signals_blocked(|| {
            Spinner::start(quiet, move || {
                format!(
                    "{} references, {} evictions, {} KiB written",
                    counts.references.load(Ordering::Relaxed),
                    counts.evictions.load(Ordering::Relaxed),
                    counts.bytes.load(Ordering::Relaxed) / 1024
                )
            })
        })
    };
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
    if outcome.end.references == 0 && quiet {
        // Said even when quiet: an empty trace must not pass for a clean one.
        note(&outcome.end.why());
    }
    if !quiet {
        let e = &outcome.end;
        eprintln!(
            "wrote {}: {} references ({} writes), {} evictions, {} bytes ({:.2} bytes per reference); {}",
            output_name(&args.output).display(),
            e.references,
            outcome.writes,
            e.evictions,
            outcome.bytes,
            outcome.bytes as f64 / e.references.max(1) as f64,
            e.why()
        );
        if e.unevictable > 0 {
            note(&format!(
                "{} pages could not be evicted (locked with mlock, or in a process forked \
                 while pagescope attached)",
                e.unevictable
            ));
        }
    }
    // An attached program's exit status is its parent's business; a trace
    // stopped by Ctrl-C or SIGTERM (the program let go, the file complete,
    // its end saying `interrupted`) exits 130.
    let interrupted = outcome.end.reason == EndReason::Interrupted;
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
        pagescope_linux::launched::reap(&proc_root, root);
    }
}
