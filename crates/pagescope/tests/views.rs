//! The analyses of the 2005 suite on live workloads whose sharing is
//! known: pagetest's forked children, libc's .text counted independently,
//! smaps_rollup and smem as peers, and every view in every format.

#[macro_use]
mod util;

use object::{Object, ObjectSection, ObjectSegment, SectionFlags};
use serde_json::Value;
use std::collections::HashMap;
use std::process::Command;
use util::named::Named;
use util::*;

/// The map string of the VMA holding `addr`, cut to `[addr, addr + len)`.
fn map_of(vmas: &Value, addr: u64, pages: u64, page_size: u64) -> (Value, String) {
    let row = vmas["vmas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["start"].as_u64().unwrap() <= addr && addr < r["end"].as_u64().unwrap())
        .expect("a VMA holds the buffer")
        .clone();
    let skip = ((addr - row["start"].as_u64().unwrap()) / page_size) as usize;
    let map: String = row["map"]
        .as_str()
        .unwrap()
        .chars()
        .skip(skip)
        .take(pages as usize)
        .collect();
    (row, map)
}

#[test]
fn forked_children_share_the_buffer() {
    require_pfns!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(
        &[],
        &[
            "--size",
            "64M",
            "--mode",
            "anon",
            "--op",
            "write",
            "--fork",
            "2",
            "--child-writes",
            "16",
            "--hold",
        ],
        "done",
    );
    let forked = pt.lines.iter().find(|l| l["event"] == "forked").unwrap();
    let children: Vec<u64> = forked["pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    let snap = temp_path(dir.path(), "fork.snap");
    run_ok(&["snapshot", "-q", "-o", &snap]);
    let (start, pages) = (pt.ready["start"].as_u64().unwrap(), pt.pages());
    let ps = pt.ready["page_size"].as_u64().unwrap();

    // The parent: 16 pages now shared with one child (the other wrote its
    // own copies), the rest with both: digit N+1 = 3.
    let parent = pt.pid().to_string();
    let vmas = report_json(&[
        "report", "vmas", "-i", &snap, "--pid", &parent, "-f", "json",
    ]);
    let (_, map) = map_of(&vmas, start, pages, ps);
    assert_eq!(map.len() as u64, pages);
    assert_eq!(&map[..16], "2222222222222222");
    assert!(
        map[16..].chars().all(|c| c == '3'),
        "parent map: {}",
        &map[..80]
    );

    // The writing child: its 16 copies are single-use.
    let child = children[0].to_string();
    let vmas = report_json(&["report", "vmas", "-i", &snap, "--pid", &child, "-f", "json"]);
    let (row, map) = map_of(&vmas, start, pages, ps);
    assert_eq!(&map[..16], "1111111111111111");
    assert!(map[16..].chars().all(|c| c == '3'));
    assert!(row["single"].as_u64().unwrap() >= 16);

    // processes counts the shared buffer as multi-use.
    let procs = report_json(&[
        "report",
        "processes",
        "-i",
        &snap,
        "--pid",
        &parent,
        "-f",
        "json",
    ]);
    let row = process_row(&procs, pt.pid());
    assert!(row["multi"].as_u64().unwrap() >= pages, "{row}");
    assert!(
        row["heap"].as_u64().unwrap() >= pages,
        "the anonymous buffer is heap: {row}"
    );

    // alerts names the child's buffer VMA: single and shared pages.
    let alerts = report_json(&["report", "alerts", "-i", &snap, "-f", "json"]);
    let alert = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| {
            a["pid"].as_u64() == Some(children[0])
                && a["start"].as_u64().unwrap() <= start
                && start < a["end"].as_u64().unwrap()
        })
        .expect("the writing child's buffer VMA is an alert");
    assert!(alert["single"].as_u64().unwrap() >= 16);
    assert!(alert["shared"].as_u64().unwrap() >= pages - 16);
    assert!(alert["hint"]
        .as_str()
        .unwrap()
        .contains("copy-on-write after fork"));
}

/// Resident pages of libc's executable sections in `pid`, from its maps,
/// its pagemap and libc's section headers: the truth for units and
/// unit-totals.
fn libc_text_pages(pid: u32, page_size: u64) -> (String, u64) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let libc: Vec<(u64, u64, u64, String)> = maps
        .lines()
        .filter(|l| l.contains("/libc.so"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (a, b) = f[0].split_once('-').unwrap();
            (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(b, 16).unwrap(),
                u64::from_str_radix(f[2], 16).unwrap(),
                f[5].to_string(),
            )
        })
        .collect();
    let path = libc[0].3.clone();
    let data = std::fs::read(&path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    // Load bias from the mapping of file offset 0 and the first segment.
    let first = libc.iter().find(|m| m.2 == 0).unwrap();
    let seg0 = file.segments().next().unwrap();
    let bias = first.0 - (seg0.address() - seg0.file_range().0);
    let mut text_pages = std::collections::BTreeSet::new();
    for s in file.sections() {
        let SectionFlags::Elf { sh_flags } = s.flags() else {
            continue;
        };
        if sh_flags & u64::from(object::elf::SHF_EXECINSTR) == 0 || s.size() == 0 {
            continue;
        }
        let lo = (bias + s.address()) / page_size;
        let hi = (bias + s.address() + s.size()).div_ceil(page_size);
        text_pages.extend(lo..hi);
    }
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(format!("/proc/{pid}/pagemap")).unwrap();
    let mut resident = 0;
    for vpn in &text_pages {
        let mut b = [0u8; 8];
        f.read_exact_at(&mut b, vpn * 8).unwrap();
        if u64::from_le_bytes(b) >> 63 == 1 {
            resident += 1;
        }
    }
    (path, resident)
}

#[test]
fn libc_text_across_processes_matches_pagemap_and_elf_sections() {
    require_pfns!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let a = Pagetest::start(&[], &["--size", "4M", "--hold"], "done");
    let b = Pagetest::start(
        &[],
        &[
            "--size",
            "4M",
            "--mode",
            "file",
            "--hold",
            "--dir",
            dir.path().to_str().unwrap(),
        ],
        "done",
    );
    let ps = a.ready["page_size"].as_u64().unwrap();
    let snap = temp_path(dir.path(), "libc.snap");
    let (pa, pb) = (a.pid().to_string(), b.pid().to_string());
    run_ok(&["snapshot", "-q", "--pid", &pa, "--pid", &pb, "-o", &snap]);
    let (path, ra) = libc_text_pages(a.pid(), ps);
    let (_, rb) = libc_text_pages(b.pid(), ps);
    assert!(ra > 0 && rb > 0);

    let totals = report_json(&["report", "unit-totals", "-i", &snap, "-f", "json"]);
    let row = totals["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["unit"] == path.as_str())
        .unwrap()
        .clone();
    assert_eq!(row["text_physical"].as_u64().unwrap(), ra + rb, "{row}");
    assert_eq!(row["processes"], 2);

    // units: the executable segment's resident pages summed over processes.
    let units = report_json(&["report", "units", "-i", &snap, "-f", "json"]);
    let seg = units["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["unit"] == path.as_str() && r["perms"] == "r-x")
        .unwrap()
        .clone();
    assert_eq!(seg["resident_sum"].as_u64().unwrap(), ra + rb, "{seg}");
    assert_eq!(seg["processes"], 2);
    let map = seg["map"].as_str().unwrap();
    assert_eq!(map.len() as u64, seg["virtual_pages"].as_u64().unwrap());
    assert_eq!(
        map.chars()
            .map(|c| c.to_digit(10).unwrap_or(0) as u64)
            .sum::<u64>(),
        ra + rb
    );
}

/// smaps_rollup of a process in kB, or None if it is gone. `Referenced`
/// is left out: it moves whenever anything clears accessed bits (page
/// reclaim's aging, a DAMON paddr monitor sampling the process's pages)
/// while the process's memory holds perfectly still.
fn rollup(pid: u64) -> Option<HashMap<String, u64>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let m: HashMap<String, u64> = text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.to_string(), v.split_whitespace().next()?.parse().ok()?))
        })
        .filter(|(k, _)| k != "Referenced")
        .collect();
    (!m.is_empty()).then_some(m)
}

