//! ptrace requests for a tracer that seizes threads (`PTRACE_SEIZE`) and
//! restarts their stops, and what it reads of a stopped thread: its
//! registers, the system call it stopped at, its stop's signal.
//!
//! Requests, options and events are linux-raw-sys's. Signals are raw
//! numbers, so that real-time signals pass too.

use linux_raw_sys::ptrace as k;
use std::io;

pub use linux_raw_sys::ptrace::{
    PTRACE_EVENT_CLONE, PTRACE_EVENT_EXEC, PTRACE_EVENT_EXIT, PTRACE_EVENT_FORK, PTRACE_EVENT_STOP,
    PTRACE_EVENT_VFORK, PTRACE_O_EXITKILL, PTRACE_O_TRACECLONE, PTRACE_O_TRACEEXEC,
    PTRACE_O_TRACEEXIT, PTRACE_O_TRACEFORK, PTRACE_O_TRACESYSGOOD, PTRACE_O_TRACEVFORK,
};

/// The `PTRACE_EVENT_*` numbers as the `i32` a wait status carries
/// (`status >> 16`), to match on.
pub mod event {
    use linux_raw_sys::ptrace as k;

    /// `PTRACE_EVENT_FORK`.
    pub const FORK: i32 = k::PTRACE_EVENT_FORK as i32;
    /// `PTRACE_EVENT_VFORK`.
    pub const VFORK: i32 = k::PTRACE_EVENT_VFORK as i32;
    /// `PTRACE_EVENT_CLONE`.
    pub const CLONE: i32 = k::PTRACE_EVENT_CLONE as i32;
    /// `PTRACE_EVENT_EXEC`.
    pub const EXEC: i32 = k::PTRACE_EVENT_EXEC as i32;
    /// `PTRACE_EVENT_EXIT`.
    pub const EXIT: i32 = k::PTRACE_EVENT_EXIT as i32;
    /// `PTRACE_EVENT_STOP`.
    pub const STOP: i32 = k::PTRACE_EVENT_STOP as i32;
}

/// One request whose `addr` is unused and whose `data` is a number.
fn request(req: u32, tid: u32, data: usize) -> io::Result<i64> {
    // SAFETY: the requests made here (SEIZE, INTERRUPT, CONT, SYSCALL,
    // LISTEN, DETACH) read no memory at `addr` (0) and take `data` as a number
    // (options or a signal); none writes into this process.
    let r = unsafe { libc::ptrace(req as _, tid as libc::pid_t, 0usize, data) };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

/// `PTRACE_SEIZE`: attaches thread `tid` without stopping it, with
/// `options` (`PTRACE_O_*`).
pub fn seize(tid: u32, options: u32) -> io::Result<()> {
    request(k::PTRACE_SEIZE, tid, options as usize).map(drop)
}

/// `PTRACE_INTERRUPT`: stops a seized thread (a `PTRACE_EVENT_STOP`).
pub fn interrupt(tid: u32) -> io::Result<()> {
    request(k::PTRACE_INTERRUPT, tid, 0).map(drop)
}

/// `PTRACE_CONT`: restarts a stopped thread, delivering `signal` (0 for
/// none).
pub fn cont(tid: u32, signal: i32) -> io::Result<()> {
    request(k::PTRACE_CONT, tid, signal as usize).map(drop)
}

/// `PTRACE_SYSCALL`: restarts a stopped thread until its next system
/// call entry or exit, delivering `signal` (0 for none).
pub fn syscall(tid: u32, signal: i32) -> io::Result<()> {
    request(k::PTRACE_SYSCALL, tid, signal as usize).map(drop)
}

/// `PTRACE_LISTEN`: leaves a thread in its job-control stop, while its
/// tracer still hears of its next stop or exit.
pub fn listen(tid: u32) -> io::Result<()> {
    request(k::PTRACE_LISTEN, tid, 0).map(drop)
}

/// `PTRACE_DETACH`: lets a stopped thread go, delivering `signal` (0 for
/// none).
pub fn detach(tid: u32, signal: i32) -> io::Result<()> {
    request(k::PTRACE_DETACH, tid, signal as usize).map(drop)
}

/// `PTRACE_GETEVENTMSG`: the message of the event a thread stopped at
/// (for `PTRACE_EVENT_EXEC`, the thread id it had before the exec).
pub fn event_message(tid: u32) -> io::Result<u64> {
    let mut msg: libc::c_ulong = 0;
    // SAFETY: GETEVENTMSG writes one unsigned long at `data`, which
    // points to `msg`, valid for the call.
    let r = unsafe {
        libc::ptrace(
            k::PTRACE_GETEVENTMSG as _,
            tid as libc::pid_t,
            0usize,
            &raw mut msg,
        )
    };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(msg as u64)
}

/// The signal number and code of the stop a thread is at
/// (`PTRACE_GETSIGINFO`): at a `PTRACE_EVENT_*` stop, `SIGTRAP` with the
/// event in the code's second byte (`code >> 8`).
pub fn stop_signal(tid: u32) -> io::Result<(i32, i32)> {
    // SAFETY: an all-zero siginfo_t is a valid value (plain integers and
    // padding).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: GETSIGINFO writes one siginfo_t at `data`, which points to
    // `info`, valid for the call.
    let r = unsafe {
        libc::ptrace(
            k::PTRACE_GETSIGINFO as _,
            tid as libc::pid_t,
            0usize,
            &raw mut info,
        )
    };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok((info.si_signo, info.si_code))
}

/// The system call a thread is stopped at (`PTRACE_GET_SYSCALL_INFO`,
/// Linux 5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyscallStop {
    /// At its entry: the call's number and arguments.
    Entry {
        /// The system call number.
        nr: u64,
        /// Its six arguments.
        args: [u64; 6],
    },
    /// At its exit: the value it returns (a negative errno for an error).
    Exit {
        /// The return value.
        rval: i64,
    },
    /// Not at a system call stop, or at a seccomp stop.
    Other,
}

