//! `pagescope record` on this machine's kernel: the memref paper's data
//! verification (section 4) against pagetest's known access pattern, for
//! each backend this kernel has. The rest is in record_processes.rs
//! (which processes are recorded, and from when) and record_cli.rs (the
//! command: interruptions, bad input, refusals, files, other observers).

#[macro_use]
mod util;

use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use util::record::*;
use util::*;

/// Records pagetest (1 GiB, 10 iterations 1 s apart) at 100 ms with
/// `backend` and checks the spikes of its buffer: 10 of them, each within
/// 2% of the buffer's pages, nothing between them, writes as the op says.
fn verify(backend: &str, op: &str) {
    verify_with(backend, op, &[]);
}

/// [`verify`], with more `record` options.
fn verify_with(backend: &str, op: &str, options: &[&str]) {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "r.rec");
    let mut record_options = vec!["--backend", backend, "--interval", "100ms"];
    record_options.extend_from_slice(options);
    let mut pt = Pagetest::recorded(
        &record_options,
        &out,
        &[
            "--size",
            "1G",
            "--mode",
            "malloc",
            "--op",
            op,
            "--iterations",
            "10",
            "--sleep",
            "1s",
            "--delay",
            "1s",
        ],
        "done",
    );
    let rec = pt.recording(&out);
    assert_eq!(rec.end.as_ref().unwrap().why(), "exited");
    let h = rec.header();
    // Every page counts once, but with --sample.
    let sample = options
        .iter()
        .position(|&o| o == "--sample")
        .map_or(1.0, |i| options[i + 1].parse().unwrap());
    assert_eq!(h.sample, Some(sample));
    let (start, end) = pt.buffer();
    let pages = pt.pages();
    let rows = temporal(&out, Some((start, end)));
    assert_eq!(rows.len(), rec.intervals.len());
    // The first iteration's start, in recording time: spikes before it
    // are the fill of a read run.
    let first = pt.lines[1]["start_ns"].as_u64().unwrap() - h.start_monotonic_ns;
    let after: Vec<Value> = rows
        .iter()
        .filter(|r| r["end_ns"].as_u64().unwrap() > first)
        .cloned()
        .collect();
    // Nothing between iterations: exactly nothing where the backend sees
    // pages fault (a traced program now and then stalls on its faults for
    // most of an interval, so the fault backend's spikes end only at an
    // interval with no page of the buffer); a few pages elsewhere.
    let quiet = if backend == "fault" { 0 } else { 64 };
    let found = spikes(&after, quiet);
    assert_eq!(
        found.len(),
        10,
        "{backend}/{op}: expected 10 spikes, found {found:?}"
    );
    for s in &found {
        let err = (s.user as f64 - pages as f64).abs() / pages as f64;
        assert!(
            err <= 0.02,
            "{backend}/{op}: spike at interval {} holds {} pages, buffer {pages} ({:.2}% off)",
            s.first_seq,
            s.user,
            err * 100.0
        );
        match (op, s.written) {
            ("write", Some(w)) => assert!(w as f64 >= 0.98 * pages as f64, "{s:?}"),
            ("read", Some(w)) => assert!(w <= quiet, "a read run wrote: {s:?}"),
            _ => {}
        }
    }
    // The launched program is named by its own command line, not by
    // pagescope's (it is first seen as pagescope's fork).
    let procs = analyze_rows(&out, "processes", "processes", None);
    let row = procs
        .iter()
        .find(|p| p["pid"].as_u64() == Some(pt.pid() as u64))
        .unwrap_or_else(|| panic!("pagetest {} not among {procs:?}", pt.pid()));
    let command = row["command"].to_string();
    assert!(
        command.contains("pagetest") && !command.contains(" record "),
        "{backend}: {command}"
    );
    // The heat map's cells over the buffer add up to the same intervals.
    let cells = analyze_rows(&out, "heatmap", "cells", Some((start, end)));
    for row in &rows {
        let seq = &row["seq"];
        let sum: u64 = cells
            .iter()
            .filter(|c| &c["seq"] == seq)
            .map(|c| c["user_pages"].as_u64().unwrap())
            .sum();
        assert_eq!(sum, row["user_pages"].as_u64().unwrap(), "interval {seq}");
    }
    if h.granularity != pagescope_core::record::Granularity::Vma
        && h.granularity != pagescope_core::record::Granularity::Region
    {
        // The views that count pages themselves agree with temporal's
        // counts (scaled the same way for a sample) on the buffer's
        // intervals: the working set over the buffer, and the pages of
        // the 2 MiB regions, most of them referenced in every page.
        let wss = analyze_rows(&out, "wss", "intervals", Some((start, end)));
        let huge = analyze_rows(&out, "hugepages", "intervals", None);
        let whole = temporal(&out, None);
        let buffer_regions = pages / 512;
        for (i, row) in rows.iter().enumerate() {
            let user = row["user_pages"].as_u64().unwrap();
            if user < pages / 2 {
                continue;
            }
            let w = wss[i]["wss_pages"].as_u64().unwrap();
            assert_close(
                &format!("{backend}: wss of interval {i}"),
                w as f64,
                user as f64,
                2.0,
            );
            let all = whole[i]["user_pages"].as_u64().unwrap();
            let hp = huge[i]["referenced_pages"].as_u64().unwrap();
            assert_close(
                &format!("{backend}: hugepages of interval {i}"),
                hp as f64,
                all as f64,
                2.0,
            );
            if user > pages * 98 / 100 {
                let full = huge[i]["full_regions"].as_u64().unwrap();
                assert!(
                    full + 2 >= buffer_regions,
                    "{backend}: interval {i} has {full} full regions of the buffer's {buffer_regions}"
                );
            }
        }
    }
    if h.granularity == pagescope_core::record::Granularity::Vma {
        // Pages can't be placed on nodes or in 2 MiB regions, nor
        // counted over windows.
        for view in ["hugepages", "numa", "wss"] {
            let o = run(&[], &["analyze", &out, view]);
            assert_eq!(o.status.code(), Some(2), "{view}: {o:?}");
            assert!(String::from_utf8_lossy(&o.stderr).contains(backend));
        }
    }
    if h.writes == pagescope_core::record::WriteSource::None {
        assert!(rows.iter().all(|r| r["written_pages"].is_null()));
    }
    // Writes are known wherever the kernel has a way: soft-dirty bits,
    // else PAGEMAP_SCAN under asynchronous write protection (6.7).
    use pagescope_core::record::WriteSource;
    let page_size = rustix::param::page_size() as u64;
    let want = if backend == "fault" {
        WriteSource::Backend
    } else if pagescope_linux::record::has_soft_dirty(Path::new("/proc"), page_size) {
        WriteSource::SoftDirty
    } else if pagescope_linux::record::scan_supported() {
        WriteSource::PagemapScan
    } else {
        WriteSource::None
    };
    assert_eq!(h.writes, want, "{backend}");
    // Kernel resident pages are meminfo's, read at each boundary.
    let last = rec.intervals.last().unwrap().kernel;
    assert!(last.slab > 0 && last.page_tables > 0 && last.kernel_stack > 0);
}

