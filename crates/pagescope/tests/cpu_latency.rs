//! While pagescope serves a program's faults, only the CPUs that program
//! and pagescope may run on poll when idle: their per-CPU resume latency
//! limits (`/sys/devices/system/cpu/cpuN/power/pm_qos_resume_latency_us`,
//! read back from the kernel here) say `n/a`, every other CPU keeps its
//! own, and the machine-wide limit is not held. When the trace ends, is
//! interrupted, or is killed and then released, every limit is as it was.
//!
//! The tests of this file run one at a time: each compares the whole
//! machine's limits with what they were before it.

#[macro_use]
mod util;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use util::*;

/// The limit file of `cpu`.
fn limit_path(cpu: usize) -> String {
    format!("/sys/devices/system/cpu/cpu{cpu}/power/pm_qos_resume_latency_us")
}

/// Every CPU's limit as the kernel shows it, by CPU number.
fn limits() -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = std::fs::read_dir("/sys/devices/system/cpu")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let cpu = e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok()?;
            let v = std::fs::read_to_string(limit_path(cpu)).ok()?;
            Some((cpu, v.trim().to_string()))
        })
        .collect();
    out.sort();
    out
}

/// The machine-wide CPU latency limit (microseconds).
fn machine_limit() -> i32 {
    let b = std::fs::read("/dev/cpu_dma_latency").unwrap();
    i32::from_ne_bytes(b[..4].try_into().unwrap())
}

/// Why these tests can't run here, asked of the kernel: root, a
/// userfaultfd to trace with, two CPUs to tell apart, and per-CPU limits.
fn unsupported() -> Option<(&'static str, String)> {
    if !cfg!(target_arch = "x86_64") {
        return Some(("x86_64", "pagescope trace supports x86_64 only".into()));
    }
    if !rustix::process::geteuid().is_root() {
        return Some(("root", "setting CPU latency limits needs root".into()));
    }
    if uffd_features().is_none() {
        let why = "this kernel has no userfaultfd (CONFIG_USERFAULTFD)";
        return Some(("userfaultfd", why.into()));
    }
    let cpus = pagescope_linux::system::allowed_cpus();
    if cpus.len() < 2 {
        let why = "one CPU to run on: nothing to tell the CPUs in use from";
        return Some(("two-cpus", why.into()));
    }
    if !cpus.iter().all(|&c| Path::new(&limit_path(c)).exists()) {
        let why = "this kernel has no per-CPU resume latency limits (CONFIG_PM)";
        return Some(("cpu-resume-latency", why.into()));
    }
    None
}

/// Why these tests can't run now: they compare every CPU's limit before
/// and after, so no CPU may be held polling already (by a pagescope of
/// another user of this machine, or another tool), as the kernel says.
/// Limits that a killed pagescope left (in its registry, with no live
/// holder) are first given back, as the next pagescope to start would.
fn busy() -> Option<(&'static str, String)> {
    let root = pagescope_linux::Root::default();
    if let Err(e) = pagescope_linux::resume_latency::restore_abandoned(&root) {
        return Some((
            "cpu-resume-latency-free",
            format!("giving back abandoned limits: {e}"),
        ));
    }
    let held: Vec<String> = limits()
        .into_iter()
        .filter(|(_, v)| v == "n/a")
        .map(|(n, _)| n.to_string())
        .collect();
    (!held.is_empty()).then(|| {
        let by = match pagescope_linux::resume_latency::held(&root) {
            Ok(cpus) if !cpus.is_empty() => "a running pagescope holds it",
            _ => "another program holds it",
        };
        let why = format!(
            "CPU {} already polls (its resume latency limit is n/a): {by}",
            held.join(", ")
        );
        ("cpu-resume-latency-free", why)
    })
}

/// Skips with the reason what [`unsupported`] or [`busy`] gives. Taken
/// after `serial()`: the other tests of this file hold limits while they
/// run.
macro_rules! require_limits {
    () => {
        if let Some((feature, why)) = unsupported().or_else(busy) {
            skip!(feature, why);
        }
    };
}