/// What system call thread `tid` is stopped at.
pub fn syscall_info(tid: u32) -> io::Result<SyscallStop> {
    // SAFETY: an all-zero ptrace_syscall_info is a valid value (integers,
    // and a union of integer structures).
    let mut info: k::ptrace_syscall_info = unsafe { std::mem::zeroed() };
    // SAFETY: GET_SYSCALL_INFO writes at most `addr` bytes (the size of
    // `info`) at `data`, which points to `info`, valid for the call.
    let r = unsafe {
        libc::ptrace(
            k::PTRACE_GET_SYSCALL_INFO as _,
            tid as libc::pid_t,
            std::mem::size_of::<k::ptrace_syscall_info>(),
            &raw mut info,
        )
    };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(match u32::from(info.op) {
        k::PTRACE_SYSCALL_INFO_ENTRY => {
            // SAFETY: the kernel filled the union's entry arm (op ENTRY);
            // all its fields are integers.
            let e = unsafe { info.__bindgen_anon_1.entry };
            SyscallStop::Entry {
                nr: e.nr,
                args: e.args,
            }
        }
        k::PTRACE_SYSCALL_INFO_EXIT => {
            // SAFETY: the kernel filled the union's exit arm (op EXIT);
            // all its fields are integers.
            let e = unsafe { info.__bindgen_anon_1.exit };
            SyscallStop::Exit { rval: e.rval }
        }
        _ => SyscallStop::Other,
    })
}

#[cfg(target_arch = "x86_64")]
pub use regs::{getregs, setregs, Regs};

/// x86_64's general registers of a stopped thread (`PTRACE_GETREGS`,
/// `PTRACE_SETREGS`).
#[cfg(target_arch = "x86_64")]
mod regs {
    use super::k;
    use std::io;

    /// The general registers of an x86_64 thread: `struct
    /// user_regs_struct` of the kernel's `arch/x86/include/asm/user_64.h`,
    /// field for field.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    #[allow(missing_docs)]
    pub struct Regs {
        pub r15: u64,
        pub r14: u64,
        pub r13: u64,
        pub r12: u64,
        pub rbp: u64,
        pub rbx: u64,
        pub r11: u64,
        pub r10: u64,
        pub r9: u64,
        pub r8: u64,
        pub rax: u64,
        pub rcx: u64,
        pub rdx: u64,
        pub rsi: u64,
        pub rdi: u64,
        pub orig_rax: u64,
        pub rip: u64,
        pub cs: u64,
        pub eflags: u64,
        pub rsp: u64,
        pub ss: u64,
        pub fs_base: u64,
        pub gs_base: u64,
        pub ds: u64,
        pub es: u64,
        pub fs: u64,
        pub gs: u64,
    }

    const _: () = assert!(
        std::mem::size_of::<Regs>() == std::mem::size_of::<libc::user_regs_struct>()
            && std::mem::size_of::<Regs>() == Regs::WORDS * 8
    );

    impl Regs {
        /// The number of 64-bit words of the registers.
        pub const WORDS: usize = 27;

        /// The registers as words, in the kernel's order.
        pub fn to_words(&self) -> [u64; Regs::WORDS] {
            // SAFETY: Regs is repr(C) of WORDS u64 fields (no padding;
            // the size is checked above), as is the array.
            unsafe { std::mem::transmute::<Regs, [u64; Regs::WORDS]>(*self) }
        }

