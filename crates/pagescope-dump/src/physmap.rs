//! `snapshot --vmcore --physmap`: every page frame of the crashed
//! machine's System RAM classed from its `struct page`, as a live
//! `snapshot --physmap` classes it from `/proc/kpageflags` and
//! `/proc/kpagecount` ([`pagescope_core::physclass`]): the frame's
//! kpageflags and kpagecount are made by [`crate::page`], by the same
//! rules as for the processes' pages.

use crate::kernel::Kernel;
use crate::{DumpError, Result};
use pagescope_core::model::{PhysChunk, SnapshotSink, SystemInfo};
use pagescope_core::physclass::{FrameClassifier, RUN_ALIGN};

/// Frames per chunk, at most (as the live scan's): chunks end on
/// multiples of it, so that no huge page is cut in two.
pub const RUN: u64 = RUN_ALIGN;

/// `KPF_NOPAGE`: what kpageflags gives a frame without a `struct page`.
const KPF_NOPAGE: u64 = 1 << 20;

/// What the scan found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scanned {
    /// Frames classed.
    pub frames: u64,
    /// Frames whose `struct page` is not in the dump (classed as a live
    /// scan classes a frame without one: reserved).
    pub missing: u64,
}

/// Classes every frame of `system.ram_ranges` into `sink`, in PFN order,
/// in chunks of [`RUN`] frames. `stop` is asked at each chunk.
pub fn scan(
    k: &mut Kernel<'_>,
    system: &SystemInfo,
    sink: &mut dyn SnapshotSink,
    stop: fn() -> bool,
) -> Result<Scanned> {
    let ps = system.page_size.max(1);
    let mut classifier = FrameClassifier::new(ps);
    let mut done = Scanned::default();
    let (mut flags, mut counts) = (Vec::new(), Vec::new());
    for &(start, end) in &system.ram_ranges {
        let (first, last) = (start.div_ceil(ps), (end + 1) / ps);
        let mut pfn = first;
        while pfn < last {
            if stop() {
                return Err(DumpError::Interrupted);
            }
            let n = (last - pfn).min(RUN - pfn % RUN);
            flags.clear();
            counts.clear();
            for p in pfn..pfn + n {
                let (f, count) = match k.frames.frame(&mut k.mmu, p)? {
                    Some(f) => (f.kflags, f.kcount),
                    None => {
                        done.missing += 1;
                        (KPF_NOPAGE, 0)
                    }
                };
                flags.push(f);
                counts.push(count);
            }
            let mut classes = Vec::with_capacity(flags.len());
            classifier.class_run(pfn, &flags, &counts, &mut classes);
            sink.physmap(&PhysChunk {
                start_pfn: pfn,
                classes,
            })?;
            pfn += n;
            done.frames += n;
        }
    }
    k.frames.forget();
    Ok(done)
}
