//! Shared helpers of the integration tests: running the built binaries,
//! starting `pagetest` workloads that are killed when dropped, and
//! reading the kernel's own accounting to check figures against.

#![allow(dead_code, unused_macros)]

/// Ends the calling test as skipped for want of `feature` (see
/// [`skip`]).
macro_rules! skip {
    ($feature:expr, $why:expr) => {{
        skip($feature, &$why);
        return;
    }};
}

/// Skips (with the reason) unless page frame numbers are visible.
macro_rules! require_pfns {
    () => {
        if !pfns_visible() {
            skip!(
                "root",
                "needs CAP_SYS_ADMIN to see page frame numbers (run the tests as root)"
            );
        }
    };
}

pub mod hugetlb;
#[macro_use]
pub mod trace;
pub mod named;
pub mod record;

use pagescope_core::analysis::temporal::Recording;
use pagescope_core::format::{read_record, Completeness};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The built `pagescope` binary.
pub fn pagescope_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_pagescope"))
}

/// The built `pagetest` binary (a sibling in the target directory).
pub fn pagetest_bin() -> PathBuf {
    let p = pagescope_bin().with_file_name("pagetest");
    assert!(
        p.exists(),
        "{} missing: build the workspace first (cargo build --workspace, or cargo test --workspace)",
        p.display()
    );
    p
}

/// Runs pagescope with `args`, optionally under a wrapper command.
pub fn run(wrapper: &[&str], args: &[&str]) -> Output {
    let bin = pagescope_bin();
    let mut cmd = match wrapper.split_first() {
        Some((w, rest)) => {
            let mut c = Command::new(w);
            c.args(rest).arg(&bin);
            c
        }
        None => Command::new(&bin),
    };
    cmd.args(args).output().expect("pagescope runs")
}