        /// The registers of words in the kernel's order.
        pub fn from_words(words: [u64; Regs::WORDS]) -> Regs {
            // SAFETY: as in `to_words`; every bit pattern is a valid u64.
            unsafe { std::mem::transmute::<[u64; Regs::WORDS], Regs>(words) }
        }
    }

    /// `PTRACE_GETREGS`: the registers of stopped thread `tid`.
    pub fn getregs(tid: u32) -> io::Result<Regs> {
        let mut regs = Regs::default();
        // SAFETY: GETREGS writes one user_regs_struct at `data`, which
        // points to `regs`, of the same layout and valid for the call.
        let r = unsafe {
            libc::ptrace(
                k::PTRACE_GETREGS as _,
                tid as libc::pid_t,
                0usize,
                &raw mut regs,
            )
        };
        if r == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(regs)
    }

    /// `PTRACE_SETREGS`: sets the registers of stopped thread `tid`.
    pub fn setregs(tid: u32, regs: &Regs) -> io::Result<()> {
        // SAFETY: SETREGS reads one user_regs_struct at `data`, which
        // points to `regs`, of the same layout and valid for the call.
        let r = unsafe {
            libc::ptrace(
                k::PTRACE_SETREGS as _,
                tid as libc::pid_t,
                0usize,
                std::ptr::from_ref(regs),
            )
        };
        if r == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn words_keep_the_kernel_order() {
            let r = Regs {
                r15: 1,
                rax: 11,
                gs: 27,
                ..Regs::default()
            };
            let w = r.to_words();
            assert_eq!((w[0], w[10], w[26]), (1, 11, 27));
            assert_eq!(Regs::from_words(w), r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wait::{waitpid, Options, Status, ALL};

    fn wait_stop(pid: u32) -> Status {
        let (tid, st) = waitpid(Some(pid), ALL | Options::UNTRACED)
            .unwrap()
            .unwrap();
        assert_eq!(tid, pid);
        st
    }

    /// A launched child seized before its exec: its `execve` shows at
    /// entry (number, and on x86_64 in the registers), at its exec event
    /// and at its exit (0); interrupted, it stops at `PTRACE_EVENT_STOP`.
    #[test]
    fn syscall_stops_of_an_exec() {
        let path = c"/bin/true";
        let pid = crate::clone::fork_exec_stopped(path, &[c"true".to_owned()]).unwrap() as u32;
        assert_eq!(wait_stop(pid), Status::Stopped(libc::SIGSTOP));
        seize(pid, PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACEEXEC).unwrap();
        crate::signals::kill(pid, libc::SIGCONT).unwrap();
        let (mut entry, mut exec, mut exit) = (None, None, None);
        let mut interrupted = false;
        loop {
            let mut deliver = 0;
            match wait_stop(pid) {
                Status::Exited(code) => {
                    assert_eq!(code, 0);
                    break;
                }
                Status::Syscall => {
                    match syscall_info(pid).unwrap() {
                        SyscallStop::Entry { nr, args } if entry.is_none() => {
                            #[cfg(target_arch = "x86_64")]
                            assert_eq!(getregs(pid).unwrap().orig_rax, nr);
                            entry = Some((nr, args[0]));
                        }
                        SyscallStop::Exit { rval } if exit.is_none() => exit = Some(rval),
                        _ => {}
                    }
                    if exit.is_some() && !interrupted {
                        let (signo, _) = stop_signal(pid).unwrap();
                        assert_eq!(signo, libc::SIGTRAP);
                        interrupt(pid).unwrap();
                        interrupted = true;
                    }
                }
                Status::Event { signal, event } if event == event::EXEC => {
                    assert_eq!(signal, libc::SIGTRAP);
                    exec = Some(event_message(pid).unwrap());
                }
                Status::Event { signal, event } if event == event::STOP && interrupted => {
                    assert_eq!(signal, libc::SIGTRAP);
                    let (signo, code) = stop_signal(pid).unwrap();
                    assert_eq!((signo, code >> 8), (libc::SIGTRAP, event::STOP));
                    detach(pid, 0).unwrap();
                    continue;
                }
                Status::Stopped(sig) if sig != libc::SIGSTOP => deliver = sig,
                _ => {}
            }
            syscall(pid, deliver).unwrap();
        }
        let (nr, arg0) = entry.unwrap();
        assert_eq!(nr, u64::from(linux_raw_sys::general::__NR_execve));
        assert_ne!(arg0, 0);
        // The thread that exec'd was the leader itself.
        assert_eq!(exec, Some(u64::from(pid)));
        assert_eq!(exit, Some(0));
        assert!(interrupted);
    }
}
