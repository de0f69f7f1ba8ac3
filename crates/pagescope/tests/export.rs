//! `pagescope export`: Parquet tables that engines read, checked by
//! asking DuckDB (and Spark, for a fleet) the questions that `report` and
//! `analyze` answer, and holding the answers to theirs exactly.

#[macro_use]
mod util;

use pagescope_core::format::SnapshotWriter;
use pagescope_core::kpageflags::KPageFlags;
use pagescope_core::model::{
    PageChunk, PageRecord, PhysInfo, ProcessRecord, SnapshotSink, SystemInfo, Task, Trailer, Vma,
};
use pagescope_core::pagemap::PagemapEntry;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use util::*;

/// Runs `setup` statements then `query` in DuckDB (Python's `duckdb`),
/// and returns the query's rows as JSON objects.
fn duckdb(setup: &[String], query: &str) -> Vec<Value> {
    const SCRIPT: &str = r#"
import duckdb, json, sys
c = duckdb.connect()
c.execute("set enable_progress_bar = false")
for s in sys.argv[1:-1]:
    c.execute(s)
cur = c.execute(sys.argv[-1])
cols = [d[0] for d in cur.description]
print(json.dumps([dict(zip(cols, r)) for r in cur.fetchall()], default=str))
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .args(setup)
        .arg(query)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "duckdb: {query}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "duckdb: {query}: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Skips unless Python's `duckdb` module is there.
macro_rules! require_duckdb {
    () => {
        let ok = Command::new("python3")
            .args(["-c", "import duckdb"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            skip!(
                "duckdb",
                "needs DuckDB's Python module (pip install duckdb)"
            );
        }
    };
}

/// Views named after the tables of the export in `dir`.
fn views(dir: &str, tables: &[&str]) -> Vec<String> {
    tables
        .iter()
        .map(|t| format!("create view {t} as select * from read_parquet('{dir}/{t}.parquet')"))
        .collect()
}

fn export(input: &str, dir: &str, more: &[&str]) {
    let mut args = vec!["export", "-q", input, "--format", "parquet", "-o", dir];
    args.extend_from_slice(more);
    run_ok(&args);
}

/// Per-process RSS, PSS, USS and swap, and the distinct frames of all,
/// by SQL over the pages table, as `report processes` and `report total`
/// name them.
const PROCESS_FIGURES: &str = "
    select pid,
           count(*) filter (where resident) as rss_pages,
           round(coalesce(sum(1.0 / greatest(map_count, 1))
               filter (where resident and map_count is not null), 0), 4) as pss_pages,
           count(*) filter (where resident and exclusive) as uss_pages,
           count(*) filter (where in_swap) as swap_pages
    from pages group by pid order by pid";
const USER_PAGES: &str = "
    select count(distinct pfn) filter (where resident and kpageflags is not null) as user_pages
    from pages";

/// A held pagetest and its forked child (sharing its buffer), with a
/// quarter of the parent's buffer paged out: SQL over the export of their
/// snapshot gives `report processes`' RSS, PSS, USS and swap of each, and
/// `report total`'s user pages, exactly.
#[test]
fn snapshot_export_answers_as_report_does() {
    require_pfns!();
    require_duckdb!();
    let _swap = match Swapfile::on() {
        Ok(s) => s,
        Err(why) => skip!("swap", why),
    };
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(
        &[],
        &[
            "--size",
            "32M",
            "--iterations",
            "1",
            "--pageout",
            "0.25",
            "--fork",
            "1",
            "--hold",
        ],
        "done",
    );
    let child = pt.lines.iter().find(|l| l["event"] == "forked").unwrap()["pids"][0]
        .as_u64()
        .unwrap();
    let snap = temp_path(dir.path(), "s.snap");
    let (parent, child) = (pt.pid().to_string(), child.to_string());
    run_ok(&[
        "snapshot", "-q", "--pid", &parent, "--pid", &child, "-o", &snap,
    ]);
    let out = temp_path(dir.path(), "out");
    export(&snap, &out, &[]);
    // The files hold frame numbers and command lines.
    for t in ["system", "processes", "vmas", "pages", "physmap"] {
        assert_eq!(mode_of(&format!("{out}/{t}.parquet")) & 0o777, 0o600, "{t}");
    }
    let report = report_json(&["report", "processes", "--input", &snap, "--format", "json"]);
    let mut want: Vec<Value> = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            serde_json::json!({
                "pid": p["pid"], "rss_pages": p["rss_pages"], "pss_pages": p["pss_pages"],
                "uss_pages": p["uss_pages"], "swap_pages": p["swap_pages"],
            })
        })
        .collect();
    want.sort_by_key(|p| p["pid"].as_u64());
    let got = duckdb(&views(&out, &["pages"]), PROCESS_FIGURES);
    assert_eq!(got, want);
    // Not a trivial agreement: the parent has pages in swap, and shares
    // pages with its child.
    let parent_row = &got[got.iter().position(|p| p["pid"] == pt.pid()).unwrap()];
    assert!(
        parent_row["swap_pages"].as_u64().unwrap() > 0,
        "{parent_row}"
    );
    assert_ne!(
        parent_row["pss_pages"].as_f64().unwrap(),
        parent_row["rss_pages"].as_f64().unwrap()
    );
    let total = report_json(&["report", "total", "--input", &snap, "--format", "json"]);
    let got = duckdb(&views(&out, &["pages"]), USER_PAGES);
    assert_eq!(got[0]["user_pages"], total["user_pages"]);
    // Every row names the machine, its boot and the time taken; the
    // system row says what the snapshot's header does.
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let got = duckdb(
        &views(&out, &["system", "processes", "pages"]),
        "select (select count(distinct (host, boot_id, taken_at)) from pages) as stamps,
                (select any_value(host) from pages) as host,
                (select any_value(boot_id) from processes) as boot_id,
                (select epoch_us(taken_at) from system) as taken_us,
                (select meminfo_kb['MemTotal'] from system) as mem_total_kb,
                (select count(*) from processes) as processes",
    );
    assert_eq!(got[0]["stamps"], 1);
    assert_eq!(got[0]["host"], host.as_str());
    assert_eq!(got[0]["boot_id"], boot.trim());
    assert_eq!(got[0]["processes"], 2);
    let mut system = None;
    pagescope_core::format::read_snapshot(
        std::fs::File::open(&snap).unwrap(),
        Path::new(&snap),
        &mut SystemOnly(&mut system),
    )
    .unwrap();
    let system = system.unwrap();
    assert_eq!(got[0]["taken_us"], system.time_unix_ns / 1000);
    assert_eq!(
        got[0]["mem_total_kb"],
        system.meminfo_kb("MemTotal").unwrap()
    );
}

