//! The whole machine's page frames, read from `/proc/kpageflags` and
//! `/proc/kpagecount` in large sequential runs over every System RAM
//! range, each frame classed ([`pagescope_core::physclass`]) and streamed
//! as [`PhysChunk`]s.

use crate::kpage::PfnFile;
use crate::Root;
use pagescope_core::model::{PhysChunk, SnapshotSink, SystemInfo};
use pagescope_core::physclass::{FrameClassifier, RUN_ALIGN};
use pagescope_core::{Error, Result};

/// Frames per read and per chunk, at most: runs end on multiples of it
/// (so that no huge page is cut in two, see [`RUN_ALIGN`]).
pub const RUN: usize = RUN_ALIGN as usize;

/// Whether the machine `system` describes can be scanned: page frame
/// numbers and the RAM ranges are visible (root). Asked before anything
/// is collected, so that a snapshot that can't have its map fails first.
pub fn check(system: &SystemInfo) -> Result<()> {
    if !system.pfns_visible || system.ram_ranges.is_empty() {
        return Err(Error::Unsupported {
            what: "the physical map".into(),
            needs: "root (CAP_SYS_ADMIN) to read /proc/kpageflags, /proc/kpagecount and the RAM ranges of /proc/iomem".into(),
        });
    }
    Ok(())
}

/// Scans every RAM frame into `sink`; returns the frames scanned. Stops
/// with [`Error::Interrupted`] when `stop` says so (asked at each run).
pub fn scan(
    root: &Root,
    system: &SystemInfo,
    sink: &mut dyn SnapshotSink,
    stop: fn() -> bool,
) -> Result<u64> {
    check(system)?;
    let flags = PfnFile::open(root.proc.join("kpageflags"))?;
    let count = PfnFile::open(root.proc.join("kpagecount"))?;
    let ps = system.page_size.max(1);
    let (mut fbuf, mut cbuf) = (vec![0u64; RUN], vec![0u64; RUN]);
    let mut classifier = FrameClassifier::new(ps);
    let mut frames = 0;
    for &(start, end) in &system.ram_ranges {
        let (first, last) = (start.div_ceil(ps), (end + 1) / ps);
        let mut pfn = first;
        while pfn < last {
            if stop() {
                return Err(Error::Interrupted);
            }
            let n = ((last - pfn) as usize).min(RUN - (pfn % RUN as u64) as usize);
            flags.read(pfn, &mut fbuf[..n])?;
            count.read(pfn, &mut cbuf[..n])?;
            let mut classes = Vec::with_capacity(n);
            classifier.class_run(pfn, &fbuf[..n], &cbuf[..n], &mut classes);
            sink.physmap(&PhysChunk {
                start_pfn: pfn,
                classes,
            })?;
            pfn += n as u64;
            frames += n as u64;
        }
    }
    Ok(frames)
}
