//! `pagescope trace --release PID`: after a tracer was killed, put back
//! every page it had evicted from PID and unregister the userfaultfd, so
//! the program runs on with all its data.
//!
//! Everything needed is inside the target: its userfaultfd (in its
//! descriptor table), the store of evicted pages, and the index that names
//! the page in each slot (see [`super::mm`]).

use super::descriptors::{take_fd, unregister_all};
use super::leftover::Leftover;
use super::mm::{self, INDEX_BYTES, INDEX_NAME, MOVER_NAME, PAGE, STORE_BYTES, STORE_NAME};
use super::os::poll;
use super::ptrace::{Injector, Parked};
use super::release_report::{ReleaseError, ReleaseReport, ReleaseStep, Released};
use super::uffd::{self, Msg, Uffd};
use crate::procfs::ProcDir;
use pagescope_core::{parse, Error, Result};
use std::path::Path;

/// `pagescope trace --release ROOT`: after a tracer was killed, puts back
/// every page it had evicted from `root` and from the traced processes
/// `root` forked, lets them run on untraced, and takes out what pagescope
/// had put into them; ends the movers and holders a killed pagescope left.
///
/// In order: the processes to release are listed first ([`release_order`]),
/// and the descriptors that holders kept gathered ([`Held::gather`]). Then,
/// for each process: a stray mover is ended; a child with no userfaultfd
/// of its own gets its pages through a held descriptor; threads parked in
/// the middle of an injection go on ([`unpark`]); and a process still
/// traced is released through its own userfaultfd ([`release`]). Then the
/// orphaned movers and the holders end (closing what they held wakes
/// whatever still waits on it), and last, with every page back and
/// nothing waiting, each process's leftovers go ([`remove_leftovers`]).
/// `fs`: where `/proc` is.
pub fn release_all(fs: &crate::Root, root: u32) -> Result<ReleaseReport, ReleaseError> {
    let proc = &fs.proc;
    if ProcDir::open(proc, root).is_err() {
        return Err(ReleaseError::NoSuchProcess(root));
    }
    // A zombie holds nothing; its parent may (a mover that died with its
    // tracer is a zombie child of the traced program, with its name).
    if let Ok(st) = ProcDir::at(proc, root).stat(&mut Vec::new()) {
        if st.state == 'Z' {
            let traced = store_of(proc, st.ppid).is_ok_and(|s| s.is_some());
            return Err(ReleaseError::Failed {
                pid: root,
                done: ReleaseReport::default(),
                source: Error::corrupt(
                    ProcDir::at(proc, root).path(),
                    format!(
                        "process {root} has exited (a zombie, not yet reaped by its parent, \
                         pid {}): there is nothing of it to release{}",
                        st.ppid,
                        if traced {
                            format!(
                                "; its parent was traced by pagescope: \
                                 `pagescope trace --release {}`",
                                st.ppid
                            )
                        } else {
                            String::new()
                        }
                    ),
                ),
            });
        }
    }
    let mut report = ReleaseReport::default();
    let released = release_tree(proc, root, &mut report);
    // A root without a userfaultfd held nothing of pagescope's (its
    // tracer died before it got that far, or never traced it); that is an
    // error only if there was nothing else to give back either.
    let (released, nothing) = match released {
        Ok(nothing) => (Ok(()), nothing),
        Err(e) => (Err(e), None),
    };
    // Once the holders are gone (they may have kept pagescope's holds), the
    // CPUs no pagescope holds any more get their limits back.
    let restored = crate::resume_latency::restore_abandoned(fs);
    // And the observer locks killed pagescopes left go (best effort).
    crate::observer::sweep_abandoned(&fs.run);
    if let Ok(cpus) = &restored {
        if !cpus.is_empty() {
            report
                .steps
                .push(ReleaseStep::RestoredCpuLatency(cpus.clone()));
        }
    }
    match (released, restored) {
        (Ok(()), Ok(_)) => match nothing {
            Some(source) if !report.did_something() => Err(ReleaseError::Failed {
                pid: root,
                done: report,
                source: with_live_holders(fs, source),
            }),
            _ => Ok(report),
        },
        (Err((pid, source)), _) => Err(ReleaseError::Failed {
            pid,
            done: report,
            source,
        }),
        (Ok(()), Err(source)) => Err(ReleaseError::Failed {
            pid: root,
            done: report,
            source,
        }),
    }
}

/// The process tracing `pid` (ptrace), if any. A pagescope that was
/// killed traces nothing any more: the kernel detached its tracees.
fn live_tracer(proc: &Path, pid: u32) -> Option<u32> {
    ProcDir::at(proc, pid)
        .tracer_pid(&mut Vec::new())
        .ok()
        .filter(|&t| t != 0)
}

