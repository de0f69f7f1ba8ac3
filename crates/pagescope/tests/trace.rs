//! `pagescope trace` on this machine's kernel: exact reference counts
//! against pagetest's known access pattern, programs computing the same
//! traced and untraced, and the tracer killed or stopped mid-run.

#[macro_use]
mod util;

use pagescope_core::format::{read_trace, Completeness, TraceVisitor};
use pagescope_core::trace::{
    EndReason, Mapping, MappingKind, Ref, Residency, TraceEnd, TraceHeader,
};
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::*;

/// Skips (with the reason) where the kernel can't trace.
macro_rules! require_trace {
    () => {
        if let Some((feature, why)) = trace_unsupported() {
            skip!(feature, why);
        }
    };
}

/// Skips (with the reason) where the kernel can't evict by moving pages.
macro_rules! require_move {
    () => {
        require_trace!();
        if !has_move() {
            skip!(
                "uffd-move",
                "this kernel has no UFFDIO_MOVE (Linux 6.8); the copy method is tested instead"
            );
        }
    };
}

/// Whether this kernel moves pages (`UFFDIO_MOVE`), asked of the kernel.
fn has_move() -> bool {
    uffd_features().is_some_and(|f| f & UFFD_FEATURE_MOVE != 0)
}

/// Why this machine can't trace, asked of the kernel (x86_64, root, and a
/// userfaultfd with write protection, Linux 5.7), with the feature a
/// run may require.
fn trace_unsupported() -> Option<(&'static str, String)> {
    if !cfg!(target_arch = "x86_64") {
        return Some(("x86_64", "pagescope trace supports x86_64 only".into()));
    }
    if !rustix::process::geteuid().is_root() {
        return Some((
            "root",
            "tracing another process needs root (ptrace and userfaultfd)".into(),
        ));
    }
    const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1;
    match uffd_features() {
        None => Some((
            "userfaultfd",
            "this kernel has no userfaultfd (CONFIG_USERFAULTFD)".into(),
        )),
        Some(f) if f & UFFD_FEATURE_PAGEFAULT_FLAG_WP == 0 => Some((
            "userfaultfd",
            "this kernel's userfaultfd has no write protection (Linux 5.7)".into(),
        )),
        Some(_) => None,
    }
}

#[derive(Default)]
struct All {
    header: Option<TraceHeader>,
    refs: Vec<Ref>,
    end: Option<TraceEnd>,
    /// The last record of each mapping, by id.
    mappings: std::collections::HashMap<u32, Mapping>,
    residency: Vec<Residency>,
}

impl TraceVisitor for All {
    fn header(&mut self, h: &TraceHeader) -> pagescope_core::Result<()> {
        self.header = Some(h.clone());
        Ok(())
    }
    fn mapping(&mut self, m: &Mapping) -> pagescope_core::Result<()> {
        self.mappings.insert(m.id, m.clone());
        Ok(())
    }
    fn residency(&mut self, r: &Residency) -> pagescope_core::Result<()> {
        self.residency.push(r.clone());
        Ok(())
    }
    fn refs(&mut self, refs: &[Ref]) -> pagescope_core::Result<()> {
        self.refs.extend_from_slice(refs);
        Ok(())
    }
    fn end(&mut self, e: &TraceEnd) -> pagescope_core::Result<()> {
        self.end = Some(e.clone());
        Ok(())
    }
}

fn read_all(path: &str) -> (All, Completeness) {
    let mut all = All::default();
    let f = std::fs::File::open(path).unwrap();
    let done = read_trace(std::io::BufReader::new(f), Path::new(path), &mut all).unwrap();
    (all, done)
}

fn pagetest_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("pagetest prints JSON lines"))
        .collect()
}

/// Traces pagetest with `args` and a pool of `pool`; insists on success
/// and returns pagetest's JSON lines.
fn trace_pagetest(trace: &str, pool: &str, evict: &str, args: &[&str]) -> Vec<Value> {
    trace_pagetest_with(trace, pool, evict, &[], args)
}

/// [`trace_pagetest`] with more `trace` options.
fn trace_pagetest_with(
    trace: &str,
    pool: &str,
    evict: &str,
    opts: &[&str],
    args: &[&str],
) -> Vec<Value> {
    let out = Command::new(pagescope_bin())
        .args(["trace", "-q", "--evict", evict, "--pool", pool, "-o", trace])
        .args(opts)
        .arg("--")
        .arg(pagetest_bin())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    pagetest_lines(&out.stdout)
}

/// Traces pagetest over 64 MiB of `mode` memory with a 2 MiB pool,
/// evicting by `evict`, and checks that each iteration touched every
/// buffer page exactly once, in ascending order, with the right kind of
/// access; a read run sums what pagetest wrote, so every page came back
/// with its data.
fn exact_counts(op: &str, evict: &str, mode: &str) {
    exact_counts_with(op, evict, mode, &[]);
}

