//! `pagescope trace --pid`: attached programs traced exactly, their job
//! control and children kept, and left running as they were.

#[macro_use]
mod util;

use pagescope_core::format::Completeness;
use pagescope_core::trace::Ref;
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::trace::*;
use util::*;

/// A shell script that runs pagetest with `args` and, once it is done,
/// prints `shell-done`: the shell forks pagetest and waits for it.
fn shell_then_pagetest(args: &str) -> String {
    format!("{} {args}; echo shell-done", pagetest_bin().display())
}

/// Attaches `trace --pid` (evicting by `evict`, 2 MiB pool) to a
/// pagetest reading its buffer of `size` 3 times (with `extra` options),
/// once it waits after `ready` (blocked in `read`, which must be
/// restarted), and checks that every page it had went out: each pass is
/// logged exactly, in ascending order, all reads, and the checksum shows
/// every page came back with its data.
fn attach_reads_exactly(size: &str, evict: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let bin = pagetest_bin();
    let mut argv = vec![
        bin.to_str().unwrap(),
        "--size",
        size,
        "--op",
        "read",
        "--iterations",
        "3",
        "--wait-stdin",
    ];
    argv.extend_from_slice(extra);
    let lines = pagetest_lines(attached_run(&argv, evict, "2M", &trace).as_bytes());
    let (start, end) = (
        lines[0]["start"].as_u64().unwrap(),
        lines[0]["end"].as_u64().unwrap(),
    );
    let pages = lines[0]["pages"].as_u64().unwrap() as usize;
    let done = lines.iter().find(|l| l["event"] == "done").unwrap();
    assert_eq!(
        done["checksum"],
        3 * pages as u64,
        "{evict}: pages lost their data"
    );
    let (all, complete) = read_all(&trace);
    assert_eq!(complete, Completeness::Complete);
    let in_buf: Vec<&Ref> = all
        .refs
        .iter()
        .filter(|r| r.addr >= start && r.addr < end)
        .collect();
    assert_eq!(in_buf.len(), 3 * pages, "{evict}: references to the buffer");
    assert!(in_buf.iter().all(|r| !r.write), "{evict}: a write logged");
    for pass in in_buf.chunks(pages) {
        assert!(
            pass.windows(2).all(|w| w[0].addr + 4096 == w[1].addr),
            "{evict}: a pass not in ascending order"
        );
    }
}

/// `trace --pid`, by each eviction method.
#[test]
fn attach_counts_every_read_exactly() {
    require_trace!();
    let _serial = serial();
    for evict in methods() {
        attach_reads_exactly("16M", evict, &[]);
    }
    if pagescope_linux::trace::shmem_supported() {
        attach_reads_exactly("16M", "auto", &["--mode", "shm"]);
    }
}

