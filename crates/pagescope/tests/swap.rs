//! Pages in swap, against the kernel's own accounting. Each test switches
//! a swapfile on (and off again, and removes it, when it ends, even by a
//! panic: [`Swapfile`]), pagetest pages out a known part of its buffer
//! (`--pageout`, `madvise(MADV_PAGEOUT)`), and the pages that really
//! went, read from the kernel (smaps_rollup `Swap`, pagemap bit 62), are
//! the truth every figure is checked against.

#[macro_use]
mod util;

use pagescope_core::format::Completeness;
use serde_json::Value;
use std::path::Path;
use util::trace::{methods, trace_unsupported};
use util::*;

/// Switches a swapfile on for the calling test (bind it for the whole
/// test), or skips the test saying why.
macro_rules! require_swap {
    () => {
        match Swapfile::on() {
            Ok(s) => s,
            Err(why) => skip!("swap", why),
        }
    };
}

/// Pages of pagetest's 64 MiB buffer.
const PAGES: u64 = 16384;

/// Pages per kB of smaps.
fn kb_per_page() -> u64 {
    rustix::param::page_size() as u64 / 1024
}

/// The range a `pageout` event names, and the pages of it that the
/// kernel holds in swap now; insists that most of what was asked went.
fn paged_out(pid: u32, ev: &Value) -> (u64, u64, Vec<u64>) {
    assert_eq!(ev["event"], "pageout", "{ev}");
    let (start, end) = (ev["start"].as_u64().unwrap(), ev["end"].as_u64().unwrap());
    let asked = ev["pages"].as_u64().unwrap();
    assert_eq!((end - start) / rustix::param::page_size() as u64, asked);
    let out = pages_in_swap(pid, start, end);
    assert!(
        out.len() as u64 * 100 >= asked * 95,
        "the kernel paged out {} of the {asked} pages asked",
        out.len()
    );
    (start, end, out)
}

/// The swap of `pid` by smaps_rollup, in pages.
fn rollup_swap(pid: u32) -> u64 {
    smaps_rollup(pid)["Swap"] / kb_per_page()
}

/// A held pagetest with the first quarter of its 64 MiB buffer paged
/// out: its swapped pages, its swap in smaps_rollup (the pages paged
/// out, nothing else), and a snapshot of it.
fn held_and_paged_out(dir: &Path) -> (Pagetest, Vec<u64>, u64, String) {
    let pt = Pagetest::start(
        &[],
        &[
            "--size",
            "64M",
            "--iterations",
            "1",
            "--pageout",
            "0.25",
            "--hold",
        ],
        "done",
    );
    assert_eq!(pt.pages(), PAGES);
    let ev = pt.lines.iter().find(|l| l["event"] == "pageout").unwrap();
    let (_, _, out) = paged_out(pt.pid(), ev);
    let swap = rollup_swap(pt.pid());
    assert_eq!(swap, out.len() as u64, "swap outside the paged-out range");
    let snap = temp_path(dir, "s.snap");
    snapshot_pid(pt.pid(), &snap);
    assert_eq!(
        rollup_swap(pt.pid()),
        swap,
        "swap changed during the snapshot"
    );
    (pt, out, swap, snap)
}

/// `swap_pages` of the processes view, live (from smaps_rollup) and from
/// a snapshot (counted from its pagemap entries), is the kernel's
/// `Swap`: the pages paged out.
#[test]
fn processes_view_counts_the_pages_in_swap() {
    let _serial = serial();
    let _swap = require_swap!();
    let dir = tempfile::tempdir().unwrap();
    let (pt, _, swap, snap) = held_and_paged_out(dir.path());
    let pid = pt.pid().to_string();
    assert!(swap > 0);
    let kb = kb_per_page() as f64;
    for input in [None, Some(snap.as_str())] {
        let mut args = vec!["report", "processes", "--pid", &pid, "--format", "json"];
        if let Some(i) = input {
            args.extend(["--input", i]);
        }
        let row = process_row(&report_json(&args), pt.pid());
        assert_eq!(row["swap_pages"], swap, "{input:?}: {row}");
        assert_eq!(row["smaps_swap_pages"], swap, "{input:?}: {row}");
        let rollup = smaps_rollup(pt.pid());
        assert_close(
            "rss_pages",
            row["rss_pages"].as_f64().unwrap(),
            rollup["Rss"] as f64 / kb,
            1.0,
        );
    }
}

