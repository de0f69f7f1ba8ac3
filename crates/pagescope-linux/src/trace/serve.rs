//! Serving one message of a userfaultfd: a fault (the page comes back
//! from the store, is filled, or is mapped again; the reference is
//! logged and the page joins the pool), or an event that changes the
//! address space (fork, remap, remove, unmap).

use crate::procfs::ProcDir;
use crate::trace::counts::Counts;
use crate::trace::evict::shrink_pool;
use crate::trace::hooks::die_here_for_tests;
use crate::trace::mm::{self, Restored, PAGE};
use crate::trace::os::{now_mono, sys};
use crate::trace::sink::{Touch, Touched};
use crate::trace::state::{anon_kind, maps_of, MapRange, PendingFork, State};
use crate::trace::uffd::{self, Msg, Uffd};
use pagescope_core::sample;
use pagescope_core::trace::MappingKind;
use pagescope_core::Result;
use std::sync::Arc;

fn lookup_mapping(st: &mut State, key: u32, addr: u64) -> Result<u32> {
    let space = &st.spaces[&key];
    if let Some((_, r)) = space.maps.range(..=addr).next_back() {
        if addr < r.end {
            return Ok(r.id);
        }
    }
    // Not known (a stack that grew, a mapping that grew in place): ask
    // the kernel which VMA it is.
    let pid = space.mm.pid;
    let lines = maps_of(&space.mm.proc, pid)?;
    let Some(line) = lines.iter().find(|l| l.start <= addr && addr < l.end) else {
        return Ok(u32::MAX);
    };
    let shared = line.perms.ends_with('s');
    let kind = if shared {
        MappingKind::Shared
    } else {
        anon_kind(line).unwrap_or(MappingKind::Anonymous)
    };
    let id = st.new_mapping(pid, line, kind, true)?;
    let space = st.spaces.get_mut(&key).expect("space exists");
    space
        .maps
        .insert(line.start, MapRange::of(line, id, shared));
    Ok(id)
}

/// Logs a reference to the sink, with its mapping's id if the sink names
/// mappings.
fn log_ref(
    st: &mut State,
    counts: &Counts,
    key: u32,
    page: u64,
    tid: u32,
    write: bool,
    how: Touch,
) -> Result<()> {
    let pid = st.spaces[&key].mm.pid;
    let mapping = if st.sink.names_mappings() {
        lookup_mapping(st, key, page)?
    } else {
        u32::MAX
    };
    let touched = Touched {
        key,
        pid,
        tid,
        page,
        write,
        how,
        mapping,
        at: st.fault_at,
    };
    st.sink.reference(touched, counts)
}

/// Pages per group of the sample ([`sample::GROUP`]).
const SAMPLE_GROUP: u64 = sample::GROUP;

/// Serves one fault; `Ok(false)`: not now (the address space is
/// changing), try again after the pending events.
#[allow(clippy::too_many_arguments)]
fn on_fault(
    st: &mut State,
    counts: &Counts,
    key: u32,
    address: u64,
    write: bool,
    wp: bool,
    minor: bool,
    tid: u32,
) -> Result<bool> {
    st.fault_at = now_mono();
    let page = address & !(PAGE - 1);
    let uffd = st.spaces[&key].mm.uffd.clone();
    if minor {
        return on_minor_fault(st, counts, key, page, write, tid);
    }
    let in_pool = st.pool.writable((key, page));
    if wp {
        match in_pool {
            Some(true) => {
                // Another thread's write already opened it (clearing the
                // protection again is harmless, and wakes).
                match uffd.write_protect(page, PAGE, false) {
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {
                        return Ok(false)
                    }
                    r => r.map_err(|e| sys("UFFDIO_WRITEPROTECT", e))?,
                }
            }
            Some(false) => {
                match uffd.write_protect(page, PAGE, false) {
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {
                        return Ok(false)
                    }
                    r => r.map_err(|e| sys("UFFDIO_WRITEPROTECT", e))?,
                }
                log_ref(st, counts, key, page, tid, true, Touch::Write)?;
                st.pool.opened((key, page));
            }
            None if st.spaces[&key].mm.evicted.contains_key(&page)
                && !st
                    .spaces
                    .get_mut(&key)
                    .expect("space exists")
                    .mm
                    .keep_if_present(page)
                    .map_err(|e| sys("pagemap", e))? =>
            {
                // Evicted since the write faulted (the copy method
                // protects a page before it copies it): the thread touches
                // it again, takes a missing fault, and is logged then.
                let _ = uffd.wake(page, PAGE);
            }
            None => {
                // Write-protected but not in the pool: a page that was
                // resident when tracing began (or after fork). Log it and
                // let it in.
                match uffd.write_protect(page, PAGE, false) {
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {
                        return Ok(false)
                    }
                    r => r.map_err(|e| sys("UFFDIO_WRITEPROTECT", e))?,
                }
                log_ref(st, counts, key, page, tid, true, Touch::Write)?;
                st.pool.insert((key, page), true);
                shrink_pool(st, counts)?;
            }
        }
        return Ok(true);
    }
    let space = st.spaces.get_mut(&key).expect("space exists");
    let mut evicted = true;
    // Copied back with the wake: the index entry is cleared after it
    // ([`mm::Mm::bring_back`]).
    let back = match space.mm.bring_back(page, !write, true) {
        Ok(b) => b,
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {
            return Ok(false)
        }
        Err(e) => return Err(sys("UFFDIO_MOVE (bringing a page back)", e)),
    };
    match back {
        Some(Restored::Copied) => {}
        None if outside_sample(st, page) => {
            return fill_outside_sample(st, key, page);
        }
        Some(Restored::Nothing) | None => {
            evicted = false;
            // First touch: a zero page, write-protected for a read so that
            // the first write is seen. A page that is already there was
            // filled for another thread's fault: not a new reference.
            match mm::copy_in(&uffd, page, &st.zero[..], !write, false) {
                Ok(mm::Fill::Filled) => {}
                Ok(mm::Fill::Exists) => {
                    let _ = uffd.wake(page, PAGE);
                    return Ok(true);
                }
                Ok(mm::Fill::Gone) => {
                    st.pool.remove((key, page));
                    return Ok(true);
                }
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {
                    return Ok(false)
                }
                Err(e) => return Err(sys("UFFDIO_COPY", e)),
            }
        }
    }
    let how = if evicted { Touch::Back } else { Touch::First };
    log_ref(st, counts, key, page, tid, write, how)?;
    st.pool.insert((key, page), write);
    shrink_pool(st, counts)?;
    Ok(true)
}

