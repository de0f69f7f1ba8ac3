//! The fault thread: it reads every traced address space's userfaultfd,
//! serves the faults and events ([`super::serve`]), drives the movers
//! (which only it may use), empties what the ptrace thread registers,
//! answers a sampler's boundaries, and puts every page back on a release.

use crate::trace::counts::Counts;
use crate::trace::descriptors::unregister_all;
use crate::trace::evict::{empty_range, evict_watched};
use crate::trace::hooks::spin_time;
use crate::trace::leftover::Leftover;
use crate::trace::mm::{PAGE, STORE_BYTES};
use crate::trace::os::{cpus, poll, sys, MADV_DONTNEED};
use crate::trace::ptrace::{self as pt, nr, Mover};
use crate::trace::serve::on_msg;
use crate::trace::state::{Space, State};
use crate::trace::uffd::{Msg, Uffd};
use pagescope_core::Result;
use rustix::process::Signal;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What the fault thread is asked to do, each with where its answer goes
/// (dropped unanswered if the thread has ended).
#[derive(Debug)]
pub(super) enum Command {
    /// Hold the faults: a sampler's boundary begins, and takes the pages
    /// faulted in so far while none comes in (and goes out again unseen).
    /// Answered once held; no fault is served until the next command.
    Hold(Sender<()>),
    /// Move the pages of the pool that the sink watches out of the program
    /// ([`evict_watched`]); then faults are served again.
    Evict(Sender<Result<()>>),
    /// Put every page back and unregister every range, so the program
    /// runs on untraced; answered when done.
    Release(Sender<()>),
    /// End the movers and stop.
    Quit,
}

/// What the ptrace thread, the fault thread and a sampler share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    pub(super) counts: Arc<Counts>,
    /// The fault thread's commands.
    commands: Sender<Command>,
    /// Wakes the fault thread from its `poll`.
    wake_w: OwnedFd,
}

