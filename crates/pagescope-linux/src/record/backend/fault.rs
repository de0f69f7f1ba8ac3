//! The `fault` backend: userfaultfd, exact per page, with writes, for a
//! command pagescope launches or one running process it attaches.
//!
//! The program runs under the tracer of `pagescope trace` with a pool
//! that never fills: every private anonymous or shared-memory page it
//! touches faults once,
//! comes in, and stays. At each boundary the recorder takes the pages that
//! faulted in since the last one (the referenced pages, with read or
//! write: a page brought back for a read is write-protected, so its first
//! write faults too), reads their frames from pagemap, and has them moved
//! out again (`UFFDIO_MOVE` into the store inside the program, no copy),
//! so that their next touch faults in the next interval. With
//! `--sample FRACTION` only the pages of a fixed random sample of that
//! fraction (the same share of every 4 MiB: see the tracer's `in_sample`)
//! are moved out, and each of them
//! that comes back counts `1 / FRACTION` pages. First touches are sampled
//! too: a page of the sample counts `1 / FRACTION` when first touched; a
//! page outside it is filled and not counted, and the other untouched
//! pages of its 4 MiB outside the sample get the zero page at once, so a
//! first pass over a large buffer costs about a fault per 4 MiB. The
//! sample holds from the start: of the pages a program already has when it is attached (or a
//! mapping is registered), only the sample's are moved out.
//!
//! Regular-file mappings (program text, mapped files) can't be trapped
//! this way and are not counted (the header says so).

use crate::record::pages::{pages_of, Page, ProcessTally};
use crate::record::probe::{Follow, Followed, Launched, Probe};
use crate::trace::{Counts as TraceCounts, Sampler, Target};
use crate::Root;
use pagescope_core::record::{Backend, Granularity, Interval, WriteSource};
use pagescope_core::Result;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// See the module documentation.
#[derive(Debug)]
pub struct Fault {
    root: Root,
    page_size: u64,
    block: u64,
    /// The fraction of the resident pages moved out at each boundary.
    fraction: f64,
    sampler: Option<Sampler>,
    /// What the tracer logged after the last boundary when the program
    /// ended (taken as the tracer was stopped), for the last interval.
    last: Vec<crate::trace::Sampled>,
    /// When the last boundary held the faults (see [`Probe::cut`]).
    cut: Option<Instant>,
    buf: Vec<u8>,
}

impl Fault {
    /// A backend that moves out `fraction` (in (0, 1]) of the resident
    /// pages at each boundary.
    pub fn new(root: &Root, page_size: u64, block: u64, fraction: f64) -> Fault {
        Fault {
            root: root.clone(),
            page_size,
            block,
            fraction,
            sampler: None,
            last: Vec::new(),
            cut: None,
            buf: Vec::new(),
        }
    }
}

/// The backend, as the recorder holds it.
pub fn probe(root: &Root, page_size: u64, block: u64, fraction: f64) -> Result<Box<dyn Probe>> {
    Ok(Box::new(Fault::new(root, page_size, block, fraction)))
}

impl Probe for Fault {
    fn backend(&self) -> Backend {
        Backend::Fault
    }

    fn granularity(&self) -> Granularity {
        Granularity::Page
    }

    fn writes(&self) -> WriteSource {
        WriteSource::Backend
    }

    fn needs_freeze(&self) -> bool {
        false
    }

    fn coverage_note(&self) -> Option<String> {
        Some(
            if crate::trace::shmem_supported() {
                "the fault backend traps private anonymous memory (heap, stacks, anonymous \
                 mappings) and shared memory: references to mapped files and program text \
                 are not counted"
            } else {
                "the fault backend traps private anonymous memory (heap, stacks, anonymous \
                 mappings): references to mapped files, program text and shared memory (which \
                 needs Linux 5.19 here) are not counted"
            }
            .into(),
        )
    }

    fn follower(&mut self) -> Option<&mut dyn Follow> {
        Some(self)
    }

    fn reset(&mut self, _pids: &[u32]) -> Result<()> {
        // Every page of the sample starts out of the program (the tracer
        // empties each mapping it registers of them), and every page not
        // there yet faults on its first touch.
        Ok(())
    }

