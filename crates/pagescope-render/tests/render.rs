//! The views and renderers on a fixture snapshot whose figures are known
//! by construction: every format is snapshot-tested with insta, and the
//! figures are asserted against the hand count.

use pagescope_core::analysis::total::Total;
use pagescope_core::analysis::usage::{Usage, UsageOptions};
use pagescope_core::kpageflags::KPageFlags;
use pagescope_core::model::*;
use pagescope_core::pagemap::PagemapEntry;
use pagescope_render::views::ProcessesOptions;
use pagescope_render::{renderer, views, Format, Report, Units};

const PS: u64 = 4096;

fn present(vaddr: u64, pfn: u64, count: u64, anon: bool, exclusive: bool) -> PageRecord {
    let mut e = (1u64 << 63) | pfn;
    if exclusive {
        e |= 1 << 56;
    }
    if !anon {
        e |= 1 << 61;
    }
    let flags = if anon {
        KPageFlags::ANON | KPageFlags::MMAP | KPageFlags::LRU | KPageFlags::SWAPBACKED
    } else {
        KPageFlags::MMAP | KPageFlags::LRU | KPageFlags::UPTODATE
    };
    PageRecord {
        vaddr,
        entry: PagemapEntry(e),
        phys: Some(PhysInfo {
            flags,
            count,
            memcg: 1,
            node: 0,
        }),
    }
}

fn vma(start: u64, pages: u64, perms: &str, path: &str) -> Vma {
    Vma {
        start,
        end: start + pages * PS,
        perms: perms.into(),
        path: path.into(),
        vm_flags: vec!["rd".into()],
        ..Vma::default()
    }
}

fn task(pid: u32, comm: &str) -> Task {
    Task {
        pid,
        tgid: pid,
        comm: comm.into(),
        cmdline: vec![format!("/usr/bin/{comm}"), "--flag".into()],
        threads: 1,
        start_time: 100 + pid as u64,
        ..Task::default()
    }
}

/// Two processes sharing two library pages (PFNs 500, 501); each has
/// private anonymous pages; one page is swapped; one maps the zero page.
/// A third process could not be read.
fn feed(sink: &mut dyn SnapshotSink) {
    let system = SystemInfo {
        kernel_release: "6.18.0-fixture".into(),
        hostname: "fixture".into(),
        page_size: PS,
        pfns_visible: true,
        memcg_visible: true,
        hugetlb_read: true,
        meminfo: vec![
            ("MemTotal".into(), 8 * 1024 * 1024),
            ("MemFree".into(), 4 * 1024 * 1024),
            ("Buffers".into(), 4096),
            ("Cached".into(), 1024 * 1024),
            ("Shmem".into(), 8192),
            ("AnonPages".into(), 40),
            ("SReclaimable".into(), 40960),
            ("SUnreclaim".into(), 20480),
            ("PageTables".into(), 400),
            ("KernelStack".into(), 800),
        ],
        ram_ranges: vec![(0x1000, 0x1_ffff_ffff)],
        ..SystemInfo::default()
    };
    sink.system(&system).unwrap();
    let lib = 0x7f00_0000_0000;
    let heap = 0x5500_0000_0000;
    // Process 10: 2 shared lib pages, 3 private anon pages, 1 swapped.
    sink.process(&ProcessRecord {
        task: task(10, "alpha"),
        vmas: vec![
            // Its smaps counts the page in swap too (in kB), as the
            // kernel's does: the swap figure is smaps's.
            Vma {
                smaps: SmapsCounters {
                    swap: PS / 1024,
                    ..SmapsCounters::default()
                },
                ..vma(heap, 8, "rw-p", "[heap]")
            },
            vma(lib, 4, "r-xp", "/usr/lib/libc.so.6"),
        ],
        rollup: None,
        unread: Unread::Nothing,
    })
    .unwrap();
    let mut pages = vec![
        present(heap, 1000, 1, true, true),
        present(heap + PS, 1001, 1, true, true),
        present(heap + 2 * PS, 1002, 1, true, true),
        PageRecord {
            vaddr: heap + 3 * PS,
            entry: PagemapEntry((1 << 62) | (7 << 5) | 1),
            phys: None,
        },
    ];
    pages.push(present(lib, 500, 2, false, false));
    pages.push(present(lib + PS, 501, 2, false, false));
    sink.pages(&PageChunk {
        pid: 10,
        start_time: 110,
        pages,
    })
    .unwrap();
    // Process 20: the same 2 lib pages, 1 private anon page, 1 zero page.
    sink.process(&ProcessRecord {
        task: task(20, "beta"),
        vmas: vec![
            vma(heap, 4, "rw-p", "[heap]"),
            vma(lib, 4, "r-xp", "/usr/lib/libc.so.6"),
        ],
        rollup: None,
        unread: Unread::Nothing,
    })
    .unwrap();
    let mut zero = present(heap + PS, 77, 0, false, false);
    zero.phys.as_mut().unwrap().flags = KPageFlags::ZERO_PAGE;
    let pages = vec![
        present(heap, 2000, 1, true, true),
        zero,
        present(lib, 500, 2, false, false),
        present(lib + PS, 501, 2, false, false),
    ];
    sink.pages(&PageChunk {
        pid: 20,
        start_time: 120,
        pages,
    })
    .unwrap();
    // A process whose memory could not be read.
    sink.process(&ProcessRecord {
        task: task(30, "gamma"),
        unread: Unread::Memory,
        ..ProcessRecord::default()
    })
    .unwrap();
    // A kernel thread.
    let mut k = task(2, "kthreadd");
    k.kernel_thread = true;
    sink.process(&ProcessRecord {
        task: k,
        ..ProcessRecord::default()
    })
    .unwrap();
    sink.finish(&Trailer {
        processes: 4,
        pages: 10,
        notes: vec![],
        duration_ns: 1,
    })
    .unwrap();
}

