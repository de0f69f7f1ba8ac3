//! Dropping pages in the mover: the stale copies that pages copied back
//! leave in their slots, and pages that leave by `madvise`.
//!
//! A `madvise(MADV_DONTNEED)` of a registered range waits until the
//! tracer reads the `UFFD_EVENT_REMOVE` it raises, tens of microseconds a
//! call here (the mover sleeps, the fault thread reads, the mover is
//! woken). In the moving method the store is registered, and the stale
//! copies of a reclaim lie in hundreds of short runs; so each run is moved
//! (`UFFDIO_MOVE`, which raises no event) into the trash, a range of the
//! store never used for slots, and the trash is dropped with one
//! `madvise`: one event a reclaim, not one a run, all in one batch of the
//! mover.

use super::{batch, Mm, BATCH_ARGS, BATCH_MAX, MOVE_ARG, PAGE, SCRATCH_BYTES, TRASH, TRASH_SLOTS};
use crate::trace::uffd::{Msg, MOVE, MOVE_MODE_ALLOW_SRC_HOLES, MOVE_MODE_DONTWAKE};
use pagescope_core::trace::EvictMethod;
use std::io;

/// A batch's `UFFDIO_MOVE` arguments fit the scratch area.
const _: () = assert!(BATCH_ARGS + (BATCH_MAX * MOVE_ARG) as u64 <= SCRATCH_BYTES);

impl Mm {
    /// Runs one `madvise(MADV_DONTNEED)` per range `(start, len)`, all in
    /// one batch of the mover, and returns their results. If the ranges
    /// are `registered`, each call waits until the tracer reads the
    /// `UFFD_EVENT_REMOVE` it raises (one per VMA); those are read here
    /// and dropped, every other message is kept in `stash`.
    pub(super) fn drop_ranges(
        &mut self,
        ranges: &[(u64, u64)],
        registered: bool,
    ) -> io::Result<Vec<i64>> {
        let mut results = Vec::with_capacity(ranges.len());
        for chunk in ranges.chunks(BATCH_MAX) {
            results.extend(self.calls_then_drop(&[], &[], chunk, registered)?);
        }
        Ok(results)
    }

    /// Runs `calls` (whose arguments `args` go at [`BATCH_ARGS`]), then
    /// one `madvise(MADV_DONTNEED)` per range of `ranges`, as one batch
    /// of the mover (at most [`BATCH_MAX`] calls in all); returns every
    /// call's result, `calls` first. The events of the ranges are read
    /// as in [`Mm::drop_ranges`].
    fn calls_then_drop(
        &mut self,
        calls: &[(u64, [u64; 6])],
        args: &[u8],
        ranges: &[(u64, u64)],
        registered: bool,
    ) -> io::Result<Vec<i64>> {
        let Mm {
            mover, uffd, stash, ..
        } = self;
        let Some((m, mover)) = mover.as_ref().and_then(|m| Some((m, m.mover.as_ref()?))) else {
            return Ok(vec![
                -i64::from(rustix::io::Errno::NODEV.raw_os_error());
                calls.len() + ranges.len()
            ]);
        };
        let total: u64 = ranges.iter().map(|r| r.1).sum();
        let mut ours: Vec<(u64, u64)> = Vec::new();
        let mut covered = 0;
        let mut msgs = Vec::new();
        let mut idle = || -> io::Result<bool> {
            if !registered {
                return Ok(true);
            }
            uffd.wait_readable(1)?;
            msgs.clear();
            uffd.read_msgs(&mut msgs)?;
            for &msg in &msgs {
                match msg {
                    // A program's own madvise of the same pages
                    // overlaps one already seen, and is kept.
                    Msg::Remove { start: a, end: b }
                        if ranges.iter().any(|&(s, l)| a >= s && b <= s + l)
                            && !ours.iter().any(|&(c, d)| a < d && c < b) =>
                    {
                        ours.push((a, b));
                        covered += b - a;
                    }
                    other => stash.push(other),
                }
            }
            Ok(covered >= total)
        };
        let all: Vec<(u64, [u64; 6])> = calls
            .iter()
            .copied()
            .chain(ranges.iter().map(|&(start, len)| {
                (
                    28, /* madvise */
                    [start, len, 4 /* MADV_DONTNEED */, 0, 0, 0],
                )
            }))
            .collect();
        batch(m, mover, &all, args, &mut idle)
    }