/// Runs pagescope and insists on success.
pub fn run_ok(args: &[&str]) -> Output {
    let out = run(&[], args);
    assert!(
        out.status.success(),
        "pagescope {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Snapshots one process into `path`.
pub fn snapshot_pid(pid: u32, path: &str) {
    run_ok(&["snapshot", "-q", "--pid", &pid.to_string(), "-o", path]);
}

/// Runs a report and parses its JSON.
pub fn report_json(args: &[&str]) -> Value {
    let out = run_ok(args);
    serde_json::from_slice(&out.stdout).expect("report prints JSON")
}

/// Serialises the tests that start workloads: a pagetest starting or
/// exiting changes how many processes share the pagetest binary's pages,
/// and so the PSS and USS of every other pagetest. Hold the guard for the
/// whole test.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running pagetest; killed and reaped when dropped.
#[derive(Debug)]
pub struct Pagetest {
    pub child: Child,
    pub ready: Value,
    pub lines: Vec<Value>,
    reader: Option<BufReader<std::process::ChildStdout>>,
    /// Under a wrapper: a pidfd of the pagetest process itself, which a
    /// killed tracer would leave waiting on its pages away.
    wrapped: Option<std::os::fd::OwnedFd>,
}

/// The pid of a pagetest started with `--leader-exits` and the thread
/// that holds its memory, once its main thread has exited (its stat
/// says `Z`) and that thread sleeps.
pub fn leader_exited(pt: &Pagetest) -> (u32, u32) {
    let (pid, tid) = (pt.pid(), pt.lines.last().unwrap()["tid"].as_u64().unwrap());
    wait_main_thread_exited(pid);
    wait_asleep(tid);
    (pid, tid as u32)
}

/// Waits until process `pid`'s main thread has exited (its stat says
/// `Z`) while other threads of it run on.
pub fn wait_main_thread_exited(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap()
        .contains(") Z ")
    {
        assert!(
            Instant::now() < deadline,
            "{pid}'s main thread never exited"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until process `pid` sleeps in `nanosleep` (pagetest's hold) or
/// `sigtimedwait` (the holding thread of `--leader-exits`).
pub fn wait_asleep(pid: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        if wchan.contains("nanosleep") || wchan.contains("sigtimedwait") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pagetest {pid} did not go to sleep in 10 s (wchan {wchan:?})"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl Pagetest {
    /// Starts pagetest with `args` (optionally under a wrapper) and waits
    /// for its `done` line (or `ready` if `until` says so).
    pub fn start(wrapper: &[&str], args: &[&str], until: &str) -> Pagetest {
        let bin = pagetest_bin();
        let mut cmd = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(&bin);
                c
            }
            // A process group of its own, as a shell's job has: pagescope
            // attached by pid waits for it from another group.
            None => {
                let mut c = Command::new(&bin);
                std::os::unix::process::CommandExt::process_group(&mut c, 0);
                c
            }
        };
        if args.contains(&"--wait-stdin") {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("pagetest starts");
        let stdout = child.stdout.take().unwrap();
        let mut reader = BufReader::new(stdout);
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let n = reader.read_line(&mut line).unwrap();
            assert!(n > 0, "pagetest {args:?} ended early");
            let v: Value = serde_json::from_str(&line).expect("pagetest prints JSON lines");
            let event = v["event"].as_str().unwrap().to_string();
            lines.push(v);
            if event == until {
                break;
            }
        }
        let ready = lines[0].clone();
        assert_eq!(ready["event"], "ready");
        if until == "done" && args.contains(&"--hold") {
            // Between its `done` line and its first sleep, pagetest may
            // still fault in the code that sleeps: wait until it (and any
            // forked child) sleeps, so that its memory holds still.
            let forked = lines.iter().filter(|l| l["event"] == "forked");
            let children = forked.flat_map(|l| l["pids"].as_array().unwrap().clone());
            for pid in children.chain([ready["pid"].clone()]) {
                wait_asleep(pid.as_u64().unwrap());
            }
        }
        let pid = ready["pid"].as_u64().unwrap() as i32;
        let wrapped = (pid as u32 != child.id())
            .then(|| {
                rustix::process::Pid::from_raw(pid).and_then(|p| {
                    rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
                })
            })
            .flatten();
        Pagetest {
            child,
            ready,
            lines,
            reader: Some(reader),
            wrapped,
        }
    }

    /// Waits for pagetest's next JSON line.
    pub fn next_line(&mut self) -> Value {
        let reader = self.reader.as_mut().unwrap();
        let mut line = String::new();
        assert!(reader.read_line(&mut line).unwrap() > 0, "pagetest ended");
        let v: Value = serde_json::from_str(&line).unwrap();
        self.lines.push(v.clone());
        v
    }

    /// Lets a pagetest started with `--wait-stdin` go on.
    pub fn go(&mut self) {
        use std::io::Write;
        let mut stdin = self.child.stdin.take().expect("started with --wait-stdin");
        stdin.write_all(b"go\n").unwrap();
    }

    /// Reads pagetest's lines up to the next `event` line, and returns it.
    pub fn until(&mut self, event: &str) -> Value {
        loop {
            let v = self.next_line();
            if v["event"] == event {
                return v;
            }
        }
    }

    /// The pagetest process's pid (from its own ready line).
    pub fn pid(&self) -> u32 {
        self.ready["pid"].as_u64().unwrap() as u32
    }

    /// Pages in its buffer.
    pub fn pages(&self) -> u64 {
        self.ready["pages"].as_u64().unwrap()
    }

    /// Starts pagetest with `args` under `pagescope record -q OPTIONS -o
    /// OUT --` (see [`recorder`]), up to its line `until`: the recorder
    /// is the child, and launches pagetest.
    pub fn recorded(options: &[&str], out: &str, args: &[&str], until: &str) -> Pagetest {
        Pagetest::start(&recorder(options, out), args, until)
    }

    /// Waits for the recorder of a [`Pagetest::recorded`] to exit, which
    /// must succeed, and reads its recording `out`, which must be
    /// complete.
    pub fn recording(&mut self, out: &str) -> Recording {
        let status = self.child.wait().unwrap();
        assert!(status.success(), "record exited with {status}");
        read_complete_recording(out)
    }

    /// Its buffer, `[start, end)` (from its ready line).
    pub fn buffer(&self) -> (u64, u64) {
        buffer_of(&self.ready)
    }
}

impl Drop for Pagetest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A test that fails with a tracer wrapped around pagetest kills
        // the tracer above, and pagetest would wait for ever on a page
        // away: it goes too (by its pidfd, so never another process).
        if let Some(fd) = &self.wrapped {
            let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
        }
    }
}

/// The kernel's smaps_rollup of a process, in kB by key.
pub fn smaps_rollup(pid: u32) -> std::collections::HashMap<String, u64> {
    rollup_at(&format!("/proc/{pid}/smaps_rollup"))
}

/// The kernel's smaps_rollup of process `pid` read through its thread
/// `tid` (`/proc/PID/task/TID/smaps_rollup`), in kB by key.
pub fn task_smaps_rollup(pid: u32, tid: u32) -> std::collections::HashMap<String, u64> {
    rollup_at(&format!("/proc/{pid}/task/{tid}/smaps_rollup"))
}

fn rollup_at(path: &str) -> std::collections::HashMap<String, u64> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.to_string(), v.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

/// Asserts `a` is within `pct` percent of `b`.
pub fn assert_close(what: &str, a: f64, b: f64, pct: f64) {
    let tol = b.abs() * pct / 100.0;
    assert!(
        (a - b).abs() <= tol.max(1.0),
        "{what}: pagescope says {a}, the kernel says {b} (more than {pct}% apart)"
    );
}

/// The row of `pid` in a processes report.
pub fn process_row(report: &Value, pid: u32) -> Value {
    report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} not in the report"))
        .clone()
}

/// The words of `pagescope record -q OPTIONS -o OUT` (after the binary).
pub fn record_args<'a>(options: &[&'a str], out: &'a str) -> Vec<&'a str> {
    let mut args = vec!["record", "-q"];
    args.extend_from_slice(options);
    args.extend(["-o", out]);
    args
}