fn render(report: &Report, format: Format) -> String {
    let mut out = Vec::new();
    renderer(format, Some(100))
        .render(report, &mut out)
        .unwrap();
    String::from_utf8(out).unwrap()
}

/// The processes view with its kernel threads (`--all`), in pages (the
/// library's default units, `--units pages`).
fn processes_report() -> Report {
    let mut a = Usage::new(UsageOptions::default());
    feed(&mut a);
    views::processes(
        &a,
        ProcessesOptions {
            kernel_threads: true,
            ..ProcessesOptions::default()
        },
    )
}

fn total_report() -> Report {
    let mut a = Total::new();
    feed(&mut a);
    views::total(&a)
}

#[test]
fn processes_figures_match_the_hand_count() {
    let json = pagescope_render::json::to_value(&processes_report());
    let rows = json["processes"].as_array().unwrap();
    let alpha = rows.iter().find(|r| r["pid"] == 10).unwrap();
    // 3 anon + 2 shared lib pages resident; PSS 3 + 2 * 1/2; USS 3; 1 swapped.
    assert_eq!(alpha["rss_pages"], 5);
    assert_eq!(alpha["pss_pages"], 4.0);
    assert_eq!(alpha["uss_pages"], 3);
    assert_eq!(alpha["swap_pages"], 1);
    let beta = rows.iter().find(|r| r["pid"] == 20).unwrap();
    // The zero page is not resident memory (smaps' rule).
    assert_eq!(beta["rss_pages"], 3);
    assert_eq!(beta["pss_pages"], 2.0);
    assert_eq!(beta["uss_pages"], 1);
    assert_eq!(json["page_size"], 4096);
    // Largest PSS first, unknown last.
    assert_eq!(rows[0]["pid"], 10);
    assert_eq!(rows[3]["pid"], 30);
    // Nothing is known of gamma's memory: null, not 0.
    let gamma = &rows[3];
    for (key, v) in gamma.as_object().unwrap() {
        let known = ["pid", "comm", "threads", "kernel_thread", "cmdline"];
        assert_eq!(
            v.is_null(),
            !known.contains(&key.as_str()),
            "{key}: {gamma}"
        );
    }
    // The kernel thread has no memory, which is known: 0.
    let kthread = &rows[2];
    assert_eq!(kthread["rss_pages"], 0);
    assert_eq!(kthread["heap"], 0);
}

