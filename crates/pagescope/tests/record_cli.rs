//! `pagescope record` as a command: the recorder killed or interrupted,
//! `--duration`, bad input and refusals named by their cause, other
//! pagescopes and tracers, private files and standard output, a full
//! file system, and the program's descriptor table left as it was.

#[macro_use]
mod util;

use pagescope_core::format::Completeness;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::record::*;
use util::*;

/// The state letter of a process (`R`, `S`, `t` for traced-stopped...).
fn state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(") ")?.1.chars().next()
}

/// A pagetest writing 64 MiB every `sleep`, recorded at 50 ms into `out`.
fn record_running_pagetest(out: &str, sleep: &str) -> (Pagetest, std::process::Child) {
    let pt = Pagetest::start(
        &[],
        &[
            "--size",
            "64M",
            "--op",
            "write",
            "--iterations",
            "1000",
            "--sleep",
            sleep,
        ],
        "ready",
    );
    let rec = Command::new(pagescope_bin())
        .args(["record", "-q", "--interval", "50ms", "-o", out, "--pid"])
        .arg(pt.pid().to_string())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    (pt, rec)
}

#[test]
fn killed_recorder_leaves_readable_file_and_running_program() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "k.rec");
    let (pt, mut rec) = record_running_pagetest(&out, "50ms");
    let grown = wait_for(Duration::from_secs(10), || {
        std::fs::metadata(&out).is_ok_and(|m| m.len() > 2000)
    });
    rec.kill().unwrap();
    rec.wait().unwrap();
    assert!(grown, "the recorder wrote nothing");
    let (r, done) = read_recording(&out);
    assert!(matches!(done, Completeness::CutShort { .. }));
    assert!(r.intervals.len() >= 3, "{} intervals", r.intervals.len());
    assert!(r.intervals.iter().any(|i| i.total().user > 0));
    // The kernel detached the program: it runs on, not stopped.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        matches!(state(pt.pid()), Some('R' | 'S')),
        "pagetest is {:?}",
        state(pt.pid())
    );
    let report = run_ok(&["analyze", &out, "temporal"]);
    assert!(String::from_utf8_lossy(&report.stderr).contains("cut short"));
}

/// The recorder killed while it gives a process its write tracking (a
/// userfaultfd made by an injected call): the thread it was injecting
/// into waits, parked at the bootstrap in its vDSO, instead of running on
/// with the call's registers; `trace --release` gives them back, and the
/// program goes on and finishes.
#[test]
fn recorder_killed_in_an_injection_leaves_the_thread_parked() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "p.rec");
    let mut pt = Pagetest::start(
        &[],
        &[
            "--size",
            "16M",
            "--op",
            "write",
            "--iterations",
            "2",
            "--sleep",
            "0",
            "--delay",
            "1500ms",
        ],
        "ready",
    );
    let pid = pt.pid().to_string();
    let status = Command::new(pagescope_bin())
        .env("PAGESCOPE_DIE_IN_INJECTION", "write-tracking")
        .args([
            "record",
            "-q",
            "--backend",
            "refs",
            "-o",
            &out,
            "--pid",
            &pid,
        ])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    if std::os::unix::process::ExitStatusExt::signal(&status) != Some(9) {
        // A kernel with soft-dirty bits tracks writes with them, and one
        // without asynchronous write protection (Linux 6.7) does not track
        // them: no injection. Any other must have injected.
        let soft_dirty = std::fs::read_to_string("/proc/self/smaps").is_ok_and(|s| {
            s.lines()
                .any(|l| l.starts_with("VmFlags:") && l.contains(" sd"))
        });
        assert!(
            soft_dirty || uffd_features().is_none_or(|f| f & UFFD_FEATURE_WP_ASYNC == 0),
            "this kernel has asynchronous write protection, yet the recorder made no \
             userfaultfd ({status})"
        );
        skip!(
            "uffd-wp-async",
            format!("the recorder made no userfaultfd ({status})")
        );
    }
    // Well past its delay, it has not gone on: parked.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        pagescope_linux::trace::is_parked(pt.pid()),
        "not parked: {}",
        std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default()
    );
    let r = run(&[], &["trace", "--release", &pid]);
    let said = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{said}");
    assert!(
        said.contains("went on from where pagescope stopped"),
        "{said}"
    );
    for i in 0..2 {
        let line = pt.next_line();
        assert_eq!(line["index"], i, "{line}");
    }
    assert_eq!(pt.next_line()["event"], "done");
    assert!(pt.child.wait().unwrap().success());
}

