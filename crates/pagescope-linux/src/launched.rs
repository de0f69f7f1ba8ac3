//! Programs pagescope launched (`record -- CMD`, `trace -- CMD`), ended
//! when pagescope fails: pagescope never exits while a program it
//! launched still runs (unless it was killed itself), since a program
//! left behind would run on under init, unobserved, after an error that
//! was pagescope's. A program that ends normally, or is let go on Ctrl-C,
//! is waited for as a shell would; this is for the other exits.

use crate::procfs::{descendants, list_pids, ProcDir};
use pagescope_sys::ptrace;
use pagescope_sys::signals::kill;
use pagescope_sys::wait::{self, waitpid, Status};
use rustix::io::Errno;
use rustix::process::Signal;
use std::collections::HashSet;
use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
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

/// Finds `prog` the way `execvp` would, so that a missing program is an
/// error here rather than an exit code from the child.
pub fn resolve(prog: &str) -> io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if prog.contains('/') {
        let p = PathBuf::from(prog);
        return if executable(&p) {
            Ok(p)
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{prog}: not an executable file"),
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| executable(p))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{prog}: command not found in PATH"),
            )
        })
}

fn cstring(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("argument {s:?} contains a NUL byte"),
        )
    })
}

/// Forks a child that will run `argv` (with `program` its resolved path)
/// and waits until it has stopped itself (SIGSTOP) before its `execve`
/// ([`pagescope_sys::clone::fork_exec_stopped`]: it starts with the
/// signals this process was given). A tracer attaches it there; SIGCONT
/// lets it go on to its exec.
pub fn fork_stopped(program: &Path, argv: &[String]) -> io::Result<u32> {
    let path = cstring(&program.to_string_lossy())?;
    let args: Vec<CString> = argv.iter().map(|a| cstring(a)).collect::<io::Result<_>>()?;
    let child = pagescope_sys::clone::fork_exec_stopped(&path, &args)? as u32;
    match waitpid(Some(child), wait::Options::UNTRACED)? {
        Some((_, Status::Stopped(sig))) if sig == Signal::STOP.as_raw() => Ok(child),
        other => Err(io::Error::other(format!(
            "the child did not stop before exec: {other:?}"
        ))),
    }
}

/// A command started by [`hold_at_exec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// Its pid.
    pub pid: u32,
    /// Whether it is held: attached (`PTRACE_SEIZE`) and stopped after
    /// its exec, at an interrupt stop (`PTRACE_EVENT_STOP`) before its
    /// first instruction, until the caller resumes it (`PTRACE_CONT`) or
    /// lets go of it (`PTRACE_DETACH`). Not held where ptrace of a child
    /// is refused (a seccomp filter, Yama's `ptrace_scope` 3): then it
    /// runs from its start.
    pub held: bool,
}

/// Starts `argv` and holds it at its exec ([`Held`]), attached with
/// `options` (`PTRACE_O_TRACEEXEC` and `PTRACE_O_TRACESYSGOOD` are
/// added): a recorder can clear its reference bits before it runs, so
/// that what it does from its first instruction is recorded, nothing
/// before. A command whose exec fails is an error (it has exited, and is
/// reaped).
pub fn hold_at_exec(argv: &[String], options: u32) -> io::Result<Held> {
    let program = resolve(&argv[0])?;
    let pid = fork_stopped(&program, argv)?;
    // TRACESYSGOOD: the system calls a tracer injects at the stop must
    // not stop as a SIGTRAP would.
    let options = options | ptrace::PTRACE_O_TRACEEXEC | ptrace::PTRACE_O_TRACESYSGOOD;
    let held = ptrace::seize(pid, options).is_ok();
    kill(pid, Signal::CONT.as_raw())?;
    if !held {
        return Ok(Held { pid, held });
    }
    let mut exec = false;
    loop {
        let deliver = match waitpid(Some(pid), wait::ALL) {
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(None) => continue,
            // Exec'd: moved on to an interrupt stop, still before its
            // first instruction, where a tracer can inject system calls
            // (record's write tracking gives it a userfaultfd there).
            Ok(Some((_, Status::Event { event, .. }))) if event == ptrace::event::EXEC => {
                if let Err(e) = ptrace::interrupt(pid) {
                    let _ = kill(pid, Signal::KILL.as_raw());
                    reap(&crate::Root::default().proc, pid);
                    return Err(e);
                }
                exec = true;
                0
            }
            Ok(Some((_, Status::Event { event, signal })))
                if exec && event == ptrace::event::STOP && signal == Signal::TRAP.as_raw() =>
            {
                return Ok(Held { pid, held });
            }
            Ok(Some((_, st))) if st.is_gone() => {
                return Err(io::Error::other(format!(
                    "{}: could not be run ({st:?})",
                    program.display()
                )));
            }
            // Its own SIGSTOP is spent; a SIGCONT or another signal is
            // delivered as it would be.
            Ok(Some((_, Status::Stopped(sig)))) if sig != Signal::STOP.as_raw() => sig,
            // The stop it was in at the attach (`PTRACE_EVENT_STOP`).
            Ok(Some(_)) => 0,
        };
        if let Err(e) = ptrace::cont(pid, deliver) {
            let _ = kill(pid, Signal::KILL.as_raw());
            reap(&crate::Root::default().proc, pid);
            return Err(e);
        }
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
