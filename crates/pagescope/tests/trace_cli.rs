//! `pagescope trace` as a command: SIGTERM, bad input, refusals named by
//! their cause, private output files and standard output, a full file
//! system, and the signals a launched program gets.

#[macro_use]
mod util;

use pagescope_core::format::{read_trace, Completeness};
use pagescope_core::trace::{EndReason, Ref};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use util::trace::*;
use util::*;

#[test]
fn sigterm_detaches_and_the_program_runs_on() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let mut pt = traced_reader(&trace, "auto", "16M");
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&pt.child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = pt.child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "tracer exit: {status:?}");
    // pagetest is in its 3 s sleep: detached, nothing registered with a
    // userfaultfd any more (smaps VmFlags um/uw), and no store left.
    let pid = pt.pid();
    let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(proc_status.contains("TracerPid:\t0"), "{proc_status}");
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let entries = pagescope_core::parse::smaps::parse(&smaps).unwrap();
    for e in &entries {
        assert!(
            !e.vm_flags.iter().any(|f| f == "um" || f == "uw"),
            "still registered: {}",
            e.map.path
        );
        if is_store(e) {
            assert_eq!(e.counters.rss, 0, "the store still holds pages");
        }
    }
    // The mover was reaped: pagetest has no child left, not even a zombie.
    assert_eq!(children_of(pid), vec![], "pagetest's children");
    let mut done = pt.next_line();
    if done["event"] == "iteration" {
        done = pt.next_line();
    }
    assert_eq!(done["checksum"], 2 * pt.pages());
    let (all, done) = read_all(&trace);
    assert_eq!(done, Completeness::Complete);
    assert_eq!(all.end.unwrap().reason, EndReason::Interrupted);
}

