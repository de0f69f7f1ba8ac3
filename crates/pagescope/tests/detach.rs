//! pagescope lets go of a running program and leaves it as it found it:
//! after each of many attach and detach cycles (Ctrl-C of `trace --pid`,
//! the end of `record --backend fault --pid --duration`, SIGKILL of the
//! tracer then `trace --release`, an attach that fails half-way), the
//! program has the descriptors, mappings and address-space size it had
//! before, no child left, and each attach catches as many references as
//! the first. While traced, the program's view of itself stays readable
//! to other processes (`/proc/PID/cmdline`, `environ`). And one observer
//! at a time: a second pagescope that would corrupt the first's figures
//! is refused, naming the first.

#[macro_use]
mod util;

use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use util::*;

/// Attach and detach cycles per test.
const CYCLES: usize = 20;

/// Why this machine can't trace a running process, asked of the kernel:
/// x86_64, root (ptrace of any process) and a userfaultfd.
fn attach_unsupported() -> Option<(&'static str, String)> {
    if !cfg!(target_arch = "x86_64") {
        return Some(("x86_64", "pagescope trace supports x86_64 only".into()));
    }
    if !rustix::process::geteuid().is_root() {
        return Some(("root", "attaching to another process needs root".into()));
    }
    if uffd_features().is_none() {
        return Some((
            "userfaultfd",
            "this kernel has no userfaultfd (CONFIG_USERFAULTFD)".into(),
        ));
    }
    None
}

macro_rules! require_attach {
    () => {
        if let Some((feature, why)) = attach_unsupported() {
            skip!(feature, why);
        }
    };
}

/// What a process holds that pagescope could leave behind: descriptors
/// (each number and what it names), lines of /proc/PID/maps, VmSize
/// (kB), and children (movers are).
#[derive(Debug, PartialEq, Eq)]
struct Footprint {
    fds: std::collections::BTreeMap<u32, std::path::PathBuf>,
    maps: usize,
    vm_size_kb: u64,
    children: String,
}

fn footprint(pid: u32) -> Footprint {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.parse().ok()?;
            Some((n, std::fs::read_link(e.path()).ok()?))
        })
        .collect();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let vm_size_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let mut children = String::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        children += &std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
    }
    Footprint {
        fds,
        maps,
        vm_size_kb,
        children,
    }
}

/// A pagetest that writes its 32 MiB buffer every 200 ms for as long as
/// the test runs (killed when dropped), started under `wrapper`.
struct Target {
    pt: Pagetest,
}

impl Target {
    fn start(wrapper: &[&str]) -> Target {
        let args = [
            "--size",
            "32M",
            "--mode",
            "anon",
            "--op",
            "write",
            "--iterations",
            "100000",
            "--sleep",
            "200ms",
        ];
        // After its first pass its memory holds still (the buffer is
        // written in place).
        let pt = Pagetest::start(wrapper, &args, "iteration");
        Target { pt }
    }

    fn pid(&self) -> u32 {
        self.pt.pid()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.pt.child.kill();
        let _ = self.pt.child.wait();
    }
}

fn spawn(args: &[&str]) -> Child {
    Command::new(pagescope_bin())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pagescope starts")
}

fn signal(child: &Child, sig: rustix::process::Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_child(child), sig).unwrap();
}

