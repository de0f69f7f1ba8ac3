//! `analyze REC mrc`: the LRU miss-ratio curve estimated from a
//! recording, held against the exact curve of a trace of the same
//! program and against pagetest's known access pattern.

#[macro_use]
mod util;

use util::trace::trace_unsupported as unsupported;
use util::*;

/// The largest error docs/performance.md claims for pagetest's scans
/// ("A curve from a recording").
const PAGETEST_CLAIM: f64 = 0.01;

/// pagetest writes one word in each page of 16 MiB (4096 pages), four
/// passes with a pause longer than an interval between them: each page
/// is referenced once per pass, so the estimate is that of the trace,
/// whose exact curve is 1 below the scan's size and the cold share (a
/// quarter) from it on.
#[test]
fn a_recordings_curve_of_scans_is_the_traces() {
    if let Some((feature, why)) = unsupported() {
        skip!(feature, why);
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let rec = temp_path(dir.path(), "r.rec");
    let bin = pagetest_bin();
    let program = [
        bin.to_str().unwrap(),
        "--size",
        "16M",
        "--mode",
        "anon",
        "--op",
        "write",
        "--iterations",
        "4",
        "--sleep",
        "40ms",
    ];
    let mut args = vec!["trace", "-q", "--pool", "2M", "-o", &trace, "--"];
    args.extend(program);
    run_ok(&args);
    let mut args = vec![
        "record",
        "-q",
        "--backend",
        "fault",
        "--interval",
        "10ms",
        "-o",
        &rec,
        "--",
    ];
    args.extend(program);
    run_ok(&args);

    let r = report_json(&[
        "analyze",
        &rec,
        "mrc",
        "--against",
        &trace,
        "--format",
        "json",
    ]);
    assert_eq!(r["estimated"], true);
    let notes = r["notes"].to_string();
    assert!(notes.contains("an estimate"), "{notes}");
    let mae = r["trace_mae"].as_f64().unwrap();
    assert!(mae <= PAGETEST_CLAIM, "error against the trace: {mae}");
    // What the report claims for such scans is what docs claim.
    assert_eq!(r["calibration_mae_least"].as_f64(), Some(PAGETEST_CLAIM));
    assert!(notes.contains("pagetest's scans"), "{notes}");
    // Against pagetest's pattern: 4 passes over 4096 pages, plus the few
    // pages of pagetest itself.
    let refs = r["references"].as_f64().unwrap();
    let distinct = r["distinct_pages"].as_u64().unwrap();
    assert!(
        (4096..4096 + 200).contains(&distinct),
        "{distinct} distinct pages"
    );
    assert!(refs >= 4.0 * 4096.0, "{refs} references");
    for row in r["curve"].as_array().unwrap() {
        let pages = row["pages"].as_u64().unwrap();
        let lru = row["lru_miss_ratio"].as_f64().unwrap();
        if pages < 4000 {
            assert!(lru >= 4.0 * 4096.0 / refs - 0.01, "{pages} pages: {lru}");
        }
        if pages >= distinct {
            let cold = distinct as f64 / refs;
            assert!((lru - cold).abs() < 1e-3, "{pages} pages: {lru}");
            assert!((lru - 0.25).abs() < 0.02, "{pages} pages: {lru}");
        }
        // The trace's column is empty below its pool (512 pages) only.
        let traced = &row["trace_lru_miss_ratio"];
        assert_eq!(traced.is_null(), pages < 512, "{pages} pages: {traced}");
    }
    // Without --against: the same curve, no trace column.
    let alone = report_json(&["analyze", &rec, "mrc", "--format", "json"]);
    assert_eq!(alone["references"], r["references"]);
    assert!(alone["curve"][0].get("trace_lru_miss_ratio").is_none());
    for format in ["table", "csv", "svg"] {
        run_ok(&[
            "analyze",
            &rec,
            "mrc",
            "--against",
            &trace,
            "--format",
            format,
        ]);
    }
    // The recording's page has the curve too.
    let page = temp_path(dir.path(), "r.html");
    run_ok(&["analyze", &rec, "html", "-o", &page]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<section id=\"mrc\">"));

    // What does not apply is refused, with exit 2.
    for (args, said) in [
        (
            vec!["analyze", &rec, "mrc", "--sample", "0.1"],
            "--sample applies to the mrc of a trace",
        ),
        (
            vec!["analyze", &trace, "mrc", "--against", &trace],
            "--against applies to the `mrc` of a recording",
        ),
        (
            vec!["analyze", &rec, "temporal", "--against", &trace],
            "--against applies to the `mrc` of a recording",
        ),
        (
            vec!["analyze", &rec, "mrc", "--against", &rec],
            "not a trace",
        ),
    ] {
        let out = run(&[], &args);
        let err = failed_with(&out, 2);
        assert!(err.contains(said), "{args:?}: {err}");
    }
}

/// A recording that places references by VMA (the `refs` backend) has no
/// pages to estimate a curve from: refused, saying which backend to use.
#[test]
fn a_recording_by_vma_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rec = temp_path(dir.path(), "r.rec");
    let bin = pagetest_bin();
    run_ok(&[
        "record",
        "-q",
        "--backend",
        "refs",
        "--interval",
        "10ms",
        "-o",
        &rec,
        "--",
        bin.to_str().unwrap(),
        "--size",
        "1M",
        "--iterations",
        "2",
        "--sleep",
        "30ms",
    ]);
    let out = run(&[], &["analyze", &rec, "mrc"]);
    let err = failed_with(&out, 2);
    assert!(err.contains("--backend fault"), "{err}");
}
