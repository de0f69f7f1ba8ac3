//! `pagescope trace --release PID`: after a tracer was killed, every page
//! it had evicted goes back, and the processes run on untraced. The
//! library does it all ([`pagescope_linux::trace::release_all`]); this
//! says what it did.

use anyhow::Result;
use pagescope_linux::trace::{release_all, ReleaseReport};

/// Releases `root` and the traced processes it forked; says what it did
/// unless `quiet` (on a failure, what it did before).
pub fn run(root: u32, quiet: bool) -> Result<()> {
    let say = |report: &ReleaseReport| {
        if !quiet {
            for step in &report.steps {
                eprintln!("{step}");
            }
        }
    };
    match release_all(&pagescope_linux::Root::default(), root) {
        Ok(report) => {
            say(&report);
            Ok(())
        }
        Err(e) => {
            if let Some(done) = e.done() {
                say(done);
            }
            Err(e.into())
        }
    }
}