/// `error` (nothing to release), saying which CPUs a live pagescope
/// holds polling, if any: a user who finds a CPU's resume latency limit at
/// `n/a` learns that it comes back when that pagescope ends.
fn with_live_holders(fs: &crate::Root, error: Error) -> Error {
    let cpus = crate::resume_latency::held(fs).unwrap_or_default();
    match error {
        Error::Corrupt { path, why } if !cpus.is_empty() => {
            let (noun, poll, get, its) = match cpus.len() {
                1 => ("CPU", "polls", "gets", "its resume latency limit"),
                _ => ("CPUs", "poll", "get", "their resume latency limits"),
            };
            let cpus: Vec<String> = cpus.iter().map(usize::to_string).collect();
            Error::corrupt(
                path,
                format!(
                    "{why} ({noun} {} {poll} for a pagescope that is still running, and \
                     {get} {its} back when that one ends)",
                    cpus.join(", ")
                ),
            )
        }
        error => error,
    }
}

/// The steps of [`release_all`], each added to `report` as it is done; an
/// error names the process it concerns. `Ok(Some(why))`: `root` itself
/// held no userfaultfd, so there was nothing in it to release.
fn release_tree(
    proc: &Path,
    root: u32,
    report: &mut ReleaseReport,
) -> Result<Option<Error>, (u32, Error)> {
    let mut nothing = None;
    let steps = &mut report.steps;
    // The traced processes it forked were traced too: release them all.
    let order = release_order(proc, root);
    // Descriptors of children forked just before pagescope died, kept by
    // its holder.
    let mut held = Held::gather(proc, &order);
    for &pid in &order {
        let failed = |e| (pid, e);
        // A process some running tracer has (a pagescope that was not
        // killed lets its programs go itself) is left alone.
        if let Some(tracer) = live_tracer(proc, pid) {
            if pid == root {
                return Err(failed(Error::corrupt(
                    ProcDir::at(proc, pid).file_path("status"),
                    format!(
                        "process {pid} is traced by process {tracer}, which is running: \
                         --release is for programs whose pagescope was killed (stop a \
                         running pagescope with Ctrl-C, and it lets its programs go)"
                    ),
                )));
            }
            steps.push(ReleaseStep::LeftToItsTracer { pid, tracer });
            continue;
        }
        if pid != root && end_stray_mover(pid) {
            steps.push(ReleaseStep::EndedStrayMover(pid));
            continue;
        }
        if let Some(done) = held.release(proc, pid, is_parked(pid)).map_err(failed)? {
            steps.push(ReleaseStep::ReleasedThroughHolder {
                pid,
                copied: done.copied,
            });
        }
        // A process caught in the middle of pagescope's setting it up goes
        // on first.
        let threads = unpark(proc, pid).map_err(failed)?;
        if threads > 0 {
            steps.push(ReleaseStep::Unparked { pid, threads });
        }
        if (pid != root || threads > 0) && !still_traced(proc, pid) {
            continue;
        }
        let done = match release(proc, pid) {
            Ok(done) => done,
            // Killed before it gave the root a userfaultfd: what it did
            // put in (code, descriptors) goes with the leftovers below.
            Err(e) if pid == root && userfaultfds(proc, pid).is_ok_and(|u| u.is_empty()) => {
                nothing = Some(e);
                continue;
            }
            // A child that exited meanwhile, or was released through its
            // parent and then exec'd (its descriptor and store went with
            // its old image), has nothing left to release.
            Err(_) if pid != root && !still_traced(proc, pid) => continue,
            Err(e) => return Err(failed(e)),
        };
        steps.push(ReleaseStep::Released {
            pid,
            copied: done.copied,
        });
    }
    // Movers left behind programs that exited hold copies of their
    // descriptors (a pipe's write end keeps its reader waiting).
    let orphans = end_orphaned_movers(proc);
    if !orphans.is_empty() {
        steps.push(ReleaseStep::EndedOrphanedMovers(orphans));
    }
    // Closing what they held wakes whatever still waits on it.
    let ended = held.end();
    if ended > 0 {
        steps.push(ReleaseStep::EndedHolders(ended));
    }
    // Every page is back and nothing waits: what pagescope put into each
    // process (descriptors, store, index, code, dead movers) goes.
    let left: Vec<u32> = steps
        .iter()
        .filter_map(|s| match s {
            ReleaseStep::LeftToItsTracer { pid, .. } => Some(*pid),
            _ => None,
        })
        .collect();
    for &pid in order.iter().filter(|p| !left.contains(p)) {
        if remove_leftovers(proc, pid).map_err(|e| (pid, e))? {
            steps.push(ReleaseStep::RemovedLeftovers(pid));
        }
    }
    Ok(nothing)
}