/// Waits for pagescope, which must exit with `code` (0 for a run that
/// ended by itself, 130 for one stopped by SIGINT).
fn finish(child: Child, what: &str, code: i32) {
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The distinct pages a trace saw referenced: each cycle lasts long
/// enough for one pass over the buffer at least, and the number of
/// passes a cycle catches varies with the timing, so its references do.
fn trace_pages(path: &str) -> u64 {
    let v: Value =
        serde_json::from_slice(&run_ok(&["analyze", path, "refs", "--format", "json"]).stdout)
            .unwrap();
    v["distinct_pages"].as_u64().unwrap()
}

/// The pages a recording of one interval saw referenced.
fn recorded_pages(path: &str) -> u64 {
    let v: Value =
        serde_json::from_slice(&run_ok(&["analyze", path, "temporal", "--format", "json"]).stdout)
            .unwrap();
    v["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["user_pages"].as_u64().unwrap_or(0))
        .sum()
}

/// Runs `cycle` (one attach and detach, returning what it caught)
/// [`CYCLES`] times on one target; after each, the target's footprint is
/// what it was, and the last cycle catches at least 90% of the first.
fn cycles(what: &str, mut cycle: impl FnMut(u32, &str) -> u64) {
    let target = Target::start(&[]);
    let pid = target.pid();
    let dir = tempfile::tempdir().unwrap();
    let before = footprint(pid);
    let mut caught = Vec::new();
    for i in 0..CYCLES {
        let out = temp_path(dir.path(), &format!("{i}.out"));
        caught.push(cycle(pid, &out));
        assert_eq!(footprint(pid), before, "{what}: after cycle {}", i + 1);
        std::fs::remove_file(&out).unwrap();
    }
    let (first, last) = (caught[0], caught[CYCLES - 1]);
    assert!(first > 0, "{what}: the first cycle caught nothing");
    assert!(
        last as f64 >= 0.9 * first as f64,
        "{what}: caught {caught:?}"
    );
}

#[test]
fn trace_ctrl_c_leaves_the_program_as_it_was() {
    require_attach!();
    let _serial = serial();
    cycles("trace --pid, then SIGINT", |pid, out| {
        let tracer = spawn(&["trace", "-q", "--pid", &pid.to_string(), "-o", out]);
        std::thread::sleep(Duration::from_secs(1));
        signal(&tracer, rustix::process::Signal::INT);
        finish(tracer, "trace", 130);
        trace_pages(out)
    });
}

#[test]
fn record_fault_duration_leaves_the_program_as_it_was() {
    require_attach!();
    let _serial = serial();
    cycles("record --backend fault --pid --duration 1s", |pid, out| {
        let recorder = spawn(&[
            "record",
            "-q",
            "--backend",
            "fault",
            "--pid",
            &pid.to_string(),
            "--interval",
            "1s",
            "--duration",
            "1s",
            "-o",
            out,
        ]);
        finish(recorder, "record", 0);
        recorded_pages(out)
    });
}

#[test]
fn sigkill_and_release_leave_the_program_as_it_was() {
    require_attach!();
    let _serial = serial();
    cycles("trace --pid, SIGKILL, trace --release", |pid, out| {
        let mut tracer = spawn(&["trace", "-q", "--pid", &pid.to_string(), "-o", out]);
        std::thread::sleep(Duration::from_secs(1));
        signal(&tracer, rustix::process::Signal::KILL);
        let _ = tracer.wait();
        let r = run(&[], &["trace", "-q", "--release", &pid.to_string()]);
        assert!(
            r.status.success(),
            "release: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        trace_pages(out)
    });
}

#[test]
fn an_attach_that_fails_leaves_the_program_as_it_was() {
    require_attach!();
    let _serial = serial();
    // 2 GB of address space: the program runs, the store's reservation
    // (256 GiB) is refused half-way through the set-up.
    let target = Target::start(&["sh", "-c", "ulimit -v 2000000 && exec \"$0\" \"$@\""]);
    let pid = target.pid();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "t.trace");
    let before = footprint(pid);
    for i in 0..3 {
        let r = run(&[], &["trace", "-q", "--pid", &pid.to_string(), "-o", &out]);
        let said = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "attempt {}: {said}", i + 1);
        assert!(said.contains("mmap of the store"), "{said}");
        assert_eq!(footprint(pid), before, "after attempt {}", i + 1);
    }
}

/// A trace or a second recorder of a process that a recorder observes is
/// refused (exit 1) with the recorder's pid; the recorder's figures are
/// whole (a second `refs` recorder would clear its accessed bits).
#[test]
fn a_second_observer_is_refused_naming_the_first() {
    require_attach!();
    let _serial = serial();
    let target = Target::start(&[]);
    let pid = target.pid().to_string();
    let dir = tempfile::tempdir().unwrap();
    let first = temp_path(dir.path(), "first.rec");
    let recorder = spawn(&[
        "record",
        "-q",
        "--backend",
        "refs",
        "--no-freeze",
        "--pid",
        &pid,
        "--duration",
        "3s",
        "-o",
        &first,
    ]);
    // The recorder holds its lock once its file has a header.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(&first).map_or(true, |m| m.len() == 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the recorder did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let holder = format!("pid {}", recorder.id());
    let second = temp_path(dir.path(), "second.out");
    let record = |backend: &'static str| -> Vec<String> {
        let mut args = vec!["record", "-q", "--backend", backend];
        if backend == "refs" {
            args.push("--no-freeze");
        }
        args.extend(["--pid", &pid, "--duration", "1s", "-o", &second]);
        args.into_iter().map(String::from).collect()
    };
    let trace: Vec<String> = ["trace", "-q", "--pid", &pid, "-o", &second]
        .into_iter()
        .map(String::from)
        .collect();
    for args in [trace, record("refs"), record("fault")] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run(&[], &args);
        let said = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{args:?}: {said}");
        assert!(
            said.contains("already observed by pagescope") && said.contains(&holder),
            "{args:?}: {said}"
        );
        assert_eq!(said.lines().count(), 1, "{said}");
    }
    finish(recorder, "the first recorder", 0);
    // Once the first has let go, the process can be observed again.
    let again = record("refs");
    let again: Vec<&str> = again.iter().map(String::as_str).collect();
    let r = run(&[], &again);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

