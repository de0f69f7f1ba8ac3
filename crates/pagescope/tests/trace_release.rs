//! `pagescope trace` killed (SIGKILL, or at a test hook mid-injection),
//! then `trace --release`: nothing of the program is lost, and nothing of
//! pagescope is left in it.

#[macro_use]
mod util;

use pagescope_core::format::Completeness;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use util::trace::*;
use util::*;

#[test]
fn sigkill_then_release_loses_nothing() {
    require_move!();
    sigkill_then_release("move", "16M");
}

/// With copies, and a buffer of 256 pages: fewer store slots than the
/// step (512) of the count that `--release` reads first.
#[test]
fn sigkill_then_release_loses_nothing_by_copy() {
    require_trace!();
    sigkill_then_release("copy", "1M");
}

fn sigkill_then_release(evict: &str, size: &str) {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let mut pt = traced_reader(&trace, evict, size);
    let target = pt.pid();
    // Kill the tracer while most of the buffer is evicted, once it has
    // flushed the first pass's references (it does every 200 ms).
    std::thread::sleep(Duration::from_millis(500));
    kill_tracer(&mut pt.child);
    std::thread::sleep(Duration::from_millis(200));
    release(target, evict);
    // The second pass reads every page back: the sum is exact only if no
    // page was lost (a lost page reads as zero).
    let mut done = pt.next_line();
    if done["event"] == "iteration" {
        done = pt.next_line();
    }
    assert_eq!(done["event"], "done");
    assert_eq!(done["checksum"], 2 * pt.pages());
    assert!(
        wait_gone(target, 10),
        "pagetest did not finish after release"
    );
    // The file the killed tracer left is readable.
    let (all, done) = read_all(&trace);
    assert!(matches!(done, Completeness::CutShort { .. }));
    assert!(!all.refs.is_empty());
    // Nothing to release twice.
    kill_pid(target);
}

/// A forked child whose pages are evicted when the tracer is killed
/// waits on its own userfaultfd, and `--release` of its parent gives both
/// back every page: the child reads what its parent wrote.
#[test]
fn sigkill_then_release_of_a_forked_child_loses_nothing() {
    require_trace!();
    let _serial = serial();
    for evict in methods() {
        let dir = tempfile::tempdir().unwrap();
        let trace = temp_path(dir.path(), "t.trace");
        let mut pt = traced_pagetest(
            &trace,
            evict,
            &[
                "--size",
                "4M",
                "--op",
                "write",
                "--iterations",
                "1",
                "--sleep",
                "0",
                "--fork",
                "1",
                "--child-delay",
                "3s",
            ],
            "child",
        );
        let parent = pt.pid();
        let child = pt.lines.last().unwrap()["pid"].as_u64().unwrap() as u32;
        let _cleanup = KillOnDrop(vec![parent, child]);
        // The child said it started, so it is past its first stop: every
        // page it had resident has left. It reads them after the kill.
        std::thread::sleep(Duration::from_millis(500));
        kill_tracer(&mut pt.child);
        // Releasing the parent releases its child too.
        let said = release(parent, evict);
        assert!(
            said.contains(&format!("released {child}:")),
            "{evict}: {said}"
        );
        let read = pt.next_line();
        assert_eq!(read["event"], "child-read", "{evict}");
        // Iteration 0 wrote 2 into every page.
        assert_eq!(
            read["checksum"],
            2 * pt.pages(),
            "{evict}: the child lost pages"
        );
        assert_eq!(pt.next_line()["event"], "forked", "{evict}");
        assert_eq!(pt.next_line()["event"], "done", "{evict}");
        assert!(wait_gone(parent, 10), "{evict}: pagetest did not finish");
    }
}