#[test]
fn every_process_agrees_with_smaps_rollup_and_smem() {
    require_pfns!();
    if Command::new("smem").arg("--help").output().is_err() {
        skip!("smem", "smem is not installed (apt-get install smem)");
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    // Two workloads of our own, so that at least two processes hold
    // still even on a machine with nothing else running.
    let _a = Pagetest::start(&[], &["--size", "32M", "--hold"], "done");
    let _b = Pagetest::start(&[], &["--size", "8M", "--mode", "shm", "--hold"], "done");
    // A process on the machine that maps what one of ours maps (libc, the
    // pagetest binary) for a moment moves its USS by a page; on a quiet
    // machine a second try finds two that held still.
    let mut last = Vec::new();
    for _attempt in 0..3 {
        // The kernel's figures before and after; only processes whose figures
        // did not move meanwhile are compared (shells and the test harness
        // fork and exit around us).
        let pids: Vec<u64> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        let before: HashMap<u64, HashMap<String, u64>> =
            pids.iter().filter_map(|&p| Some((p, rollup(p)?))).collect();
        let snap = temp_path(dir.path(), "all.snap");
        run_ok(&["snapshot", "-q", "-o", &snap]);
        // A second snapshot: a process whose figures differ between the two
        // was changing (forking, allocating) while it was read.
        let snap2 = temp_path(dir.path(), "all2.snap");
        run_ok(&["snapshot", "-q", "-o", &snap2]);
        let smem = Command::new("smem")
            .args(["-c", "pid rss pss uss swap", "-H"])
            .output()
            .unwrap();
        assert!(smem.status.success());
        let after: HashMap<u64, HashMap<String, u64>> =
            pids.iter().filter_map(|&p| Some((p, rollup(p)?))).collect();
        let smem: HashMap<u64, Vec<u64>> = String::from_utf8_lossy(&smem.stdout)
            .lines()
            .filter_map(|l| {
                let v: Vec<u64> = l
                    .split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect();
                (v.len() == 5).then(|| (v[0], v[1..].to_vec()))
            })
            .collect();
        let report = report_json(&["report", "processes", "-i", &snap, "-f", "json"]);
        let second = report_json(&["report", "processes", "-i", &snap2, "-f", "json"]);
        // Forking shares a process's private pages (USS drops); allocating
        // moves RSS. PSS is left out: it moves with every process that maps
        // libc, the readers included.
        let figures = |r: &Value| {
            [
                "rss_pages",
                "uss_pages",
                "smaps_rss_pages",
                "smaps_uss_pages",
            ]
            .map(|k| r[k].as_f64().unwrap_or(-1.0))
        };
        let steady: HashMap<u64, [f64; 4]> = second["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["pid"].as_u64().unwrap(), figures(r)))
            .collect();
        let kb = report["page_size"].as_f64().unwrap() / 1024.0;
        // This test's ancestors (the harness, cargo, a shell) fork around us
        // and share pages with their children while they live: skip them.
        let mut ancestors = vec![std::process::id() as u64];
        while let Some(ppid) =
            std::fs::read_to_string(format!("/proc/{}/stat", ancestors.last().unwrap()))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u64>().ok())
                })
                .filter(|&p| p > 1)
        {
            ancestors.push(ppid);
        }
        let mut compared = 0;
        let mut moved = Vec::new();
        for row in report["processes"].as_array().unwrap() {
            let pid = row["pid"].as_u64().unwrap();
            // pagescope's own snapshot process grows while it reads itself.
            // and this test's ancestors fork children (sharing their pages)
            // while they run.
            let own = row["cmdline"].as_str().unwrap().contains(&snap);
            if row["source"] != "pages" || own || ancestors.contains(&pid) {
                continue;
            }
            // A process whose memory changes while it is read (a compiler,
            // say) can't agree with any other reading; compare the ones that
            // held still from before the snapshot to after it, with the same
            // figures in both snapshots.
            // (PSS moves with every process that maps or unmaps what this one
            // shares, libc above all, so it is not a sign of change here; it is
            // compared with a tolerance below.)
            let (Some(b), Some(a)) = (before.get(&pid), after.get(&pid)) else {
                continue;
            };
            let keys: Vec<&String> = a
                .keys()
                .filter(|k| !k.starts_with("Pss") && a.get(*k) != b.get(*k))
                .collect();
            if !keys.is_empty() || steady.get(&pid) != Some(&figures(row)) {
                moved.push(format!(
                    "{pid} ({}): rollup {keys:?}, snapshots {:?} then {:?}",
                    row["comm"],
                    figures(row),
                    steady.get(&pid)
                ));
                continue;
            }
            let name = format!("pid {pid} ({})", row["comm"]);
            let f = |k: &str| row[k].as_f64().unwrap();
            // Against the kernel's smaps, read by the snapshot a moment before
            // the process's pages: every process, within 1% (or 8 pages: a
            // neighbour forking or exiting in between moves a small
            // process's PSS by a few pages; a shell forking commands moves
            // its own by just over 4).
            let same = |what: &str, ours: f64, theirs: f64| {
                assert!(
                    (ours - theirs).abs() <= (theirs * 0.01).max(8.0),
                    "{name} {what}: pagescope says {ours}, the kernel's smaps says {theirs}"
                );
            };
            same("rss", f("rss_pages"), f("smaps_rss_pages"));
            same("pss", f("pss_pages"), f("smaps_pss_pages"));
            same("uss", f("uss_pages"), f("smaps_uss_pages"));
            same("swap", f("swap_pages"), f("smaps_swap_pages"));
            // Against smaps_rollup and smem, read at other moments. Each
            // reader maps libc itself, which moves the PSS of every small
            // process sharing it by a few pages, so these allow 1% or 16
            // pages.
            let near = |what: &str, ours: f64, theirs: f64| {
                assert!(
                    (ours - theirs).abs() <= (theirs * 0.01).max(16.0),
                    "{name} {what}: pagescope says {ours}, the peer says {theirs}"
                );
            };
            near("rss vs smaps_rollup", f("rss_pages"), a["Rss"] as f64 / kb);
            near("pss vs smaps_rollup", f("pss_pages"), a["Pss"] as f64 / kb);
            near(
                "uss vs smaps_rollup",
                f("uss_pages"),
                (a["Private_Clean"] + a["Private_Dirty"]) as f64 / kb,
            );
            near(
                "swap vs smaps_rollup",
                f("swap_pages"),
                a["Swap"] as f64 / kb,
            );
            if let Some(s) = smem.get(&pid) {
                // smem prints kB: rss pss uss swap.
                near("rss vs smem", f("rss_pages"), s[0] as f64 / kb);
                near("pss vs smem", f("pss_pages"), s[1] as f64 / kb);
                near("uss vs smem", f("uss_pages"), s[2] as f64 / kb);
                near("swap vs smem", f("swap_pages"), s[3] as f64 / kb);
            }
            compared += 1;
        }
        if compared >= 2 {
            return;
        }
        last = moved;
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!(
        "fewer than 2 processes held still in 3 tries; the others moved:\n{}",
        last.join("\n")
    );
}