/// A program stopped by job control (SIGSTOP, as Ctrl-Z stops a job)
/// stays stopped while traced: stopped before the attach or during the
/// trace, it runs again only at SIGCONT, and it is let go as stopped as it
/// was found.
#[test]
fn job_control_stops_hold_while_traced() {
    use rustix::process::{kill_process, Pid, Signal};
    use std::io::{BufRead, BufReader};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let mut prog = Command::new(pagetest_bin())
        .args(["--size", "4M", "--iterations", "100000", "--sleep", "20ms"])
        .process_group(0)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(prog.id() as i32).unwrap();
    let lines = Arc::new(AtomicU64::new(0));
    let reader = {
        let out = BufReader::new(prog.stdout.take().unwrap());
        let lines = lines.clone();
        std::thread::spawn(move || {
            for _ in out.lines().map_while(|l| l.ok()) {
                lines.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let signal = |s: Signal| kill_process(pid, s).unwrap();
    let state = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", prog.id())).unwrap();
        stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap()
    };
    // Holds still for a while: no line comes.
    let holds_still = |why: &str| {
        std::thread::sleep(Duration::from_millis(150));
        let before = lines.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(lines.load(Ordering::SeqCst), before, "it ran {why}");
    };
    let runs = |why: &str| {
        let before = lines.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            lines.load(Ordering::SeqCst) > before,
            "it did not run {why}"
        );
    };
    while lines.load(Ordering::SeqCst) < 2 {
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(Signal::STOP);
    holds_still("after SIGSTOP, untraced");
    let mut tracer = Command::new(pagescope_bin())
        .args([
            "trace",
            "--pool",
            "1M",
            "-o",
            &trace,
            "--pid",
            &prog.id().to_string(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A failed check leaves neither running (the tracer first, which
    // lets the program go).
    let _guard = KillOnDrop(vec![tracer.id(), prog.id()]);
    let mut err = BufReader::new(tracer.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("tracing process") {
        assert!(err.read_line(&mut said).unwrap() > 0, "{said}");
    }
    holds_still("when attached while stopped");
    signal(Signal::CONT);
    runs("at SIGCONT, traced");
    signal(Signal::STOP);
    holds_still("after SIGSTOP, traced");
    kill_process(Pid::from_raw(tracer.id() as i32).unwrap(), Signal::INT).unwrap();
    let status = tracer.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert_eq!(state(), 'T', "let go, it must be stopped as it was");
    holds_still("once let go");
    signal(Signal::CONT);
    runs("at SIGCONT, let go");
    prog.kill().unwrap();
    prog.wait().unwrap();
    reader.join().unwrap();
}

/// `trace --pid` of a shell waiting for a pagetest it forked before the
/// attach: the child is traced too, as it was attached itself (every page
/// it had goes out, and each pass over its buffer is logged exactly, under
/// its own pid), and it computes what it computes untraced.
#[test]
fn attach_traces_the_children_it_had() {
    require_trace!();
    let _serial = serial();
    let script = shell_then_pagetest("--size 8M --op read --iterations 3 --wait-stdin");
    for evict in methods() {
        let dir = tempfile::tempdir().unwrap();
        let trace = temp_path(dir.path(), "t.trace");
        let output = attached_run(&["sh", "-c", &script], evict, "2M", &trace);
        let (json, rest): (Vec<&str>, Vec<&str>) = output.lines().partition(|l| l.starts_with('{'));
        assert_eq!(rest, ["shell-done"], "{evict}: {output}");
        let lines = pagetest_lines(json.join("\n").as_bytes());
        let (start, end, pid) = (
            lines[0]["start"].as_u64().unwrap(),
            lines[0]["end"].as_u64().unwrap(),
            lines[0]["pid"].as_u64().unwrap() as u32,
        );
        let pages = lines[0]["pages"].as_u64().unwrap() as usize;
        let done = lines.iter().find(|l| l["event"] == "done").unwrap();
        assert_eq!(done["checksum"], 3 * pages as u64, "{evict}: pages lost");
        let (all, complete) = read_all(&trace);
        assert_eq!(complete, Completeness::Complete);
        let in_buf: Vec<&Ref> = all
            .refs
            .iter()
            .filter(|r| r.pid == pid && r.addr >= start && r.addr < end)
            .collect();
        assert_eq!(in_buf.len(), 3 * pages, "{evict}: the child's references");
        assert!(in_buf.iter().all(|r| !r.write), "{evict}: a write logged");
    }
}

/// The same shell and child, the tracer SIGKILLed while the child sleeps
/// between two passes with most of its buffer away: `--release` of the
/// shell puts back the child's pages too, and the child's second pass
/// reads every page.
#[test]
fn sigkill_then_release_of_an_attached_shell_and_the_child_it_had() {
    use std::io::{BufRead, Read};
    require_trace!();
    let _serial = serial();
    let script = shell_then_pagetest("--size 16M --op read --iterations 2 --sleep 2s --wait-stdin");
    for evict in methods() {
        let dir = tempfile::tempdir().unwrap();
        let trace = temp_path(dir.path(), "t.trace");
        let mut a = Attached::start(&["sh", "-c", &script], evict, "2M", &trace);
        let sh = a.prog.id();
        let _cleanup = KillOnDrop(vec![sh]);
        let ready: Value = serde_json::from_str(&a.first).unwrap();
        let child = ready["pid"].as_u64().unwrap() as u32;
        a.go();
        // The first pass, then the kill while the child sleeps.
        let mut line = String::new();
        a.out.read_line(&mut line).unwrap();
        assert!(line.contains("\"iteration\""), "{evict}: {line}");
        kill_tracer(&mut a.tracer);
        let said = release(sh, evict);
        assert!(
            said.contains(&format!("released {child}:")),
            "{evict}: {said}"
        );
        // The killed tracer's observer lock on the shell is gone too.
        let left: Vec<_> = std::fs::read_dir("/run/pagescope")
            .unwrap()
            .flatten()
            .filter(|e| {
                let name = e.file_name();
                name.to_str()
                    .is_some_and(|n| n.starts_with(&format!("{sh}-")) && n.ends_with(".lock"))
            })
            .collect();
        assert!(left.is_empty(), "{evict}: left in /run/pagescope: {left:?}");
        let mut rest = String::new();
        a.out.read_to_string(&mut rest).unwrap();
        assert!(a.prog.wait().unwrap().success(), "{evict}: {rest}");
        let lines: Vec<&str> = rest.lines().collect();
        assert_eq!(lines.last(), Some(&"shell-done"), "{evict}: {rest}");
        let done: Value = serde_json::from_str(lines[lines.len() - 2]).unwrap();
        assert_eq!(done["event"], "done", "{evict}: {rest}");
        let pages = ready["pages"].as_u64().unwrap();
        assert_eq!(done["checksum"], 2 * pages, "{evict}: the child lost pages");
    }
}

/// `trace --pid` of a program whose seccomp filter makes the `userfaultfd`
/// system call fail: the tracer makes the descriptor through
/// /dev/userfaultfd instead.
#[test]
fn attach_through_dev_userfaultfd_when_the_system_call_is_refused() {
    require_trace!();
    if !Path::new("/dev/userfaultfd").exists() {
        skip!(
            "dev-userfaultfd",
            "no /dev/userfaultfd (Linux 6.1 or later with CONFIG_USERFAULTFD)"
        );
    }
    let _serial = serial();
    attach_reads_exactly("4M", "auto", &["--deny-userfaultfd"]);
}

/// `trace --pid` of a shell that forks and execs all the time (so a fork
/// may be under way at the attach): it goes on forking while traced,
/// and after SIGTERM to the tracer, untraced.
#[test]
fn attach_to_a_forking_shell_keeps_it_running() {
    require_trace!();
    use std::io::{BufRead, BufReader};
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let count = temp_path(dir.path(), "count");
    let script = format!("i=0; while :; do i=$((i+1)); /bin/true; echo $i > {count}; done");
    let mut shell = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let counted = || {
        std::fs::read_to_string(&count)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let progresses = || {
        let before = counted();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if counted() > before + 10 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    };
    assert!(progresses(), "the shell does not run");
    let mut tracer = Command::new(pagescope_bin())
        .args(["trace", "-o", &trace, "--pid", &shell.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(tracer.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("tracing process") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "the tracer ended");
    }
    let traced = progresses();
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&tracer),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = tracer.wait().unwrap();
    let untraced = progresses();
    let _ = shell.kill();
    let _ = shell.wait();
    assert!(traced, "the shell stalled while traced");
    assert_eq!(status.code(), Some(130), "tracer: {status:?}");
    assert!(untraced, "the shell stalled after the tracer let it go");
}

/// `trace --pid` of a Python program whose four threads wait on an event
/// (in `futex`) while the tracer attaches, then hash generated data: the
/// same digests as untraced.
#[test]
fn attached_threads_compute_what_they_compute_untraced() {
    require_trace!();
    let _serial = serial();
    let script = r#"
import hashlib, sys, threading
go = threading.Event()
res = [None] * 4
def work(i):
    go.wait()
    h = hashlib.sha256()
    for j in range(4000):
        h.update(bytes([(i * 7 + j) % 256]) * (100 * (j % 50 + 1)))
    res[i] = h.hexdigest()
ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in ts:
    t.start()
print("ready", flush=True)
sys.stdin.readline()
go.set()
for t in ts:
    t.join()
print(res)
"#;
    let plain = {
        use std::io::Write;
        let mut c = Command::new(python3())
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    for evict in methods() {
        let dir = tempfile::tempdir().unwrap();
        let trace = temp_path(dir.path(), "t.trace");
        let traced = attached_run(&[&python3(), "-c", script], evict, "512K", &trace);
        assert_eq!(traced, plain, "{evict}");
        let refs = report_json(&["analyze", &trace, "refs", "--format", "json"]);
        let threads = refs["threads"].as_array().unwrap();
        assert!(
            threads.len() >= 4,
            "{evict}: references from {} threads",
            threads.len()
        );
    }
}

/// An attached program's transparent huge pages, which moving its pages
/// out and back splits, are made again when it is let go: after Ctrl-C
/// of the trace its smaps_rollup counts as many `AnonHugePages` as an
/// untraced run of the same program does (before: 0), and it runs on to
/// the same result.
#[test]
fn an_attached_programs_huge_pages_are_made_again_when_it_is_let_go() {
    require_trace!();
    let _serial = serial();
    let pagetest = pagetest_bin();
    let argv = [
        pagetest.to_str().unwrap(),
        "--size",
        "64M",
        "--thp",
        "--prefault",
        "--wait-stdin",
        "--op",
        "read",
        "--iterations",
        "1",
    ];
    let huge_kb = |pid: u32| smaps_rollup(pid).get("AnonHugePages").copied().unwrap_or(0);
    // What the kernel gives this program untraced.
    let untraced = Pagetest::start(&[], &argv[1..], "ready");
    let want = huge_kb(untraced.pid());
    drop(untraced);
    if want == 0 {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        skip!(
            "thp",
            format!(
                "the kernel gave pagetest --thp no huge page (enabled: {})",
                mode.trim()
            )
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let mut a = Attached::start(&argv, "auto", "2M", &trace);
    let pid = a.prog.id();
    assert_eq!(huge_kb(pid), 0, "traced, its pages are away");
    let int = rustix::process::Signal::INT;
    rustix::process::kill_process(rustix::process::Pid::from_child(&a.tracer), int).unwrap();
    assert_eq!(a.tracer.wait().unwrap().code(), Some(130));
    assert_eq!(huge_kb(pid), want, "let go");
    a.go();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut a.out, &mut rest).unwrap();
    assert!(a.prog.wait().unwrap().success());
    let done: Value = serde_json::from_str(rest.lines().last().unwrap()).unwrap();
    let ready: Value = serde_json::from_str(&a.first).unwrap();
    assert_eq!(done["checksum"], ready["pages"], "{rest}");
}
