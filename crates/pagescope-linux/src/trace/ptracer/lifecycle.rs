//! The end of a trace: letting every thread go once every page is back,
//! and removing what a release left in a program (its mover's zombie,
//! descriptor, store and code).

use super::Ptracer;
use crate::trace::leftover::Leftover;
use crate::trace::ptrace::Injector;
use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use pagescope_core::Result;
use std::time::{Duration, Instant};

impl Ptracer {
    /// Removes what the release left in a program (see [`Leftover`]). The
    /// mover's clone has no exit signal, so none of the program's own
    /// waits sees it, and it would stay a zombie child of the program
    /// until the program exits. A thread of the program is stopped and
    /// runs `wait4(mover, __WALL)` (the `syscall` of the mover's code),
    /// then the calls of [`Leftover::remove`], and is left stopped for the
    /// detach. `false` if the mover was not reaped (no thread could be
    /// stopped within 2 s); the rest is best effort too.
    pub(super) fn clean_up(&mut self, left: &Leftover) -> bool {
        let Some(insn) = left.code else { return false };
        let tgid = left.tgid;
        let tid = if self.threads.contains_key(&tgid) {
            tgid
        } else {
            match self.threads.iter().find(|(_, t)| t.tgid == tgid) {
                Some((&tid, _)) => tid,
                None => return false,
            }
        };
        let pid = Pid::from_raw(tid as i32);
        if ptrace::interrupt(pid).is_err() {
            return false;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let flags = WaitPidFlag::__WALL | WaitPidFlag::WNOHANG;
            let status = match waitpid(pid, Some(flags)) {
                Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(Errno::EINTR) => continue,
                Ok(s) => s,
                Err(_) => return false,
            };
            let inj = match status {
                WaitStatus::PtraceEvent(_, _, pagescope_sys::ptrace::event::STOP) => {
                    Injector::at_interrupt(pid, insn)
                }
                WaitStatus::PtraceSyscall(_) => match pagescope_sys::ptrace::syscall_info(tid) {
                    Ok(pagescope_sys::ptrace::SyscallStop::Exit { .. }) => {
                        Injector::new(pid, Some(insn))
                    }
                    _ => {
                        let _ = ptrace::syscall(pid, None);
                        continue;
                    }
                },
                // A signal is delivered; the interrupt stop follows.
                WaitStatus::Stopped(_, sig) => {
                    let _ = ptrace::syscall(pid, Some(sig));
                    continue;
                }
                WaitStatus::PtraceEvent(..) => {
                    let _ = ptrace::syscall(pid, None);
                    continue;
                }
                // Gone: its zombies go with it.
                WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
                    self.threads.remove(&tid);
                    return false;
                }
                // Still running at the deadline.
                _ => return false,
            };
            let Ok(mut inj) = inj else { return false };
            if inj.park_in(tgid, insn).is_err() {
                let _ = inj.finish();
                return false;
            }
            let reaped = left.remove(&mut inj);
            let _ = inj.finish();
            return reaped.len() == left.movers.len();
        }
    }

    /// Ctrl-C or SIGTERM: put every page back, then let go of every thread.
    pub(in crate::trace) fn detach_all(&mut self) -> Result<()> {
        self.shared.release();
        for tid in self.parked.drain() {
            let _ = ptrace::detach(Pid::from_raw(tid as i32), None);
        }
        let ended = std::mem::take(&mut self.shared.lock().reap);
        for left in ended {
            self.clean_up(&left);
        }
        // A thread already in a stop (the one whose stop was being
        // handled when an error came) detaches at once; the others are
        // interrupted first.
        let mut waiting: Vec<u32> = self
            .threads
            .keys()
            .copied()
            .filter(|&tid| ptrace::detach(Pid::from_raw(tid as i32), None).is_err())
            .collect();
        for &tid in &waiting {
            let _ = ptrace::interrupt(Pid::from_raw(tid as i32));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !waiting.is_empty() && Instant::now() < deadline {
            let flags = WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD | WaitPidFlag::WNOHANG;
            let status = match waitpid(None, Some(flags)) {
                Ok(WaitStatus::StillAlive) => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Ok(s) => s,
                Err(Errno::EINTR) => continue,
                Err(_) => break,
            };
            let Some(pid) = status.pid() else { continue };
            let tid = pid.as_raw() as u32;
            let sig = match status {
                WaitStatus::Stopped(_, sig) if sig != Signal::SIGSTOP => Some(sig),
                WaitStatus::Exited(..) | WaitStatus::Signaled(..) => {
                    waiting.retain(|&t| t != tid);
                    continue;
                }
                _ => None,
            };
            let _ = ptrace::detach(pid, sig);
            waiting.retain(|&t| t != tid);
        }
        Ok(())
    }
}
