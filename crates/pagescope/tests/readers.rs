//! Files that break the recording format's limits (docs/format.md): a
//! chunk claiming millions of items, a frame that decompresses to a
//! gigabyte. Each is refused with exit code 2 and one line, and the reader
//! never allocates what the file claims: the test measures the peak RSS of
//! the pagescope that read it.
//!
//! The files are made with pagescope's own writers up to the bad frame,
//! which is encoded here by hand (the writers refuse to write it).
//!
//! Peak RSS is `getrusage(RUSAGE_CHILDREN)` of a process whose only
//! child is that pagescope: this test binary, started again to run
//! [`measure_helper`].

mod util;

use pagescope_core::format::{frame_type, RecordWriter, SnapshotWriter, TraceWriter};
use pagescope_core::model::{ProcessRecord, SnapshotSink, SystemInfo, Task, Vma};
use pagescope_core::record::{Backend, Granularity, RecordHeader, Scope, WriteSource};
use pagescope_core::trace::{EvictMethod, TraceHeader};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use util::*;

/// The most a reader may take on any of these files.
const RSS_LIMIT_KB: u64 = 64 << 10;

/// Four million: the count the crafted chunks claim.
const CLAIM: u64 = 4 << 20;

/// Appends `v` as an LEB128 varint (postcard's integers).
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a postcard byte string: its length, then the bytes.
fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Appends a frame of `ty` whose payload is `stored`, with the given flags
/// and decompressed size, and a correct checksum.
fn raw_frame(out: &mut Vec<u8>, ty: u16, flags: u16, raw_len: u32, stored: &[u8]) {
    let mut h = Vec::with_capacity(16);
    h.extend_from_slice(&ty.to_le_bytes());
    h.extend_from_slice(&flags.to_le_bytes());
    h.extend_from_slice(&(stored.len() as u32).to_le_bytes());
    h.extend_from_slice(&raw_len.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&h);
    crc.update(stored);
    h.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(stored);
}

/// Appends a zstd-compressed frame of `ty` holding `raw`.
fn frame(out: &mut Vec<u8>, ty: u16, raw: &[u8]) {
    let packed = zstd::bulk::compress(raw, 3).unwrap();
    raw_frame(out, ty, 1, raw.len() as u32, &packed);
}

/// A zstd frame that decompresses to `len` zero bytes, made in pieces.
fn zeros_compressed(len: usize) -> Vec<u8> {
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    enc.set_pledged_src_size(Some(len as u64)).unwrap();
    enc.include_contentsize(true).unwrap();
    let piece = vec![0u8; 1 << 20];
    for _ in 0..len / piece.len() {
        enc.write_all(&piece).unwrap();
    }
    enc.finish().unwrap()
}

/// A snapshot of one process (pid 1) with one VMA, up to its pages.
fn snapshot_start() -> Vec<u8> {
    snapshot_start_with(false)
}

/// The end frame of a snapshot, as its writer's `finish` writes it: a
/// file without it is cut short, and its last process's pages count
/// for nothing.
fn snapshot_end() -> Vec<u8> {
    let written = |end: bool| {
        let mut buf = Vec::new();
        let mut w = SnapshotWriter::new(&mut buf, Path::new("s")).unwrap();
        if end {
            w.finish(&pagescope_core::model::Trailer::default())
                .unwrap();
        }
        drop(w);
        buf
    };
    let (open, ended) = (written(false), written(true));
    assert!(ended.len() > open.len() && ended.starts_with(&open));
    ended[open.len()..].to_vec()
}

/// The same, from a machine whose frames were visible (or not).
fn snapshot_start_with(pfns_visible: bool) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = SnapshotWriter::new(&mut buf, Path::new("s")).unwrap();
    w.system(&SystemInfo {
        page_size: 4096,
        pfns_visible,
        ram_ranges: vec![(0, (1 << 30) - 1)],
        ..SystemInfo::default()
    })
    .unwrap();
    w.process(&ProcessRecord {
        task: Task {
            pid: 1,
            tgid: 1,
            comm: "init".into(),
            start_time: 7,
            ..Task::default()
        },
        vmas: vec![Vma {
            start: 0x1000_0000,
            end: 0x1000_0000 + (CLAIM + 1) * 4096,
            perms: "rw-p".into(),
            ..Vma::default()
        }],
        ..ProcessRecord::default()
    })
    .unwrap();
    drop(w);
    buf
}