/// Whether the sink leaves `page` out ([`RefSink::watches`]: never when
/// tracing).
fn outside_sample(st: &State, page: u64) -> bool {
    !st.sink.watches(page)
}

/// The first touch of a page outside the sample: the page is
/// filled (a zero page) and not logged, since the sample's first touches
/// stand for it (each counts `1 / fraction`). Then every other missing
/// page of its sample group ([`SAMPLE_GROUP`]) in its private mapping
/// that is outside the sample and not in the store gets the zero page too
/// (`UFFDIO_ZEROPAGE`, read-only: a write copies it in the kernel, with
/// no fault of the descriptor), so that the group's other first touches
/// cost nothing: a first pass over 4 GiB takes a fault per 4 MiB and one
/// per page of the sample, instead of one per page. `Ok(false)`: not now
/// (the address space is changing).
fn fill_outside_sample(st: &mut State, key: u32, page: u64) -> Result<bool> {
    let space = &st.spaces[&key];
    let uffd = space.mm.uffd.clone();
    match mm::copy_in(&uffd, page, &st.zero[..], false, false) {
        Ok(mm::Fill::Filled) => {}
        // Filled for another thread's fault, or by a group's filling.
        Ok(mm::Fill::Exists) => {
            let _ = uffd.wake(page, PAGE);
            return Ok(true);
        }
        Ok(mm::Fill::Gone) => return Ok(true),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error()) => {
            return Ok(false)
        }
        Err(e) => return Err(sys("UFFDIO_COPY", e)),
    }
    let Some((&start, range)) = space.maps.range(..=page).next_back() else {
        return Ok(true);
    };
    // Shared memory is left alone: its zero pages would be page-cache
    // pages, memory the program never asked for.
    if page >= range.end || range.shared {
        return Ok(true);
    }
    let span = SAMPLE_GROUP * PAGE;
    let lo = (page / span * span).max(start);
    let hi = (page / span * span + span).min(range.end);
    // The rest is an economy: the thread runs already, and if its process
    // is gone meanwhile, there is nothing to fill.
    let Ok(mut reader) = ProcDir::at(&space.mm.proc, space.mm.mem_pid()).pagemap_reader(PAGE)
    else {
        return Ok(true);
    };
    let mut holes: Vec<(u64, u64)> = Vec::new();
    let read = reader.for_each(lo, hi, |addr, e| {
        if e.is_present() || st.sink.watches(addr) || space.mm.evicted.contains_key(&addr) {
            return;
        }
        match holes.last_mut() {
            Some(h) if h.1 == addr => h.1 += PAGE,
            _ => holes.push((addr, addr + PAGE)),
        }
    });
    if read.is_err() {
        return Ok(true);
    }
    for (mut at, end) in holes {
        while at < end {
            match uffd.zeropage(at, end - at) {
                // Stopped at a page that is there (another thread's,
                // filled since pagemap was read): step over it.
                Ok(n) if n < end - at => at += n + PAGE,
                Ok(_) => break,
                // The range is changing (an event is unread) or gone:
                // its pages fault one by one instead.
                Err(_) => break,
            }
        }
    }
    Ok(true)
}

