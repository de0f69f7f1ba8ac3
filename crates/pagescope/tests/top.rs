//! `pagescope top` in a real terminal: tmux runs it in a shell, the
//! tests press its keys (`send-keys`) and read the screen
//! (`capture-pane`). Its figures are checked against the kernel's
//! smaps_rollup and status of held pagetests and against pagetest's known
//! access pattern; its sort and filter against the figures on the
//! screen; its detail against pagetest's buffer; its way out against
//! tmux's own view of the terminal (no alternate screen, the shell's
//! prompt back, the exit code).

#[macro_use]
mod util;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use util::named::Named;
use util::*;

const MIB: f64 = 1024.0 * 1024.0;

/// A tmux server of its own (its socket named after the session) with
/// one 200x50 session running bash; the session is killed when dropped.
struct Tmux {
    name: String,
}

impl Tmux {
    /// Starts the session, or `None` (skipped) without tmux.
    fn start(tag: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            skip("tmux", "tmux is not installed (apt-get install tmux)");
            return None;
        }
        let t = Tmux {
            name: format!("pagescope-top-{tag}-{}", std::process::id()),
        };
        let out = t.tmux(&[
            "new-session",
            "-d",
            "-s",
            &t.name,
            "-x",
            "200",
            "-y",
            "50",
            "-e",
            "PS1=$ ",
            "--",
            "bash",
            "--norc",
            "--noprofile",
        ]);
        assert!(out.status.success(), "tmux new-session: {out:?}");
        t.wait_for("the shell's prompt", |s| s.starts_with("$"));
        Some(t)
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.name, "-f", "/dev/null"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("tmux runs")
    }

    /// Presses keys (tmux key names: `Enter`, `Escape`, `C-c`, `Down`).
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.name];
        args.extend_from_slice(keys);
        assert!(self.tmux(&args).status.success());
    }

    /// Types `text` literally, then Enter.
    fn line(&self, text: &str) {
        assert!(self
            .tmux(&["send-keys", "-t", &self.name, "-l", text])
            .status
            .success());
        self.keys(&["Enter"]);
    }

    /// The screen's text.
    fn screen(&self) -> String {
        let out = self.tmux(&["capture-pane", "-p", "-t", &self.name]);
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether the terminal is in the alternate screen.
    fn alternate_on(&self) -> bool {
        let out = self.tmux(&["display", "-p", "-t", &self.name, "#{alternate_on}"]);
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }

    /// Waits (60 s at most: a refresh may be stretched by the budget) until the screen satisfies `ok` and holds
    /// still (two captures alike), and returns it.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        loop {
            let s = self.screen();
            if ok(&s) && s == last {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "waited 60 s for {what}; the screen:\n{s}"
            );
            last = s;
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-session", "-t", &self.name]);
    }
}

/// A size as the table prints it (`-` is `None`), in bytes.
fn parse_size(text: &str) -> Option<f64> {
    let (n, unit) = text.split_once(' ').unwrap_or((text, "B"));
    let scale = match unit {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => MIB,
        "GiB" => MIB * 1024.0,
        "TiB" => MIB * MIB,
        _ => panic!("{text:?}: not a size"),
    };
    match n {
        "-" => None,
        n => Some(n.parse::<f64>().unwrap() * scale),
    }
}

/// A row of the process table.
#[derive(Debug)]
struct Row {
    pid: u32,
    name: String,
    /// PSS, USS, RSS, swap, working set: as printed, and in bytes.
    text: Vec<String>,
    sizes: Vec<Option<f64>>,
    /// AGE: how old the figures are, in seconds (`None`: `-`).
    age: Option<u64>,
}

