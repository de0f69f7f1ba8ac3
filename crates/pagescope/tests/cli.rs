//! End-to-end tests of the `pagescope` binary on this machine's kernel,
//! against the kernel's own accounting and pagetest's known buffer.

#[macro_use]
mod util;

use std::process::{Command, Stdio};
use util::hugetlb::{hugetlb_in_use_kb, meminfo, HugePages};
use util::*;

/// Snapshots everything while pagetest holds its buffer, then checks the
/// processes and total reports against smaps_rollup and the buffer size.
fn snapshot_matches_kernel(mode: &str, size: &str) {
    require_pfns!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    let pt = Pagetest::start(
        &[],
        &[
            "--size", size, "--mode", mode, "--op", "write", "--hold", "--dir", dir_arg,
        ],
        "done",
    );
    let snap = temp_path(dir.path(), "s.snap");
    run_ok(&["snapshot", "-q", "-o", &snap]);
    let rollup = smaps_rollup(pt.pid());
    let ps = pt.ready["page_size"].as_u64().unwrap() as f64;
    let kb = ps / 1024.0;

    let procs = report_json(&["report", "processes", "--input", &snap, "--format", "json"]);
    assert_eq!(procs["page_size"].as_u64().unwrap() as f64, ps);
    let row = process_row(&procs, pt.pid());
    assert_eq!(row["comm"], "pagetest");
    assert_close(
        "rss_pages",
        row["rss_pages"].as_f64().unwrap(),
        rollup["Rss"] as f64 / kb,
        1.0,
    );
    assert_close(
        "pss_pages",
        row["pss_pages"].as_f64().unwrap(),
        rollup["Pss"] as f64 / kb,
        1.0,
    );
    let uss = (rollup["Private_Clean"] + rollup["Private_Dirty"]) as f64 / kb;
    assert_close("uss_pages", row["uss_pages"].as_f64().unwrap(), uss, 1.0);
    assert_eq!(
        row["swap_pages"].as_u64().unwrap(),
        rollup["Swap"] / kb as u64
    );
    assert!(row["rss_pages"].as_u64().unwrap() >= pt.pages());

    let total = report_json(&["report", "total", "--input", &snap, "--format", "json"]);
    let user = total["user_pages"].as_u64().unwrap();
    assert!(
        user >= pt.pages(),
        "user_pages {user} < buffer {}",
        pt.pages()
    );
    let mem_total = total["mem_total_pages"].as_u64().unwrap();
    assert!(user < mem_total);
    // Every process's RSS counts its frames; the distinct frames are fewer.
    assert!(total["rss_sum_pages"].as_u64().unwrap() >= user);
}

#[test]
fn snapshot_anon_matches_smaps_rollup() {
    snapshot_matches_kernel("anon", "256M");
}

#[test]
fn snapshot_file_matches_smaps_rollup() {
    snapshot_matches_kernel("file", "64M");
}

#[test]
fn snapshot_shm_matches_smaps_rollup() {
    snapshot_matches_kernel("shm", "64M");
}

#[test]
fn snapshot_malloc_matches_smaps_rollup() {
    snapshot_matches_kernel("malloc", "64M");
}

#[test]
fn total_counts_anonymous_buffer_as_anonymous() {
    require_pfns!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(&[], &["--size", "64M", "--mode", "anon", "--hold"], "done");
    let snap = temp_path(dir.path(), "s.snap");
    snapshot_pid(pt.pid(), &snap);
    let total = report_json(&["report", "total", "-i", &snap, "-f", "json"]);
    let anon = total["user_anon_pages"].as_u64().unwrap();
    // The buffer's 16384 pages are anonymous; the rest of the process
    // (heap, stack) adds a little.
    assert!(
        anon >= pt.pages() && anon < pt.pages() + 1024,
        "anon {anon}"
    );
    assert_eq!(total["processes"], 1);
}

