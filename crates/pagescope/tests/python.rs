//! `pagescope record` and `analyze` against a real program whose every
//! page is known beyond pagetest: a python script that maps anonymous
//! buffers with `mmap`, touches each of their pages on purpose, and logs
//! (one JSON line per phase, with CLOCK_MONOTONIC times) which pages it
//! touched and when. Its log is the truth: every view agrees with it
//! within 2%, or says in its notes why it can't.

#[macro_use]
mod util;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::*;

/// The workload. `python3 SCRIPT MODE LOG`; every line of LOG is a JSON
/// object with the pid that wrote it, the buffer's address range
/// (`start`, `end`), the pages touched and, for a phase, its monotonic
/// start and end.
///
/// - `passes`: writes every page of a 40 MiB buffer, 5 times, 1 s apart.
///   The buffer is the 4 MiB-aligned 40 MiB inside a larger mapping, so
///   that it is made of whole 2 MiB regions and whole groups of the
///   fault backend's sample.
/// - `children`: forks 5 children one after another; each maps its own
///   20 MiB, writes every page of it once and exits.
/// - `shared`: maps a 100 MiB shared anonymous buffer, writes it, then
///   forks 2 children that read every page of it over and over for 8 s.
const SCRIPT: &str = r#"
import ctypes, json, mmap, os, sys, time

PAGE = mmap.PAGESIZE
MIB = 1 << 20
mode, path = sys.argv[1], sys.argv[2]
log = open(path, "a", buffering=1)


def now():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def say(**kw):
    kw["pid"] = os.getpid()
    log.write(json.dumps(kw) + "\n")


def address(buf):
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


if mode == "passes":
    size, align = 40 * MIB, 4 * MIB
    buf = mmap.mmap(-1, size + align)
    off = -address(buf) % align
    start = address(buf) + off
    say(event="buffer", start=start, end=start + size, pages=size // PAGE)
    time.sleep(1)
    for n in range(5):
        t0 = now()
        for o in range(off, off + size, PAGE):
            buf[o] = n + 1
        t1 = now()
        say(event="pass", op="write", start=start, end=start + size,
            pages=size // PAGE, start_ns=t0, end_ns=t1)
        time.sleep(1)
elif mode == "children":
    size = 20 * MIB
    time.sleep(0.3)
    for n in range(5):
        pid = os.fork()
        if pid == 0:
            t0 = now()
            buf = mmap.mmap(-1, size)
            start = address(buf)
            for o in range(0, size, PAGE):
                buf[o] = 1
            say(event="child", op="write", start=start, end=start + size,
                pages=size // PAGE, start_ns=t0, end_ns=now())
            os._exit(0)
        os.waitpid(pid, 0)
    time.sleep(1.5)
elif mode == "shared":
    size = 100 * MIB
    buf = mmap.mmap(-1, size, flags=mmap.MAP_SHARED)
    start = address(buf)
    for o in range(0, size, PAGE):
        buf[o] = 1
    children = []
    for n in range(2):
        pid = os.fork()
        if pid == 0:
            # Until the test, its recording done, says stop (a slow
            # machine stretches the recording), or 60 s.
            t0 = now()
            deadline = t0 + 60 * 10**9
            passes = 0
            while now() < deadline and not os.path.exists(path + ".stop"):
                s = 0
                for o in range(0, size, PAGE):
                    s += buf[o]
                passes += 1
                time.sleep(0.02)
            say(event="reader", op="read", start=start, end=start + size,
                pages=size // PAGE, passes=passes, start_ns=t0, end_ns=now())
            os._exit(0)
        children.append(pid)
    say(event="ready", start=start, end=start + size, pages=size // PAGE,
        children=children)
    for pid in children:
        os.waitpid(pid, 0)
"#;

/// The python interpreter itself (not a wrapper script such as pyenv's
/// shim, which would exec it), or `None` (skipped) without python3.
fn python() -> Option<String> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output();
    match out {
        Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).trim().to_string()),
        _ => {
            skip("python3", "python3 is not installed");
            None
        }
    }
}

/// Whether the fault backend can run here, asked of the kernel: root and
/// a userfaultfd with write protection.
fn fault_available() -> bool {
    const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1;
    if !rustix::process::geteuid().is_root() {
        skip(
            "root",
            "the fault backend needs root (run the tests as root)",
        );
        return false;
    }
    if uffd_features().is_none_or(|f| f & UFFD_FEATURE_PAGEFAULT_FLAG_WP == 0) {
        skip(
            "userfaultfd",
            "this kernel has no userfaultfd with write protection",
        );
        return false;
    }
    true
}

/// The script written into `dir`, and the path of its log there.
fn workload(dir: &Path) -> (String, String) {
    let script = temp_path(dir, "workload.py");
    std::fs::write(&script, SCRIPT).unwrap();
    (script, temp_path(dir, "workload.log"))
}

/// The lines of the workload's log.
fn log_lines(log: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("the workload logs JSON lines"))
        .collect()
}