/// An SVG view as a picture: every text inside it (by the box
/// `pagescope_render::svg::text_box` gives it), and rsvg-convert draws it.
fn check_picture(view: &str, svg: &str) {
    let doc =
        roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("{view}: invalid SVG: {e}"));
    let root = doc.root_element();
    let num =
        |n: roxmltree::Node<'_, '_>, a: &str| -> f64 { n.attribute(a).unwrap().parse().unwrap() };
    let (w, h) = (num(root, "width"), num(root, "height"));
    assert_eq!(
        root.attribute("viewBox"),
        Some(format!("0 0 {w} {h}").as_str())
    );
    let texts: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .collect();
    assert!(texts.len() > 2, "{view}: no labels");
    for t in texts {
        let text = t.text().unwrap_or("");
        let b = pagescope_render::svg::text_box(
            num(t, "x"),
            num(t, "y"),
            num(t, "font-size"),
            t.attribute("text-anchor").unwrap_or("start"),
            text.chars().count(),
            t.attribute("transform")
                .is_some_and(|r| r.starts_with("rotate(-90 ")),
        );
        assert!(
            b[0] >= 0.0 && b[1] >= 0.0 && b[2] <= w && b[3] <= h,
            "{view}: {text:?} at {b:?} is outside the {w}x{h} picture"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = temp_path(dir.path(), "view.svg");
    std::fs::write(&path, svg).unwrap();
    let png = temp_path(dir.path(), "view.png");
    match Command::new("rsvg-convert")
        .args([&path, "-o", &png])
        .output()
    {
        Ok(out) => {
            assert!(out.status.success(), "{view}: {out:?}");
            assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
        }
        Err(_) => skip(
            "rsvg-convert",
            "rsvg-convert is not installed (apt-get install librsvg2-bin): SVG not rendered",
        ),
    }
}

/// The pictures of the live physical map and of a recording of
/// pagetest (refs backend: any kernel) fit their labels and render.
#[test]
fn physmap_and_recording_pictures_fit() {
    require_pfns!();
    let _serial = serial();
    let svg = run_ok(&["report", "physmap", "-f", "svg"]);
    let svg = String::from_utf8(svg.stdout).unwrap();
    check_picture("physmap", &svg);
    // Every class a colour of its own in the legend.
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let mut fills: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("width") == Some("14.00"))
        .filter_map(|n| n.attribute("fill"))
        .collect();
    fills.sort_unstable();
    fills.dedup();
    assert_eq!(fills.len(), 12, "{fills:?}");
    let dir = tempfile::tempdir().unwrap();
    let rec = temp_path(dir.path(), "r.rec");
    let pagetest = pagetest_bin();
    run_ok(&[
        "record",
        "-q",
        "--backend",
        "refs",
        "--interval",
        "100ms",
        "-o",
        &rec,
        "--",
        pagetest.to_str().unwrap(),
        "--size",
        "16M",
        "--iterations",
        "3",
        "--sleep",
        "100ms",
    ]);
    for view in ["temporal", "spatial", "heatmap", "processes"] {
        let out = run_ok(&["analyze", &rec, view, "-f", "svg"]);
        check_picture(view, std::str::from_utf8(&out.stdout).unwrap());
    }
}

/// The characters a terminal may act on, besides the table's own line
/// ends: C0 controls, DEL and C1 controls.
fn controls(line: &str) -> Vec<char> {
    line.chars().filter(|c| c.is_control()).collect()
}

