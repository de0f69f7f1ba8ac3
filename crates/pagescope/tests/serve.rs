//! `pagescope serve`: its figures against the kernel's smaps_rollup and
//! pagetest's known access pattern, scraped directly and by a real
//! Prometheus server; its bad inputs; its end on SIGINT and SIGTERM.

#[macro_use]
mod util;

use serde_json::Value;
use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use util::named::Named;
use util::*;

const MIB: u64 = 1024 * 1024;

/// A child killed and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// A running `pagescope serve`; killed and reaped when dropped.
struct Serve {
    child: Child,
    port: u16,
}

impl Serve {
    /// Starts `pagescope serve` on a free port with `args`, and waits for
    /// its first collection.
    fn start(args: &[&str]) -> Serve {
        Serve::start_on("127.0.0.1", args)
    }

    /// Starts `pagescope serve --listen HOST:PORT`, PORT a free port of
    /// 127.0.0.1, with `args`, and waits for its first collection
    /// (scraped at 127.0.0.1).
    fn start_on(host: &str, args: &[&str]) -> Serve {
        let port = free_port();
        let listen = format!("{host}:{port}");
        let child = Command::new(pagescope_bin())
            .args(["serve", "--listen", &listen])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pagescope serve starts");
        let serve = Serve { child, port };
        serve.wait_for(|m| cpu_total(m).is_some(), "a first collection");
        serve
    }

    /// `GET /metrics`: the body of a 200 answer.
    fn metrics(&self) -> Option<String> {
        let (head, body) = request(
            self.port,
            b"GET /metrics HTTP/1.1\r\nHost: pagescope\r\nConnection: close\r\n\r\n",
        )
        .ok()?;
        head.starts_with("HTTP/1.1 200").then(|| {
            assert!(
                head.to_ascii_lowercase()
                    .contains("content-type: application/openmetrics-text"),
                "{head}"
            );
            body
        })
    }

    /// Scrapes until `ok` holds of the text (30 s at most).
    fn wait_for(&self, ok: impl Fn(&str) -> bool, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(m) = self.metrics() {
                if ok(&m) {
                    return m;
                }
            }
            assert!(Instant::now() < deadline, "serve: no {what} in 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for a collection after the one `text` came from, and
    /// returns its text.
    fn next_collection(&self, text: &str) -> String {
        let before = cpu_total(text);
        self.wait_for(|m| cpu_total(m) != before, "new collection")
    }

    /// Sends `signal`, and returns the exit code and standard error.
    fn stop(mut self, signal: rustix::process::Signal) -> (Option<i32>, String) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (status.code(), err)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `raw` to 127.0.0.1:`port` and reads the answer to its end:
/// (status line and headers, body). A chunked body (tiny_http chunks a
/// large answer to HTTP/1.1) is put together again.
fn request(port: u16, raw: &[u8]) -> std::io::Result<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(raw)?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(answer.len());
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let mut body = answer.get(split + 4..).unwrap_or_default().to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "a malformed chunked body")
        })?;
    }
    Ok((head, String::from_utf8_lossy(&body).into_owned()))
}

/// A chunked body's data (RFC 9112 7.1): hex sizes, each chunk ended by
/// CRLF, a chunk of size 0 last.
fn dechunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = raw.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&raw[..eol]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        raw = &raw[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(raw.get(..size)?);
        raw = raw.get(size..)?.strip_prefix(b"\r\n")?;
    }
}

/// The status code of an answer's head.
fn status(head: &str) -> &str {
    head.split_whitespace().nth(1).unwrap_or("")
}

/// `pagescope_collection_cpu_seconds_total`: it changes with every
/// collection.
fn cpu_total(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("pagescope_collection_cpu_seconds_total "))
        .map(str::to_string)
}

/// The value of `name` for process `pid`, if the text has it.
fn process_value(text: &str, name: &str, pid: u32) -> Option<u64> {
    let prefix = format!("{name}{{pid=\"{pid}\",");
    text.lines()
        .find(|l| l.starts_with(&prefix))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
}

/// Asserts that the figures of each of `pids` match its smaps_rollup
/// within a page ([`matches_rollup`]), at the first of up to ten
/// collections from `text` on: on a machine where other programs start and
/// end, their shared libraries' pages change every process's PSS by a few
/// pages between a collection and the test's own read of smaps_rollup.
/// Returns the collection that matched.
fn matches_rollup_soon(serve: &Serve, text: String, pids: &[u32]) -> String {
    soon(serve, text, |t| {
        pids.iter().try_for_each(|&p| matches_rollup(t, p))
    })
}

/// The first of up to ten collections from `text` on of which `check`
/// holds; panics with the last of what it said otherwise.
fn soon(serve: &Serve, mut text: String, check: impl Fn(&str) -> Result<(), String>) -> String {
    let mut last = String::new();
    for _ in 0..10 {
        match check(&text) {
            Ok(()) => return text,
            Err(e) => last = e,
        }
        text = serve.next_collection(&text);
    }
    panic!("in ten collections in a row: {last}");
}

/// The held pagetest's figures against its smaps_rollup, within a page:
/// what differs, if any.
fn matches_rollup(text: &str, pid: u32) -> Result<(), String> {
    let r = smaps_rollup(pid);
    assert!(r["Rss"] * 1024 >= 64 * MIB, "the held buffer is resident");
    matches_kernel(text, pid, &r)
}