#[test]
fn live_report_matches_smaps_rollup() {
    require_pfns!();
    let _serial = serial();
    let pt = Pagetest::start(&[], &["--size", "32M", "--mode", "anon", "--hold"], "done");
    let pid = pt.pid().to_string();
    let report = report_json(&["report", "processes", "--pid", &pid, "--format", "json"]);
    let rollup = smaps_rollup(pt.pid());
    let rows = report["processes"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_close(
        "rss_pages",
        rows[0]["rss_pages"].as_f64().unwrap(),
        rollup["Rss"] as f64 / 4.0,
        1.0,
    );
    assert_close(
        "pss_pages",
        rows[0]["pss_pages"].as_f64().unwrap(),
        rollup["Pss"] as f64 / 4.0,
        1.0,
    );
}

#[test]
fn kernel_threads_are_listed_without_memory() {
    let dir = tempfile::tempdir().unwrap();
    let snap = temp_path(dir.path(), "s.snap");
    run_ok(&["snapshot", "-q", "--pid", "2", "-o", &snap]);
    // Left out unless asked for: by --all, or by --pid naming it.
    let report = report_json(&["report", "processes", "-i", &snap, "-f", "json"]);
    assert_eq!(report["processes"].as_array().unwrap().len(), 0, "{report}");
    assert_eq!(report["kernel_threads_hidden"], 1, "{report}");
    for extra in ["--all", "--pid=2"] {
        let report = report_json(&["report", "processes", "-i", &snap, "-f", "json", extra]);
        let row = process_row(&report, 2);
        assert_eq!(row["kernel_thread"], true);
        assert_eq!(row["rss_pages"], 0);
        assert_eq!(row["rss_bytes"], 0);
    }
}

#[test]
fn csv_and_table_formats() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(&[], &["--size", "8M", "--hold"], "done");
    let snap = temp_path(dir.path(), "s.snap");
    let pid = pt.pid().to_string();
    run_ok(&["snapshot", "-q", "--pid", &pid, "-o", &snap]);
    let json = report_json(&["report", "processes", "-i", &snap, "-f", "json"]);
    let rss = process_row(&json, pt.pid())["rss_pages"].as_u64().unwrap();

    let csv = run_ok(&["report", "processes", "-i", &snap, "-f", "csv"]);
    let text = String::from_utf8(csv.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rss_col = header.iter().position(|h| *h == "rss_pages").unwrap();
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(row[0], pid);
    assert_eq!(row[rss_col], rss.to_string());

    // In pages, the table's figures are the JSON's.
    let table = run_ok(&["report", "processes", "-i", &snap, "--units", "pages"]);
    let text = String::from_utf8(table.stdout).unwrap();
    let mut lines = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("PID"));
    assert!(lines.next().is_some(), "no table header: {text}");
    let line = lines.next().unwrap();
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cells[0], pid);
    assert!(cells.contains(&rss.to_string().as_str()), "{line}");

    let total_csv = run_ok(&["report", "total", "-i", &snap, "-f", "csv"]);
    let text = String::from_utf8(total_csv.stdout).unwrap();
    assert!(text.starts_with("key,value\npage_size,"), "{text}");
}

#[test]
fn file_cut_in_half_still_reports() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(&[], &["--size", "64M", "--hold"], "done");
    let snap = temp_path(dir.path(), "s.snap");
    run_ok(&["snapshot", "-q", "-o", &snap]);
    let bytes = std::fs::read(&snap).unwrap();
    let half = temp_path(dir.path(), "half.snap");
    std::fs::write(&half, &bytes[..bytes.len() / 2]).unwrap();
    for view in ["processes", "total"] {
        let out = run_ok(&["report", view, "-i", &half, "-f", "json"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("was cut short"), "{stderr}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["notes"][0].as_str().unwrap().contains("cut short"));
    }
    drop(pt);
}

/// Runs a report on a bad file: exit code 2, one line naming the file.
fn assert_bad_input(path: &str, expect: &str) {
    let out = run(&[], &["report", "total", "-i", path]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains(path), "{stderr}");
    assert!(stderr.contains(expect), "{stderr}");
}

#[test]
fn bad_files_get_one_clear_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let empty = temp_path(dir.path(), "empty.snap");
    std::fs::write(&empty, b"").unwrap();
    assert_bad_input(&empty, "empty file");

    let random = temp_path(dir.path(), "random.snap");
    let noise: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&random, &noise).unwrap();
    assert_bad_input(&random, "not a pagescope recording");

    let foreign = temp_path(dir.path(), "foreign.snap");
    std::fs::write(&foreign, b"%PDF-1.7\n").unwrap();
    assert_bad_input(&foreign, "not a pagescope recording");

    let missing = temp_path(dir.path(), "missing.snap");
    assert_bad_input(&missing, "not found");

    // A real snapshot with one byte flipped in the middle.
    let snap = temp_path(dir.path(), "s.snap");
    run_ok(&[
        "snapshot",
        "-q",
        "--pid",
        "1",
        "--pid",
        &std::process::id().to_string(),
        "-o",
        &snap,
    ]);
    let mut bytes = std::fs::read(&snap).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    let corrupt = temp_path(dir.path(), "corrupt.snap");
    std::fs::write(&corrupt, &bytes).unwrap();
    assert_bad_input(&corrupt, "corrupt");
}