/// A page chunk (the columns of docs/format.md) of `n` consecutive pages
/// of pid 1, every column as long as `n` pages need.
fn page_chunk(n: u64) -> Vec<u8> {
    let n = n as usize;
    let mut raw = Vec::new();
    varint(&mut raw, 1); // pid
    varint(&mut raw, 7); // start_time
    varint(&mut raw, 4096); // page_size
    varint(&mut raw, n as u64); // pages
                                // vpn_delta: the first page number is absolute, then 1 each.
    let mut vpn = Vec::new();
    varint(&mut vpn, 0x1000_0000 / 4096);
    vpn.resize(vpn.len() + n - 1, 1);
    bytes(&mut raw, &vpn);
    // entry_flags: bit 63 (present), 1 << 8 as a varint.
    bytes(&mut raw, &[0x80, 0x02].repeat(n));
    bytes(&mut raw, &vec![0u8; n]); // frame_delta
    bytes(&mut raw, &vec![0u8; n.div_ceil(8)]); // has_phys: none
    for _ in 0..4 {
        bytes(&mut raw, &[]); // kflags, kcount, memcg, node
    }
    raw
}

/// A page chunk of pid 1 whose consecutive pages are present in
/// `frames`, each with a physical side.
fn page_chunk_in(frames: &[u64]) -> Vec<u8> {
    let n = frames.len();
    let mut raw = Vec::new();
    for v in [1, 7, 4096, n as u64] {
        varint(&mut raw, v); // pid, start_time, page_size, pages
    }
    let mut vpn = Vec::new();
    varint(&mut vpn, 0x1000_0000 / 4096);
    vpn.resize(vpn.len() + n - 1, 1);
    bytes(&mut raw, &vpn);
    bytes(&mut raw, &[0x80, 0x02].repeat(n)); // present
    let mut deltas = Vec::new();
    let mut prev = 0u64;
    for &f in frames {
        let d = f.wrapping_sub(prev) as i64;
        varint(&mut deltas, ((d << 1) ^ (d >> 63)) as u64);
        prev = f;
    }
    bytes(&mut raw, &deltas);
    bytes(&mut raw, &vec![0xff; n.div_ceil(8)]); // has_phys: all
    bytes(&mut raw, &vec![0; n]); // kflags
    bytes(&mut raw, &vec![1; n]); // kcount
    bytes(&mut raw, &vec![0; n]); // memcg
    bytes(&mut raw, &vec![0; n]); // node
    raw
}

/// A trace header.
fn trace_start() -> Vec<u8> {
    let mut buf = Vec::new();
    let header = TraceHeader {
        page_size: 4096,
        pool_pages: 512,
        policy: "fifo".into(),
        evict: EvictMethod::Move,
        command: vec!["pagetest".into()],
        start_unix_ns: 1,
        start_monotonic_ns: 1,
        kernel: "6.18".into(),
        untraced: String::new(),
        origin: None,
    };
    drop(TraceWriter::new(&mut buf, Path::new("t"), &header, 1000).unwrap());
    buf
}

/// A reference chunk (frame type 24) of `n` references by pid and tid
/// 100 to `n` consecutive pages, one microsecond apart.
fn ref_chunk(n: u64) -> Vec<u8> {
    let n = n as usize;
    let mut raw = Vec::new();
    varint(&mut raw, 1000); // time_unit
    varint(&mut raw, n as u64); // count
    raw.push(12); // page_shift
    varint(&mut raw, 1); // first_time
    bytes(&mut raw, &vec![1u8; n]); // time_delta
    bytes(&mut raw, &vec![2u8; n]); // page_delta: zigzag(1)
                                    // From 0 to 100 (zigzag 200), then no change.
    let mut ids = Vec::new();
    varint(&mut ids, 200);
    ids.resize(ids.len() + n - 1, 0);
    bytes(&mut raw, &ids); // tid_delta
    bytes(&mut raw, &ids); // pid_delta
    bytes(&mut raw, &vec![0u8; n]); // mapping_delta
    bytes(&mut raw, &vec![0u8; n.div_ceil(8)]); // write
    raw
}

