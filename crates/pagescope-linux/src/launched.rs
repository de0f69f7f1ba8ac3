//! Programs pagescope launched (`record -- CMD`, `trace -- CMD`), ended
//! when pagescope fails: pagescope never exits while a program it
//! launched still runs (unless it was killed itself), since a program
//! left behind would run on under init, unobserved, after an error that
//! was pagescope's. A program that ends normally, or is let go on Ctrl-C,
//! is waited for as a shell would; this is for the other exits.

use crate::procfs::{descendants, list_pids, ProcDir};
use pagescope_sys::ptrace;
use pagescope_sys::signals::kill;
use pagescope_sys::wait::{self, waitpid};
use rustix::io::Errno;
use rustix::process::Signal;
use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// How many times the tree is listed while it is being stopped: each
/// listing can find only the children forked while the last was stopped.
const ROUNDS: usize = 64;

/// Ends `root`, a child of this process, and every process below it: each
/// is stopped first (SIGSTOP, listing the tree again until no new process
/// shows up, so that one forked meanwhile is caught before its parent
/// dies and it goes to init), then killed (SIGKILL). Does not reap: see
/// [`reap`], which must come after whatever else waits for the tree (a
/// tracer) has let go of it.
pub fn kill_tree(proc_root: &Path, root: u32) {
    let mut stopped: HashSet<u32> = HashSet::new();
    for _ in 0..ROUNDS {
        let fresh: Vec<u32> = descendants(proc_root, root)
            .into_iter()
            .filter(|&p| stopped.insert(p))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for p in fresh {
            let _ = kill(p, Signal::STOP.as_raw());
        }
    }
    // Stopped, none can fork: every one is in `stopped`.
    for &p in &stopped {
        let _ = kill(p, Signal::KILL.as_raw());
    }
}

/// The processes whose parent is this process (from `/proc/*/stat`).
pub fn own_children(proc_root: &Path) -> Vec<u32> {
    let me = std::process::id();
    let mut buf = Vec::new();
    list_pids(proc_root)
        .unwrap_or_default()
        .into_iter()
        .filter(|&pid| {
            ProcDir::open(proc_root, pid)
                .and_then(|d| d.stat(&mut buf))
                .is_ok_and(|s| s.ppid == me)
        })
        .collect()
}

/// How long [`reap`] waits for a killed program to end.
const REAP_WAIT: Duration = Duration::from_secs(10);

/// Waits for `root`, a child of this process killed by [`kill_tree`], to
/// end, and reaps it; returns at once if it was reaped already (by a
/// tracer thread). A thread of it that this process still traces may stop
/// on its way out (`PTRACE_EVENT_EXIT`): it is let go (detached), or it
/// would wait there for ever. Gives up after ten seconds (a task in an
/// uninterruptible sleep ends when that sleep does). `proc_root`: the
/// procfs where its threads are listed.
pub fn reap(proc_root: &Path, root: u32) {
    let deadline = Instant::now() + REAP_WAIT;
    let nohang = wait::ALL | wait::Options::NOHANG;
    loop {
        match waitpid(Some(root), nohang) {
            Ok(Some((_, st))) if st.is_gone() => return,
            Ok(None) | Err(Errno::INTR) => {}
            Ok(Some(_)) => {
                let _ = ptrace::detach(root, 0);
            }
            // Reaped by another thread, or not a child at all.
            Err(_) => return,
        }
        // Its other threads, stopped on their way out.
        let tasks = ProcDir::at(proc_root, root).tasks();
        for tid in tasks.into_iter().flatten() {
            if tid != root {
                if let Ok(Some((_, st))) = waitpid(Some(tid), nohang) {
                    if !st.is_gone() {
                        let _ = ptrace::detach(tid, 0);
                    }
                }
            }
        }
        if Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell that forks a sleeping grandchild: both are ended, the
    /// shell reaped, and the grandchild never reparented alive.
    #[test]
    fn a_tree_is_ended_and_its_root_reaped() {
        let proc_root = &crate::Root::default().proc;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 1000 & sleep 1000; wait"])
            .spawn()
            .unwrap();
        let root = child.id();
        let deadline = Instant::now() + Duration::from_secs(5);
        let tree = loop {
            let t = descendants(proc_root, root);
            if t.len() == 3 {
                break t;
            }
            assert!(Instant::now() < deadline, "the shell did not fork: {t:?}");
            std::thread::sleep(Duration::from_millis(5));
        };
        kill_tree(proc_root, root);
        reap(proc_root, root);
        assert!(!ProcDir::at(proc_root, root).exists());
        // The others were killed too: gone, or zombies for init, once
        // their exit has run.
        let state = |p: u32| ProcDir::at(proc_root, p).state(&mut Vec::new()).ok();
        for &p in &tree[1..] {
            let deadline = Instant::now() + Duration::from_secs(2);
            while !matches!(state(p), None | Some('Z')) {
                assert!(Instant::now() < deadline, "{p}: {:?}", state(p));
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        // Reaped already: this finds nothing to wait for.
        let _ = child.wait();
    }

    /// A program this process traces, which stops on its way out
    /// (`PTRACE_EVENT_EXIT`) until its tracer lets it go: reaped at once.
    #[test]
    fn a_traced_program_is_let_go_and_reaped() {
        let mut child = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .unwrap();
        let root = child.id();
        if let Err(e) = ptrace::seize(root, ptrace::PTRACE_O_TRACEEXIT) {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("skipped: ptrace of a child was refused ({e})");
            return;
        }
        let t = Instant::now();
        let proc_root = &crate::Root::default().proc;
        kill_tree(proc_root, root);
        reap(proc_root, root);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(!ProcDir::at(proc_root, root).exists());
        // Reaped already: this finds nothing to wait for.
        let _ = child.wait();
    }
}
