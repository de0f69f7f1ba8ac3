//! Per-CPU resume latency limits, set and given back.
//!
//! The cpuidle governors (menu, teo, haltpoll, ladder) choose an idle
//! state no deeper than the least of two limits: the machine-wide one of
//! `/dev/cpu_dma_latency`, and each CPU's own,
//! `/sys/devices/system/cpu/cpuN/power/pm_qos_resume_latency_us`, where
//! `n/a` means that CPU may take no resume latency at all: it only polls.
//! Limiting only the CPUs a traced program and pagescope's fault thread
//! run on leaves every other CPU free to sleep.
//!
//! Unlike the device, whose limit the kernel drops when its descriptor
//! closes, a CPU's limit is one value shared by all of user space, which
//! stays until written again. So pagescope keeps a registry under
//! `/run/pagescope/cpu-latency` (tmpfs: a reboot resets both):
//!
//! - `cpuN.orig` holds the value the CPU had before the first pagescope
//!   limited it;
//! - every pagescope that wants CPU N polling holds a shared `flock` on
//!   `cpuN.hold`. The kernel drops it when that pagescope exits, also
//!   when it is killed;
//! - a CPU whose `cpuN.hold` can be locked exclusively has no holder left:
//!   its `cpuN.orig` is written back and removed. Every pagescope that
//!   lets go does this, as does every new holder and
//!   `pagescope trace --release` (so a limit a killed pagescope left is
//!   given back by the next one, or at once by `--release`).
//!
//! An exclusive `flock` on `.lock` makes each of these steps one at a
//! time. Another tool that writes a CPU's limit while pagescope holds it
//! is overwritten when pagescope gives the original back.

use crate::Root;
use pagescope_core::{Error, Result};
use rustix::fs::{flock, FlockOperation, Mode, OFlags};
use std::fs::File;
use std::path::{Path, PathBuf};

/// The registry under the run directory of a [`Root`].
const REGISTRY: &str = "cpu-latency";

/// What a CPU's limit file says when the CPU may take no latency at all.
const NO_LATENCY: &str = "n/a";

/// The resume latency limit file of `cpu` under `sys`.
pub fn limit_path(sys: &Path, cpu: usize) -> PathBuf {
    sys.join(format!(
        "devices/system/cpu/cpu{cpu}/power/pm_qos_resume_latency_us"
    ))
}

/// Whether the kernel offers a resume latency limit for every one of
/// `cpus` (it does where it was built with `CONFIG_PM`).
pub fn supported(sys: &Path, cpus: &[usize]) -> bool {
    !cpus.is_empty() && cpus.iter().all(|&c| limit_path(sys, c).exists())
}

/// The limit `cpu` has now, as the kernel shows it: `0` (no limit),
/// `n/a` (none allowed) or microseconds.
pub fn limit(sys: &Path, cpu: usize) -> Result<String> {
    let path = limit_path(sys, cpu);
    std::fs::read_to_string(&path)
        .map(|s| s.trim().to_string())
        .map_err(|e| Error::io(&path, e))
}

/// A limit of no latency on some CPUs, held until dropped.
#[derive(Debug)]
pub struct CpuLimits {
    root: Root,
    cpus: Vec<usize>,
    holds: Vec<File>,
}

/// A CPU whose limit was given back, and the value it got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    /// The CPU.
    pub cpu: usize,
    /// Its limit as it was before pagescope's.
    pub value: String,
}

impl CpuLimits {
    /// Holds `cpus` polling when idle, after giving back the limits that
    /// no pagescope holds any more. Needs root (the files are 0644).
    pub fn hold(root: &Root, cpus: &[usize]) -> Result<CpuLimits> {
        let dir = registry(root);
        let _lock = lock_registry(&dir)?;
        restore_unheld(root, &dir)?;
        let mut holds = Vec::new();
        match hold_each(root, &dir, cpus, &mut holds) {
            Ok(()) => Ok(CpuLimits {
                root: root.clone(),
                cpus: cpus.to_vec(),
                holds,
            }),
            Err(e) => {
                // What was limited before the failure is given back.
                drop(holds);
                let _ = restore_unheld(root, &dir);
                Err(e)
            }
        }
    }