#[test]
fn unread_process_in_vmas_and_diff() {
    let mut a = Usage::new(UsageOptions {
        all_maps: true,
        ..UsageOptions::default()
    });
    feed(&mut a);
    let json = pagescope_render::json::to_value(&views::vmas(&a, &[30, 10]));
    assert!(json["vmas"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["pid"] == 10));
    let summary = json["processes"].as_array().unwrap();
    assert_eq!(summary[0]["pid"], 10);
    assert_eq!(summary[0]["heap"], 3);
    assert_eq!(summary[0]["single"], 3);
    assert_eq!(summary[1]["pid"], 30);
    assert!(summary[1]["heap"].is_null() && summary[1]["rw_pages"].is_null());
    let text = render(&views::vmas(&a, &[30]), Format::Table);
    assert!(text.contains("its memory could not be read"), "{text}");
    assert!(text.contains("gamma has - rw and - rx pages"), "{text}");

    // gamma is unknown on both sides of a diff: listed, its changes null.
    let mut t = Total::new();
    feed(&mut t);
    let diff = pagescope_render::json::to_value(&views::diff(&a, &a, &t, &t, false));
    let rows = diff["processes"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "the read processes did not change: {diff}");
    assert_eq!(rows[0]["pid"], 30);
    assert!(rows[0]["rss_pages_delta"].is_null() && rows[0]["heap_delta"].is_null());
    assert_eq!(rows[0]["status"], "both");
    // In a table the unknown figures are `-`; in CSV, empty.
    let table = render(&views::diff(&a, &a, &t, &t, false), Format::Table);
    assert!(
        table
            .lines()
            .any(|l| l.contains("gamma") && l.contains("  -  ")),
        "{table}"
    );
    let csv = render(&views::diff(&a, &a, &t, &t, false), Format::Csv);
    assert!(csv.contains("30,gamma,both,,,,,,,,,,"), "{csv}");
}

#[test]
fn total_figures_match_the_hand_count() {
    let json = pagescope_render::json::to_value(&total_report());
    // Distinct frames: 1000-1002, 2000 (anon), 500, 501 (file).
    assert_eq!(json["user_pages"], 6);
    assert_eq!(json["user_anon_pages"], 4);
    assert_eq!(json["user_file_pages"], 2);
    assert_eq!(json["rss_sum_pages"], 8);
    assert_eq!(json["processes"], 3);
    assert_eq!(json["processes_unread"], 1);
    assert_eq!(json["free_pages"], 1024 * 1024);
    assert_eq!(json["page_cache_pages"], 256 * 1024 + 1024);
    assert_eq!(json["kernel_slab_pages"], 15360);
}

#[test]
fn processes_in_every_format() {
    let r = processes_report();
    insta::assert_snapshot!("processes_table", render(&r, Format::Table));
    insta::assert_snapshot!("processes_csv", render(&r, Format::Csv));
    insta::assert_snapshot!("processes_json", render(&r, Format::Json));
}

#[test]
fn total_in_every_format() {
    let r = total_report();
    insta::assert_snapshot!("total_table", render(&r, Format::Table));
    insta::assert_snapshot!("total_csv", render(&r, Format::Csv));
    insta::assert_snapshot!("total_json", render(&r, Format::Json));
}

#[test]
fn table_fits_a_narrow_terminal() {
    let r = processes_report();
    let mut out = Vec::new();
    renderer(Format::Table, Some(80))
        .render(&r, &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "{line:?} is wider than 80");
    }
    // The least important columns went; the essential ones stayed.
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("PID"))
        .unwrap();
    for kept in ["PID", "COMM", "RSS", "PSS", "USS", "COMMAND"] {
        assert!(
            header.split_whitespace().any(|h| h == kept),
            "{kept} dropped: {header}"
        );
    }
    assert!(!header.contains("K-PSS"), "{header}");
    let row = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("PID"))
        .nth(1)
        .unwrap();
    assert!(row.trim_start().starts_with("10 "), "{row}");
}