impl Shared {
    /// The state and counts of a session, with the sending ends of the
    /// fault thread's commands and wake-up pipe.
    pub(super) fn new(
        state: State,
        counts: Arc<Counts>,
        commands: Sender<Command>,
        wake_w: OwnedFd,
    ) -> Shared {
        Shared {
            state: Mutex::new(state),
            counts,
            commands,
            wake_w,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the fault thread: the state changed.
    pub(super) fn poke(&self) {
        let _ = rustix::io::write(&self.wake_w, &[1]);
    }

    /// Sends the fault thread `command`, and wakes it; `false` if it has
    /// ended.
    pub(super) fn ask(&self, command: Command) -> bool {
        let sent = self.commands.send(command).is_ok();
        self.poke();
        sent
    }

    /// Asks the fault thread to release every page, and waits until it
    /// has (or has ended).
    pub(super) fn release(&self) {
        let (done, wait) = mpsc::channel();
        if self.ask(Command::Release(done)) {
            let _ = wait.recv();
        }
    }
}

/// Puts every evicted page back and unregisters every range of `space`,
/// so the program runs on untraced; then frees the store's pages and
/// ends the mover. Returns what stays in the program (the mover, a zombie
/// child of it until reaped, its descriptor, store, index and code page)
/// for the ptrace thread to remove ([`Ptracer::clean_up`]).
fn release_space(space: &mut Space) -> Result<Option<Leftover>> {
    let mm = &mut space.mm;
    let pages: Vec<u64> = mm.evicted.keys().copied().collect();
    for page in pages {
        mm.bring_back(page, false, false)
            .map_err(|e| sys("bringing a page back", e))?;
    }
    // Through the mover's pid: the program's names another address space
    // once it has exec'd, and none once it has exited.
    let unregistered = unregister_all(&mm.proc, &mm.uffd, mm.mem_pid())?;
    // Its pages back and no longer trapped: the transparent huge pages
    // it had at the attach are made again.
    if unregistered {
        crate::trace::thp::collapse(mm.mem_pid(), &std::mem::take(&mut space.thp));
    }
    // What stays in the program (see [`Leftover`]); its descriptor only
    // if the number still names the trace's (the program may have closed
    // it, and reused the number).
    let ended = mm.mover.as_ref().map(|m| Leftover {
        tgid: mm.pid,
        movers: vec![m.pid],
        code: Some(m.insn),
        fds: pt::same_file(mm.pid, m.fd, std::process::id(), mm.uffd.raw())
            .is_ok_and(|same| same)
            .then_some(m.fd)
            .into_iter()
            .collect(),
        store: Some(mm.store.base),
        guarded: true,
        index: Some(mm.store.index),
    });
    if let Some(m) = mm.mover.as_mut().and_then(|m| m.mover.take()) {
        if unregistered {
            // Unregistered now, so this raises no event (one would wait
            // for this thread to read it).
            let _ = m.syscall(
                nr::MADVISE,
                [mm.store.base, STORE_BYTES, MADV_DONTNEED, 0, 0, 0],
            );
        }
        m.kill();
        return Ok(ended);
    }
    Ok(None)
}

/// Closes every descriptor of the mover `pid` but `keep` (the
/// userfaultfd it moves pages with). It was cloned with a copy of the
/// program's descriptor table; each copy would hold open what the program
/// closes: a pipe whose reader then never sees its end, a socket, a file
/// lock. `close_range` (Linux 5.9), else one `close` per descriptor listed
/// in `PROC/PID/fd`.
fn close_all_but(mover: &Mover, proc: &std::path::Path, pid: u32, keep: i32) {
    let keep = keep as u64;
    let mut ranges = vec![(keep + 1, u64::from(u32::MAX))];
    if keep > 0 {
        ranges.push((0, keep - 1));
    }
    let closed = ranges
        .iter()
        .all(|&(a, b)| matches!(mover.syscall(nr::CLOSE_RANGE, [a, b, 0, 0, 0, 0]), Ok(0)));
    if closed {
        return;
    }
    let Ok(dir) = std::fs::read_dir(proc.join(pid.to_string()).join("fd")) else {
        return;
    };
    for fd in dir.flatten() {
        if let Ok(fd) = fd.file_name().to_string_lossy().parse::<u64>() {
            if fd != keep {
                let _ = mover.syscall(nr::CLOSE, [fd, 0, 0, 0, 0, 0]);
            }
        }
    }
}

/// Attaches movers the ptrace thread created, and empties the ranges it
/// registered; then marks the spaces ready.
fn prepare_spaces(st: &mut State) {
    let keys: Vec<u32> = st.spaces.keys().copied().collect();
    for k in keys {
        let space = st.spaces.get_mut(&k).expect("listed");
        if let Some(m) = space.mm.mover.as_mut() {
            if m.mover.is_none() && !m.failed {
                match Mover::seize(m.pid, m.insn) {
                    Ok(mv) => {
                        close_all_but(&mv, &space.mm.proc, m.pid, m.fd);
                        m.mover = Some(mv)
                    }
                    Err(e) => {
                        m.failed = true;
                        st.failure.get_or_insert(sys("attaching the mover", e));
                        continue;
                    }
                }
            }
        }
        let space = st.spaces.get_mut(&k).expect("listed");
        let ranges = std::mem::take(&mut space.pending_empty);
        for (a, b, shared) in ranges {
            let sink = &st.sink;
            match empty_range(&mut space.mm, a, b, shared, |p| sink.watches(p)) {
                Ok(out) => st.sink.emptied(k, out),
                Err(e) => {
                    st.failure.get_or_insert(e);
                    break;
                }
            }
        }
        let space = st.spaces.get_mut(&k).expect("listed");
        space.ready.store(true, Ordering::SeqCst);
    }
    st.dying.retain(|&p| !pt::reap_now(p));
    for mut space in std::mem::take(&mut st.retired) {
        if let Some(m) = space.mm.mover.as_mut().and_then(|m| m.mover.take()) {
            st.dying.extend(m.kill_nowait());
        } else if let Some(m) = &space.mm.mover {
            let _ = pagescope_sys::signals::kill(m.pid, Signal::KILL.as_raw());
        }
    }
}

/// Does what the fault thread is asked; `false` once it must stop.
fn obey(shared: &Shared, commands: &Receiver<Command>, command: Command) -> bool {
    let mut next = Some(command);
    while let Some(command) = next.take() {
        match command {
            Command::Hold(held) => {
                let _ = held.send(());
                // Held until the next command; the last sender is
                // `shared`'s, so this always gets one.
                next = Some(commands.recv().unwrap_or(Command::Quit));
            }
            Command::Evict(answer) => {
                let mut st = shared.lock();
                prepare_spaces(&mut st);
                let _ = answer.send(evict_watched(&mut st, &shared.counts));
            }
            Command::Release(done) => {
                release_all(&mut shared.lock());
                let _ = done.send(());
            }
            Command::Quit => {
                quit(&mut shared.lock());
                return false;
            }
        }
    }
    true
}

/// Puts every page back, unregisters every range and ends the movers
/// ([`release_space`]); what stays in each program is left for the ptrace
/// thread to remove.
fn release_all(st: &mut State) {
    prepare_spaces(st);
    let keys: Vec<u32> = st.spaces.keys().copied().collect();
    for k in keys {
        if let Some(space) = st.spaces.get_mut(&k) {
            match release_space(space) {
                Ok(Some(ended)) => st.reap.push(ended),
                Ok(None) => {}
                Err(e) => {
                    st.failure.get_or_insert(e);
                }
            }
        }
    }
    st.pool.clear();
}

/// Ends the movers of every space, and reaps them.
fn quit(st: &mut State) {
    let spaces: Vec<Space> = st.spaces.drain().map(|(_, s)| s).collect();
    st.retired.extend(spaces);
    prepare_spaces(st);
    // Nothing waits on a page any more: they exit at once.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !st.dying.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        st.dying.retain(|&p| !pt::reap_now(p));
    }
}

/// The fault thread: serves the faults and events of every traced space
/// until told to quit, doing what it is asked ([`Command`]) between
/// batches. `wake_r` is the wake-up pipe ([`Shared::poke`]).
pub(super) fn fault_thread(shared: Arc<Shared>, commands: Receiver<Command>, wake_r: OwnedFd) {
    // With one CPU, looking without sleeping would hold off the program
    // that the fault just let go.
    let spin = if cpus().len() > 1 {
        spin_time()
    } else {
        Duration::ZERO
    };
    let mut last_fault: Option<Instant> = None;
    let mut msgs = Vec::new();
    let mut deferred: Vec<(u32, Msg)> = Vec::new();
    let mut drain = [0u8; 64];
    loop {
        while let Ok(command) = commands.try_recv() {
            if !obey(&shared, &commands, command) {
                return;
            }
        }
        // Messages read while a mover waited come first, in their order.
        let mut batch: Vec<(u32, Msg)> = Vec::new();
        let fds: Vec<(u32, Arc<Uffd>)> = {
            let mut st = shared.lock();
            prepare_spaces(&mut st);
            for (&k, s) in st.spaces.iter_mut() {
                batch.extend(s.mm.stash.drain(..).map(|m| (k, m)));
            }
            st.spaces
                .iter()
                .map(|(&k, s)| (k, s.mm.uffd.clone()))
                .collect()
        };
        let mut polls: Vec<pagescope_sys::poll::PollFd> = std::iter::once(wake_r.as_raw_fd())
            .chain(fds.iter().map(|(_, u)| u.raw()))
            .map(|fd| pagescope_sys::poll::PollFd {
                fd,
                events: pagescope_sys::poll::POLLIN,
                revents: 0,
            })
            .collect();
        let timeout = if !batch.is_empty() {
            0
        } else if deferred.is_empty() {
            200
        } else {
            1
        };
        // Right after a fault the next one is likely microseconds away:
        // look for it without sleeping, so that it needs no wake-up. The
        // descriptors are read directly (they are non-blocking): a message
        // found costs one system call, not a poll and then a read. The
        // wake-up pipe waits until the spin ends (100 us at most).
        let spun = timeout > 0
            && last_fault.is_some_and(|t| t.elapsed() < spin)
            && loop {
                let before = batch.len();
                for (key, u) in &fds {
                    msgs.clear();
                    if u.read_msgs(&mut msgs).is_ok() {
                        batch.extend(msgs.iter().map(|&m| (*key, m)));
                    }
                }
                if batch.len() > before {
                    break true;
                }
                if last_fault.is_none_or(|t| t.elapsed() >= spin) {
                    break false;
                }
                std::hint::spin_loop();
            };
        if !spun && poll(&mut polls, timeout) < 0 {
            continue;
        }
        if polls[0].revents != 0 {
            let _ = rustix::io::read(&wake_r, &mut drain);
        }
        for (i, (key, u)) in fds.iter().enumerate() {
            if polls[i + 1].revents & pagescope_sys::poll::POLLIN == 0 {
                continue;
            }
            msgs.clear();
            if u.read_msgs(&mut msgs).is_ok() {
                batch.extend(msgs.iter().map(|&m| (*key, m)));
            }
        }
        if batch.iter().any(|(_, m)| matches!(m, Msg::Fault { .. })) {
            last_fault = Some(Instant::now());
        }
        // Events first: a fault that could not be served waits for them.
        let mut st = shared.lock();
        let retry = std::mem::take(&mut deferred);
        for (key, m) in batch
            .iter()
            .filter(|(_, m)| !matches!(m, Msg::Fault { .. }))
            .chain(retry.iter())
            .chain(batch.iter().filter(|(_, m)| matches!(m, Msg::Fault { .. })))
        {
            let (key, m) = (*key, *m);
            if !st.spaces.contains_key(&key) {
                continue;
            }
            match on_msg(&shared.counts, &mut st, key, m) {
                Ok(true) => {}
                Ok(false) => deferred.push((key, m)),
                Err(e) => {
                    st.failure.get_or_insert(e);
                    // Never leave a thread waiting on a page.
                    if let (Msg::Fault { address, .. }, Some(space)) = (m, st.spaces.get(&key)) {
                        let _ = space.mm.uffd.wake(address & !(PAGE - 1), PAGE);
                    }
                }
            }
        }
        if let Err(e) = st.sink.flush_if_due(&shared.counts) {
            st.failure.get_or_insert(e);
        }
    }
}