    /// The CPUs held.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }
}

impl Drop for CpuLimits {
    fn drop(&mut self) {
        let dir = registry(&self.root);
        let lock = lock_registry(&dir);
        self.holds.clear();
        if lock.is_ok() {
            let _ = restore_unheld(&self.root, &dir);
        }
    }
}

/// With the registry locked: takes a hold on each of `cpus` (into
/// `holds`), and limits those that no pagescope limited yet.
fn hold_each(root: &Root, dir: &Path, cpus: &[usize], holds: &mut Vec<File>) -> Result<()> {
    for &cpu in cpus {
        let hold_path = dir.join(format!("cpu{cpu}.hold"));
        let hold = open(&hold_path)?;
        flock(&hold, FlockOperation::LockShared).map_err(|e| Error::io(&hold_path, e.into()))?;
        holds.push(hold);
        let orig = dir.join(format!("cpu{cpu}.orig"));
        if !orig.exists() {
            let was = limit(&root.sys, cpu)?;
            write_new(&orig, &was)?;
            set(&root.sys, cpu, NO_LATENCY)?;
        }
    }
    Ok(())
}

/// Gives back the limit of every CPU that no pagescope holds any more
/// (their holders were killed): what `trace --release` calls.
pub fn restore_abandoned(root: &Root) -> Result<Vec<Restored>> {
    let dir = registry(root);
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let _lock = lock_registry(&dir)?;
    restore_unheld(root, &dir)
}

/// The registry directory.
fn registry(root: &Root) -> PathBuf {
    root.run.join(REGISTRY)
}

/// Takes the registry's own lock (blocking), making the directory first.
fn lock_registry(dir: &Path) -> Result<File> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let path = dir.join(".lock");
    let file = open(&path)?;
    flock(&file, FlockOperation::LockExclusive).map_err(|e| Error::io(&path, e.into()))?;
    Ok(file)
}

/// Opens (making it, 0600) a registry file, never through a symlink.
fn open(path: &Path) -> Result<File> {
    rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map(File::from)
    .map_err(|e| Error::io(path, e.into()))
}

/// Writes `value` to a fresh file at `path` (0600, as every file of the
/// registry; never through a symlink), whole or not at all.
fn write_new(path: &Path, value: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("new");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32)
        .open(&tmp)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| Error::io(path, e))
}

/// Sets `cpu`'s limit to `value`.
fn set(sys: &Path, cpu: usize, value: &str) -> Result<()> {
    let path = limit_path(sys, cpu);
    std::fs::write(&path, value).map_err(|e| Error::io(&path, e))
}

/// With the registry locked: every CPU with an original value and no
/// holder gets its value back.
fn restore_unheld(root: &Root, dir: &Path) -> Result<Vec<Restored>> {
    let mut restored = Vec::new();
    for cpu in registered(dir)? {
        if is_held(dir, cpu)? {
            continue;
        }
        let orig = dir.join(format!("cpu{cpu}.orig"));
        let value = std::fs::read_to_string(&orig).map_err(|e| Error::io(&orig, e))?;
        let value = value.trim().to_string();
        set(&root.sys, cpu, &value)?;
        std::fs::remove_file(&orig).map_err(|e| Error::io(&orig, e))?;
        let _ = std::fs::remove_file(dir.join(format!("cpu{cpu}.hold")));
        restored.push(Restored { cpu, value });
    }
    Ok(restored)
}

/// The CPUs that some live pagescope holds polling now (on this machine,
/// whichever pagescope it is).
pub fn held(root: &Root) -> Result<Vec<usize>> {
    let dir = registry(root);
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let _lock = lock_registry(&dir)?;
    let mut out = Vec::new();
    for cpu in registered(&dir)? {
        if is_held(&dir, cpu)? {
            out.push(cpu);
        }
    }
    Ok(out)
}

