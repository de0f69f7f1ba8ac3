//! Why the kernel refused pagescope something, found by asking the kernel,
//! so that an error names the cause that holds on this machine rather
//! than a list of guesses: a `PTRACE_SEIZE` refused with `EPERM`, a
//! userfaultfd refused, asynchronous write protection missing.
//!
//! The facts are read from `/proc` (`*Facts::read`); the sentence is a
//! pure function of them (`*Facts::explain`), tested on literal facts.

use crate::procfs::ProcDir;
use pagescope_core::parse;
use std::path::Path;

/// `CAP_SYS_PTRACE` (include/uapi/linux/capability.h).
const CAP_SYS_PTRACE: u32 = 19;

/// Capability names by number (include/uapi/linux/capability.h).
const CAP_NAMES: [&str; 41] = [
    "cap_chown",
    "cap_dac_override",
    "cap_dac_read_search",
    "cap_fowner",
    "cap_fsetid",
    "cap_kill",
    "cap_setgid",
    "cap_setuid",
    "cap_setpcap",
    "cap_linux_immutable",
    "cap_net_bind_service",
    "cap_net_broadcast",
    "cap_net_admin",
    "cap_net_raw",
    "cap_ipc_lock",
    "cap_ipc_owner",
    "cap_sys_module",
    "cap_sys_rawio",
    "cap_sys_chroot",
    "cap_sys_ptrace",
    "cap_sys_pacct",
    "cap_sys_admin",
    "cap_sys_boot",
    "cap_sys_nice",
    "cap_sys_resource",
    "cap_sys_time",
    "cap_sys_tty_config",
    "cap_mknod",
    "cap_lease",
    "cap_audit_write",
    "cap_audit_control",
    "cap_setfcap",
    "cap_mac_override",
    "cap_mac_admin",
    "cap_syslog",
    "cap_wake_alarm",
    "cap_block_suspend",
    "cap_audit_read",
    "cap_perfmon",
    "cap_bpf",
    "cap_checkpoint_restore",
];