/// `pid`, then each of its descendants that has a pagescope store (or a
/// thread parked by pagescope): a traced program's children were traced
/// too, and each must be released.
/// (Listed before any is released: a released parent may exit, and its
/// children then belong to init.)
pub fn release_order(proc: &Path, pid: u32) -> Vec<u32> {
    let mut out = crate::procfs::descendants(proc, pid);
    let rest = out.split_off(1);
    out.extend(
        rest.into_iter()
            .filter(|&p| store_of(proc, p).is_ok_and(|s| s.is_some()) || is_parked(p)),
    );
    out
}

/// Ends `pid` if it is a mover pagescope never attached (see
/// [`super::ptrace::stray_mover`]); returns whether it did.
pub fn end_stray_mover(pid: u32) -> bool {
    super::ptrace::stray_mover(pid)
        && rustix::process::Pid::from_raw(pid as i32).is_some_and(|p| {
            rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok()
        })
}

/// Ends every mover on the machine that a killed pagescope left behind a
/// program that has since exited; returns their pids. Such a mover was
/// cloned but not yet attached when pagescope died (so the kernel did not
/// kill it with pagescope), and when its program exited it became the
/// child of init (or of a subreaper), out of reach of a release's walk of
/// the program's descendants; it still holds the copy of the program's
/// descriptors it was made with, and a pipe's write end among them keeps
/// the reader waiting for ever. It is told by what it is (a mover that
/// pagescope never attached: [`end_stray_mover`]), traced by nobody, and
/// sharing no address space with its parent (the program that made it is
/// gone), so it serves no one.
pub fn end_orphaned_movers(proc: &Path) -> Vec<u32> {
    let mut buf = Vec::new();
    let orphaned = |pid: u32, buf: &mut Vec<u8>| {
        let Ok(dir) = ProcDir::open(proc, pid) else {
            return false;
        };
        let Ok(stat) = dir.stat(buf) else {
            return false;
        };
        let untraced = dir.tracer_pid(buf).ok() == Some(0);
        // Init may refuse kcmp (even to root), and shares no one's memory.
        untraced && (stat.ppid == 1 || matches!(super::ptrace::same_vm(pid, stat.ppid), Ok(false)))
    };
    crate::procfs::list_pids(proc)
        .unwrap_or_default()
        .into_iter()
        .filter(|&pid| orphaned(pid, &mut buf) && end_stray_mover(pid))
        .collect()
}

/// Whether a dying pagescope left a thread of `pid` parked in the middle
/// of an injection (see [`Parked`]).
pub fn is_parked(pid: u32) -> bool {
    !Parked::find(pid).is_empty()
}

/// Gives each thread of `pid` that a dying pagescope left parked in the
/// middle of an injection (see [`Parked`]) its registers back; first puts
/// back, by writing them, the pages the process is missing that its store
/// holds. Returns how many threads went on.
///
/// The pages: a forked child parks before it has a userfaultfd of its
/// own, while its registrations are on the descriptor the fork made,
/// which only pagescope held; pagescope's death closed it and left the
/// child unregistered, its pages still away mere holes. No code of the
/// child has run since the fork, so each hole that its copy of the index
/// names is still untouched and gets the page from the slot.
pub fn unpark(proc: &Path, pid: u32) -> Result<usize> {
    let parked = Parked::find(pid);
    if parked.is_empty() {
        return Ok(0);
    }
    if let Some((store, index)) = store_of(proc, pid)? {
        let dir = ProcDir::at(proc, pid);
        let mem_path = dir.file_path("mem");
        let stored = mm::stored_pages(proc, pid, store, index)
            .map_err(|e| Error::io(format!("{} (the store's index)", mem_path.display()), e))?;
        let holes = missing(proc, pid, stored.iter().map(|&(_, page)| page))?;
        let mem = dir.mem().map_err(|e| Error::io(&mem_path, e))?;
        let mut buf = vec![0u8; PAGE as usize];
        for (&(slot, page), hole) in stored.iter().zip(holes) {
            if hole {
                use std::os::unix::fs::FileExt;
                match super::remote::read(pid, store + slot * PAGE, &mut buf)
                    .and_then(|()| mem.write_all_at(&buf, page))
                {
                    // Registered with the fork's descriptor, which a holder
                    // kept: the release through the process's own
                    // descriptor copies it back.
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) => {}
                    r => r.map_err(|e| Error::io(&mem_path, e))?,
                }
            }
        }
    }
    for p in &parked {
        p.unpark(pid).map_err(|e| {
            Error::io(
                ProcDir::at(proc, pid).file_path(&format!("task/{}", p.tid)),
                e,
            )
        })?;
    }
    Ok(parked.len())
}