/// A recording header (the refs backend, page granularity).
fn record_start() -> Vec<u8> {
    let mut buf = Vec::new();
    let header = RecordHeader {
        page_size: 4096,
        interval_ns: 100_000_000,
        block_size: 64 << 20,
        backend: Backend::Refs,
        why: "asked for".into(),
        granularity: Granularity::Page,
        writes: WriteSource::None,
        frozen: true,
        scope: Scope::Processes(vec![100]),
        start_unix_ns: 1,
        start_monotonic_ns: 2,
        kernel: "6.18".into(),
        notes: vec![],
        nodes: vec![],
        sample: None,
        origin: None,
    };
    drop(RecordWriter::new(&mut buf, Path::new("r"), &header).unwrap());
    buf
}

/// An interval (postcard, field by field) whose page runs for pid 100 are
/// `n` single pages one page apart.
fn interval_with_runs(n: u64) -> Vec<u8> {
    let mut raw = Vec::new();
    varint(&mut raw, 0); // seq
    varint(&mut raw, 0); // start_ns
    varint(&mut raw, 100_000_000); // end_ns
    varint(&mut raw, 0); // phys: none
    varint(&mut raw, 0); // virt: none
    raw.extend_from_slice(&[0, 0, 0]); // kernel: slab, page tables, stacks
    varint(&mut raw, 0); // recorder_cpu_ns
    varint(&mut raw, 0); // huge: none
    varint(&mut raw, 1); // pages: one process ...
    varint(&mut raw, 100); // ... pid 100 ...
    varint(&mut raw, n); // ... with n runs of (gap 1, length 1)
    raw.resize(raw.len() + 2 * n as usize, 1);
    raw
}

/// An interval with `n` physical rows, each one block with one page.
fn interval_with_rows(n: u64) -> Vec<u8> {
    let mut raw = Vec::new();
    varint(&mut raw, 0);
    varint(&mut raw, 0);
    varint(&mut raw, 100_000_000);
    varint(&mut raw, n); // phys: block 0, 1 user page, 0, 0 (repeated)
    for _ in 0..n {
        raw.extend_from_slice(&[0, 1, 0, 0]);
    }
    varint(&mut raw, 0);
    raw.extend_from_slice(&[0, 0, 0]);
    varint(&mut raw, 0);
    varint(&mut raw, 0);
    varint(&mut raw, 0);
    raw
}

/// What [`measured`] saw of one run.
struct Run {
    code: Option<i32>,
    stderr: String,
    rss_kb: u64,
    took: std::time::Duration,
}

/// Runs pagescope with `args` in a child of a process of its own (this
/// test binary, in [`measure_helper`]), and reads its peak RSS from
/// there.
fn measured(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let stderr = dir.path().join("stderr");
    let started = std::time::Instant::now();
    let helper = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "measure_helper", "--quiet", "--test-threads=1"])
        .env("READERS_MEASURE_ARGS", args.join("\n"))
        .env("READERS_MEASURE_REPORT", &report)
        .env("READERS_MEASURE_STDERR", &stderr)
        .output()
        .expect("the test binary runs");
    let took = started.elapsed();
    assert!(helper.status.success(), "{helper:?}");
    let report = std::fs::read_to_string(&report).expect("the helper reports");
    let (code, rss) = report.split_once(' ').unwrap();
    Run {
        code: code.parse().ok(),
        stderr: std::fs::read_to_string(&stderr).unwrap(),
        rss_kb: rss.parse().unwrap(),
        took,
    }
}

/// Not a test of its own: run by [`measured`] (with its environment), it
/// runs pagescope and writes its exit code and peak RSS in kB.
#[test]
fn measure_helper() {
    let Ok(args) = std::env::var("READERS_MEASURE_ARGS") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap();
    let stderr = std::fs::File::create(var("READERS_MEASURE_STDERR")).unwrap();
    let status = Command::new(pagescope_bin())
        .args(args.split('\n'))
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .status()
        .expect("pagescope runs");
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage");
    let code = status
        .code()
        .map_or("signal".to_string(), |c| c.to_string());
    std::fs::write(
        var("READERS_MEASURE_REPORT"),
        format!("{code} {}", usage.max_rss()),
    )
    .unwrap();
}