#[test]
fn refs_backend_sees_every_iteration_write() {
    verify("refs", "write");
}

#[test]
fn refs_backend_sees_every_iteration_read() {
    verify("refs", "read");
}

#[test]
fn system_wide_refs_recording_has_each_process() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "s.rec");
    let mut pt = Pagetest::start(
        &[],
        &[
            "--size",
            "1G",
            "--mode",
            "malloc",
            "--op",
            "write",
            "--iterations",
            "6",
            "--sleep",
            "1s",
            "--delay",
            "1500ms",
        ],
        "ready",
    );
    let recorder = Command::new(pagescope_bin())
        .args(record_args(&system_refs("10s"), &out))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // What this test can see it may not read: the recorder must agree.
    let denied: Vec<u32> = pagescope_linux::procfs::list_pids(Path::new("/proc"))
        .unwrap()
        .into_iter()
        .filter(|p| {
            std::fs::File::open(format!("/proc/{p}/pagemap"))
                .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
        })
        .collect();
    while pt.next_line()["event"] != "done" {}
    let o = recorder.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let rec = read_complete_recording(&out);
    let h = rec.header();
    let notes = h.notes.join("\n");
    // Why writes are not recorded names what this kernel has (soft-dirty
    // bits, asked of the kernel through VmFlags, or not).
    let soft_dirty = std::fs::read_to_string("/proc/self/smaps").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("VmFlags:") && l.contains(" sd"))
    });
    assert!(
        notes.contains("not recorded for the whole machine")
            && notes.contains("no soft-dirty bits") != soft_dirty,
        "soft-dirty here: {soft_dirty}; notes: {notes}"
    );
    match denied.first() {
        Some(p) => assert!(
            notes.contains("could not be read") && notes.contains(&format!("pids {p}")),
            "pid {p} can't be read, and the notes don't say so: {notes}"
        ),
        None => {
            eprintln!("every process here can be read: the note on those that can't is not seen")
        }
    }
    let pid = pt.pid();
    let pages = pt.pages();
    let range = range_arg(pt.buffer());
    let pid_arg = pid.to_string();
    let json = |view: &str, key: &str| -> Vec<Value> {
        rows(
            &analyze_json(&out, view, &["--pid", &pid_arg, "--range", &range]),
            key,
        )
    };
    let rows = json("temporal", "intervals");
    assert_eq!(rows.len(), rec.intervals.len());
    // With no page frames, the machine's user_pages adds processes up,
    // and says so.
    let temporal_notes =
        report_json(&["analyze", &out, "temporal", "--format", "json"])["notes"].to_string();
    assert!(
        temporal_notes.contains("sum over processes"),
        "{temporal_notes}"
    );
    // Iterations in recording time, and whether they keep clear of every
    // boundary's work (the recorder's CPU in the interval it ends, and
    // 20 ms more).
    let iterations: Vec<(u64, u64)> = pt
        .lines
        .iter()
        .filter(|l| l["event"] == "iteration")
        .map(|l| {
            let t = |k: &str| l[k].as_u64().unwrap() - h.start_monotonic_ns;
            (t("start_ns"), t("end_ns"))
        })
        .collect();
    assert_eq!(iterations.len(), 6);
    let clear = |&(s, e): &(u64, u64)| {
        rec.intervals.iter().all(|i| {
            let (b0, b1) = (i.end_ns, i.end_ns + i.recorder_cpu_ns + 20_000_000);
            e < b0 || s > b1
        })
    };
    let mut held = 0;
    for (row, i) in rows.iter().zip(&rec.intervals) {
        let user = row["user_pages"].as_u64().unwrap();
        let inside: Vec<&(u64, u64)> = iterations
            .iter()
            .filter(|&&(s, e)| s < i.end_ns && e > i.start_ns)
            .collect();
        if inside.is_empty() {
            assert!(
                user <= 64,
                "interval {} holds {user} pages and no iteration",
                i.seq
            );
        } else if inside
            .iter()
            .all(|&&(s, e)| s >= i.start_ns && e <= i.end_ns && clear(&(s, e)))
        {
            let err = (user as f64 - pages as f64).abs() / pages as f64;
            assert!(
                err <= 0.02,
                "interval {}: {user} pages, buffer {pages}",
                i.seq
            );
            held += 1;
        } else {
            assert!(
                user <= pages + pages / 50,
                "interval {}: {user} pages",
                i.seq
            );
        }
    }
    assert!(
        held >= 3,
        "only {held} intervals held a whole iteration clear of boundaries"
    );
    // Its totals: the same intervals, and its command line.
    let procs = json("processes", "processes");
    assert_eq!(procs.len(), 1, "{procs:?}");
    let total: u64 = rows.iter().map(|r| r["user_pages"].as_u64().unwrap()).sum();
    assert_eq!(procs[0]["user_pages"].as_u64().unwrap(), total);
    assert!(procs[0]["command"].as_str().unwrap().contains("pagetest"));
    // Every process on its own rows: pagetest's are among many.
    let all = report_json(&["analyze", &out, "processes", "--format", "json"])["processes"]
        .as_array()
        .unwrap()
        .clone();
    assert!(all.len() > 1 && all.iter().any(|p| p["pid"] == pid));
    assert!(denied.iter().all(|d| all.iter().all(|p| p["pid"] != *d)));
    // --pid selects rows, which these views don't have.
    let o = run(
        &[],
        &["analyze", &out, "hugepages", "--pid", &pid.to_string()],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--pid apply to"));
}

