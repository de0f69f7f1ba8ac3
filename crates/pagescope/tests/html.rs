//! The HTML pages (`report html`, `analyze FILE html`) opened in headless
//! Chromium: the scripts run without a console message, the page asks
//! the network for nothing (Chromium's own log of requests is read, with
//! a proxy that fails every request), its tables hold the rows and
//! values of the JSON views of the same file, they sort, and a command
//! line holding markup shows as text. A screenshot of each page is left
//! in `target/test-screenshots/` (where CI keeps its logs).

#[macro_use]
mod util;

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::trace::trace_unsupported;
use util::*;

/// A command line that would run a script if a page took it for markup.
const EVIL: &str = "pagetest<script>document.title='pwned'</script><img src=x onerror=alert(1)>";

/// Chromium's binary, or a skip.
fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser"].iter().find_map(|name| {
        let out = Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            .ok()?;
        let path = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !path.is_empty()).then(|| PathBuf::from(path))
    })
}

/// Where screenshots go: `target/test-screenshots`.
fn screenshot_dir() -> PathBuf {
    let target = pagescope_bin()
        .parent()
        .and_then(Path::parent)
        .expect("the binary is in target/PROFILE")
        .to_path_buf();
    let dir = target.join("test-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What one run of Chromium on a page gave.
struct Browsed {
    /// Standard output (the DOM, with `--dump-dom`).
    stdout: String,
    /// The console's messages (Chromium logs them as `:CONSOLE`).
    console: Vec<String>,
    /// The URLs the page asked the network for.
    requests: Vec<String>,
}

/// Opens `page` (with `hash`) in headless Chromium with `what` (e.g.
/// `--dump-dom`). Every request goes to a proxy that refuses it and to a
/// resolver that knows no name, and is logged in Chromium's net log:
/// the page's own requests are those whose network isolation key is the
/// file's (Chromium's own background requests have other keys).
fn browse(chromium: &Path, page: &Path, hash: &str, what: &[&str]) -> Browsed {
    let dir = tempfile::tempdir().unwrap();
    let netlog = dir.path().join("net.json");
    let mut cmd = Command::new(chromium);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--hide-scrollbars",
        "--proxy-server=127.0.0.1:9",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!(
        "--user-data-dir={}",
        dir.path().join("profile").display()
    ))
    .arg(format!("--log-net-log={}", netlog.display()))
    .args(what)
    .arg(format!("file://{}{hash}", page.display()))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("chromium starts");
    // Read both pipes on threads, so that neither fills up.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut so, &mut s).unwrap();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut se, &mut s).unwrap();
        s
    });
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium took over 180 s on {}", page.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out.join().unwrap();
    let stderr = err.join().unwrap();
    assert!(status.success(), "chromium failed ({status}): {stderr}");
    let console = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    let log: Value = serde_json::from_str(&std::fs::read_to_string(&netlog).unwrap())
        .expect("chromium's net log is JSON");
    let mut requests: Vec<String> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["params"]["network_isolation_key"]
                .as_str()
                .is_some_and(|k| k.contains("file://"))
        })
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_string))
        .collect();
    requests.dedup();
    Browsed {
        stdout,
        console,
        requests,
    }
}

/// Opens `page` twice: its DOM after the scripts ran (with `hash`), and a
/// screenshot `name.png`; neither run logs a console message or a
/// request. Returns the DOM.
fn open_page(chromium: &Path, page: &Path, hash: &str, name: &str) -> String {
    let dom = browse(chromium, page, hash, &["--dump-dom"]);
    let shot = screenshot_dir().join(format!("{name}.png"));
    let _ = std::fs::remove_file(&shot);
    let pic = browse(
        chromium,
        page,
        "",
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1400,3000",
        ],
    );
    for b in [&dom, &pic] {
        assert!(b.console.is_empty(), "console messages: {:#?}", b.console);
        assert!(b.requests.is_empty(), "the page fetched {:?}", b.requests);
    }
    assert!(
        std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000),
        "no screenshot at {}",
        shot.display()
    );
    assert!(dom.stdout.contains("</html>"), "no DOM: {}", dom.stdout);
    dom.stdout
}

/// Text or an attribute of the DOM, unescaped.
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// The value of attribute `name` in the tag `tag` (its text from `<` to
/// `>`).
fn attr(tag: &str, name: &str) -> Option<String> {
    let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = tag[at..].find('"')?;
    Some(unescape(&tag[at..at + end]))
}

/// A cell of a table of the page: its raw value (`data-v`) and its text.
#[derive(Debug)]
struct Cell {
    v: Option<f64>,
    text: String,
}