/// Runs pagescope with `args` on a file written from `bytes`, and checks
/// that it refuses the file with exit code 2 and one line that contains
/// `expect`, within [`RSS_LIMIT_KB`].
fn refused(name: &str, bytes: &[u8], args: &[&str], expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(dir.path(), name);
    std::fs::write(&path, bytes).unwrap();
    let args: Vec<&str> = args
        .iter()
        .map(|&a| if a == "FILE" { path.as_str() } else { a })
        .collect();
    let run = measured(&args);
    let what = format!(
        "pagescope {args:?} on {} bytes: exit {:?} in {:?}, peak RSS {} kB, stderr {:?}",
        bytes.len(),
        run.code,
        run.took,
        run.rss_kb,
        run.stderr
    );
    assert_eq!(run.code, Some(2), "{what}");
    assert_eq!(run.stderr.lines().count(), 1, "{what}");
    assert!(run.stderr.starts_with("error: "), "{what}");
    assert!(run.stderr.contains(&path), "{what}");
    assert!(run.stderr.contains(expect), "{what}");
    assert!(run.rss_kb < RSS_LIMIT_KB, "{what}");
}

#[test]
fn a_page_chunk_of_four_million_pages_is_refused() {
    let mut file = snapshot_start();
    frame(&mut file, frame_type::PAGES, &page_chunk(CLAIM));
    assert!(file.len() < 4096, "{} bytes", file.len());
    // Its columns alone are more than a page chunk's frame may hold.
    for view in ["total", "processes", "pages"] {
        refused(
            "pages.snap",
            &file,
            &["report", view, "--input", "FILE"],
            "a page chunk frame may hold",
        );
    }
}

#[test]
fn a_page_chunk_one_page_over_the_limit_is_refused() {
    let mut file = snapshot_start();
    frame(&mut file, frame_type::PAGES, &page_chunk(65537));
    refused(
        "pages.snap",
        &file,
        &["report", "total", "--input", "FILE"],
        "page chunk of 65537 pages, more than the 65536",
    );
}

#[test]
fn a_reference_chunk_of_four_million_references_is_refused() {
    let mut file = trace_start();
    frame(&mut file, frame_type::REFS_IN_UNITS, &ref_chunk(CLAIM));
    assert!(file.len() < 4096, "{} bytes", file.len());
    for view in ["refs", "mrc"] {
        refused(
            "refs.trace",
            &file,
            &["analyze", "FILE", view],
            "a reference chunk frame may hold",
        );
    }
}

#[test]
fn a_reference_chunk_one_over_the_limit_is_refused() {
    let mut file = trace_start();
    frame(&mut file, frame_type::REFS_IN_UNITS, &ref_chunk(65537));
    refused(
        "refs.trace",
        &file,
        &["analyze", "FILE", "refs"],
        "reference chunk of 65537 references, more than the 65536",
    );
}

#[test]
fn an_interval_of_eight_million_page_runs_is_refused() {
    let mut file = record_start();
    frame(
        &mut file,
        frame_type::INTERVAL,
        &interval_with_runs(2 * CLAIM),
    );
    assert!(file.len() < 4096, "{} bytes", file.len());
    for view in ["temporal", "wss", "hugepages"] {
        refused("runs.rec", &file, &["analyze", "FILE", view], "page runs");
    }
}

#[test]
fn an_interval_of_eight_million_rows_is_refused() {
    let mut file = record_start();
    frame(
        &mut file,
        frame_type::INTERVAL,
        &interval_with_rows(2 * CLAIM),
    );
    assert!(file.len() < 4096, "{} bytes", file.len());
    refused(
        "rows.rec",
        &file,
        &["analyze", "FILE", "temporal"],
        "physical rows",
    );
}

/// A frame that decompresses to 1 GiB, of a type every reader knows and
/// of one none knows (which readers skip): refused by its header, before
/// anything is decompressed.
#[test]
fn a_frame_of_a_gibibyte_is_refused() {
    let gib = zeros_compressed(1 << 30);
    assert!(gib.len() < 64 << 10, "{} bytes", gib.len());
    for ty in [frame_type::PAGES, frame_type::PROCESS, 99] {
        let mut file = snapshot_start();
        raw_frame(&mut file, ty, 1, 1 << 30, &gib);
        refused(
            "gib.snap",
            &file,
            &["report", "total", "--input", "FILE"],
            "frame at byte",
        );
    }
    let mut file = trace_start();
    raw_frame(&mut file, frame_type::REFS_IN_UNITS, 1, 1 << 30, &gib);
    refused(
        "gib.trace",
        &file,
        &["analyze", "FILE", "refs"],
        "frame at byte",
    );
    let mut file = record_start();
    raw_frame(&mut file, frame_type::INTERVAL, 1, 1 << 30, &gib);
    refused(
        "gib.rec",
        &file,
        &["analyze", "FILE", "temporal"],
        "frame at byte",
    );
}