#[test]
fn fault_backend_sees_every_iteration_write() {
    if fault_available() {
        verify("fault", "write");
    }
}

#[test]
fn fault_backend_sees_every_iteration_read() {
    if fault_available() {
        verify("fault", "read");
    }
}

/// A quarter of the pages sampled: each spike is still the buffer's pages
/// within 2% (the sample is a quarter of every 4 MiB of the buffer, give
/// or take some pages in the groups its ends cut).
#[test]
fn fault_backend_sampled_estimates_every_iteration() {
    if fault_available() {
        verify_with("fault", "write", &["--sample", "0.25"]);
    }
}

/// `--pid` with the fault backend: pagetest, its buffer written before,
/// is attached while it waits; each of its 3 write passes is one spike of
/// the buffer's pages, as for a launched one, and the recording ends when
/// it exits.
#[test]
fn fault_backend_attaches_to_a_running_process() {
    if fault_available() {
        attach_and_verify(None);
    }
}

/// `--pid --sample 0.25`: at attach only the sample leaves the program
/// (pagemap shows three quarters of the buffer still present, within 1%),
/// and each pass is the sample's pages times 4 within 0.1%, and the
/// buffer's pages within 0.5%. The buffer is 256 MiB: 64 groups of 4 MiB
/// that each hold 256 pages of the sample, but for the two its ends cut,
/// whose share of the sample varies by about 7 pages each (0.34% of the
/// buffer at 4 standard deviations, scaled by 4).
#[test]
fn fault_backend_attached_with_a_sample_moves_out_only_the_sample() {
    if fault_available() {
        attach_and_verify(Some(0.25));
    }
}