/// A shell that forks all the time (a pipeline in a command substitution
/// per iteration), its tracer killed mid-run: `--release` of the shell
/// frees it and every traced process it forked, including any whose fork
/// was waiting on its userfaultfd, and the output is what it is
/// untraced. The kill lands anywhere, in an injection or between a fork's
/// message and the child's first stop as well (the fixed points of those
/// are `killed_in_an_injection_then_release_loses_nothing` and
/// `release_ends_the_mover_of_a_program_that_exited`). It found two
/// windows, both closed since: a forked child's registrations moved after
/// it had its registers back, and a mover left behind a `sort` that
/// exited, holding its pipe (docs/design.md, "Movers left behind").
#[test]
fn sigkill_then_release_of_a_forking_shell_loses_nothing() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (script, untraced) = sort_pipeline_script(dir.path(), 40);
    for evict in methods() {
        let trace = temp_path(dir.path(), "t.trace");
        let mut tracer = Command::new(pagescope_bin())
            .args([
                "trace", "-q", "--evict", evict, "--pool", "64K", "-o", &trace,
            ])
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = tracer.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let _ = tx.send(line.unwrap());
            }
        });
        let mut out = vec![rx.recv_timeout(Duration::from_secs(60)).unwrap()];
        let shell = pagescope_linux::procfs::descendants(Path::new("/proc"), tracer.id())[1];
        let _cleanup = KillOnDrop(vec![shell]);
        std::thread::sleep(Duration::from_millis(500));
        kill_tracer(&mut tracer);
        out.extend(rx.try_iter());
        assert!(
            out.len() < 40,
            "{evict}: the shell finished before the kill"
        );
        release(shell, evict);
        while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
            out.push(line);
        }
        let want: Vec<&str> = std::str::from_utf8(&untraced).unwrap().lines().collect();
        assert_eq!(out, want, "{evict}: output after the release");
        assert!(wait_gone(shell, 10), "{evict}: the shell did not finish");
    }
}

/// pagescope killed just after an exec's set-up, before its fault thread
/// attached the new mover (which would then have died with it): the
/// program (`sort`, the shell's second exec, in a command substitution)
/// runs on and exits, and its mover, never attached, becomes a child of
/// init that still holds sort's end of the pipe, so the shell waits for
/// ever on it. `--release` of the shell ends that mover, and the shell
/// finishes with its untraced output.
#[test]
fn release_ends_the_mover_of_a_program_that_exited() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = temp_path(dir.path(), "data");
    let lines: String = (0..3000u64)
        .map(|i| format!("{}\n", (i * 7919) % 3001))
        .collect();
    std::fs::write(&data, lines).unwrap();
    let script = format!("x=$(sort {data}); echo \"$x\" | md5sum");
    let untraced = Command::new("sh").args(["-c", &script]).output().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let (since, mut stdout) = trace_until_it_dies(
        "exec-done:2",
        &["--pool", "64K", "-o", &trace, "--", "sh", "-c", &script],
        "exec-done",
    );
    let shell = orphan_named("sh", since).expect("the traced shell");
    let _cleanup = KillOnDrop(vec![shell]);
    // sort's mover, should the release leave it (it holds the pipes of
    // this test's output too).
    struct KillSorts(u64);
    impl Drop for KillSorts {
        fn drop(&mut self) {
            for p in pagescope_linux::procfs::list_pids(Path::new("/proc")).unwrap_or_default() {
                let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                if comm.trim_end() == "sort" && start_time(p).is_some_and(|t| t >= self.0) {
                    kill_pid(p);
                }
            }
        }
    }
    let _sorts = KillSorts(since);
    // sort runs on untraced and exits, its mover left behind.
    std::thread::sleep(Duration::from_millis(500));
    let said = release(shell, "exec-done:2");
    // Ended as an orphan once sort exited, or, where sort still waited
    // on the pipe the shell held while it waited on a page away, as a
    // mover of the released tree.
    assert!(
        said.contains("mover(s) left by a killed pagescope behind a program that exited")
            || said.contains("ended mover"),
        "the release ended no mover: {said}"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut out);
        let _ = tx.send(out);
    });
    let out = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("the shell still waits after the release: {said}"));
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&untraced.stdout)
    );
    assert!(wait_gone(shell, 10), "the shell did not finish");
}