/// [`exact_counts`] with more `trace` options.
fn exact_counts_with(op: &str, evict: &str, mode: &str, opts: &[&str]) {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let lines = trace_pagetest_with(
        &trace,
        "2M",
        evict,
        opts,
        &[
            "--size",
            "64M",
            "--mode",
            mode,
            "--op",
            op,
            "--iterations",
            "3",
            "--sleep",
            "0",
        ],
    );
    let (start, end) = (
        lines[0]["start"].as_u64().unwrap(),
        lines[0]["end"].as_u64().unwrap(),
    );
    let pages = lines[0]["pages"].as_u64().unwrap();
    assert_eq!(pages, 16384);
    let (all, done) = read_all(&trace);
    assert_eq!(done, Completeness::Complete);
    assert_eq!(
        format!("{:?}", all.header.as_ref().unwrap().evict).to_lowercase(),
        evict
    );
    if op == "read" {
        let done = lines.iter().find(|l| l["event"] == "done").unwrap();
        assert_eq!(done["checksum"], 3 * pages, "pages lost their data");
    }
    let base = all.header.as_ref().unwrap().start_monotonic_ns;
    let in_buf: Vec<&Ref> = all
        .refs
        .iter()
        .filter(|r| r.addr >= start && r.addr < end)
        .collect();
    // Every reference names the buffer's mapping, of the right kind; a
    // traced mapping has no residency record.
    let ids: std::collections::HashSet<u32> = in_buf.iter().map(|r| r.mapping).collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let m = &all.mappings[ids.iter().next().unwrap()];
    let kind = if mode == "shm" {
        MappingKind::Shared
    } else {
        MappingKind::Anonymous
    };
    assert_eq!((m.kind, m.start, m.end, m.traced), (kind, start, end, true));
    if mode == "shm" {
        assert!(
            m.inode != 0 && m.path.starts_with("/memfd:pagetest"),
            "{m:?}"
        );
    }
    assert!(all.residency.iter().all(|r| r.mapping != m.id));
    let iterations: Vec<&Value> = lines.iter().filter(|l| l["event"] == "iteration").collect();
    assert_eq!(iterations.len(), 3);
    let mut total = 0;
    for it in iterations {
        let (t0, t1) = (
            it["start_ns"].as_u64().unwrap() - base,
            it["end_ns"].as_u64().unwrap() - base,
        );
        let refs: Vec<&&Ref> = in_buf
            .iter()
            .filter(|r| r.time_ns >= t0 && r.time_ns <= t1)
            .collect();
        assert_eq!(
            refs.len() as u64,
            pages,
            "references in iteration {}",
            it["index"]
        );
        assert!(
            refs.windows(2).all(|w| w[0].addr + 4096 == w[1].addr),
            "iteration {}: pages not in ascending order",
            it["index"]
        );
        let writes = refs.iter().filter(|r| r.write).count() as u64;
        assert_eq!(writes, if op == "write" { pages } else { 0 });
        total += refs.len();
    }
    if op == "write" {
        // Nothing else touched the buffer: exactly 3 x 16384.
        assert_eq!(in_buf.len(), total);
    } else {
        // Plus pagetest's first pass, which writes each page once.
        assert_eq!(in_buf.len(), total + pages as usize);
    }
    // Times in microseconds (the default resolution), and the file within
    // 2 bytes per reference.
    assert!(all.refs.iter().all(|r| r.time_ns % 1000 == 0));
    let per_ref = std::fs::metadata(&trace).unwrap().len() as f64 / all.refs.len() as f64;
    assert!(per_ref <= 2.0, "{per_ref:.2} bytes per reference");
    // The CLI's own count of the buffer range agrees.
    let range = format!("{start:#x}-{end:#x}");
    let refs = report_json(&[
        "analyze", &trace, "refs", "--range", &range, "--format", "json",
    ]);
    assert_eq!(refs["references"], in_buf.len() as u64);
    assert_eq!(refs["distinct_pages"], pages);
}

#[test]
fn trace_counts_every_write_exactly() {
    require_move!();
    exact_counts("write", "move", "anon");
}

#[test]
fn trace_counts_every_read_exactly() {
    require_move!();
    exact_counts("read", "move", "anon");
}

#[test]
fn trace_by_copy_counts_every_write_exactly() {
    require_trace!();
    exact_counts("write", "copy", "anon");
}

#[test]
fn trace_by_copy_counts_every_read_exactly() {
    require_trace!();
    exact_counts("read", "copy", "anon");
}

/// `--cpu`: the program runs on that CPU alone (and sees only it), and the
/// trace is as exact as on any CPU.
#[test]
fn trace_on_one_cpu_counts_every_read_exactly() {
    require_trace!();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    // The first CPU this test may use: "0-1", "3", "2,5".
    let cpu = allowed
        .split([',', '-'])
        .next()
        .unwrap()
        .parse::<usize>()
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let out = run(
        &[],
        &[
            "trace",
            "-q",
            "--cpu",
            &cpu,
            "-o",
            &trace,
            "--",
            "grep",
            "Cpus_allowed_list",
            "/proc/self/status",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .nth(1),
        Some(cpu.as_str())
    );
    exact_counts_with("read", methods()[0], "anon", &["--cpu", &cpu]);
    // A CPU it may not use is one clear line.
    let out = run(
        &[],
        &["trace", "--cpu", "100000", "-o", &trace, "--", "true"],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("--cpu 100000"),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "{said}");
}

/// While pagescope serves faults (trace, and record with the fault
/// backend) idle CPUs poll: the traced program reads from the kernel
/// itself that the CPUs it may run on take no resume latency (`n/a`), or
/// where the kernel has no per-CPU limits, that the machine-wide limit is
/// 0; and it finds pagescope holding them (its registry's locks, or the
/// device open), unless `--no-idle-poll`. tests/cpu_latency.rs checks
/// that the other CPUs are left alone and that every limit comes back.
#[test]
fn faults_are_served_with_idle_cpus_polling() {
    require_trace!();
    let dir = tempfile::tempdir().unwrap();
    let out_file = temp_path(dir.path(), "out");
    let cpus = pagescope_linux::system::allowed_cpus();
    let per_cpu = cpus.iter().all(|c| {
        Path::new(&format!(
            "/sys/devices/system/cpu/cpu{c}/power/pm_qos_resume_latency_us"
        ))
        .exists()
    });
    let check = if per_cpu {
        let files: Vec<String> = cpus
            .iter()
            .map(|c| format!("/sys/devices/system/cpu/cpu{c}/power/pm_qos_resume_latency_us"))
            .collect();
        let mut argv = vec!["--".to_string(), "cat".to_string()];
        argv.extend(files);
        argv
    } else {
        ["--", "od", "-An", "-td4", "-N4", "/dev/cpu_dma_latency"]
            .map(String::from)
            .to_vec()
    };
    let want = if per_cpu { "n/a" } else { "0" };
    for command in [
        vec!["trace", "-q", "-o", &out_file],
        vec!["record", "-q", "--backend", "fault", "-o", &out_file],
    ] {
        let args: Vec<&str> = command
            .iter()
            .copied()
            .chain(check.iter().map(String::as_str))
            .collect();
        let out = run(&[], &args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            !said.trim().is_empty() && said.lines().all(|l| l.trim() == want),
            "{args:?}: {said}"
        );
    }
    // Whether this pagescope holds the limits, whatever others hold: the
    // traced shell lists the descriptors of its parent, pagescope.
    let parent_fds = [
        "--",
        "sh",
        "-c",
        "for f in /proc/$PPID/fd/*; do readlink $f; done; cat /proc/$PPID/comm",
    ];
    let holds = |l: &str| {
        if per_cpu {
            l.starts_with("/run/pagescope/cpu-latency/cpu") && l.ends_with(".hold")
        } else {
            l == "/dev/cpu_dma_latency"
        }
    };
    for command in [
        vec!["trace", "-q", "-o", &out_file],
        vec!["record", "-q", "--backend", "fault", "-o", &out_file],
    ] {
        for off in [&[][..], &["--no-idle-poll"]] {
            let args: Vec<&str> = command
                .iter()
                .chain(off)
                .chain(&parent_fds)
                .copied()
                .collect();
            let out = run(&[], &args);
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && said.contains("pagescope"),
                "{args:?}: {said}"
            );
            let held = said.lines().filter(|l| holds(l)).count();
            let want = if !off.is_empty() {
                0
            } else if per_cpu {
                cpus.len()
            } else {
                1
            };
            assert_eq!(held, want, "{args:?}: {said}");
        }
    }
}