/// A process's hugetlb pages are rows of the pages table marked
/// `hugetlb` (never `resident`, as smaps counts them in no RSS): SQL over
/// them gives `report processes`' `hugetlb_pages`, the RSS and USS by SQL
/// stay `report`'s, and the system row says the snapshot read them.
#[test]
fn hugetlb_pages_are_exported_as_report_counts_them() {
    require_pfns!();
    require_duckdb!();
    let _serial = serial();
    let Some(huge_kb) = util::hugetlb::meminfo("Hugepagesize") else {
        skip!(
            "hugetlb",
            "no Hugepagesize in /proc/meminfo: a kernel without CONFIG_HUGETLBFS"
        )
    };
    let n = 2;
    let _pool = match util::hugetlb::HugePages::reserve(n) {
        Ok(pool) => pool,
        Err(why) => skip!("hugetlb", why),
    };
    let dir = tempfile::tempdir().unwrap();
    let size = format!("{}K", n * huge_kb);
    let pt = Pagetest::start(
        &[],
        &["--size", &size, "--mode", "hugetlb", "--hold"],
        "done",
    );
    let snap = temp_path(dir.path(), "s.snap");
    run_ok(&[
        "snapshot",
        "-q",
        "--pid",
        &pt.pid().to_string(),
        "-o",
        &snap,
    ]);
    let out = temp_path(dir.path(), "out");
    export(&snap, &out, &[]);
    let report = report_json(&["report", "processes", "--input", &snap, "--format", "json"]);
    let row = process_row(&report, pt.pid());
    let kb = pt.ready["page_size"].as_u64().unwrap() / 1024;
    // Not a trivial agreement: the buffer is there, in base pages.
    assert_eq!(row["hugetlb_pages"], n * huge_kb / kb, "{row}");
    let got = duckdb(
        &views(&out, &["pages", "system"]),
        "select count(*) filter (where hugetlb and present) as hugetlb_pages,
                count(*) filter (where hugetlb and resident) as hugetlb_resident,
                (select hugetlb_read from system) as hugetlb_read
         from pages",
    );
    assert_eq!(got[0]["hugetlb_pages"], row["hugetlb_pages"]);
    assert_eq!(got[0]["hugetlb_resident"], 0);
    assert_eq!(got[0]["hugetlb_read"], true);
    let got = duckdb(&views(&out, &["pages"]), PROCESS_FIGURES);
    assert_eq!(got[0]["rss_pages"], row["rss_pages"]);
    assert_eq!(got[0]["uss_pages"], row["uss_pages"]);
}