/// The `record` options of a recording of the whole machine with the
/// refs backend, in 1 s intervals, for `duration`.
pub fn system_refs(duration: &str) -> [&str; 7] {
    [
        "--system",
        "--backend",
        "refs",
        "--interval",
        "1s",
        "--duration",
        duration,
    ]
}

/// `pagescope record -q OPTIONS -o OUT --`: a wrapper (for
/// [`Pagetest::start`]) that launches and records the program after it.
pub fn recorder<'a>(options: &[&'a str], out: &'a str) -> Vec<&'a str> {
    let mut wrapper = vec![env!("CARGO_BIN_EXE_pagescope")];
    wrapper.extend(record_args(options, out));
    wrapper.push("--");
    wrapper
}

/// A recording file, read whole, and whether it is complete.
pub fn read_recording(path: &str) -> (Recording, Completeness) {
    let mut r = Recording::default();
    let f = std::fs::File::open(path).unwrap();
    let done = read_record(BufReader::new(f), Path::new(path), &mut r).unwrap();
    (r, done)
}

/// A recording file, read whole; it must be complete.
pub fn read_complete_recording(path: &str) -> Recording {
    let (r, done) = read_recording(path);
    assert_eq!(done, Completeness::Complete, "{path}");
    r
}

/// `pagescope analyze PATH VIEW --format json OPTIONS`, parsed.
pub fn analyze_json(path: &str, view: &str, options: &[&str]) -> Value {
    let mut args = vec!["analyze", path, view, "--format", "json"];
    args.extend_from_slice(options);
    report_json(&args)
}

/// The rows of table `key` of a report.
pub fn rows(report: &Value, key: &str) -> Vec<Value> {
    report[key]
        .as_array()
        .unwrap_or_else(|| panic!("no table {key}: {report}"))
        .clone()
}

/// The buffer `[start, end)` that a JSON line (pagetest's, or a
/// workload's log) names.
pub fn buffer_of(line: &Value) -> (u64, u64) {
    (
        line["start"].as_u64().unwrap(),
        line["end"].as_u64().unwrap(),
    )
}

/// The `--range` of `[start, end)`.
pub fn range_arg((start, end): (u64, u64)) -> String {
    format!("{start:#x}-{end:#x}")
}

/// The rows (table `key`) of `analyze PATH VIEW --format json`, over
/// `range` if given.
pub fn analyze_rows(path: &str, view: &str, key: &str, range: Option<(u64, u64)>) -> Vec<Value> {
    let range = range.map(range_arg);
    let options: Vec<&str> = range.iter().flat_map(|r| ["--range", r]).collect();
    rows(&analyze_json(path, view, &options), key)
}