/// The sortable table `id` (its `data-table`) of a page: its columns' keys, whether each
/// is sorted (`aria-sort`), and its rows.
struct PageTable {
    keys: Vec<String>,
    sorted: Vec<Option<String>>,
    rows: Vec<Vec<Cell>>,
}

impl PageTable {
    fn column(&self, key: &str) -> usize {
        self.keys
            .iter()
            .position(|k| k == key)
            .unwrap_or_else(|| panic!("no column {key} in {:?}", self.keys))
    }
}

/// Reads the table `id` from a page's HTML (the page's own, or
/// Chromium's dump of the DOM): every `<` in it opens a tag, as text
/// from the file is escaped.
fn page_table(html: &str, id: &str) -> PageTable {
    let start = html
        .match_indices("<table ")
        .map(|(i, _)| i)
        .find(|&i| {
            let tag = &html[i..i + html[i..].find('>').unwrap()];
            attr(tag, "data-table").as_deref() == Some(id)
        })
        .unwrap_or_else(|| panic!("no table {id} in the page"));
    let body = &html[start..start + html[start..].find("</table>").unwrap()];
    let tags = |s: &str, name: &str| -> Vec<(String, String)> {
        // (the tag, the text up to the next tag)
        s.match_indices(&format!("<{name}"))
            .filter(|(i, _)| {
                matches!(
                    s.as_bytes().get(i + name.len() + 1),
                    Some(b' ') | Some(b'>')
                )
            })
            .map(|(i, _)| {
                let close = i + s[i..].find('>').unwrap();
                let text_end = close + s[close..].find('<').unwrap_or(s.len() - close);
                (s[i..=close].to_string(), unescape(&s[close + 1..text_end]))
            })
            .collect()
    };
    let (head, rows) = body.split_once("<tbody>").expect("a tbody");
    let ths = tags(head, "th");
    let keys = ths
        .iter()
        .map(|(t, _)| attr(t, "data-k").unwrap())
        .collect();
    let sorted = ths.iter().map(|(t, _)| attr(t, "aria-sort")).collect();
    let rows = rows
        .split("</tr>")
        .filter(|r| r.contains("<td"))
        .map(|r| {
            tags(r, "td")
                .into_iter()
                .map(|(tag, text)| Cell {
                    v: attr(&tag, "data-v").map(|v| v.parse().unwrap()),
                    text,
                })
                .collect()
        })
        .collect();
    PageTable { keys, sorted, rows }
}

/// The page fetches nothing by itself: no tag has a `src`, a `href`
/// other than to a place in the page, or a style sheet link, and the
/// inline style and script name no URL.
fn assert_self_contained(html: &str) {
    for (i, _) in html.match_indices('<') {
        let tag = &html[i..i + html[i..].find('>').unwrap() + 1];
        assert!(!tag.contains(" src="), "{tag}");
        assert!(!tag.starts_with("<link"), "{tag}");
        assert!(!tag.starts_with("<iframe"), "{tag}");
        if let Some(href) = attr(tag, "href") {
            assert!(href.starts_with('#'), "{tag}");
        }
    }
    for (open, close) in [("<style>", "</style>"), ("<script>", "</script>")] {
        let at = html.find(open).unwrap_or_else(|| panic!("no {open}"));
        let inline = &html[at..at + html[at..].find(close).unwrap()];
        for url in [
            "http:",
            "https:",
            "url(",
            "@import",
            "fetch(",
            "XMLHttpRequest",
            "import(",
        ] {
            assert!(!inline.contains(url), "{url} in the page's {open}");
        }
    }
}

/// The page's rows of table `id` match the JSON view's rows `key`,
/// column by column for `columns` (pages, as JSON counts them; a
/// missing figure is `null` there and has no raw value here), row by row
/// by pid.
fn assert_same_rows(table: &PageTable, json: &Value, key: &str, columns: &[&str]) {
    let want = rows(json, key);
    assert_eq!(table.rows.len(), want.len(), "rows of {key}");
    let pid = table.column("pid");
    for w in &want {
        let p = w["pid"].as_f64().unwrap();
        let got = table
            .rows
            .iter()
            .find(|r| r[pid].v == Some(p))
            .unwrap_or_else(|| panic!("pid {p} is not on the page"));
        for c in columns {
            let i = table.column(c);
            assert_eq!(got[i].v, w[*c].as_f64(), "pid {p}, {c}: page vs JSON");
        }
    }
}

