//! `pagescope trace` on this machine's kernel: exact reference counts
//! against pagetest's known access pattern, and programs computing (and
//! numbering their descriptors) the same traced and untraced. The rest is
//! in trace_attach.rs (`--pid`), trace_release.rs (the tracer killed,
//! then `--release`) and trace_cli.rs (the command: errors, signals,
//! output).

#[macro_use]
mod util;

use pagescope_core::format::Completeness;
use pagescope_core::trace::{MappingKind, Ref};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use util::trace::*;
use util::*;

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