/// A process named with terminal escapes (clear the screen, set the
/// title, bell), a newline, a tab, DEL and a C1 CSI: tables show each as
/// `?`, one row per process; JSON keeps the name as it is.
#[test]
fn terminal_escapes_in_names_reach_tables_as_question_marks() {
    let _serial = serial();
    let name = "\u{1b}[2J\u{1b}]0;p\u{7}\n\t\u{7f}\u{9b}";
    let named = Named::start(name);
    let pid = named.pid().to_string();
    let shown = "?[2J?]0;p?????";
    let out = run_ok(&["report", "processes", "--pid", &pid]);
    let text = String::from_utf8(out.stdout).unwrap();
    for line in text.lines() {
        assert!(controls(line).is_empty(), "{line:?} in\n{text}");
    }
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(pid.as_str()))
        .collect();
    assert_eq!(rows.len(), 1, "{text}");
    assert!(rows[0].contains(shown), "{text}");
    // vmas: the process's name and the path of its copy of sleep, in the
    // view's own text layout and in its tables.
    let out = run_ok(&["report", "vmas", "--pid", &pid]);
    let text = String::from_utf8(out.stdout).unwrap();
    for line in text.lines() {
        assert!(controls(line).is_empty(), "{line:?} in\n{text}");
    }
    assert!(
        text.lines().any(|l| l == format!("{shown} (pid {pid}):")),
        "{text}"
    );
    assert!(text.contains("/?[2J?]0;p?"), "no path of the copy: {text}");
    // JSON escapes it, and keeps it whole.
    let json = report_json(&["report", "processes", "--pid", &pid, "-f", "json"]);
    assert_eq!(process_row(&json, named.pid())["comm"], name);
}

/// A process named to show as another: a right-to-left override that
/// reverses what follows it ("x", then "gpj.sh" drawn backwards: it
/// reads "xhs.jpg") and a zero-width space. Tables show each as
/// `?`, so the name reads as the bytes it is; JSON keeps it whole.
#[test]
fn bidi_overrides_in_names_reach_tables_as_question_marks() {
    let _serial = serial();
    let name = "x\u{202e}gpj.sh\u{200b}";
    let named = Named::start(name);
    let pid = named.pid().to_string();
    let shown = "x?gpj.sh?";
    let out = run_ok(&["report", "processes", "--pid", &pid]);
    let text = String::from_utf8(out.stdout).unwrap();
    let row = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(pid.as_str()))
        .unwrap_or_else(|| panic!("no row of {pid}: {text}"));
    assert!(row.contains(&format!(" {shown} ")), "{row:?} in\n{text}");
    assert!(!text.contains(['\u{202e}', '\u{200b}']), "{text:?}");
    // One `?` for one character, and nothing else on the row that a
    // terminal would not draw.
    assert!(row.is_ascii(), "{row:?}");
    let json = report_json(&["report", "processes", "--pid", &pid, "-f", "json"]);
    assert_eq!(process_row(&json, named.pid())["comm"], name);
}

#[test]
fn every_view_renders_in_every_format() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(
        &[],
        &[
            "--size",
            "8M",
            "--fork",
            "1",
            "--child-writes",
            "2",
            "--hold",
        ],
        "done",
    );
    let pid = pt.pid().to_string();
    let snap = temp_path(dir.path(), "views.snap");
    run_ok(&["snapshot", "-q", "-o", &snap]);
    for view in [
        "processes",
        "vmas",
        "units",
        "unit-totals",
        "alerts",
        "total",
    ] {
        for format in ["table", "csv", "json", "svg"] {
            let out = run_ok(&["report", view, "-i", &snap, "--pid", &pid, "-f", format]);
            let text = String::from_utf8(out.stdout).unwrap();
            assert!(!text.trim().is_empty(), "{view} {format} is empty");
            match format {
                "json" => {
                    let v: Value = serde_json::from_str(&text).unwrap();
                    assert_eq!(v["view"], view);
                }
                "svg" => {
                    let doc = roxmltree::Document::parse(&text)
                        .unwrap_or_else(|e| panic!("{view}: invalid SVG: {e}"));
                    assert_eq!(doc.root_element().tag_name().name(), "svg");
                    let rects = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
                    assert!(rects > 1, "{view}: no bars");
                    check_picture(view, &text);
                }
                "csv" => assert!(text.lines().count() >= 2, "{view}: no CSV rows"),
                _ => {}
            }
        }
    }
    for format in ["table", "csv", "json", "svg"] {
        let out = run_ok(&["diff", &snap, &snap, "-f", format]);
        assert!(!out.stdout.is_empty(), "diff {format} is empty");
        if format == "svg" {
            check_picture("diff", std::str::from_utf8(&out.stdout).unwrap());
        }
    }
    // The processes picture shows pagetest, and unit-totals libc.
    let svg = String::from_utf8(run_ok(&["report", "processes", "-i", &snap, "-f", "svg"]).stdout)
        .unwrap();
    assert!(svg.contains("pagetest"));
    let svg =
        String::from_utf8(run_ok(&["report", "unit-totals", "-i", &snap, "-f", "svg"]).stdout)
            .unwrap();
    assert!(svg.contains("libc.so.6"));
}