/// Starts `argv` on CPU `cpu` alone (`taskset`).
fn on_cpu(cpu: usize, argv: &[&str]) -> Child {
    Command::new("taskset")
        .args(["-c", &cpu.to_string()])
        .args(argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the limits of `cpus` say `n/a`, and returns every limit.
fn wait_limited(cpus: &[usize], tracer: &mut Child) -> Vec<(usize, String)> {
    let t = Instant::now();
    loop {
        let now = limits();
        if cpus
            .iter()
            .all(|c| now.iter().any(|(n, v)| n == c && v == "n/a"))
        {
            return now;
        }
        if let Some(status) = tracer.try_wait().unwrap() {
            panic!("pagescope ended ({status}) before limiting CPUs {cpus:?}: {now:?}");
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "CPUs {cpus:?} not limited after 10 s: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `signal` to `child`.
fn signal(child: &Child, signal: rustix::process::Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_child(child), signal).unwrap();
}

/// Kills and reaps `child` if it is still running (a pagescope, when a
/// test fails while it traces), then gives back the CPU limits it held, as
/// `trace --release` would: a failed test leaves the machine as it was.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let root = pagescope_linux::Root::default();
        let _ = pagescope_linux::resume_latency::restore_abandoned(&root);
    }
}

/// A launched command traced on one CPU (`--cpu`): the program reads the
/// kernel's limits while it is traced (its CPU `n/a`, every other CPU as
/// before, the machine-wide limit not held); when it ends, they are all
/// as before.
#[test]
fn a_trace_on_one_cpu_limits_that_cpu_alone_until_it_ends() {
    let _serial = serial();
    require_limits!();
    let before = limits();
    let cpu = *pagescope_linux::system::allowed_cpus().last().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "t.trace");
    let read = "for f in /sys/devices/system/cpu/cpu[0-9]*/power/pm_qos_resume_latency_us; \
                do echo \"$f $(cat $f)\"; done; od -An -td4 -N4 /dev/cpu_dma_latency";
    let r = run(
        &[],
        &[
            "trace",
            "-q",
            "-o",
            &out,
            "--cpu",
            &cpu.to_string(),
            "--",
            "sh",
            "-c",
            read,
        ],
    );
    let said = String::from_utf8_lossy(&r.stdout).into_owned();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    for (n, was) in &before {
        let want = if *n == cpu { "n/a" } else { was.as_str() };
        let line = format!("{} {want}", limit_path(*n));
        assert!(said.lines().any(|l| l == line), "{line} not in:\n{said}");
    }
    let machine: i32 = said.lines().last().unwrap().trim().parse().unwrap();
    assert_eq!(machine, 2_000_000_000, "the machine-wide limit is held");
    assert_eq!(limits(), before, "after the trace ended");
}

/// `trace --pid` of a program bound to one CPU, pagescope bound to it too:
/// only that CPU is limited, and Ctrl-C gives its limit back.
#[test]
fn an_interrupted_trace_gives_the_limits_back() {
    let _serial = serial();
    require_limits!();
    let before = limits();
    let cpu = pagescope_linux::system::allowed_cpus()[0];
    let program = Reap(on_cpu(cpu, &["sleep", "30"]));
    let pid = program.0.id().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "t.trace");
    let bin = pagescope_bin();
    let mut tracer = Reap(on_cpu(
        cpu,
        &[
            bin.to_str().unwrap(),
            "trace",
            "-q",
            "-o",
            &out,
            "--pid",
            &pid,
        ],
    ));
    let during = wait_limited(&[cpu], &mut tracer.0);
    for ((n, was), (_, now)) in before.iter().zip(&during) {
        if *n != cpu {
            assert_eq!(now, was, "CPU {n}, which pagescope does not use");
        }
    }
    assert_eq!(machine_limit(), 2_000_000_000);
    // `--release` of a process pagescope never traced, meanwhile: nothing
    // to release, and the CPU polls for a pagescope still running. (The
    // live trace's program and mover, descendants of this test, are left
    // to it, each in a line of its own before the error.)
    let r = run(
        &[],
        &["trace", "--release", &std::process::id().to_string()],
    );
    let said = String::from_utf8_lossy(&r.stderr).into_owned();
    assert_eq!(r.status.code(), Some(1), "{said}");
    let error = said.lines().last().unwrap_or_default();
    assert!(error.starts_with("error: "), "{said}");
    assert!(error.contains("nothing to release"), "{said}");
    let polls = format!(
        "CPU {cpu} polls for a pagescope that is still running, and gets its resume latency \
         limit back"
    );
    assert!(error.contains(&polls), "{said}");
    assert!(
        said.lines()
            .filter(|l| *l != error)
            .all(|l| l.contains(" alone: process ")),
        "{said}"
    );
    assert_eq!(limits(), during, "release let the live holder's CPU be");
    signal(&tracer.0, rustix::process::Signal::INT);
    let status = tracer.0.wait().unwrap();
    assert_eq!(status.code(), Some(130), "interrupted");
    assert_eq!(limits(), before, "after Ctrl-C");
}