/// Skips a test that traces shared memory on a kernel that can't.
macro_rules! require_shmem {
    () => {
        require_trace!();
        if !uffd_features().is_some_and(|f| f & UFFD_FEATURES_SHMEM == UFFD_FEATURES_SHMEM) {
            skip!(
                "uffd-shmem",
                "this kernel can't trace shared memory: it needs userfaultfd \
                 minor faults and write protection on shmem (Linux 5.19)"
            );
        }
    };
}

/// Shared memory (a memfd) is traced as exactly as private memory: its
/// pages leave by being unmapped and come back on their minor faults.
#[test]
fn shared_memory_counts_every_access_exactly() {
    require_shmem!();
    for op in ["write", "read"] {
        exact_counts(op, "copy", "shm");
    }
}

/// A forked child is traced as exactly as its parent: at its first stop
/// it gets a mover and every page it inherited resident leaves, so it
/// reads each page of the parent's 8 MiB buffer once and writes each once
/// (through a 2 MiB pool), and no page is left unevictable. Shared
/// memory is also counted once across the two processes (same inode and
/// offset); private pages are each process's own.
#[test]
fn forked_children_are_traced_exactly() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let mut cases: Vec<(&str, &str)> = methods().into_iter().map(|m| ("anon", m)).collect();
    if pagescope_linux::trace::shmem_supported() {
        cases.push(("shm", "copy"));
    }
    for (mode, evict) in cases {
        let lines = trace_pagetest(
            &trace,
            "2M",
            evict,
            &[
                "--size",
                "8M",
                "--mode",
                mode,
                "--op",
                "write",
                "--iterations",
                "1",
                "--sleep",
                "0",
                "--fork",
                "1",
                "--child-writes",
                "2048",
            ],
        );
        let what = format!("{mode} by {evict}");
        let (start, end) = (
            lines[0]["start"].as_u64().unwrap(),
            lines[0]["end"].as_u64().unwrap(),
        );
        let parent = lines[0]["pid"].as_u64().unwrap() as u32;
        let child = lines.iter().find(|l| l["event"] == "forked").unwrap()["pids"][0]
            .as_u64()
            .unwrap() as u32;
        // The child read what its parent wrote (2 in every page).
        let read = lines.iter().find(|l| l["event"] == "child-read").unwrap();
        assert_eq!(
            read["checksum"],
            2 * (lines[0]["pages"].as_u64().unwrap()),
            "{mode} by {evict}: child's data"
        );
        let (all, _) = read_all(&trace);
        let count = |pid: u32, write: bool| {
            all.refs
                .iter()
                .filter(|r| r.pid == pid && r.write == write && r.addr >= start && r.addr < end)
                .count()
        };
        assert_eq!(
            (count(parent, true), count(parent, false)),
            (2048, 0),
            "{what}: parent"
        );
        assert_eq!(
            (count(child, true), count(child, false)),
            (2048, 2048),
            "{what}: child"
        );
        assert_eq!(all.end.as_ref().unwrap().unevictable, 0, "{what}");
        let range = format!("{start:#x}-{end:#x}");
        let refs = report_json(&[
            "analyze", &trace, "refs", "--range", &range, "--format", "json",
        ]);
        assert_eq!(refs["references"], 3 * 2048, "{what}");
        let distinct = if mode == "shm" { 2048 } else { 2 * 2048 };
        assert_eq!(refs["distinct_pages"], distinct, "{what}");
        // One process's: the child's reads and writes, the parent's writes.
        let one = |view: &str, pid: u32| {
            report_json(&[
                "analyze",
                &trace,
                view,
                "--range",
                &range,
                "--pid",
                &pid.to_string(),
                "--format",
                "json",
            ])
        };
        let c = one("refs", child);
        assert_eq!(
            (c["reads"].as_u64(), c["writes"].as_u64()),
            (Some(2048), Some(2048)),
            "{what}"
        );
        assert_eq!(c["distinct_pages"], 2048, "{what}");
        let p = one("refs", parent);
        assert_eq!(
            (p["reads"].as_u64(), p["writes"].as_u64()),
            (Some(0), Some(2048)),
            "{what}"
        );
        // The buffer's mapping has a row per process that referenced it,
        // each with that process's own references.
        let rows: Vec<(u64, u64, u64)> = refs["mappings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["references"].as_u64() > Some(0))
            .map(|m| {
                let n = |k: &str| m[k].as_u64().unwrap();
                (n("pid"), n("reads"), n("writes"))
            })
            .collect();
        let of = |pid: u32| -> (u64, u64) {
            rows.iter()
                .filter(|r| r.0 == pid as u64)
                .fold((0, 0), |a, r| (a.0 + r.1, a.1 + r.2))
        };
        assert_eq!(of(parent), (0, 2048), "{what}: {rows:?}");
        assert_eq!(of(child), (2048, 2048), "{what}: {rows:?}");
    }
}

#[test]
fn mrc_of_a_cyclic_scan() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let lines = trace_pagetest(
        &trace,
        "1M",
        "auto",
        &[
            "--size",
            "8M",
            "--mode",
            "anon",
            "--op",
            "write",
            "--iterations",
            "4",
            "--sleep",
            "0",
        ],
    );
    let mrc = report_json(&["analyze", &trace, "mrc", "--format", "json"]);
    let refs = mrc["references"].as_u64().unwrap() as f64;
    // pagetest is the only process: --pid selects all of it.
    let of = |pid: &str| {
        report_json(&["analyze", &trace, "mrc", "--pid", pid, "--format", "json"])["references"]
            .clone()
    };
    let pid = lines[0]["pid"].to_string();
    assert_eq!(of(&pid), mrc["references"]);
    // A process the trace does not name is an error, in both views, as it
    // is for report and diff: the message names the trace's processes.
    for view in ["mrc", "refs"] {
        let out = run(&[], &["analyze", &trace, view, "--pid", "1"]);
        let msg = failed_with(&out, 1);
        assert_eq!(
            msg,
            format!("error: pid 1 is not in {trace} (its processes: {pid})"),
            "{view}"
        );
        assert!(out.stdout.is_empty(), "{view}: {out:?}");
        let present = report_json(&["analyze", &trace, view, "--pid", &pid, "--format", "json"]);
        assert!(!present["notes"].to_string().contains("not in"));
    }
    let distinct = mrc["distinct_pages"].as_u64().unwrap();
    let cold = mrc["cold_misses"].as_u64().unwrap() as f64;
    assert_eq!(mrc["cold_misses"], distinct);
    // 2048 buffer pages scanned 4 times, plus pagetest's own few pages.
    assert!(refs >= 4.0 * 2048.0);
    for row in mrc["curve"].as_array().unwrap() {
        let pages = row["pages"].as_u64().unwrap();
        let lru = row["lru_miss_ratio"].as_f64().unwrap();
        if pages < 2048 {
            // Every buffer reference misses below the scan's size.
            assert!(
                lru >= 4.0 * 2048.0 / refs - 6e-5,
                "LRU at {pages} pages: {lru}"
            );
        }
        if pages >= distinct {
            // Only the cold misses are left (ratios carry 4 decimals).
            assert!(
                (lru - cold / refs).abs() < 6e-5,
                "LRU at {pages} pages: {lru}"
            );
        }
    }
    let at = |p: u64| {
        mrc["curve"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["pages"] == p)
            .map(|r| r["lru_miss_ratio"].as_f64().unwrap())
            .unwrap()
    };
    // Half the scan: every buffer reference misses; twice the scan: only
    // the first pass does.
    assert!(at(1024) * mrc["references"].as_f64().unwrap() >= 4.0 * 2048.0);
    assert!(at(4096) < 0.26);
    for format in ["table", "csv", "svg"] {
        run_ok(&["analyze", &trace, "mrc", "--format", format]);
        run_ok(&["analyze", &trace, "refs", "--format", format]);
    }
}