/// `analyze PATH temporal` rows (one per interval), over `range` if given.
pub fn temporal(path: &str, range: Option<(u64, u64)>) -> Vec<Value> {
    analyze_rows(path, "temporal", "intervals", range)
}

/// Whether this process can see page frame numbers (root with
/// CAP_SYS_ADMIN). Tests that need them say so and skip otherwise.
pub fn pfns_visible() -> bool {
    pagescope_linux::system::pfns_visible(
        &pagescope_linux::Root::default(),
        pagescope_linux::system::page_size(),
    )
}

/// A path in a temporary directory.
pub fn temp_path(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_string()
}

/// A test that can't run here for want of `feature`: says `why` on
/// stderr and appends it to the file `$PAGESCOPE_SKIP_LOG` names, if any,
/// so that a run can end with its skips counted (cargo test hides a
/// passing test's stderr). Where the run requires `feature`
/// (`$PAGESCOPE_TESTS_REQUIRE`, comma-separated: what CI's machine has),
/// the skip is a failure instead.
pub fn skip(feature: &str, why: &str) {
    let required = std::env::var("PAGESCOPE_TESTS_REQUIRE").unwrap_or_default();
    if required.split(',').any(|f| f.trim() == feature) {
        panic!("this run requires `{feature}` (PAGESCOPE_TESTS_REQUIRE), but: {why}");
    }
    eprintln!("skipped: {why}");
    if let Ok(log) = std::env::var("PAGESCOPE_SKIP_LOG") {
        use std::io::Write;
        let test = std::thread::current()
            .name()
            .unwrap_or("a test")
            .to_string();
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(log)
        {
            let _ = writeln!(f, "{test} [{feature}]: {why}");
        }
    }
}

/// The userfaultfd features this kernel offers, asked of the kernel
/// (`UFFDIO_API` with none requested returns them all); `None` without
/// userfaultfd (or the right to make one).
pub fn uffd_features() -> Option<u64> {
    pagescope_sys::uffd::Uffd::probe_features().ok()
}

/// `UFFD_FEATURE_MOVE` (Linux 6.8): pages move without a copy.
pub const UFFD_FEATURE_MOVE: u64 = 1 << 16;
/// `UFFD_FEATURE_MINOR_SHMEM | UFFD_FEATURE_WP_HUGETLBFS_SHMEM` (Linux
/// 5.19): shared memory can be traced.
pub const UFFD_FEATURES_SHMEM: u64 = (1 << 10) | (1 << 12);
/// `UFFD_FEATURE_WP_ASYNC` (Linux 6.7): written pages by `PAGEMAP_SCAN`.
pub const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;

/// The wrapper that runs a command as `nobody` (uid and gid 65534, no
/// supplementary groups, no capabilities), or `None` (and why) when this
/// test run can't: that needs root and setpriv (util-linux).
pub fn as_nobody() -> Option<[&'static str; 5]> {
    if !rustix::process::geteuid().is_root() {
        skip(
            "root",
            "running as nobody needs root (run the tests as root)",
        );
        return None;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        skip("setpriv", "setpriv (util-linux) is not installed");
        return None;
    }
    Some([
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
    ])
}