/// An integer figure of a row, which must not be null.
fn int(row: &Value, key: &str) -> u64 {
    row[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a count: {row}"))
}

/// Asserts `got` is within 2% of the log's `truth`.
fn within_2pct(what: &str, got: u64, truth: u64) {
    let err = (got as f64 - truth as f64).abs() / truth as f64;
    assert!(
        err <= 0.02,
        "{what}: pagescope says {got}, the workload's log {truth} ({:.2}% off)",
        err * 100.0
    );
}

/// Runs `record OPTIONS -o OUT -- PYTHON SCRIPT MODE LOG` to its end.
fn record_workload(options: &[&str], out: &str, python: &str, script: &str, mode: &str, log: &str) {
    let mut args = record_args(options, out);
    args.extend(["--", python, script, mode, log]);
    let o = run(&[], &args);
    assert!(
        o.status.success(),
        "record {options:?} of the {mode} workload failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A sampled fault recording of a program that writes its 40 MiB buffer
/// in full 5 times: each pass is a spike of the buffer's pages in
/// `temporal`, `wss` agrees interval by interval, `hugepages` agrees with
/// `temporal` of the whole program and counts the buffer's 20 full 2 MiB
/// regions in an interval that holds a whole pass,
/// and `processes` holds the 5 passes; written pages the same. The
/// buffer is made of whole groups of the sample (see [`SCRIPT`]), so the
/// sample's estimate of it is within 0.6% (a group holds 102 or 103 of
/// its 1 024 pages at 10%).
#[test]
fn sampled_fault_recording_of_a_python_program_matches_its_log() {
    let Some(python) = python() else { return };
    if !fault_available() {
        return;
    }
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let (script, log) = workload(dir.path());
    let out = temp_path(dir.path(), "passes.rec");
    record_workload(
        &[
            "--backend",
            "fault",
            "--sample",
            "0.1",
            "--interval",
            "200ms",
        ],
        &out,
        &python,
        &script,
        "passes",
        &log,
    );
    let lines = log_lines(&log);
    let buffer = lines.iter().find(|l| l["event"] == "buffer").unwrap();
    let pid = int(buffer, "pid");
    let pages = int(buffer, "pages");
    let passes: Vec<&Value> = lines.iter().filter(|l| l["event"] == "pass").collect();
    assert_eq!(passes.len(), 5, "{lines:?}");
    let range = range_arg(buffer_of(buffer));

    let temporal = analyze_json(&out, "temporal", &["--range", &range]);
    let t0 = int(&temporal, "start_monotonic_ns");
    let intervals = rows(&temporal, "intervals");
    let wss = rows(
        &analyze_json(&out, "wss", &["--range", &range]),
        "intervals",
    );
    let huge = rows(&analyze_json(&out, "hugepages", &[]), "intervals");
    let whole = rows(&analyze_json(&out, "temporal", &[]), "intervals");
    assert_eq!(wss.len(), intervals.len());
    assert_eq!(huge.len(), intervals.len());
    let regions = pages / 512;
    let mut in_one = 0;
    for (n, pass) in passes.iter().enumerate() {
        // The intervals the pass overlaps (in recording time): they hold
        // its pages, each referenced once.
        let (s, e) = (int(pass, "start_ns") - t0, int(pass, "end_ns") - t0);
        let inside: Vec<usize> = (0..intervals.len())
            .filter(|&i| int(&intervals[i], "start_ns") < e && int(&intervals[i], "end_ns") > s)
            .collect();
        assert!(!inside.is_empty(), "pass {n} in no interval");
        let sum =
            |rows: &[Value], key: &str| -> u64 { inside.iter().map(|&i| int(&rows[i], key)).sum() };
        within_2pct(
            &format!("temporal: pass {n}"),
            sum(&intervals, "user_pages"),
            pages,
        );
        within_2pct(
            &format!("temporal: pass {n} written"),
            sum(&intervals, "written_pages"),
            pages,
        );
        within_2pct(&format!("wss: pass {n}"), sum(&wss, "wss_pages"), pages);
        for &i in &inside {
            assert_close(
                &format!("wss against temporal, interval {i}"),
                int(&wss[i], "wss_pages") as f64,
                int(&intervals[i], "user_pages") as f64,
                2.0,
            );
        }
        // hugepages has no --range: it counts the whole program's pages,
        // as temporal does without one, the buffer's among them.
        let all = sum(&whole, "user_pages");
        within_2pct(
            &format!("hugepages: pass {n} against temporal"),
            sum(&huge, "referenced_pages"),
            all,
        );
        assert!(
            all + pages / 50 >= pages,
            "pass {n}: the program referenced {all} pages, its buffer {pages}"
        );
        let full = sum(&huge, "full_regions");
        if inside.len() == 1 {
            in_one += 1;
            assert!(
                (regions..=regions + 1).contains(&full),
                "hugepages: pass {n} fills {full} 2 MiB regions, the buffer is {regions}"
            );
        } else {
            assert!(full <= regions + 1, "pass {n}: {full} full regions");
        }
    }
    assert!(
        in_one >= 1,
        "no pass fell inside one interval: {intervals:?}"
    );
    // Nothing in the buffer between passes.
    for row in &intervals {
        let (s, e) = (int(row, "start_ns") + t0, int(row, "end_ns") + t0);
        let touched = passes
            .iter()
            .any(|p| int(p, "start_ns") < e && int(p, "end_ns") > s);
        if !touched {
            assert_eq!(int(row, "user_pages"), 0, "interval without a pass: {row}");
        }
    }
    // The program's totals over its buffer: the 5 passes.
    let procs = rows(
        &analyze_json(&out, "processes", &["--range", &range]),
        "processes",
    );
    let row = procs
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} not among {procs:?}"));
    within_2pct("processes: user_pages", int(row, "user_pages"), 5 * pages);
    within_2pct(
        "processes: written_pages",
        int(row, "written_pages"),
        5 * pages,
    );
    within_2pct("processes: peak_pages", int(row, "peak_pages"), pages);
    // The figures are estimates, and say so.
    let notes = temporal["notes"].to_string();
    assert!(notes.contains("counts are estimates"), "{notes}");
}

/// The children's lines of the `children` workload's log: 5, each with
/// its own 20 MiB written once.
fn children_of(log: &str) -> Vec<Value> {
    let children: Vec<Value> = log_lines(log)
        .into_iter()
        .filter(|l| l["event"] == "child")
        .collect();
    assert_eq!(children.len(), 5, "{children:?}");
    children
}

/// Short-lived children under the fault backend: 5 forked children, one
/// after the other, each writing a fresh 20 MiB buffer once and exiting;
/// each shows its buffer's pages (read when it exited), referenced and
/// written, within 2%.
#[test]
fn fault_recording_counts_each_short_lived_python_child() {
    let Some(python) = python() else { return };
    if !fault_available() {
        return;
    }
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let (script, log) = workload(dir.path());
    let out = temp_path(dir.path(), "children.rec");
    record_workload(
        &["--backend", "fault", "--interval", "1s"],
        &out,
        &python,
        &script,
        "children",
        &log,
    );
    for child in children_of(&log) {
        let pid = int(&child, "pid");
        let pages = int(&child, "pages");
        let range = range_arg(buffer_of(&child));
        let select = ["--pid", &pid.to_string(), "--range", &range];
        // The working set over the child's buffer counts its pages, each
        // once (page by page, whatever the interval it fell in).
        let wss = rows(&analyze_json(&out, "wss", &select), "intervals");
        let sum: u64 = wss.iter().map(|r| int(r, "wss_pages")).sum();
        within_2pct(&format!("child {pid}: wss"), sum, pages);
        let report = analyze_json(&out, "processes", &select);
        let procs = rows(&report, "processes");
        let row = procs
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("child {pid} not among {procs:?}"));
        let notes = report["notes"].to_string();
        // It is in the recording (with the pages read at its exit), even
        // if it never lived at a boundary: no note may say otherwise.
        assert!(
            !notes.contains(&format!("process {pid} is not in the recording")),
            "child {pid} has its row, and a note says it is not there: {notes}"
        );
        if row["command"] == "" {
            assert!(
                notes.contains(&format!("process {pid} lived between two boundaries"))
                    || notes.contains(&format!("process {pid} was exiting when first seen")),
                "child {pid} has no command line, and no note says why: {notes}"
            );
        }
        // Per-process counts select whole rows (VMAs, or for a process
        // read at its exit, the blocks that hold its pages): where the
        // buffer's row holds more of the child's memory, that is said.
        let user = int(row, "user_pages");
        if user > pages + pages / 50 {
            assert!(
                notes.contains("counted whole"),
                "child {pid}: {user} pages over its buffer of {pages}, and no note says why: {notes}"
            );
        } else {
            within_2pct(&format!("child {pid}: user_pages"), user, pages);
        }
        let written = int(row, "written_pages");
        assert!(
            written + pages / 50 >= pages && written <= user,
            "child {pid}: {written} pages written, its buffer {pages}"
        );
    }
}

/// Short-lived children under the refs backend: each of the 5 forked
/// children is reset at its fork, before its first instruction, and
/// read on its way out, so one that starts and exits between two
/// boundaries shows its buffer's pages, referenced (and written, where
/// writes are tracked) within 2%, and no note says such a child is not
/// seen.
#[test]
fn refs_recording_counts_each_short_lived_python_child() {
    let Some(python) = python() else { return };
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let (script, log) = workload(dir.path());
    let out = temp_path(dir.path(), "children.rec");
    record_workload(
        &["--backend", "refs", "--interval", "1s"],
        &out,
        &python,
        &script,
        "children",
        &log,
    );
    let temporal = analyze_json(&out, "temporal", &[]);
    let notes = temporal["notes"].to_string();
    assert!(
        notes.contains("short-lived child) is counted") && !notes.contains("is not seen"),
        "the note on short-lived processes: {notes}"
    );
    let tracked = !notes.contains("written pages are not known");
    for child in children_of(&log) {
        let pid = int(&child, "pid");
        let pages = int(&child, "pages");
        let range = range_arg(buffer_of(&child));
        let select = ["--pid", &pid.to_string(), "--range", &range];
        let report = analyze_json(&out, "processes", &select);
        let procs = rows(&report, "processes");
        let row = procs
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("child {pid} not among {procs:?}"));
        // Rows are whole VMAs: where the buffer's holds more of the
        // child's memory, that is said.
        let notes = report["notes"].to_string();
        let user = int(row, "user_pages");
        if user > pages + pages / 50 {
            assert!(
                notes.contains("counted whole"),
                "child {pid}: {user} pages over its buffer of {pages}, and no note says why: {notes}"
            );
        } else {
            within_2pct(&format!("child {pid}: user_pages"), user, pages);
        }
        if tracked {
            let written = int(row, "written_pages");
            assert!(
                written + pages / 50 >= pages && written <= user,
                "child {pid}: {written} pages written, its buffer {pages}"
            );
        }
    }
}