/// Process `pid`'s figures in `text` against `r`, the kernel's
/// smaps_rollup (kB by key), within a page: what differs, if any.
fn matches_kernel(
    text: &str,
    pid: u32,
    r: &std::collections::HashMap<String, u64>,
) -> Result<(), String> {
    let kb = |k: &str| r[k] * 1024;
    for (name, truth) in [
        ("pagescope_process_rss_bytes", kb("Rss")),
        ("pagescope_process_pss_bytes", kb("Pss")),
        (
            "pagescope_process_uss_bytes",
            kb("Private_Clean") + kb("Private_Dirty"),
        ),
        ("pagescope_process_swap_bytes", kb("Swap")),
    ] {
        let v = process_value(text, name, pid).ok_or_else(|| format!("no {name} of {pid}"))?;
        if v.abs_diff(truth) > page_size() {
            return Err(format!(
                "{name} of pid {pid}: pagescope says {v}, smaps_rollup {truth}"
            ));
        }
    }
    Ok(())
}

#[test]
fn process_figures_are_smaps_rollup() {
    let _g = serial();
    let pt = Pagetest::start(&[], &["--size", "64M", "--hold"], "done");
    let serve = Serve::start(&["--interval", "500ms", "--budget", "100"]);
    let pid = pt.pid();
    let text = serve.wait_for(
        |m| process_value(m, "pagescope_process_pss_bytes", pid).is_some(),
        "pagetest",
    );
    let text = matches_rollup_soon(&serve, text, &[pid]);
    // Labels: pid and comm, no command line unless asked; no kernel
    // thread (kthreadd, pid 2).
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("pagescope_process_rss_bytes{{pid=\"{pid}\",")))
        .unwrap();
    assert!(line.contains("comm=\"pagetest\""), "{line}");
    assert!(
        !text.contains("cmdline="),
        "a command line without --cmdline"
    );
    if pid_2_is_a_kernel_thread() {
        assert!(!text.contains("{pid=\"2\","), "a kernel thread is listed");
    }
    // The machine's totals are meminfo's, as `report total` sums them:
    // read right after a fresh collection, within 5% of the machine (the
    // machine is busy meanwhile).
    let text = serve.next_collection(&text);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb = |key: &str| -> u64 {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .map_or(0, |v| {
                v.trim().trim_end_matches("kB").trim().parse().unwrap()
            })
            * 1024
    };
    for (name, truth) in [
        ("free", kb("MemFree")),
        ("page_cache", kb("Cached") + kb("Buffers")),
        ("user", kb("AnonPages")),
        (
            "kernel",
            kb("SReclaimable")
                + kb("SUnreclaim")
                + kb("PageTables")
                + kb("SecPageTables")
                + kb("KernelStack"),
        ),
    ] {
        let v: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("pagescope_machine_{name}_bytes ")))
            .unwrap_or_else(|| panic!("no machine {name}"))
            .parse()
            .unwrap();
        assert!(
            v.abs_diff(truth) <= kb("MemTotal") / 20,
            "machine {name}: pagescope says {v}, meminfo {truth}"
        );
    }
    // The cgroup of pagetest sums its processes, pagetest's among them.
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let cgroup = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("")
        .to_string();
    let cg_line = format!("pagescope_cgroup_rss_bytes{{cgroup=\"{cgroup}\"}} ");
    let cg_rss: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&cg_line))
        .unwrap_or_else(|| panic!("no {cg_line}"))
        .parse()
        .unwrap();
    assert!(cg_rss >= 64 * MIB, "cgroup {cgroup}: rss {cg_rss}");
    // --cmdline adds the label.
    drop(serve);
    let serve = Serve::start(&["--interval", "500ms", "--budget", "100", "--cmdline"]);
    let text = serve.wait_for(
        |m| process_value(m, "pagescope_process_pss_bytes", pid).is_some(),
        "pagetest",
    );
    assert!(
        text.contains("cmdline=\"") && text.contains("--size 64M --hold"),
        "no command line with --cmdline"
    );
}