#[test]
fn interrupted_recorder_completes_its_file_and_lets_go() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "i.rec");
    let (pt, rec) = record_running_pagetest(&out, "20ms");
    std::thread::sleep(Duration::from_millis(700));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(rec.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = rec.wait_with_output().unwrap().status;
    assert_eq!(status.code(), Some(130), "{status}");
    let r = read_complete_recording(&out);
    assert_eq!(r.end.as_ref().unwrap().why(), "interrupted");
    assert!(r.header().frozen);
    assert!(r.intervals.len() >= 5);
    // Every 64 MiB pass is seen whole within an interval or two.
    let pages = pt.pages();
    assert!(r.intervals.iter().any(|i| i.total().user >= pages * 9 / 10));
    assert!(matches!(state(pt.pid()), Some('R' | 'S')));
}

#[test]
fn duration_ends_a_recording() {
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "d.rec");
    let t = Instant::now();
    run_ok(&[
        "record",
        "-q",
        "--interval",
        "100ms",
        "--duration",
        "450ms",
        "-o",
        &out,
        "--pid",
        &std::process::id().to_string(),
        "--no-freeze",
    ]);
    assert!(t.elapsed() < Duration::from_secs(5));
    let r = read_complete_recording(&out);
    assert_eq!(r.end.as_ref().unwrap().why(), "duration");
    // 100 ms intervals cut at 450 ms: 5, or fewer if a boundary overran
    // on a loaded machine; the last one ends at the duration.
    assert!(
        (3..=5).contains(&r.intervals.len()),
        "{}",
        r.intervals.len()
    );
    let last = r.intervals.last().unwrap();
    assert!(
        (440_000_000..1_000_000_000).contains(&last.end_ns),
        "{last:?}"
    );
    assert!(!r.header().frozen);
    assert!(r.header().notes.iter().any(|n| n.contains("--no-freeze")));
}