/// pagescope killed in the middle of an injection: the thread it was
/// injecting into waits, parked, instead of running on with the registers
/// of an injected call; `--release` gives it its registers back, and the
/// output is what it is untraced. At an exec (the launched shell's image
/// being set up: parked at the bootstrap in its vDSO, during the first
/// call, and later at the mover's page), at a fork's mover (cloned, not yet attached), and at a
/// fork (pagetest's child, whose pages away since the fork are registered
/// with the descriptor the fork made, which pagescope's holder keeps: the
/// child's checksum of its copy of the buffer shows every page), and in
/// the middle of moving that child's registrations to its own descriptor
/// (one range registered there, the rest nowhere).
///
/// And killed just after reading a fork's message, before the child's
/// first stop: the child runs, untraced, and waits on its first page away
/// on the descriptor the holder keeps; the release finds which descriptor
/// is the child's and puts its pages back through it.
#[test]
fn killed_in_an_injection_then_release_loses_nothing() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (script, untraced) = sort_pipeline_script(dir.path(), 5);
    for evict in methods() {
        // At "mover", the shell's first child has a mover that pagescope
        // never attached, holding the write end of the pipe the shell
        // reads: the release ends it.
        // At "fork-entry", the shell's first fork waits for its message
        // to be read from the shell's userfaultfd: the release reads it and
        // gives the child the pages away at the fork.
        // At "fork-message", a child of the shell runs with no tracer.
        for place in ["vdso", "exec", "mover", "fork-entry", "fork-message"] {
            let (out, _) = die_then_release(place, evict, &["sh", "-c", &script], "sh");
            assert_eq!(
                out,
                String::from_utf8_lossy(&untraced),
                "{place}, {evict}: output after the release"
            );
        }
        let pagetest = pagetest_bin();
        let pagetest = pagetest.to_str().unwrap();
        let args = [
            pagetest,
            "--size",
            "4M",
            "--op",
            "write",
            "--iterations",
            "1",
            "--sleep",
            "0",
            "--fork",
            "1",
        ];
        for place in ["fork", "move", "fork-message"] {
            let (out, said) = die_then_release(place, evict, &args, "pagetest");
            let lines = pagetest_lines(out.as_bytes());
            let read = lines
                .iter()
                .find(|l| l["event"] == "child-read")
                .unwrap_or_else(|| panic!("{place}, {evict}: no child-read in {out}"));
            // The write wrote 2 into each of the 1024 pages.
            assert_eq!(
                read["checksum"],
                2 * 1024,
                "{place}, {evict}: the child lost pages"
            );
            assert_eq!(
                lines.last().unwrap()["event"],
                "done",
                "{place}, {evict}: {out}"
            );
            if place == "fork-message" {
                // The child had all its pages away: it waited on one.
                assert!(
                    said.contains("through the descriptor pagescope's holder kept"),
                    "{place}, {evict}: the child was not released through the holder: {said}"
                );
            }
        }
    }
}

/// pagescope killed just after a page came back from the store: copied
/// in, its thread woken and running on, its index entry not yet cleared,
/// so the index still names a page that is there again (and may be
/// written at once). `--release` must not put that stale copy back: the
/// shell's pipelines of `sort` (whose pages the 64 KiB pool sends away
/// and back all the time) print what they print untraced, after a kill at
/// the first page back and at a later one, in both ways of evicting.
#[test]
fn killed_after_a_page_came_back_then_release_loses_nothing() {
    require_trace!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (script, untraced) = sort_pipeline_script(dir.path(), 5);
    let trace = temp_path(dir.path(), "t.trace");
    for evict in methods() {
        for place in ["copied-back:1", "copied-back:400"] {
            let what = format!("{place}, {evict}");
            let args = [
                "--evict", evict, "--pool", "64K", "-o", &trace, "--", "sh", "-c", &script,
            ];
            let (since, mut stdout) = trace_until_it_dies(place, &args, &what);
            let shell = orphan_named("sh", since).expect("the traced shell");
            let _cleanup = KillOnDrop(pagescope_linux::procfs::descendants(
                Path::new("/proc"),
                shell,
            ));
            // It runs on until it meets a page away, and waits there.
            std::thread::sleep(Duration::from_millis(300));
            let said = release(shell, &what);
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                let _ = std::io::Read::read_to_end(&mut stdout, &mut out);
                let _ = tx.send(out);
            });
            let out = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| {
                    panic!("{what}: the shell still waits after the release: {said}")
                });
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&untraced),
                "{what}: output after the release ({said})"
            );
            assert!(wait_gone(shell, 10), "{what}: the shell did not finish");
        }
    }
}

/// A shell script that forks all the time (a pipeline in a command
/// substitution, `iterations` times, over a file it writes in `dir`),
/// and what it prints untraced.
fn sort_pipeline_script(dir: &Path, iterations: u32) -> (String, Vec<u8>) {
    let data = temp_path(dir, "data");
    let lines: String = (0..3000u64)
        .map(|i| format!("{}\n", (i * 7919) % 3001))
        .collect();
    std::fs::write(&data, lines).unwrap();
    let script =
        format!("for i in $(seq 1 {iterations}); do x=$(sort {data} | md5sum); echo $x; done");
    let untraced = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert!(untraced.status.success());
    (script, untraced.stdout)
}