/// One sample of the exposition text, its label values unescaped.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Sample {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses OpenMetrics text strictly (the ABNF of the OpenMetrics
/// specification, without exemplars, which pagescope does not write):
/// `# HELP`, `# TYPE` and `# UNIT` lines, samples `name{label="value",...}
/// number`, and `# EOF` at the end. A label value may hold any character
/// but `"`, `\` and a newline, which it writes as `\"`, `\\` and `\n`.
fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    fn name_ok(s: &str, colon: bool) -> bool {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
    }
    let body = text
        .strip_suffix("# EOF\n")
        .ok_or("the text does not end with `# EOF`")?;
    let mut samples = Vec::new();
    for (n, line) in body.lines().enumerate() {
        let bad = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# ") {
            let mut w = rest.splitn(3, ' ');
            let (kind, name) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
            if !["HELP", "TYPE", "UNIT"].contains(&kind) || !name_ok(name, true) {
                return Err(bad("not a HELP, TYPE or UNIT line"));
            }
            continue;
        }
        let end = line.find(['{', ' ']).ok_or_else(|| bad("no value"))?;
        let name = &line[..end];
        if !name_ok(name, true) {
            return Err(bad("not a metric name"));
        }
        let mut rest = &line[end..];
        let mut labels = Vec::new();
        if let Some(mut r) = rest.strip_prefix('{') {
            loop {
                let eq = r.find('=').ok_or_else(|| bad("a label without `=`"))?;
                let key = &r[..eq];
                if !name_ok(key, false) {
                    return Err(bad("not a label name"));
                }
                let mut chars = r[eq + 1..]
                    .strip_prefix('"')
                    .ok_or_else(|| bad("a label value without `\"`"))?
                    .char_indices();
                let mut value = String::new();
                let close = loop {
                    match chars.next().ok_or_else(|| bad("an unclosed label value"))? {
                        (i, '"') => break i,
                        (_, '\\') => match chars.next() {
                            Some((_, '\\')) => value.push('\\'),
                            Some((_, '"')) => value.push('"'),
                            Some((_, 'n')) => value.push('\n'),
                            _ => return Err(bad("an escape other than \\\\, \\\" and \\n")),
                        },
                        (_, c) => value.push(c),
                    }
                };
                labels.push((key.to_string(), value));
                r = &r[eq + 2 + close + 1..];
                if let Some(more) = r.strip_prefix(',') {
                    r = more;
                } else {
                    rest = r
                        .strip_prefix('}')
                        .ok_or_else(|| bad("labels not closed by `}`"))?;
                    break;
                }
            }
        }
        let value = rest
            .strip_prefix(' ')
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| bad("not one space and a number after the name and labels"))?;
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(samples)
}

#[test]
fn the_strict_parser_takes_escapes_and_refuses_raw_quotes_and_newlines() {
    let good = "# TYPE m gauge\nm{a=\"x\\\"y\\\\z\\nw\",b=\"\"} 1\n# EOF\n";
    let s = parse_exposition(good).unwrap();
    assert_eq!(s[0].label("a"), Some("x\"y\\z\nw"));
    assert_eq!((s[0].label("b"), s[0].value), (Some(""), 1.0));
    for bad in [
        "m{a=\"x\"y\"} 1\n# EOF\n",
        "m{a=\"x\ny\"} 1\n# EOF\n",
        "m{a=\"x\\y\"} 1\n# EOF\n",
        "m{a=\"x\"} 1\n",
    ] {
        assert!(parse_exposition(bad).is_err(), "{bad:?}");
    }
}

/// A process named with a quote, a backslash, a newline, a comma and a
/// brace: every label value is escaped, the whole scrape parses, and its
/// comm and command line labels read back to the kernel's.
#[test]
fn odd_process_names_are_escaped_and_the_scrape_parses() {
    let _g = serial();
    let name = "a\"b\\c\nd,e}f=";
    let named = Named::start(name);
    let pid = named.pid();
    let serve = Serve::start(&["--interval", "500ms", "--budget", "100", "--cmdline"]);
    let text = serve.wait_for(
        |m| process_value(m, "pagescope_process_rss_bytes", pid).is_some(),
        "the named process",
    );
    let samples = parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let pid_label = pid.to_string();
    let ours: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.label("pid") == Some(&pid_label))
        .collect();
    let comm = String::from_utf8(named.comm()).unwrap();
    assert_eq!(comm, name, "the kernel keeps the name whole");
    let cmdline = named.cmdline();
    assert!(cmdline.ends_with(&format!("/{name} 600")), "{cmdline:?}");
    let names: Vec<&str> = ours.iter().map(|s| s.name.as_str()).collect();
    for family in [
        "pagescope_process_rss_bytes",
        "pagescope_process_figures_age_seconds",
    ] {
        assert!(names.contains(&family), "no {family} of {pid}: {names:?}");
    }
    for s in &ours {
        assert_eq!(s.label("comm"), Some(comm.as_str()), "{s:?}");
        if s.name != "pagescope_process_figures_age_seconds" {
            assert_eq!(s.label("cmdline"), Some(cmdline.as_str()), "{s:?}");
        }
    }
    assert!(samples.iter().any(|s| s.label("cgroup").is_some()));
}