/// The capabilities of a mask, by name.
fn cap_names(mask: u64) -> String {
    (0..64)
        .filter(|b| mask & (1 << b) != 0)
        .map(|b| {
            CAP_NAMES
                .get(b as usize)
                .map_or_else(|| format!("capability {b}"), |n| n.to_string())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `/proc/PID/status`, parsed, if it can be read.
fn status(dir: ProcDir) -> Option<parse::status::Status> {
    dir.status(&mut Vec::new()).ok()
}

/// `/proc/PID/stat`, parsed, if it can be read.
fn stat(proc: &Path, pid: u32) -> Option<parse::stat::Stat> {
    ProcDir::at(proc, pid).stat(&mut Vec::new()).ok()
}

/// Whether `ancestor` is `pid`'s parent, grandparent, ... (up to init).
fn descends_from(proc: &Path, mut pid: u32, ancestor: u32) -> bool {
    for _ in 0..4096 {
        match stat(proc, pid) {
            Some(s) if s.ppid == ancestor => return true,
            Some(s) if s.ppid > 1 => pid = s.ppid,
            _ => return false,
        }
    }
    false
}

/// A number in a file of `/proc/sys`, `None` if the file is absent.
fn sysctl(proc: &Path, name: &str) -> Option<u32> {
    std::fs::read_to_string(proc.join("sys").join(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What decides whether this process may ptrace `pid`, as the kernel
/// checks it (kernel/ptrace.c: `ptrace_attach`, `__ptrace_may_access`;
/// security/commoncap.c: `cap_ptrace_access_check`; security/yama).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PtraceFacts {
    /// The process asked for.
    pub pid: u32,
    /// Its name.
    pub comm: String,
    /// It no longer exists.
    pub gone: bool,
    /// It is pagescope's own process (its thread group).
    pub is_self: bool,
    /// A kernel thread (PF_KTHREAD).
    pub kernel_thread: bool,
    /// A zombie, or exiting.
    pub exiting: bool,
    /// Its main thread has exited while its other threads run on (a
    /// zombie leader): the kernel refuses to ptrace that thread.
    pub leader_exited: bool,
    /// The process that traces it already, and its name.
    pub tracer: Option<(u32, String)>,
    /// `kernel.yama.ptrace_scope`; `None` without Yama.
    pub yama_scope: Option<u32>,
    /// pagescope holds CAP_SYS_PTRACE (effective).
    pub cap_sys_ptrace: bool,
    /// It descends from pagescope.
    pub descendant: bool,
    /// pagescope descends from it.
    pub ancestor: bool,
    /// Its real, effective and saved uids are pagescope's real uid.
    pub same_user: bool,
    /// Its effective uid.
    pub uid: u32,
    /// Capabilities it may use (permitted) that pagescope may not.
    pub caps_beyond: u64,
}

impl PtraceFacts {
    /// Reads the facts about `pid` and this process from `proc`.
    pub fn read(proc: &Path, pid: u32) -> PtraceFacts {
        let me = std::process::id();
        let own = status(ProcDir::own(proc)).unwrap_or_default();
        let mut f = PtraceFacts {
            pid,
            yama_scope: sysctl(proc, "kernel/yama/ptrace_scope"),
            cap_sys_ptrace: own.cap_effective & (1 << CAP_SYS_PTRACE) != 0,
            ..PtraceFacts::default()
        };
        let (Some(st), Some(s)) = (stat(proc, pid), status(ProcDir::at(proc, pid))) else {
            f.gone = true;
            return f;
        };
        f.comm = st.comm.clone();
        f.is_self = s.tgid == me;
        f.kernel_thread = st.is_kernel_thread();
        f.exiting = matches!(st.state, 'Z' | 'X');
        f.leader_exited = st.state == 'Z' && st.num_threads > 1;
        if s.tracer_pid != 0 {
            let name = ProcDir::at(proc, s.tracer_pid)
                .read_text("comm", &mut Vec::new())
                .map(|c| c.trim_end().to_string())
                .unwrap_or_default();
            f.tracer = Some((s.tracer_pid, name));
        }
        f.descendant = descends_from(proc, pid, me);
        f.ancestor = descends_from(proc, me, s.tgid);
        f.same_user = s.uids[..3].iter().all(|&u| u == own.uids[0]);
        f.uid = s.uids[1];
        f.caps_beyond = s.cap_permitted & !own.cap_permitted;
        f
    }

    /// Whether Yama refuses this attach.
    fn yama_refuses(&self) -> bool {
        match self.yama_scope {
            Some(3) => true,
            Some(2) => !self.cap_sys_ptrace,
            Some(1) => !self.cap_sys_ptrace && !self.descendant,
            _ => false,
        }
    }

    /// Whether what refuses the attach lets pagescope read the process's
    /// memory all the same (`PTRACE_MODE_READ`, which Yama does not
    /// restrict, and which another tracer does not take): then pagescope
    /// can still record it without stopping it.
    pub fn only_attach_refused(&self) -> bool {
        !(self.gone || self.is_self || self.kernel_thread || self.exiting)
            && (self.tracer.is_some() || self.yama_refuses())
    }

    /// The cause of an `EPERM` from `PTRACE_SEIZE`, as a sentence that
    /// follows "ptrace of PID was refused: ".
    pub fn explain(&self) -> String {
        let who = if self.comm.is_empty() {
            format!("pid {}", self.pid)
        } else {
            format!("pid {} ({})", self.pid, self.comm)
        };
        let beyond = |what: &str| {
            format!(
                "{who} holds capabilities that pagescope lacks ({}){what}",
                cap_names(self.caps_beyond)
            )
        };
        if self.gone {
            return format!("{who} is gone");
        }
        if self.is_self {
            return format!("{who} is pagescope's own process, and a process can't ptrace itself");
        }
        if self.kernel_thread {
            return format!(
                "{who} is a kernel thread: it has no user memory, and the kernel refuses to \
                 ptrace kernel threads"
            );
        }
        if self.leader_exited {
            return format!(
                "the main thread of {who} has exited while its other threads run on, and the \
                 kernel refuses to ptrace an exited thread: pagescope can't inject into \
                 such a process (`snapshot`, and `record` with the refs backend, read it \
                 through a live thread)"
            );
        }
        if self.exiting {
            return format!("{who} is exiting");
        }
        if let Some((t, name)) = &self.tracer {
            return format!(
                "{who} is already traced by pid {t} ({name}), and a process has one tracer at \
                 a time"
            );
        }
        match self.yama_scope {
            _ if !self.yama_refuses() => {}
            Some(3) => {
                return "Yama forbids every ptrace (kernel.yama.ptrace_scope=3, which only a \
                        reboot lowers)"
                    .into()
            }
            Some(2) => {
                return "Yama allows ptrace only with CAP_SYS_PTRACE \
                        (kernel.yama.ptrace_scope=2): run as root"
                    .into()
            }
            Some(1) => {
                return format!(
                    "Yama lets a process without CAP_SYS_PTRACE trace only its descendants \
                     (kernel.yama.ptrace_scope=1), and {who} is {}: run as root, or \
                     `sysctl kernel.yama.ptrace_scope=0`",
                    if self.ancestor {
                        "an ancestor of pagescope"
                    } else {
                        "not one"
                    }
                )
            }
            _ => {}
        }
        if !self.cap_sys_ptrace {
            return if !self.same_user {
                format!(
                    "{who} belongs to uid {}, and tracing another user's process needs \
                     CAP_SYS_PTRACE (run as root)",
                    self.uid
                )
            } else if self.caps_beyond != 0 {
                beyond(", and tracing it needs CAP_SYS_PTRACE (run as root)")
            } else {
                format!(
                    "{who} changed its credentials (set-user-ID or set-group-ID) or made \
                     itself not dumpable, and tracing it needs CAP_SYS_PTRACE (run as root)"
                )
            };
        }
        let yama = match self.yama_scope {
            None => "there is no Yama".to_string(),
            Some(s) => format!("Yama allows it (kernel.yama.ptrace_scope={s})"),
        };
        let mut why = format!(
            "the kernel refused although pagescope has CAP_SYS_PTRACE, {yama}, and {who} is \
             not traced: a security module (SELinux, AppArmor, a BPF LSM) or the machine's \
             own policy protects it"
        );
        if self.caps_beyond != 0 {
            why.push_str("; ");
            why.push_str(&beyond(""));
        }
        why
    }
}

/// The note for processes whose memory pagescope may not read (`pids`,
/// sorted; [`pagescope_core::record::denied_note`]). Where pagescope has
/// CAP_SYS_PTRACE, which usually grants it, the note gives the cause
/// found for the first of them instead of what grants access.
pub fn denied_note(proc: &Path, pids: &[u32], missing: &str) -> String {
    let facts = pids.first().map(|&p| PtraceFacts::read(proc, p));
    match facts {
        Some(f) if f.cap_sys_ptrace && !f.gone => {
            let why = format!("for pid {}, {}", f.pid, f.explain_read());
            pagescope_core::record::denied_note_because(pids, &why, missing)
        }
        _ => pagescope_core::record::denied_note(pids, missing),
    }
}

impl PtraceFacts {
    /// The cause of a refused read of the process's memory (its smaps or
    /// pagemap: a ptrace read-mode check) where pagescope has
    /// CAP_SYS_PTRACE, as a sentence: Yama, another tracer or an exited
    /// main thread refuse an attach, not a read.
    pub fn explain_read(&self) -> String {
        let mut why = "the kernel refused although pagescope has CAP_SYS_PTRACE: a security \
                       module (SELinux, AppArmor, a BPF LSM) or the machine's own policy \
                       protects it"
            .to_string();
        if self.caps_beyond != 0 {
            why.push_str(&format!(
                "; it holds capabilities that pagescope lacks ({})",
                cap_names(self.caps_beyond)
            ));
        }
        why
    }
}

/// Why `PTRACE_SEIZE` of `pid` failed with `EPERM`, checked on this
/// machine.
pub fn ptrace_refused(pid: u32) -> String {
    PtraceFacts::read(&crate::procfs::live_root(), pid).explain()
}

/// What decides whether this process may make a userfaultfd
/// (fs/userfaultfd.c: `userfaultfd_syscall_allowed`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UffdFacts {
    /// The error of the attempt (`errno`).
    pub errno: i32,
    /// `vm.unprivileged_userfaultfd`; `None` if absent.
    pub unprivileged: Option<u32>,
    /// pagescope holds CAP_SYS_PTRACE (effective).
    pub cap_sys_ptrace: bool,
}

impl UffdFacts {
    /// Reads the facts of a userfaultfd refused with `errno`.
    pub fn read(proc: &Path, errno: i32) -> UffdFacts {
        let own = status(ProcDir::own(proc)).unwrap_or_default();
        UffdFacts {
            errno,
            unprivileged: sysctl(proc, "vm/unprivileged_userfaultfd"),
            cap_sys_ptrace: own.cap_effective & (1 << CAP_SYS_PTRACE) != 0,
        }
    }

    /// The cause, as a sentence that follows "userfaultfd was refused: ".
    pub fn explain(&self) -> String {
        use rustix::io::Errno;
        let errno = Some(self.errno)
            .filter(|e| (1..4096).contains(e))
            .map(Errno::from_raw_os_error);
        match errno {
            Some(Errno::NOSYS) => "this kernel has no userfaultfd (CONFIG_USERFAULTFD)".into(),
            Some(Errno::PERM) if self.unprivileged == Some(0) && !self.cap_sys_ptrace => {
                "vm.unprivileged_userfaultfd is 0 and pagescope lacks CAP_SYS_PTRACE: run as \
                 root, or `sysctl vm.unprivileged_userfaultfd=1`"
                    .into()
            }
            Some(Errno::PERM) => format!(
                "refused although {}: a seccomp filter or a security module refused it",
                if self.cap_sys_ptrace {
                    "pagescope has CAP_SYS_PTRACE".to_string()
                } else {
                    format!(
                        "vm.unprivileged_userfaultfd is {}",
                        self.unprivileged
                            .map_or_else(|| "absent".into(), |v| v.to_string())
                    )
                }
            ),
            _ => format!(
                "userfaultfd failed: {}",
                std::io::Error::from_raw_os_error(self.errno)
            ),
        }
    }
}

/// Why this process may not make a userfaultfd (the attempt failed with
/// `errno`), checked on this machine.
pub fn userfaultfd_refused(errno: i32) -> String {
    UffdFacts::read(&crate::procfs::live_root(), errno).explain()
}

/// Whether kernel `release` (`uname -r`) is `major.minor` or later;
/// `None` if the release can't be parsed.
pub fn release_at_least(release: &str, major: u32, minor: u32) -> Option<bool> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let ma: u32 = parts.next()?.parse().ok()?;
    let mi: u32 = parts.next()?.parse().ok()?;
    Some((ma, mi) >= (major, minor))
}

/// Why a userfaultfd that the kernel gave has no asynchronous write
/// protection (`UFFD_FEATURE_WP_ASYNC`), by the kernel's release.
pub fn wp_async_missing(release: &str) -> String {
    match release_at_least(release, 6, 7) {
        Some(false) => format!(
            "this kernel ({release}) predates asynchronous userfaultfd write protection \
             (Linux 6.7)"
        ),
        _ => format!(
            "this kernel ({release}) offers no asynchronous userfaultfd write protection \
             (UFFD_FEATURE_WP_ASYNC; Linux 6.7 on an architecture with userfaultfd write \
             protection)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> PtraceFacts {
        PtraceFacts {
            pid: 42,
            comm: "app".into(),
            same_user: true,
            ..PtraceFacts::default()
        }
    }

    #[test]
    fn ptrace_causes() {
        let f = |change: &dyn Fn(&mut PtraceFacts)| {
            let mut f = facts();
            change(&mut f);
            f.explain()
        };
        let kthread = f(&|f| {
            f.kernel_thread = true;
            f.cap_sys_ptrace = true;
        });
        assert!(kthread.contains("kernel thread"), "{kthread}");
        assert!(!kthread.contains("Yama"), "{kthread}");
        let leader = f(&|f| {
            f.exiting = true;
            f.leader_exited = true;
        });
        assert!(
            leader.contains("main thread") && !leader.contains("is exiting"),
            "{leader}"
        );
        let own = f(&|f| f.is_self = true);
        assert!(own.contains("pagescope's own process"), "{own}");
        let traced = f(&|f| f.tracer = Some((7, "gdb".into())));
        assert!(traced.contains("pid 7 (gdb)"), "{traced}");
        // Yama 1: only without the capability, and not for a descendant.
        let yama = f(&|f| {
            f.yama_scope = Some(1);
            f.ancestor = true;
        });
        assert!(
            yama.contains("ptrace_scope=1") && yama.contains("an ancestor"),
            "{yama}"
        );
        assert!(f(&|f| f.yama_scope = Some(1)).contains("not one"));
        let mut yama = facts();
        yama.yama_scope = Some(1);
        assert!(yama.only_attach_refused(), "Yama restricts attaching only");
        yama.cap_sys_ptrace = true;
        assert!(
            !yama.only_attach_refused(),
            "Yama lets CAP_SYS_PTRACE attach"
        );
        let mut other = facts();
        other.same_user = false;
        assert!(
            !other.only_attach_refused(),
            "another user's memory can't be read"
        );
        let child = f(&|f| {
            f.yama_scope = Some(1);
            f.descendant = true;
            f.caps_beyond = 1 << 24;
        });
        assert!(!child.contains("Yama"), "{child}");
        assert!(child.contains("cap_sys_resource"), "{child}");
        assert!(child.contains("run as root"), "{child}");
        let other = f(&|f| {
            f.same_user = false;
            f.uid = 1000;
        });
        assert!(other.contains("uid 1000"), "{other}");
        // Root, no Yama, not traced: the message says what was ruled out
        // and does not tell root to run as root.
        let root = f(&|f| {
            f.cap_sys_ptrace = true;
            f.caps_beyond = 1 << 24;
        });
        assert!(root.contains("there is no Yama"), "{root}");
        assert!(root.contains("cap_sys_resource"), "{root}");
        assert!(!root.contains("run as root"), "{root}");
        let root = f(&|f| {
            f.cap_sys_ptrace = true;
            f.yama_scope = Some(2);
        });
        assert!(root.contains("Yama allows it"), "{root}");
    }

    #[test]
    fn userfaultfd_causes() {
        let f = |errno, unprivileged, cap| {
            UffdFacts {
                errno,
                unprivileged,
                cap_sys_ptrace: cap,
            }
            .explain()
        };
        let sysctl = f(rustix::io::Errno::PERM.raw_os_error(), Some(0), false);
        assert!(sysctl.contains("run as root"), "{sysctl}");
        assert!(
            sysctl.contains("vm.unprivileged_userfaultfd is 0"),
            "{sysctl}"
        );
        let other = f(rustix::io::Errno::PERM.raw_os_error(), Some(1), false);
        assert!(other.contains("seccomp"), "{other}");
        let root = f(rustix::io::Errno::PERM.raw_os_error(), Some(0), true);
        assert!(root.contains("has CAP_SYS_PTRACE"), "{root}");
        assert!(
            f(rustix::io::Errno::NOSYS.raw_os_error(), None, true).contains("CONFIG_USERFAULTFD")
        );
    }

    #[test]
    fn kernel_releases() {
        assert_eq!(release_at_least("6.18.44-fc-v669", 6, 7), Some(true));
        assert_eq!(release_at_least("6.1.0-28-amd64", 6, 7), Some(false));
        assert_eq!(release_at_least("5.15.0", 6, 7), Some(false));
        assert_eq!(release_at_least("garbage", 6, 7), None);
        assert!(wp_async_missing("6.1.0").contains("predates"));
        assert!(wp_async_missing("6.18.1").contains("offers no"));
    }

    #[test]
    fn capability_names() {
        assert_eq!(cap_names(1 << 24), "cap_sys_resource");
        assert_eq!(
            cap_names((1 << 19) | (1 << 50)),
            "cap_sys_ptrace, capability 50"
        );
    }
}