/// With a sample, a first touch outside it is filled with its group's
/// other untouched pages (zero pages), and nothing of the program's data
/// changes: pagetest reading the buffer it filled gets every page's
/// value (a checksum of one per page per pass), and `sort` of generated
/// lines prints what it prints unrecorded.
#[test]
fn sampled_fault_recording_keeps_the_program_exact() {
    if !fault_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "r.rec");
    let recorded = |command: &[&str]| {
        let mut args = vec![
            "record",
            "-q",
            "--backend",
            "fault",
            "--sample",
            "0.01",
            "--interval",
            "100ms",
            "-o",
            &out,
            "--",
        ];
        args.extend_from_slice(command);
        let o = run(&[], &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    let pagetest = pagetest_bin();
    let stdout = recorded(&[
        pagetest.to_str().unwrap(),
        "--size",
        "256M",
        "--mode",
        "malloc",
        "--op",
        "read",
        "--iterations",
        "2",
        "--sleep",
        "0",
    ]);
    let done: Value =
        serde_json::from_str(String::from_utf8_lossy(&stdout).lines().last().unwrap()).unwrap();
    assert_eq!(done["checksum"], 2 * 65536, "{done}");
    let script = "seq 1 400000 | sort -r | md5sum";
    let plain = Command::new("sh").args(["-c", script]).output().unwrap();
    assert_eq!(recorded(&["sh", "-c", script]), plain.stdout);
}

/// The pages of `[start, end)` present in `pid` (pagemap).
fn present_pages(pid: u32, start: u64, end: u64) -> u64 {
    let path = std::path::PathBuf::from(format!("/proc/{pid}/pagemap"));
    let file = std::fs::File::open(&path).unwrap();
    let mut n = 0;
    pagescope_linux::pagemap::PagemapReader::new(file, path, 4096)
        .for_each(start, end, |_, e| n += u64::from(e.is_present()))
        .unwrap();
    n
}

fn attach_and_verify(sample: Option<f64>) {
    use std::io::{BufRead, BufReader, Write};
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "r.rec");
    let size = if sample.is_some() { "256M" } else { "64M" };
    let mut pt = Command::new(pagetest_bin())
        .args([
            "--size",
            size,
            "--op",
            "write",
            "--prefault",
            "--iterations",
            "3",
            "--sleep",
            "1s",
            "--wait-stdin",
        ])
        // A process group of its own, as a shell's job has.
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(pt.stdout.take().unwrap()).lines();
    let ready: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let pid = pt.id().to_string();
    let (start, end) = (
        ready["start"].as_u64().unwrap(),
        ready["end"].as_u64().unwrap(),
    );
    let pages = ready["pages"].as_u64().unwrap();
    let fraction = sample.map(|f| f.to_string());
    let mut options = vec!["--backend", "fault", "--interval", "100ms", "--pid", &pid];
    if let Some(f) = &fraction {
        options.extend(["--sample", f]);
    }
    let mut rec = Command::new(pagescope_bin())
        .args(record_args(&options, &out))
        .spawn()
        .unwrap();
    // The header is written once the process is attached.
    assert!(
        wait_for(Duration::from_secs(30), || std::fs::metadata(&out)
            .is_ok_and(|m| m.len() > 0)),
        "the recorder wrote nothing"
    );
    let present = present_pages(pt.id(), start, end);
    let kept = pages as f64 * (1.0 - sample.unwrap_or(1.0));
    assert!(
        (present as f64 - kept).abs() <= 0.01 * pages as f64,
        "{present} pages of {pages} present after the attach, expected {kept}"
    );
    pt.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(pt.wait().unwrap().success());
    assert!(rest.last().unwrap().contains("done"), "{rest:?}");
    let status = rec.wait().unwrap();
    assert!(status.success(), "record exited with {status}");
    let r = read_complete_recording(&out);
    assert_eq!(r.end.as_ref().unwrap().why(), "exited");
    // The header says what the counts stand for.
    assert_eq!(r.header().sample, Some(sample.unwrap_or(1.0)));
    // What the sample stands for: its pages (those that left) scaled.
    let estimate = (pages - present) as f64 / sample.unwrap_or(1.0);
    let found = spikes(&temporal(&out, Some((start, end))), 0);
    assert_eq!(found.len(), 3, "expected 3 spikes, found {found:?}");
    for s in &found {
        // The count is exact for the sample (rows are not capped at their
        // size, which would bias the sum low); the sample is a quarter of
        // the buffer within 0.5%.
        let buffer_tol = if sample.is_some() { 0.005 } else { 0.02 };
        for (what, want, tol) in [
            ("buffer", pages as f64, buffer_tol),
            ("sample's estimate", estimate, 0.001),
        ] {
            let err = (s.user as f64 - want).abs() / want;
            assert!(err <= tol, "{s:?}: {what} {want}");
        }
        assert!(s.written.unwrap() as f64 >= 0.98 * pages as f64, "{s:?}");
    }
}