/// `report html` of a snapshot of the machine while a pagetest holds
/// 64 MiB under a command line that holds markup: in Chromium, the
/// processes table holds the rows and figures of `report processes
/// --format json` on the same file (pid, RSS, PSS, USS, swap, in pages
/// from the cells' raw values), sorted by pid from `#sort=`, and the
/// command line shows as text.
#[test]
fn snapshot_page_in_chromium() {
    let Some(chromium) = chromium() else {
        skip!(
            "chromium",
            "needs headless Chromium (Debian package chromium)"
        );
    };
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let snap = temp_path(dir.path(), "s.pgs");
    let page = dir.path().join("report.html");
    let pt = Pagetest::start(
        &["bash", "-c", "exec -a \"$0\" \"$@\"", EVIL],
        &["--size", "64M", "--hold"],
        "done",
    );
    wait_asleep(pt.pid() as u64);
    let mut args = vec!["snapshot", "-q", "-o", &snap];
    if pfns_visible() {
        args.push("--physmap");
    }
    run_ok(&args);
    run_ok(&[
        "report",
        "html",
        "--input",
        &snap,
        "-o",
        page.to_str().unwrap(),
    ]);
    let mode = std::fs::metadata(&page).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the page holds command lines");
    let html = std::fs::read_to_string(&page).unwrap();
    assert_self_contained(&html);
    assert_eq!(html.matches("<script").count(), 1, "only the page's script");
    for id in [
        "total",
        "processes",
        "vmas",
        "units",
        "unit-totals",
        "alerts",
    ] {
        assert!(html.contains(&format!("<section id=\"{id}\">")), "{id}");
    }
    assert_eq!(
        html.contains("<section id=\"physmap\">"),
        pfns_visible(),
        "physmap is on the page when the snapshot has one"
    );
    assert!(
        html.contains("report pages --input"),
        "pages is said left out"
    );

    let dom = open_page(&chromium, &page, "#sort=processes:pid:asc", "snapshot");
    assert!(
        !dom.contains("<img"),
        "markup from the file became an element"
    );
    assert!(!dom.contains("<title>pwned"), "a script from the file ran");
    let table = page_table(&dom, "processes");
    let json = report_json(&["report", "processes", "--input", &snap, "--format", "json"]);
    assert_same_rows(
        &table,
        &json,
        "processes",
        &["pid", "rss_pages", "pss_pages", "uss_pages", "swap_pages"],
    );
    // Sorted by pid, ascending, as the hash asked; not the JSON's order
    // (largest PSS first).
    let pid = table.column("pid");
    let pids: Vec<f64> = table.rows.iter().map(|r| r[pid].v.unwrap()).collect();
    assert!(pids.windows(2).all(|w| w[0] < w[1]), "{pids:?}");
    assert_eq!(table.sorted[pid].as_deref(), Some("ascending"));
    let json_pids: Vec<f64> = rows(&json, "processes")
        .iter()
        .map(|r| r["pid"].as_f64().unwrap())
        .collect();
    assert!(
        json_pids.len() < 3 || json_pids != pids,
        "the sort changed nothing"
    );
    // The held pagetest: its command line as text, its PSS as the JSON's.
    let row = table
        .rows
        .iter()
        .find(|r| r[pid].v == Some(pt.pid() as f64))
        .expect("pagetest's row");
    let cmd = &row[table.column("cmdline")].text;
    assert!(cmd.starts_with(EVIL), "{cmd:?}");
    let pss = row[table.column("pss_pages")].v.unwrap();
    assert!(pss >= pt.pages() as f64, "pagetest's PSS {pss} pages");

    // Sorted by PSS, the page's order is the JSON's.
    let dom = browse(
        &chromium,
        &page,
        "#sort=processes:pss_pages:desc",
        &["--dump-dom"],
    );
    let table = page_table(&dom.stdout, "processes");
    let pss = table.column("pss_pages");
    let by_pss: Vec<Option<f64>> = table.rows.iter().map(|r| r[pss].v).collect();
    let json_pss: Vec<Option<f64>> = rows(&json, "processes")
        .iter()
        .map(|r| r["pss_pages"].as_f64())
        .collect();
    assert_eq!(by_pss, json_pss);
}

