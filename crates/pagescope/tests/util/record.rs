//! Helpers of the tests of `pagescope record` (tests/record*.rs).

use super::*;

/// Whether this kernel has what the fault backend needs (asked of the
/// kernel: a userfaultfd with write protection, for root); if not, the
/// backend must refuse, naming it, and the test skips.
pub fn fault_available() -> bool {
    const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1;
    if rustix::process::geteuid().is_root()
        && uffd_features().is_some_and(|f| f & UFFD_FEATURE_PAGEFAULT_FLAG_WP != 0)
    {
        return true;
    }
    let o = run(
        &[],
        &[
            "record",
            "-q",
            "--backend",
            "fault",
            "-o",
            "/dev/null",
            "--",
            "true",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("userfaultfd"), "{err}");
    skip("userfaultfd", &err);
    false
}

/// Waits up to `limit` for `f`.
pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A spike: a run of consecutive intervals with references to the buffer
/// (an iteration may straddle interval boundaries).
#[derive(Debug)]
pub struct Spike {
    pub user: u64,
    pub written: Option<u64>,
    pub first_seq: u64,
}

/// Intervals with more than `quiet` pages are in a spike; the others must
/// hold at most `quiet` pages.
pub fn spikes(rows: &[Value], quiet: u64) -> Vec<Spike> {
    let mut out: Vec<Spike> = Vec::new();
    let mut inside = false;
    for r in rows {
        let user = r["user_pages"].as_u64().unwrap();
        let written = r["written_pages"].as_u64();
        if user > quiet {
            if !inside {
                out.push(Spike {
                    user: 0,
                    written: written.map(|_| 0),
                    first_seq: r["seq"].as_u64().unwrap(),
                });
            }
            let s = out.last_mut().unwrap();
            s.user += user;
            s.written = s.written.zip(written).map(|(a, b)| a + b);
            inside = true;
        } else {
            inside = false;
        }
    }
    out
}
