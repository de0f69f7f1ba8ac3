//! The whole machine's page frames, read from `/proc/kpageflags` and
//! `/proc/kpagecount` in large sequential runs over every System RAM
//! range, each frame classed ([`pagescope_core::physclass`]) and streamed
//! as [`PhysChunk`]s.

use crate::kpage::PfnFile;
use crate::Root;
use pagescope_core::model::{PhysChunk, SnapshotSink, SystemInfo};
use pagescope_core::physclass::FrameClassifier;
use pagescope_core::{Error, Result};

/// Frames per read and per chunk.
pub const RUN: usize = 64 * 1024;

/// Scans every RAM frame into `sink`; returns the frames scanned. Stops
/// with [`Error::Interrupted`] when `stop` says so (asked at each run).
pub fn scan(
    root: &Root,
    system: &SystemInfo,
    sink: &mut dyn SnapshotSink,
    stop: fn() -> bool,
) -> Result<u64> {
    if !system.pfns_visible || system.ram_ranges.is_empty() {
        return Err(Error::Unsupported {
            what: "the physical map".into(),
            needs: "root (CAP_SYS_ADMIN) to read /proc/kpageflags, /proc/kpagecount and the RAM ranges of /proc/iomem".into(),
        });
    }
    let flags = PfnFile::open(root.proc.join("kpageflags"))?;
    let count = PfnFile::open(root.proc.join("kpagecount"))?;
    let ps = system.page_size.max(1);
    let (mut fbuf, mut cbuf) = (vec![0u64; RUN], vec![0u64; RUN]);
    let mut classifier = FrameClassifier::default();
    let mut frames = 0;
    for &(start, end) in &system.ram_ranges {
        let (first, last) = (start.div_ceil(ps), (end + 1) / ps);
        let mut pfn = first;
        while pfn < last {
            if stop() {
                return Err(Error::Interrupted);
            }
            let n = ((last - pfn) as usize).min(RUN);
            flags.read(pfn, &mut fbuf[..n])?;
            count.read(pfn, &mut cbuf[..n])?;
            let classes = (0..n)
                .map(|i| classifier.class(pfn + i as u64, fbuf[i], cbuf[i]) as u8)
                .collect();
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
