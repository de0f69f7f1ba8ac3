//! Idle CPUs held polling while a program's faults are served (`trace`,
//! and `record --backend fault`).

use crate::output::note;
use pagescope_linux::cpuidle::IdlePoll;

/// Holds idle CPUs polling while faults are served, unless `off`; where
/// pagescope may not, says so (unless `quiet`) and goes on without.
pub fn idle_poll(off: bool, quiet: bool) -> Option<IdlePoll> {
    if off {
        return None;
    }
    match IdlePoll::hold() {
        Ok(held) => Some(held),
        Err(e) => {
            if !quiet {
                note(&format!(
                    "idle CPUs may sleep, which makes each fault slower ({e}); \
                     --no-idle-poll silences this"
                ));
            }
            None
        }
    }
}