/// The CPUs the registry has an original value of, in order.
fn registered(dir: &Path) -> Result<Vec<usize>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut cpus: Vec<usize> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            name.to_str()?
                .strip_prefix("cpu")?
                .strip_suffix(".orig")?
                .parse()
                .ok()
        })
        .collect();
    cpus.sort_unstable();
    Ok(cpus)
}

/// Whether a live pagescope holds `cpu` (its `cpuN.hold` can't be locked
/// exclusively). The lock taken to find out goes with the descriptor.
fn is_held(dir: &Path, cpu: usize) -> Result<bool> {
    let hold_path = dir.join(format!("cpu{cpu}.hold"));
    let hold = open(&hold_path)?;
    match flock(&hold, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(false),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(true),
        Err(e) => Err(Error::io(&hold_path, e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root whose sysfs and run directory are a temporary tree with
    /// `cpus` CPUs, each limit file holding `0`.
    fn tree(cpus: usize) -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let root = Root {
            proc: PathBuf::from("/proc"),
            sys: dir.path().join("sys"),
            run: dir.path().join("run"),
        };
        for cpu in 0..cpus {
            let p = limit_path(&root.sys, cpu);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "0").unwrap();
        }
        (dir, root)
    }

    fn limits(root: &Root, n: usize) -> Vec<String> {
        (0..n).map(|c| limit(&root.sys, c).unwrap()).collect()
    }

    /// Two holders of one CPU: the CPU's value comes back when the last
    /// lets go, and only the CPUs asked for are touched.
    #[test]
    fn the_last_holder_gives_the_value_back() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, root) = tree(4);
        std::fs::write(limit_path(&root.sys, 2), "25").unwrap();
        assert!(supported(&root.sys, &[0, 3]));
        assert!(!supported(&root.sys, &[0, 4]));
        let a = CpuLimits::hold(&root, &[1, 2]).unwrap();
        assert_eq!(limits(&root, 4), ["0", "n/a", "n/a", "0"]);
        let b = CpuLimits::hold(&root, &[2, 3]).unwrap();
        assert_eq!(limits(&root, 4), ["0", "n/a", "n/a", "n/a"]);
        assert_eq!(held(&root).unwrap(), [1, 2, 3]);
        // The registry's files (originals, holds, its lock) are the
        // owner's alone.
        let files: Vec<_> = std::fs::read_dir(registry(&root))
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(files.len(), 7, "{files:?}");
        for e in files {
            let mode = e.metadata().unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{:?}", e.path());
        }
        drop(a);
        assert_eq!(limits(&root, 4), ["0", "0", "n/a", "n/a"]);
        assert_eq!(held(&root).unwrap(), [2, 3]);
        drop(b);
        assert_eq!(limits(&root, 4), ["0", "0", "25", "0"]);
        assert_eq!(held(&root).unwrap(), []);
        assert_eq!(restore_abandoned(&root).unwrap(), []);
    }

    /// A holder that never let go (its lock gone, as when it is killed)
    /// leaves its originals, which the next caller gives back.
    #[test]
    fn a_killed_holders_limits_are_given_back() {
        let (_dir, root) = tree(2);
        let a = CpuLimits::hold(&root, &[1]).unwrap();
        // Killed: its locks go, its Drop never runs.
        forget_without_drop(a);
        assert_eq!(limits(&root, 2), ["0", "n/a"]);
        assert_eq!(
            restore_abandoned(&root).unwrap(),
            [Restored {
                cpu: 1,
                value: "0".into()
            }]
        );
        assert_eq!(limits(&root, 2), ["0", "0"]);
    }

    /// Closes a holder's lock files without running its Drop.
    fn forget_without_drop(mut held: CpuLimits) {
        held.holds.clear();
        std::mem::forget(held);
    }

    /// A CPU without a limit file fails the hold, and what was limited
    /// before it is given back.
    #[test]
    fn a_failed_hold_leaves_nothing() {
        let (_dir, root) = tree(2);
        let err = CpuLimits::hold(&root, &[1, 5]).unwrap_err();
        assert!(err.to_string().contains("cpu5"), "{err}");
        assert_eq!(limits(&root, 2), ["0", "0"]);
        assert_eq!(restore_abandoned(&root).unwrap(), []);
    }
}
