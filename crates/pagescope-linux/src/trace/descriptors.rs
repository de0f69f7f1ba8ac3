//! Descriptors in another process: running a system call in a stopped
//! thread of the program, making a userfaultfd there, and taking a copy
//! of one of its descriptors (`pidfd_getfd`), and unregistering every
//! range of a process from one.

use crate::trace::hooks::die_here_for_tests;
use crate::trace::os::sys;
use crate::trace::ptrace::{self as pt, nr, Injector};
use crate::trace::uffd::Uffd;
use pagescope_core::parse;
use pagescope_core::{Error, Result};
use pagescope_sys::ptrace;
use rustix::io::Errno;
use std::os::fd::{AsFd, OwnedFd};

/// Runs system call `n` with `args` in the thread stopped under `inj`;
/// returns its result (a negative errno if the call failed).
pub(super) fn inject(inj: &mut Injector, n: u64, args: [u64; 6]) -> Result<i64> {
    inj.syscall(n, args)
        .map_err(|e| sys("system call injection", e))
}

/// A copy of descriptor `fd` of process `pid` (`pidfd_getfd`).
pub(crate) fn take_fd(pid: u32, fd: i32) -> Result<OwnedFd> {
    rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(pid as i32).expect("pid > 0"),
        rustix::process::PidfdFlags::empty(),
    )
    .and_then(|pidfd| {
        rustix::process::pidfd_getfd(pidfd.as_fd(), fd, rustix::process::PidfdGetfdFlags::empty())
    })
    .map_err(|e| sys("pidfd_getfd", e))
}

/// Makes a userfaultfd (`O_CLOEXEC | O_NONBLOCK`) in the thread `t`,
/// stopped under `inj`: the system call, or where it is refused,
/// `/dev/userfaultfd`; then moves it up out of the program's way
/// ([`move_high`]). Returns the descriptor's number in the program.
pub(super) fn make_userfaultfd(inj: &mut Injector, t: u32) -> Result<i64> {
    let fd = make_low_userfaultfd(inj, t)?;
    move_high(inj, t, fd)
}

/// Moves descriptor `fd` of the process of thread `t`, stopped under
/// `inj`, to the lowest free number at or above
/// [`descriptor_floor`](pagescope_core::trace::descriptor_floor) of the
/// process's `RLIMIT_NOFILE` (`fcntl(F_DUPFD_CLOEXEC)`), and closes `fd`:
/// the program's own `open`s then get the numbers they get untraced.
/// Close-on-exec, as every descriptor pagescope makes there. Returns the
/// new number; `fd` itself where it is already that high, or where the
/// program holds every number from there to its limit (or its limits
/// can't be read).
fn move_high(inj: &mut Injector, t: u32, fd: i64) -> Result<i64> {
    let path = crate::procfs::ProcDir::live(t).file_path("limits");
    let soft = match std::fs::read_to_string(&path) {
        Ok(text) => match parse::limits::open_files(&text) {
            Ok(soft) => soft,
            Err(_) => return Ok(fd),
        },
        Err(_) => return Ok(fd),
    };
    let floor = pagescope_core::trace::descriptor_floor(soft);
    if fd < 0 || fd as u64 >= floor {
        return Ok(fd);
    }
    use pagescope_sys::abi::F_DUPFD_CLOEXEC;
    let high = inject(inj, nr::FCNTL, [fd as u64, F_DUPFD_CLOEXEC, floor, 0, 0, 0])?;
    if high < 0 {
        // EMFILE (or EINVAL, a limit lowered meanwhile by another
        // process): it stays where it is.
        return Ok(fd);
    }
    inject(inj, nr::CLOSE, [fd as u64, 0, 0, 0, 0, 0])?;
    Ok(high)
}

/// [`make_userfaultfd`]'s descriptor, at the number the kernel gave it.
fn make_low_userfaultfd(inj: &mut Injector, t: u32) -> Result<i64> {
    let flags = pagescope_sys::abi::O_CLOEXEC | pagescope_sys::abi::O_NONBLOCK;
    let mut fd = inject(inj, nr::USERFAULTFD, [flags, 0, 0, 0, 0, 0])?;
    if fd < 0 {
        // The system call refused (a seccomp filter of the program's,
        // or vm.unprivileged_userfaultfd=0 for a user without
        // CAP_SYS_PTRACE): since Linux 6.1, /dev/userfaultfd makes the
        // same descriptor for whoever may open it.
        use pagescope_sys::abi::USERFAULTFD_IOC_NEW;
        let path = write_name(t, inj.sp(), "/dev/userfaultfd")?;
        let open = [
            pagescope_sys::abi::AT_FDCWD,
            path,
            pagescope_sys::abi::O_RDWR | pagescope_sys::abi::O_CLOEXEC,
            0,
            0,
            0,
        ];
        let dev = inject(inj, nr::OPENAT, open)?;
        if dev >= 0 {
            let made = inject(
                inj,
                nr::IOCTL,
                [dev as u64, USERFAULTFD_IOC_NEW, flags, 0, 0, 0],
            )?;
            inject(inj, nr::CLOSE, [dev as u64, 0, 0, 0, 0, 0])?;
            if made >= 0 {
                fd = made;
            }
        }
    }
    if fd < 0 {
        let e = Errno::from_raw_os_error(-fd as i32);
        return Err(if e == Errno::PERM {
            Error::NotPermitted {
                what: "userfaultfd".into(),
                needs: "the program may not make one (the system call and \
                        /dev/userfaultfd were refused): run it as root, or \
                        `sysctl vm.unprivileged_userfaultfd=1`, or give access to \
                        /dev/userfaultfd"
                    .into(),
            }
        } else {
            Error::Unsupported {
                what: "userfaultfd".into(),
                needs: format!("a kernel built with CONFIG_USERFAULTFD ({e})"),
            }
        });
    }
    Ok(fd)
}