/// A frame whose header claims more stored bytes than the file holds is
/// a file cut short, read up to it; one that claims a size above every
/// limit is refused, without reading (or allocating) that much.
#[test]
fn a_frame_claiming_more_than_the_file_holds() {
    let mut file = snapshot_start();
    let mut h = Vec::new();
    h.extend_from_slice(&frame_type::PROCESS.to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes());
    h.extend_from_slice(&u32::MAX.to_le_bytes());
    h.extend_from_slice(&u32::MAX.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    file.extend_from_slice(&h);
    file.extend_from_slice(&[0; 100]);
    refused(
        "long.snap",
        &file,
        &["report", "total", "--input", "FILE"],
        "frame at byte",
    );
}

/// The same files at the limits are read, and what they hold is counted:
/// the files above break the limits and nothing else. (Reading them takes
/// what they hold: 4 M page runs or rows take up to 200 MB.)
#[test]
fn files_at_the_limits_are_read() {
    use pagescope_core::format::limits;
    let dir = tempfile::tempdir().unwrap();
    let read = |name: &str, bytes: &[u8], args: &[&str]| {
        let path = temp_path(dir.path(), name);
        std::fs::write(&path, bytes).unwrap();
        let args: Vec<&str> = args
            .iter()
            .map(|&a| if a == "FILE" { path.as_str() } else { a })
            .chain(["--format", "json"])
            .collect();
        let out = run_ok(&args);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let mut file = snapshot_start();
    frame(
        &mut file,
        frame_type::PAGES,
        &page_chunk(limits::CHUNK_PAGES as u64),
    );
    file.extend(snapshot_end());
    let procs = read(
        "pages.snap",
        &file,
        &["report", "processes", "--input", "FILE"],
    );
    assert_eq!(procs["processes"][0]["total_pages"], 65536, "{procs}");

    let mut file = trace_start();
    frame(
        &mut file,
        frame_type::REFS_IN_UNITS,
        &ref_chunk(limits::CHUNK_REFS as u64),
    );
    let refs = read("refs.trace", &file, &["analyze", "FILE", "refs"]);
    assert!(refs.to_string().contains("65536"), "{refs}");

    let mut file = record_start();
    frame(
        &mut file,
        frame_type::INTERVAL,
        &interval_with_runs(limits::RUNS as u64),
    );
    let wss = read("runs.rec", &file, &["analyze", "FILE", "wss"]);
    assert_eq!(wss["max_pages"], limits::RUNS, "{wss}");
    let mut file = record_start();
    frame(
        &mut file,
        frame_type::INTERVAL,
        &interval_with_rows(limits::ROWS as u64),
    );
    let temporal = read("rows.rec", &file, &["analyze", "FILE", "temporal"]);
    assert_eq!(temporal["user_pages"], limits::ROWS, "{temporal}");
}

/// Frames far above the machine's RAM (a damaged file, or device memory)
/// are counted without a table sized by the highest of them: one frame
/// at 8 TiB, at 4 PiB, and the most a chunk holds, each in a block of
/// its own.
#[test]
fn frames_far_apart_are_counted_in_little_memory() {
    let mut frames = vec![(1 << 31) - 1, 1 << 40];
    frames.extend((0..65534u64).map(|i| (i + 1) << 15));
    let mut file = snapshot_start_with(true);
    frame(&mut file, frame_type::PAGES, &page_chunk_in(&frames));
    file.extend(snapshot_end());
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(dir.path(), "far.snap");
    std::fs::write(&path, &file).unwrap();
    let run = measured(&["report", "total", "--input", &path, "--format", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.rss_kb < RSS_LIMIT_KB, "{} kB", run.rss_kb);
    let out = run_ok(&["report", "total", "--input", &path, "--format", "json"]);
    let total: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(total["user_pages"], 65536, "{total}");
}