/// The rows of the process table on `screen` (between its heading and
/// the line of keys).
fn rows(screen: &str) -> Vec<Row> {
    let lines: Vec<&str> = screen.lines().collect();
    let head = lines
        .iter()
        .position(|l| l.contains("PID") && l.contains("NAME"))
        .unwrap_or_else(|| panic!("no table heading:\n{screen}"));
    let mut out = Vec::new();
    for l in &lines[head + 1..] {
        let mut tokens: Vec<&str> = l.split_whitespace().collect();
        if tokens.first().and_then(|t| t.parse::<u32>().ok()).is_none() {
            break;
        }
        // The age last, then five sizes from the end: `-`, `0`, or a
        // number and a unit.
        let age = tokens.pop().unwrap();
        let age = (age != "-").then(|| age.strip_suffix('s').unwrap().parse().unwrap());
        let mut text = Vec::new();
        while text.len() < 5 {
            let t = tokens.pop().unwrap();
            if ["B", "KiB", "MiB", "GiB", "TiB"].contains(&t) {
                text.push(format!("{} {t}", tokens.pop().unwrap()));
            } else {
                text.push(t.to_string());
            }
        }
        text.reverse();
        out.push(Row {
            pid: tokens[0].parse().unwrap(),
            name: tokens[1..].join(" "),
            sizes: text.iter().map(|t| parse_size(t)).collect(),
            text,
            age,
        });
    }
    out
}

fn row_of(screen: &str, pid: u32) -> Option<Row> {
    rows(screen).into_iter().find(|r| r.pid == pid)
}

/// Column `i`'s sizes are largest first (those missing last).
fn assert_sorted_by(screen: &str, i: usize, what: &str) {
    let rows = rows(screen);
    assert!(rows.len() >= 2, "{screen}");
    let keys: Vec<f64> = rows.iter().map(|r| r.sizes[i].unwrap_or(-1.0)).collect();
    assert!(
        keys.windows(2).all(|w| w[0] >= w[1]),
        "not sorted by {what}:\n{screen}"
    );
}

const PSS: usize = 0;
const RSS: usize = 2;
const WSET: usize = 4;

/// Starts `pagescope top` (under `wrapper`) in the session and waits for
/// its second refresh (a working set on the screen).
fn start_top(t: &Tmux, wrapper: &[&str]) -> String {
    let mut cmd: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
    cmd.push(pagescope_bin().to_str().unwrap().to_string());
    cmd.push("top".into());
    t.line(&cmd.join(" "));
    t.wait_for("top's second refresh", |s| {
        s.contains("sort: PSS") && rows(s).iter().any(|r| r.text[WSET] != "-")
    })
}

/// Types `/pagetest` and waits for the filtered table sorted by `sort`.
fn filter_pagetest(t: &Tmux, sort: &str, pids: &[u32]) -> String {
    t.keys(&["/"]);
    t.line("pagetest");
    t.wait_for("the filter", |s| {
        s.contains("filter: pagetest")
            && s.contains(&format!("sort: {sort}"))
            && pids.iter().all(|p| row_of(s, *p).is_some())
    })
}