/// What a person at a terminal sees: kernel threads left out (and
/// counted), sizes in KiB and MiB. Each size is the page count times the
/// page size: alpha's PSS of 4 pages is 16 KiB.
#[test]
fn processes_in_human_units() {
    let mut a = Usage::new(UsageOptions::default());
    feed(&mut a);
    let mut r = views::processes(&a, ProcessesOptions::default());
    r.units = Units::Human;
    let table = render(&r, Format::Table);
    insta::assert_snapshot!("processes_table_human", table);
    assert!(!table.contains("kthreadd"), "{table}");
    let alpha = table.lines().find(|l| l.contains("alpha")).unwrap();
    // RSS 5 pages, PSS 4, USS 3, swap 1.
    assert!(alpha.contains("20 KiB  16 KiB  12 KiB  4 KiB"), "{alpha}");
    r.units = Units::Bytes;
    let bytes = render(&r, Format::Table);
    let alpha = bytes.lines().find(|l| l.contains("alpha")).unwrap();
    assert!(alpha.contains("20480  16384  12288  4096"), "{alpha}");
    // JSON leaves the kernel thread out too, says how many it left out,
    // and gives the sizes in bytes beside the pages.
    let json = pagescope_render::json::to_value(&r);
    let rows = json["processes"].as_array().unwrap();
    assert!(rows.iter().all(|p| p["kernel_thread"] == false), "{json}");
    assert_eq!(json["kernel_threads_hidden"], 1);
    let alpha = rows.iter().find(|p| p["pid"] == 10).unwrap();
    assert_eq!(alpha["pss_pages"], 4.0);
    assert_eq!(alpha["pss_bytes"], 4 * PS);
    assert_eq!(alpha["rss_bytes"], 5 * PS);
    assert_eq!(alpha["uss_bytes"], 3 * PS);
    assert_eq!(alpha["swap_bytes"], PS);
    let gamma = rows.iter().find(|p| p["pid"] == 30).unwrap();
    assert!(gamma["rss_bytes"].is_null(), "{gamma}");
}

/// Totals in human units, and their byte twins in JSON and CSV.
#[test]
fn total_in_human_units() {
    let mut r = total_report();
    r.units = Units::Human;
    let table = render(&r, Format::Table);
    insta::assert_snapshot!("total_table_human", table);
    // MemTotal 8 GiB (in kB in the fixture's meminfo).
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("total RAM") && l.ends_with("  8.0 GiB")),
        "{table}"
    );
    let json = pagescope_render::json::to_value(&r);
    assert_eq!(json["mem_total_bytes"], 8u64 << 30);
    assert_eq!(json["user_bytes"], 6 * PS);
    let csv = render(&r, Format::Csv);
    assert!(csv.contains("\nfree_bytes,4294967296\n"), "{csv}");
}

#[test]
fn human_sizes() {
    use pagescope_render::report::human_size;
    assert_eq!(human_size(0.0), "0");
    assert_eq!(human_size(512.0), "512 B");
    assert_eq!(human_size(4096.0), "4 KiB");
    assert_eq!(human_size(1023.9 * 1024.0), "1.0 MiB");
    assert_eq!(human_size(256.0 * 1048576.0), "256.0 MiB");
    assert_eq!(human_size(1.5 * 1073741824.0), "1.5 GiB");
    assert_eq!(human_size(-3.0 * 4096.0), "-12 KiB");
}

