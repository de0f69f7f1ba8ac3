//! The `idle` backend: `/sys/kernel/mm/page_idle/bitmap`
//! (CONFIG_IDLE_PAGE_TRACKING), exact per page.
//!
//! The bitmap has one bit per page frame. Writing a 1 marks the frame's
//! page idle (and clears the accessed bits of the PTEs mapping it); any
//! access clears the mark, and so does a new allocation; reading gives 1
//! for pages still idle. Only pages on an LRU list (user pages and page
//! cache) are tracked: others read as 0, so kpageflags decides which bits
//! mean anything. Reads and writes go by runs of 64-frame words, and each
//! run is written back right after it is read, so a reference can only
//! slip between the two within microseconds.
//!
//! For processes, the frames come from pagemap, so each referenced page is
//! placed both physically and virtually; written pages come from
//! soft-dirty bits where the kernel has them. For the machine, every RAM
//! frame is read, and referenced frames are classed by kpageflags: mapped
//! (user), or file pages no process maps (page cache); then each process's
//! pages whose frames were referenced make its rows and page runs.

use crate::kpage::PfnFile;
use crate::record::pages::{
    all_resident, per_process, set_frame, tracked, FrameTally, Page, ProcessTally,
};
use crate::record::probe::Probe;
use crate::record::writes::Writes;
use crate::Root;
use pagescope_core::kpageflags::KPageFlags;
use pagescope_core::record::{Backend, Granularity, Interval, WriteSource};
use pagescope_core::{Error, Result};
use std::path::PathBuf;

/// The bitmap's path under sysfs.
pub const BITMAP: &str = "kernel/mm/page_idle/bitmap";

/// Frames per read when scanning the machine (a multiple of 64).
const CHUNK: u64 = 64 * 1024;

/// Why the backend can't be used here, if it can't.
pub fn unavailable(root: &Root, page_size: u64) -> Option<String> {
    if !root.sys.join(BITMAP).exists() {
        return Some("no idle page tracking here (CONFIG_IDLE_PAGE_TRACKING)".into());
    }
    if !crate::system::pfns_visible(root, page_size) {
        return Some("the idle page bitmap and page frame numbers need root".into());
    }
    None
}

/// Receives each tracked page of a sweep, and whether it was referenced.
type Visit<'a> = dyn FnMut(&Page, bool) + 'a;

/// See the module documentation.
#[derive(Debug)]
pub struct Idle {
    proc_root: PathBuf,
    bitmap: PfnFile,
    flags: PfnFile,
    page_size: u64,
    block: u64,
    /// RAM frame ranges `[first, last)` when recording the machine.
    system: Option<Vec<(u64, u64)>>,
    writes: Writes,
    buf: Vec<u8>,
}

impl Idle {
    /// Opens the bitmap. `system` records every RAM frame instead of the
    /// processes' own.
    pub fn new(
        root: &Root,
        page_size: u64,
        block: u64,
        system: bool,
        writes: Writes,
    ) -> Result<Idle> {
        let ram = if system {
            let info = crate::system::collect(root, &[0])?;
            if info.ram_ranges.is_empty() {
                return Err(Error::Unsupported {
                    what: "recording the machine with the idle backend".into(),
                    needs: "the RAM ranges of /proc/iomem (root)".into(),
                });
            }
            Some(
                info.ram_ranges
                    .iter()
                    .map(|&(s, e)| (s.div_ceil(page_size), (e + 1) / page_size))
                    .collect(),
            )
        } else {
            None
        };
        Ok(Idle {
            proc_root: root.proc.clone(),
            bitmap: PfnFile::open_rw(root.sys.join(BITMAP))?,
            flags: PfnFile::open(root.proc.join("kpageflags"))?,
            page_size,
            block,
            writes,
            system: ram,
            buf: Vec::new(),
        })
    }

    /// Every resident page of `pids`, sorted by frame.
    fn pages(&mut self, pids: &[u32]) -> Result<Vec<Page>> {
        all_resident(&self.proc_root, self.page_size, pids, &mut self.buf)
    }