/// The eviction methods this kernel has.
fn methods() -> Vec<&'static str> {
    if has_move() {
        vec!["move", "copy"]
    } else {
        vec!["copy"]
    }
}

/// Runs `argv` untraced and traced evicting by `evict` (pool 512K, so
/// pages are evicted and brought back all the time) and returns both
/// outputs.
fn both_ways(argv: &[&str], stdin: Option<&str>, evict: &str) -> (Vec<u8>, Vec<u8>, String) {
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let run = |traced: bool| {
        let mut cmd = if traced {
            let mut c = Command::new(pagescope_bin());
            c.args([
                "trace", "-q", "--evict", evict, "--pool", "512K", "-o", &trace, "--",
            ]);
            c.args(argv);
            c
        } else {
            let mut c = Command::new(argv[0]);
            c.args(&argv[1..]);
            c
        };
        if let Some(path) = stdin {
            cmd.stdin(std::fs::File::open(path).unwrap());
        }
        let out = cmd.stderr(Stdio::piped()).output().unwrap();
        assert!(
            out.status.success(),
            "{argv:?} (traced: {traced}) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let plain = run(false);
    let traced = run(true);
    let refs = report_json(&["analyze", &trace, "refs", "--format", "json"]);
    let summary = format!("{argv:?} by {evict}: {} references", refs["references"]);
    assert!(refs["references"].as_u64().unwrap() > 0, "{summary}");
    (plain, traced, summary)
}

fn data_file(dir: &Path, lines: usize) -> String {
    let mut s = String::new();
    let mut x = 88172645463325252u64;
    for _ in 0..lines {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{:016x} {}\n", x, "y".repeat((x % 50) as usize)));
    }
    let p = dir.join("data.txt");
    std::fs::write(&p, s).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn traced_programs_compute_what_they_compute_untraced() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = data_file(dir.path(), 20_000);
    let pt = pagetest_bin();
    let pt = pt.to_str().unwrap();
    let xz_round_trip = format!("head -c 40000 {data} | xz -1 -T1 | xz -dc | sha256sum");
    let python = "import hashlib, random\n\
        r = random.Random(7)\n\
        blobs = [r.randbytes(4096) for _ in range(600)]\n\
        h = hashlib.sha256()\n\
        for b in sorted(blobs): h.update(b)\n\
        print(h.hexdigest(), sum(map(len, blobs)))";
    let threads = "import hashlib, threading\n\
        out = [None] * 4\n\
        def work(i):\n\
        \x20   buf = bytearray(2 << 20)\n\
        \x20   for j in range(0, len(buf), 997): buf[j] = (i * j) & 255\n\
        \x20   out[i] = hashlib.sha256(buf).hexdigest()\n\
        ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]\n\
        [t.start() for t in ts]; [t.join() for t in ts]\n\
        print(out)";
    let fork = "import os, hashlib\n\
        buf = bytearray(b\"\\x05\") * (4 << 20)\n\
        for j in range(0, len(buf), 4096): buf[j] = j % 251\n\
        r, w = os.pipe()\n\
        pid = os.fork()\n\
        if pid == 0:\n\
        \x20   for j in range(0, len(buf), 8192): buf[j] = 7\n\
        \x20   os.write(w, hashlib.sha256(buf).hexdigest().encode()); os._exit(0)\n\
        os.waitpid(pid, 0)\n\
        print(os.read(r, 64).decode(), hashlib.sha256(buf[1:]).hexdigest())";
    let py = python3();
    let cases: Vec<(Vec<&str>, Option<&str>)> = vec![
        (
            vec![
                pt,
                "--size",
                "16M",
                "--mode",
                "malloc",
                "--op",
                "read",
                "--iterations",
                "3",
                "--sleep",
                "0",
            ],
            None,
        ),
        (vec!["sort", &data], None),
        (vec!["sort", "--parallel=2", "-S", "1M", &data], None),
        (vec!["sh", "-c", &xz_round_trip], None),
        (vec![&py, "-c", python], None),
        (vec![&py, "-c", threads], None),
        (vec![&py, "-c", fork], None),
    ];
    for ((argv, stdin), evict) in cases
        .iter()
        .flat_map(|c| methods().into_iter().map(move |m| (c, m)))
    {
        let (plain, traced, summary) = both_ways(argv, *stdin, evict);
        let strip = |b: &[u8]| {
            // pagetest's lines carry times and a pid: compare its checksum.
            if argv[0] == pt {
                pagetest_lines(b)
                    .into_iter()
                    .find(|l| l["event"] == "done")
                    .unwrap()["checksum"]
                    .to_string()
            } else {
                String::from_utf8_lossy(b).into_owned()
            }
        };
        assert_eq!(strip(&plain), strip(&traced), "{summary}");
        eprintln!("{summary}: same output");
    }
}

/// A program is given the lowest free descriptor number by each `open`,
/// `pipe` and `dup`: under trace, started or attached, it gets the
/// numbers it gets untraced (pagescope's userfaultfd must not take one it
/// would get), and so does each child it forks, also after it closed
/// every descriptor but 0-2 (which closes its copy of pagescope's).
#[test]
fn traced_programs_get_the_descriptor_numbers_they_get_untraced() {
    require_trace!();
    let _serial = serial();
    let numbers = "import os\n\
        def opened(): return os.open(\"/dev/null\", os.O_RDONLY)\n\
        def in_child(f):\n\
        \x20   r, w = os.pipe()\n\
        \x20   pid = os.fork()\n\
        \x20   if pid == 0: os.write(w, f().encode()); os._exit(0)\n\
        \x20   os.waitpid(pid, 0)\n\
        \x20   return (r, w, os.read(r, 64).decode())\n\
        first = [opened() for _ in range(3)]\n\
        print(first, in_child(lambda: \"%d %d\" % (opened(), os.dup(0))), os.dup(1))\n\
        os.closerange(3, 1 << 20)\n\
        print(in_child(lambda: \"%d\" % opened()), opened())";
    let py = python3();
    for evict in methods() {
        let (plain, traced, summary) = both_ways(&[&py, "-c", numbers], None, evict);
        let plain = String::from_utf8(plain).unwrap();
        assert!(plain.starts_with("[3, 4, 5]"), "untraced: {plain}");
        assert_eq!(plain, String::from_utf8(traced).unwrap(), "{summary}");
        eprintln!("{summary}: same descriptors: {plain}");
    }
    // A pipe made before the attach, whose write end the program closes
    // after it: its read end must see the end of the file, as untraced
    // (pagescope's mover, cloned with a copy of the descriptor table,
    // keeps none of the program's descriptors). Looked for up to 5 s, as
    // the mover lets go of its copies just after the attach.
    let attached = "import os, sys, time\n\
        r, w = os.pipe()\n\
        print(\"ready\", flush=True)\n\
        sys.stdin.readline()\n\
        os.close(w)\n\
        os.set_blocking(r, False)\n\
        def end():\n\
        \x20   try: return os.read(r, 1) == b\"\"\n\
        \x20   except BlockingIOError: return False\n\
        deadline = time.time() + 5\n\
        while not end() and time.time() < deadline: time.sleep(0.01)\n\
        print(\"end\" if end() else \"no end\", os.open(\"/dev/null\", os.O_RDONLY), os.dup(0), os.pipe())";
    let plain = {
        use std::io::Write;
        let mut c = Command::new(&py)
            .args(["-c", attached])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(plain.starts_with("ready\nend "), "untraced: {plain}");
    for evict in methods() {
        let dir = tempfile::tempdir().unwrap();
        let trace = temp_path(dir.path(), "t.trace");
        let traced = attached_run(&[&py, "-c", attached], evict, "512K", &trace);
        assert_eq!(traced, plain, "attached, by {evict}");
    }
}

/// A shell that lowers its open-files limit under the number where
/// pagescope keeps its userfaultfd, then forks: each child makes its own
/// userfaultfd under its limit, and the trace goes on.
#[test]
fn children_under_a_lowered_descriptor_limit_are_traced() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let script = "ulimit -n 64; for i in 1 2 3; do printf '[%s]' \"$(echo $i)\"; done";
    for evict in methods() {
        let out = Command::new(pagescope_bin())
            .args(["trace", "-q", "--evict", evict, "-o", &trace])
            .args(["--", "sh", "-c", script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "by {evict}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "[1][2][3]",
            "by {evict}"
        );
        let (all, _) = read_all(&trace);
        assert!(all.end.is_some(), "by {evict}: the trace is not complete");
    }
}

/// A shell that forks a subshell per command substitution, with a pool
/// of 16 pages: each child starts with pages evicted from its parent, and
/// must find them in its copy of the store.
#[test]
fn forked_children_find_their_evicted_pages() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let script = "for i in $(seq 1 20); do x=$(echo \"$i\"); printf '[%s]' \"$x\"; done";
    let want: String = (1..=20).map(|i| format!("[{i}]")).collect();
    for evict in methods() {
        for round in 0..3 {
            let out = Command::new(pagescope_bin())
                .args([
                    "trace", "-q", "--evict", evict, "--pool", "64K", "-o", &trace,
                ])
                .args(["--", "bash", "-c", script])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "by {evict}, round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(String::from_utf8_lossy(&out.stdout), want, "by {evict}");
            let (all, _) = read_all(&trace);
            assert!(all.end.unwrap().evictions > 0, "nothing was evicted");
        }
    }
}

/// A program started with pipes on stdin and stdout, and `pagescope
/// trace --pid` attached to it and in place.
struct Attached {
    prog: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
    /// The program's first line (it prints one when ready).
    first: String,
    tracer: std::process::Child,
    err: std::io::BufReader<std::process::ChildStderr>,
    /// What the tracer said so far.
    said: String,
}

impl Attached {
    /// Starts `argv`, which prints a line when it is ready and then waits
    /// for a line on stdin, and attaches `pagescope trace --pid` to it
    /// (evicting by `evict`, pool `pool`, into `trace`); returns once the
    /// tracer says it is in place (every process attached).
    fn start(argv: &[&str], evict: &str, pool: &str, trace: &str) -> Attached {
        use std::io::{BufRead, BufReader};
        // A process group of its own, as a shell's job has: the tracer
        // waits for it from another group.
        let mut prog = Command::new(argv[0])
            .args(&argv[1..])
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(prog.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{argv:?} ended before it was ready");
        let pid = prog.id().to_string();
        let mut tracer = Command::new(pagescope_bin())
            .args([
                "trace", "--evict", evict, "--pool", pool, "-o", trace, "--pid", &pid,
            ])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(tracer.stderr.take().unwrap());
        let mut said = String::new();
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap() == 0 {
                let _ = prog.kill();
                let _ = prog.wait();
                panic!("the tracer ended before it was in place: {said}");
            }
            said.push_str(&line);
            if line.starts_with("tracing process") {
                break;
            }
        }
        Attached {
            prog,
            out,
            first,
            tracer,
            err,
            said,
        }
    }

    /// Lets the program go on past its wait.
    fn go(&mut self) {
        use std::io::Write;
        let mut stdin = self.prog.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
    }
}

/// Runs `argv` under [`Attached`] to its end; returns its whole output.
fn attached_run(argv: &[&str], evict: &str, pool: &str, trace: &str) -> String {
    use std::io::Read;
    let mut a = Attached::start(argv, evict, pool, trace);
    a.go();
    let mut output = std::mem::take(&mut a.first);
    a.out.read_to_string(&mut output).unwrap();
    let status = a.prog.wait().unwrap();
    assert!(status.success(), "{argv:?} traced from outside: {status:?}");
    a.err.read_to_string(&mut a.said).unwrap();
    let status = a.tracer.wait().unwrap();
    assert!(status.success(), "tracer: {status:?} {}", a.said);
    output
}

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

fn wait_gone(pid: u32, secs: u64) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A pagetest with `args` under the tracer (1 MiB pool, evicting by
/// `evict`), once it has printed its `until` line.
fn traced_pagetest(trace: &str, evict: &str, args: &[&str], until: &str) -> Pagetest {
    let bin = pagescope_bin();
    let wrapper = [
        bin.to_str().unwrap(),
        "trace",
        "-q",
        "--evict",
        evict,
        "--pool",
        "1M",
        "-o",
        trace,
        "--",
    ];
    Pagetest::start(&wrapper, args, until)
}

/// A pagetest that reads its buffer twice, 3 s apart, under the tracer
/// evicting by `evict`; returns it once the first pass is done (so pages
/// are evicted).
fn traced_reader(trace: &str, evict: &str, size: &str) -> Pagetest {
    let mut pt = traced_pagetest(
        trace,
        evict,
        &[
            "--size",
            size,
            "--mode",
            "anon",
            "--op",
            "read",
            "--iterations",
            "2",
            "--sleep",
            "3s",
        ],
        "ready",
    );
    let it = pt.next_line();
    assert_eq!(it["event"], "iteration");
    pt
}

#[test]
fn sigkill_then_release_loses_nothing() {
    require_move!();
    sigkill_then_release("move", "16M");
}

/// With copies, and a buffer of 256 pages: fewer store slots than the
/// step (512) of the count that `--release` reads first.
#[test]
fn sigkill_then_release_loses_nothing_by_copy() {
    require_trace!();
    sigkill_then_release("copy", "1M");
}

fn sigkill_then_release(evict: &str, size: &str) {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let mut pt = traced_reader(&trace, evict, size);
    let target = pt.pid();
    // Kill the tracer while most of the buffer is evicted, once it has
    // flushed the first pass's references (it does every 200 ms).
    std::thread::sleep(Duration::from_millis(500));
    kill_tracer(&mut pt.child);
    std::thread::sleep(Duration::from_millis(200));
    release(target, evict);
    // The second pass reads every page back: the sum is exact only if no
    // page was lost (a lost page reads as zero).
    let mut done = pt.next_line();
    if done["event"] == "iteration" {
        done = pt.next_line();
    }
    assert_eq!(done["event"], "done");
    assert_eq!(done["checksum"], 2 * pt.pages());
    assert!(
        wait_gone(target, 10),
        "pagetest did not finish after release"
    );
    // The file the killed tracer left is readable.
    let (all, done) = read_all(&trace);
    assert!(matches!(done, Completeness::CutShort { .. }));
    assert!(!all.refs.is_empty());
    // Nothing to release twice.
    kill_pid(target);
}

/// A forked child whose pages are evicted when the tracer is killed
/// waits on its own userfaultfd, and `--release` of its parent gives both
/// back every page: the child reads what its parent wrote.
#[test]
fn sigkill_then_release_of_a_forked_child_loses_nothing() {
    require_trace!();
    let _serial = serial();
    for evict in methods() {
        let dir = tempfile::tempdir().unwrap();
        let trace = temp_path(dir.path(), "t.trace");
        let mut pt = traced_pagetest(
            &trace,
            evict,
            &[
                "--size",
                "4M",
                "--op",
                "write",
                "--iterations",
                "1",
                "--sleep",
                "0",
                "--fork",
                "1",
                "--child-delay",
                "3s",
            ],
            "child",
        );
        let parent = pt.pid();
        let child = pt.lines.last().unwrap()["pid"].as_u64().unwrap() as u32;
        let _cleanup = KillOnDrop(vec![parent, child]);
        // The child said it started, so it is past its first stop: every
        // page it had resident has left. It reads them after the kill.
        std::thread::sleep(Duration::from_millis(500));
        kill_tracer(&mut pt.child);
        // Releasing the parent releases its child too.
        let said = release(parent, evict);
        assert!(
            said.contains(&format!("released {child}:")),
            "{evict}: {said}"
        );
        let read = pt.next_line();
        assert_eq!(read["event"], "child-read", "{evict}");
        // Iteration 0 wrote 2 into every page.
        assert_eq!(
            read["checksum"],
            2 * pt.pages(),
            "{evict}: the child lost pages"
        );
        assert_eq!(pt.next_line()["event"], "forked", "{evict}");
        assert_eq!(pt.next_line()["event"], "done", "{evict}");
        assert!(wait_gone(parent, 10), "{evict}: pagetest did not finish");
    }
}

/// A shell that forks all the time (a pipeline in a command substitution
/// per iteration), its tracer killed mid-run: `--release` of the shell
/// frees it and every traced process it forked, including any whose fork
/// was waiting on its userfaultfd, and the output is what it is
/// untraced. The kill lands anywhere, in an injection or between a fork's
/// message and the child's first stop as well (the fixed points of those
/// are `killed_in_an_injection_then_release_loses_nothing` and
/// `release_ends_the_mover_of_a_program_that_exited`). It found two
/// windows, both closed since: a forked child's registrations moved after
/// it had its registers back, and a mover left behind a `sort` that
/// exited, holding its pipe (docs/design.md, "Movers left behind").
#[test]
fn sigkill_then_release_of_a_forking_shell_loses_nothing() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (script, untraced) = sort_pipeline_script(dir.path(), 40);
    for evict in methods() {
        let trace = temp_path(dir.path(), "t.trace");
        let mut tracer = Command::new(pagescope_bin())
            .args([
                "trace", "-q", "--evict", evict, "--pool", "64K", "-o", &trace,
            ])
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = tracer.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let _ = tx.send(line.unwrap());
            }
        });
        let mut out = vec![rx.recv_timeout(Duration::from_secs(60)).unwrap()];
        let shell = pagescope_linux::procfs::descendants(Path::new("/proc"), tracer.id())[1];
        let _cleanup = KillOnDrop(vec![shell]);
        std::thread::sleep(Duration::from_millis(500));
        kill_tracer(&mut tracer);
        out.extend(rx.try_iter());
        assert!(
            out.len() < 40,
            "{evict}: the shell finished before the kill"
        );
        release(shell, evict);
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
            out.push(line);
        }
        let want: Vec<&str> = std::str::from_utf8(&untraced).unwrap().lines().collect();
        assert_eq!(out, want, "{evict}: output after the release");
        assert!(wait_gone(shell, 10), "{evict}: the shell did not finish");
    }
}