/// For each of `pages`, whether it is missing from `pid` (neither present
/// nor swapped out, in its pagemap).
fn missing(proc: &Path, pid: u32, pages: impl Iterator<Item = u64>) -> Result<Vec<bool>> {
    use std::os::unix::fs::FileExt;
    let dir = ProcDir::at(proc, pid);
    let path = dir.file_path("pagemap");
    let f = dir.pagemap().map_err(|e| Error::io(&path, e))?;
    let mut e = [0u8; 8];
    pages
        .map(|page| {
            f.read_exact_at(&mut e, page / PAGE * 8)
                .map_err(|err| Error::io(&path, err))?;
            Ok(u64::from_le_bytes(e) >> 62 == 0)
        })
        .collect()
}

/// Whether `pid` still holds a userfaultfd and a pagescope store: what
/// [`release`] needs to find in a process.
pub fn still_traced(proc: &Path, pid: u32) -> bool {
    userfaultfds(proc, pid).is_ok_and(|u| !u.is_empty())
        && store_of(proc, pid).is_ok_and(|s| s.is_some())
}

/// Where the store and the index of a process traced by pagescope are.
fn store_of(proc: &Path, pid: u32) -> Result<Option<(u64, u64)>> {
    Ok(store_in(&ProcDir::at(proc, pid).maps(&mut Vec::new())?))
}

/// Where the store and the index are among a process's mappings: by name,
/// or (kernels without CONFIG_ANON_VMA_NAME) by size.
fn store_in(lines: &[parse::maps::MapsLine]) -> Option<(u64, u64)> {
    let find = |name: &str, bytes: u64| {
        let named = format!("[anon:{name}]");
        lines
            .iter()
            .find(|l| l.path == named)
            .or_else(|| {
                lines
                    .iter()
                    .find(|l| l.path.is_empty() && l.end - l.start == bytes)
            })
            .map(|l| l.start)
    };
    find(STORE_NAME, STORE_BYTES).zip(find(INDEX_NAME, INDEX_BYTES))
}

/// Takes out of `pid`, once it is released, what pagescope put into it
/// (see [`Leftover`]): the movers that died with the tracer (zombie
/// children with no exit signal), its userfaultfd descriptors, the store,
/// the index and the mover's code page, all found in /proc. Every
/// userfaultfd the process holds is taken for pagescope's, as the release
/// took it (a range the program had registered itself would have kept
/// pagescope from tracing it). Calls injected into one of its threads,
/// stopped for that moment, remove them. Returns whether anything was
/// left; a process that exited meanwhile had nothing.
///
/// A released process runs on: between a first look and the stop it may
/// exit, or `execve` (which takes the store, the index, the code page and
/// the descriptors with its old image). So what is removed is what a
/// second look finds once every thread is stopped; the first look only
/// spares the stop to processes with nothing left.
pub fn remove_leftovers(proc: &Path, pid: u32) -> Result<bool> {
    let dir = ProcDir::at(proc, pid);
    match leftovers(proc, pid) {
        Ok(Some(left)) if !left.is_empty() => {}
        Ok(_) => return Ok(false),
        Err(_) if exiting(proc, pid) => return Ok(false),
        Err(e) => return Err(e),
    }
    let seized =
        match super::ptrace::seize_process(pid, pagescope_sys::ptrace::PTRACE_O_TRACESYSGOOD) {
            Ok(s) => s,
            // Put back, it may finish at once: what it holds goes with it.
            Err(_) if exiting(proc, pid) => return Ok(false),
            Err(e) => {
                return Err(Error::io(
                    format!(
                        "{} (attaching to remove pagescope's areas)",
                        dir.file_path("task").display()
                    ),
                    e,
                ))
            }
        };
    let r = remove_stopped(proc, pid, &seized);
    for (t, how) in seized {
        let sig = match how {
            super::ptrace::Seized::Signal(sig) => sig,
            _ => 0,
        };
        let _ = pagescope_sys::ptrace::detach(t, sig);
    }
    match r {
        Ok(removed) => Ok(removed),
        Err(_) if exiting(proc, pid) => Ok(false),
        Err(e) => Err(e),
    }
}