    fn collect(&mut self, _pids: &[u32], out: &mut Interval) -> Result<()> {
        let sampler = self.sampler.as_ref();
        // The interval ends once faults are held: a fault served later
        // comes in the next one.
        let mut refs = match sampler {
            Some(s) => {
                let refs = s.take();
                self.cut = Some(Instant::now());
                refs
            }
            None => {
                self.cut = None;
                std::mem::take(&mut self.last)
            }
        };
        if refs.is_empty() && sampler.is_none() {
            return Ok(());
        }
        // A page faults again in the same interval if it was moved out
        // after it came back (at the boundary just past): once is enough.
        refs.sort_unstable_by_key(|r| (r.pid, r.page));
        let mut seen: HashMap<(u32, u64), (bool, f64)> = HashMap::new();
        for r in &refs {
            let e = seen.entry((r.pid, r.page)).or_insert((false, 0.0));
            e.0 |= r.write;
            e.1 = e.1.max(r.weight);
        }
        let mut pids: Vec<u32> = refs.iter().map(|r| r.pid).collect();
        pids.dedup();
        // The pages are in the program until they are moved out below:
        // their frames come from pagemap now, while faults are held. A
        // page the program had paged out to swap since it faulted was
        // referenced too: it counts in its process's rows.
        let ps = self.page_size;
        let mut buf = std::mem::take(&mut self.buf);
        let pages = pages_of(&self.root.proc, ps, &pids, &mut buf, true, |pid| {
            let mut runs: Vec<(u64, u64)> = Vec::new();
            for r in refs.iter().filter(|r| r.pid == pid) {
                match runs.last_mut() {
                    Some(last) if last.1 == r.page => last.1 += ps,
                    Some(last) if last.1 > r.page => {}
                    _ => runs.push((r.page, r.page + ps)),
                }
            }
            runs
        });
        self.buf = buf;
        // Faults are held from the take to here: the eviction must come.
        let evicted = sampler.map(|s| (s.evict(self.fraction), s.finished()));
        let mut pages = pages?;
        // Once the traced program has exited (the tracer has ended) there
        // is nothing to move out, and its last references still count.
        if let Some((evicted, false)) = evicted {
            evicted?;
        }
        // A process that exited since the last boundary (one that lived
        // inside the interval) has no pagemap now: its pages carry the
        // frames and mappings the tracer read at its exit (a page whose
        // mapping was not found goes in the block that holds it).
        let found: std::collections::HashSet<u32> = pages.iter().map(|p| p.pid).collect();
        let block = self.block;
        pages.extend(
            refs.iter()
                .filter(|r| !found.contains(&r.pid))
                .filter_map(|r| {
                    let pfn = r.pfn?;
                    let vb = r.page / block * block;
                    Some(Page {
                        pfn,
                        in_swap: false,
                        pid: r.pid,
                        vaddr: r.page,
                        vma: r.vma.unwrap_or((vb, vb + block)),
                        dirty: false,
                    })
                }),
        );
        // The tally takes pages in swap first, then by frame.
        pages.sort_unstable_by_key(|p| (!p.in_swap, p.pfn, p.pid, p.vaddr));
        pages.dedup_by_key(|p| (p.in_swap, p.pfn, p.pid, p.vaddr));
        let mut tally = ProcessTally::new(ps, self.block, true);
        for mut p in pages {
            if let Some(&(write, weight)) = seen.get(&(p.pid, p.vaddr)) {
                p.dirty = write;
                tally.add_weighted(&p, weight);
            }
        }
        tally.finish(out);
        Ok(())
    }

    fn cut(&self) -> Option<Instant> {
        self.cut
    }
}

impl Follow for Fault {
    fn follow(&mut self, what: &Followed) -> Result<u32> {
        let what = match what {
            Followed::Launch(argv) => Target::Launch(argv.clone()),
            Followed::Attach(pid) => Target::Attach(*pid),
        };
        let s = Sampler::start(
            &what,
            self.fraction,
            &self.root.proc,
            Arc::new(TraceCounts::default()),
        )?;
        let pid = s.root();
        self.sampler = Some(s);
        Ok(pid)
    }

    fn launched(&mut self) -> Launched {
        match &self.sampler {
            Some(s) if !s.finished() => Launched::Running,
            Some(_) => self.let_go(),
            None => Launched::LetGo,
        }
    }

    fn let_go(&mut self) -> Launched {
        // The references since the last boundary go in the last interval.
        if let Some(s) = &self.sampler {
            self.last = s.take();
        }
        match self.sampler.take().map(Sampler::stop) {
            Some(Ok(o)) => match o.exit_status {
                Some(code) => Launched::Exited(code),
                None => Launched::LetGo,
            },
            Some(Err(e)) => Launched::Failed(e),
            None => Launched::LetGo,
        }
    }
}

impl Drop for Fault {
    fn drop(&mut self) {
        // Every page goes back, and the program runs on untraced.
        if let Some(s) = self.sampler.take() {
            let _ = s.stop();
        }
    }
}