/// Keeps a snapshot's system record.
struct SystemOnly<'a>(&'a mut Option<SystemInfo>);

impl SnapshotSink for SystemOnly<'_> {
    fn system(&mut self, s: &SystemInfo) -> pagescope_core::Result<()> {
        *self.0 = Some(s.clone());
        Ok(())
    }
    fn process(&mut self, _: &ProcessRecord) -> pagescope_core::Result<()> {
        Ok(())
    }
    fn pages(&mut self, _: &PageChunk) -> pagescope_core::Result<()> {
        Ok(())
    }
    fn finish(&mut self, _: &Trailer) -> pagescope_core::Result<()> {
        Ok(())
    }
}

/// `analyze temporal`'s rows, by SQL over a recording's `intervals` and
/// `counts`: physical rows where an interval has them, else virtual.
const TEMPORAL: &str = "
    select i.seq, i.start_ns, i.end_ns,
           coalesce(sum(c.user_pages), 0) as user_pages,
           coalesce(sum(c.page_cache_pages), 0) as page_cache_pages,
           i.kernel_slab_pages + i.kernel_page_table_pages + i.kernel_stack_pages
               as kernel_resident_pages,
           coalesce(sum(c.written_pages), 0) as written_pages,
           count(c.seq) as blocks,
           i.recorder_cpu_ns
    from intervals i left join counts c
      on c.seq = i.seq
     and c.space = case when i.physical_rows > 0 then 'physical' else 'virtual' end
    group by all order by i.seq";

/// A recording of pagetest writing its buffer interval after interval:
/// SQL over its export gives `analyze temporal`'s rows, exactly.
#[test]
fn recording_export_answers_as_analyze_temporal_does() {
    require_duckdb!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = temp_path(dir.path(), "r.rec");
    let mut pt = Pagetest::recorded(
        &["--backend", "refs", "--interval", "100ms"],
        &rec,
        &["--size", "16M", "--iterations", "8", "--sleep", "100ms"],
        "done",
    );
    pt.recording(&rec);
    let out = temp_path(dir.path(), "out");
    export(&rec, &out, &[]);
    let want = temporal(&rec, None);
    assert!(want.len() >= 5, "{want:?}");
    assert!(want.iter().any(|r| r["user_pages"].as_u64() > Some(4000)));
    let got = duckdb(&views(&out, &["intervals", "counts"]), TEMPORAL);
    assert_eq!(got, want);
    let header = duckdb(
        &views(&out, &["header"]),
        "select backend, complete, intervals, host is not null as has_host from header",
    );
    assert_eq!(
        header[0],
        serde_json::json!({"backend": "refs", "complete": true, "intervals": want.len(), "has_host": true})
    );
}

/// `analyze refs`' totals: references, reads, writes, and distinct pages
/// (a shared-memory page by its object, a private one by process and
/// address).
const REFS: &str = "
    select count(*) as references,
           count(*) filter (where not write) as reads,
           count(*) filter (where write) as writes,
           count(distinct case when shared_inode is null
                               then 'p' || pid || ':' || addr
                               else 's' || shared_dev || ':' || shared_inode || ':' || shared_offset
                          end) as distinct_pages
    from refs";