/// A recorded command that execs (a shell's `exec`): the recording goes
/// on, and the new image's writes are tracked (it gets write tracking of
/// its own, as a new process would). pagetest, exec'd by sh, writes its
/// buffer 4 times 1 s apart: 4 spikes of its pages within 2%, all written
/// where the kernel tells written pages.
#[test]
fn a_command_that_execs_is_recorded_with_its_writes() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "r.rec");
    let mut wrapper = recorder(&["--backend", "refs", "--interval", "100ms"], &out);
    wrapper.extend(["sh", "-c", "sleep 0.5; exec \"$0\" \"$@\""]);
    let args = [
        "--size",
        "64M",
        "--iterations",
        "4",
        "--sleep",
        "1s",
        "--delay",
        "1s",
    ];
    let mut pt = Pagetest::start(&wrapper, &args, "done");
    let rec = pt.recording(&out);
    assert_eq!(rec.end.as_ref().unwrap().why(), "exited");
    let (start, end) = pt.buffer();
    let pages = pt.pages();
    let first = pt.lines[1]["start_ns"].as_u64().unwrap() - rec.header().start_monotonic_ns;
    let after: Vec<Value> = temporal(&out, Some((start, end)))
        .into_iter()
        .filter(|r| r["end_ns"].as_u64().unwrap() > first)
        .collect();
    let found = spikes(&after, 64);
    assert_eq!(found.len(), 4, "expected 4 spikes, found {found:?}");
    let tracked = rec.header().writes != pagescope_core::record::WriteSource::None;
    for s in &found {
        let err = (s.user as f64 - pages as f64).abs() / pages as f64;
        assert!(err <= 0.02, "{s:?}: buffer {pages}");
        // Where the header says writes are tracked, the exec'd image's
        // are counted.
        assert_eq!(s.written.is_some(), tracked, "{s:?}");
        if let Some(w) = s.written {
            assert!(w as f64 >= 0.98 * pages as f64, "{s:?}: buffer {pages}");
        }
    }
    // The process is named by its command line after the exec.
    let procs = analyze_rows(&out, "processes", "processes", None);
    let row = procs
        .iter()
        .find(|p| p["pid"].as_u64() == Some(pt.pid() as u64))
        .unwrap_or_else(|| panic!("pagetest {} not among {procs:?}", pt.pid()));
    let command = row["command"].to_string();
    assert!(
        command.contains("pagetest") && command.contains("64M"),
        "{command}"
    );
}

