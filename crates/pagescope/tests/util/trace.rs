//! Helpers of the tests of `pagescope trace` (tests/trace*.rs): whether
//! this machine can trace, asked of the kernel; reading a whole trace;
//! tracing pagetest.

use super::*;
use pagescope_core::format::{read_trace, Completeness, TraceVisitor};
use pagescope_core::trace::{Mapping, Ref, Residency, TraceEnd, TraceHeader};
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
/// Skips (with the reason) where the kernel can't trace.
macro_rules! require_trace {
    () => {
        if let Some((feature, why)) = trace_unsupported() {
            skip!(feature, why);
        }
    };
}

/// Skips (with the reason) where the kernel can't evict by moving pages.
macro_rules! require_move {
    () => {
        require_trace!();
        if !has_move() {
            skip!(
                "uffd-move",
                "this kernel has no UFFDIO_MOVE (Linux 6.8); the copy method is tested instead"
            );
        }
    };
}

/// Whether this kernel moves pages (`UFFDIO_MOVE`), asked of the kernel.
pub fn has_move() -> bool {
    uffd_features().is_some_and(|f| f & UFFD_FEATURE_MOVE != 0)
}

/// Why this machine can't trace, asked of the kernel (x86_64, root, and a
/// userfaultfd with write protection, Linux 5.7), with the feature a
/// run may require.
pub fn trace_unsupported() -> Option<(&'static str, String)> {
    if !cfg!(target_arch = "x86_64") {
        return Some(("x86_64", "pagescope trace supports x86_64 only".into()));
    }
    if !rustix::process::geteuid().is_root() {
        return Some((
            "root",
            "tracing another process needs root (ptrace and userfaultfd)".into(),
        ));
    }
    const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1;
    match uffd_features() {
        None => Some((
            "userfaultfd",
            "this kernel has no userfaultfd (CONFIG_USERFAULTFD)".into(),
        )),
        Some(f) if f & UFFD_FEATURE_PAGEFAULT_FLAG_WP == 0 => Some((
            "userfaultfd",
            "this kernel's userfaultfd has no write protection (Linux 5.7)".into(),
        )),
        Some(_) => None,
    }
}

#[derive(Default)]
pub struct All {
    pub header: Option<TraceHeader>,
    pub refs: Vec<Ref>,
    pub end: Option<TraceEnd>,
    /// The last record of each mapping, by id.
    pub mappings: std::collections::HashMap<u32, Mapping>,
    pub residency: Vec<Residency>,
}

impl TraceVisitor for All {
    fn header(&mut self, h: &TraceHeader) -> pagescope_core::Result<()> {
        self.header = Some(h.clone());
        Ok(())
    }
    fn mapping(&mut self, m: &Mapping) -> pagescope_core::Result<()> {
        self.mappings.insert(m.id, m.clone());
        Ok(())
    }
    fn residency(&mut self, r: &Residency) -> pagescope_core::Result<()> {
        self.residency.push(r.clone());
        Ok(())
    }
    fn refs(&mut self, refs: &[Ref]) -> pagescope_core::Result<()> {
        self.refs.extend_from_slice(refs);
        Ok(())
    }
    fn end(&mut self, e: &TraceEnd) -> pagescope_core::Result<()> {
        self.end = Some(e.clone());
        Ok(())
    }
}

pub fn read_all(path: &str) -> (All, Completeness) {
    let mut all = All::default();
    let f = std::fs::File::open(path).unwrap();
    let done = read_trace(std::io::BufReader::new(f), Path::new(path), &mut all).unwrap();
    (all, done)
}

pub fn pagetest_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("pagetest prints JSON lines"))
        .collect()
}

/// Traces pagetest with `args` and a pool of `pool`; insists on success
/// and returns pagetest's JSON lines.
pub fn trace_pagetest(trace: &str, pool: &str, evict: &str, args: &[&str]) -> Vec<Value> {
    trace_pagetest_with(trace, pool, evict, &[], args)
}

/// [`trace_pagetest`] with more `trace` options.
pub fn trace_pagetest_with(
    trace: &str,
    pool: &str,
    evict: &str,
    opts: &[&str],
    args: &[&str],
) -> Vec<Value> {
    let out = Command::new(pagescope_bin())
        .args(["trace", "-q", "--evict", evict, "--pool", pool, "-o", trace])
        .args(opts)
        .arg("--")
        .arg(pagetest_bin())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    pagetest_lines(&out.stdout)
}