    /// Drops the stale copies in the slots of pages that came back, once
    /// there are `at_least` of them, so that the slots can be used again.
    /// In the moving method each run of neighbouring slots is moved into
    /// the trash and the trash dropped (the module's documentation);
    /// a run that does not move whole, and every run in the copying
    /// method (whose store is not registered), is dropped where it is
    /// with a `madvise` of its own. Nothing without a mover (a forked
    /// child's space).
    pub fn reclaim_dead(&mut self, at_least: usize) -> io::Result<()> {
        if self.dead.len() < at_least.max(1) || !self.has_mover() {
            return Ok(());
        }
        let mut dead = std::mem::take(&mut self.dead);
        dead.sort_unstable();
        dead.dedup();
        // Runs of neighbouring slots, as (first slot, slots).
        let mut runs = Vec::new();
        let mut i = 0;
        while i < dead.len() {
            let mut j = i + 1;
            while j < dead.len() && dead[j] == dead[j - 1] + 1 {
                j += 1;
            }
            runs.push((dead[i], (j - i) as u64));
            i = j;
        }
        let in_place = if self.method == EvictMethod::Move {
            match self.reclaim_through_trash(&runs) {
                Ok(left) => left,
                Err(e) => {
                    self.dead = dead;
                    return Err(e);
                }
            }
        } else {
            runs.clone()
        };
        let ranges: Vec<(u64, u64)> = in_place
            .iter()
            .map(|&(first, n)| (self.store.addr(first), n * PAGE))
            .collect();
        let results = self.drop_ranges(&ranges, self.method == EvictMethod::Move)?;
        if let Some((k, &r)) = results.iter().enumerate().find(|(_, &r)| r < 0) {
            // That run and those after it stay dead, to be tried again;
            // the others are free.
            let mut again: Vec<u64> = in_place[k..]
                .iter()
                .flat_map(|&(first, n)| first..first + n)
                .collect();
            again.sort_unstable();
            self.store
                .free
                .extend(dead.iter().filter(|s| again.binary_search(s).is_err()));
            self.dead = again;
            return Err(io::Error::from_raw_os_error(-r as i32));
        }
        self.store.free.extend_from_slice(&dead);
        Ok(())
    }

    /// Moves the runs `(first slot, slots)` into the trash, as many at a
    /// time as the trash and a batch hold, and drops the trash after each
    /// time; returns the runs that did not move whole (a page shared with
    /// a child since a fork, which `UFFDIO_MOVE` refuses; a run longer
    /// than the trash), to be dropped where they are. The part of a run
    /// that moved is empty already.
    fn reclaim_through_trash(&mut self, runs: &[(u64, u64)]) -> io::Result<Vec<(u64, u64)>> {
        let Some(m) = self.mover.as_ref() else {
            return Ok(runs.to_vec());
        };
        let (fd, scratch) = (m.fd, m.scratch);
        let trash = self.store.addr(TRASH);
        let mut left = Vec::new();
        let mut i = 0;
        while i < runs.len() {
            let mut calls = Vec::new();
            let mut args = Vec::new();
            let mut moving = Vec::new();
            let mut used = 0;
            // One call of the batch is the trash's madvise.
            while i < runs.len() && calls.len() < BATCH_MAX - 1 {
                let (first, n) = runs[i];
                if n > TRASH_SLOTS {
                    left.push(runs[i]);
                    i += 1;
                    continue;
                }
                if used + n > TRASH_SLOTS {
                    break;
                }
                let mut a = [0u8; MOVE_ARG];
                a[0..8].copy_from_slice(&(trash + used * PAGE).to_ne_bytes());
                a[8..16].copy_from_slice(&self.store.addr(first).to_ne_bytes());
                a[16..24].copy_from_slice(&(n * PAGE).to_ne_bytes());
                a[24..32].copy_from_slice(
                    &(MOVE_MODE_DONTWAKE | MOVE_MODE_ALLOW_SRC_HOLES).to_ne_bytes(),
                );
                let arg = scratch + BATCH_ARGS + args.len() as u64;
                args.extend_from_slice(&a);
                calls.push((16 /* ioctl */, [fd as u64, MOVE, arg, 0, 0, 0]));
                moving.push(runs[i]);
                used += n;
                i += 1;
            }
            if calls.is_empty() {
                continue;
            }
            let results = self.calls_then_drop(&calls, &args, &[(trash, used * PAGE)], true)?;
            let dropped = results[calls.len()];
            if dropped < 0 {
                // The trash holds what moved: the next move into it would
                // fail, so this is the end of the trace's reclaiming.
                return Err(io::Error::from_raw_os_error(-dropped as i32));
            }
            for (k, &run) in moving.iter().enumerate() {
                if results[k] < 0 {
                    left.push(run);
                }
            }
        }
        Ok(left)
    }
}