/// `analyze FILE html` of a recording (`record --backend refs` of a
/// pagetest): in Chromium, every view that applies is there, the ones
/// that don't are named with why, and the processes table holds the
/// rows and figures of `analyze FILE processes --format json`.
#[test]
fn recording_page_in_chromium() {
    let Some(chromium) = chromium() else {
        skip!(
            "chromium",
            "needs headless Chromium (Debian package chromium)"
        );
    };
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = temp_path(dir.path(), "r.pgr");
    let page = dir.path().join("rec.html");
    let bin = pagetest_bin();
    run_ok(&[
        "record",
        "-q",
        "--backend",
        "refs",
        "--interval",
        "200ms",
        "-o",
        &rec,
        "--",
        "bash",
        "-c",
        "exec \"$@\"",
        EVIL,
        bin.to_str().unwrap(),
        "--size",
        "32M",
        "--iterations",
        "4",
        "--sleep",
        "300ms",
        "--delay",
        "500ms",
    ]);
    run_ok(&["analyze", &rec, "html", "-o", page.to_str().unwrap()]);
    let mode = std::fs::metadata(&page).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let html = std::fs::read_to_string(&page).unwrap();
    assert_self_contained(&html);
    for id in ["temporal", "heatmap", "spatial", "processes"] {
        assert!(html.contains(&format!("<section id=\"{id}\">")), "{id}");
    }
    // The refs backend places references by VMA: the views that need
    // pages are named, with why.
    for view in ["wss", "hugepages", "numa", "mrc"] {
        assert!(html.contains(&format!("<li><b>{view}</b>: ")), "{view}");
    }
    assert!(
        html.contains("<figure class=\"chart zoom\">"),
        "the heat map zooms"
    );

    let dom = open_page(
        &chromium,
        &page,
        "#sort=processes:user_pages:asc",
        "recording",
    );
    assert!(
        !dom.contains("<img"),
        "markup from the file became an element"
    );
    // The recorded command line, with its markup, as text.
    assert!(unescape(&dom).contains(EVIL));
    let table = page_table(&dom, "processes");
    let json = report_json(&["analyze", &rec, "processes", "--format", "json"]);
    assert_same_rows(
        &table,
        &json,
        "processes",
        &[
            "pid",
            "intervals",
            "user_pages",
            "written_pages",
            "peak_pages",
        ],
    );
    let user = table.column("user_pages");
    let sorted: Vec<f64> = table.rows.iter().map(|r| r[user].v.unwrap()).collect();
    assert!(sorted.windows(2).all(|w| w[0] <= w[1]), "{sorted:?}");
    // The heat map zooms: a copy of the page whose extra script clicks
    // "+" then turns the wheel (in) over the picture's top left corner.
    let zoomed = dir.path().join("zoom.html");
    let probe = "<script>\
        var f = document.querySelector('figure.zoom'), s = f.querySelector('svg');\
        var a = s.getAttribute('viewBox');\
        f.querySelector('button[data-zoom=in]').click();\
        var b = s.getAttribute('viewBox');\
        var r = s.getBoundingClientRect();\
        s.dispatchEvent(new WheelEvent('wheel', {deltaY: -100, clientX: r.left, clientY: r.top, cancelable: true}));\
        document.body.setAttribute('data-boxes', [a, b, s.getAttribute('viewBox')].join(';'));\
        </script></body>";
    std::fs::write(&zoomed, html.replace("</body>", probe)).unwrap();
    let dom = browse(&chromium, &zoomed, "", &["--dump-dom"]);
    assert!(dom.console.is_empty(), "{:?}", dom.console);
    let body = &dom.stdout[dom.stdout.find("<body").unwrap()..];
    let boxes: Vec<Vec<f64>> = attr(&body[..body.find('>').unwrap()], "data-boxes")
        .expect("the probe ran")
        .split(';')
        .map(|b| b.split_whitespace().map(|v| v.parse().unwrap()).collect())
        .collect();
    let (whole, half, wheel) = (&boxes[0], &boxes[1], &boxes[2]);
    assert!((half[2] - whole[2] / 2.0).abs() < 0.1, "{boxes:?}");
    assert!((half[3] - whole[3] / 2.0).abs() < 0.1, "{boxes:?}");
    // Centred, then zoomed 0.8 about the corner, which stays put.
    assert!((half[0] - whole[2] / 4.0).abs() < 0.1, "{boxes:?}");
    assert!((wheel[2] - half[2] * 0.8).abs() < 0.1, "{boxes:?}");
    assert!(
        (wheel[0] - half[0]).abs() < 0.5 && (wheel[1] - half[1]).abs() < 0.5,
        "{boxes:?}"
    );
    // pagetest referenced its 32 MiB buffer in each of 4 iterations.
    let pages = (32 << 20) / 4096 * 4;
    assert!(
        sorted.iter().any(|&u| u >= 0.98 * pages as f64),
        "no process referenced pagetest's buffer 4 times: {sorted:?}"
    );
}