#[test]
fn a_process_above_the_size_cap_is_not_walked() {
    let _g = serial();
    let pt = Pagetest::start(&[], &["--size", "64M", "--hold"], "done");
    let pid = pt.pid();
    let serve = Serve::start(&[
        "--interval",
        "500ms",
        "--budget",
        "100",
        "--max-process-size",
        "32M",
    ]);
    let text = serve.wait_for(
        |m| process_value(m, "pagescope_process_rss_bytes", pid).is_some(),
        "pagetest",
    );
    // RSS and swap from status; no PSS, USS or working set.
    let r = smaps_rollup(pid);
    let rss = process_value(&text, "pagescope_process_rss_bytes", pid).unwrap();
    assert!(rss.abs_diff(r["Rss"] * 1024) <= page_size(), "rss {rss}");
    for name in [
        "pagescope_process_pss_bytes",
        "pagescope_process_uss_bytes",
        "pagescope_process_working_set_bytes",
    ] {
        assert_eq!(
            process_value(&text, name, pid),
            None,
            "{name} of a skipped process"
        );
    }
    let skipped: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("pagescope_skipped_processes "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(skipped >= 1, "skipped {skipped}");
}

/// A process above `--max-working-set-size`: its PSS is read, its
/// referenced bits are left alone (clearing them would stall it while its
/// TLB refills), so the kernel still counts its whole buffer referenced,
/// and it has no working set but is counted as left out.
#[test]
fn a_process_above_the_working_set_cap_keeps_its_referenced_bits() {
    let _g = serial();
    let pt = Pagetest::start(&[], &["--size", "64M", "--hold"], "done");
    let pid = pt.pid();
    let serve = Serve::start(&[
        "--interval",
        "300ms",
        "--budget",
        "100",
        "--max-age",
        "1s",
        "--max-working-set-size",
        "32M",
    ]);
    let text = serve.wait_for(
        |m| process_value(m, "pagescope_process_pss_bytes", pid).is_some(),
        "pagetest",
    );
    // Walked again at least once more (--max-age), never cleared.
    let text = walked_again(&serve, text, pid);
    let text = matches_rollup_soon(&serve, text, &[pid]);
    assert_bits_left_alone(&text, pid, "above the cap");
}

/// A process another pagescope observes (the lock that `record --pid`
/// takes, here taken by the test itself) keeps its referenced bits: the
/// observer's figures are the bits it reads and clears itself. It has no
/// working set and is counted as left out; once the observer lets go,
/// its bits are cleared again and it has a working set.
#[test]
fn a_process_another_pagescope_observes_keeps_its_referenced_bits() {
    let _g = serial();
    let pt = Pagetest::start(&[], &["--size", "64M", "--hold"], "done");
    let pid = pt.pid();
    let lock = pagescope_linux::observer::ObserverLock::acquire(Path::new("/proc"), pid, "record")
        .unwrap()
        .expect("the tests run as root, who takes observer locks");
    let serve = Serve::start(&["--interval", "300ms", "--budget", "100", "--max-age", "1s"]);
    let text = serve.wait_for(
        |m| process_value(m, "pagescope_process_pss_bytes", pid).is_some(),
        "pagetest",
    );
    // Walked again at least once more (--max-age), never cleared.
    let mut text = walked_again(&serve, text, pid);
    assert_bits_left_alone(&text, pid, "observed");
    drop(lock);
    let deadline = Instant::now() + Duration::from_secs(30);
    while process_value(&text, "pagescope_process_working_set_bytes", pid).is_none() {
        assert!(
            Instant::now() < deadline,
            "no working set 30 s after the observer let go"
        );
        text = serve.next_collection(&text);
    }
    let referenced = smaps_rollup(pid)["Referenced"] * 1024;
    assert!(
        referenced < 64 * MIB / 2,
        "its referenced bits were not cleared once let go: {referenced} bytes referenced"
    );
}

/// A working set clears every process's referenced bits: while serve has
/// one, a whole-machine recording (which would clear the same bits) is
/// refused and told serve's pid; with `--backend none` serve clears
/// nothing and leaves the machine to others.
#[test]
fn a_working_set_keeps_the_machine_from_a_second_clearer() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sys.rec");
    let record = || {
        Command::new(pagescope_bin())
            .args(["record", "-q", "--system", "--backend", "refs"])
            .args(["--duration", "300ms", "-o"])
            .arg(&out)
            .output()
            .unwrap()
    };
    let serve = Serve::start(&["--interval", "1s", "--backend", "refs"]);
    let o = record();
    let said = failed_with(&o, 1);
    let who = format!("(pid {}, `serve`)", serve.child.id());
    assert!(said.contains(&who), "{said}");
    drop(serve);
    let serve = Serve::start(&["--interval", "1s", "--backend", "none"]);
    let o = record();
    assert!(o.status.success(), "{o:?}");
    drop(serve);
}