/// A workload started by the test: killed and reaped when dropped (its
/// children end by themselves when their time is up).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (up to 30 s) for a line with `event` in the workload's log.
fn wait_for_line(log: &str, event: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(l) = log_lines(log).into_iter().find(|l| l["event"] == event) {
            return l;
        }
        assert!(Instant::now() < deadline, "the workload logged no {event}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The whole machine under the refs backend while 2 children read one
/// 100 MiB shared buffer in full, over and over: the machine's
/// user_pages is a sum over processes (the buffer counts twice), and the
/// notes say so; each child's own figure is the buffer's 25 600 pages in
/// every interval it read throughout, within 2%.
#[test]
fn system_refs_recording_counts_a_shared_buffer_per_python_child() {
    let Some(python) = python() else { return };
    if !rustix::process::geteuid().is_root() {
        skip!(
            "root",
            "a --system recording needs root (run the tests as root)"
        );
    }
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let (script, log) = workload(dir.path());
    let out = temp_path(dir.path(), "shared.rec");
    let mut workload = Reaped(
        Command::new(&python)
            .args([&script, "shared", &log])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let ready = wait_for_line(&log, "ready");
    let recorded = run(&[], &record_args(&system_refs("4s"), &out));
    std::fs::write(format!("{log}.stop"), "").unwrap();
    let status = workload.0.wait().unwrap();
    assert!(
        recorded.status.success(),
        "record --system failed: {}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    assert!(status.success(), "the workload failed: {status}");
    let pages = int(&ready, "pages");
    let range = range_arg(buffer_of(&ready));
    let readers: Vec<Value> = log_lines(&log)
        .into_iter()
        .filter(|l| l["event"] == "reader")
        .collect();
    assert_eq!(readers.len(), 2, "{readers:?}");

    let temporal = analyze_json(&out, "temporal", &[]);
    let notes = temporal["notes"].to_string();
    assert!(
        notes.contains("sum over processes"),
        "the machine's user_pages counts the shared buffer once per child, and no note says so: {notes}"
    );
    let t0 = int(&temporal, "start_monotonic_ns");
    // What the note says: in an interval both children read throughout,
    // the machine's figure holds the buffer once per child.
    let both = |row: &Value| {
        let (is, ie) = (int(row, "start_ns") + t0, int(row, "end_ns") + t0);
        readers
            .iter()
            .all(|r| int(r, "start_ns") <= is && ie <= int(r, "end_ns"))
    };
    for row in rows(&temporal, "intervals").iter().filter(|r| both(r)) {
        let user = int(row, "user_pages");
        assert!(
            user + pages / 25 >= 2 * pages,
            "interval {}: the machine's {user} pages, two children reading {pages}",
            row["seq"]
        );
    }
    for reader in &readers {
        let pid = int(reader, "pid").to_string();
        let (s, e) = (int(reader, "start_ns"), int(reader, "end_ns"));
        let rows_of = rows(
            &analyze_json(&out, "temporal", &["--pid", &pid, "--range", &range]),
            "intervals",
        );
        // Intervals the child read throughout.
        let mut held = 0;
        for row in &rows_of {
            let (is, ie) = (int(row, "start_ns") + t0, int(row, "end_ns") + t0);
            if s <= is && ie <= e {
                within_2pct(
                    &format!("child {pid}, interval {}", row["seq"]),
                    int(row, "user_pages"),
                    pages,
                );
                held += 1;
            }
        }
        assert!(
            held >= 3,
            "child {pid} read throughout only {held} intervals"
        );
        let procs = rows(
            &analyze_json(&out, "processes", &["--pid", &pid, "--range", &range]),
            "processes",
        );
        assert_eq!(procs.len(), 1, "{procs:?}");
        within_2pct(
            &format!("child {pid}: peak_pages"),
            int(&procs[0], "peak_pages"),
            pages,
        );
        let intervals = int(&procs[0], "intervals");
        within_2pct(
            &format!("child {pid}: user_pages per interval"),
            int(&procs[0], "user_pages") / intervals.max(1),
            pages,
        );
    }
}