#[test]
fn bad_input_is_refused_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "b.rec");
    let cases: &[&[&str]] = &[
        &["record", "-o", &out],
        &["record", "-o", &out, "--block", "3000", "--system"],
        &["record", "-o", &out, "--interval", "0", "--system"],
        &["record", "-o", &out, "--cgroup", "/nonexistent/cg"],
        &["record", "-o", &out, "--system", "--pid", "1"],
        &["record", "-o", &out, "--system", "--damon-regions", "2-5"],
        &["record", "-o", &out, "--system", "--damon-regions", "10"],
        &["record", "-o", &out, "--system", "--sample", "0"],
        &["record", "-o", &out, "--system", "--sample", "1.5"],
        &["record", "-o", &out, "--system", "--no-idle-poll"],
        &[
            "record",
            "-o",
            &out,
            "--system",
            "--backend",
            "damon",
            "--damon-sample",
            "1s",
        ],
        &["analyze", "/nonexistent.rec", "temporal"],
    ];
    for args in cases {
        let o = run(&[], args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.trim().is_empty());
    }
    // No such process: the job fails (1), as snapshot's and trace's do.
    let o = run(&[], &["record", "-o", &out, "--pid", "999999999"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("no process 999999999"));
    // A trace is not a recording.
    let trace = temp_path(dir.path(), "t.trace");
    std::fs::write(&trace, b"").unwrap();
    let o = run(&[], &["analyze", &trace, "spatial"]);
    assert_eq!(o.status.code(), Some(2));
    // An output that can't be created: refused before the command runs.
    let marker = temp_path(dir.path(), "ran");
    let o = run(
        &[],
        &[
            "record",
            "-q",
            "-o",
            "/nonexistent/dir/r.rec",
            "--",
            "touch",
            &marker,
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/dir/r.rec"));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!Path::new(&marker).exists(), "the command ran");
    // A command that does not exist.
    let o = run(
        &[],
        &["record", "-q", "-o", &out, "--", "/nonexistent/program"],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/program"));
}

/// A refused `record --pid` names the cause that holds here: a kernel
/// thread, pagescope itself, a process another recorder traces (root),
/// another user's process (nobody); never Yama where there is none, and
/// `--no-freeze` only where it would help.
#[test]
fn refused_recordings_name_their_cause() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "r.rec");
    if pid_2_is_a_kernel_thread() {
        let line = failed_with(
            &run(
                &[],
                &["record", "-q", "--pid", "2", "--duration", "1s", "-o", &out],
            ),
            1,
        );
        assert!(
            line.contains("pid 2 (kthreadd) is a kernel thread"),
            "{line}"
        );
        assert!(
            !line.contains("Yama") && !line.contains("--no-freeze"),
            "{line}"
        );
    } else {
        eprintln!("skipped (kernel thread): pid 2 is not a kernel thread here");
    }
    // `$$` of a shell that execs pagescope is pagescope itself.
    let script = format!(
        "exec {} record -q --pid $$ --duration 1s -o {out}",
        pagescope_bin().display()
    );
    let line = failed_with(
        &Command::new("sh").args(["-c", &script]).output().unwrap(),
        1,
    );
    assert!(line.contains("is pagescope's own process"), "{line}");
    assert_yama_named_truly(&line);

    // A process another recorder holds: the holder is named.
    let pt = Pagetest::start(&[], &["--size", "8M", "--hold"], "done");
    let pid = pt.pid().to_string();
    let mut holder = hold_with_recorder(pt.pid(), &temp_path(dir.path(), "holder.rec"));
    let tracer = holder.id();
    let line = failed_with(
        &run(
            &[],
            &[
                "record",
                "-q",
                "--pid",
                &pid,
                "--duration",
                "1s",
                "-o",
                &out,
            ],
        ),
        1,
    );
    // Another pagescope is seen by its lock before ptrace is tried.
    assert!(
        line.contains(&format!(
            "already observed by pagescope (pid {tracer}, `record`)"
        )),
        "{line}"
    );
    assert!(!line.contains("run as root"), "{line}");
    assert_yama_named_truly(&line);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(holder.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    assert_eq!(holder.wait().unwrap().code(), Some(130), "interrupted");

    // As nobody: root's process belongs to another user.
    let Some(nobody) = as_nobody() else { return };
    let line = failed_with(
        &run(
            &nobody,
            &[
                "record",
                "-q",
                "--pid",
                "1",
                "--duration",
                "1s",
                "-o",
                "/dev/null",
            ],
        ),
        1,
    );
    assert!(line.contains("belongs to uid 0"), "{line}");
    assert!(line.contains("CAP_SYS_PTRACE"), "{line}");
    assert!(
        !line.contains("--no-freeze"),
        "smaps needs the same access: {line}"
    );
    assert_yama_named_truly(&line);
}

/// `record --system --backend refs` for 2 s in 200 ms intervals, into
/// `out`, under `wrapper`, its stderr piped; returned once its file's
/// header is written, which is once the processes of the start are known
/// (a process started after it is one the recording finds later).
fn system_refs_started(wrapper: &[&str], out: &str) -> std::process::Child {
    let (program, wrapped) = match wrapper.split_first() {
        Some((p, rest)) => (std::path::PathBuf::from(p), rest.to_vec()),
        None => (pagescope_bin(), Vec::new()),
    };
    let mut command = Command::new(program);
    command.args(wrapped);
    if !wrapper.is_empty() {
        command.arg(pagescope_bin());
    }
    let options = [
        "--system",
        "--backend",
        "refs",
        "--interval",
        "200ms",
        "--duration",
        "2s",
    ];
    let child = command
        .args(["record"])
        .args(options)
        .args(["-o", out])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::metadata(out).map_or(true, |m| m.len() == 0) {
        assert!(Instant::now() < deadline, "no recording started");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

/// A process that starts while `--system` records, and that pagescope
/// may not read, is named in the file's end record, and so in its
/// reports and on stderr: not only the processes refused at the start.
#[test]
fn unreadable_processes_that_start_while_recording_are_in_the_file() {
    let Some(nobody) = as_nobody() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out = temp_path(dir.path(), "u.rec");
    // Root's process started after the header is one nobody can't read.
    let recorder = system_refs_started(&nobody, &out);
    let mut late = Command::new("sleep").arg("3").spawn().unwrap();
    let o = recorder.wait_with_output().unwrap();
    let _ = late.kill();
    let _ = late.wait();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let pid = late.id();
    let rec = read_complete_recording(&out);
    let named = |n: &str| n.contains(&format!(" {pid} ")) || n.contains(&format!(" {pid})"));
    assert!(
        !rec.header().notes.iter().any(|n| named(n)),
        "{pid} started after the header: {:?}",
        rec.header().notes
    );
    let end = rec.end.as_ref().unwrap();
    assert_eq!(end.reason, pagescope_core::record::EndReason::Duration);
    let unread = end.notes.iter().find_map(|n| match n {
        pagescope_core::record::EndNote::Unreadable(p) => Some(p.clone()),
        _ => None,
    });
    assert!(
        unread.as_ref().is_some_and(|p| p.contains(&pid)),
        "{pid} not in {:?}",
        end.notes
    );
    let line = |text: &str| {
        text.lines()
            .find(|l| l.contains("started while recording"))
            .map(str::to_string)
    };
    // Other tests' processes may start meanwhile: the note shows 8 pids.
    let said = line(&stderr).unwrap_or_default();
    assert!(
        said.starts_with("note: ") && said.contains("could not be read"),
        "{stderr}"
    );
    let notes = analyze_json(&out, "temporal", &[])["notes"].to_string();
    assert!(notes.contains("started while recording"), "{notes}");
}

/// A recording of the whole machine with `refs` leaves alone the
/// processes another pagescope observes (here `record --pid`, one from
/// before it started and one from while it ran): clearing their bits
/// would empty the other recorder's intervals. The first is in no row
/// and named in the header's notes, the second in the end record's.
#[test]
fn a_system_recording_leaves_processes_another_pagescope_observes() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "sys.rec");
    let before = Pagetest::start(&[], &["--size", "4M", "--hold"], "done");
    let mut first = hold_with_recorder(before.pid(), &temp_path(dir.path(), "1.rec"));
    let system = system_refs_started(&[], &out);
    let during = Pagetest::start(&[], &["--size", "4M", "--hold"], "done");
    let mut second = hold_with_recorder(during.pid(), &temp_path(dir.path(), "2.rec"));
    let o = system.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rec = read_complete_recording(&out);
    let (a, b) = (before.pid(), during.pid());
    let notes = rec.header().notes.join("\n");
    assert!(
        notes.contains("observed by another pagescope") && notes.contains(&format!(" {a}")),
        "{a} is not named: {notes}"
    );
    assert!(
        rec.intervals
            .iter()
            .all(|i| i.virt.iter().all(|r| r.pid != a)),
        "{a}, observed by another recorder, was recorded"
    );
    let end = rec.end.as_ref().unwrap();
    let later = end.notes.iter().find_map(|n| match n {
        pagescope_core::record::EndNote::Observed(p) => Some(p.clone()),
        _ => None,
    });
    assert!(
        later
            .as_ref()
            .is_some_and(|p| p.contains(&b) && !p.contains(&a)),
        "{b} not in {:?}",
        end.notes
    );
    for holder in [&mut first, &mut second] {
        assert!(holder.wait().unwrap().success());
    }
}

/// Two pagescopes that clear the accessed bits of many processes would
/// clear each other's: while a whole-machine recording runs, a second
/// one and a `serve` with a working set are refused, each told the
/// first's pid and command; a recording of one process (which the first
/// leaves alone) is not. Once the first ends, the machine is free again.
#[test]
fn a_second_pagescope_clearing_many_processes_is_refused_and_told_who() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "first.rec");
    let first = system_refs_started(&[], &out);
    let who = format!("(pid {}, `record --system`)", first.id());
    let second = temp_path(dir.path(), "second.rec");
    let o = run(&[], &record_args(&system_refs("1s"), &second));
    let said = failed_with(&o, 1);
    assert!(said.contains(&who) && said.contains("each other"), "{said}");
    let o = Command::new(pagescope_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--backend", "refs"])
        .output()
        .unwrap();
    let said = failed_with(&o, 1);
    assert!(said.contains(&who), "{said}");
    let pt = Pagetest::start(&[], &["--size", "4M", "--hold"], "done");
    let one = temp_path(dir.path(), "one.rec");
    let pid = pt.pid().to_string();
    let o = run(
        &[],
        &record_args(
            &["--pid", &pid, "--backend", "refs", "--duration", "300ms"],
            &one,
        ),
    );
    assert!(o.status.success(), "{o:?}");
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&[], &record_args(&system_refs("1s"), &second));
    assert!(o.status.success(), "{o:?}");
}