/// Processes above `--pagemap-above` are read from their pagemap and
/// kpagecount, paced, and their figures are smaps_rollup's all the same:
/// anonymous memory alone and shared with a forked child, a memfd shared
/// with a child, a shared file mapping, a buffer inside a mostly empty
/// 8 TiB reservation. Such a process has no refs
/// working set, and its referenced bits are left alone.
#[test]
fn figures_read_from_pagemap_are_smaps_rollup() {
    let _g = serial();
    let mut pts = Vec::new();
    for args in [
        &["--size", "64M", "--hold"][..],
        &["--size", "64M", "--fork", "1", "--hold"],
        &["--size", "64M", "--mode", "shm", "--fork", "1", "--hold"],
        &["--size", "64M", "--mode", "file", "--hold"],
        // In an 8 TiB reservation: its populated part found first.
        &["--size", "64M", "--reserve", "8T", "--hold"],
    ] {
        pts.push(Pagetest::start(&[], args, "done"));
    }
    let serve = Serve::start(&[
        "--interval",
        "300ms",
        "--budget",
        "100",
        "--pagemap-above",
        "32M",
    ]);
    let text = serve.wait_for(
        |m| {
            pts.iter()
                .all(|p| process_value(m, "pagescope_process_pss_bytes", p.pid()).is_some())
        },
        "the pagetests",
    );
    // Each pagetest, and the forked children, were read from pagemap in
    // the collection that first saw them.
    let paced: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("pagescope_pagemap_processes "))
        .expect("pagescope_pagemap_processes")
        .parse()
        .unwrap();
    assert!(paced >= 7, "{paced} processes read from pagemap");
    let pids: Vec<u32> = pts.iter().map(|p| p.pid()).collect();
    let text = matches_rollup_soon(&serve, text, &pids);
    for pt in &pts[1..3] {
        let pss = process_value(&text, "pagescope_process_pss_bytes", pt.pid()).unwrap();
        assert!(pss < 40 * MIB, "pss {pss} of {}: not shared", pt.pid());
    }
    for pt in &pts {
        // A held process's resident pages do not move: its RSS is exact,
        // each page smaps counts and no other (not the vDSO's).
        let rss = process_value(&text, "pagescope_process_rss_bytes", pt.pid()).unwrap();
        assert_eq!(
            rss,
            smaps_rollup(pt.pid())["Rss"] * 1024,
            "rss of {}",
            pt.pid()
        );
        assert_eq!(
            process_value(&text, "pagescope_process_working_set_bytes", pt.pid()),
            None,
            "a working set for {}, read from pagemap",
            pt.pid()
        );
        let referenced = smaps_rollup(pt.pid())["Referenced"] * 1024;
        assert!(
            referenced >= 64 * MIB,
            "the referenced bits of {} were cleared: {referenced} bytes referenced",
            pt.pid()
        );
    }
    // The children die with their parents; wait until they are gone, so
    // that their exit does not move the next test's figures (they map
    // the same pagetest binary and C library).
    let forked: Vec<i32> = pts[1..3].iter().flat_map(children).collect();
    drop(pts);
    let deadline = Instant::now() + Duration::from_secs(10);
    // Alive: its stat readable, and not a zombie (whose memory is gone).
    let alive = |c: &i32| {
        std::fs::read_to_string(format!("/proc/{c}/stat")).is_ok_and(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, r)| !r.starts_with('Z'))
        })
    };
    while forked.iter().any(alive) {
        assert!(
            Instant::now() < deadline,
            "the forked children outlived their parents"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process whose main thread has exited while its other threads run
/// on (a zombie leader) shows no memory in `/proc/PID`; serve reads it
/// through a live thread, as `snapshot` does, under its own pid and name:
/// its figures are the kernel's smaps_rollup of that thread
/// (`/proc/PID/task/TID/smaps_rollup`), read from smaps_rollup and from
/// pagemap (`--pagemap-above`).
#[test]
fn a_process_whose_main_thread_exited_is_counted() {
    require_pfns!();
    let _g = serial();
    let args = ["--size", "64M", "--mode", "anon", "--leader-exits"];
    let pt = Pagetest::start(&[], &args, "leader-exits");
    let (pid, tid) = leader_exited(&pt);
    // The kernel shows the memory through the thread only.
    let leader = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    assert!(!leader.contains("Rss:"), "{leader}");
    let rss = task_smaps_rollup(pid, tid)["Rss"] * 1024;
    assert!(rss >= 64 * MIB, "the held buffer is resident: {rss}");
    for paced in [false, true] {
        let mut args = vec!["--interval", "300ms", "--budget", "100"];
        if paced {
            args.extend(["--pagemap-above", "32M"]);
        }
        let serve = Serve::start(&args);
        let text = soon(&serve, serve.metrics().unwrap(), |t| {
            matches_kernel(t, pid, &task_smaps_rollup(pid, tid))
        });
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("pagescope_process_rss_bytes{{pid=\"{pid}\",")))
            .unwrap();
        assert!(line.contains("comm=\"pagetest\""), "{line}");
        // A held buffer does not move: its RSS is exact.
        let said = process_value(&text, "pagescope_process_rss_bytes", pid).unwrap();
        assert_eq!(
            said,
            task_smaps_rollup(pid, tid)["Rss"] * 1024,
            "paced {paced}"
        );
        // Its referenced bits are cleared through the thread (a working
        // set from the next collection on), except when read from
        // pagemap, which has no accessed bit.
        let text = serve.next_collection(&text);
        let ws = process_value(&text, "pagescope_process_working_set_bytes", pid);
        assert_eq!(ws.is_some(), !paced, "paced {paced}: working set {ws:?}");
    }
}

/// A file of /dev/shm (argv[1]) mapped twice, shared and private
/// writable: the private mapping writes its first quarter (its own
/// copies) and reads its second; then the shared mapping's first and
/// last quarters (the file's pages only it maps) and the private copies
/// are paged out. smaps counts the file's swap whole in the shared
/// mapping, and in the private one only where it has no page table
/// entry (its last half), besides its copies' swap entries.
const PRIVATE_SHMEM: &str = r#"
import ctypes, mmap, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PAGE, N, PAGEOUT = mmap.PAGESIZE, 4096, 21
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.unlink(sys.argv[1])
os.ftruncate(fd, N * PAGE)
rw = mmap.PROT_READ | mmap.PROT_WRITE
sh = mmap.mmap(fd, N * PAGE, mmap.MAP_SHARED, rw)
for i in range(N):
    sh[i * PAGE] = 1