/// A trace of pagetest and a forked child sharing a memfd buffer: SQL
/// over its export gives `analyze refs`' totals, exactly.
#[test]
fn trace_export_answers_as_analyze_refs_does() {
    if !cfg!(target_arch = "x86_64") {
        skip!("x86_64", "pagescope trace supports x86_64 only");
    }
    if !rustix::process::geteuid().is_root() {
        skip!("root", "tracing needs root");
    }
    let Some(features) = uffd_features() else {
        skip!("userfaultfd", "tracing needs userfaultfd");
    };
    if features & UFFD_FEATURES_SHMEM != UFFD_FEATURES_SHMEM {
        skip!("uffd-shmem", "tracing shared memory needs Linux 5.19");
    }
    require_duckdb!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let pagetest = pagetest_bin();
    run_ok(&[
        "trace",
        "-q",
        "--pool",
        "1M",
        "-o",
        &trace,
        "--",
        pagetest.to_str().unwrap(),
        "--size",
        "4M",
        "--mode",
        "shm",
        "--iterations",
        "2",
        "--fork",
        "1",
    ]);
    let out = temp_path(dir.path(), "out");
    export(&trace, &out, &[]);
    let want = report_json(&["analyze", &trace, "refs", "--format", "json"]);
    let got = duckdb(&views(&out, &["refs"]), REFS);
    for k in ["references", "reads", "writes", "distinct_pages"] {
        assert_eq!(got[0][k], want[k], "{k}: {got:?}");
    }
    // Two processes touched the shared buffer: counted once per page.
    let shared = duckdb(
        &views(&out, &["refs"]),
        "select count(distinct pid) as pids, count(distinct shared_offset) as pages
         from refs where shared_inode is not null",
    );
    assert_eq!(shared[0]["pids"], 2, "{shared:?}");
    assert_eq!(shared[0]["pages"], 1024, "{shared:?}");
}

/// Bad input: one line and exit 2, and no file left behind; an output
/// directory that holds anything is refused, unless --force.
#[test]
fn bad_input_and_existing_output_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let empty = temp_path(dir.path(), "empty");
    std::fs::write(&empty, b"").unwrap();
    let junk = temp_path(dir.path(), "junk");
    std::fs::write(&junk, b"not a pagescope file at all").unwrap();
    let out = temp_path(dir.path(), "out");
    for (input, says) in [(&empty, "empty file"), (&junk, "wrong magic bytes")] {
        let o = run(&[], &["export", input, "-o", &out]);
        let err = failed_with(&o, 2);
        assert!(err.contains(says) && err.contains(input.as_str()), "{err}");
    }
    assert_eq!(std::fs::read_dir(&out).map_or(0, |d| d.count()), 0);
    // A snapshot cut short inside its first page chunk: the tables hold
    // what was written.
    let snap = temp_path(dir.path(), "s.snap");
    write_snapshot(&snap, 1000);
    let bytes = std::fs::read(&snap).unwrap();
    let cut = temp_path(dir.path(), "cut.snap");
    std::fs::write(&cut, &bytes[..bytes.len() - 40]).unwrap();
    let o = run(&[], &["export", &cut, "-o", &out]);
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("cut short"));
    // The directory holds the tables now.
    let o = run(&[], &["export", &snap, "-o", &out]);
    let err = failed_with(&o, 2);
    assert!(
        err.contains("not empty") && err.contains("--force"),
        "{err}"
    );
    run_ok(&["export", "-q", &snap, "-o", &out, "--force"]);
    if let Some(()) = duckdb_ok() {
        let got = duckdb(&views(&out, &["pages", "system"]),
            "select (select count(*) from pages) as pages, (select complete from system) as complete");
        assert_eq!(got[0], serde_json::json!({"pages": 1000, "complete": true}));
    }
    // Partitioned: the same file twice is refused, another host is not.
    let fleet = temp_path(dir.path(), "fleet");
    run_ok(&["export", "-q", &snap, "-o", &fleet, "--partition"]);
    let err = failed_with(
        &run(&[], &["export", &snap, "-o", &fleet, "--partition"]),
        2,
    );
    assert!(err.contains("exported already"), "{err}");
    run_ok(&[
        "export",
        "-q",
        &snap,
        "-o",
        &fleet,
        "--partition",
        "--host",
        "other",
    ]);
    let hosts: Vec<String> = std::fs::read_dir(format!("{fleet}/pages"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(hosts.len(), 2, "{hosts:?}");
    assert!(hosts.contains(&"host=other".to_string()), "{hosts:?}");
    // No temporary file is left anywhere.
    let left = Command::new("find")
        .args([dir.path().to_str().unwrap(), "-name", ".*.tmp-*"])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&left.stdout)
    );
}

