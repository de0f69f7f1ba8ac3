//! `pagescope trace --release PID`: after a tracer was killed, every page
//! it had evicted goes back, and the processes run on untraced.

use crate::input::process_exists;
use anyhow::{Context, Result};

/// Releases `root` and the traced processes it forked; says what it did
/// unless `quiet`.
pub fn run(root: u32, quiet: bool) -> Result<()> {
    if !process_exists(root) {
        anyhow::bail!("cannot release process {root}: no such process");
    }
    // The traced processes it forked were traced too: release them all.
    let order = pagescope_linux::trace::release_order(root);
    // Descriptors of children forked just before pagescope died, kept
    // by its holder.
    let mut held = pagescope_linux::trace::Held::gather(&order);
    for &pid in &order {
        if pid != root && pagescope_linux::trace::end_stray_mover(pid) {
            if !quiet {
                eprintln!("ended mover {pid} left by a killed pagescope");
            }
            continue;
        }
        let parked_here = pagescope_linux::trace::is_parked(pid);
        if let Some(done) = held
            .release(pid, parked_here)
            .with_context(|| format!("cannot release process {pid}"))?
        {
            if !quiet {
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
        if parked > 0 && !quiet {
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
        if !quiet {
            eprintln!(
                "released {pid}: {} pages put back; it runs on untraced",
                done.copied
            );
        }
    }
    // Movers left behind programs that exited hold copies of their
    // descriptors (a pipe's write end keeps its reader waiting).
    let orphans = pagescope_linux::trace::end_orphaned_movers();
    if !orphans.is_empty() && !quiet {
        eprintln!(
            "ended {} mover(s) left by a killed pagescope behind a program that exited",
            orphans.len()
        );
    }
    // Closing what they held wakes whatever still waits on it.
    let ended = held.end();
    if ended > 0 && !quiet {
        eprintln!("ended {ended} holder(s) left by a killed pagescope");
    }
    // Every page is back and nothing waits: what pagescope put into
    // each process (descriptors, store, index, code, dead movers) goes.
    for &pid in &order {
        let removed = pagescope_linux::trace::remove_leftovers(pid)
            .with_context(|| format!("cannot release process {pid}"))?;
        if removed && !quiet {
            eprintln!("released {pid}: pagescope's descriptors and mappings removed");
        }
    }
    Ok(())
}