/// [`remove_leftovers`]' work once every thread of `pid` is stopped
/// (`seized`): what is left now, removed by calls injected into a thread
/// stopped where it can run one.
fn remove_stopped(proc: &Path, pid: u32, seized: &[(u32, super::ptrace::Seized)]) -> Result<bool> {
    let Some(left) = leftovers(proc, pid)?.filter(|l| !l.is_empty()) else {
        return Ok(false);
    };
    let failed = |step: &str, e: std::io::Error| {
        Error::sys(
            format!(
                "{} (removing pagescope's areas: {step})",
                ProcDir::at(proc, pid).path().display()
            ),
            e,
        )
    };
    let Some(&(t, _)) = seized.iter().find(|(_, how)| how.injectable()) else {
        return Err(failed(
            "stopping a thread",
            std::io::Error::other("no thread stopped where it can run a system call"),
        ));
    };
    let insn = match left.code {
        Some(code) => code,
        None => super::ptrace::vdso_syscall(pid).map_err(|e| failed("finding the vDSO", e))?,
    };
    let mut inj =
        Injector::at_interrupt(t, insn).map_err(|e| failed("taking a thread's registers", e))?;
    match left.code {
        Some(code) => inj
            .park_in(pid, code)
            .map_err(|e| failed("parking a thread in the code page", e))?,
        None => {
            let boot = super::ptrace::vdso_bootstrap(pid)
                .map_err(|e| failed("writing the vDSO's bootstrap", e))?;
            if let Some(boot) = boot {
                inj.park_in_vdso(pid, boot)
                    .map_err(|e| failed("parking a thread in the vDSO", e))?;
            }
        }
    }
    left.remove(&mut inj);
    inj.finish()
        .map_err(|e| failed("giving the thread its registers back", e))?;
    Ok(true)
}

