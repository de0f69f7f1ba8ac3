//! Idle CPUs held polling while a program's faults are served (`trace`,
//! and `record --backend fault`).

use crate::output::note;
use pagescope_linux::cpuidle::IdlePoll;

/// Holds idle CPUs polling while faults are served, unless `off`: the CPU
/// `cpu` alone where given (`--cpu`), else those pagescope and the
/// processes `pids` may run on. Where pagescope may not, says so (unless
/// `quiet`) and goes on without.
pub fn idle_poll(off: bool, quiet: bool, cpu: Option<usize>, pids: &[u32]) -> Option<IdlePoll> {
    if off {
        return None;
    }
    let cpus = match cpu {
        Some(c) => vec![c],
        None => {
            let mut cpus = pagescope_linux::system::allowed_cpus();
            for &pid in pids {
                cpus.extend(pagescope_linux::system::process_cpus(pid));
            }
            cpus.sort_unstable();
            cpus.dedup();
            cpus
        }
    };
    match IdlePoll::hold(&pagescope_linux::Root::default(), &cpus) {
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