#[test]
fn bad_input_is_one_line_and_a_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        &[],
        &["trace", "-q", "-o", "/dev/null", "--", "/nonexistent/prog"],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an executable file"));
    let snap = temp_path(dir.path(), "s.snap");
    snapshot_pid(std::process::id(), &snap);
    let out = run(&[], &["analyze", &snap, "refs"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a trace"));
    let out = run(
        &[],
        &["trace", "--release", &std::process::id().to_string()],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to release"));
    // A zombie (here a child its parent never reaps; a killed trace's
    // mover is one, with its program's name) holds nothing either.
    let (mut parent, zombie) = zombie();
    let zombie = zombie.to_string();
    let out = run(&[], &["trace", "--release", &zombie]);
    let _ = parent.kill();
    let _ = parent.wait();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("has exited (a zombie"), "{said}");
    assert!(said.contains(&format!("pid {}", parent.id())), "{said}");
    let out = run(&[], &["analyze", &snap, "refs", "--range", "0x2000-0x1000"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&[], &["analyze", &snap, "mrc", "--range", "0x1000-0x2000"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(
        &[],
        &["trace", "-q", "-o", "/dev/null", "--pid", "999999999"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such process"));
    let out = run(&[], &["trace", "--release", "999999999"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("cannot release process 999999999: no such process"),
        "{out:?}"
    );
    for (option, value, says) in [
        ("--pool", "32K", "at least 16 pages"),
        ("--time-resolution", "0ns", "from 1ns to 1ms"),
        ("--time-resolution", "2ms", "from 1ns to 1ms"),
    ] {
        let out = run(
            &[],
            &[
                "trace",
                "-q",
                option,
                value,
                "-o",
                "/dev/null",
                "--",
                "true",
            ],
        );
        assert_eq!(out.status.code(), Some(2), "{option} {value}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(says));
    }
}

/// `trace --pid` of a process that another tracer holds says who.
#[test]
fn attach_to_a_traced_process_names_its_tracer() {
    require_trace!();
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let mut first = Command::new(pagescope_bin())
        .args([
            "trace",
            "-q",
            "-o",
            &trace,
            "--",
            "sh",
            "-c",
            "echo $$; exec sleep 30",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(first.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid = line.trim().to_string();
    let out = run(&[], &["trace", "-q", "-o", "/dev/null", "--pid", &pid]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    kill_pid(pid.parse().unwrap());
    let _ = first.wait();
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("already traced by pid {} (pagescope)", first.id())),
        "{err}"
    );
}

/// The processes whose parent is `pid`, as (pid, state letter), from
/// every `/proc/PID/stat`.
fn children_of(pid: u32) -> Vec<(u32, char)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parens.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let mut fields = rest.split(' ');
        let state = fields.next().unwrap().chars().next().unwrap();
        if fields.next().unwrap().parse::<u32>() == Ok(pid) {
            out.push((child, state));
        }
    }
    out
}

/// `--cpu` of a CPU that pagescope may not run on is a usage error.
#[test]
fn trace_on_a_cpu_not_allowed_is_a_usage_error() {
    let allowed = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Cpus_allowed_list:")
                .map(str::trim)
                .map(String::from)
        })
        .unwrap();
    // The highest allowed CPU is the last number of the list (`0-1,4`).
    let last: usize = allowed.rsplit([',', '-']).next().unwrap().parse().unwrap();
    let cpu = (last + 1).to_string();
    let line = failed_with(
        &run(
            &[],
            &[
                "trace",
                "-q",
                "--cpu",
                &cpu,
                "-o",
                "/dev/null",
                "--",
                "true",
            ],
        ),
        2,
    );
    assert!(line.contains(&format!("--cpu {cpu}")), "{line}");
}

/// A refused `trace` names the cause that holds here: a kernel thread; a
/// process another pagescope traces; pid 1 where the kernel refuses root
/// even to read it (no "run as root" to root); as nobody, the
/// userfaultfd that `vm.unprivileged_userfaultfd=0` refuses.
#[test]
fn refused_traces_name_their_cause() {
    let _serial = serial();
    if let Some((feature, why)) = trace_unsupported() {
        skip!(feature, why);
    }
    if pid_2_is_a_kernel_thread() {
        let line = failed_with(
            &run(&[], &["trace", "-q", "--pid", "2", "-o", "/dev/null"]),
            1,
        );
        assert!(
            line.contains("pid 2 (kthreadd) is a kernel thread"),
            "{line}"
        );
        assert!(
            !line.contains("Yama") && !line.contains("run as root"),
            "{line}"
        );
    }

    // A process another pagescope holds: the holder is named.
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(&[], &["--size", "8M", "--hold"], "done");
    let pid = pt.pid().to_string();
    let mut holder = hold_with_recorder(pt.pid(), &temp_path(dir.path(), "holder.rec"));
    let line = failed_with(
        &run(&[], &["trace", "-q", "--pid", &pid, "-o", "/dev/null"]),
        1,
    );
    // Another pagescope is seen by its lock before ptrace is tried.
    assert!(
        line.contains(&format!(
            "already observed by pagescope (pid {}, `record`)",
            holder.id()
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

    // Where the kernel refuses root even to read pid 1 (/proc/1/ns/user
    // needs the same access, read-only), attaching is refused too: the
    // message says what was ruled out, and does not say "run as root".
    match std::fs::read_link("/proc/1/ns/user") {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let line = failed_with(
                &run(&[], &["trace", "-q", "--pid", "1", "-o", "/dev/null"]),
                1,
            );
            assert!(line.contains("pagescope has CAP_SYS_PTRACE"), "{line}");
            assert!(line.contains("not traced"), "{line}");
            assert!(!line.contains("run as root"), "{line}");
            assert_eq!(line.contains("there is no Yama"), !has_yama(), "{line}");
        }
        _ => eprintln!("skipped (pid 1): root may trace pid 1 here, and the test leaves it alone"),
    }

    let Some(nobody) = as_nobody() else { return };
    if unprivileged_userfaultfd() == Some(0) {
        let line = failed_with(
            &run(&nobody, &["trace", "-q", "-o", "/dev/null", "--", "true"]),
            1,
        );
        assert!(line.contains("vm.unprivileged_userfaultfd is 0"), "{line}");
        assert!(!line.contains("not supported"), "{line}");
    } else {
        eprintln!("skipped (nobody): vm.unprivileged_userfaultfd is not 0 here");
    }
}

/// A trace is private (0600 even under umask 000) and replaces a symlink
/// planted at `-o`, leaving its target untouched; `trace -o -` streams it
/// to standard output (the program's own output goes to standard error),
/// and `analyze -` reads it back.
#[test]
fn traces_are_private_and_stream_through_standard_output() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let bin = pagetest_bin();
    let args = [
        "--size",
        "8M",
        "--op",
        "write",
        "--iterations",
        "2",
        "--sleep",
        "0",
    ];
    let planted = Planted::new(dir.path(), "planted.trace");
    let mut cmd = vec![
        "trace",
        "-q",
        "-o",
        &planted.link,
        "--",
        bin.to_str().unwrap(),
    ];
    cmd.extend(args);
    let out = run_umask0(&cmd);
    assert!(out.status.success(), "{out:?}");
    planted.assert_replaced();
    let (all, done) = read_all(&planted.link);
    assert_eq!(done, Completeness::Complete);
    let lines = pagetest_lines(&out.stdout);
    let (start, end) = (
        lines[0]["start"].as_u64().unwrap(),
        lines[0]["end"].as_u64().unwrap(),
    );
    let pages = lines[0]["pages"].as_u64().unwrap();
    let in_buf = |refs: &[Ref]| {
        refs.iter()
            .filter(|r| r.addr >= start && r.addr < end)
            .count()
    };
    // Two passes, every page each time (a write run has no fill).
    assert_eq!(in_buf(&all.refs) as u64, 2 * pages);

    let mut cmd = vec!["trace", "-q", "-o", "-", "--", bin.to_str().unwrap()];
    cmd.extend(args);
    let out = run(&[], &cmd);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.starts_with(b"\x89PGS"), "not a trace on stdout");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        !lines.is_empty(),
        "pagetest's lines are not on stderr: {out:?}"
    );
    let (start, end) = (
        lines[0]["start"].as_u64().unwrap(),
        lines[0]["end"].as_u64().unwrap(),
    );
    let range = format!("{start:#x}-{end:#x}");
    let a = run_stdin(
        &[
            "analyze", "-", "refs", "--range", &range, "--format", "json",
        ],
        &out.stdout,
    );
    assert!(a.status.success(), "{a:?}");
    let v: Value = serde_json::from_slice(&a.stdout).unwrap();
    assert_eq!(v["references"], 2 * pages);
    assert_eq!(v["distinct_pages"], pages);
}

/// `trace -- CMD` on a filesystem that fills: `free` bytes left (0: the
/// header can't be written, and nothing is launched; a page: the trace
/// fails mid-run). pagescope fails (1), and the program it launched does
/// not run on without it.
fn full_filesystem_ends_the_traced_program(free: u64) {
    let _serial = serial();
    let Some(fs) = SmallFs::mount("256k") else {
        return;
    };
    fs.fill(free);
    let out = fs.path("t.trace");
    let token = fs.dir.path().to_str().unwrap();
    let stdout = temp_path(&std::env::temp_dir(), &format!("pagetest-trace-{free}.out"));
    let bin = pagetest_bin();
    let (status, stderr, lines) = run_and_check_nothing_left(
        &[
            "trace",
            "-q",
            "-o",
            &out,
            "--",
            bin.to_str().unwrap(),
            "--size",
            "8M",
            "--op",
            "write",
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
    if free > 0 {
        // It failed mid-run: the program ran, and the file holds its start.
        assert!(lines.iter().any(|l| l["event"] == "ready"), "{lines:?}");
        let mut all = All::default();
        let f = std::fs::File::open(&out).unwrap();
        read_trace(std::io::BufReader::new(f), Path::new(&out), &mut all).unwrap();
        assert!(all.header.is_some());
    } else {
        assert!(lines.is_empty(), "the program ran: {lines:?}");
    }
}

#[test]
fn full_filesystem_at_the_header_launches_nothing() {
    require_trace!();
    full_filesystem_ends_the_traced_program(0);
}

#[test]
fn full_filesystem_mid_trace_ends_the_traced_program() {
    require_trace!();
    full_filesystem_ends_the_traced_program(4096);
}

/// A program pagescope launches (`trace`, and `record` with the refs and
/// the fault backends) starts with the signals it would have been given
/// without pagescope: the mask pagescope was given, not the one it blocks
/// SIGINT, SIGTERM and SIGCHLD with for itself, and SIGPIPE at its
/// default, not ignored as the Rust runtime ignores it. The truth is the
/// same shell run by the test: the same mask and ignored set, `yes`
/// ending quietly of SIGPIPE (ignored, it would say "Broken pipe"), and
/// SIGTERM ending the shell. Run where SIGINT and SIGQUIT come ignored
/// (a shell's background job), the program gets them ignored too, though
/// pagescope catches SIGINT for itself. Signals 1 to 31 are compared: those above
/// are real-time ones, and the lowest two of them the C library's own
/// (glibc's thread cancellation and set*id broadcast), which it handles
/// itself.
#[test]
fn a_launched_program_gets_the_signals_it_would_have_had() {
    require_trace!();
    const SCRIPT: &str =
        "grep -E '^Sig(Blk|Ign)' /proc/self/status; yes | head -1; kill -TERM $$; echo survived";
    let untraced = Command::new("sh").args(["-c", SCRIPT]).output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(untraced.status.signal(), Some(15), "{untraced:?}");
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "s.out");
    for how in [
        &["trace", "-q", "-o", &out][..],
        &["record", "-q", "--backend", "refs", "-o", &out],
        &["record", "-q", "--backend", "fault", "-o", &out],
    ] {
        let mut args = how.to_vec();
        args.extend(["--", "sh", "-c", SCRIPT]);
        let o = run(&[], &args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            standard_signals(&o.stdout),
            standard_signals(&untraced.stdout),
            "{how:?}: {stderr}"
        );
        assert!(!stderr.contains("Broken pipe"), "{how:?}: {stderr}");
        assert_eq!(o.status.code(), Some(128 + 15), "{how:?}: {stderr}");
        std::fs::remove_file(&out).unwrap();
    }
}

/// The lines of `out`, each `SigBlk:` and `SigIgn:` set kept to signals 1
/// to 31.
fn standard_signals(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| match l.split_once(":\t") {
            Some((k, v)) if k.starts_with("Sig") => {
                let set = u64::from_str_radix(v, 16).expect("a signal set in hex");
                format!("{k}: {:#x}", set & 0x7fff_ffff)
            }
            _ => l.to_string(),
        })
        .collect()
}