/// A tracer killed outright cannot give its limits back: the kernel
/// keeps them (unlike the machine-wide limit, dropped with its
/// descriptor), and `trace --release` does, saying so.
#[test]
fn a_killed_trace_leaves_limits_that_release_gives_back() {
    let _serial = serial();
    require_limits!();
    let before = limits();
    let cpus = pagescope_linux::system::allowed_cpus();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "t.trace");
    let program = Reap(
        Command::new("sleep")
            .arg("30")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = program.0.id().to_string();
    let mut tracer = Reap(
        Command::new(pagescope_bin())
            .args(["trace", "-q", "-o", &out, "--pid", &pid])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_limited(&cpus, &mut tracer.0);
    signal(&tracer.0, rustix::process::Signal::KILL);
    let _ = tracer.0.wait();
    let left = limits();
    for c in &cpus {
        assert!(
            left.iter().any(|(n, v)| n == c && v == "n/a"),
            "CPU {c} after the kill: {left:?}"
        );
    }
    let r = run(&[], &["trace", "--release", &pid]);
    let said = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(r.status.success(), "{said}");
    assert!(
        said.contains("gave back the resume latency limits"),
        "{said}"
    );
    assert_eq!(limits(), before, "after the release");
}

/// A tracer killed after it took the limits and before it put anything
/// into the program: `trace --release` has no pages to give back, but
/// gives the limits back and says so, and that is a success.
#[test]
fn a_trace_killed_before_it_set_up_the_program_is_released_too() {
    let _serial = serial();
    require_limits!();
    let before = limits();
    let cpus = pagescope_linux::system::allowed_cpus();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "t.trace");
    let program = Reap(
        Command::new("sleep")
            .arg("30")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = program.0.id().to_string();
    let status = Command::new(pagescope_bin())
        .env("PAGESCOPE_DIE_IN_INJECTION", "attach")
        .args(["trace", "-q", "-o", &out, "--pid", &pid])
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "pagescope did not die where told"
    );
    let left = limits();
    for c in &cpus {
        assert!(
            left.iter().any(|(n, v)| n == c && v == "n/a"),
            "CPU {c} after the kill: {left:?}"
        );
    }
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let r = run(&[], &["trace", "--release", &pid]);
    let said = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(r.status.success(), "{said}");
    assert!(
        said.contains("gave back the resume latency limits"),
        "{said}"
    );
    assert!(!said.contains(&format!("released {pid}")), "{said}");
    assert_eq!(limits(), before, "after the release");
    let now = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    assert_eq!(now, fds, "the program's descriptors");
}