/// A userfaultfd of the address space of the running process `pid`, for
/// pagescope to hold alone: `userfaultfd` is injected into one of its
/// threads (and `close` of the program's copy, once pagescope has taken
/// it with `pidfd_getfd`). A process this thread already traces must be
/// stopped at its `PTRACE_INTERRUPT` stops (the recorder's freezer holds
/// it so); any other is attached, stopped for the moment it takes, and
/// let go. The descriptor's features are not set yet (`UFFDIO_API`).
/// `None`: the process is traced by this thread but not at such a stop
/// now (a child not yet at its first stop, a parent at its `vfork`): try
/// again later.
pub fn userfaultfd_of(pid: u32) -> Result<Option<OwnedFd>> {
    let leader = pid;
    let held = pt::tracer_of(leader) == Some(std::process::id());
    if held && !pt::at_interrupt_stop(leader) {
        return Ok(None);
    }
    let seized = if held {
        vec![(leader, pt::Seized::Interrupted)]
    } else {
        // TRACESYSGOOD: the injected calls' syscall stops must not look
        // like a SIGTRAP.
        pt::seize_process(pid, ptrace::PTRACE_O_TRACESYSGOOD)
            .map_err(|e| sys(&format!("cannot attach to process {pid}"), e))?
    };
    let r = (|| -> Result<OwnedFd> {
        let t = seized
            .iter()
            .find(|(_, how)| how.injectable())
            .map(|&(t, _)| t)
            .ok_or_else(|| {
                sys(
                    &format!("process {pid}"),
                    std::io::Error::other("no thread stopped where it can run a system call"),
                )
            })?;
        let insn = pt::vdso_syscall(pid).map_err(|e| sys("finding a syscall instruction", e))?;
        let mut inj = Injector::at_interrupt(t, insn).map_err(|e| sys("ptrace GETREGS", e))?;
        // Killed meanwhile, pagescope leaves the thread parked, not running
        // on with the calls' registers (`trace --release` lets it go).
        if let Some(boot) = pt::vdso_bootstrap(pid).map_err(|e| sys("writing into the vDSO", e))? {
            inj.park_in_vdso(pid, boot)
                .map_err(|e| sys("writing the parking record", e))?;
        }
        // Closed in the program at once: it stays where the kernel put
        // it (moved high, it would leave the program's descriptor table
        // grown for good).
        let fd = make_low_userfaultfd(&mut inj, t)?;
        die_here_for_tests("write-tracking");
        let ours = take_fd(pid, fd as i32);
        inj.syscall(nr::CLOSE, [fd as u64, 0, 0, 0, 0, 0])
            .map_err(|e| sys("system call injection", e))?;
        inj.finish().map_err(|e| sys("ptrace SETREGS", e))?;
        ours
    })();
    if !held {
        for (t, how) in seized {
            let sig = match how {
                pt::Seized::Signal(sig) => sig,
                _ => 0,
            };
            let _ = ptrace::detach(t, sig);
        }
    }
    r.map(Some)
}

/// Writes `name` below the red zone of the stopped thread's stack, for
/// an injected call that takes a string; returns its address.
pub(super) fn write_name(tid: u32, sp: u64, name: &str) -> Result<u64> {
    // Below the red zone of the stopped thread's stack.
    let at = (sp - 4096) & !15;
    let mut bytes = name.as_bytes().to_vec();
    bytes.push(0);
    crate::trace::remote::write(tid, at, &bytes)
        .map_err(|e| sys("writing a name into the program", e))?;
    Ok(at)
}

/// Unregisters every VMA of `pid` that has userfaultfd flags; the kernel
/// clears write protection and wakes waiters as it does. `false`: the
/// process has exited, and nothing was unregistered. `proc`: the procfs
/// the process is read from.
pub(crate) fn unregister_all(proc: &std::path::Path, uffd: &Uffd, pid: u32) -> Result<bool> {
    let path = crate::procfs::ProcDir::at(proc, pid).file_path("smaps");
    let text = match std::fs::read_to_string(&path) {
        // The process has exited (a page put back let it finish).
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) =>
        {
            return Ok(false)
        }
        r => r.map_err(|e| Error::io(&path, e))?,
    };
    let entries = parse::smaps::parse(&text).map_err(|e| Error::corrupt(&path, e.to_string()))?;
    for e in entries {
        if e.vm_flags
            .iter()
            .any(|f| f == "um" || f == "uw" || f == "ui")
        {
            let (start, end) = (e.map.start, e.map.end);
            match uffd.unregister(start, end - start) {
                Ok(()) => {}
                // A range registered by another userfaultfd of the process.
                Err(err) if err.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                }
                // The address space is gone: the process exited meanwhile.
                Err(err) if err.raw_os_error() == Some(rustix::io::Errno::NOMEM.raw_os_error()) => {
                    return Ok(false)
                }
                Err(err) => return Err(sys("UFFDIO_UNREGISTER", err)),
            }
        }
    }
    Ok(true)
}