/// pagescope killed just after an exec's set-up, before its fault thread
/// attached the new mover (which would then have died with it): the
/// program (`sort`, the shell's second exec, in a command substitution)
/// runs on and exits, and its mover, never attached, becomes a child of
/// init that still holds sort's end of the pipe, so the shell waits for
/// ever on it. `--release` of the shell ends that mover, and the shell
/// finishes with its untraced output.
#[test]
fn release_ends_the_mover_of_a_program_that_exited() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = temp_path(dir.path(), "data");
    let lines: String = (0..3000u64)
        .map(|i| format!("{}\n", (i * 7919) % 3001))
        .collect();
    std::fs::write(&data, lines).unwrap();
    let script = format!("x=$(sort {data}); echo \"$x\" | md5sum");
    let untraced = Command::new("sh").args(["-c", &script]).output().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let (since, mut stdout) = trace_until_it_dies(
        "exec-done:2",
        &["--pool", "64K", "-o", &trace, "--", "sh", "-c", &script],
        "exec-done",
    );
    let shell = orphan_named("sh", since).expect("the traced shell");
    let _cleanup = KillOnDrop(vec![shell]);
    // sort's mover, should the release leave it (it holds the pipes of
    // this test's output too).
    struct KillSorts(u64);
    impl Drop for KillSorts {
        fn drop(&mut self) {
            for p in pagescope_linux::procfs::list_pids(Path::new("/proc")).unwrap_or_default() {
                let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                if comm.trim_end() == "sort" && start_time(p).is_some_and(|t| t >= self.0) {
                    kill_pid(p);
                }
            }
        }
    }
    let _sorts = KillSorts(since);
    // sort runs on untraced and exits, its mover left behind.
    std::thread::sleep(Duration::from_millis(500));
    let said = release(shell, "exec-done:2");
    // Ended as an orphan once sort exited, or, where sort still waited
    // on the pipe the shell held while it waited on a page away, as a
    // mover of the released tree.
    assert!(
        said.contains("mover(s) left by a killed pagescope behind a program that exited")
            || said.contains("ended mover"),
        "the release ended no mover: {said}"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut out);
        let _ = tx.send(out);
    });
    let out = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("the shell still waits after the release: {said}"));
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&untraced.stdout)
    );
    assert!(wait_gone(shell, 10), "the shell did not finish");
}