/// Traces `argv` with pagescope told to die in an injection at `place`;
/// checks that the program (named `comm`) waits,
/// releases it, and returns its whole output and what the release said.
fn die_then_release(place: &str, evict: &str, argv: &[&str], comm: &str) -> (String, String) {
    let what = format!("{place}, {evict}");
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let args = ["--evict", evict, "--pool", "64K", "-o", &trace, "--"];
    let args: Vec<&str> = args.iter().chain(argv).copied().collect();
    let (since, mut stdout) = trace_until_it_dies(place, &args, &what);
    let root = orphan_named(comm, since).expect("the traced program");
    let _cleanup = KillOnDrop(pagescope_linux::procfs::descendants(
        Path::new("/proc"),
        root,
    ));
    // Parked: it waits (a second, to show that it would not go on).
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !wait_gone(root, 0),
        "{what}: the program went on unreleased"
    );
    let said = release(root, &what);
    if !place.starts_with("fork-") {
        assert!(
            said.contains("went on from where pagescope stopped"),
            "{what}: nothing was parked: {said}"
        );
    }
    assert!(
        !pagescope_linux::trace::left_holders(&pagescope_linux::Root::default().proc)
            .iter()
            .any(|&(_, r)| r == Some(root)),
        "{what}: the holder of pagescope's descriptors is still there"
    );
    assert!(wait_gone(root, 30), "{what}: the program did not finish");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
    (out, said)
}

/// Runs `pagescope trace -q ARGS` told to kill itself at `place`
/// (`PAGESCOPE_DIE_IN_INJECTION`), and checks that it died so (`what`
/// names the case). Returns when it started (for [`orphan_named`]) and the
/// traced program's output, which goes on after the kill.
fn trace_until_it_dies(place: &str, args: &[&str], what: &str) -> (u64, std::process::ChildStdout) {
    adopt_orphans();
    let mut tracer = Command::new(pagescope_bin())
        .env("PAGESCOPE_DIE_IN_INJECTION", place)
        .args(["trace", "-q"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let since = start_time(tracer.id()).unwrap();
    let stdout = tracer.stdout.take().unwrap();
    let status = tracer.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{what}: pagescope did not die where told"
    );
    (since, stdout)
}

/// When process `pid` started (clock ticks after boot).
fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The process named `comm` that started at `since` or later and whose
/// parent is this test process: a launched program whose tracer is gone
/// (this process adopts orphans, [`adopt_orphans`]), told so from its own
/// forks and from the programs of other tests and of the machine, which
/// may have its name. (Its command line can't tell: the page holding it
/// may be away.)
fn orphan_named(comm: &str, since: u64) -> Option<u32> {
    let name = |p: u32| std::fs::read_to_string(format!("/proc/{p}/comm")).ok();
    let parent = |p: u32| {
        let s = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        s.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse::<u32>()
            .ok()
    };
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|&p| {
            name(p).is_some_and(|n| n.trim_end() == comm)
                && start_time(p).is_some_and(|t| t >= since)
                && parent(p) == Some(std::process::id())
        })
}

/// Makes this test process the subreaper of its descendants (once): a
/// program whose tracer dies becomes its child rather than init's, which
/// [`orphan_named`] looks for.
fn adopt_orphans() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .expect("PR_SET_CHILD_SUBREAPER")
    });
}

/// A page copied back leaves a stale copy in its store slot; the tracer
/// drops them in batches (moved into the store's trash, which one
/// `madvise` empties), so the store holds about the pages away and one
/// batch more, not every copy made: three passes over 32 MiB with a pool
/// of 1 MiB copy back about 16 000 pages.
#[test]
fn stale_copies_leave_the_store() {
    require_move!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = temp_path(dir.path(), "t.trace");
    let mut pt = traced_pagetest(
        &trace,
        "move",
        &[
            "--size",
            "32M",
            "--mode",
            "anon",
            "--op",
            "read",
            "--iterations",
            "4",
            "--sleep",
            "2s",
        ],
        "ready",
    );
    for _ in 0..3 {
        assert_eq!(pt.next_line()["event"], "iteration");
    }
    // In the sleep after the third pass.
    let pid = pt.pid();
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let entries = pagescope_core::parse::smaps::parse(&smaps).unwrap();
    let page_kb = rustix::param::page_size() as u64 / 1024;
    let store: u64 = entries
        .iter()
        .filter(|e| is_store(e))
        .map(|e| (e.counters.rss + e.counters.swap) / page_kb)
        .sum();
    // The buffer's pages (8 192) less the pool, and fewer than a batch of
    // stale copies (4 096).
    assert!(
        (7_000..8_192 + 4_096 + 512).contains(&store),
        "the store holds {store} pages"
    );
    let mut done = pt.next_line();
    if done["event"] == "iteration" {
        done = pt.next_line();
    }
    assert_eq!(done["checksum"], 4 * pt.pages());
    let status = pt.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}
