//! A process under a name of the test's choosing: names with quotes,
//! backslashes, newlines or terminal escapes, as any user may give one.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A copy of sleep(1), named `name` in a temporary directory and run
/// from there: its `comm` is `name` (the kernel keeps 15 bytes), and its
/// path, which its mappings and command line show, ends in it. Killed
/// and reaped when dropped.
#[derive(Debug)]
pub struct Named {
    pub child: Child,
    /// The copy's path (the command line's first word).
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Named {
    /// Starts the copy (`sleep 600`) and waits until it has exec'd.
    pub fn start(name: &str) -> Named {
        assert!(name.len() <= 15, "a comm holds 15 bytes: {name:?}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::copy("/bin/sleep", &path).unwrap();
        // A fork in another test's thread may hold the copy open for
        // writing a moment longer (ETXTBSY): try again.
        let deadline = Instant::now() + Duration::from_secs(10);
        let child = loop {
            match Command::new(&path)
                .arg("600")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
            {
                Ok(c) => break c,
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("{} does not start: {e}", path.display()),
            }
        };
        let named = Named {
            child,
            path,
            _dir: dir,
        };
        while named.comm() != name.as_bytes() {
            assert!(
                Instant::now() < deadline,
                "pid {}: comm {:?}, not {name:?}, after 10 s",
                named.pid(),
                String::from_utf8_lossy(&named.comm())
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        named
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its `comm`, as /proc/PID/comm has it (without the newline that
    /// ends the file).
    pub fn comm(&self) -> Vec<u8> {
        let mut c = std::fs::read(format!("/proc/{}/comm", self.pid())).unwrap_or_default();
        if c.last() == Some(&b'\n') {
            c.pop();
        }
        c
    }

    /// Its command line, its arguments joined by spaces.
    pub fn cmdline(&self) -> String {
        let raw = std::fs::read(format!("/proc/{}/cmdline", self.pid())).unwrap();
        raw.split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(String::from_utf8_lossy)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