#[test]
fn virtual_view_counts_mapped_pages() {
    require_pfns!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(&[], &["--size", "16M", "--hold"], "done");
    let pid = pt.pid().to_string();
    let snap = temp_path(dir.path(), "v.snap");
    run_ok(&["snapshot", "-q", "--pid", &pid, "-o", &snap]);
    let phys = process_row(
        &report_json(&["report", "processes", "-i", &snap, "-f", "json"]),
        pt.pid(),
    );
    let virt = process_row(
        &report_json(&[
            "report",
            "processes",
            "-i",
            &snap,
            "--virtual",
            "-f",
            "json",
        ]),
        pt.pid(),
    );
    // Virtual pages are the VMA sizes: smaps' Size summed.
    let size_kb: u64 = std::fs::read_to_string(format!("/proc/{}/smaps", pt.pid()))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("Size:"))
        .map(|v| {
            v.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(virt["total_pages"].as_u64().unwrap(), size_kb / 4);
    assert_eq!(
        phys["total_pages"].as_u64().unwrap(),
        phys["rss_pages"].as_u64().unwrap()
    );
    assert!(virt["heap"].as_u64().unwrap() >= pt.pages());
    assert!(virt["lib_text"].as_u64().unwrap() >= phys["lib_text"].as_u64().unwrap());
}

#[test]
fn diff_reports_known_growth_as_a_leak() {
    require_pfns!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut pt = Pagetest::start(
        &[],
        &["--size", "1M", "--grow", "4M", "--every", "1s", "--hold"],
        "done",
    );
    let ps = pt.ready["page_size"].as_u64().unwrap();
    let pid = pt.pid().to_string();
    // Snapshot just after a growth step, and again two steps later.
    let grown = |pt: &mut Pagetest| -> u64 {
        let v = pt.next_line();
        assert_eq!(v["event"], "grow");
        v["total_bytes"].as_u64().unwrap()
    };
    let t0 = grown(&mut pt);
    let old = temp_path(dir.path(), "old.snap");
    run_ok(&["snapshot", "-q", "--pid", &pid, "-o", &old]);
    let _ = grown(&mut pt);
    let t2 = grown(&mut pt);
    let new = temp_path(dir.path(), "new.snap");
    run_ok(&["snapshot", "-q", "--pid", &pid, "-o", &new]);
    let out = run_ok(&["diff", &old, &new, "--format", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected = (t2 - t0) / ps;
    let row = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == pt.pid())
        .unwrap()
        .clone();
    let anon = row["anon_pages_delta"].as_i64().unwrap();
    assert!(
        (anon - expected as i64).abs() <= 2,
        "anon grew {anon} pages, pagetest grew {expected} in 2 steps"
    );
    let rss = row["rss_pages_delta"].as_i64().unwrap();
    assert!((rss - expected as i64).abs() <= 2, "rss grew {rss}");
    assert_eq!(row["comm"], "pagetest");
    let leak = v["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == pt.pid())
        .unwrap();
    assert_eq!(leak["bytes"].as_u64().unwrap(), anon as u64 * ps);
    let rate = leak["bytes_per_second"].as_f64().unwrap();
    let secs = v["interval_seconds"].as_f64().unwrap();
    assert!(secs > 1.5 && secs < 4.0, "interval {secs}");
    assert!((rate - anon as f64 * ps as f64 / secs).abs() < 1.0 + rate * 0.01);
    // Given the other way round: the interval is negative, and no rate
    // is made of it.
    let out = run_ok(&["diff", &new, &old, "--format", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["interval_seconds"].as_f64().unwrap(), -secs);
    for leak in v["leaks"].as_array().unwrap() {
        assert!(leak["bytes_per_second"].is_null(), "{leak}");
    }
}

/// A snapshot file that ends inside a process's pages (a writer killed,
/// a disk full) gives that process's figures from its smaps, with a note,
/// never the part of its pages written; the machine's sums leave it out.
#[test]
fn a_file_cut_in_a_process_gives_its_smaps_figures() {
    require_pfns!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(&[], &["--size", "32M", "--hold"], "done");
    let pid = pt.pid().to_string();
    let full = temp_path(dir.path(), "full.snap");
    run_ok(&["snapshot", "-q", "--pid", &pid, "-o", &full]);
    let bytes = std::fs::read(&full).unwrap();
    let whole = |file: &str, view: &str| -> Value {
        let out = run_ok(&["report", view, "-i", file, "-f", "json"]);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let row = |v: &Value| -> Option<Value> {
        v["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["pid"] == pt.pid())
            .cloned()
    };
    let full_row = row(&whole(&full, "processes")).unwrap();
    let mut cut_in_pages = 0;
    for tenth in 1..10 {
        let cut = temp_path(dir.path(), &format!("cut{tenth}.snap"));
        std::fs::write(&cut, &bytes[..bytes.len() * tenth / 10]).unwrap();
        let out = run(&[], &["report", "processes", "-i", &cut, "-f", "json"]);
        if String::from_utf8_lossy(&out.stderr).contains("cut short before any data") {
            // Inside the system record, before any process.
            continue;
        }
        assert!(out.status.success(), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let Some(r) = row(&v) else { continue };
        cut_in_pages += 1;
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("the file ends in the pages of pid"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(r["source"], "smaps", "{r}");
        for (fig, smaps) in [
            ("rss_pages", "smaps_rss_pages"),
            ("uss_pages", "smaps_uss_pages"),
        ] {
            assert_eq!(r[fig], full_row[smaps], "{fig} at {tenth}/10: {r}");
        }
        assert_eq!(r["pss_pages"], full_row["smaps_pss_pages"], "{r}");
        let t = whole(&cut, "total");
        assert_eq!(t["user_pages"], 0, "{t}");
        assert_eq!(t["rss_sum_pages"], 0, "{t}");
        assert_eq!(t["processes_unread"], 1, "{t}");
        // Against the whole file, no growth is made up.
        let out = run_ok(&["diff", &cut, &full, "--format", "json"]);
        let d: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(d["leaks"].as_array().unwrap().is_empty(), "{d}");
    }
    assert!(
        cut_in_pages >= 5,
        "only {cut_in_pages} cuts fell in the pages"
    );
}

#[test]
fn pages_dump_matches_pagemap_and_filters_by_flags() {
    require_pfns!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let pt = Pagetest::start(&[], &["--size", "16M", "--hold"], "done");
    let pid = pt.pid().to_string();
    let (start, end) = (
        pt.ready["start"].as_u64().unwrap(),
        pt.ready["end"].as_u64().unwrap(),
    );
    let snap = temp_path(dir.path(), "pages.snap");
    run_ok(&["snapshot", "-q", "--pid", &pid, "-o", &snap]);
    let in_buffer = |v: &Value| -> Vec<Value> {
        v["pages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| (start..end).contains(&r["vaddr"].as_u64().unwrap()))
            .cloned()
            .collect()
    };
    let anon = report_json(&[
        "report",
        "pages",
        "-i",
        &snap,
        "--pid",
        &pid,
        "--flags",
        "anonymous",
        "-f",
        "json",
    ]);
    let rows = in_buffer(&anon);
    assert_eq!(rows.len() as u64, pt.pages());
    // Each frame is the one the kernel's pagemap gives for that address.
    use std::os::unix::fs::FileExt;
    let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap")).unwrap();
    for r in rows.iter().step_by(997) {
        let mut b = [0u8; 8];
        pagemap
            .read_exact_at(&mut b, r["vaddr"].as_u64().unwrap() / 4096 * 8)
            .unwrap();
        assert_eq!(
            r["pfn"].as_u64().unwrap(),
            u64::from_le_bytes(b) & ((1 << 55) - 1)
        );
        assert_eq!(r["count"], 1);
        assert_eq!(r["class"], "heap");
        assert!(r["kpageflags"].as_str().unwrap().contains('a'));
    }
    let not_anon = report_json(&[
        "report",
        "pages",
        "-i",
        &snap,
        "--pid",
        &pid,
        "--flags",
        "~anonymous",
        "-f",
        "json",
    ]);
    assert!(in_buffer(&not_anon).is_empty());
    assert!(
        !not_anon["pages"].as_array().unwrap().is_empty(),
        "the binary's own file pages"
    );
    let out = run(
        &[],
        &["report", "pages", "-i", &snap, "--flags", "nonsense"],
    );
    assert_eq!(out.status.code(), Some(2));
}

/// Free frames by the kernel's own count: the sum of the zones'
/// `nr_free_pages` in /proc/zoneinfo (the frames in the buddy allocator).
fn zone_free_pages() -> u64 {
    std::fs::read_to_string("/proc/zoneinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nr_free_pages "))
        .map(|v| v.trim().parse::<u64>().unwrap())
        .sum()
}

/// Frames held by slabs, as `/proc/slabinfo` counts them: each cache's
/// slabs times its pages per slab. (meminfo's `Slab` is larger: it also
/// counts large `kmalloc` allocations, which come from the page allocator
/// and are not slab frames.)
fn slabinfo_pages() -> u64 {
    std::fs::read_to_string("/proc/slabinfo")
        .expect("/proc/slabinfo (CONFIG_SLUB_DEBUG)")
        .lines()
        .skip(2)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // name active_objs num_objs objsize objperslab pagesperslab
            // : tunables limit batchcount sharedfactor
            // : slabdata active_slabs num_slabs sharedavail
            f[5].parse::<u64>().unwrap() * f[14].parse::<u64>().unwrap()
        })
        .sum()
}

/// A /proc/meminfo figure in 4 KiB pages.
fn meminfo_pages(key: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.trim().trim_end_matches(" kB").parse::<u64>().unwrap() / 4)
        .unwrap_or_else(|| panic!("{key} in /proc/meminfo"))
}

/// Frames in transparent huge pages, as meminfo counts them.
fn meminfo_thp_pages() -> u64 {
    ["AnonHugePages", "ShmemHugePages", "FileHugePages"]
        .iter()
        .map(|k| meminfo_pages(k))
        .sum()
}

/// Page-cache frames outside huge pages, as meminfo counts them.
fn meminfo_small_cache_pages() -> u64 {
    (meminfo_pages("Cached") + meminfo_pages("Buffers"))
        .saturating_sub(meminfo_pages("ShmemHugePages") + meminfo_pages("FileHugePages"))
}

/// /proc/kpageflags over every System RAM frame, read directly: the
/// frames with each flag of `bits`.
fn kpageflags_count(bit: u32) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open("/proc/kpageflags").unwrap();
    let mut n = 0;
    for l in std::fs::read_to_string("/proc/iomem").unwrap().lines() {
        if l.starts_with(' ') || !l.ends_with(" : System RAM") {
            continue;
        }
        let (a, b) = l.split(' ').next().unwrap().split_once('-').unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap().div_ceil(4096),
            (u64::from_str_radix(b, 16).unwrap() + 1) / 4096,
        );
        let mut pfn = a;
        let mut buf = vec![0u8; 8 << 16];
        while pfn < b {
            let k = ((b - pfn) as usize).min(1 << 16);
            f.seek(SeekFrom::Start(pfn * 8)).unwrap();
            f.read_exact(&mut buf[..k * 8]).unwrap();
            n += buf[..k * 8]
                .chunks_exact(8)
                .filter(|w| u64::from_ne_bytes((*w).try_into().unwrap()) >> bit & 1 == 1)
                .count() as u64;
            pfn += k as u64;
        }
    }
    n
}

/// Checks `got` against a kernel figure read before and after it: within
/// `share` of the two, or `floor` frames, outside the range between them.
fn bracketed(what: &str, got: f64, before: u64, after: u64, share: f64, floor: f64) {
    let (lo, hi) = (before.min(after) as f64, before.max(after) as f64);
    let slack = ((lo + hi) / 2.0 * share).max(floor);
    assert!(
        got >= lo - slack && got <= hi + slack,
        "{what}: pagescope {got}, the kernel {before} before and {after} after"
    );
}

#[test]
fn physmap_agrees_with_the_kernels_counters() {
    require_pfns!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    // The buffer in transparent huge pages (THP is `madvise` or
    // `always` where the kernel has it).
    let pt = Pagetest::start(&[], &["--size", "64M", "--thp", "--hold"], "done");
    let pt_thp = smaps_rollup(pt.pid())
        .get("AnonHugePages")
        .copied()
        .unwrap_or(0)
        / 4;
    // The zero page, mapped by reading memory never written.
    let zero = pagescope_sys::mem::Region::anonymous(1 << 16).unwrap();
    pagescope_sys::mem::populate_read(zero.addr(), zero.len()).unwrap();
    let zero_pfn = pagemap_entries(
        std::process::id(),
        zero.addr() as u64,
        zero.addr() as u64 + 4096,
    )[0] & ((1 << 55) - 1);
    let snap = temp_path(dir.path(), "phys.snap");
    let free_before = zone_free_pages();
    let slab_before = slabinfo_pages();
    let thp_before = meminfo_thp_pages();
    let cache_before = meminfo_small_cache_pages();
    run_ok(&[
        "snapshot",
        "-q",
        "--physmap",
        "--pid",
        &pt.pid().to_string(),
        "-o",
        &snap,
    ]);
    let free_after = zone_free_pages();
    let slab_after = slabinfo_pages();
    let thp_after = meminfo_thp_pages();
    let cache_after = meminfo_small_cache_pages();
    let v = report_json(&["report", "physmap", "-i", &snap, "-f", "json"]);
    let f = |k: &str| v[k].as_f64().unwrap();
    // Every frame of every System RAM range, each in one class.
    let ram: u64 = std::fs::read_to_string("/proc/iomem")
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with(' ') && l.ends_with(" : System RAM"))
        .map(|l| {
            let (a, b) = l.split(' ').next().unwrap().split_once('-').unwrap();
            let (a, b) = (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(b, 16).unwrap(),
            );
            (b + 1) / 4096 - a.div_ceil(4096)
        })
        .sum();
    assert_eq!(v["frames"].as_u64().unwrap(), ram);
    let classes = [
        "free",
        "anon",
        "cache_mapped",
        "cache_unmapped",
        "slab",
        "page_table",
        "kernel_other",
        "reserved",
        "huge",
        "thp",
        "ksm",
        "zero",
    ];
    let sum: f64 = classes.iter().map(|c| f(&format!("{c}_pages"))).sum();
    assert_eq!(sum as u64, ram);
    // The buddy allocator's free frames, as the zones count them before
    // and after the walk (between the two where the machine's memory
    // moved meanwhile, within 3% of them where it held still).
    bracketed("free", f("free_pages"), free_before, free_after, 0.03, 0.0);
    // Free as meminfo counts it too: no note that they differ.
    let notes = v["notes"].to_string();
    assert!(!notes.contains("MemFree"), "{notes}");
    // Slab frames, as slabinfo counts them.
    bracketed("slab", f("slab_pages"), slab_before, slab_after, 0.05, 0.0);
    // Huge pages: meminfo's AnonHugePages, ShmemHugePages and
    // FileHugePages (5%, or two huge pages); large page-cache folios of
    // less than a PMD are page cache (Cached + Buffers without the huge
    // pages, 3%).
    bracketed("thp", f("thp_pages"), thp_before, thp_after, 0.05, 1024.0);
    let cache = f("cache_mapped_pages") + f("cache_unmapped_pages");
    bracketed("page cache", cache, cache_before, cache_after, 0.03, 0.0);
    // pagetest's 16384 anonymous frames are among the anonymous ones, and
    // those the kernel gave it in huge pages among the THP ones.
    assert!(f("anon_pages") + f("thp_pages") >= pt.pages() as f64);
    assert!(
        f("thp_pages") >= pt_thp as f64,
        "pagetest's {pt_thp} in THP"
    );
    // The zero page (and the huge zero page, if the kernel made one): as
    // many frames as kpageflags marks ZERO_PAGE (24), among them the one
    // this process maps.
    assert_eq!(kpageflags_count(24), f("zero_pages") as u64);
    let zero_block = v["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|b| b["start"].as_u64().unwrap() / 4096 <= zero_pfn)
        .unwrap();
    assert!(
        zero_block["zero_pages"].as_u64().unwrap() >= 1,
        "pfn {zero_pfn:#x}"
    );
    drop(zero);
    // The block table covers the same frames.
    let blocks: u64 = v["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            classes
                .iter()
                .map(|c| b[format!("{c}_pages")].as_u64().unwrap())
                .sum::<u64>()
        })
        .sum();
    assert_eq!(blocks, ram);

    // A snapshot without the physical map says how to get one.
    let plain = temp_path(dir.path(), "plain.snap");
    snapshot_pid(pt.pid(), &plain);
    let out = run(&[], &["report", "physmap", "-i", &plain]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--physmap"));
    // One cut short before its map (the first frame of type 5) says so,
    // rather than that it was taken without the map.
    let bytes = std::fs::read(&snap).unwrap();
    let mut at = 16;
    while u16::from_le_bytes([bytes[at], bytes[at + 1]]) != 5 {
        at += 16 + u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    }
    let cut = temp_path(dir.path(), "cut.snap");
    std::fs::write(&cut, &bytes[..at]).unwrap();
    let out = run(&[], &["report", "physmap", "-i", &cut]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("cut short before its map"), "{said}");
    // The picture renders.
    let svg = run_ok(&["report", "physmap", "-i", &snap, "-f", "svg"]);
    roxmltree::Document::parse(std::str::from_utf8(&svg.stdout).unwrap()).unwrap();
}

#[test]
fn physmap_blocks_are_bounded_and_named() {
    require_pfns!();
    // The highest RAM address, and so the smallest block size that sums
    // the machine in at most 64 Ki blocks.
    let top = std::fs::read_to_string("/proc/iomem")
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with(' ') && l.ends_with(" : System RAM"))
        .map(|l| {
            let end = l.split(' ').next().unwrap().split_once('-').unwrap().1;
            u64::from_str_radix(end, 16).unwrap() + 1
        })
        .max()
        .unwrap();
    let smallest = top.div_ceil(1 << 16).next_power_of_two().max(4096);
    let name = |b: u64| match b {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b >> 10),
    };
    if smallest > 4096 {
        // A block too small is a usage error that names the smallest.
        let out = run(&[], &["report", "physmap", "--block", "4k", "-f", "json"]);
        let msg = failed_with(&out, 2);
        let want = format!(
            "the smallest --block for this machine is {}",
            name(smallest).replace(' ', "")
        );
        assert!(msg.contains(&want), "{msg}");
        assert!(out.stdout.is_empty());
        // ...and is allowed, its size named in the header.
        let arg = name(smallest).replace(' ', "");
        let out = run_ok(&["report", "physmap", "--block", &arg]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("blocks of {}, 64 a line", name(smallest))),
            "{text}"
        );
    }
    let out = run_ok(&["report", "physmap", "--block", "2M"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("blocks of 2 MiB, 64 a line"));
}

/// Every figure of the processes report, by key.
const PROCESS_FIGURES: [&str; 22] = [
    "rss_pages",
    "pss_pages",
    "uss_pages",
    "swap_pages",
    "rw_pages",
    "rx_pages",
    "total_pages",
    "stack",
    "data",
    "text",
    "heap",
    "lib_bss",
    "lib_data",
    "lib_text",
    "other",
    "single",
    "multi",
    "anon_pages",
    "smaps_rss_pages",
    "smaps_pss_pages",
    "smaps_uss_pages",
    "smaps_swap_pages",
];

/// The processes report `v` gives every figure of the processes `unread`
/// as null, and those of `readable` as the kernel's smaps_rollup says.
fn check_processes_as_nobody(what: &str, v: &Value, unread: &[u32], readable: u32) {
    for &pid in unread {
        let row = process_row(v, pid);
        for key in PROCESS_FIGURES.iter().chain(&["source", "heuristic"]) {
            assert!(row[key].is_null(), "{what}: pid {pid} {key}: {row}");
        }
        assert!(row["threads"].as_u64().unwrap() >= 1, "{what}: {row}");
    }
    let row = process_row(v, readable);
    let rollup = smaps_rollup(readable);
    for (key, kernel) in [
        ("rss_pages", rollup["Rss"]),
        ("pss_pages", rollup["Pss"]),
        (
            "uss_pages",
            rollup["Private_Clean"] + rollup["Private_Dirty"],
        ),
        ("swap_pages", rollup["Swap"]),
        ("anon_pages", rollup["Anonymous"]),
        ("smaps_rss_pages", rollup["Rss"]),
    ] {
        let ours = row[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}: {key} of pid {readable}: {row}"));
        assert_close(&format!("{what}: {key}"), ours, kernel as f64 / 4.0, 1.0);
    }
}

/// As `nobody`, pagescope may not read the memory of root's processes:
/// every figure of theirs is null (never 0), live and from a snapshot
/// taken as nobody, in every view and format; the figures of nobody's
/// own process agree with smaps_rollup.
#[test]
fn as_nobody_what_could_not_be_read_is_null() {
    let Some(nobody) = as_nobody() else { return };
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let theirs = Pagetest::start(&[], &["--size", "16M", "--hold"], "done");
    let mine = Pagetest::start(&nobody, &["--size", "8M", "--hold"], "done");
    let (t, m) = (theirs.pid().to_string(), mine.pid().to_string());
    let unread = [1, theirs.pid()];
    let select = ["--pid", "1", "--pid", &t, "--pid", &m];

    // Live: the quick smaps_rollup read, and every page with --classes.
    let mut args = vec!["report", "processes", "-f", "json"];
    args.extend(select);
    let live: Value = serde_json::from_slice(&run_ok_as(&nobody, &args).stdout).unwrap();
    check_processes_as_nobody("live", &live, &unread, mine.pid());
    args.push("--classes");
    let live: Value = serde_json::from_slice(&run_ok_as(&nobody, &args).stdout).unwrap();
    check_processes_as_nobody("live --classes", &live, &unread, mine.pid());
    let row = process_row(&live, mine.pid());
    assert_eq!(row["total_pages"], row["rss_pages"], "{row}");
    assert!(row["single"].is_null(), "share counts need PFNs: {row}");

    // A snapshot taken as nobody, reported as nobody and as root.
    let snap = temp_path(dir.path(), "nobody.snap");
    let mut args = vec!["snapshot", "-q", "-o", &snap];
    args.extend(select);
    run_ok_as(&nobody, &args);
    for wrapper in [&nobody[..], &[]] {
        let v: Value = serde_json::from_slice(
            &run_ok_as(wrapper, &["report", "processes", "-i", &snap, "-f", "json"]).stdout,
        )
        .unwrap();
        check_processes_as_nobody("snapshot", &v, &unread, mine.pid());
        let row = process_row(&v, mine.pid());
        assert_eq!(row["total_pages"], row["rss_pages"], "{row}");
    }
    let v = report_json(&[
        "report",
        "processes",
        "-i",
        &snap,
        "--virtual",
        "-f",
        "json",
    ]);
    for key in PROCESS_FIGURES {
        assert!(
            process_row(&v, theirs.pid())[key].is_null(),
            "--virtual {key}"
        );
    }
    assert!(process_row(&v, mine.pid())["total_pages"].as_u64().unwrap() >= mine.pages());

    // The same row in CSV (empty cells) and in a table (`-`).
    let csv = String::from_utf8(
        run_ok(&["report", "processes", "-i", &snap, "--pid", &t, "-f", "csv"]).stdout,
    )
    .unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let cells: Vec<&str> = lines.next().unwrap().split(',').collect();
    for key in PROCESS_FIGURES {
        let i = header.iter().position(|h| *h == key).unwrap();
        assert_eq!(cells[i], "", "CSV {key}: {csv}");
    }
    let table =
        String::from_utf8(run_ok(&["report", "processes", "-i", &snap, "--pid", &t]).stdout)
            .unwrap();
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with(&t))
        .unwrap();
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&fields[2..5], ["-", "-", "-"], "RSS PSS USS: {table}");

    // vmas: no VMA is known of theirs, and its summary is null; mine has
    // its resident pages per VMA, but no share counts (PFNs are hidden).
    let v = report_json(&["report", "vmas", "-i", &snap, "--pid", &t, "-f", "json"]);
    assert!(v["vmas"].as_array().unwrap().is_empty(), "{v}");
    let summary = &v["processes"][0];
    assert_eq!(summary["pid"], theirs.pid());
    for key in ["rw_pages", "rx_pages", "heap", "single", "multi"] {
        assert!(summary[key].is_null(), "vmas summary {key}: {summary}");
    }
    let v = report_json(&["report", "vmas", "-i", &snap, "--pid", &m, "-f", "json"]);
    let vmas = v["vmas"].as_array().unwrap();
    let resident: u64 = vmas.iter().map(|r| r["resident"].as_u64().unwrap()).sum();
    assert_close(
        "vmas resident",
        resident as f64,
        smaps_rollup(mine.pid())["Rss"] as f64 / 4.0,
        1.0,
    );
    assert!(vmas
        .iter()
        .all(|r| r["single"].is_null() && r["shared"].is_null()));

    // total counts the processes it could not read, and says so.
    let v = report_json(&["report", "total", "-i", &snap, "-f", "json"]);
    assert_eq!(v["processes_unread"], 2, "{v}");
    assert!(v["user_pages"].is_null());

    // diff: theirs is unknown on both sides, not unchanged.
    let snap2 = temp_path(dir.path(), "nobody2.snap");
    let mut args = vec!["snapshot", "-q", "-o", &snap2];
    args.extend(select);
    run_ok_as(&nobody, &args);
    let v = report_json(&["diff", &snap, &snap2, "-f", "json"]);
    let row = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == theirs.pid())
        .unwrap_or_else(|| panic!("an unread process is not unchanged: {v}"));
    for key in [
        "rss_pages_delta",
        "pss_pages_delta",
        "anon_pages_delta",
        "heap_delta",
    ] {
        assert!(row[key].is_null(), "diff {key}: {row}");
    }
    assert!(
        !v["leaks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["pid"] == theirs.pid()),
        "{v}"
    );
}