#[test]
fn missing_pid_is_an_error() {
    let out = run(
        &[],
        &["snapshot", "-q", "--pid", "99999999", "-o", "/dev/null"],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no process with pid 99999999"), "{stderr}");
    let out = run(&[], &["report", "processes", "--pid", "99999999"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn without_cap_sys_admin_snapshot_says_what_is_missing() {
    let _serial = serial();
    if Command::new("setpriv").arg("--version").output().is_err() {
        skip!("setpriv", "setpriv (util-linux) is not installed");
    }
    let drop_caps = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"];
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(&drop_caps, &["--size", "32M", "--hold"], "done");
    let pid = pt.pid().to_string();
    let snap = temp_path(dir.path(), "np.snap");
    let out = run(&drop_caps, &["snapshot", "--pid", &pid, "-o", &snap]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("page frame numbers are hidden"), "{stderr}");
    assert!(stderr.contains("CAP_SYS_ADMIN"), "{stderr}");

    // The reports run (even as root, from the file) and say it too.
    let out = run_ok(&["report", "processes", "-i", &snap, "-f", "json"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("page frame numbers are hidden"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = process_row(&v, pt.pid());
    assert_eq!(row["source"], "smaps");
    let rollup = smaps_rollup(pt.pid());
    assert_close(
        "rss_pages from smaps",
        row["rss_pages"].as_f64().unwrap(),
        rollup["Rss"] as f64 / 4.0,
        1.0,
    );
    let total = report_json(&["report", "total", "-i", &snap, "-f", "json"]);
    assert!(total["user_pages"].is_null());
    assert!(total["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("CAP_SYS_ADMIN")));
}

#[test]
fn pagetest_reports_its_ground_truth() {
    let _serial = serial();
    let pt = Pagetest::start(
        &[],
        &[
            "--size",
            "1M",
            "--mode",
            "anon",
            "--op",
            "read",
            "--iterations",
            "3",
            "--sleep",
            "10ms",
        ],
        "done",
    );
    let ready = &pt.ready;
    assert_eq!(ready["pages"], 256);
    assert_eq!(
        ready["end"].as_u64().unwrap() - ready["start"].as_u64().unwrap(),
        256 * ready["page_size"].as_u64().unwrap()
    );
    let iters: Vec<_> = pt
        .lines
        .iter()
        .filter(|l| l["event"] == "iteration")
        .collect();
    assert_eq!(iters.len(), 3);
    for (i, it) in iters.iter().enumerate() {
        assert_eq!(it["index"], i);
        assert!(it["end_ns"].as_u64() >= it["start_ns"].as_u64());
    }
    let out = Command::new(pagetest_bin())
        .args(["--size", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// A snapshot killed with SIGKILL mid-write leaves a file that reports up
/// to its last complete frame. The writer goes through a FIFO shrunk to
/// one page, so it is still writing when the test kills it.
#[test]
fn snapshot_killed_mid_write_leaves_a_readable_file() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let fifo = temp_path(dir.path(), "pipe");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut writer = Command::new(pagescope_bin())
        .args(["snapshot", "-q", "--jobs", "1", "-o", &fifo])
        .spawn()
        .unwrap();
    let mut pipe = std::fs::File::open(&fifo).unwrap();
    rustix::pipe::fcntl_setpipe_size(&pipe, 4096).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while got.len() < 16 * 1024 {
        let n = pipe.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "the snapshot ended before 16 KiB: too small a machine for this test"
        );
        got.extend_from_slice(&buf[..n]);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    writer.kill().unwrap();
    writer.wait().unwrap();
    pipe.read_to_end(&mut got).unwrap();
    let file = temp_path(dir.path(), "killed.snap");
    std::fs::write(&file, &got).unwrap();
    let out = run_ok(&["report", "processes", "-i", &file, "-f", "json"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("was cut short"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!v["processes"].as_array().unwrap().is_empty());
}

/// A reader that stops reading (`pagescope report pages | head -1`) ends
/// the report quietly, with exit 0, as `cat` would: in every format.
#[test]
fn a_report_ends_quietly_when_its_reader_stops_reading() {
    use std::io::BufRead;
    let _serial = serial();
    let pt = Pagetest::start(&[], &["--size", "32M", "--hold"], "done");
    for format in ["csv", "json", "table"] {
        let mut report = Command::new(pagescope_bin())
            .args([
                "report",
                "pages",
                "--pid",
                &pt.pid().to_string(),
                "-f",
                format,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufReader::new(report.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(!first.is_empty(), "{format}: no output");
        // The reader is dropped: the pipe has no reader left.
        let out = report.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{format}: {:?}: {said}", out.status);
        assert!(!said.contains("error"), "{format}: {said}");
    }
}

/// A process that pagescope may not read although it runs with
/// CAP_SYS_PTRACE (a policy protects it: on this machine, pid 1) is named
/// in a note with the cause found on the machine, not with "needs
/// CAP_SYS_PTRACE", which it has.
#[test]
fn a_process_root_may_not_read_is_noted_with_its_cause() {
    require_pfns!();
    let _serial = serial();
    let denied = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|p| {
            std::fs::File::open(format!("/proc/{p}/pagemap"))
                .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
        });
    let Some(pid) = denied else {
        skip!(
            "denied-process",
            "root may read every process on this machine: no process to be refused"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let snap = temp_path(dir.path(), "s.snap");
    let out = run(&[], &["snapshot", "--pid", &pid.to_string(), "-o", &snap]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    let note = said
        .lines()
        .find(|l| l.contains("could not be read"))
        .unwrap_or_else(|| panic!("no note on pid {pid}: {said}"));
    assert!(note.contains(&format!("for pid {pid}")), "{note}");
    assert!(
        note.contains("although pagescope has CAP_SYS_PTRACE"),
        "{note}"
    );
    assert!(!note.contains("needs root"), "{note}");
}

/// Usage errors exit 2 with one line; a pid that the input lacks is a
/// failed job, 1, for `report` and `diff` alike; as root and as nobody.
#[test]
fn usage_errors_exit_2_and_absent_pids_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let nobody = as_nobody();
    let mut wrappers: Vec<&[&str]> = vec![&[]];
    if let Some(n) = &nobody {
        wrappers.push(n);
    }
    for (i, wrapper) in wrappers.into_iter().enumerate() {
        let snap = temp_path(dir.path(), &format!("u{i}.snap"));
        let me = std::process::id().to_string();
        let out = run(
            wrapper,
            &["snapshot", "-q", "--pid", "1", "--pid", &me, "-o", &snap],
        );
        assert!(out.status.success(), "{out:?}");
        let says = |args: &[&str], code: i32, what: &str| {
            let line = failed_with(&run(wrapper, args), code);
            assert!(line.contains(what), "{args:?} under {wrapper:?}: {line}");
        };
        says(&["report", "vmas", "-i", &snap], 2, "needs --pid");
        says(&["report", "vmas"], 2, "needs --pid");
        says(
            &["report", "processes", "-i", &snap, "--flags", "anonymous"],
            2,
            "--flags applies to the pages view only",
        );
        says(
            &["report", "processes", "-i", &snap, "--pid", "99999999"],
            1,
            "pid 99999999 is not in",
        );
        says(
            &["diff", &snap, &snap, "--pid", "99999999"],
            1,
            "pid 99999999 is in neither",
        );
        // A pid that the snapshots hold is fine.
        let out = run(wrapper, &["diff", &snap, &snap, "--pid", &me, "-f", "json"]);
        assert!(out.status.success(), "{out:?}");
        // A sample too small to watch a page, refused before anything
        // runs (its fraction said in a few digits).
        let rec = temp_path(dir.path(), &format!("u{i}.rec"));
        let line = failed_with(
            &run(
                wrapper,
                &[
                    "record",
                    "-q",
                    "--backend",
                    "fault",
                    "--sample",
                    "1e-300",
                    "-o",
                    &rec,
                    "--",
                    "true",
                ],
            ),
            2,
        );
        assert!(
            line.contains("--sample 1e-300: below the smallest"),
            "{line}"
        );
        assert!(!std::path::Path::new(&rec).exists());
        let line = failed_with(
            &run(wrapper, &["analyze", &snap, "mrc", "--sample", "1e-300"]),
            2,
        );
        assert!(line.len() < 300, "{line}");
        // A command that can't run leaves a file already at -o as it was.
        let kept = temp_path(dir.path(), &format!("kept{i}.rec"));
        std::fs::write(&kept, b"kept").unwrap();
        std::fs::set_permissions(&kept, std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .unwrap();
        for prog in [
            "/nonexistent/cmd",
            "/etc/passwd",
            "pagescope-no-such-command",
        ] {
            let line = failed_with(&run(wrapper, &["record", "-q", "-o", &kept, "--", prog]), 1);
            assert!(line.contains(&format!("cannot run: {prog}: ")), "{line}");
            assert_eq!(line.matches(prog).count(), 1, "{line}");
            assert_eq!(std::fs::read(&kept).unwrap(), b"kept", "{prog}");
        }
        // So does a process that refuses to be attached (pid 2, kthreadd:
        // the kernel ptraces no kernel thread), and nothing of pagescope's
        // is left beside it.
        let attach: [&[&str]; 3] = [
            &["trace", "-q", "--pid", "2"],
            &["record", "-q", "--pid", "2", "--duration", "1s"],
            &[
                "record",
                "-q",
                "--backend",
                "fault",
                "--pid",
                "2",
                "--duration",
                "1s",
            ],
        ];
        for args in attach {
            let args = [args, &["-o", &kept]].concat();
            let line = failed_with(&run(wrapper, &args), 1);
            if i == 0 {
                assert!(line.contains("kernel thread"), "{args:?}: {line}");
            }
            assert_eq!(std::fs::read(&kept).unwrap(), b"kept", "{args:?}");
        }
        // Without root, a physical map is refused before anything is
        // read or written.
        if i == 1 {
            let line = failed_with(
                &run(wrapper, &["snapshot", "-q", "--physmap", "-o", &kept]),
                1,
            );
            assert!(line.contains("the physical map is not supported"), "{line}");
            assert_eq!(std::fs::read(&kept).unwrap(), b"kept");
        }
        let parts: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().ends_with(".part"))
            .collect();
        assert!(parts.is_empty(), "{parts:?}");
    }
}

/// A pid that a recording lacks is a failed job, 1, for every view of a
/// recording that takes `--pid`, as it is for a trace (tests/trace.rs)
/// and a snapshot: the message names the recording's processes, and
/// nothing is printed. A pid it holds is fine.
#[test]
fn a_pid_that_a_recording_lacks_is_an_error() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = temp_path(dir.path(), "absent.rec");
    let mut sleep = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleep.id().to_string();
    let out = run(
        &[],
        &[
            "record",
            "-q",
            "--backend",
            "refs",
            "--interval",
            "100ms",
            "--duration",
            "300ms",
            "--pid",
            &pid,
            "-o",
            &rec,
        ],
    );
    let _ = sleep.kill();
    let _ = sleep.wait();
    assert!(out.status.success(), "{out:?}");
    for view in ["temporal", "spatial", "heatmap", "processes"] {
        let out = run(&[], &["analyze", &rec, view, "--pid", "1"]);
        let msg = failed_with(&out, 1);
        assert_eq!(
            msg,
            format!("error: pid 1 is not in {rec} (its processes: {pid})"),
            "{view}"
        );
        assert!(out.stdout.is_empty(), "{view}: {out:?}");
        let present = run_ok(&["analyze", &rec, view, "--pid", &pid, "-f", "json"]);
        assert!(!String::from_utf8_lossy(&present.stdout).contains("not in"));
    }
}

/// A snapshot is private (0600, even under umask 000: it holds page frame
/// numbers and every command line), and a symlink planted at `-o` is
/// replaced, its target untouched.
#[test]
fn snapshot_files_are_private_and_never_written_through_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id().to_string();
    let fresh = temp_path(dir.path(), "fresh.snap");
    let out = run_umask0(&["snapshot", "-q", "--pid", &me, "-o", &fresh]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mode_of(&fresh), 0o600);
    // An older file in its place, readable by all, is replaced.
    std::fs::set_permissions(&fresh, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let out = run_umask0(&["snapshot", "-q", "--pid", &me, "-o", &fresh]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mode_of(&fresh), 0o600);

    let planted = Planted::new(dir.path(), "planted.snap");
    let out = run_umask0(&["snapshot", "-q", "--pid", &me, "-o", &planted.link]);
    assert!(out.status.success(), "{out:?}");
    planted.assert_replaced();
    let v = report_json(&["report", "processes", "-i", &planted.link, "-f", "json"]);
    process_row(&v, std::process::id());
    // Nothing else was left in the directory.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
}

/// `snapshot`, `record` and `trace` with `-o -` on a terminal (script(1)
/// gives them one) are usage errors, before anything is read or run: no
/// binary reaches the terminal. The snapshot into a pipe streams (the
/// test below).
#[test]
fn binary_files_to_a_terminal_are_refused() {
    if Command::new("script").arg("--version").output().is_err() {
        skip!("script", "script (util-linux) is not installed");
    }
    let me = std::process::id();
    let bin = pagescope_bin();
    let bin = bin.display();
    for (cmd, what) in [
        (format!("{bin} snapshot -q --pid {me} -o -"), "a snapshot"),
        (format!("{bin} record -q -o - -- true"), "a recording"),
        (format!("{bin} trace -q -o - -- true"), "a trace"),
    ] {
        // -e: script exits with the command's code.
        let out = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let seen = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {seen}");
        assert_eq!(
            seen.trim_end(),
            format!(
                "error: -o -: standard output is a terminal, and {what} is binary (pipe it to \
                 another command, or redirect it to a file)"
            ),
            "{cmd}"
        );
    }
}

/// `snapshot -o -` streams to standard output, and `report --input -` and
/// `diff` read it back from standard input.
#[test]
fn snapshots_stream_through_standard_output_and_input() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(&[], &["--size", "16M", "--hold"], "done");
    let pid = pt.pid().to_string();
    let stream = run_ok(&["snapshot", "-q", "--pid", &pid, "-o", "-"]).stdout;
    let rss = smaps_rollup(pt.pid())["Rss"] / 4;
    let out = run_stdin(
        &["report", "processes", "--input", "-", "-f", "json"],
        &stream,
    );
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = process_row(&v, pt.pid());
    assert_close(
        "rss_pages",
        row["rss_pages"].as_f64().unwrap(),
        rss as f64,
        1.0,
    );
    assert!(row["rss_pages"].as_u64().unwrap() >= pt.pages());

    // A stream cut short says so, as a file does.
    let out = run_stdin(&["report", "total", "-i", "-"], &stream[..stream.len() / 2]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("standard input was cut short"), "{stderr}");

    // diff: one side from standard input; a snapshot against itself.
    let snap = temp_path(dir.path(), "s.snap");
    std::fs::write(&snap, &stream).unwrap();
    let out = run_stdin(&["diff", &snap, "-", "-f", "json"], &stream);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let file_side = report_json(&["diff", &snap, &snap, "-f", "json"]);
    assert_eq!(v, file_side);
    // Both sides can't be read from one stream.
    let out = run_stdin(&["diff", "-", "-"], &stream);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    drop(pt);
}

/// Ctrl-C stops a snapshot at once: it exits 130 and leaves a file that
/// reports as cut short. A held 4 GiB pagetest (a million pages) read by
/// one thread keeps the snapshot going for a quarter of a second or more
/// after its first processes: the signal goes 50 ms after the file
/// appears (a fixed delay from the start raced a snapshot that finished
/// first on a quiet machine).
#[test]
fn interrupted_snapshot_exits_130_and_leaves_a_file_cut_short() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(&[], &["--size", "4G", "--hold"], "done");
    let snap = temp_path(dir.path(), "int.snap");
    let child = Command::new(pagescope_bin())
        .args(["snapshot", "-q", "--jobs", "1", "-o", &snap])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !std::path::Path::new(&snap).exists()
        && started.elapsed() < std::time::Duration::from_secs(10)
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    let sent = std::time::Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let took = sent.elapsed();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(
        took < std::time::Duration::from_millis(500),
        "it stopped {took:?} after SIGINT"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("interrupted"), "{stderr}");
    let out = run_ok(&["report", "processes", "-i", &snap, "-f", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("was cut short"), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["notes"][0].as_str().unwrap().contains("cut short"));
    assert!(!v["processes"].as_array().unwrap().is_empty());
    drop(pt);
}

/// A snapshot of a zombie says it is one (exited, its parent named), not
/// that it exited during the scan.
#[test]
fn a_zombie_is_named_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let (mut parent, zombie) = zombie();
    let zombie = zombie.to_string();
    let snap = temp_path(dir.path(), "z.snap");
    let out = run(&[], &["snapshot", "--pid", &zombie, "-o", &snap]);
    let _ = parent.kill();
    let _ = parent.wait();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    let parent_pid = format!("pid {}", parent.id());
    assert!(
        said.contains(&format!("pid {zombie}: a zombie")) && said.contains(&parent_pid),
        "{said}"
    );
}

/// A process whose main thread has exited while another thread holds its
/// memory (a zombie leader: /proc/PID shows no memory) is read through
/// that thread: its pages count, under its pid and name, as the kernel's
/// smaps_rollup read through /proc/PID/task/TID says, and as many as
/// pagetest wrote at least.
#[test]
fn a_process_whose_main_thread_exited_is_counted() {
    require_pfns!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (pt, pid, tid) = held_by_a_thread();
    let rollup = task_smaps_rollup(pid, tid as u32);
    let kb = pt.ready["page_size"].as_u64().unwrap() / 1024;
    let snap = temp_path(dir.path(), "s.snap");
    let out = run_ok(&["snapshot", "-q", "--pid", &pid.to_string(), "-o", &snap]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!said.contains(&format!("pid {pid}")), "{said}");
    // Its PSS moves as other processes map or unmap the libraries it
    // maps; the rest holds still.
    let steady = |mut r: std::collections::HashMap<String, u64>| {
        r.retain(|k, _| !k.starts_with("Pss"));
        r
    };
    let after = task_smaps_rollup(pid, tid as u32);
    assert_eq!(steady(rollup.clone()), steady(after), "the memory moved");
    let procs = report_json(&["report", "processes", "-i", &snap, "-f", "json"]);
    let row = process_row(&procs, pid);
    assert_eq!(row["comm"], "pagetest");
    let pages = |k: &str| row[k].as_u64().unwrap_or_else(|| panic!("{k}: {row}"));
    assert_eq!(pages("rss_pages"), rollup["Rss"] / kb, "{row}");
    assert_eq!(
        pages("uss_pages"),
        (rollup["Private_Clean"] + rollup["Private_Dirty"]) / kb,
        "{row}"
    );
    assert!(pages("uss_pages") >= pt.pages(), "{row}");
    let total = report_json(&["report", "total", "-i", &snap, "-f", "json"]);
    assert!(
        total["user_anon_pages"].as_u64().unwrap() >= pt.pages(),
        "{total}"
    );
}

/// pagetest holding 16 MiB in a thread, its main thread exited (a zombie
/// leader, whose /proc/PID shows no memory): pagetest, its pid, and the
/// thread that holds, asleep.
fn held_by_a_thread() -> (Pagetest, u32, u64) {
    let args = ["--size", "16M", "--mode", "anon", "--leader-exits"];
    let pt = Pagetest::start(&[], &args, "leader-exits");
    let (pid, tid) = leader_exited(&pt);
    // The kernel shows the memory through the thread only.
    let leader = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    assert!(!leader.contains("Rss:"), "{leader}");
    (pt, pid, u64::from(tid))
}

/// A process read through a thread (its main thread exited) that exits
/// during the read, while another thread holds the memory on, is read
/// again through that one: counted as the kernel's smaps_rollup says,
/// with no note about it. (A test hook pauses the snapshot once it has
/// chosen the thread; pagetest then hands its memory to a new thread.)
#[test]
fn a_process_is_read_again_when_the_thread_it_was_read_through_exits() {
    require_pfns!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (mut pt, pid, tid) = held_by_a_thread();
    let pause = temp_path(dir.path(), "pause");
    let snap = temp_path(dir.path(), "s.snap");
    let snapshot = Command::new(pagescope_bin())
        .args(["snapshot", "-q", "--pid", &pid.to_string(), "-o", &snap])
        .env("PAGESCOPE_PAUSE_READING_THROUGH", &pause)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let chosen: u64 = loop {
        if let Some(t) = std::fs::read_to_string(&pause)
            .ok()
            .and_then(|t| t.parse().ok())
        {
            break t;
        }
        assert!(std::time::Instant::now() < deadline, "no pause at {pause}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert_eq!(chosen, tid, "read through another thread than the holder");
    let usr1 = rustix::process::Signal::USR1;
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), usr1)
        .unwrap();
    let next = pt.until("relay")["tid"].as_u64().unwrap();
    while std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "thread {tid} never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    wait_asleep(next);
    std::fs::remove_file(&pause).unwrap();
    let out = snapshot.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!said.contains(&format!("pid {pid}")), "{said}");
    let rollup = task_smaps_rollup(pid, next as u32);
    let kb = pt.ready["page_size"].as_u64().unwrap() / 1024;
    let procs = report_json(&["report", "processes", "-i", &snap, "-f", "json"]);
    let row = process_row(&procs, pid);
    let pages = |k: &str| row[k].as_u64().unwrap_or_else(|| panic!("{k}: {row}"));
    assert_eq!(pages("rss_pages"), rollup["Rss"] / kb, "{row}");
    assert!(pages("uss_pages") >= pt.pages(), "{row}");
}

/// A process's hugetlb pages are counted apart from its RSS, as smaps
/// counts them (`Private_Hugetlb + Shared_Hugetlb`, not in `Rss`), and
/// `report total` gives the hugetlb pages in use as meminfo does.
#[test]
fn hugetlb_pages_are_counted_as_the_kernel_does() {
    require_pfns!();
    let _serial = serial();
    let Some(huge_kb) = meminfo("Hugepagesize") else {
        skip!(
            "hugetlb",
            "no Hugepagesize in /proc/meminfo: a kernel without CONFIG_HUGETLBFS"
        )
    };
    let n = 4;
    let _pool = match HugePages::reserve(n) {
        Ok(pool) => pool,
        Err(why) => skip!("hugetlb", why),
    };
    let dir = tempfile::tempdir().unwrap();
    let size = format!("{}K", n * huge_kb);
    let args = ["--size", &size, "--mode", "hugetlb", "--hold"];
    let pt = Pagetest::start(&[], &args, "done");
    let pid = pt.pid();
    let kb = pt.ready["page_size"].as_u64().unwrap() / 1024;
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let hugetlb_kb: u64 = smaps
        .lines()
        .filter(|l| l.starts_with("Private_Hugetlb:") || l.starts_with("Shared_Hugetlb:"))
        .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(hugetlb_kb, n * huge_kb, "smaps of a buffer written whole");
    let in_use = hugetlb_in_use_kb();
    let rollup = smaps_rollup(pid);
    let snap = temp_path(dir.path(), "h.snap");
    snapshot_pid(pid, &snap);
    assert_eq!(
        in_use,
        hugetlb_in_use_kb(),
        "the hugetlb pages in use moved"
    );
    let procs = report_json(&["report", "processes", "-i", &snap, "-f", "json"]);
    let row = process_row(&procs, pid);
    let pages = |k: &str| row[k].as_u64().unwrap_or_else(|| panic!("{k}: {row}"));
    assert_eq!(pages("hugetlb_pages"), hugetlb_kb / kb, "{row}");
    assert_eq!(pages("hugetlb_pages"), pt.pages(), "{row}");
    // Not in its RSS, as not in the kernel's.
    assert_close(
        "rss_pages",
        pages("rss_pages") as f64,
        (rollup["Rss"] / kb) as f64,
        1.0,
    );
    assert!(pages("rss_pages") < pt.pages(), "{row}");
    let total = report_json(&["report", "total", "-i", &snap, "-f", "json"]);
    let field = |k: &str| total[k].as_u64().unwrap_or_else(|| panic!("{k}: {total}"));
    assert_eq!(field("hugetlb_pages"), in_use / kb, "{total}");
    assert_eq!(field("user_hugetlb_pages"), pt.pages(), "{total}");
    // The page dump lists them, each with kpageflags' `huge` (as the
    // kernel's page-types does), and `--flags huge` selects them alone.
    let dump = report_json(&[
        "report", "pages", "-i", &snap, "--flags", "huge", "-f", "json",
    ]);
    let (start, end) = pt.buffer();
    let huge = dump["pages"].as_array().unwrap();
    assert_eq!(huge.len() as u64, pt.pages(), "{dump}");
    assert!(huge.iter().all(|p| {
        let v = p["vaddr"].as_u64().unwrap();
        (start..end).contains(&v) && p["kpageflags"].as_str().unwrap().contains('G')
    }));
}