pr = mmap.mmap(fd, N * PAGE, mmap.MAP_PRIVATE, rw)
for i in range(N // 4):
    pr[i * PAGE] = 2
x = sum(pr[i * PAGE] for i in range(N // 4, N // 2))
a_sh = ctypes.addressof(ctypes.c_char.from_buffer(sh))
a_pr = ctypes.addressof(ctypes.c_char.from_buffer(pr))
for addr, pages in [(a_sh, N // 4), (a_sh + N // 2 * PAGE, N // 2), (a_pr, N // 4)]:
    if libc.madvise(addr, pages * PAGE, PAGEOUT) != 0:
        sys.exit("madvise(MADV_PAGEOUT): errno %d" % ctypes.get_errno())
print("ready", flush=True)
time.sleep(3600)
"#;

/// Shared memory in swap has no entry in pagemap (its page table entry
/// is empty; the swap entry is in the file's page cache): read from
/// pagemap (`--pagemap-above`), a process's swap is still smaps_rollup's
/// `Swap`, for a memfd and for a file of a tmpfs, each half paged out,
/// and for a private writable mapping of a tmpfs file ([`PRIVATE_SHMEM`]).
#[test]
fn shared_memory_in_swap_read_from_pagemap_is_smaps_rollups() {
    require_pfns!();
    let _g = serial();
    let _swap = match Swapfile::on() {
        Ok(s) => s,
        Err(why) => skip!("swap", why),
    };
    let dir = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm (tmpfs)");
    let dir_arg = dir.path().to_str().unwrap();
    let mut pts = Vec::new();
    for mode in [
        &["--mode", "shm"][..],
        &["--mode", "file", "--dir", dir_arg],
    ] {
        let args = [mode, &["--size", "64M", "--pageout", "0.5", "--hold"]].concat();
        let pt = Pagetest::start(&[], &args, "done");
        let swap = smaps_rollup(pt.pid())["Swap"] * 1024;
        assert!(
            swap >= 32 * MIB * 95 / 100,
            "the kernel paged out {swap} bytes of the 32 MiB asked"
        );
        pts.push(pt);
    }
    let python = Command::new("python3")
        .args(["-c", PRIVATE_SHMEM])
        .arg(dir.path().join("private"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut python = Killed(python);
    let mut ready = String::new();
    std::io::BufReader::new(python.0.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready.trim(), "ready", "python3 did not map and page out");
    let py = python.0.id();
    // Its own copies' swap, and most of its file's in both mappings.
    let swap = smaps_rollup(py)["Swap"] * 1024;
    assert!(swap >= 8 * MIB, "the kernel paged out {swap} bytes");
    let serve = Serve::start(&[
        "--interval",
        "300ms",
        "--budget",
        "100",
        "--pagemap-above",
        "16M",
    ]);
    let mut pids: Vec<u32> = pts.iter().map(|p| p.pid()).collect();
    pids.push(py);
    let text = soon(&serve, serve.metrics().unwrap(), |t| {
        pids.iter()
            .try_for_each(|&p| matches_kernel(t, p, &smaps_rollup(p)))
    });
    for &pid in &pids[..2] {
        let swap = process_value(&text, "pagescope_process_swap_bytes", pid).unwrap();
        assert!(swap >= 30 * MIB, "swap of {pid}: {swap}");
    }
    // Read from pagemap: no working set.
    let text = serve.next_collection(&text);
    for &pid in &pids {
        let ws = process_value(&text, "pagescope_process_working_set_bytes", pid);
        assert_eq!(ws, None, "{pid} was not read from pagemap");
    }
}

#[test]
fn working_set_is_what_pagetest_writes_per_interval() {
    let _g = serial();
    let serve = Serve::start(&["--interval", "1s", "--budget", "100", "--backend", "refs"]);
    let pt = Pagetest::start(
        &[],
        &["--size", "64M", "--iterations", "100000", "--sleep", "1s"],
        "iteration",
    );
    let pid = pt.pid();
    let mut text = serve.wait_for(
        |m| process_value(m, "pagescope_process_working_set_bytes", pid).is_some(),
        "working set of pagetest",
    );
    let mut values = Vec::new();
    for _ in 0..7 {
        values.push(process_value(&text, "pagescope_process_working_set_bytes", pid).unwrap());
        text = serve.next_collection(&text);
    }
    // A collection that falls inside a pass (about 2% of the time here)
    // splits that pass between two intervals: no process is stopped. So
    // the median, and no interval above the buffer.
    let expected = (64 * MIB) as f64;
    values.sort_unstable();
    let median = values[values.len() / 2] as f64;
    assert_close("median working set", median, expected, 2.0);
    assert!(
        values.iter().all(|&v| (v as f64) <= expected * 1.02),
        "{values:?}"
    );
    // With --backend none the metric is absent, not 0.
    drop(serve);
    let serve = Serve::start(&[
        "--interval",
        "500ms",
        "--budget",
        "100",
        "--backend",
        "none",
    ]);
    let text = serve.next_collection(&serve.metrics().unwrap());
    assert!(process_value(&text, "pagescope_process_pss_bytes", pid).is_some());
    assert!(
        !text.contains("working_set"),
        "a working set with --backend none"
    );
}

/// Prometheus' HTTP API: the value of `query`, if it has one.
fn prometheus_query(port: u16, query: &str) -> Option<f64> {
    let v = prometheus_answer(port, query)?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Prometheus' HTTP API: its answer to `query` (`None` if it refused
/// the query or could not be reached).
fn prometheus_answer(port: u16, query: &str) -> Option<Value> {
    let mut q = String::new();
    for b in query.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' => q.push(b as char),
            _ => q.push_str(&format!("%{b:02X}")),
        }
    }
    let raw = format!("GET /api/v1/query?query={q} HTTP/1.0\r\n\r\n");
    let (head, body) = request(port, raw.as_bytes()).ok()?;
    if status(&head) != "200" {
        return None;
    }
    serde_json::from_str(&body).ok()
}

/// A Prometheus server run by hand on 127.0.0.1 (no service), its data
/// in a temporary directory; killed by its pid when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target_port: u16) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: pagescope\n    static_configs:\n\
                 \x20     - targets: ['127.0.0.1:{target_port}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new("/usr/bin/prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        Prometheus {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn prometheus_scrapes_the_pss_of_a_held_process() {
    if !Path::new("/usr/bin/prometheus").exists() {
        skip!(
            "prometheus",
            "no /usr/bin/prometheus (Debian package prometheus)"
        );
    }
    let _g = serial();
    let pt = Pagetest::start(&[], &["--size", "64M", "--hold"], "done");
    let pid = pt.pid();
    let serve = Serve::start(&["--interval", "1s", "--budget", "100"]);
    let prom = Prometheus::start(serve.port);
    let query = format!("pagescope_process_pss_bytes{{pid=\"{pid}\"}}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let pss = loop {
        if let Some(v) = prometheus_query(prom.port, &query) {
            break v as u64;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus has no {query} after 60 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let truth = smaps_rollup(pid)["Pss"] * 1024;
    assert!(
        pss.abs_diff(truth) <= page_size(),
        "Prometheus says {pss}, smaps_rollup {truth}"
    );
    assert!(truth >= 64 * MIB);
    // Prometheus parsed every family: pagescope's own cost is there too.
    assert!(prometheus_query(prom.port, "pagescope_collection_cpu_seconds_total").is_some());
    // Every query of the example Grafana dashboard is one Prometheus
    // takes, and each metric it names has series.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut exprs = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$k", "5")
                .replace("$instance", ".*")
                .replace("$__rate_interval", "1m");
            // rate() needs two samples; the rest have series once
            // Prometheus has scraped a collection with them (the
            // working set: from a process's second collection on).
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let answer = prometheus_answer(prom.port, &expr)
                    .unwrap_or_else(|| panic!("Prometheus refused the dashboard's {expr}"));
                assert_eq!(answer["status"], "success", "{expr}: {answer}");
                let empty = answer["data"]["result"].as_array().unwrap().is_empty();
                if expr.starts_with("rate(") || !empty {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "no series for the dashboard's {expr} in 30 s"
                );
                std::thread::sleep(Duration::from_millis(500));
            }
            exprs += 1;
        }
    }
    assert!(exprs >= 15, "{exprs} queries in the dashboard");
}

#[test]
fn bad_addresses_are_one_line_and_exit_2() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    for listen in [
        "nonsense",
        "127.0.0.1",
        "127.0.0.1:99999",
        "localhost:99999",
        "::1",
        ":9464",
        "no-such-host.invalid:9464",
        taken.as_str(),
    ] {
        let out = run(&[], &["serve", "--listen", listen]);
        let err = failed_with(&out, 2);
        assert_eq!(err.lines().count(), 1, "{listen}: {err}");
        assert!(err.starts_with("error: "), "{err}");
        if listen == taken {
            assert!(err.contains("in use"), "{err}");
        }
        if listen.contains(".invalid") {
            assert!(
                err.contains("no-such-host.invalid does not resolve"),
                "{err}"
            );
        }
    }
}

/// `--listen localhost:PORT`: the name is resolved (to 127.0.0.1 by
/// /etc/hosts), bound, scraped, and the address said.
#[test]
fn a_host_name_is_resolved_and_listened_on() {
    let addrs: Vec<std::net::SocketAddr> =
        std::net::ToSocketAddrs::to_socket_addrs(&("localhost", 1))
            .map(Iterator::collect)
            .unwrap_or_default();
    if !addrs
        .iter()
        .any(|a| a.ip() == std::net::Ipv4Addr::LOCALHOST)
    {
        skip(
            "localhost",
            &format!("localhost resolves to {addrs:?}, not 127.0.0.1 (/etc/hosts)"),
        );
        return;
    }
    let serve = Serve::start_on("localhost", &["--interval", "1s", "--backend", "none"]);
    let text = serve.metrics().expect("a scrape");
    assert!(text.contains("pagescope_machine_free_bytes"), "{text}");
    let port = serve.port;
    let (code, err) = serve.stop(rustix::process::Signal::TERM);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(&format!("http://127.0.0.1:{port}/metrics")),
        "{err}"
    );
}

#[test]
fn malformed_requests_are_answered_and_serving_goes_on() {
    let serve = Serve::start(&["--interval", "1s", "--backend", "none"]);
    for (raw, code) in [
        (&b"GARBAGE\r\n\r\n"[..], "400"),
        (b"GET\r\n\r\n", "400"),
        (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", "400"),
        // Bytes that are not text: tiny_http closes the connection
        // without an answer (it can't tell where a next request starts).
        (b"\x00\x01\x02\xff\xfe\r\n\r\n", ""),
        (b"POST /metrics HTTP/1.0\r\n\r\n", "405"),
        (b"GET /nothing-here HTTP/1.0\r\n\r\n", "404"),
    ] {
        let (head, _) = request(serve.port, raw).unwrap();
        assert!(
            status(&head) == code,
            "{:?}: answered {head:?}",
            String::from_utf8_lossy(raw)
        );
        assert!(serve.metrics().is_some(), "not serving after {raw:?}");
    }
    // A client that sends half a request and goes away.
    drop(TcpStream::connect(("127.0.0.1", serve.port)).unwrap());
    let mut s = TcpStream::connect(("127.0.0.1", serve.port)).unwrap();
    s.write_all(b"GET /met").unwrap();
    drop(s);
    assert!(serve.metrics().is_some());
}

#[test]
fn sigint_exits_130_and_sigterm_0() {
    let serve = Serve::start(&["--interval", "1s", "--backend", "none"]);
    let (code, err) = serve.stop(rustix::process::Signal::INT);
    assert_eq!(code, Some(130), "{err}");
    let serve = Serve::start(&["--interval", "1s", "--backend", "none"]);
    let (code, err) = serve.stop(rustix::process::Signal::TERM);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("error"), "{err}");
}

/// `pagescope_process_figures_age_seconds` of `pid`.
/// Asserts that `pid`, a pagetest holding 64 MiB that the working set
/// must leave alone (`why`), has none in `text`, is counted as left out,
/// and still has its whole buffer referenced: its bits were not cleared.
fn assert_bits_left_alone(text: &str, pid: u32, why: &str) {
    assert_eq!(
        process_value(text, "pagescope_process_working_set_bytes", pid),
        None,
        "{why}"
    );
    let left_out: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("pagescope_working_set_skipped_processes "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(left_out >= 1, "{why}: left out {left_out}");
    let referenced = smaps_rollup(pid)["Referenced"] * 1024;
    assert!(
        referenced >= 64 * MIB,
        "{why}: its referenced bits were cleared: {referenced} bytes referenced"
    );
}

/// The first collection after `text` in which `pid` was walked again:
/// its figures' age went down since the collection before (between two
/// collections that leave it alone, the age grows by the interval).
fn walked_again(serve: &Serve, mut text: String, pid: u32) -> String {
    loop {
        let before = age_of(&text, pid).unwrap();
        text = serve.next_collection(&text);
        if age_of(&text, pid).unwrap() < before {
            return text;
        }
    }
}

fn age_of(text: &str, pid: u32) -> Option<f64> {
    let prefix = format!("pagescope_process_figures_age_seconds{{pid=\"{pid}\",");
    text.lines()
        .find(|l| l.starts_with(&prefix))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
}

/// The pids of the children a `--fork` pagetest made.
fn children(pt: &Pagetest) -> Vec<i32> {
    let forked = pt.lines.iter().find(|l| l["event"] == "forked").unwrap();
    let pids = forked["pids"].as_array().unwrap();
    pids.iter().map(|p| p.as_i64().unwrap() as i32).collect()
}

/// Idle processes are not walked at every collection, so what changes
/// their figures without them running must make them walked: here a
/// process sharing their pages goes away (a forked child of a private
/// anonymous buffer: its pages become the parent's alone again; of a
/// memfd buffer: the same through a shared file). Each parent sleeps
/// throughout, and its figures after the child's end are the kernel's.
/// And no figure gets older than --max-age.
#[test]
fn an_idle_process_is_walked_again_when_a_sharer_goes() {
    let _g = serial();
    let mut pts = Vec::new();
    for mode in ["anon", "shm"] {
        let pt = Pagetest::start(
            &[],
            &["--size", "64M", "--mode", mode, "--fork", "1", "--hold"],
            "done",
        );
        pts.push(pt);
    }
    let serve = Serve::start(&[
        "--interval",
        "300ms",
        "--budget",
        "100",
        "--backend",
        "none",
        "--max-age",
        "3s",
    ]);
    let mut text = serve.wait_for(
        |m| pts.iter().all(|p| age_of(m, p.pid()).is_some()),
        "the pagetests",
    );
    let pids: Vec<u32> = pts.iter().map(|p| p.pid()).collect();
    text = matches_rollup_soon(&serve, text, &pids);
    for pt in &pts {
        let pss = process_value(&text, "pagescope_process_pss_bytes", pt.pid()).unwrap();
        // Shared with the child: about half of the buffer is its PSS.
        assert!(pss < 40 * MIB, "pss {pss} of {}", pt.pid());
    }
    // The age bound holds (3 s, and a collection's length of slack).
    for _ in 0..12 {
        text = serve.next_collection(&text);
        for pt in &pts {
            let age = age_of(&text, pt.pid()).unwrap();
            assert!(age <= 4.0, "age {age} of {}", pt.pid());
        }
    }
    for pt in &pts {
        for child in children(pt) {
            let pid = rustix::process::Pid::from_raw(child).unwrap();
            rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
        }
    }
    // The children are reaped by the kernel (pagetest never waits for
    // them: they stay zombies, their memory gone).
    std::thread::sleep(Duration::from_millis(200));
    let text = serve.next_collection(&serve.next_collection(&text));
    // Walked again at once: the first collection after the children went
    // has the whole buffer, and a fresh age.
    for pt in &pts {
        let pss = process_value(&text, "pagescope_process_pss_bytes", pt.pid()).unwrap();
        assert!(
            pss >= 64 * MIB,
            "pss {pss} of {} after its child went",
            pt.pid()
        );
    }
    let text = matches_rollup_soon(&serve, text, &pids);
    for pt in &pts {
        let age = age_of(&text, pt.pid()).unwrap();
        assert!(
            age < 1.0,
            "age {age}: not walked again after the child went"
        );
    }
}