fn duckdb_ok() -> Option<()> {
    Command::new("python3")
        .args(["-c", "import duckdb"])
        .output()
        .is_ok_and(|o| o.status.success())
        .then_some(())
}

/// Writes a snapshot of one process with `pages` present pages (each
/// frame mapped once), made up: what an export of that many pages costs.
fn write_snapshot(path: &str, pages: u64) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = SnapshotWriter::new(std::io::BufWriter::new(file), Path::new(path)).unwrap();
    w.system(&SystemInfo {
        hostname: "made-up".into(),
        page_size: 4096,
        pfns_visible: true,
        time_unix_ns: 1_700_000_000_000_000_000,
        ..SystemInfo::default()
    })
    .unwrap();
    let start = 0x7f00_0000_0000u64;
    w.process(&ProcessRecord {
        task: Task {
            pid: 4242,
            tgid: 4242,
            comm: "made-up".into(),
            ..Task::default()
        },
        vmas: vec![Vma {
            start,
            end: start + pages * 4096,
            perms: "rw-p".into(),
            ..Vma::default()
        }],
        ..ProcessRecord::default()
    })
    .unwrap();
    let mut done = 0;
    while done < pages {
        let n = (pages - done).min(65536);
        let chunk = PageChunk {
            pid: 4242,
            start_time: 0,
            pages: (done..done + n)
                .map(|i| PageRecord {
                    vaddr: start + i * 4096,
                    entry: PagemapEntry((1 << 63) | (1 << 56) | (0x10_0000 + i)),
                    phys: Some(PhysInfo {
                        flags: KPageFlags::ANON,
                        count: 1,
                        memcg: 0,
                        node: 0,
                    }),
                })
                .collect(),
        };
        w.pages(&chunk).unwrap();
        done += n;
    }
    w.finish(&Trailer {
        processes: 1,
        pages,
        ..Trailer::default()
    })
    .unwrap();
}

/// Peak RSS in kB of `pagescope args` (by /usr/bin/time).
fn peak_rss_kb(args: &[&str]) -> u64 {
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .arg(pagescope_bin())
        .args(args)
        .output()
        .expect("/usr/bin/time runs");
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    err.lines().last().unwrap().trim().parse().unwrap()
}