/// Runs pagescope under `wrapper` and insists on success.
pub fn run_ok_as(wrapper: &[&str], args: &[&str]) -> Output {
    let out = run(wrapper, args);
    assert!(
        out.status.success(),
        "pagescope {args:?} under {wrapper:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Asserts that pagescope exited with `code` and one `error: ` line
/// (notes aside), and returns that line.
pub fn failed_with(out: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("note: "))
        .collect();
    assert_eq!(errors.len(), 1, "one line: {stderr}");
    assert!(errors[0].starts_with("error: "), "{stderr}");
    errors[0].to_string()
}

/// Whether Yama is in this kernel (it has a ptrace_scope sysctl).
pub fn has_yama() -> bool {
    Path::new("/proc/sys/kernel/yama/ptrace_scope").exists()
}

/// Whether the message mentions Yama only as Yama's sysctl says: not at
/// all without Yama, except to say there is none.
pub fn assert_yama_named_truly(msg: &str) {
    if !has_yama() {
        assert!(
            !msg.replace("there is no Yama", "").contains("Yama"),
            "this kernel has no Yama: {msg}"
        );
    }
}

/// `vm.unprivileged_userfaultfd`, if this kernel has it.
pub fn unprivileged_userfaultfd() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether pid 2 is a kernel thread (kthreadd), as on every Linux
/// machine outside a pid namespace.
pub fn pid_2_is_a_kernel_thread() -> bool {
    std::fs::read_to_string("/proc/2/stat")
        .ok()
        .and_then(|t| pagescope_core::parse::stat::parse(&t).ok())
        .is_some_and(|s| s.is_kernel_thread())
}

/// The tracer of `pid` (`TracerPid`), 0 if none.
pub fn tracer_of(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Runs pagescope with `args` under umask 000, as from a careless shell.
pub fn run_umask0(args: &[&str]) -> Output {
    run(&["sh", "-c", "umask 000; exec \"$0\" \"$@\""], args)
}

/// Runs pagescope with `args` and `input` on its standard input.
pub fn run_stdin(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(pagescope_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pagescope runs");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Written from a thread: pagescope may print before it has read all.
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

/// The permission bits of `path` itself (a symlink is not followed).
pub fn mode_of(path: &str) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// What another user could plant at an output path: a symlink to a file
/// of theirs (`victim`, with known contents).
pub struct Planted {
    pub link: String,
    victim: String,
}

const VICTIM: &[u8] = b"not pagescope's to overwrite\n";

impl Planted {
    /// Plants `name` in `dir`, a symlink to a file beside it.
    pub fn new(dir: &Path, name: &str) -> Planted {
        let victim = temp_path(dir, &format!("{name}.victim"));
        std::fs::write(&victim, VICTIM).unwrap();
        let link = temp_path(dir, name);
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        Planted { link, victim }
    }

    /// Asserts that the link was replaced by a private file of
    /// pagescope's, and its target left as it was.
    pub fn assert_replaced(&self) {
        let meta = std::fs::symlink_metadata(&self.link).unwrap();
        assert!(
            meta.file_type().is_file(),
            "{} is still a symlink: pagescope wrote through it",
            self.link
        );
        assert_eq!(mode_of(&self.link), 0o600, "{}", self.link);
        assert_eq!(
            std::fs::read(&self.victim).unwrap(),
            VICTIM,
            "the symlink's target was overwritten"
        );
    }
}

/// A `record --backend refs --duration 4s` of `pid` into `out` that holds
/// it (attached and frozen at each boundary), once it has attached.
pub fn hold_with_recorder(pid: u32, out: &str) -> Child {
    let holder = Command::new(pagescope_bin())
        .args(["record", "-q", "--backend", "refs", "--duration", "4s"])
        .args(["--pid", &pid.to_string(), "-o", out])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tracer_of(pid) != holder.id() {
        assert!(Instant::now() < deadline, "the recorder did not attach");
        std::thread::sleep(Duration::from_millis(10));
    }
    holder
}

/// Where test swapfiles go: on the root filesystem (swapon refuses
/// tmpfs), named after the test binary's pid so that a leftover can be
/// told from a live one.
const SWAPFILE_PREFIX: &str = "/var/tmp/pagescope-test-swap-";

/// A swapfile switched on for as long as it lives: dropped (at the end
/// of the test, or while a failing test unwinds), it is switched off and
/// removed. Hold it for the whole test, under [`serial`], and declare it
/// before the workloads, so that they are killed first (and swapoff has
/// little to read back).
#[derive(Debug)]
pub struct Swapfile {
    path: PathBuf,
}

impl Swapfile {
    /// Size of each swapfile.
    const BYTES: &'static str = "256M";

    /// Makes a 256 MiB swapfile and switches it on, or says why not
    /// (not root, or the kernel or filesystem refused).
    pub fn on() -> Result<Swapfile, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("switching a swapfile on needs root (run the tests as root)".into());
        }
        Swapfile::remove_leftovers();
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = PathBuf::from(format!("{SWAPFILE_PREFIX}{}-{n}", std::process::id()));
        // From here on, Drop removes whatever was made.
        let swap = Swapfile { path };
        {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&swap.path)
                .map_err(|e| format!("cannot create {}: {e}", swap.path.display()))?;
        }
        let path = swap.path.to_str().unwrap();
        for argv in [
            &["fallocate", "-l", Swapfile::BYTES, path][..],
            &["mkswap", path][..],
        ] {
            match Command::new(argv[0]).args(&argv[1..]).output() {
                Ok(o) if o.status.success() => {}
                Ok(o) => {
                    return Err(format!(
                        "{argv:?} failed: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    ))
                }
                Err(e) => return Err(format!("{} (util-linux) does not run: {e}", argv[0])),
            }
        }
        if let Err(e) = pagescope_sys::mem::swapon(Path::new(path)) {
            return Err(format!(
                "the kernel refused swapon of a swapfile on {}: {e}",
                Path::new(SWAPFILE_PREFIX).parent().unwrap().display(),
            ));
        }
        Ok(swap)
    }

    /// Whether `path` is switched on (listed in /proc/swaps).
    fn active(path: &Path) -> bool {
        std::fs::read_to_string("/proc/swaps")
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|l| l.split_whitespace().next() == path.to_str())
    }

    /// Switches `path` off (if on) and removes it; says on stderr what
    /// it could not do.
    fn off(path: &Path) {
        // swapoff reads every page in the file back into memory; it can
        // fail for want of memory, or while another swapoff runs.
        for _ in 0..10 {
            if !Swapfile::active(path) {
                break;
            }
            if let Err(e) = pagescope_sys::mem::swapoff(path) {
                eprintln!("swapoff {}: {e}", path.display());
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        if Swapfile::active(path) {
            eprintln!("{} is still switched on: not removed", path.display());
            return;
        }
        if let Err(e) = std::fs::remove_file(path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("cannot remove {}: {e}", path.display());
            }
        }
    }

    /// Switches off and removes the swapfiles of test binaries that died
    /// without doing it (killed, say), leaving those of live ones alone.
    fn remove_leftovers() {
        let Ok(dir) = std::fs::read_dir(Path::new(SWAPFILE_PREFIX).parent().unwrap()) else {
            return;
        };
        let name = Path::new(SWAPFILE_PREFIX)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        for entry in dir.flatten() {
            let file = entry.file_name();
            let Some(rest) = file.to_str().and_then(|f| f.strip_prefix(name)) else {
                continue;
            };
            let pid = rest.split('-').next().unwrap_or_default();
            if !pid.is_empty() && !Path::new("/proc").join(pid).exists() {
                Swapfile::off(&entry.path());
            }
        }
    }
}

impl Drop for Swapfile {
    fn drop(&mut self) {
        Swapfile::off(&self.path);
    }
}

/// The raw pagemap entries of `[start, end)` in process `pid`.
pub fn pagemap_entries(pid: u32, start: u64, end: u64) -> Vec<u64> {
    use std::os::unix::fs::FileExt;
    let ps = rustix::param::page_size() as u64;
    let f = std::fs::File::open(format!("/proc/{pid}/pagemap")).unwrap();
    let mut bytes = vec![0u8; ((end - start) / ps * 8) as usize];
    f.read_exact_at(&mut bytes, start / ps * 8).unwrap();
    bytes
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// Whether a pagemap entry is a page in swap, by the kernel's
/// Documentation/admin-guide/mm/pagemap.rst: bit 62 (swapped), but not a
/// guard region (bit 58), which pagemap marks swapped too.
pub fn entry_in_swap(e: u64) -> bool {
    e >> 62 & 1 == 1 && e >> 58 & 1 == 0
}

/// The addresses of the pages of `[start, end)` that process `pid` has
/// in swap, by its pagemap.
pub fn pages_in_swap(pid: u32, start: u64, end: u64) -> Vec<u64> {
    let ps = rustix::param::page_size() as u64;
    pagemap_entries(pid, start, end)
        .into_iter()
        .enumerate()
        .filter(|&(_, e)| entry_in_swap(e))
        .map(|(i, _)| start + i as u64 * ps)
        .collect()
}

/// A small tmpfs mounted on a temporary directory: a filesystem that
/// fills. Unmounted when dropped.
pub struct SmallFs {
    pub dir: tempfile::TempDir,
}

impl SmallFs {
    /// Mounts a tmpfs of `size` (e.g. `1M`); `None` (with the reason
    /// printed) where this process may not mount.
    pub fn mount(size: &str) -> Option<SmallFs> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: mounting a tmpfs needs root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .expect("mount runs")
            .success();
        assert!(ok, "cannot mount a tmpfs on {}", dir.path().display());
        Some(SmallFs { dir })
    }

    /// A path in the filesystem.
    pub fn path(&self, name: &str) -> String {
        temp_path(self.dir.path(), name)
    }

    /// Fills the filesystem but for `free` bytes (a multiple of the page
    /// size): writes a file until the filesystem refuses, then gives the
    /// last `free` bytes back.
    pub fn fill(&self, free: u64) {
        use std::io::Write;
        let path = self.path("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let mut len = 0u64;
        for chunk in [65536, 4096, 1] {
            let zeros = vec![0u8; chunk];
            loop {
                match f.write(&zeros) {
                    Ok(n) if n > 0 => len += n as u64,
                    Ok(_) => break,
                    Err(e) => {
                        let enospc = rustix::io::Errno::NOSPC.raw_os_error();
                        assert_eq!(e.raw_os_error(), Some(enospc), "{e}");
                        break;
                    }
                }
            }
        }
        f.set_len(len - free).unwrap();
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// The processes (other than this one) whose command line holds `token`.
pub fn processes_with(token: &str) -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| p != me)
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(token))
        })
        .collect()
}

/// SIGKILLs, when dropped, every process whose command line holds the
/// token: what a test that failed would leave running.
pub struct KillTokenOnDrop(pub String);

impl Drop for KillTokenOnDrop {
    fn drop(&mut self) {
        for p in processes_with(&self.0) {
            if let Some(pid) = rustix::process::Pid::from_raw(p as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// Runs pagescope with `args` (ending in a command to launch that holds
/// `token` in its arguments), the launched program's standard output
/// into the file `stdout`; waits for pagescope and then checks that it
/// left nothing of what it launched: no process holds `token`, and the
/// pids pagetest announced (its `ready` lines in `stdout`) are gone.
/// Returns pagescope's exit status and standard error.
pub fn run_and_check_nothing_left(
    args: &[&str],
    stdout: &str,
    token: &str,
) -> (std::process::ExitStatus, String, Vec<Value>) {
    let _cleanup = KillTokenOnDrop(token.to_string());
    // Files, not pipes: a program left running would hold a pipe open.
    let out = std::fs::File::create(stdout).unwrap();
    let err_path = format!("{stdout}.stderr");
    let err = std::fs::File::create(&err_path).unwrap();
    let mut child = Command::new(pagescope_bin())
        .args(args)
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("pagescope {args:?} ran for a minute");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    let _ = std::fs::remove_file(&err_path);

    // Right at pagescope's exit: nothing it launched still runs.
    let running: Vec<(u32, String)> = processes_with(token)
        .into_iter()
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            (state != 'Z').then_some((p, stat))
        })
        .collect();
    assert!(
        running.is_empty(),
        "pagescope exited ({status}) and left {running:?} running; it said: {stderr}"
    );
    let lines: Vec<Value> = std::fs::read_to_string(stdout)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // And each is gone for good (pagescope reaped it, or init will).
    for l in lines.iter().filter(|l| l["event"] == "ready") {
        let pid = l["pid"].as_u64().unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(Instant::now() < deadline, "pagetest {pid} is still there");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    (status, stderr, lines)
}

/// A zombie: a child that exited at once, of a python3 that sleeps 30 s
/// and never waits for it, and that parent, which the caller kills.
/// Returns once the child is a zombie.
pub fn zombie() -> (std::process::Child, u32) {
    // python3 never reaps a child it does not wait for (a shell may reap
    // its background job before its `exec`, and the zombie is gone).
    const PARENT: &str = "import os, sys, time\n\
        pid = os.fork()\n\
        if pid == 0:\n    os._exit(0)\n\
        print(pid, flush=True)\n\
        time.sleep(30)\n";
    let mut parent = Command::new("python3")
        .args(["-c", PARENT])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut BufReader::new(parent.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let zombie: u32 = line.trim().parse().unwrap();
    let stat = format!("/proc/{zombie}/stat");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(&stat).unwrap().contains(") Z ") {
        assert!(
            std::time::Instant::now() < deadline,
            "{zombie} never exited"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    (parent, zombie)
}