/// As nobody, where `vm.unprivileged_userfaultfd` is 0 and the kernel has
/// no soft-dirty bits, `record` says that the sysctl keeps it from
/// knowing written pages, not that the kernel lacks PAGEMAP_SCAN.
#[test]
fn written_pages_unknown_as_nobody_names_the_sysctl() {
    let Some(nobody) = as_nobody() else { return };
    let page_size = rustix::param::page_size() as u64;
    if pagescope_linux::record::has_soft_dirty(Path::new("/proc"), page_size) {
        skip!(
            "no-soft-dirty",
            "this kernel has soft-dirty bits, which need no userfaultfd"
        );
    }
    if unprivileged_userfaultfd() != Some(0) {
        skip!(
            "unprivileged-userfaultfd-0",
            "vm.unprivileged_userfaultfd is not 0 here"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out = temp_path(dir.path(), "w.rec");
    let pt = pagetest_bin();
    let run = run(
        &nobody,
        &[
            "record",
            "--backend",
            "refs",
            "-o",
            &out,
            "--",
            pt.to_str().unwrap(),
        ]
        .into_iter()
        .chain(["--size", "1M", "--iterations", "2", "--sleep", "100ms"])
        .collect::<Vec<_>>(),
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let note = stderr
        .lines()
        .find(|l| l.contains("written pages are not known"))
        .unwrap_or_else(|| panic!("no note on written pages: {stderr}"));
    assert!(note.contains("vm.unprivileged_userfaultfd is 0"), "{note}");
    assert!(!note.contains("Linux 6.7"), "{note}");
}

/// A recording is private (0600 even under umask 000) and replaces a
/// symlink planted at `-o`, leaving its target untouched.
#[test]
fn recordings_are_private_and_never_written_through_a_symlink() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(
        &[],
        &["--size", "8M", "--iterations", "100000", "--sleep", "20ms"],
        "ready",
    );
    let planted = Planted::new(dir.path(), "planted.rec");
    let pid = pt.pid().to_string();
    let out = run_umask0(&[
        "record",
        "-q",
        "--backend",
        "refs",
        "--interval",
        "50ms",
        "--duration",
        "300ms",
        "--pid",
        &pid,
        "-o",
        &planted.link,
    ]);
    assert!(out.status.success(), "{out:?}");
    planted.assert_replaced();
    let r = read_complete_recording(&planted.link);
    assert!(r.intervals.len() >= 3, "{} intervals", r.intervals.len());
}

/// The command `record` launched is observed as a process of `--pid` is:
/// its lock is held while it is recorded (so that `serve` and `top` leave
/// its referenced bits alone), and gone once the recorder ends.
#[test]
fn a_launched_command_is_locked_while_recorded() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "l.rec");
    let bin = pagescope_bin();
    let wrapper = [
        bin.to_str().unwrap(),
        "record",
        "-q",
        "--backend",
        "refs",
        "--interval",
        "100ms",
        "-o",
        &out,
        "--",
    ];
    let mut pt = Pagetest::start(&wrapper, &["--size", "4M", "--hold"], "done");
    let pid = pt.pid();
    let start = pagescope_linux::procfs::ProcDir::at(Path::new("/proc"), pid)
        .stat(&mut Vec::new())
        .unwrap()
        .start_time;
    let locks = Path::new(pagescope_linux::observer::LOCK_DIR);
    assert!(
        pagescope_linux::observer::observed(locks).contains(&(pid, start)),
        "the launched pagetest {pid} is not locked"
    );
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&pt.child),
        rustix::process::Signal::INT,
    )
    .unwrap();
    // Let go, the held pagetest runs on: end it, and the recorder with it.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    pt.child.wait().unwrap();
    assert!(!pagescope_linux::observer::observed(locks).contains(&(pid, start)));
    assert!(!locks.join(format!("{pid}-{start}.lock")).exists());
}