/// The texts of an SVG that leave its picture (by their boxes, as
/// [`pagescope_render::svg::text_box`] bounds them), and the picture's
/// size.
fn texts_outside(svg: &str) -> (Vec<String>, f64, f64) {
    let doc = roxmltree::Document::parse(svg).expect("valid SVG");
    let root = doc.root_element();
    let num = |n: roxmltree::Node<'_, '_>, a: &str| -> f64 {
        n.attribute(a)
            .unwrap_or_else(|| panic!("no {a}"))
            .parse()
            .unwrap()
    };
    let (w, h) = (num(root, "width"), num(root, "height"));
    let view: Vec<f64> = root
        .attribute("viewBox")
        .unwrap()
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(view, [0.0, 0.0, w, h]);
    let mut outside = Vec::new();
    for t in doc.descendants().filter(|n| n.has_tag_name("text")) {
        let text = t.text().unwrap_or("");
        let up = t
            .attribute("transform")
            .is_some_and(|tr| tr.starts_with("rotate(-90 "));
        let b = pagescope_render::svg::text_box(
            num(t, "x"),
            num(t, "y"),
            num(t, "font-size"),
            t.attribute("text-anchor").unwrap_or("start"),
            text.chars().count(),
            up,
        );
        if b[0] < 0.0 || b[1] < 0.0 || b[2] > w || b[3] > h {
            outside.push(format!("{text:?} at {b:?} in {w}x{h}"));
        }
    }
    (outside, w, h)
}

/// Renders an SVG to PNG with rsvg-convert (librsvg2-bin), where it is
/// installed: the picture must be one a common renderer draws.
fn renders_to_png(name: &str, svg: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.svg"));
    std::fs::write(&path, svg).unwrap();
    let png = dir.path().join(format!("{name}.png"));
    match std::process::Command::new("rsvg-convert")
        .arg(&path)
        .arg("-o")
        .arg(&png)
        .output()
    {
        Ok(out) => {
            assert!(out.status.success(), "{name}: {out:?}");
            let bytes = std::fs::read(&png).unwrap();
            assert!(bytes.starts_with(b"\x89PNG"), "{name}");
        }
        // Where CI says the machine has it (PAGESCOPE_TESTS_REQUIRE), a
        // missing rsvg-convert is a failure, not a skip.
        Err(e) => {
            let required = std::env::var("PAGESCOPE_TESTS_REQUIRE")
                .is_ok_and(|r| r.split(',').any(|f| f == "rsvg-convert"));
            assert!(!required, "{name}: rsvg-convert is required here: {e}");
            eprintln!(
                "skipped: {name} not rendered to PNG: rsvg-convert is not installed (apt-get install librsvg2-bin)"
            )
        }
    }
}

/// Every chart drawn from the fixtures: each a snapshot; none with a
/// text outside the picture; each drawn by rsvg-convert.
fn check_chart(name: &str, report: &Report) -> String {
    let svg = render(report, Format::Svg);
    let (outside, _, _) = texts_outside(&svg);
    assert!(outside.is_empty(), "{name}: {outside:#?}");
    renders_to_png(name, &svg);
    insta::assert_snapshot!(format!("chart_{name}"), svg);
    svg
}

fn usage(all_maps: bool) -> Usage {
    let mut a = Usage::new(UsageOptions {
        all_maps,
        ..UsageOptions::default()
    });
    feed(&mut a);
    a
}

#[test]
fn snapshot_charts() {
    let a = usage(true);
    let t = total_report();
    let svg = check_chart(
        "processes",
        &views::processes(&a, ProcessesOptions::default()),
    );
    // Sizes on the axis in KiB, in whole ticks: alpha maps 12 pages
    // (48 KiB), its tallest bar, so the axis runs to 50.
    assert!(svg.contains("memory (KiB)"), "{svg}");
    assert!(
        svg.contains(">50</text>") && !svg.contains(".0</text>"),
        "{svg}"
    );
    check_chart("vmas", &views::vmas(&a, &[10, 20]));
    check_chart("units", &views::units(&a));
    check_chart("unit_totals", &views::unit_totals(&a));
    check_chart("alerts", &views::alerts(&a));
    let mut tt = Total::new();
    feed(&mut tt);
    check_chart("diff", &views::diff(&a, &a, &tt, &tt, false));
    let svg = check_chart("total", &t);
    assert!(svg.contains("memory (GiB)"), "{svg}");
}