#[test]
fn top_shows_the_kernels_figures_sorts_filters_details_and_quits() {
    let _serial = serial();
    let Some(t) = Tmux::start("main") else { return };
    // `looping` touches its 64 MiB every 200 ms; `held` wrote 256 MiB
    // and sleeps (above the default --max-working-set-size, 128 MiB).
    let looping = Pagetest::start(
        &[],
        &[
            "--size",
            "64M",
            "--iterations",
            "100000",
            "--sleep",
            "200ms",
        ],
        "iteration",
    );
    let held = Pagetest::start(&[], &["--size", "256M", "--op", "write", "--hold"], "done");
    let (lp, hp) = (looping.pid(), held.pid());
    let screen = start_top(&t, &[]);
    assert!(t.alternate_on());
    assert!(screen.contains("PSS▼"), "{screen}");
    assert_sorted_by(&screen, PSS, "PSS");
    // The machine's totals and pagescope's own CPU are in the header.
    let cpu_line = screen.lines().next().unwrap();
    assert!(
        cpu_line.contains("own CPU") && cpu_line.contains('%'),
        "{screen}"
    );
    assert!(
        screen.contains("page cache") && screen.contains("free"),
        "{screen}"
    );

    // `r`: by RSS.
    t.keys(&["r"]);
    let screen = t.wait_for("sorted by RSS", |s| s.contains("sort: RSS"));
    assert!(screen.contains("RSS▼"), "{screen}");
    assert_sorted_by(&screen, RSS, "RSS");

    // `/pagetest`: only pagetest's rows (other pagetests of other test
    // runs may be there too).
    t.keys(&["p"]);
    let screen = filter_pagetest(&t, "PSS", &[lp, hp]);
    let rows_now = rows(&screen);
    assert!(rows_now.iter().all(|r| r.name == "pagetest"), "{screen}");
    assert_sorted_by(&screen, PSS, "PSS");

    // PSS in MiB, within 1% of smaps_rollup.
    let row = row_of(&screen, hp).unwrap();
    let kernel = smaps_rollup(hp)["Pss"] as f64 * 1024.0;
    assert!(row.text[PSS].ends_with(" MiB"), "{row:?}");
    assert_close("held pagetest's PSS", row.sizes[PSS].unwrap(), kernel, 1.0);
    // The working set: the looping one referenced all of its buffer
    // (and a little code and stack, and the shared library pages that
    // other processes referenced: the refs backend counts a page's
    // referenced flag, whoever set it). The sleeper is above the cap: no
    // working set, and its referenced bits left as they were.
    assert_eq!(row.text[WSET], "-", "{row:?}");
    let referenced = smaps_rollup(hp)["Referenced"] as f64 * 1024.0;
    assert!(
        referenced >= 256.0 * MIB,
        "held's bits cleared: {referenced}"
    );
    let l = row_of(&screen, lp).unwrap();
    let ws = l.sizes[WSET].unwrap();
    assert!((64.0 * MIB..72.0 * MIB).contains(&ws), "{l:?}");
    // AGE: the looping one ran, so (with refs) it was walked at this
    // refresh; the held one's figures stand until a signal, and never
    // longer than --max-age (1m by default).
    assert!(l.age.unwrap() <= 3, "{l:?}");
    assert!(row.age.unwrap() <= 60, "{row:?}");

    let order = |rows: &[Row]| -> Vec<u32> {
        rows.iter()
            .map(|r| r.pid)
            .filter(|p| [lp, hp].contains(p))
            .collect()
    };
    // By PSS the 256 MiB one is first; by pid the older one.
    assert_eq!(order(&rows_now), [hp, lp], "{screen}");
    t.keys(&["i"]);
    let screen = t.wait_for("sorted by pid", |s| s.contains("sort: PID"));
    let by_pid = rows(&screen);
    assert!(by_pid.windows(2).all(|w| w[0].pid < w[1].pid), "{screen}");
    assert_eq!(order(&by_pid), if lp < hp { [lp, hp] } else { [hp, lp] });

    // Enter on the held pagetest: its VMAs, its buffer first.
    let at = by_pid.iter().position(|r| r.pid == hp).unwrap();
    t.keys(&["Home"]);
    for _ in 0..at {
        t.keys(&["Down"]);
    }
    t.keys(&["Enter"]);
    let (start, end) = held.buffer();
    let vma = format!("{start:x}-{end:x}");
    let screen = t.wait_for("the detail", |s| s.contains(&format!("pid {hp} pagetest")));
    let line = screen
        .lines()
        .find(|l| l.contains(&vma))
        .unwrap_or_else(|| panic!("no VMA {vma}:\n{screen}"));
    // Its size, RSS, PSS and REF: 256 MiB, all resident, all referenced
    // (its referenced bits are left alone above the working-set cap).
    assert_eq!(line.matches("256.0 MiB").count(), 4, "{line}");
    assert!(line.contains("██████████"), "{line}");
    assert!(screen.contains("working set per refresh"), "{screen}");
    // (Each Escape on its own: Escape and a key at once read as Alt and
    // the key.)
    t.keys(&["Escape"]);
    t.wait_for("the table again", |s| {
        s.contains("PID") && s.contains("NAME")
    });
    t.keys(&["Escape"]);
    t.wait_for("no filter", |s| !s.contains("filter: "));

    // `c`: cgroups; the held pagetest's cgroup sums at least its PSS.
    t.keys(&["c"]);
    let screen = t.wait_for("cgroups", |s| s.contains("CGROUP"));
    let cgroup = std::fs::read_to_string(format!("/proc/{hp}/cgroup")).unwrap();
    let cgroup = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup v2 path");
    let line = screen
        .lines()
        .find(|l| l.split_whitespace().next() == Some(cgroup))
        .unwrap_or_else(|| panic!("no row of cgroup {cgroup}:\n{screen}"));
    let pss = line.split_whitespace().collect::<Vec<_>>();
    let pss = parse_size(&format!("{} {}", pss[1], pss[2])).unwrap();
    assert!(pss >= 0.99 * kernel, "{line}");

    // `q`: the shell is back, and nothing of top is left on the screen.
    t.keys(&["q"]);
    let screen = t.wait_for("the shell", |s| s.trim_end().ends_with('$'));
    assert!(!t.alternate_on());
    assert!(
        !screen.contains("machine ") && !screen.contains("PSS"),
        "{screen}"
    );
    t.line("echo rc=$?");
    t.wait_for("top's exit code", |s| s.contains("rc=0"));
}