pub fn wait_gone(pid: u32, secs: u64) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A pagetest with `args` under the tracer (1 MiB pool, evicting by
/// `evict`), once it has printed its `until` line.
pub fn traced_pagetest(trace: &str, evict: &str, args: &[&str], until: &str) -> Pagetest {
    let bin = pagescope_bin();
    let wrapper = [
        bin.to_str().unwrap(),
        "trace",
        "-q",
        "--evict",
        evict,
        "--pool",
        "1M",
        "-o",
        trace,
        "--",
    ];
    Pagetest::start(&wrapper, args, until)
}

/// A pagetest that reads its buffer twice, 3 s apart, under the tracer
/// evicting by `evict`; returns it once the first pass is done (so pages
/// are evicted).
pub fn traced_reader(trace: &str, evict: &str, size: &str) -> Pagetest {
    let mut pt = traced_pagetest(
        trace,
        evict,
        &[
            "--size",
            size,
            "--mode",
            "anon",
            "--op",
            "read",
            "--iterations",
            "2",
            "--sleep",
            "3s",
        ],
        "ready",
    );
    let it = pt.next_line();
    assert_eq!(it["event"], "iteration");
    pt
}

/// SIGKILLs pagescope and reaps it.
pub fn kill_tracer(tracer: &mut std::process::Child) {
    rustix::process::kill_process(
        rustix::process::Pid::from_child(tracer),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let _ = tracer.wait();
}

/// SIGKILLs `pid`, if it is still there.
pub fn kill_pid(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// `pagescope trace --release PID`, which must succeed (`what` names the
/// case in the message); returns what it said.
pub fn release(pid: u32, what: &str) -> String {
    let r = run(&[], &["trace", "--release", &pid.to_string()]);
    let said = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(r.status.success(), "{what}: release failed: {said}");
    said
}

/// Kills the processes (which a failed assertion would leave blocked).
pub struct KillOnDrop(pub Vec<u32>);

impl Drop for KillOnDrop {
    /// Kills each process and, first, the descendants it has by then (a
    /// blocked or parked child would otherwise outlive the test).
    fn drop(&mut self) {
        for &root in &self.0 {
            let tree = pagescope_linux::procfs::descendants(Path::new("/proc"), root);
            for pid in tree.into_iter().rev() {
                kill_pid(pid);
            }
        }
    }
}

/// Whether `e` is the store: named where the kernel names anonymous
/// mappings (CONFIG_ANON_VMA_NAME), and the one mapping of 256 GiB.
pub fn is_store(e: &pagescope_core::parse::smaps::SmapsEntry) -> bool {
    e.map.path == "[anon:pagescope-store]"
        || (e.map.path.is_empty() && e.map.end - e.map.start == 1 << 38)
}

/// The eviction methods this kernel has.
pub fn methods() -> Vec<&'static str> {
    if has_move() {
        vec!["move", "copy"]
    } else {
        vec!["copy"]
    }
}

/// The Python interpreter itself: `python3` may be a launcher script (a
/// pyenv shim runs a dozen shells first), whose forks would be traced too.
pub fn python3() -> String {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A program started with pipes on stdin and stdout, and `pagescope
/// trace --pid` attached to it and in place.
pub struct Attached {
    pub prog: std::process::Child,
    pub out: std::io::BufReader<std::process::ChildStdout>,
    /// The program's first line (it prints one when ready).
    pub first: String,
    pub tracer: std::process::Child,
    pub err: std::io::BufReader<std::process::ChildStderr>,
    /// What the tracer said so far.
    pub said: String,
}

impl Attached {
    /// Starts `argv`, which prints a line when it is ready and then waits
    /// for a line on stdin, and attaches `pagescope trace --pid` to it
    /// (evicting by `evict`, pool `pool`, into `trace`); returns once the
    /// tracer says it is in place (every process attached).
    pub fn start(argv: &[&str], evict: &str, pool: &str, trace: &str) -> Attached {
        use std::io::{BufRead, BufReader};
        // A process group of its own, as a shell's job has: the tracer
        // waits for it from another group.
        let mut prog = Command::new(argv[0])
            .args(&argv[1..])
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(prog.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{argv:?} ended before it was ready");
        let pid = prog.id().to_string();
        let mut tracer = Command::new(pagescope_bin())
            .args([
                "trace", "--evict", evict, "--pool", pool, "-o", trace, "--pid", &pid,
            ])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(tracer.stderr.take().unwrap());
        let mut said = String::new();
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap() == 0 {
                let _ = prog.kill();
                let _ = prog.wait();
                panic!("the tracer ended before it was in place: {said}");
            }
            said.push_str(&line);
            if line.starts_with("tracing process") {
                break;
            }
        }
        Attached {
            prog,
            out,
            first,
            tracer,
            err,
            said,
        }
    }

    /// Lets the program go on past its wait.
    pub fn go(&mut self) {
        use std::io::Write;
        let mut stdin = self.prog.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
    }
}

/// Runs `argv` under [`Attached`] to its end; returns its whole output.
pub fn attached_run(argv: &[&str], evict: &str, pool: &str, trace: &str) -> String {
    use std::io::Read;
    let mut a = Attached::start(argv, evict, pool, trace);
    a.go();
    let mut output = std::mem::take(&mut a.first);
    a.out.read_to_string(&mut output).unwrap();
    let status = a.prog.wait().unwrap();
    assert!(status.success(), "{argv:?} traced from outside: {status:?}");
    a.err.read_to_string(&mut a.said).unwrap();
    let status = a.tracer.wait().unwrap();
    assert!(status.success(), "tracer: {status:?} {}", a.said);
    output
}