/// A trace whose pool is 8 pages: the miss-ratio curve is shaded and
/// labelled below 32 KiB, where it is not known; its axis is in sizes.
#[test]
fn mrc_chart_shades_what_is_not_known() {
    use pagescope_core::analysis::mrc::Mrc;
    use pagescope_core::format::TraceVisitor;
    use pagescope_core::trace::{EvictMethod, Ref, TraceHeader};
    let mut m = Mrc::new();
    m.header(&TraceHeader {
        page_size: PS,
        pool_pages: 8,
        policy: "fifo".into(),
        evict: EvictMethod::Move,
        command: vec!["pagetest".into()],
        start_unix_ns: 0,
        start_monotonic_ns: 0,
        kernel: "6.18.0-fixture".into(),
        untraced: "file mappings".into(),
        origin: None,
    })
    .unwrap();
    // A loop over 64 pages, twice.
    let refs: Vec<Ref> = (0..128u64)
        .map(|i| Ref {
            time_ns: i,
            pid: 1,
            tid: 1,
            addr: 0x1000_0000 + (i % 64) * PS,
            write: false,
            mapping: 0,
        })
        .collect();
    m.refs(&refs).unwrap();
    let r = views::mrc(&m);
    let chart = r.chart.as_ref().unwrap();
    // Sizes of 1, 2, 3, 4 and 6 pages lie below the pool of 8.
    assert_eq!(chart.unknown.as_ref().unwrap().0, 5);
    assert_eq!(chart.bars[5].0, "32 KiB");
    let svg = check_chart("mrc", &r);
    assert!(
        svg.contains("not known: below the tracer&apos;s pool (32 KiB)")
            || svg.contains("not known: below the tracer's pool (32 KiB)"),
        "{svg}"
    );
    assert!(
        svg.contains(">1.0</text>") && !svg.contains("0.92"),
        "{svg}"
    );
}

/// A chart's legend lies right of its data, and the physmap classes
/// have twelve distinct colours.
#[test]
fn legend_outside_the_data() {
    let a = usage(false);
    let svg = render(
        &views::processes(&a, ProcessesOptions::default()),
        Format::Svg,
    );
    let doc = roxmltree::Document::parse(&svg).unwrap();
    // The plot's right edge: the end of the grid lines.
    let right = doc
        .descendants()
        .filter(|n| n.has_tag_name("line"))
        .filter_map(|n| n.attribute("x2")?.parse::<f64>().ok())
        .fold(0.0, f64::max);
    for name in ["stack", "heap", "lib_text"] {
        let t = doc
            .descendants()
            .find(|n| n.has_tag_name("text") && n.text() == Some(name))
            .unwrap_or_else(|| panic!("no legend entry {name}"));
        let x: f64 = t.attribute("x").unwrap().parse().unwrap();
        assert!(x > right, "{name} at {x}, data to {right}");
    }
}

/// Labels side by side that reach past their slots (addresses under a
/// dozen bars, as the spatial view of a recording draws them) stay inside
/// the picture on the right too, for every count of bars, with a legend,
/// without, and under a heat map's columns.
#[test]
fn wide_labels_stay_inside_on_the_right() {
    use pagescope_render::report::{Chart, Quantity, Style};
    for (style, series) in [
        (Style::Bars, vec!["pages"]),
        (Style::Bars, vec!["read", "written"]),
        (Style::Heat, vec!["interval 0", "interval 1"]),
    ] {
        for n in 1..=200u64 {
            let chart = Chart {
                title: "references by address".into(),
                y_label: "references".into(),
                series: series.iter().map(|s| s.to_string()).collect(),
                bars: (0..n)
                    .map(|i| {
                        (
                            format!("{:#x}", 0x7fff_c905_4000u64 + i * 4096),
                            vec![1.0; series.len()],
                        )
                    })
                    .collect(),
                style,
                y_unit: Quantity::Count,
                x_label: "address".into(),
                unknown: None,
            };
            let report = Report {
                view: "spatial",
                chart: Some(chart),
                ..Report::default()
            };
            let (outside, w, h) = texts_outside(&render(&report, Format::Svg));
            assert!(
                outside.is_empty(),
                "{n} bars, {series:?}: outside the {w}x{h} picture: {outside:?}"
            );
        }
    }
}