#[test]
fn without_root_the_missing_figures_show_as_such_and_ctrl_c_restores() {
    let _serial = serial();
    let Some(nobody) = as_nobody() else { return };
    let Some(t) = Tmux::start("nobody") else {
        return;
    };
    let held = Pagetest::start(&[], &["--size", "64M", "--op", "write", "--hold"], "done");
    let pid = held.pid();
    // Nobody reads status (RSS, swap), not root's smaps_rollup.
    start_top(&t, &nobody);
    let screen = filter_pagetest(&t, "PSS", &[pid]);
    let row = row_of(&screen, pid).unwrap();
    assert_eq!(row.text[PSS], "-", "{row:?}");
    assert_eq!(row.text[WSET], "-", "{row:?}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_close(
        "RSS from status",
        row.sizes[RSS].unwrap(),
        rss_kb * 1024.0,
        1.0,
    );
    let notes: Vec<&str> = screen.lines().filter(|l| l.starts_with("note:")).collect();
    assert_eq!(notes.len(), 1, "{screen}");
    assert!(notes[0].contains("without root"), "{screen}");

    t.keys(&["C-c"]);
    t.wait_for("the shell", |s| s.trim_end().ends_with('$'));
    assert!(!t.alternate_on());
    t.line("echo rc=$?");
    t.wait_for("top's exit code", |s| s.contains("rc=130"));
}

/// A process whose main thread has exited while its other threads run
/// on (a zombie leader) is listed under its pid and name, with the
/// kernel's figures from a live thread's smaps_rollup, and its detail is
/// that thread's smaps: its buffer first.
#[test]
fn a_process_whose_main_thread_exited_is_listed() {
    let _serial = serial();
    let Some(t) = Tmux::start("leader") else {
        return;
    };
    let args = ["--size", "64M", "--mode", "anon", "--leader-exits"];
    let pt = Pagetest::start(&[], &args, "leader-exits");
    let (pid, tid) = leader_exited(&pt);
    start_top(&t, &[]);
    t.keys(&["i"]);
    let screen = filter_pagetest(&t, "PID", &[pid]);
    let row = row_of(&screen, pid).unwrap();
    assert_eq!(row.name, "pagetest", "{row:?}");
    let kernel = task_smaps_rollup(pid, tid);
    assert_close(
        "RSS",
        row.sizes[RSS].unwrap(),
        kernel["Rss"] as f64 * 1024.0,
        1.0,
    );
    assert_close(
        "PSS",
        row.sizes[PSS].unwrap(),
        kernel["Pss"] as f64 * 1024.0,
        1.0,
    );
    // Enter on it: its VMAs, read through the thread.
    let at = rows(&screen).iter().position(|r| r.pid == pid).unwrap();
    t.keys(&["Home"]);
    for _ in 0..at {
        t.keys(&["Down"]);
    }
    t.keys(&["Enter"]);
    let (start, end) = pt.buffer();
    let vma = format!("{start:x}-{end:x}");
    let screen = t.wait_for("the detail", |s| s.contains(&format!("pid {pid} pagetest")));
    let line = screen
        .lines()
        .find(|l| l.contains(&vma))
        .unwrap_or_else(|| panic!("no VMA {vma}:\n{screen}"));
    assert!(line.matches("64.0 MiB").count() >= 3, "{line}");
    t.keys(&["Escape"]);
    t.wait_for("the table again", |s| {
        s.contains("PID") && s.contains("NAME")
    });
    t.keys(&["q"]);
    t.wait_for("the shell", |s| s.trim_end().ends_with('$'));
}