    /// The head frame of the large folio (transparent huge page, large
    /// page-cache folio) whose tail frame `pfn` is, or `None`. The bitmap
    /// tracks a folio by its head only: a tail's own bit never changes.
    /// Folios are naturally aligned and at most 512 frames here, so the
    /// head is within the 512-aligned frames before it.
    fn head_of(&self, pfn: u64, scratch: &mut Vec<u64>) -> Result<Option<u64>> {
        let first = pfn & !511;
        scratch.resize((pfn - first + 1) as usize, 0);
        self.flags.read(first, scratch)?;
        Ok(scratch
            .iter()
            .rposition(|&f| KPageFlags::from_bits_retain(f).contains(KPageFlags::COMPOUND_HEAD))
            .map(|k| first + k as u64))
    }

    /// Goes over `pages` (sorted by frame) by runs of bitmap words: reads
    /// each run's bits and flags, calls `f` (if given) with each tracked
    /// page and whether it was referenced, and marks the run's pages idle
    /// again at once. A page of a large folio goes by its head's bit.
    fn sweep(&self, pages: &[Page], mut f: Option<&mut Visit<'_>>) -> Result<()> {
        let (mut words, mut masks, mut flags) = (Vec::new(), Vec::new(), Vec::new());
        let mut scratch = Vec::new();
        // The last head whose state was read, with its idle bit as read
        // (before this sweep marked it again): a folio's tails in the next
        // run go by it.
        let mut last_head: Option<(u64, bool)> = None;
        let mut i = 0;
        while i < pages.len() {
            let w0 = pages[i].pfn / 64;
            let mut j = i;
            let mut w1 = w0;
            while j < pages.len() && pages[j].pfn / 64 <= w1 + 1 && w1 - w0 < 4096 {
                w1 = pages[j].pfn / 64;
                j += 1;
            }
            let n = (w1 - w0 + 1) as usize;
            masks.clear();
            masks.resize(n, 0u64);
            words.resize(n, 0);
            flags.resize(n * 64, 0);
            self.bitmap.read(w0, &mut words)?;
            self.flags.read(w0 * 64, &mut flags)?;
            for p in &pages[i..j] {
                let fl = flags[(p.pfn - w0 * 64) as usize];
                let mut frame = p.pfn;
                if KPageFlags::from_bits_retain(fl).contains(KPageFlags::COMPOUND_TAIL) {
                    // The head among this run's flags, else read apart.
                    let base = w0 * 64;
                    let lo = ((p.pfn & !511).max(base) - base) as usize;
                    let local = flags[lo..=(p.pfn - base) as usize].iter().rposition(|&f| {
                        KPageFlags::from_bits_retain(f).contains(KPageFlags::COMPOUND_HEAD)
                    });
                    let head = match local {
                        Some(k) => Some(base + (lo + k) as u64),
                        None if (p.pfn & !511) < base => self.head_of(p.pfn, &mut scratch)?,
                        None => None,
                    };
                    match head {
                        Some(h) if h >= base => frame = h,
                        Some(h) => {
                            // The head is before this run: its own word.
                            let idle = match last_head {
                                Some((lh, idle)) if lh == h => idle,
                                _ => {
                                    let mut w = [0u64];
                                    self.bitmap.read(h / 64, &mut w)?;
                                    self.bitmap.write(h / 64, &[1 << (h % 64)])?;
                                    let idle = w[0] >> (h % 64) & 1 == 1;
                                    last_head = Some((h, idle));
                                    idle
                                }
                            };
                            if let Some(f) = f.as_mut() {
                                if tracked(fl) {
                                    f(p, !idle);
                                }
                            }
                            continue;
                        }
                        None => continue, // no head found: can't be read
                    }
                }
                let (w, bit) = ((frame / 64 - w0) as usize, frame % 64);
                masks[w] |= 1 << bit;
                if frame != p.pfn
                    || KPageFlags::from_bits_retain(fl).contains(KPageFlags::COMPOUND_HEAD)
                {
                    last_head = Some((frame, words[w] >> bit & 1 == 1));
                }
                if let Some(f) = f.as_mut() {
                    if tracked(fl) {
                        f(p, words[w] >> bit & 1 == 0);
                    }
                }
            }
            self.bitmap.write(w0, &masks)?;
            i = j;
        }
        Ok(())
    }