/// pagescope killed in the middle of an injection: the thread it was
/// injecting into waits, parked, instead of running on with the registers
/// of an injected call; `--release` gives it its registers back, and the
/// output is what it is untraced. At an exec (the launched shell's image
/// being set up: parked at the bootstrap in its vDSO, during the first
/// call, and later at the mover's page), at a fork's mover (cloned, not yet attached), and at a
/// fork (pagetest's child, whose pages away since the fork are registered
/// with the descriptor the fork made, which pagescope's holder keeps: the
/// child's checksum of its copy of the buffer shows every page), and in
/// the middle of moving that child's registrations to its own descriptor
/// (one range registered there, the rest nowhere).
///
/// And killed just after reading a fork's message, before the child's
/// first stop: the child runs, untraced, and waits on its first page away
/// on the descriptor the holder keeps; the release finds which descriptor
/// is the child's and puts its pages back through it.
#[test]
fn killed_in_an_injection_then_release_loses_nothing() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (script, untraced) = sort_pipeline_script(dir.path(), 5);
    for evict in methods() {
        // At "mover", the shell's first child has a mover that pagescope
        // never attached, holding the write end of the pipe the shell
        // reads: the release ends it.
        // At "fork-entry", the shell's first fork waits for its message
        // to be read from the shell's userfaultfd: the release reads it and
        // gives the child the pages away at the fork.
        // At "fork-message", a child of the shell runs with no tracer.
        for place in ["vdso", "exec", "mover", "fork-entry", "fork-message"] {
            let (out, _) = die_then_release(place, evict, &["sh", "-c", &script], "sh");
            assert_eq!(
                out,
                String::from_utf8_lossy(&untraced),
                "{place}, {evict}: output after the release"
            );
        }
        let pagetest = pagetest_bin();
        let pagetest = pagetest.to_str().unwrap();
        let args = [
            pagetest,
            "--size",
            "4M",
            "--op",
            "write",
            "--iterations",
            "1",
            "--sleep",
            "0",
            "--fork",
            "1",
        ];
        for place in ["fork", "move", "fork-message"] {
            let (out, said) = die_then_release(place, evict, &args, "pagetest");
            let lines = pagetest_lines(out.as_bytes());
            let read = lines
                .iter()
                .find(|l| l["event"] == "child-read")
                .unwrap_or_else(|| panic!("{place}, {evict}: no child-read in {out}"));
            // The write wrote 2 into each of the 1024 pages.
            assert_eq!(
                read["checksum"],
                2 * 1024,
                "{place}, {evict}: the child lost pages"
            );
            assert_eq!(
                lines.last().unwrap()["event"],
                "done",
                "{place}, {evict}: {out}"
            );
            if place == "fork-message" {
                // The child had all its pages away: it waited on one.
                assert!(
                    said.contains("through the descriptor pagescope's holder kept"),
                    "{place}, {evict}: the child was not released through the holder: {said}"
                );
            }
        }
    }
}

