//! `/proc/kpageflags`, `/proc/kpagecount` and `/proc/kpagecgroup`: one u64
//! per page frame, indexed by PFN (Documentation/admin-guide/mm/pagemap.rst).
//!
//! Lookups are batched: the PFNs wanted are sorted, runs of nearby PFNs
//! (gaps up to [`GAP`] frames) are merged, and each run costs one `pread`
//! per file into reused buffers. Reading one entry per syscall manages
//! about 1.7 M pages/s; runs approach the speed of reading the whole file.

use crate::errno;
use pagescope_core::kpageflags::KPageFlags;
use pagescope_core::{Error, Result};
use rustix::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Largest gap, in frames, that a run bridges rather than starting a new
/// `pread`. The kernel's cost is per frame read (it looks up each frame's
/// folio), so bridging wide gaps reads frames nobody asked for: on the
/// snapshot benchmark a gap of 64 read 1.5 frames per frame needed, a gap
/// of 8 reads 1.01 with twice the `pread`s, and is faster.
pub const GAP: u64 = 8;
/// Longest run per `pread`, in frames.
pub const MAX_RUN: usize = 32 * 1024;

/// What the PFN-indexed files say about one frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameInfo {
    /// kpageflags.
    pub flags: KPageFlags,
    /// kpagecount.
    pub count: u64,
    /// kpagecgroup (0 when the file is absent).
    pub memcg: u64,
}

/// One PFN-indexed file, open.
#[derive(Debug)]
pub(crate) struct PfnFile {
    fd: OwnedFd,
    path: PathBuf,
}

impl PfnFile {
    pub(crate) fn open(path: PathBuf) -> Result<PfnFile> {
        let f = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        Ok(PfnFile { fd: f.into(), path })
    }

    /// Opens a PFN-indexed file for reading and writing (the idle page
    /// bitmap).
    pub(crate) fn open_rw(path: PathBuf) -> Result<PfnFile> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        Ok(PfnFile { fd: f.into(), path })
    }

    /// Writes `words` at entries `[index, index + words.len())`.
    pub(crate) fn write(&self, index: u64, words: &[u64]) -> Result<()> {
        let le: Vec<u64> = words.iter().map(|w| w.to_le()).collect();
        let bytes: &[u8] = bytemuck::cast_slice(&le);
        let mut done = 0;
        while done < bytes.len() {
            let n = rustix::io::pwrite(&self.fd, &bytes[done..], index * 8 + done as u64)
                .map_err(|e| errno(&self.path, e))?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(())
    }

    /// Reads entries `[pfn, pfn + out.len())`; entries past the end of
    /// the file read as zero.
    pub(crate) fn read(&self, pfn: u64, out: &mut [u64]) -> Result<()> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(out);
        let mut done = 0;
        while done < bytes.len() {
            let n = rustix::io::pread(&self.fd, &mut bytes[done..], pfn * 8 + done as u64)
                .map_err(|e| errno(&self.path, e))?;
            if n == 0 {
                bytes[done..].fill(0);
                break;
            }
            done += n;
        }
        for v in out.iter_mut() {
            *v = u64::from_le(*v);
        }
        Ok(())
    }
}

/// The three PFN-indexed files, open.
#[derive(Debug)]
pub struct KPageReader {
    flags: PfnFile,
    count: PfnFile,
    cgroup: Option<PfnFile>,
    /// Reused run buffers for the three files, [`MAX_RUN`] entries each.
    bufs: [Vec<u64>; 3],
}

impl KPageReader {
    /// Opens the files under `proc_root`. kpageflags and kpagecount are
    /// required (root only); kpagecgroup is optional (CONFIG_MEMCG).
    pub fn open(proc_root: &Path) -> Result<KPageReader> {
        let flags = PfnFile::open(proc_root.join("kpageflags"))?;
        let count = PfnFile::open(proc_root.join("kpagecount"))?;
        let cgroup = PfnFile::open(proc_root.join("kpagecgroup")).ok();
        Ok(KPageReader {
            flags,
            count,
            cgroup,
            bufs: [vec![0; MAX_RUN], vec![0; MAX_RUN], vec![0; MAX_RUN]],
        })
    }

    /// Opens kpageflags and kpagecount alone: lookups leave `memcg` 0
    /// and cost a `pread` less per run of frames.
    pub fn open_without_cgroup(proc_root: &Path) -> Result<KPageReader> {
        let mut r = KPageReader::open(proc_root)?;
        r.cgroup = None;
        Ok(r)
    }

    /// Whether kpagecgroup is available.
    pub fn has_cgroup(&self) -> bool {
        self.cgroup.is_some()
    }

    /// Looks up every PFN of `pfns` (any order, repeats allowed) and
    /// writes its info to the same index of `out`. `keys` is scratch
    /// space, reused between calls.
    pub fn lookup(
        &mut self,
        pfns: &[u64],
        keys: &mut Vec<u64>,
        out: &mut Vec<FrameInfo>,
    ) -> Result<()> {
        out.clear();
        out.resize(pfns.len(), FrameInfo::default());
        // Sort (PFN, index) pairs packed in one u64: PFNs fit in 47 bits
        // (512 TiB of 4 KiB pages) and indexes in 17 (chunks are smaller).
        const INDEX_BITS: u32 = 17;
        if pfns.len() >= 1 << INDEX_BITS {
            for (part, o) in pfns.chunks(1 << (INDEX_BITS - 1)).zip(0..) {
                let mut sub = Vec::new();
                self.lookup(part, keys, &mut sub)?;
                out[o << (INDEX_BITS - 1)..][..sub.len()].copy_from_slice(&sub);
            }
            return Ok(());
        }
        keys.clear();
        keys.extend(
            pfns.iter()
                .enumerate()
                .map(|(i, &p)| (p << INDEX_BITS) | i as u64),
        );
        if !keys.is_sorted() {
            keys.sort_unstable();
        }
        let index = |k: u64| (k & ((1 << INDEX_BITS) - 1)) as usize;
        let pfn = |k: u64| k >> INDEX_BITS;
        let mut i = 0;
        while i < keys.len() {
            let first = pfn(keys[i]);
            // Extend the run while the next PFN is near.
            let mut j = i + 1;
            let mut last = first;
            while j < keys.len() {
                let p = pfn(keys[j]);
                if p - last > GAP || (p - first) as usize >= MAX_RUN {
                    break;
                }
                last = p;
                j += 1;
            }
            let len = (last - first + 1) as usize;
            self.flags.read(first, &mut self.bufs[0][..len])?;
            self.count.read(first, &mut self.bufs[1][..len])?;
            if let Some(cg) = &self.cgroup {
                cg.read(first, &mut self.bufs[2][..len])?;
            }
            for &k in &keys[i..j] {
                let off = (pfn(k) - first) as usize;
                out[index(k)] = FrameInfo {
                    flags: KPageFlags::from_bits_retain(self.bufs[0][off]),
                    count: self.bufs[1][off],
                    memcg: self.bufs[2][off],
                };
            }
            i = j;
        }
        Ok(())
    }
}