/// What pagescope left in `pid` (see [`Leftover`]), from /proc; `None`
/// if the process is gone.
fn leftovers(proc: &Path, pid: u32) -> Result<Option<Leftover>> {
    let lines = match ProcDir::at(proc, pid).maps(&mut Vec::new()) {
        Ok(lines) => lines,
        Err(e) if e.is_gone() => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut left = Leftover {
        tgid: pid,
        movers: dead_movers(proc, pid),
        fds: userfaultfds(proc, pid).unwrap_or_default(),
        ..Leftover::default()
    };
    if let Some((store, index)) = store_in(&lines) {
        let guard_at = |start: u64| {
            lines
                .iter()
                .any(|l| l.start == start && l.end == start + PAGE && l.perms == "---p")
        };
        left.guarded = guard_at(store - PAGE) && guard_at(store + STORE_BYTES);
        left.store = Some(store);
        left.index = Some(index);
    }
    // By name, or (kernels without CONFIG_ANON_VMA_NAME) by what it holds.
    let code_name = format!("[anon:{MOVER_NAME}]");
    let holds_code = |start: u64| {
        let mut code = [0u8; super::ptrace::MOVER_CODE.len()];
        super::remote::read(pid, start, &mut code).is_ok() && code == super::ptrace::MOVER_CODE
    };
    left.code = lines
        .iter()
        .find(|l| {
            l.end - l.start == PAGE
                && (l.path == code_name
                    || l.path.is_empty() && l.perms == "r-xp" && holds_code(l.start))
        })
        .map(|l| l.start);
    Ok(Some(left))
}

/// Whether `pid` is gone, a zombie, or exiting (`PF_EXITING`, 0x4, in the
/// flags of its stat, field 9).
fn exiting(proc: &Path, pid: u32) -> bool {
    ProcDir::at(proc, pid)
        .stat(&mut Vec::new())
        .map_or(true, |s| s.is_exiting())
}

/// The movers of `pid` that died with their tracer: zombie children (of
/// any of its threads) whose clone had no exit signal, which no wait of
/// the program's own can reap. A child the program forked has one.
fn dead_movers(proc: &Path, pid: u32) -> Vec<u32> {
    let mut buf = Vec::new();
    ProcDir::at(proc, pid)
        .children()
        .into_iter()
        .filter(|&c| {
            ProcDir::at(proc, c)
                .stat(&mut buf)
                .is_ok_and(|s| s.state == 'Z' && s.exit_signal == Some(0))
        })
        .collect()
}

/// The descriptor numbers of the userfaultfds `pid` holds.
fn userfaultfds(proc: &Path, pid: u32) -> Result<Vec<i32>> {
    let dir = ProcDir::at(proc, pid);
    let fds = dir.fds().map_err(|e| Error::io(dir.file_path("fd"), e))?;
    Ok(fds
        .into_iter()
        .filter(|(_, target)| target.as_os_str() == "anon_inode:[userfaultfd]")
        .map(|(fd, _)| fd)
        .collect())
}

/// The userfaultfds of `pid` that are not its parent's: a child forked
/// before it got its own holds a copy of its parent's.
fn own_userfaultfds(proc: &Path, pid: u32) -> Result<Vec<i32>> {
    let parent = ProcDir::open(proc, pid)
        .and_then(|d| d.stat(&mut Vec::new()))
        .map(|s| s.ppid)
        .ok();
    let theirs = parent.map(|p| (p, userfaultfds(proc, p).unwrap_or_default()));
    Ok(userfaultfds(proc, pid)?
        .into_iter()
        .filter(|&fd| {
            theirs.as_ref().is_none_or(|(p, fds)| {
                !fds.iter()
                    .any(|&pf| super::ptrace::same_file(pid, fd, *p, pf).unwrap_or(false))
            })
        })
        .collect())
}

/// Releases `pid`. Errors say what is missing (no userfaultfd: nothing to
/// release; no store: not traced by pagescope).
pub fn release(proc: &Path, pid: u32) -> Result<Released> {
    let dir = ProcDir::at(proc, pid);
    let fd_dir = dir.file_path("fd");
    let uffds = userfaultfds(proc, pid)?;
    if uffds.is_empty() {
        return Err(Error::corrupt(
            &fd_dir,
            format!("process {pid} holds no userfaultfd: there is nothing to release"),
        ));
    }
    let Some((store, index)) = store_of(proc, pid)? else {
        return Err(Error::corrupt(
            dir.file_path("maps"),
            format!("process {pid} has no pagescope store: it was not traced by pagescope"),
        ));
    };
    let mut done = Released::default();
    let stored = match mm::stored_pages(proc, pid, store, index) {
        Ok(stored) => stored,
        Err(_) if moved_on(proc, pid, store, index) => return Ok(done),
        Err(e) => {
            let mem = dir.file_path("mem");
            return Err(Error::io(
                format!("{} (the store's index)", mem.display()),
                e,
            ));
        }
    };
    for fd in uffds {
        let ours = take_fd(pid, fd)?;
        let uffd = Uffd::new(ours);
        let mut left = stored.clone();
        let source = Source { pid, store };
        match put_back(&uffd, source, &mut left, &mut done) {
            Ok(()) => {}
            // Another descriptor of the process owns the pages.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => continue,
            // A descriptor inherited from a parent whose address space is
            // gone: nothing of this process is registered with it.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => continue,
            // The pages put back so far let it finish, or it was released
            // already through its parent's fork message and then exec'd (its
            // store is gone with the old image): nothing is left to put back.
            Err(_) if moved_on(proc, pid, store, index) => return Ok(done),
            Err(e) => return Err(Error::sys(format!("UFFDIO_COPY in {pid}"), e)),
        }
        let_go(proc, &uffd, source, &mut done)?;
    }
    Ok(done)
}

/// Ends a release through `uffd`, once the pages are back: unregisters
/// every range (which wakes every thread still waiting on a page), then
/// reads and follows the messages raised before that (a fork, an
/// munmap), in which a process would otherwise hang.
fn let_go(proc: &Path, uffd: &Uffd, source: Source, done: &mut Released) -> Result<()> {
    let pid = source.pid;
    unregister_all(proc, uffd, pid)?;
    let mut msgs = Vec::new();
    loop {
        msgs.clear();
        let read = uffd
            .wait_readable(QUIET_MS)
            .and_then(|()| uffd.read_msgs(&mut msgs));
        if !matches!(read, Ok(n) if n > 0) {
            break;
        }
        for &m in &msgs {
            follow(m, source, &mut Vec::new(), done)
                .map_err(|e| Error::sys(format!("UFFDIO_COPY in a child of {pid}"), e))?;
        }
    }
    Ok(())
}

/// The userfaultfds that the holders of killed pagescopes keep for the
/// trace being released (see [`super::holder`]): each is a fork's
/// descriptor, the only one its child had when pagescope died.
#[derive(Debug, Default)]
pub struct Held {
    uffds: Vec<HeldUffd>,
    holders: Vec<u32>,
}

#[derive(Debug)]
struct HeldUffd {
    uffd: Uffd,
    /// Messages read from it while looking for another's owner.
    stash: Vec<Msg>,
}

impl Held {
    /// The descriptors of the holders whose traced program is one of
    /// `order` (the processes of a release) or is gone.
    pub fn gather(proc: &Path, order: &[u32]) -> Held {
        let mut held = Held::default();
        for (holder, root) in super::holder::left(proc) {
            if root.is_some_and(|r| !order.contains(&r)) {
                continue;
            }
            // (A holder that ended meanwhile holds nothing.)
            for fd in userfaultfds(proc, holder).unwrap_or_default() {
                if let Ok(fd) = take_fd(holder, fd) {
                    held.uffds.push(HeldUffd {
                        uffd: Uffd::new(fd),
                        stash: Vec::new(),
                    });
                }
            }
            held.holders.push(holder);
        }
        held
    }

    /// Whether no holder was found.
    pub fn is_empty(&self) -> bool {
        self.holders.is_empty()
    }

    /// Puts back the pages that `pid`, a process with no userfaultfd of
    /// its own (a child forked just before pagescope died), is missing and
    /// waits for on a held descriptor; then unregisters it there. `parked`:
    /// pagescope left a thread of it parked, so nothing of it has run since
    /// the fork. `None`: nothing of `pid` is held.
    ///
    /// A missing page whose range is registered with a live userfaultfd
    /// can't be read through /proc/PID/mem (`EIO`, and no message):
    /// that tells a held page from one that nothing holds any more, without
    /// touching it. Which held descriptor it is comes from a probe: a
    /// thread of this process reads the page with `process_vm_readv`,
    /// which waits on it, and the fault message that names the thread is
    /// on the owner.
    pub fn release(&mut self, proc: &Path, pid: u32, parked: bool) -> Result<Option<Released>> {
        if self.uffds.is_empty() || !own_userfaultfds(proc, pid)?.is_empty() {
            return Ok(None);
        }
        let Some((store, index)) = store_of(proc, pid)? else {
            return Ok(None);
        };
        let mem_path = ProcDir::at(proc, pid).file_path("mem");
        let stored = mm::stored_pages(proc, pid, store, index)
            .map_err(|e| Error::io(format!("{} (the store's index)", mem_path.display()), e))?;
        let holes = missing(proc, pid, stored.iter().map(|&(_, page)| page))?;
        let Some(waiting) = stored
            .iter()
            .zip(holes)
            .filter(|(_, hole)| *hole)
            .map(|(&(slot, page), _)| (page, parked.then_some(store + slot * PAGE)))
            .find(|&(page, fill)| is_held(proc, pid, page, fill))
            .map(|(page, _)| page)
        else {
            return Ok(None);
        };
        let owner = self.owner(pid, waiting)?.ok_or_else(|| {
            Error::corrupt(
                &mem_path,
                format!(
                    "process {pid} waits for page {waiting:#x}, and no descriptor that \
                     pagescope's holder kept answers for it"
                ),
            )
        })?;
        let source = Source { pid, store };
        let mut done = Released::default();
        let held = &mut self.uffds[owner];
        let mut left = stored;
        for m in std::mem::take(&mut held.stash) {
            follow(m, source, &mut left, &mut done)
                .map_err(|e| Error::sys(format!("UFFDIO_COPY in a child of {pid}"), e))?;
        }
        put_back(&held.uffd, source, &mut left, &mut done)
            .map_err(|e| Error::sys(format!("UFFDIO_COPY in {pid}"), e))?;
        let_go(proc, &held.uffd, source, &mut done)?;
        Ok(Some(done))
    }

    /// Which held descriptor `page` of `pid` waits on (see
    /// [`Held::release`]). The probe thread goes on once the page is back.
    fn owner(&mut self, pid: u32, page: u64) -> Result<Option<usize>> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(rustix::thread::gettid().as_raw_pid() as u32);
            let mut byte = [0u8; 1];
            let _ = super::remote::read(pid, page, &mut byte);
        });
        let probe = rx.recv().map_err(|_| Error::Failed {
            what: "probe thread".into(),
            why: "it ended".into(),
        })?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut msgs = Vec::new();
        while std::time::Instant::now() < deadline {
            let mut polls: Vec<pagescope_sys::poll::PollFd> = self
                .uffds
                .iter()
                .map(|h| pagescope_sys::poll::PollFd {
                    fd: h.uffd.raw(),
                    events: pagescope_sys::poll::POLLIN,
                    revents: 0,
                })
                .collect();
            if poll(&mut polls, 100) < 0 {
                continue;
            }
            for (i, p) in polls.iter().enumerate() {
                if p.revents & pagescope_sys::poll::POLLIN == 0 {
                    continue;
                }
                msgs.clear();
                if self.uffds[i].uffd.read_msgs(&mut msgs).is_err() {
                    continue;
                }
                let mut found = false;
                for &m in &msgs {
                    match m {
                        Msg::Fault { tid, .. } if tid == probe => found = true,
                        m => self.uffds[i].stash.push(m),
                    }
                }
                if found {
                    return Ok(Some(i));
                }
            }
        }
        Ok(None)
    }

    /// Ends the holders: the last copy of each held descriptor closes,
    /// which unregisters whatever is still registered with it and wakes
    /// every thread waiting on it. Returns how many holders it ended, once
    /// they have exited (a second at most each).
    pub fn end(self) -> usize {
        use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
        let Held { uffds, holders } = self;
        drop(uffds);
        for &h in &holders {
            let Some(pidfd) =
                Pid::from_raw(h as i32).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok())
            else {
                continue;
            };
            if pidfd_send_signal(&pidfd, Signal::KILL).is_ok() {
                // A pidfd is readable once its process has exited.
                let mut p = [pagescope_sys::poll::PollFd {
                    fd: std::os::fd::AsRawFd::as_raw_fd(&pidfd),
                    events: pagescope_sys::poll::POLLIN,
                    revents: 0,
                }];
                poll(&mut p, 1000);
            }
        }
        holders.len()
    }
}