/// pagescope killed just after a page came back from the store: copied
/// in, its thread woken and running on, its index entry not yet cleared,
/// so the index still names a page that is there again (and may be
/// written at once). `--release` must not put that stale copy back: the
/// shell's pipelines of `sort` (whose pages the 64 KiB pool sends away
/// and back all the time) print what they print untraced, after a kill at
/// the first page back and at a later one, in both ways of evicting.
#[test]
fn killed_after_a_page_came_back_then_release_loses_nothing() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (script, untraced) = sort_pipeline_script(dir.path(), 5);
    let trace = temp_path(dir.path(), "t.trace");
    for evict in methods() {
        for place in ["copied-back:1", "copied-back:400"] {
            let what = format!("{place}, {evict}");
            let args = [
                "--evict", evict, "--pool", "64K", "-o", &trace, "--", "sh", "-c", &script,
            ];
            let (since, mut stdout) = trace_until_it_dies(place, &args, &what);
            let shell = orphan_named("sh", since).expect("the traced shell");
            let _cleanup = KillOnDrop(pagescope_linux::procfs::descendants(
                Path::new("/proc"),
                shell,
            ));
            // It runs on until it meets a page away, and waits there.
            std::thread::sleep(Duration::from_millis(300));
            let said = release(shell, &what);
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                let _ = std::io::Read::read_to_end(&mut stdout, &mut out);
                let _ = tx.send(out);
            });
            let out = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| {
                    panic!("{what}: the shell still waits after the release: {said}")
                });
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&untraced),
                "{what}: output after the release ({said})"
            );
            assert!(wait_gone(shell, 10), "{what}: the shell did not finish");
        }
    }
}

/// A shell script that forks all the time (a pipeline in a command
/// substitution, `iterations` times, over a file it writes in `dir`),
/// and what it prints untraced.
fn sort_pipeline_script(dir: &Path, iterations: u32) -> (String, Vec<u8>) {
    let data = temp_path(dir, "data");
    let lines: String = (0..3000u64)
        .map(|i| format!("{}\n", (i * 7919) % 3001))
        .collect();
    std::fs::write(&data, lines).unwrap();
    let script =
        format!("for i in $(seq 1 {iterations}); do x=$(sort {data} | md5sum); echo $x; done");
    let untraced = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert!(untraced.status.success());
    (script, untraced.stdout)
}