/// Shared memory in swap has no swap entry in pagemap (its page table
/// entry is empty): `swap_pages` is still the kernel's `Swap`, from a
/// snapshot and live with the page classes (`--classes` reads pages).
#[test]
fn shared_memory_in_swap_is_counted() {
    let _serial = serial();
    let _swap = require_swap!();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(
        &[],
        &[
            "--size",
            "64M",
            "--mode",
            "shm",
            "--op",
            "write",
            "--iterations",
            "1",
            "--pageout",
            "0.5",
            "--hold",
        ],
        "done",
    );
    let swap = rollup_swap(pt.pid());
    assert!(
        swap >= PAGES / 2 * 95 / 100,
        "the kernel paged out {swap} of the {} shared pages asked",
        PAGES / 2
    );
    let snap = temp_path(dir.path(), "s.snap");
    snapshot_pid(pt.pid(), &snap);
    let pid = pt.pid().to_string();
    for args in [
        vec!["report", "processes", "--input", &snap],
        vec!["report", "processes", "--classes"],
    ] {
        let args = [args, vec!["--pid", &pid, "--format", "json"]].concat();
        let before = rollup_swap(pt.pid());
        let row = process_row(&report_json(&args), pt.pid());
        let after = rollup_swap(pt.pid());
        assert_eq!(row["source"], "pages", "{args:?}: {row}");
        // A page may come back from swap meanwhile (the kernel's own
        // readahead); the figure is the kernel's at the snapshot.
        let got = row["swap_pages"].as_u64().unwrap();
        assert!(got > 0, "{args:?}: {row}");
        let live = args.contains(&"--classes");
        let (lo, hi) = if live {
            (before.min(after), before.max(after))
        } else {
            (swap.min(before), swap.max(before))
        };
        assert!(lo <= got && got <= hi, "{args:?}: {got} not in {lo}..={hi}");
    }
}

/// `diff` of a snapshot before the pageout and one after: the process's
/// swap grew by the pages paged out, and its RSS, anonymous and heap
/// pages shrank by as many (the kernel's Rss before and after, within 2
/// pages).
#[test]
fn diff_shows_pages_going_to_swap() {
    let _serial = serial();
    let _swap = require_swap!();
    let dir = tempfile::tempdir().unwrap();
    let mut pt = Pagetest::start(
        &[],
        &[
            "--size",
            "64M",
            "--prefault",
            "--wait-stdin",
            "--iterations",
            "1",
            "--pageout",
            "0.25",
            "--hold",
        ],
        "ready",
    );
    let pid = pt.pid();
    let before = temp_path(dir.path(), "before.snap");
    snapshot_pid(pid, &before);
    let rss_before = smaps_rollup(pid)["Rss"] / kb_per_page();
    assert_eq!(rollup_swap(pid), 0);
    pt.go();
    let ev = pt.until("pageout");
    let (_, _, out) = paged_out(pid, &ev);
    pt.until("done");
    wait_asleep(pid as u64);
    let after = temp_path(dir.path(), "after.snap");
    snapshot_pid(pid, &after);
    let rollup = smaps_rollup(pid);
    let (rss_after, swap) = (
        rollup["Rss"] / kb_per_page(),
        rollup["Swap"] / kb_per_page(),
    );
    assert_eq!(swap, out.len() as u64);
    let v = report_json(&["diff", &before, &after, "--format", "json"]);
    let row = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == pid)
        .unwrap()
        .clone();
    assert_eq!(row["swap_pages_delta"], swap, "{row}");
    let rss = row["rss_pages_delta"].as_i64().unwrap();
    let truth = rss_after as i64 - rss_before as i64;
    assert!((rss - truth).abs() <= 2, "RSS {rss}, the kernel's {truth}");
    for key in ["anon_pages_delta", "heap_delta"] {
        let d = row[key].as_i64().unwrap();
        assert!((d + swap as i64).abs() <= 2, "{key} {d}, swapped {swap}");
    }
}