/// `analyze FILE html` of a trace of pagetest (16 MiB, written twice):
/// the references and the miss-ratio curve, their tables holding the
/// JSON views' rows; pagetest's buffer is a mapping of its 4096 pages
/// referenced twice each. In Chromium (where there is one), no console
/// message and no request.
#[test]
fn trace_page() {
    require_trace!();
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.pgt");
    let page = dir.path().join("trace.html");
    let bin = pagetest_bin();
    let size = 16u64 << 20;
    run_ok(&[
        "trace",
        "-q",
        "-o",
        &trace,
        "--",
        bin.to_str().unwrap(),
        "--size",
        "16M",
        "--iterations",
        "2",
    ]);
    run_ok(&["analyze", &trace, "html", "-o", page.to_str().unwrap()]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert_self_contained(&html);
    for id in ["refs", "mrc"] {
        assert!(html.contains(&format!("<section id=\"{id}\">")), "{id}");
    }
    let mrc = report_json(&["analyze", &trace, "mrc", "--format", "json"]);
    let curve = page_table(&html, "mrc-curve");
    assert_eq!(curve.rows.len(), rows(&mrc, "curve").len());
    for (got, want) in curve.rows.iter().zip(rows(&mrc, "curve")) {
        for c in [
            "pages",
            "lru_miss_ratio",
            "fifo_miss_ratio",
            "clock_miss_ratio",
        ] {
            assert_eq!(got[curve.column(c)].v, want[c].as_f64(), "{c}");
        }
    }
    let maps = page_table(&html, "refs-mappings");
    let pages = size / pagescope_linux::system::page_size();
    let buffer = maps
        .rows
        .iter()
        .find(|r| r[maps.column("distinct_pages")].v == Some(pages as f64))
        .unwrap_or_else(|| panic!("no mapping of {pages} pages"));
    assert_eq!(
        buffer[maps.column("references")].v,
        Some(2.0 * pages as f64)
    );
    if let Some(chromium) = chromium() {
        open_page(
            &chromium,
            &page,
            "#sort=refs-mappings:references:desc",
            "trace",
        );
    }
}

/// Bad input and bad arguments are usage errors (exit 2, one line); `-o
/// -` writes the page to standard output; a snapshot given to `analyze`
/// is named as one.
#[test]
fn html_errors_and_standard_output() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let snap = temp_path(dir.path(), "s.pgs");
    let junk = temp_path(dir.path(), "junk");
    std::fs::write(&junk, "<html>not a snapshot</html>").unwrap();
    let out = temp_path(dir.path(), "o.html");
    let pt = Pagetest::start(&[], &["--size", "16M", "--hold"], "done");
    snapshot_pid(pt.pid(), &snap);
    for (args, says) in [
        (
            vec!["report", "html", "--input", &snap],
            "the html view needs -o FILE",
        ),
        (vec!["report", "html", "-o", &out], "give --input FILE"),
        (
            vec!["report", "html", "--input", &junk, "-o", &out],
            "not a pagescope recording",
        ),
        (
            vec!["report", "processes", "--input", &snap, "-o", &out],
            "--output applies to the html view only",
        ),
        (
            vec!["analyze", &snap, "html", "-o", &out],
            "is a snapshot: its page is `pagescope report html",
        ),
        (
            vec!["analyze", &junk, "html", "-o", &out],
            "not a pagescope recording",
        ),
        (
            vec!["report", "html", "--input", &snap, "-o", &out, "-f", "json"],
            "--format does not apply",
        ),
    ] {
        let o = run(&[], &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(says),
            "{args:?}: {err}"
        );
        assert!(!Path::new(&out).exists(), "{args:?} wrote {out}");
    }
    let o = run_ok(&["report", "html", "--input", &snap, "-o", "-"]);
    let html = String::from_utf8(o.stdout).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>\n"));
    let table = page_table(&html, "processes");
    assert_eq!(table.rows.len(), 1);
    assert_eq!(table.rows[0][table.column("pid")].v, Some(pt.pid() as f64));
    // Named by --pid, the page's VMAs are the process's.
    assert!(html.contains("<section id=\"vmas\">"));
    // A disk that fills leaves no page cut short, and the page that was
    // there as it was.
    if let Some(fs) = SmallFs::mount("256k") {
        let page = fs.path("r.html");
        std::fs::write(&page, "the page before").unwrap();
        fs.fill(4096);
        let o = run(&[], &["report", "html", "--input", &snap, "-o", &page]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("No space left"), "{err}");
        assert_eq!(std::fs::read_to_string(&page).unwrap(), "the page before");
        let left: Vec<_> = std::fs::read_dir(fs.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().ends_with(".part"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