/// Traces `argv` with pagescope told to die in an injection at `place`;
/// checks that the program (named `comm`) waits,
/// releases it, and returns its whole output and what the release said.
fn die_then_release(place: &str, evict: &str, argv: &[&str], comm: &str) -> (String, String) {
    let what = format!("{place}, {evict}");
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let args = ["--evict", evict, "--pool", "64K", "-o", &trace, "--"];
    let args: Vec<&str> = args.iter().chain(argv).copied().collect();
    let (since, mut stdout) = trace_until_it_dies(place, &args, &what);
    let root = orphan_named(comm, since).expect("the traced program");
    let _cleanup = KillOnDrop(pagescope_linux::procfs::descendants(
        Path::new("/proc"),
        root,
    ));
    // Parked: it waits (a second, to show that it would not go on).
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !wait_gone(root, 0),
        "{what}: the program went on unreleased"
    );
    let said = release(root, &what);
    if !place.starts_with("fork-") {
        assert!(
            said.contains("went on from where pagescope stopped"),
            "{what}: nothing was parked: {said}"
        );
    }
    assert!(
        !pagescope_linux::trace::left_holders(&pagescope_linux::Root::default().proc)
            .iter()
            .any(|&(_, r)| r == Some(root)),
        "{what}: the holder of pagescope's descriptors is still there"
    );
    assert!(wait_gone(root, 30), "{what}: the program did not finish");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
    (out, said)
}

/// Runs `pagescope trace -q ARGS` told to kill itself at `place`
/// (`PAGESCOPE_DIE_IN_INJECTION`), and checks that it died so (`what`
/// names the case). Returns when it started (for [`orphan_named`]) and the
/// traced program's output, which goes on after the kill.
fn trace_until_it_dies(place: &str, args: &[&str], what: &str) -> (u64, std::process::ChildStdout) {
    adopt_orphans();
    let mut tracer = Command::new(pagescope_bin())
        .env("PAGESCOPE_DIE_IN_INJECTION", place)
        .args(["trace", "-q"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let since = start_time(tracer.id()).unwrap();
    let stdout = tracer.stdout.take().unwrap();
    let status = tracer.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{what}: pagescope did not die where told"
    );
    (since, stdout)
}

/// When process `pid` started (clock ticks after boot).
fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The process named `comm` that started at `since` or later and whose
/// parent is this test process: a launched program whose tracer is gone
/// (this process adopts orphans, [`adopt_orphans`]), told so from its own
/// forks and from the programs of other tests and of the machine, which
/// may have its name. (Its command line can't tell: the page holding it
/// may be away.)
fn orphan_named(comm: &str, since: u64) -> Option<u32> {
    let name = |p: u32| std::fs::read_to_string(format!("/proc/{p}/comm")).ok();
    let parent = |p: u32| {
        let s = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        s.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse::<u32>()
            .ok()
    };
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|&p| {
            name(p).is_some_and(|n| n.trim_end() == comm)
                && start_time(p).is_some_and(|t| t >= since)
                && parent(p) == Some(std::process::id())
        })
}

/// Makes this test process the subreaper of its descendants (once): a
/// program whose tracer dies becomes its child rather than init's, which
/// [`orphan_named`] looks for.
fn adopt_orphans() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .expect("PR_SET_CHILD_SUBREAPER")
    });
}

/// SIGKILLs pagescope and reaps it.
fn kill_tracer(tracer: &mut std::process::Child) {
    rustix::process::kill_process(
        rustix::process::Pid::from_child(tracer),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let _ = tracer.wait();
}

/// SIGKILLs `pid`, if it is still there.
fn kill_pid(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// `pagescope trace --release PID`, which must succeed (`what` names the
/// case in the message); returns what it said.
fn release(pid: u32, what: &str) -> String {
    let r = run(&[], &["trace", "--release", &pid.to_string()]);
    let said = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(r.status.success(), "{what}: release failed: {said}");
    said
}

/// Kills the processes (which a failed assertion would leave blocked).
struct KillOnDrop(Vec<u32>);

impl Drop for KillOnDrop {
    /// Kills each process and, first, the descendants it has by then (a
    /// blocked or parked child would otherwise outlive the test).
    fn drop(&mut self) {
        for &root in &self.0 {
            let tree = pagescope_linux::procfs::descendants(Path::new("/proc"), root);
            for pid in tree.into_iter().rev() {
                kill_pid(pid);
            }
        }
    }
}

/// Whether `e` is the store: named where the kernel names anonymous
/// mappings (CONFIG_ANON_VMA_NAME), and the one mapping of 256 GiB.
fn is_store(e: &pagescope_core::parse::smaps::SmapsEntry) -> bool {
    e.map.path == "[anon:pagescope-store]"
        || (e.map.path.is_empty() && e.map.end - e.map.start == 1 << 38)
}

/// A page copied back leaves a stale copy in its store slot; the tracer
/// drops them in batches (moved into the store's trash, which one
/// `madvise` empties), so the store holds about the pages away and one
/// batch more, not every copy made: three passes over 32 MiB with a pool
/// of 1 MiB copy back about 16 000 pages.
#[test]
fn stale_copies_leave_the_store() {
    require_move!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let mut pt = traced_pagetest(
        &trace,
        "move",
        &[
            "--size",
            "32M",
            "--mode",
            "anon",
            "--op",
            "read",
            "--iterations",
            "4",
            "--sleep",
            "2s",
        ],
        "ready",
    );
    for _ in 0..3 {
        assert_eq!(pt.next_line()["event"], "iteration");
    }
    // In the sleep after the third pass.
    let pid = pt.pid();
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let entries = pagescope_core::parse::smaps::parse(&smaps).unwrap();
    let page_kb = rustix::param::page_size() as u64 / 1024;
    let store: u64 = entries
        .iter()
        .filter(|e| is_store(e))
        .map(|e| (e.counters.rss + e.counters.swap) / page_kb)
        .sum();
    // The buffer's pages (8 192) less the pool, and fewer than a batch of
    // stale copies (4 096).
    assert!(
        (7_000..8_192 + 4_096 + 512).contains(&store),
        "the store holds {store} pages"
    );
    let mut done = pt.next_line();
    if done["event"] == "iteration" {
        done = pt.next_line();
    }
    assert_eq!(done["checksum"], 4 * pt.pages());
    let status = pt.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

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

/// The Python interpreter itself: `python3` may be a launcher script (a
/// pyenv shim runs a dozen shells first), whose forks would be traced too.
fn python3() -> String {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
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