/// `record -o -` streams the recording to standard output (the launched
/// program's own output goes to standard error), and `analyze -` reads
/// it back from standard input.
#[test]
fn a_recording_streams_through_standard_output_and_input() {
    let _guard = serial();
    let bin = pagetest_bin();
    let out = run(
        &[],
        &[
            "record",
            "-q",
            "--backend",
            "refs",
            "--interval",
            "50ms",
            "-o",
            "-",
            "--",
            bin.to_str().unwrap(),
            "--size",
            "16M",
            "--op",
            "write",
            "--iterations",
            "3",
            "--sleep",
            "300ms",
            // The first pass well after the recorder's first reset, which
            // would otherwise race it.
            "--delay",
            "300ms",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout.starts_with(b"\x89PGS"),
        "not a recording on stdout"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ready: Value = stderr
        .lines()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .unwrap_or_else(|| panic!("pagetest's lines are not on stderr: {stderr}"));
    let (start, end) = (
        ready["start"].as_u64().unwrap(),
        ready["end"].as_u64().unwrap(),
    );
    let range = format!("{start:#x}-{end:#x}");
    let a = run_stdin(
        &[
            "analyze", "-", "temporal", "--range", &range, "--format", "json",
        ],
        &out.stdout,
    );
    assert!(a.status.success(), "{a:?}");
    let v: Value = serde_json::from_slice(&a.stdout).unwrap();
    let rows = v["intervals"].as_array().unwrap();
    // Three passes over the buffer, three spikes, each whole.
    let found = spikes(rows, 64);
    assert_eq!(found.len(), 3, "{found:?}");
    let pages = ready["pages"].as_u64().unwrap();
    for s in &found {
        assert_close("a pass", s.user as f64, pages as f64, 2.0);
    }
}

/// `record -- CMD` on a filesystem that fills: `free` bytes left (0: the
/// header can't be written; a page: a few intervals can). pagescope
/// fails (1), and the program it launched does not run on without it.
fn full_filesystem_ends_the_launched_program(backend: &str, free: u64) {
    let _guard = serial();
    let Some(fs) = SmallFs::mount("256k") else {
        return;
    };
    fs.fill(free);
    let out = fs.path("r.rec");
    let token = fs.dir.path().to_str().unwrap();
    let stdout = temp_path(
        &std::env::temp_dir(),
        &format!("pagetest-{backend}-{free}.out"),
    );
    let bin = pagetest_bin();
    let (status, stderr, lines) = run_and_check_nothing_left(
        &[
            "record",
            "-q",
            "--backend",
            backend,
            "--interval",
            "10ms",
            "-o",
            &out,
            "--",
            bin.to_str().unwrap(),
            "--size",
            "8M",
            "--iterations",
            "100000",
            "--sleep",
            "20ms",
            "--dir",
            token,
        ],
        &stdout,
        token,
    );
    let _ = std::fs::remove_file(&stdout);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(stderr.contains(&out), "{stderr}");
    if free > 0 {
        // It failed mid-run: the program ran, and the file holds intervals.
        assert!(lines.iter().any(|l| l["event"] == "ready"), "{lines:?}");
        let (r, _) = read_recording(&out);
        assert!(!r.intervals.is_empty(), "no interval was written");
    }
}

#[test]
fn full_filesystem_at_the_header_ends_the_launched_program() {
    full_filesystem_ends_the_launched_program("refs", 0);
}

#[test]
fn full_filesystem_mid_run_ends_the_launched_program() {
    full_filesystem_ends_the_launched_program("refs", 4096);
}

#[test]
fn full_filesystem_mid_run_ends_the_program_the_fault_backend_launched() {
    if fault_available() {
        full_filesystem_ends_the_launched_program("fault", 0);
        full_filesystem_ends_the_launched_program("fault", 4096);
    }
}

/// `record --pid` of a process that another tracer holds says who, and
/// suggests `--no-freeze` only where that records it: where the writes
/// are tracked with a userfaultfd put in with ptrace (no soft-dirty
/// bits), `--no-freeze` is refused by the same tracer. Both runs are made
/// and held to what the first one said.
#[test]
fn a_process_held_by_another_tracer_gets_a_hint_that_works() {
    let _serial = serial();
    use std::io::{BufRead, BufReader, Write};
    // A python3 that seizes a sleep of its own (PTRACE_SEIZE, which
    // stops nothing) and holds it until its standard input closes.
    let script = "import ctypes, subprocess, sys\n\
        libc = ctypes.CDLL(None, use_errno=True)\n\
        p = subprocess.Popen(['sleep', '120'])\n\
        if libc.ptrace(0x4206, p.pid, None, None) != 0:\n    \
            p.kill(); sys.exit('PTRACE_SEIZE: errno %d' % ctypes.get_errno())\n\
        print(p.pid, flush=True)\n\
        sys.stdin.read()\n\
        p.kill(); p.wait()\n";
    let mut tracer = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(tracer.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid = line.trim().to_string();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.rec");
    let file = file.to_str().unwrap();
    let record = |extra: &[&str]| {
        let mut args = vec!["record", "-q", "--backend", "refs", "--pid", &pid];
        args.extend_from_slice(&["--interval", "200ms", "--duration", "600ms", "-o", file]);
        args.extend_from_slice(extra);
        run(&[], &args)
    };
    let frozen = record(&[]);
    let unfrozen = record(&["--no-freeze"]);
    tracer.stdin.take().unwrap().write_all(b"").unwrap();
    tracer.wait().unwrap();
    assert!(!pid.is_empty(), "the tracer did not start");
    let err = String::from_utf8_lossy(&frozen.stderr).to_string();
    assert_eq!(frozen.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("already traced by pid {} (python3)", tracer.id())),
        "{err}"
    );
    let hinted = err.contains("--no-freeze records it");
    let unfrozen_err = String::from_utf8_lossy(&unfrozen.stderr);
    assert_eq!(
        unfrozen.status.success(),
        hinted,
        "the first run said {err:?}; with --no-freeze: {unfrozen_err}"
    );
}

/// A process recorded by pid is left with the descriptor table it had:
/// the userfaultfd its write tracking is given through is closed in it at
/// once, where the kernel put it, and never moved to a high number (which
/// would leave the table grown for good: `FDSize` in /proc/PID/status).
#[test]
fn a_recorded_process_keeps_its_descriptor_table() {
    let _serial = serial();
    let fd_size = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .map(|v| v.trim().to_string())
            .unwrap()
    };
    let pt = Pagetest::start(
        &[],
        &[
            "--size",
            "4M",
            "--op",
            "write",
            "--iterations",
            "1000",
            "--sleep",
            "50ms",
        ],
        "ready",
    );
    let before = fd_size(pt.pid());
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "r.rec");
    let pid = pt.pid().to_string();
    let rec = run(
        &[],
        &[
            "record",
            "-q",
            "--interval",
            "100ms",
            "--duration",
            "500ms",
            "-o",
            &out,
            "--pid",
            &pid,
        ],
    );
    assert!(
        rec.status.success(),
        "{}",
        String::from_utf8_lossy(&rec.stderr)
    );
    assert_eq!(fd_size(pt.pid()), before, "FDSize of the recorded process");
}