/// While another pagescope clears every process's referenced bits (here
/// a whole-machine recording), top has no working set (clearing them too
/// would make both counts short), and its header says whose the bits are.
#[test]
fn beside_another_pagescope_clearing_bits_top_has_no_working_set_and_says_whose() {
    let _serial = serial();
    let Some(t) = Tmux::start("beside") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sys.rec");
    let mut recorder = Command::new(pagescope_bin())
        .args([
            "record",
            "-q",
            "--system",
            "--backend",
            "refs",
            "--interval",
            "1s",
        ])
        .arg("-o")
        .arg(&out)
        .spawn()
        .unwrap();
    // A failed check must not leave it holding the machine.
    let _recorder_guard = KillTokenOnDrop(out.display().to_string());
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::metadata(&out).map_or(true, |m| m.len() == 0) {
        assert!(Instant::now() < deadline, "no recording started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let held = Pagetest::start(&[], &["--size", "16M", "--op", "write", "--hold"], "done");
    t.line(&format!("{} top", pagescope_bin().display()));
    let who = format!("(pid {}, `record --system`)", recorder.id());
    let screen = t.wait_for("top's refresh", |s| {
        s.contains("sort: PSS") && row_of(s, held.pid()).is_some()
    });
    assert!(screen.contains("working set: none"), "{screen}");
    let note = screen
        .lines()
        .find(|l| l.starts_with("note:"))
        .unwrap_or("");
    assert!(
        note.contains("no working set") && note.contains(&who),
        "{screen}"
    );
    assert!(
        rows(&screen).iter().all(|r| r.text[WSET] == "-"),
        "{screen}"
    );
    t.keys(&["q"]);
    t.wait_for("the shell", |s| s.trim_end().ends_with('$'));
    let pid = rustix::process::Pid::from_raw(recorder.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    assert!(recorder.wait().unwrap().code().is_some());
}

/// A process named with terminal escapes (set the title, bell, clear the
/// screen) and a newline: its row and its detail show each as `?`, and
/// the terminal's title is left alone.
#[test]
fn terminal_escapes_in_names_are_shown_as_question_marks() {
    let _serial = serial();
    let Some(t) = Tmux::start("escapes") else {
        return;
    };
    let title = |t: &Tmux| {
        let out = t.tmux(&["display", "-p", "-t", &t.name, "#{pane_title}"]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let before = title(&t);
    let named = Named::start("zq\u{1b}]0;pwn\u{7}\u{1b}[2J\n");
    let pid = named.pid();
    let shown = "zq?]0;pwn??[2J?";
    t.line(&format!("{} top", pagescope_bin().display()));
    t.wait_for("top's first refresh", |s| s.contains("sort: PSS"));
    t.keys(&["/"]);
    t.line("zq");
    let screen = t.wait_for("the named process", |s| {
        s.contains("filter: zq") && row_of(s, pid).is_some()
    });
    assert_eq!(row_of(&screen, pid).unwrap().name, shown, "{screen}");
    t.keys(&["Enter"]);
    let screen = t.wait_for("its detail", |s| {
        s.contains(&format!("pid {pid} {shown}")) && s.contains("VMAs, largest")
    });
    // The copy of sleep's path, its newline as the kernel's maps write it.
    assert!(screen.contains("/zq?]0;pwn??[2J\\012"), "{screen}");
    assert_eq!(title(&t), before, "the title changed");
    t.keys(&["q"]);
    t.wait_for("the shell", |s| s.trim_end().ends_with('$'));
}

#[test]
fn without_a_terminal_top_is_a_usage_error() {
    let out = Command::new(pagescope_bin())
        .arg("top")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let msg = failed_with(&out, 2);
    assert!(msg.contains("not one"), "{msg}");
    assert!(out.stdout.is_empty());
}
