//! The end of a trace: letting every thread go once every page is back,
//! and removing what a release left in a program (its mover's zombie,
//! descriptor, store and code).

use super::Ptracer;
use crate::trace::leftover::Leftover;
use crate::trace::ptrace::Injector;
use pagescope_core::Result;
use pagescope_sys::ptrace;
use pagescope_sys::wait::{self, waitpid, Status};
use rustix::io::Errno;
use rustix::process::Signal;
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
        if ptrace::interrupt(tid).is_err() {
            return false;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let flags = wait::ALL | wait::Options::NOHANG;
            let status = match waitpid(Some(tid), flags) {
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(Errno::INTR) => continue,
                Ok(s) => s.map(|(_, st)| st),
                Err(_) => return false,
            };
            let inj = match status {
                Some(Status::Event {
                    event: ptrace::event::STOP,
                    ..
                }) => Injector::at_interrupt(tid, insn),
                Some(Status::Syscall) => match ptrace::syscall_info(tid) {
                    Ok(ptrace::SyscallStop::Exit { .. }) => Injector::new(tid, Some(insn)),
                    _ => {
                        let _ = ptrace::syscall(tid, 0);
                        continue;
                    }
                },
                // A signal is delivered; the interrupt stop follows.
                Some(Status::Stopped(sig)) => {
                    let _ = ptrace::syscall(tid, sig);
                    continue;
                }
                Some(Status::Event { .. }) => {
                    let _ = ptrace::syscall(tid, 0);
                    continue;
                }
                // Gone: its zombies go with it.
                Some(Status::Exited(_) | Status::Signaled(_)) => {
                    self.threads.remove(&tid);
                    return false;
                }
                // Still running at the deadline.
                Some(Status::Continued) | None => return false,
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
            let _ = ptrace::detach(tid, 0);
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
            .filter(|&tid| ptrace::detach(tid, 0).is_err())
            .collect();
        for &tid in &waiting {
            let _ = ptrace::interrupt(tid);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !waiting.is_empty() && Instant::now() < deadline {
            let flags = wait::ALL | wait::NOTHREAD | wait::Options::NOHANG;
            let (tid, status) = match waitpid(None, flags) {
                Ok(None) => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Ok(Some(s)) => s,
                Err(Errno::INTR) => continue,
                Err(_) => break,
            };
            let sig = match status {
                Status::Stopped(sig) if sig != Signal::STOP.as_raw() => sig,
                Status::Exited(_) | Status::Signaled(_) => {
                    waiting.retain(|&t| t != tid);
                    continue;
                }
                _ => 0,
            };
            let _ = ptrace::detach(tid, sig);
            waiting.retain(|&t| t != tid);
        }
        Ok(())
    }
}