/// Serves a minor fault: a page of shared memory that is in the page
/// cache but not mapped here (it left the pool, or another process put it
/// there). `UFFDIO_CONTINUE` maps it, write-protected for a read so that
/// the first write is seen.
fn on_minor_fault(
    st: &mut State,
    counts: &Counts,
    key: u32,
    page: u64,
    write: bool,
    tid: u32,
) -> Result<bool> {
    let uffd = st.spaces[&key].mm.uffd.clone();
    let wp = !write;
    let errno = |e: &std::io::Error| e.raw_os_error().unwrap_or(0);
    // Before Linux 6.4 the page is mapped without waking the thread, then
    // protected, then the thread is woken: another thread of the process
    // could write to it unseen in between.
    let split = wp && !st.continue_wp;
    match uffd.continue_page(page, PAGE, wp && !split, split) {
        Ok(()) => {}
        Err(e) if errno(&e) == rustix::io::Errno::INVAL.raw_os_error() && wp && st.continue_wp => {
            st.continue_wp = false;
            return on_minor_fault(st, counts, key, page, write, tid);
        }
        Err(e) if errno(&e) == rustix::io::Errno::AGAIN.raw_os_error() => return Ok(false),
        // Mapped already (another thread's fault), or gone from the page
        // cache (a hole punched: the retry is a missing fault) or from the
        // address space: the thread retries.
        Err(e)
            if [
                rustix::io::Errno::EXIST,
                rustix::io::Errno::FAULT,
                rustix::io::Errno::NOENT,
            ]
            .map(rustix::io::Errno::raw_os_error)
            .contains(&errno(&e)) =>
        {
            let _ = uffd.wake(page, PAGE);
            return Ok(true);
        }
        Err(e) => return Err(sys("UFFDIO_CONTINUE", e)),
    }
    if split {
        let r = uffd.write_protect(page, PAGE, true);
        uffd.wake(page, PAGE).map_err(|e| sys("UFFDIO_WAKE", e))?;
        r.map_err(|e| sys("UFFDIO_WRITEPROTECT", e))?;
    }
    log_ref(st, counts, key, page, tid, write, Touch::Back)?;
    st.pool.insert((key, page), write);
    shrink_pool(st, counts)?;
    Ok(true)
}

fn drop_range(st: &mut State, key: u32, start: u64, end: u64, unmap: bool) -> Result<()> {
    let Some(space) = st.spaces.get_mut(&key) else {
        return Ok(());
    };
    if space.mm.store.contains(start) {
        return Ok(()); // the tracer's own madvise of dead slots
    }
    space
        .mm
        .forget(start, end)
        .map_err(|e| sys("index write", e))?;
    if unmap {
        let inside: Vec<u64> = space
            .maps
            .range(start..end)
            .filter(|(_, r)| r.end <= end)
            .map(|(&s, _)| s)
            .collect();
        for s in inside {
            space.maps.remove(&s);
        }
    }
    st.pool.remove_range(key, start, end);
    st.sink.forget(key, start, end);
    Ok(())
}

/// Serves one message of space `key`'s userfaultfd: a fault, or an event
/// that changes the address space. `Ok(false)`: a fault that can't be
/// served now (see [`on_fault`]).
pub(super) fn on_msg(counts: &Counts, st: &mut State, key: u32, msg: Msg) -> Result<bool> {
    match msg {
        Msg::Fault {
            address,
            write,
            wp,
            minor,
            tid,
        } => on_fault(st, counts, key, address, write, wp, minor, tid),
        other => on_event(st, key, other).map(|()| true),
    }
}

fn on_event(st: &mut State, key: u32, msg: Msg) -> Result<()> {
    match msg {
        Msg::Fault { .. } => Ok(()),
        Msg::Fork { fd } => {
            let space = &st.spaces[&key];
            let pending = PendingFork {
                uffd: Arc::new(Uffd::new(uffd::own_fd(fd))),
                store: space.mm.store.clone(),
                maps: space.maps.clone(),
                heap: space.heap,
            };
            st.forks.entry(key).or_default().push_back(pending);
            die_here_for_tests("fork-message");
            Ok(())
        }
        Msg::Remap { from, to, len } => {
            let Some(space) = st.spaces.get_mut(&key) else {
                return Ok(());
            };
            space
                .mm
                .remap(from, to, len)
                .map_err(|e| sys("index write", e))?;
            if let Some((_, r)) = space.maps.range(..=from).next_back().map(|(&s, r)| (s, *r)) {
                space.maps.insert(to, MapRange { end: to + len, ..r });
            }
            st.pool.remap(key, from, to, len);
            Ok(())
        }
        Msg::Remove { start, end } => drop_range(st, key, start, end, false),
        Msg::Unmap { start, end } => drop_range(st, key, start, end, true),
        Msg::Other(_) => Ok(()),
    }
}
