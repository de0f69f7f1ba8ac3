//! Idle CPUs that poll instead of sleeping, while pagescope serves faults.
//!
//! Every page reference that `trace` (or `record --backend fault`) logs is
//! a round trip between two threads: the program's, which faults and
//! sleeps, and pagescope's fault thread, which serves the fault and wakes
//! it. A CPU left with nothing to run enters an idle state, and waking it
//! from one costs an interrupt between CPUs and the state's exit latency
//! (in a VM, `hlt` is an exit to the host and back): tens of microseconds
//! per reference. The PM QoS CPU latency limit (`/dev/cpu_dma_latency`,
//! the interface real-time tools such as cyclictest use) set to 0 makes
//! the cpuidle governor choose only the polling state, so a woken thread
//! runs at once. The limit holds while the descriptor is open and the
//! kernel drops it when the descriptor closes, also when pagescope is
//! killed. Its cost: idle CPUs spin for as long as it is held.
//!
//! That limit holds every CPU of the machine polling, also those the
//! program never runs on. Where the kernel has per-CPU resume latency
//! limits, pagescope sets those of the CPUs in use only
//! ([`crate::resume_latency`]), and leaves the others free to sleep.

use crate::resume_latency::CpuLimits;
use crate::Root;
use pagescope_core::{Error, Result};
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

/// The PM QoS CPU latency device.
pub const LATENCY_DEVICE: &str = "/dev/cpu_dma_latency";

/// Idle CPUs held polling, until dropped.
#[derive(Debug)]
pub enum IdlePoll {
    /// Some CPUs, through their own resume latency limits.
    Cpus(CpuLimits),
    /// Every CPU, through the machine-wide limit (its open device).
    Machine(File),
}

impl IdlePoll {
    /// Asks the kernel to keep `cpus` polling when idle: through their
    /// resume latency limits, or where the kernel has none, every CPU of
    /// the machine through [`LATENCY_DEVICE`]. Needs root.
    pub fn hold(root: &Root, cpus: &[usize]) -> Result<IdlePoll> {
        if crate::resume_latency::supported(&root.sys, cpus) {
            return CpuLimits::hold(root, cpus).map(IdlePoll::Cpus);
        }
        Self::hold_machine()
    }

    /// Asks the kernel to keep every idle CPU polling (the device is mode
    /// 0600).
    pub fn hold_machine() -> Result<IdlePoll> {
        let mut device = std::fs::OpenOptions::new()
            .write(true)
            .open(LATENCY_DEVICE)
            .map_err(|e| Error::io(LATENCY_DEVICE, e))?;
        device
            .write_all(&0i32.to_ne_bytes())
            .map_err(|e| Error::io(LATENCY_DEVICE, e))?;
        Ok(IdlePoll::Machine(device))
    }

    /// The CPUs held polling, or `None` for every CPU.
    pub fn cpus(&self) -> Option<&[usize]> {
        match self {
            IdlePoll::Cpus(c) => Some(c.cpus()),
            IdlePoll::Machine(_) => None,
        }
    }
}

/// The CPU latency limit in force (microseconds): the least of every
/// holder's, or the kernel's default of 2000 s when none holds one.
pub fn latency_limit_us() -> Result<i32> {
    let mut b = [0u8; 4];
    File::open(LATENCY_DEVICE)
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Error::io(LATENCY_DEVICE, e))?;
    Ok(i32::from_ne_bytes(b))
}

/// One idle state of one CPU, as cpuidle counts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleState {
    /// The CPU.
    pub cpu: u32,
    /// The state's index (0 is the shallowest).
    pub index: u32,
    /// Its name (`POLL` for the polling state).
    pub name: String,
    /// How many times a CPU entered it.
    pub usage: u64,
}

