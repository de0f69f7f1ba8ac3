//! Eviction: taking pages out of the program, as the pool's replacement
//! asks (a trace), at a boundary (a sampler), or when a range is
//! registered (every page already there). Runs of neighbouring pages go
//! with one call each, and a space's runs in one batch of its mover.

use crate::procfs::ProcDir;
use crate::trace::counts::Counts;
use crate::trace::mm::{Mm, PAGE};
use crate::trace::os::sys;
use crate::trace::state::State;
use pagescope_core::evict::{self, Extent, Page};
use pagescope_core::trace::EvictMethod;
use pagescope_core::{Error, Result};
use std::collections::HashMap;
use std::sync::atomic::Ordering;

/// Stale copies in store slots before they are dropped (16 MiB).
const DEAD_BATCH: usize = 4096;

/// Evicts `pages` (sorted) as [`evict::plan`] plans it: runs of
/// neighbours in one mapping with one call each, and with the moving
/// method a space's private runs in one batch of its mover. Returns the
/// pages that left, and those that can't leave now (the address space is
/// changing: try later); the others can't leave at all (locked, or no
/// mover), and are counted so.
#[allow(clippy::type_complexity)]
fn evict_pages(st: &mut State, counts: &Counts, pages: &[Page]) -> Result<(Vec<Page>, Vec<Page>)> {
    let runs = evict::plan(pages, PAGE, |key, start| {
        let space = st.spaces.get(&key)?;
        Some(space.maps.range(..=start).next_back().map(|(_, r)| Extent {
            end: r.end,
            shared: r.shared,
        }))
    });
    // The moving method moves a space's private runs in one batch of its
    // mover: one round trip for the lot, where a run alone costs one.
    let mut moved_in_batch: HashMap<(u32, u64), usize> = HashMap::new();
    for evict::Batch { key, runs: private } in evict::batches(&runs) {
        if let Some(space) = st.spaces.get_mut(&key) {
            if space.mm.method == EvictMethod::Move && !private.is_empty() {
                match space.mm.evict_runs(&private) {
                    Ok(moved) => {
                        for (&(start, _), m) in private.iter().zip(moved) {
                            moved_in_batch.insert((key, start), m as usize);
                        }
                    }
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => {}
                    Err(e) => return Err(sys("UFFDIO_MOVE (evicting pages)", e)),
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut later = Vec::new();
    for run in runs {
        let (key, start) = (run.key, run.start);
        let Some(space) = st.spaces.get_mut(&key) else {
            continue;
        };
        let n = run.len() as u64;
        let run_pages = &pages[run.pages];
        if run.shared {
            // Shared memory stays in the page cache: only this mapping of
            // it goes, and the next touch is a minor fault.
            match space.mm.unmap_shared(start, n) {
                Ok(true) => out.extend_from_slice(run_pages),
                Ok(false) => {
                    counts.unevictable.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => {}
                Err(e) => return Err(sys("madvise (evicting shared memory)", e)),
            }
            continue;
        }
        let moved = if let Some(&m) = moved_in_batch.get(&(key, start)) {
            m
        } else if n > 1 {
            match space.mm.evict_run(start, n) {
                Ok(m) => m as usize,
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => 0,
                Err(e) => return Err(sys("UFFDIO_MOVE (evicting pages)", e)),
            }
        } else {
            0
        };
        out.extend_from_slice(&run_pages[..moved]);
        // The rest one by one: the page that stopped the run may be one
        // the kernel won't move, and the others may still go.
        for &(_, page) in &run_pages[moved..] {
            match space.mm.evict(page) {
                Ok(Some(true)) => out.push((key, page)),
                // Can't go (locked, or no mover): it stays, and
                // its next touches go unseen until it can.
                Ok(Some(false)) => {
                    counts.unevictable.fetch_add(1, Ordering::Relaxed);
                }
                Ok(None) => later.push((key, page)),
                // The process is exiting (its mover or memory already gone).
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => {}
                Err(e) => return Err(sys("UFFDIO_MOVE (evicting a page)", e)),
            }
        }
    }
    counts
        .evictions
        .fetch_add(out.len() as u64, Ordering::Relaxed);
    Ok((out, later))
}

/// Drops the stale slot copies of the spaces `keys` that have gathered
/// at least `at_least`.
pub(super) fn reclaim_dead(
    st: &mut State,
    keys: impl IntoIterator<Item = u32>,
    at_least: usize,
) -> Result<()> {
    for key in keys {
        if let Some(space) = st.spaces.get_mut(&key) {
            match space.mm.reclaim_dead(at_least) {
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => {}
                r => r.map_err(|e| sys("madvise (freeing store slots)", e))?,
            }
        }
    }
    Ok(())
}

/// Runs the pool's replacement once it is over its size: its oldest
/// pages leave ([`evict::Pool::shrink`]).
pub(super) fn shrink_pool(st: &mut State, counts: &Counts) -> Result<()> {
    let shrink = st.pool.shrink();
    let pages = shrink.pages();
    if pages.is_empty() {
        return Ok(());
    }
    let (_, later) = evict_pages(st, counts, &pages)?;
    // The address space is changing (an event not read yet): those stay
    // at the head of the pool, and are tried at the next fault.
    st.pool.keep(&shrink, &later);
    let mut keys: Vec<u32> = pages.iter().map(|p| p.0).collect();
    keys.dedup();
    reclaim_dead(st, keys, DEAD_BATCH)
}

/// Moves the pool's pages that the sink watches out of the program, so
/// that their next touch faults: a boundary of `record`'s sampler
/// ([`super::sampler`]), whose fraction is set. Pages that can't leave
/// now are tried at the next boundary.
pub(super) fn evict_watched(st: &mut State, counts: &Counts) -> Result<()> {
    let pages = st.pool.pages_where(|(_, p)| st.sink.watches(p));
    let (out, _) = evict_pages(st, counts, &pages)?;
    for &page in &out {
        st.pool.remove(page);
    }
    st.sink.evicted(&out);
    let keys: Vec<u32> = st.spaces.keys().copied().collect();
    reclaim_dead(st, keys, 1)
}

/// Moves every page of `[start, end)` that is resident or in swap and
/// `watched` into the store (of shared memory: unmaps it
/// here), runs of neighbours together: a page in swap moves as its swap
/// entry (or, by copy, is read in), so that its next touch faults as any
/// other's. Returns the pages moved.
pub(super) fn empty_range(
    mm: &mut Mm,
    start: u64,
    end: u64,
    shared: bool,
    watched: impl Fn(u64) -> bool,
) -> Result<Vec<u64>> {
    let dir = ProcDir::at(&mm.proc, mm.pid);
    let mut reader = dir
        .pagemap_reader(PAGE)
        .map_err(|e| Error::io(dir.file_path("pagemap"), e))?;
    let mut present = Vec::new();
    let kept = mm.kept();
    reader.for_each(start, end, |addr, e| {
        if (e.is_present() || e.is_in_swap()) && watched(addr) && !(kept.0..kept.1).contains(&addr)
        {
            present.push(addr);
        }
    })?;
    let what = |e| sys("evicting the pages of a new mapping", e);
    let runs = evict::neighbour_runs(&present, PAGE, evict::MAX_RUN);
    if shared {
        for r in runs {
            mm.unmap_shared(present[r.start], r.len() as u64)
                .map_err(what)?;
        }
        return Ok(present);
    }
    // The moving method moves them all in one batch of the mover (a
    // sampled range is mostly runs of one page).
    let starts: Vec<(u64, u64)> = runs
        .iter()
        .map(|r| (present[r.start], r.len() as u64))
        .collect();
    let batched = mm.evict_runs(&starts).map_err(what)?;
    for (r, done) in runs.into_iter().zip(batched) {
        let run = &present[r];
        let moved = if done > 0 || mm.method == EvictMethod::Move {
            done as usize
        } else if run.len() > 1 {
            mm.evict_run(run[0], run.len() as u64).map_err(what)? as usize
        } else {
            0
        };
        for &page in &run[moved..] {
            mm.evict(page).map_err(what)?;
        }
    }
    Ok(present)
}