/// The pages view lists each page the snapshot's process has in swap, at
/// its address, with the swap type and offset of the kernel's pagemap
/// and no frame: exactly the pages paged out. A `--flags` filter, which
/// selects frames by their flags, leaves them out.
#[test]
fn pages_view_lists_the_pages_in_swap() {
    let _serial = serial();
    let _swap = require_swap!();
    let dir = tempfile::tempdir().unwrap();
    let (pt, out, _, snap) = held_and_paged_out(dir.path());
    let pid = pt.pid().to_string();
    let (start, end) = (
        pt.ready["start"].as_u64().unwrap(),
        pt.ready["end"].as_u64().unwrap(),
    );
    let ps = rustix::param::page_size() as u64;
    let entries = pagemap_entries(pt.pid(), start, end);
    let v = report_json(&[
        "report", "pages", "--input", &snap, "--pid", &pid, "--format", "json",
    ]);
    let rows = v["pages"].as_array().unwrap();
    let swapped: Vec<&Value> = rows
        .iter()
        .filter(|r| r["pagemap"].as_str().unwrap().contains('S'))
        .collect();
    let addrs: Vec<u64> = swapped
        .iter()
        .map(|r| r["vaddr"].as_u64().unwrap())
        .collect();
    assert_eq!(addrs, out, "the pages in swap, by address");
    for r in &swapped {
        let e = entries[((r["vaddr"].as_u64().unwrap() - start) / ps) as usize];
        assert_eq!(r["swap_type"], e & 0x1f, "{r}");
        assert_eq!(r["swap_offset"], (e & ((1 << 55) - 1)) >> 5, "{r}");
        for key in ["pfn", "phys_addr", "kpageflags", "count", "node"] {
            assert!(r[key].is_null(), "{key}: {r}");
        }
        assert_eq!(r["class"], "heap", "{r}");
    }
    // The rest of the buffer is resident, with no swap entry.
    let in_buffer = |r: &&Value| (start..end).contains(&r["vaddr"].as_u64().unwrap());
    let resident: Vec<&Value> = rows
        .iter()
        .filter(in_buffer)
        .filter(|r| r["pagemap"].as_str().unwrap().starts_with('P'))
        .collect();
    assert_eq!(resident.len() as u64 + out.len() as u64, PAGES);
    assert!(resident.iter().all(|r| r["swap_type"].is_null()));
    // CSV says the same.
    let csv = run_ok(&[
        "report", "pages", "--input", &snap, "--pid", &pid, "--format", "csv",
    ]);
    let text = String::from_utf8(csv.stdout).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|&h| h == name).unwrap();
    let (pagemap, offset) = (col("pagemap"), col("swap_offset"));
    let csv_swapped: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|c| c[pagemap].contains('S'))
        .collect();
    assert_eq!(csv_swapped.len(), out.len());
    assert!(csv_swapped.iter().all(|c| !c[offset].is_empty()));
    // Frames only under a flag filter.
    let anon = report_json(&[
        "report",
        "pages",
        "--input",
        &snap,
        "--pid",
        &pid,
        "--flags",
        "anonymous",
        "--format",
        "json",
    ]);
    let rows = anon["pages"].as_array().unwrap();
    assert!(rows
        .iter()
        .all(|r| !r["pagemap"].as_str().unwrap().contains('S')));
    assert_eq!(
        rows.iter().filter(in_buffer).count() as u64 + out.len() as u64,
        PAGES
    );
}

/// `pagescope trace --pid PID`, in place (every process attached), and
/// killed when dropped if it still runs.
struct Tracer {
    child: std::process::Child,
    /// What it said until it was in place.
    said: String,
    /// What it says after (read all along, so that it never blocks on a
    /// full pipe).
    rest: Option<std::thread::JoinHandle<String>>,
}

impl Tracer {
    fn attach(pid: u32, evict: &str, trace: &str) -> Tracer {
        use std::io::{BufRead, BufReader, Read};
        let mut child = std::process::Command::new(pagescope_bin())
            .args(["trace", "--evict", evict, "-o", trace, "--pid"])
            .arg(pid.to_string())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut said = String::new();
        loop {
            let mut line = String::new();
            let n = err.read_line(&mut line).unwrap();
            said.push_str(&line);
            if n == 0 {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the tracer ended before it was in place: {said}");
            }
            if line.starts_with("tracing process") {
                break;
            }
        }
        let rest = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Tracer {
            child,
            said,
            rest: Some(rest),
        }
    }