/// Whether `page`, missing from `pid`, is registered with a live
/// userfaultfd: /proc/PID/mem refuses it (`EIO`). If nothing holds it, a
/// parked process gets the page from `fill`, its slot in the store, in the
/// same write (as [`unpark`] would); any other process reads it as the
/// zero page it now is.
fn is_held(proc: &Path, pid: u32, page: u64, fill: Option<u64>) -> bool {
    use std::os::unix::fs::FileExt;
    let Ok(mem) = ProcDir::at(proc, pid).mem() else {
        return false;
    };
    let r = match fill {
        Some(slot) => {
            let mut buf = vec![0u8; PAGE as usize];
            super::remote::read(pid, slot, &mut buf).and_then(|()| mem.write_all_at(&buf, page))
        }
        None => mem.read_exact_at(&mut [0u8; 1], page),
    };
    matches!(r, Err(e) if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()))
}

/// How long the descriptor must stay silent after the unregistration
/// for a release to be over.
const QUIET_MS: i32 = 200;

/// Where the pages' data are: the store of the released process (a child
/// forked after the tracer died holds the same pages in its copy).
#[derive(Clone, Copy)]
struct Source {
    pid: u32,
    store: u64,
}

/// Copies every page of `left` (slot, address) back through `uffd`,
/// without waking anyone, reading and following the descriptor's messages
/// whenever the kernel refuses a copy for them (`EAGAIN`): an `munmap` or
/// `madvise` drops the pages of its range, an `mremap` moves them, a fork
/// gives a child the pages still away (put back through its descriptor,
/// which is then closed).
fn put_back(
    uffd: &Uffd,
    source: Source,
    left: &mut Vec<(u64, u64)>,
    done: &mut Released,
) -> std::io::Result<()> {
    let mut msgs = Vec::new();
    while let Some(&(slot, page)) = left.last() {
        match mm::copy_back(uffd, source.pid, source.store + slot * PAGE, page, false) {
            Ok(how) => {
                if how == mm::Restored::Copied {
                    done.copied += 1;
                }
                left.pop();
            }
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {
                msgs.clear();
                uffd.wait_readable(100)?;
                uffd.read_msgs(&mut msgs)?;
                for &m in &msgs {
                    follow(m, source, left, done)?;
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Applies one message to the pages still away.
fn follow(
    m: Msg,
    source: Source,
    left: &mut Vec<(u64, u64)>,
    done: &mut Released,
) -> std::io::Result<()> {
    match m {
        Msg::Remove { start, end } | Msg::Unmap { start, end } => {
            left.retain(|&(_, p)| p < start || p >= end);
        }
        Msg::Remap { from, to, len } => {
            for (_, p) in left.iter_mut() {
                if *p >= from && *p < from + len {
                    *p = *p - from + to;
                }
            }
        }
        Msg::Fork { fd } => {
            // The child's pages away are the parent's at the fork (copies
            // into the parent wait, refused, until this is read).
            let child = Uffd::new(uffd::own_fd(fd));
            let mut theirs = left.clone();
            match put_back(&child, source, &mut theirs, done) {
                // The child is gone already.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => {}
                r => r?,
            }
            // Closing it unregisters the child and wakes its threads.
        }
        Msg::Fault { .. } | Msg::Other(_) => {}
    }
    Ok(())
}

/// Whether `pid` no longer has the store found at (`store`, `index`): it
/// has exited, or it exec'd and the store went with its old image.
fn moved_on(proc: &Path, pid: u32, store: u64, index: u64) -> bool {
    exited(proc, pid) || !store_of(proc, pid).is_ok_and(|s| s == Some((store, index)))
}

/// Whether `pid` has exited (gone, or a zombie).
fn exited(proc: &Path, pid: u32) -> bool {
    ProcDir::at(proc, pid)
        .stat(&mut Vec::new())
        .map_or(true, |s| s.state == 'Z')
}
