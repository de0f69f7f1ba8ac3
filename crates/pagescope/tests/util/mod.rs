//! Shared helpers of the integration tests: running the built binaries,
//! starting `pagetest` workloads that are killed when dropped, and
//! reading the kernel's own accounting to check figures against.

#![allow(dead_code, unused_macros)]

/// Skips (with the reason) unless page frame numbers are visible.
macro_rules! require_pfns {
    () => {
        if !pfns_visible() {
            eprintln!(
                "skipped: needs CAP_SYS_ADMIN to see page frame numbers (run the tests as root)"
            );
            return;
        }
    };
}

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
}

/// Waits until process `pid` sleeps in `nanosleep` (pagetest's hold).
fn wait_asleep(pid: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        if wchan.contains("nanosleep") {
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
            None => Command::new(&bin),
        };
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
        Pagetest {
            child,
            ready,
            lines,
            reader: Some(reader),
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

    /// The pagetest process's pid (from its own ready line).
    pub fn pid(&self) -> u32 {
        self.ready["pid"].as_u64().unwrap() as u32
    }

    /// Pages in its buffer.
    pub fn pages(&self) -> u64 {
        self.ready["pages"].as_u64().unwrap()
    }
}

impl Drop for Pagetest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The kernel's smaps_rollup of a process, in kB by key.
pub fn smaps_rollup(pid: u32) -> std::collections::HashMap<String, u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
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
