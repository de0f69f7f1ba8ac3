//! The header's notes: what the recording could not see, in words.

use super::config::{RecordConfig, Target};
use super::machine::has_swap;
use super::probe::Probe;
use super::{soft_dirty, writes};
use crate::Root;
use pagescope_core::record::{Backend, WriteSource};

/// The note of a launched command that could not be held at its exec
/// (ptrace of a child refused): it ran before the first reset.
pub(crate) const NOT_HELD: &str = "the launched command could not be held at its exec (ptrace \
     of a child was refused here), so it ran from its start: what it referenced before pagescope \
     first cleared its bits is not counted";

/// The notes on what `probe` can't see of `config`'s targets: `frozen`
/// if the targets are stopped at the boundaries, `per_process` if they
/// are processes named by `--pid` or launched.
pub(super) fn header_notes(
    config: &RecordConfig,
    probe: &dyn Probe,
    root: &Root,
    page_size: u64,
    frozen: bool,
    per_process: bool,
) -> Vec<String> {
    let mut notes = Vec::new();
    if probe.needs_freeze() && !frozen {
        notes.push(format!(
            "the {} backend reads and clears in two passes and the targets ran on between them \
             ({}): pages touched in that moment at each boundary are missed",
            probe.backend().name(),
            if per_process {
                "--no-freeze"
            } else {
                "only processes named by --pid or launched are stopped"
            }
        ));
    }
    let command = matches!(config.target, Target::Command(_));
    // Processes of the command, or forked by those of --pid, set up where
    // they start (at their fork stop, and after each exec), before their
    // first instruction.
    let born = frozen && per_process && probe.resets_alone();
    let children = if command {
        "a process of the command"
    } else {
        "a process forked since the attach (by one named by --pid, or by such a process)"
    };
    if probe.backend() != Backend::Fault && per_process {
        notes.push(if born && probe.collects_at_exit() {
            format!(
                "the {} backend reads each process at the boundaries; {children} is reset \
                 where it starts (at its fork, and after each exec, before its first \
                 instruction) and read on its way out when it exits by itself, so a process \
                 that starts and exits between two boundaries (a short-lived child) is counted \
                 too. Not counted: the references a process killed by a signal made after the \
                 last boundary, and those a process made since the last boundary before an \
                 exec (its address space goes with the exec); a vfork child's, until its exec, \
                 count as its parent's (they share one address space)",
                probe.backend().name(),
            )
        } else if frozen && probe.collects_at_exit() {
            format!(
                "the {} backend reads each process at the boundaries, and one that exits by \
                 itself on its way out too: a process that starts and exits between two \
                 boundaries (a short-lived child) is not seen, nor are the references a \
                 process killed by a signal made after the last boundary",
                probe.backend().name()
            )
        } else {
            format!(
                "the {} backend reads each process at the boundaries: a process that starts \
                 and exits between two of them (a short-lived child) is not seen, nor are \
                 the references a process made after the last boundary before it exited",
                probe.backend().name()
            )
        });
    }
    notes.extend(probe.coverage_note());
    // A page's reference bit lives with its frame, and every other
    // backend counts pages in RAM at the boundary.
    if probe.backend() != Backend::Fault && has_swap(&root.proc) {
        notes.push(format!(
            "this machine has swap: a page referenced and then swapped out before the end of \
             its interval is not counted (the {} backend counts the pages in RAM at each \
             boundary); a page read back from swap counts as referenced",
            probe.backend().name()
        ));
    }
    if probe.writes() == WriteSource::PagemapScan {
        notes.push(
            if born {
                "written pages come from PAGEMAP_SCAN: each recorded process was given a \
             userfaultfd in asynchronous write-protect mode where it started, before its \
             first instruction (at its fork, and again after each exec; the launched command \
             at its exec, a process named by --pid at the attach), and its first write to a page in each interval takes a fault the \
             kernel resolves; not counted, so written_pages is short there: writes to mapped \
             files, a vfork child's writes before its exec (to its parent's memory, which \
             are its parent's), and writes to mappings made and unmapped between two \
             boundaries (short-lived heap arenas and large malloc blocks)"
            } else {
                "written pages come from PAGEMAP_SCAN: each recorded process was given a \
             userfaultfd in asynchronous write-protect mode at the first boundary it was \
             seen (its first write to a page in each interval takes a fault the kernel \
             resolves); not counted, so written_pages is short there: writes to mapped \
             files, a process's writes before that boundary (the interval in which a \
             process of the command, or one forked by a process of --pid, started or \
             exec'd; the launched command itself is \
             held at its exec until then), and writes to mappings made and \
             unmapped between two boundaries (short-lived heap arenas and large malloc \
             blocks)"
            }
            .into(),
        );
    }
    if probe.writes() == WriteSource::None {
        notes.push(if matches!(config.target, Target::System) {
            // Say why by what this kernel has: each way of knowing writes
            // belongs to one process, and clearing every process's would
            // disturb their other users (CRIU, another recorder).
            if soft_dirty::has_soft_dirty(&root.proc, page_size) {
                "written pages are not recorded for the whole machine: soft-dirty bits \
                 belong to each process, and clearing every process's would disturb their \
                 other users (such as CRIU)"
                    .into()
            } else {
                "written pages are not recorded for the whole machine: this kernel has no \
                 soft-dirty bits (CONFIG_MEM_SOFT_DIRTY), and PAGEMAP_SCAN needs a \
                 userfaultfd in each process, which pagescope gives only to processes named \
                 by --pid or launched"
                    .into()
            }
        } else if matches!(config.target, Target::Cgroup(_)) && writes::scan_supported() {
            "written pages are not known: this kernel has no soft-dirty bits \
             (CONFIG_MEM_SOFT_DIRTY), and pagescope gives the userfaultfd that PAGEMAP_SCAN \
             needs only to processes named by --pid or launched, not to a cgroup's"
                .into()
        } else {
            format!(
                "written pages are not known: this kernel has no soft-dirty bits \
                 (CONFIG_MEM_SOFT_DIRTY), and {}",
                writes::scan_unavailable()
            )
        });
    }
    notes
}