/// A snapshot of 3 M pages exports in bounded memory: its peak RSS is
/// within a few MB of an export of 300 k pages, far below what the pages
/// would take held at once.
#[test]
fn export_of_3m_pages_holds_memory_bounded() {
    if !Path::new("/usr/bin/time").exists() {
        skip!("time", "needs /usr/bin/time (Debian package time)");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut peaks = Vec::new();
    for pages in [300_000, 3_000_000] {
        let snap = temp_path(dir.path(), &format!("{pages}.snap"));
        write_snapshot(&snap, pages);
        let out = temp_path(dir.path(), &format!("{pages}"));
        peaks.push(peak_rss_kb(&["export", "-q", &snap, "-o", &out]));
        let size = std::fs::metadata(format!("{out}/pages.parquet"))
            .unwrap()
            .len();
        eprintln!(
            "{pages} pages: peak RSS {} kB, pages.parquet {size} bytes",
            peaks.last().unwrap()
        );
        if duckdb_ok().is_some() {
            let got = duckdb(&views(&out, &["pages"]), "select count(*) as n, count(distinct pfn) as pfns, max(vaddr) - min(vaddr) as span from pages");
            assert_eq!(
                got[0],
                serde_json::json!({"n": pages, "pfns": pages, "span": (pages - 1) * 4096})
            );
        }
    }
    // 3 M pages held as rows would be hundreds of MB.
    assert!(peaks[1] < 150_000, "{peaks:?}");
    assert!(peaks[1] < peaks[0] + 40_000, "{peaks:?}");
}

/// Three machines (three UTS namespaces, each with its own host name),
/// each with a pagetest of its own size, snapshotted and exported into
/// one directory with --partition: DuckDB and Spark (examples/
/// spark_fleet.py, in local mode) read it as one dataset and give the
/// same answer, which is each snapshot's own `report processes` and
/// `report total`. Spark takes about 40 s of this test on this 2-core
/// machine.
#[test]
fn fleet_reads_as_one_dataset_in_duckdb_and_spark() {
    require_pfns!();
    require_duckdb!();
    let spark = Command::new("python3")
        .args(["-c", "import pyspark"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !spark {
        skip!("pyspark", "needs PySpark (pip install pyspark)");
    }
    if !Command::new("java")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        skip!(
            "pyspark",
            "Spark needs Java (Debian package default-jre-headless)"
        );
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let fleet = temp_path(dir.path(), "fleet");
    let mut truth = Vec::new();
    let mut held = Vec::new();
    for (host, size) in [("fleet-a", "8M"), ("fleet-b", "16M"), ("fleet-c", "24M")] {
        let pt = Pagetest::start(
            &[],
            &["--size", size, "--iterations", "1", "--hold"],
            "done",
        );
        let snap = temp_path(dir.path(), &format!("{host}.snap"));
        let pid = pt.pid().to_string();
        // A machine of its own name: a UTS namespace, whose host name the
        // snapshot records.
        let out = Command::new("unshare")
            .args([
                "--uts",
                "sh",
                "-c",
                &format!("hostname {host} && exec \"$0\" \"$@\""),
            ])
            .arg(pagescope_bin())
            .args(["snapshot", "-q", "--pid", &pid, "-o", &snap])
            .output()
            .expect("unshare runs");
        assert!(out.status.success(), "{out:?}");
        // Exported on this machine, whose name is not the snapshot's.
        export(&snap, &fleet, &["--partition"]);
        let procs = report_json(&["report", "processes", "--input", &snap, "--format", "json"]);
        let total = report_json(&["report", "total", "--input", &snap, "--format", "json"]);
        let p = &procs["processes"][0];
        truth.push(serde_json::json!({
            "host": host,
            "processes": 1,
            "rss_pages": p["rss_pages"],
            "pss_pages": p["pss_pages"],
            "user_pages": total["user_pages"],
        }));
        held.push(pt);
    }
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/spark_fleet.py");
    let example = example.to_str().unwrap();
    // The example's own query, in DuckDB, over the same directory.
    const SCRIPT: &str = r#"
import duckdb, json, runpy, sys
query = runpy.run_path(sys.argv[1])["QUERY"]
c = duckdb.connect()
c.execute("set enable_progress_bar = false")
c.execute(f"create view pages as select * from read_parquet('{sys.argv[2]}/pages/*/*.parquet', hive_partitioning = true)")
cur = c.execute(query)
cols = [d[0] for d in cur.description]
for r in cur.fetchall():
    print(json.dumps(dict(zip(cols, r)), default=str))
"#;
    let lines = |out: std::process::Output| -> Vec<Value> {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let by_duckdb = lines(
        Command::new("python3")
            .args(["-c", SCRIPT, example, &fleet])
            .output()
            .unwrap(),
    );
    let started = std::time::Instant::now();
    let by_spark = lines(
        Command::new("python3")
            .args([example, &fleet])
            .output()
            .unwrap(),
    );
    eprintln!("spark: {:?}", started.elapsed());
    let figures = |rows: &[Value]| -> Vec<Value> {
        rows.iter()
            .map(|r| {
                serde_json::json!({
                    "host": r["host"], "processes": r["processes"], "rss_pages": r["rss_pages"],
                    "pss_pages": r["pss_pages"], "user_pages": r["user_pages"],
                })
            })
            .collect()
    };
    assert_eq!(figures(&by_duckdb), truth);
    assert_eq!(figures(&by_spark), truth);
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    for r in by_duckdb.iter().chain(&by_spark) {
        assert_eq!(r["boot_id"], boot.trim(), "{r}");
    }
    drop(held);
}
