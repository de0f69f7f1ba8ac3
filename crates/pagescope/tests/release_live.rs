//! `trace --release` is for programs whose pagescope was killed: a
//! program a running pagescope traces is refused, and one among the
//! processes to release is left alone, its trace going on unharmed.

#[macro_use]
mod util;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::*;

/// Why this can't run here, asked of the kernel.
fn unsupported() -> Option<(&'static str, String)> {
    if !cfg!(target_arch = "x86_64") {
        return Some(("x86_64", "pagescope trace supports x86_64 only".into()));
    }
    if !rustix::process::geteuid().is_root() {
        let why = "tracing another process needs root (ptrace and userfaultfd)";
        return Some(("root", why.into()));
    }
    if uffd_features().is_none() {
        let why = "this kernel has no userfaultfd (CONFIG_USERFAULTFD)";
        return Some(("userfaultfd", why.into()));
    }
    None
}

/// The tracer of `pid` once it has one and holds a userfaultfd, waiting
/// up to 30 s.
fn traced(pid: u32) -> u32 {
    let t = Instant::now();
    loop {
        let tracer = tracer_of(pid);
        let uffd = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .any(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| l.to_string_lossy().contains("userfaultfd"))
            });
        if tracer != 0 && uffd {
            return tracer;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{pid} never traced");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running trace and its program: on drop (a failed assertion too),
/// the tracer is interrupted, which lets the program go, and the program
/// is ended.
struct Tracing {
    tracer: std::process::Child,
    program: Option<u32>,
}

impl Drop for Tracing {
    fn drop(&mut self) {
        let pid = |p: u32| rustix::process::Pid::from_raw(p as i32).unwrap();
        let _ = rustix::process::kill_process(pid(self.tracer.id()), rustix::process::Signal::INT);
        let _ = self.tracer.wait();
        if let Some(p) = self.program {
            let _ = rustix::process::kill_process(pid(p), rustix::process::Signal::KILL);
        }
    }
}

#[test]
fn a_program_a_running_pagescope_traces_is_left_to_it() {
    if let Some((feature, why)) = unsupported() {
        skip!(feature, why);
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = temp_path(dir.path(), "t.trace");
    let bin = pagetest_bin();
    // pagetest, held after writing its buffer, traced by a pagescope that
    // is a child of this test (so that both are among this test's
    // descendants, which a release of this test's pid walks).
    let tracer = Command::new(pagescope_bin())
        .args(["trace", "-q", "--no-idle-poll", "--pool", "1M", "-o", &out])
        .arg("--")
        .arg(&bin)
        .args(["--size", "8M", "--mode", "anon", "--op", "write", "--hold"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut t = Tracing {
        tracer,
        program: None,
    };
    let mut lines =
        std::io::BufRead::lines(std::io::BufReader::new(t.tracer.stdout.take().unwrap()));
    let mut next = |event: &str| loop {
        let line = lines.next().expect("pagetest's lines").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["event"] == event {
            break v;
        }
    };
    let pid = next("ready")["pid"].as_u64().unwrap() as u32;
    t.program = Some(pid);
    next("done");
    let tracer = t.tracer.id();
    assert_eq!(traced(pid), tracer);

    // The program itself: refused, naming its tracer.
    let r = run(&[], &["trace", "--release", &pid.to_string()]);
    let said = failed_with(&r, 1);
    assert!(
        said.contains(&format!(
            "process {pid} is traced by process {tracer}, which is running"
        )),
        "{said}"
    );
    // This test's own pid: its descendants with a pagescope store are
    // pagetest, which is left alone; nothing else to release.
    let r = run(
        &[],
        &["trace", "--release", &std::process::id().to_string()],
    );
    let said = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(!r.status.success(), "{said}");
    assert!(said.contains(&format!("left {pid} alone")), "{said}");
    assert!(said.contains("nothing to release"), "{said}");
    assert!(!said.contains("put back"), "{said}");

    // The trace goes on: Ctrl-C lets pagetest go.
    assert_eq!(tracer_of(pid), tracer);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(tracer as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = t.tracer.wait().unwrap();
    assert_eq!(status.code(), Some(130), "interrupted");
    assert_eq!(tracer_of(pid), 0, "let go");
}