    /// The machine: every RAM frame, read and marked idle chunk by chunk;
    /// with `out`, the referenced frames are tallied into it and their
    /// bits set in `seen` (a bit per frame).
    fn sweep_system(&self, out: Option<&mut Interval>, seen: &mut Vec<u64>) -> Result<()> {
        let ranges = self.system.as_deref().unwrap_or_default();
        seen.clear();
        let mut tally = FrameTally::new(self.page_size, self.block);
        let (mut words, mut flags) = (Vec::new(), Vec::new());
        let mut head: Option<(u64, bool)> = None;
        let reading = out.is_some();
        for &(first, last) in ranges {
            let mut pfn = first / 64 * 64;
            while pfn < last {
                let n = (last - pfn).min(CHUNK).div_ceil(64) as usize;
                if reading {
                    words.resize(n, 0);
                    flags.resize(n * 64, 0);
                    self.bitmap.read(pfn / 64, &mut words)?;
                    self.flags.read(pfn, &mut flags)?;
                    for (k, &fl) in flags.iter().enumerate() {
                        let frame = pfn + k as u64;
                        let f = KPageFlags::from_bits_retain(fl);
                        let idle = words[k / 64] >> (k % 64) & 1 == 1;
                        // A large folio is tracked by its head's bit.
                        let idle = if f.contains(KPageFlags::COMPOUND_HEAD) {
                            head = Some((frame, idle));
                            idle
                        } else if f.contains(KPageFlags::COMPOUND_TAIL) {
                            match head {
                                Some((h, head_idle)) if frame - h < 512 => head_idle,
                                _ => true, // head unknown: not counted
                            }
                        } else {
                            idle
                        };
                        if frame < first || frame >= last || !tracked(fl) || idle {
                            continue;
                        }
                        tally.add(frame, fl);
                        set_frame(seen, frame);
                    }
                }
                words.clear();
                words.resize(n, u64::MAX);
                self.bitmap.write(pfn / 64, &words)?;
                pfn += n as u64 * 64;
            }
        }
        if let Some(out) = out {
            tally.finish(out);
        }
        Ok(())
    }
}

impl Probe for Idle {
    fn backend(&self) -> Backend {
        Backend::Idle
    }

    fn granularity(&self) -> Granularity {
        Granularity::Page
    }

    fn writes(&self) -> WriteSource {
        self.writes.source()
    }

    fn writes_untracked(&self) -> Vec<u32> {
        self.writes.untracked()
    }

    fn needs_freeze(&self) -> bool {
        // The bitmap is read and rewritten run by run; only soft-dirty
        // (pagemap, then clear_refs) takes two passes.
        self.writes.two_pass()
    }

    fn reset(&mut self, pids: &[u32]) -> Result<()> {
        if self.system.is_some() {
            return self.sweep_system(None, &mut Vec::new());
        }
        let pages = self.pages(pids)?;
        self.sweep(&pages, None)?;
        self.writes.begin(pids)
    }

    fn collect(&mut self, pids: &[u32], out: &mut Interval) -> Result<()> {
        if self.system.is_some() {
            let mut seen = Vec::new();
            self.sweep_system(Some(&mut *out), &mut seen)?;
            let (ps, block) = (self.page_size, self.block);
            return per_process(&self.proc_root, ps, block, pids, &mut self.buf, &seen, out);
        }
        self.writes.gather(pids)?;
        let mut pages = self.pages(pids)?;
        for p in &mut pages {
            p.dirty = self.writes.dirty(p.pid, p.vaddr, p.dirty);
        }
        let mut tally = ProcessTally::new(self.page_size, self.block, self.writes.known());
        self.sweep(
            &pages,
            Some(&mut |p: &Page, referenced: bool| {
                if referenced {
                    tally.add(p);
                }
            }),
        )?;
        self.writes.end(pids)?;
        tally.finish(out);
        Ok(())
    }
}