#[test]
fn fault_backend_refuses_running_processes() {
    let me = std::process::id().to_string();
    for what in [&["--pid", &me, "--pid", "1"][..], &["--system"][..]] {
        let mut args = vec![
            "record",
            "-q",
            "--backend",
            "fault",
            "--duration",
            "100ms",
            "-o",
            "/dev/null",
        ];
        args.extend_from_slice(what);
        let o = run(&[], &args);
        assert_eq!(o.status.code(), Some(1), "{what:?}: {o:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("launches"));
    }
    // --sample is the fault backend's alone.
    let o = run(
        &[],
        &["record", "--sample", "0.5", "--system", "-o", "/dev/null"],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

/// The idle page bitmap where the kernel has it; elsewhere a refusal that
/// names the kernel option (this machine: no CONFIG_IDLE_PAGE_TRACKING;
/// the guest kernels of tests/kernels run both sides).
#[test]
fn idle_backend_verifies_or_refuses() {
    if Path::new("/sys/kernel/mm/page_idle/bitmap").exists() && pfns_visible() {
        verify("idle", "write");
        verify("idle", "read");
        return;
    }
    let o = run(
        &[],
        &[
            "record",
            "-q",
            "--backend",
            "idle",
            "--duration",
            "100ms",
            "-o",
            "/dev/null",
            "--pid",
            &std::process::id().to_string(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("CONFIG_IDLE_PAGE_TRACKING") || err.contains("root"),
        "{err}"
    );
}

/// The kdamonds as sysfs shows them: count, and each one's state and pid.
fn kdamonds(dir: &Path) -> String {
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let n: u32 = read(&dir.join("nr_kdamonds")).trim().parse().unwrap_or(0);
    let mut out = format!("nr_kdamonds={n}");
    for i in 0..n {
        let k = dir.join(i.to_string());
        out += &format!(
            " {i}:state={},pid={}",
            read(&k.join("state")).trim(),
            read(&k.join("pid")).trim()
        );
    }
    out
}

/// DAMON on this machine. A kdamond that pagescope did not create is
/// refused and left exactly as it was (count, state and pid before and
/// after); without one, a process target is refused where DAMON has no
/// vaddr operations. Neither path writes to DAMON's sysfs. The backend
/// itself is verified in the `full` guest kernel (tests/kernels), where
/// DAMON is pagescope's to use.
#[test]
fn damon_refuses_and_leaves_kdamonds_alone() {
    let dir = Path::new("/sys/kernel/mm/damon/admin/kdamonds");
    let me = std::process::id().to_string();
    let record = |what: &[&str]| {
        let mut args = vec![
            "record",
            "-q",
            "--backend",
            "damon",
            "--duration",
            "200ms",
            "-o",
            "/dev/null",
        ];
        args.extend_from_slice(what);
        run(&[], &args)
    };
    if !dir.exists() {
        let o = record(&["--pid", &me]);
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("CONFIG_DAMON_SYSFS"));
        return;
    }
    let before = kdamonds(dir);
    let vaddr = std::fs::read_to_string("/proc/kallsyms")
        .unwrap_or_default()
        .contains(" damon_va_initcall");
    if !before.starts_with("nr_kdamonds=0") {
        eprintln!("a kdamond runs here ({before}): the backend must refuse and leave it alone");
        for what in [&["--system"][..], &["--pid", &me][..]] {
            let o = record(what);
            assert_eq!(o.status.code(), Some(1), "{what:?}: {o:?}");
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("did not create"), "{err}");
        }
    } else if !vaddr {
        let o = record(&["--pid", &me]);
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("CONFIG_DAMON_VADDR"), "{err}");
    } else {
        skip(
            "damon-vaddr-unused",
            "DAMON here has vaddr and no kdamond; recording would create one on this \
             machine, so the backend is verified in the full guest kernel (tests/kernels/run)",
        );
    }
    assert_eq!(kdamonds(dir), before, "the kdamonds changed");
}

/// Kernel pages resident, as recorded, against /proc/meminfo read at the
/// same moment.
#[test]
fn kernel_resident_matches_meminfo() {
    // Other tests start and end processes meanwhile, so the kernel's counters
    // move between two reads of /proc/meminfo (a 4 GiB process's page tables
    // are 2 000 pages). pagescope's reading is compared with the kernel's
    // read just before and just after it: it must lie between them, within
    // 5%. A reading that misses the bracket is retried, as the counters may
    // have moved out and back between the reads.
    let root = pagescope_linux::Root::default();
    let ps = pagescope_linux::system::page_size();
    let meminfo = || -> [f64; 3] {
        let text = std::fs::read_to_string("/proc/meminfo").unwrap();
        let kb = |key: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}:")))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        [
            kb("Slab") as f64,
            (kb("PageTables") + kb("SecPageTables")) as f64,
            kb("KernelStack") as f64,
        ]
    };
    let names = ["slab", "page tables", "kernel stacks"];
    let mut last = String::new();
    for _ in 0..20 {
        let before = meminfo();
        let k = pagescope_linux::record::kernel_resident(&root.proc, ps).unwrap();
        let after = meminfo();
        let ours = [k.slab, k.page_tables, k.kernel_stack].map(|p| (p * ps / 1024) as f64);
        let outside: Vec<String> = (0..3)
            .filter(|&i| {
                let (lo, hi) = (before[i].min(after[i]), before[i].max(after[i]));
                ours[i] < lo * 0.95 - 1.0 || ours[i] > hi * 1.05 + 1.0
            })
            .map(|i| {
                format!(
                    "{}: pagescope says {} kB, the kernel said {} kB before and {} kB after",
                    names[i], ours[i], before[i], after[i]
                )
            })
            .collect();
        if outside.is_empty() {
            return;
        }
        last = outside.join("; ");
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("kernel resident memory outside the kernel's own readings 20 times: {last}");
}

/// Processes that start and end between two boundaries are counted: three
/// pagetests run one after another inside one interval of the fault
/// backend, each writing its 20 MiB (5 120 pages) once, and each shows
/// its pages in the per-process totals (their frames read when each
/// exited).
#[test]
fn fault_backend_counts_processes_that_live_inside_an_interval() {
    if !fault_available() {
        return;
    }
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "short.rec");
    let script = format!(
        "for i in 1 2 3; do {} --size 20M --mode anon --iterations 1 --sleep 0 >/dev/null; done; sleep 3",
        pagetest_bin().display()
    );
    let o = run(
        &[],
        &[
            "record",
            "-q",
            "--backend",
            "fault",
            "--interval",
            "2s",
            "-o",
            &out,
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let procs = analyze_rows(&out, "processes", "processes", None);
    let buffers: Vec<u64> = procs
        .iter()
        .map(|p| p["user_pages"].as_u64().unwrap())
        .filter(|&u| u >= 5120 / 2)
        .collect();
    assert_eq!(buffers.len(), 3, "{procs:?}");
    for u in buffers {
        assert!(
            (5120..=5120 * 102 / 100).contains(&u),
            "a short-lived pagetest shows {u} pages, its buffer 5120: {procs:?}"
        );
    }
}

/// A launched program that exits before the first boundary is counted in
/// the last interval, and named by its own command line (it was first
/// seen as pagescope's fork, before its exec).
#[test]
fn fault_backend_counts_a_program_that_ends_before_the_first_boundary() {
    if !fault_available() {
        return;
    }
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "brief.rec");
    let bin = pagetest_bin();
    let bin = bin.to_str().unwrap();
    let o = run(
        &[],
        &[
            "record",
            "-q",
            "--backend",
            "fault",
            "--interval",
            "5s",
            "-o",
            &out,
            "--",
            bin,
            "--size",
            "20M",
            "--mode",
            "anon",
            "--iterations",
            "1",
            "--sleep",
            "0",
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let procs = analyze_rows(&out, "processes", "processes", None);
    assert_eq!(procs.len(), 1, "{procs:?}");
    let user = procs[0]["user_pages"].as_u64().unwrap();
    assert!(
        (5120..=5120 * 102 / 100).contains(&user),
        "{user} pages for a 5120-page buffer"
    );
    let command = procs[0]["command"].to_string();
    assert!(
        command.contains("pagetest") && command.contains("20M") && !command.contains(" record "),
        "{command}"
    );
}