/// The arguments and environment of `pid` as the kernel serves them to
/// another process (what `ps` and `pgrep -f` read).
fn cmdline_and_environ(pid: u32) -> (String, String) {
    let read = |f: &str| {
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/{f}")).unwrap())
            .replace('\0', " ")
    };
    (read("cmdline"), read("environ"))
}

#[test]
fn while_traced_cmdline_and_environ_read_whole() {
    require_attach!();
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    // Attached: as before the attach, for a second of tracing.
    let target = Target::start(&[]);
    let pid = target.pid();
    let untraced = cmdline_and_environ(pid);
    assert!(untraced.0.contains("--size 32M") && !untraced.1.is_empty());
    let out = temp_path(dir.path(), "a.trace");
    let tracer = spawn(&["trace", "-q", "--pid", &pid.to_string(), "-o", &out]);
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..5 {
        let (cmdline, environ) = cmdline_and_environ(pid);
        assert_eq!(cmdline, untraced.0, "attached: cmdline");
        assert!(
            environ == untraced.1,
            "attached: environ reads {} bytes",
            environ.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    signal(&tracer, rustix::process::Signal::INT);
    finish(tracer, "trace", 130);
    // Launched: what it was started with.
    let out = temp_path(dir.path(), "l.trace");
    let bin = pagetest_bin();
    let mut tracer = Command::new(pagescope_bin())
        .args(["trace", "-q", "-o", &out, "--"])
        .arg(&bin)
        .args(["--size", "16M", "--iterations", "10", "--sleep", "200ms"])
        .env("PAGESCOPE_TEST_MARK", "kept")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", tracer.id())).unwrap();
    let traced = children
        .split_whitespace()
        .map(|c| c.parse::<u32>().unwrap())
        .find(|&c| {
            std::fs::read_to_string(format!("/proc/{c}/comm"))
                .unwrap()
                .trim()
                == "pagetest"
        })
        .expect("the traced pagetest");
    for _ in 0..5 {
        let (cmdline, environ) = cmdline_and_environ(traced);
        assert_eq!(
            cmdline.trim_end(),
            format!("{} --size 16M --iterations 10 --sleep 200ms", bin.display()),
            "launched"
        );
        assert!(
            environ.contains("PAGESCOPE_TEST_MARK=kept"),
            "launched: environ reads {} bytes",
            environ.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(tracer.wait().unwrap().success());
    // And the trace names the program by its command line.
    let v: Value =
        serde_json::from_slice(&run_ok(&["analyze", &out, "refs", "--format", "json"]).stdout)
            .unwrap();
    let thread = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["pid"].as_u64() == Some(traced as u64))
        .expect("the traced pagetest's thread");
    assert_eq!(
        thread["command"].as_str().unwrap(),
        format!("{} --size 16M --iterations 10 --sleep 200ms", bin.display())
    );
}