/// Every idle state of every CPU under `sys` (normally `/sys`), or an
/// empty list where the kernel has no cpuidle (`CONFIG_CPU_IDLE`).
pub fn idle_states(sys: &Path) -> Vec<IdleState> {
    let mut out = Vec::new();
    let cpus = crate::numbered(&sys.join("devices/system/cpu"), "cpu").unwrap_or_default();
    for (cpu, dir) in cpus {
        let states = crate::numbered(&dir.join("cpuidle"), "state").unwrap_or_default();
        for (index, state) in states {
            let read = |f: &str| std::fs::read_to_string(state.join(f));
            let (Ok(name), Ok(usage)) = (read("name"), read("usage")) else {
                continue;
            };
            let Ok(usage) = usage.trim().parse() else {
                continue;
            };
            out.push(IdleState {
                cpu: cpu as u32,
                index: index as u32,
                name: name.trim().to_string(),
                usage,
            });
        }
    }
    out.sort_by_key(|s| (s.cpu, s.index));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries into idle states other than polling, over every CPU.
    fn deep_entries(states: &[IdleState]) -> u64 {
        states
            .iter()
            .filter(|s| s.name != "POLL")
            .map(|s| s.usage)
            .sum()
    }

    /// While the limit is held the kernel reports it, and no CPU enters an
    /// idle state other than polling (the kernel's own cpuidle counts).
    #[test]
    fn held_limit_keeps_idle_cpus_polling() {
        let held = match IdlePoll::hold_machine() {
            Ok(h) => h,
            Err(e) => {
                eprintln!("skipped: cannot hold {LATENCY_DEVICE} ({e}); needs root");
                return;
            }
        };
        assert_eq!(latency_limit_us().unwrap(), 0);
        let sys = Path::new("/sys");
        if idle_states(sys).iter().all(|s| s.name == "POLL") {
            eprintln!("skipped: no idle states to compare (needs CONFIG_CPU_IDLE)");
            return;
        }
        // The kernel wakes every idle CPU when the limit changes; one that
        // was on its way into a state may still be counted entering it.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let before = idle_states(sys);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let after = idle_states(sys);
        assert_eq!(
            deep_entries(&after),
            deep_entries(&before),
            "{before:?} -> {after:?}"
        );
        drop(held);
    }

    /// Held on one CPU, that CPU's resume latency limit reads `n/a` and it
    /// enters no idle state but polling (the kernel's own cpuidle counts);
    /// dropped, the limit is as it was.
    #[test]
    fn held_cpu_polls_and_gets_its_limit_back() {
        let root = Root::default();
        let Some(&cpu) = crate::system::allowed_cpus().last() else {
            return;
        };
        if !crate::resume_latency::supported(&root.sys, &[cpu]) {
            eprintln!("skipped: no per-CPU resume latency limit (needs CONFIG_PM)");
            return;
        }
        let limit = || crate::resume_latency::limit(&root.sys, cpu).unwrap();
        let before = limit();
        let held = match IdlePoll::hold(&root, &[cpu]) {
            Ok(h) => h,
            Err(e) => {
                eprintln!("skipped: cannot limit CPU {cpu} ({e}); needs root");
                return;
            }
        };
        assert_eq!(held.cpus(), Some(&[cpu][..]));
        assert_eq!(limit(), "n/a");
        let on_cpu = |states: Vec<IdleState>| -> Vec<IdleState> {
            states
                .into_iter()
                .filter(|s| s.cpu as usize == cpu)
                .collect()
        };
        let sys = Path::new("/sys");
        if on_cpu(idle_states(sys)).iter().any(|s| s.name != "POLL") {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let before = on_cpu(idle_states(sys));
            std::thread::sleep(std::time::Duration::from_millis(300));
            let after = on_cpu(idle_states(sys));
            assert_eq!(deep_entries(&after), deep_entries(&before));
        }
        drop(held);
        // Unless another pagescope holds it meanwhile.
        let others = root.run.join(format!("cpu-latency/cpu{cpu}.orig")).exists();
        assert!(
            others || limit() == before,
            "{} after, {before} before",
            limit()
        );
    }

    /// The sysfs layout is read as the kernel writes it; a kernel without
    /// cpuidle has no states.
    #[test]
    fn idle_states_of_a_tree() {
        let dir = std::env::temp_dir().join(format!("pagescope-cpuidle-{}", std::process::id()));
        let cpus = dir.join("devices/system/cpu");
        std::fs::create_dir_all(cpus.join("cpu0")).unwrap();
        assert!(idle_states(&dir).is_empty());
        for (cpu, state, name, usage) in [(1, 1, "C1", "7\n"), (1, 0, "POLL", "3\n")] {
            let d = cpus.join(format!("cpu{cpu}/cpuidle/state{state}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("name"), format!("{name}\n")).unwrap();
            std::fs::write(d.join("usage"), usage).unwrap();
        }
        std::fs::create_dir_all(cpus.join("cpufreq")).unwrap();
        let states = idle_states(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            states,
            [(0, "POLL", 3), (1, "C1", 7)].map(|(index, name, usage)| IdleState {
                cpu: 1,
                index,
                name: name.into(),
                usage
            })
        );
        assert_eq!(deep_entries(&states), 7);
    }
}