    /// Waits for the tracer and insists that it succeeded.
    fn wait_ok(&mut self) {
        let status = self.child.wait().unwrap();
        let rest = self
            .rest
            .take()
            .map(|r| r.join().unwrap())
            .unwrap_or_default();
        assert!(status.success(), "tracer: {status} {}{rest}", self.said);
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The references of a trace file, and its header's start time.
fn trace_refs(path: &str) -> (Vec<pagescope_core::trace::Ref>, u64) {
    use pagescope_core::format::{read_trace, TraceVisitor};
    use pagescope_core::trace::{Ref, TraceHeader};
    #[derive(Default)]
    struct Refs {
        start: u64,
        refs: Vec<Ref>,
    }
    impl TraceVisitor for Refs {
        fn header(&mut self, h: &TraceHeader) -> pagescope_core::Result<()> {
            self.start = h.start_monotonic_ns;
            Ok(())
        }
        fn refs(&mut self, refs: &[Ref]) -> pagescope_core::Result<()> {
            self.refs.extend_from_slice(refs);
            Ok(())
        }
    }
    let mut v = Refs::default();
    let f = std::fs::File::open(path).unwrap();
    let done = read_trace(std::io::BufReader::new(f), Path::new(path), &mut v).unwrap();
    assert_eq!(done, Completeness::Complete);
    (v.refs, v.start)
}

/// CLOCK_MONOTONIC now, in nanoseconds (pagetest's clock).
fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// `trace --pid` attached (evicting by `evict`) to a pagetest that has
/// the first quarter of its buffer in swap, and reads its buffer twice
/// more: each pass references every page of the buffer exactly once, in
/// ascending order (the pages in swap move out with the others and fault
/// like them), and the program reads what it wrote (its checksum).
fn attach_after_pageout(evict: &str) {
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let mut pt = Pagetest::start(
        &[],
        &[
            "--size",
            "64M",
            "--op",
            "read",
            "--iterations",
            "3",
            "--sleep",
            "3s",
            "--pageout",
            "0.25",
        ],
        "pageout",
    );
    let pid = pt.pid();
    let ev = pt.lines.last().unwrap().clone();
    let (start, end, out) = paged_out(pid, &ev);
    assert!(!out.is_empty());
    let (start, end) = (
        start.min(pt.ready["start"].as_u64().unwrap()),
        end.max(pt.ready["end"].as_u64().unwrap()),
    );
    let mut tracer = Tracer::attach(pid, evict, &trace);
    let in_place = now_ns();
    let passes = [pt.until("iteration"), pt.until("iteration")];
    assert!(
        passes[0]["start_ns"].as_u64().unwrap() > in_place,
        "{evict}: the tracer took more than 3 s to attach"
    );
    let done = pt.until("done");
    assert_eq!(
        done["checksum"],
        3 * PAGES,
        "{evict}: pages lost their data"
    );
    assert!(pt.child.wait().unwrap().success());
    tracer.wait_ok();
    let (refs, base) = trace_refs(&trace);
    let in_buf: Vec<_> = refs
        .iter()
        .filter(|r| r.addr >= start && r.addr < end)
        .collect();
    assert_eq!(
        in_buf.len() as u64,
        2 * PAGES,
        "{evict}: references to the buffer"
    );
    for it in &passes {
        let (t0, t1) = (
            it["start_ns"].as_u64().unwrap() - base,
            it["end_ns"].as_u64().unwrap() - base,
        );
        let pass: Vec<u64> = in_buf
            .iter()
            .filter(|r| r.time_ns >= t0 && r.time_ns <= t1)
            .map(|r| r.addr)
            .collect();
        assert_eq!(pass.len() as u64, PAGES, "{evict}: pass {}", it["index"]);
        assert!(
            pass.windows(2).all(|w| w[0] + 4096 == w[1]) && pass[0] == start,
            "{evict}: pass {} is not every page in ascending order",
            it["index"]
        );
    }
}

#[test]
fn trace_attached_counts_the_pages_in_swap() {
    require_trace!();
    let _serial = serial();
    let _swap = require_swap!();
    for evict in methods() {
        attach_after_pageout(evict);
    }
}

/// The tracer SIGKILLed while it holds the pages of a program that had a
/// quarter of its buffer in swap (moved out as swap entries, or read in
/// and copied): `trace --release` puts every page back, and the
/// program's next pass reads what it wrote.
#[test]
fn release_after_a_kill_puts_back_the_pages_in_swap() {
    require_trace!();
    let _serial = serial();
    let _swap = require_swap!();
    for evict in methods() {
        let dir = tempfile::tempdir().unwrap();
        let trace = temp_path(dir.path(), "t.trace");
        let mut pt = Pagetest::start(
            &[],
            &[
                "--size",
                "64M",
                "--op",
                "read",
                "--iterations",
                "2",
                "--sleep",
                "4s",
                "--pageout",
                "0.25",
            ],
            "pageout",
        );
        let pid = pt.pid();
        let ev = pt.lines.last().unwrap().clone();
        let (_, _, out) = paged_out(pid, &ev);
        assert!(!out.is_empty());
        let mut tracer = Tracer::attach(pid, evict, &trace);
        // Every page of the buffer is away, those in swap too.
        let (start, end) = (
            pt.ready["start"].as_u64().unwrap(),
            pt.ready["end"].as_u64().unwrap(),
        );
        let left = pagemap_entries(pid, start, end)
            .iter()
            .filter(|&&e| e != 0)
            .count();
        assert_eq!(left, 0, "{evict}: pages of the buffer left in place");
        let _ = tracer.child.kill();
        let _ = tracer.child.wait();
        run_ok(&["trace", "--release", &pid.to_string()]);
        let done = pt.until("done");
        assert_eq!(done["checksum"], 2 * PAGES, "{evict}: pages lost");
        assert!(pt.child.wait().unwrap().success());
    }
}

/// `record --backend fault` of a pagetest that pages out a quarter of its
/// buffer right after its first pass, before the boundary that ends the
/// pass's interval: the pages in swap were referenced (they faulted in),
/// and count in that interval as the others do; the next pass, in the
/// next interval, faults every page back, those in swap included. Each
/// pass is the buffer's pages exactly, and the program reads what it
/// wrote.
#[test]
fn fault_recording_counts_pages_that_went_to_swap() {
    require_trace!();
    let _serial = serial();
    let _swap = require_swap!();
    let dir = tempfile::tempdir().unwrap();
    let rec = temp_path(dir.path(), "f.rec");
    let mut pt = Pagetest::recorded(
        &["--backend", "fault", "--interval", "2s"],
        &rec,
        &[
            "--size",
            "64M",
            "--op",
            "read",
            "--iterations",
            "2",
            "--sleep",
            "2.5s",
            "--pageout",
            "0.25",
        ],
        "pageout",
    );
    let pid = pt.pid();
    let ev = pt.lines.last().unwrap().clone();
    // Paged out from the buffer, or moved on into the store inside the
    // program if a boundary came first: smaps counts both.
    let asked = ev["pages"].as_u64().unwrap();
    let swap = rollup_swap(pid);
    assert!(
        swap * 100 >= asked * 95,
        "the kernel paged out {swap} of the {asked} pages asked"
    );
    let second = pt.until("iteration");
    let done = pt.until("done");
    assert_eq!(done["checksum"], 2 * PAGES, "pages lost their data");
    let r = pt.recording(&rec);
    // The fill, the first pass and the pageout in the first interval, the
    // second pass after it.
    let first_end = r.header().start_monotonic_ns + r.intervals[0].end_ns;
    assert!(
        ev["time_ns"].as_u64().unwrap() < first_end,
        "the first pass and its pageout took more than the first interval"
    );
    assert!(
        second["start_ns"].as_u64().unwrap() > first_end,
        "the second pass began in the first interval"
    );
    let rows = temporal(&rec, Some(pt.buffer()));
    let user = |r: &Value| r["user_pages"].as_u64().unwrap();
    assert_eq!(user(&rows[0]), PAGES, "the first pass: {rows:?}");
    let rest: u64 = rows[1..].iter().map(user).sum();
    assert_eq!(rest, PAGES, "the second pass: {rows:?}");
}

/// Sums of runs of consecutive intervals holding more than `quiet`
/// pages: one per pass over the buffer (a pass may straddle boundaries).
fn spikes(rows: &[Value], quiet: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut inside = false;
    for r in rows {
        let user = r["user_pages"].as_u64().unwrap();
        if user > quiet {
            if !inside {
                out.push(0);
            }
            *out.last_mut().unwrap() += user;
        }
        inside = user > quiet;
    }
    out
}

/// `record --backend refs` of a pagetest that pages out a quarter of its
/// buffer right after its first pass and then reads the whole buffer
/// three more times. The `refs` backend counts the pages in RAM whose
/// reference bits are set at a boundary, and a page's bits go with it to
/// swap: the first pass counts the buffer less the pages paged out
/// before the boundary that ended its interval (all of them when no
/// boundary came between the pass's start and the pageout), and the
/// header says so. Pages read back from swap count as referenced: each
/// later pass is the whole buffer.
#[test]
fn refs_recording_counts_pages_read_back_from_swap() {
    let _serial = serial();
    let _swap = require_swap!();
    let dir = tempfile::tempdir().unwrap();
    let rec = temp_path(dir.path(), "r.rec");
    let mut pt = Pagetest::recorded(
        &["--backend", "refs", "--interval", "100ms"],
        &rec,
        &[
            "--size",
            "64M",
            "--iterations",
            "4",
            "--sleep",
            "1s",
            "--delay",
            "1s",
            "--pageout",
            "0.25",
        ],
        "pageout",
    );
    let ev = pt.lines.last().unwrap().clone();
    let (_, _, out) = paged_out(pt.pid(), &ev);
    let out = out.len() as u64;
    pt.until("done");
    let r = pt.recording(&rec);
    assert!(
        r.header()
            .notes
            .iter()
            .any(|n| n.contains("swap") && n.contains("not counted")),
        "no note on swap: {:?}",
        r.header().notes
    );
    let rows = temporal(&rec, Some(pt.buffer()));
    let found = spikes(&rows, 64);
    assert_eq!(found.len(), 4, "{found:?}");
    // A boundary between the first pass's start and the pageout?
    let base = r.header().start_monotonic_ns;
    let first = pt.lines.iter().find(|l| l["event"] == "iteration").unwrap();
    let (t0, t1) = (
        first["start_ns"].as_u64().unwrap() - base,
        ev["time_ns"].as_u64().unwrap() - base,
    );
    let cut = r.intervals.iter().any(|i| i.end_ns > t0 && i.end_ns < t1);
    let tol = PAGES / 100;
    if cut {
        assert!(
            found[0] + out + tol >= PAGES && found[0] <= PAGES + tol,
            "first pass {}, paged out {out}",
            found[0]
        );
    } else {
        assert!(
            found[0].abs_diff(PAGES - out) <= tol,
            "first pass {}, the buffer less the {out} pages paged out",
            found[0]
        );
    }
    for (i, &s) in found.iter().enumerate().skip(1) {
        assert!(s.abs_diff(PAGES) <= tol, "pass {i}: {s} pages");
    }
}

/// A python program that maps 64 pages, writes them, installs guard
/// regions (`MADV_GUARD_INSTALL`) on the first 16, prints its pid, the
/// address and madvise's errno, and waits for its stdin to close.
const GUARDS: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
ps = os.sysconf("SC_PAGE_SIZE")
p = libc.mmap(None, 64 * ps, 3, 0x22, -1, 0)
ctypes.memset(p, 1, 64 * ps)
err = 0 if libc.madvise(p, 16 * ps, 102) == 0 else ctypes.get_errno()
print(os.getpid(), p, err, flush=True)
sys.stdin.read()
"#;

/// Guard regions (`MADV_GUARD_INSTALL`, Linux 6.13) are marked swapped in
/// pagemap (bit 62, with bit 58), though nothing is in swap: a
/// snapshot's `swap_pages` counts the pages in swap only, as smaps'
/// `Swap` does (here none), and the pages view lists no guard as a page
/// in swap.
#[test]
fn guard_regions_are_not_swap() {
    use std::io::BufRead;
    let _serial = serial();
    let child = std::process::Command::new("python3")
        .args(["-c", GUARDS])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        skip!("python3", "python3 is not installed");
    };
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let f: Vec<u64> = line
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    let (pid, addr, err) = (f[0] as u32, f[1], f[2]);
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _child = Kill(child);
    if err == libc::EINVAL as u64 {
        skip!(
            "guard-regions",
            "this kernel has no MADV_GUARD_INSTALL (Linux 6.13)"
        );
    }
    assert_eq!(err, 0, "madvise(MADV_GUARD_INSTALL)");
    let ps = rustix::param::page_size() as u64;
    let entries = pagemap_entries(pid, addr, addr + 64 * ps);
    let guards = entries
        .iter()
        .filter(|&&e| e >> 62 & 1 == 1 && e >> 58 & 1 == 1);
    assert_eq!(guards.count(), 16, "pagemap shows the guards swapped");
    let dir = tempfile::tempdir().unwrap();
    let snap = temp_path(dir.path(), "g.snap");
    snapshot_pid(pid, &snap);
    let swap = rollup_swap(pid);
    let pid_arg = pid.to_string();
    let row = process_row(
        &report_json(&[
            "report",
            "processes",
            "--input",
            &snap,
            "--pid",
            &pid_arg,
            "--format",
            "json",
        ]),
        pid,
    );
    assert_eq!(row["swap_pages"], swap, "{row}");
    let pages = report_json(&[
        "report", "pages", "--input", &snap, "--pid", &pid_arg, "--format", "json",
    ]);
    let swapped = pages["pages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["pagemap"].as_str().unwrap().contains('S'))
        .count() as u64;
    assert_eq!(swapped, swap, "pages listed as in swap");
}

/// A large, mostly empty VMA (pagetest's 4 MiB buffer in the middle of a
/// 16 GiB `MAP_NORESERVE` reservation, a quarter of it paged out), which
/// the snapshot reads only where `PAGEMAP_SCAN` finds pages: its pages in
/// the snapshot are exactly the non-empty entries of a read of the whole
/// VMA's pagemap, each with the frame or swap entry the kernel gives, and
/// the snapshot says nothing was read whole (this kernel has the scan).
#[test]
fn sparse_reservation_lists_the_pages_of_a_whole_read() {
    let _serial = serial();
    let _swap = require_swap!();
    let pt = Pagetest::start(
        &[],
        &[
            "--size",
            "4M",
            "--reserve",
            "16G",
            "--iterations",
            "1",
            "--pageout",
            "0.25",
            "--hold",
        ],
        "done",
    );
    let pid = pt.pid();
    let ev = pt.lines.iter().find(|l| l["event"] == "pageout").unwrap();
    let (_, _, out) = paged_out(pid, ev);
    let buffer = pt.ready["start"].as_u64().unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let (start, end) = maps
        .lines()
        .filter_map(|l| {
            let (s, e) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(s, 16).ok()?,
                u64::from_str_radix(e, 16).ok()?,
            ))
        })
        .find(|&(s, e)| (s..e).contains(&buffer))
        .unwrap();
    assert_eq!(end - start, 16 << 30, "the reservation is one VMA");
    let dir = tempfile::tempdir().unwrap();
    let snap = temp_path(dir.path(), "r.snap");
    snapshot_pid(pid, &snap);
    let ps = rustix::param::page_size() as u64;
    let entries = pagemap_entries(pid, start, end);
    let want: Vec<(u64, u64)> = entries
        .iter()
        .enumerate()
        .filter(|(_, &e)| e != 0)
        .map(|(i, &e)| (start + i as u64 * ps, e))
        .collect();
    assert_eq!(want.len() as u64, 1024, "the buffer's pages, and no other");
    let pid_arg = pid.to_string();
    let v = report_json(&[
        "report", "pages", "--input", &snap, "--pid", &pid_arg, "--format", "json",
    ]);
    let rows: Vec<&Value> = v["pages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| (start..end).contains(&r["vaddr"].as_u64().unwrap()))
        .collect();
    assert_eq!(rows.len(), want.len(), "pages of the reservation");
    let mut swapped = Vec::new();
    for (r, &(vaddr, e)) in rows.iter().zip(&want) {
        assert_eq!(r["vaddr"], vaddr, "{r}");
        if e >> 63 & 1 == 1 {
            assert_eq!(r["pfn"], e & ((1 << 55) - 1), "{r}");
        } else {
            assert_eq!(
                e >> 62 & 1,
                1,
                "an entry neither present nor swapped: {e:#x}"
            );
            assert_eq!(r["swap_type"], e & 0x1f, "{r}");
            assert_eq!(r["swap_offset"], (e & ((1 << 55) - 1)) >> 5, "{r}");
            swapped.push(vaddr);
        }
    }
    assert_eq!(swapped, out, "the pages in swap, by address");
    let header = report_json(&["report", "total", "--input", &snap, "--format", "json"]);
    assert!(
        !header.to_string().contains("PAGEMAP_SCAN"),
        "a VMA was read whole: {header}"
    );
}
