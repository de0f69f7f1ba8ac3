//! makedumpfile's compressed kdump format ("KDUMP   ", what
//! distributions keep under /var/crash): a `disk_dump_header` in the
//! first block, a `kdump_sub_header` (`phys_base`, the dump level, where
//! VMCOREINFO is), two bitmaps over every page frame (the first: frames
//! of RAM; the second: frames written to the dump), then a `page_desc`
//! for each frame the second bitmap has (where its data is, how long,
//! which codec), then the pages, each compressed on its own (zlib, lzo,
//! snappy or zstd) or stored as it is.
//!
//! Opening reads the headers, VMCOREINFO and the second bitmap (one bit
//! per frame of the machine: 32 MiB for a TiB), with a count of its bits
//! every 512 frames, so that a frame's descriptor is found with a few
//! popcounts and one `pread`. Pages are read when asked for, decompressed
//! into a cache ([`PageCache`]); memory stays bounded whatever the dump's
//! size.
//!
//! A frame the second bitmap does not have (makedumpfile's `-d` filter
//! left it out) is missing, as a hole in an ELF core is; so is a page
//! whose data is damaged (it does not decompress to a page, or lies past
//! the end of the file). Both are counted for the snapshot's notes.

use crate::codec::{Codec, Decoders};
use crate::pagecache::PageCache;
use crate::{DumpError, Result};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// `KDUMP_SIGNATURE`.
pub const SIGNATURE: &[u8; 8] = b"KDUMP   ";
/// `sizeof(struct disk_dump_header)` on a 64-bit machine.
const HEADER_LEN: usize = 464;
/// `sizeof(struct kdump_sub_header)` (version 6).
const SUB_HEADER_LEN: usize = 104;
/// `sizeof(page_desc_t)`.
const PD_LEN: u64 = 24;
/// `DUMP_DH_COMPRESSED_INCOMPLETE`: makedumpfile stopped before the end
/// (the disk filled up).
const INCOMPLETE: u32 = 0x8;
/// `DUMP_DH_EXCLUDED_VMEMMAP`: unused `struct page`s left out (`-e`).
const EXCLUDED_VMEMMAP: u32 = 0x10;
/// Frames per rank entry.
const RANK_WORDS: usize = 8;
/// Damaged or filtered frames remembered for the notes.
const REMEMBER: usize = 1 << 16;

/// What the headers say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// `header_version`.
    pub version: i32,
    /// `utsname.release`.
    pub release: String,
    /// `utsname.machine` (`x86_64`, `aarch64`, ...).
    pub machine: String,
    /// `status`.
    pub status: u32,
    /// `block_size`: the page size.
    pub block_size: u64,
    /// The sub-header's `phys_base`.
    pub phys_base: u64,
    /// The sub-header's `dump_level` (makedumpfile's `-d`).
    pub dump_level: i32,
    /// Frames the bitmaps cover (`max_mapnr`).
    pub max_mapnr: u64,
}

/// Frames that could not be read, for the notes.
#[derive(Debug, Default)]
struct Damage {
    /// Frames read that makedumpfile left out (up to [`REMEMBER`]).
    filtered: std::collections::HashSet<u64>,
    /// Frames whose data is damaged, with why (up to [`REMEMBER`]).
    corrupt: BTreeMap<u64, String>,
}

/// The cache and the decoders: what reading changes.
#[derive(Debug)]
struct State {
    /// Decompressed pages.
    cache: PageCache,
    decoders: Decoders,
    compressed: Vec<u8>,
    damage: Damage,
}

/// An opened compressed kdump file.
#[derive(Debug)]
pub struct Kdump {
    file: File,
    path: PathBuf,
    len: u64,
    /// The headers.
    pub header: Header,
    /// The second bitmap: frames in the dump.
    dumped: Vec<u64>,
    /// Bits of `dumped` before each group of [`RANK_WORDS`] words.
    ranks: Vec<u64>,
    /// Frames in the dump.
    dumped_frames: u64,
    /// Frames of RAM (the first bitmap).
    ram_frames: u64,
    /// Runs of RAM, `[first, end)` frames.
    ram: Vec<(u64, u64)>,
    /// Where the page descriptors start.
    pd_offset: u64,
    vmcoreinfo: Option<String>,
    state: RefCell<State>,
}

fn bad(path: &Path, why: impl Into<String>) -> DumpError {
    DumpError::Bad {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn text_at(b: &[u8], at: usize, len: usize) -> String {
    let s = &b[at..at + len];
    let end = s.iter().position(|&c| c == 0).unwrap_or(len);
    String::from_utf8_lossy(&s[..end]).into_owned()
}

/// What makedumpfile's dump level leaves out, in words.
pub fn dump_level_words(level: i32) -> String {
    let names = [
        (1, "pages of zeros (kept once, so still read)"),
        (2, "page cache"),
        (4, "page cache with private data"),
        (8, "user process memory"),
        (16, "free pages"),
    ];
    let v: Vec<&str> = names
        .iter()
        .filter(|(bit, _)| level & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join(", ")
    }
}

impl Kdump {
    /// Opens `path`, whose first bytes are [`SIGNATURE`], and reads its
    /// headers, VMCOREINFO and bitmaps. A file cut short (before the end
    /// of its page descriptors or of its last page), or whose headers do
    /// not hold together, is refused with [`DumpError::Bad`].
    pub fn open(path: &Path) -> Result<Kdump> {
        let io = |error| DumpError::Io {
            path: path.to_path_buf(),
            error,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let read = |at: u64, n: usize, what: &str| -> Result<Vec<u8>> {
            match at.checked_add(n as u64) {
                Some(end) if end <= len => {}
                _ => {
                    return Err(bad(
                        path,
                        format!(
                            "cut short: its {what} should end at byte {}, the file has {len}",
                            at.saturating_add(n as u64)
                        ),
                    ))
                }
            }
            let mut b = vec![0u8; n];
            file.read_exact_at(&mut b, at).map_err(io)?;
            Ok(b)
        };
        let h = read(0, HEADER_LEN, "header")?;
        if &h[..8] != SIGNATURE {
            return Err(bad(
                path,
                "not a compressed kdump file (no KDUMP signature)",
            ));
        }
        let version = u32_at(&h, 8) as i32;
        let block_size = u32_at(&h, 428) as i32;
        let sub_hdr_size = u32_at(&h, 432) as i32;
        let bitmap_blocks = u32_at(&h, 436) as u64;
        let mut header = Header {
            version,
            release: text_at(&h, 12 + 2 * 65, 65),
            machine: text_at(&h, 12 + 4 * 65, 65),
            status: u32_at(&h, 424),
            block_size: block_size as u64,
            max_mapnr: u32_at(&h, 440) as u64,
            ..Header::default()
        };
        if version < 1 {
            return Err(bad(
                path,
                format!("kdump header version {version}: not a dump makedumpfile writes"),
            ));
        }
        if !(1024..=1 << 16).contains(&block_size) || !(block_size as u64).is_power_of_two() {
            return Err(bad(
                path,
                format!("kdump header: a block size of {block_size}"),
            ));
        }
        let bs = block_size as u64;
        if sub_hdr_size < 1 {
            return Err(bad(
                path,
                format!("kdump header: a sub-header of {sub_hdr_size} blocks"),
            ));
        }
        // Fields of later versions are read only where the version has
        // them.
        let sub_len = match version {
            1 => 12,
            2 => 32,
            3 => 48,
            4 => 64,
            5 => 80,
            _ => SUB_HEADER_LEN,
        };
        let mut s = read(bs, sub_len, "sub-header")?;
        s.resize(SUB_HEADER_LEN, 0);
        header.phys_base = u64_at(&s, 0);
        header.dump_level = u32_at(&s, 8) as i32;
        if u32_at(&s, 12) != 0 {
            return Err(bad(path, "one part of a split dump (makedumpfile --split): join the parts with `makedumpfile --reassemble` first"));
        }
        if version >= 6 {
            header.max_mapnr = u64_at(&s, 96);
        }
        // The bitmaps: RAM, then the frames dumped.
        let bitmap_at = (1 + sub_hdr_size as u64) * bs;
        let bitmap_len = bitmap_blocks
            .checked_mul(bs)
            .ok_or_else(|| bad(path, "kdump header: its bitmaps' size overflows"))?;
        let half = bitmap_len / 2;
        if header.max_mapnr > half.saturating_mul(8) {
            return Err(bad(
                path,
                format!(
                    "kdump header: bitmaps of {half} bytes can't cover {} frames",
                    header.max_mapnr
                ),
            ));
        }
        match bitmap_at.checked_add(bitmap_len) {
            Some(end) if end <= len => {}
            _ => {
                return Err(bad(
                    path,
                    format!(
                        "cut short: its bitmaps should end at byte {}, the file has {len}",
                        bitmap_at.saturating_add(bitmap_len)
                    ),
                ))
            }
        }
        let bytes = header.max_mapnr.div_ceil(8);
        let (ram, ram_frames) = ram_runs(&file, bitmap_at, bytes, header.max_mapnr).map_err(io)?;
        let words = bytes.div_ceil(8) as usize;
        let mut raw = vec![0u8; words * 8];
        file.read_exact_at(&mut raw[..bytes as usize], bitmap_at + half)
            .map_err(io)?;
        let mut dumped: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        drop(raw);
        // No bit past max_mapnr counts.
        if header.max_mapnr % 64 != 0 {
            if let Some(last) = dumped.last_mut() {
                *last &= (1u64 << (header.max_mapnr % 64)) - 1;
            }
        }
        let mut ranks = Vec::with_capacity(words.div_ceil(RANK_WORDS));
        let mut total = 0u64;
        for group in dumped.chunks(RANK_WORDS) {
            ranks.push(total);
            total += group.iter().map(|w| w.count_ones() as u64).sum::<u64>();
        }
        let pd_offset = (1 + sub_hdr_size as u64 + bitmap_blocks) * bs;
        let incomplete = header.status & INCOMPLETE != 0;
        let pd_end = pd_offset.saturating_add(total.saturating_mul(PD_LEN));
        if pd_end > len && !incomplete {
            return Err(bad(
                path,
                format!("cut short: its page descriptors should end at byte {pd_end}, the file has {len}"),
            ));
        }
        // The pages follow in frame order: the last one's end is the
        // file's.
        if total > 0 && !incomplete {
            let pd = read(
                pd_offset + (total - 1) * PD_LEN,
                PD_LEN as usize,
                "last page descriptor",
            )?;
            let end = u64_at(&pd, 0).saturating_add(u32_at(&pd, 8) as u64);
            if end > len {
                return Err(bad(
                    path,
                    format!(
                        "cut short: its last page should end at byte {end}, the file has {len}"
                    ),
                ));
            }
        }
        let vmcoreinfo = if version >= 3 {
            let at = u64_at(&s, 32);
            let n = u64_at(&s, 40);
            if n == 0 {
                None
            } else if n > 1 << 20 {
                return Err(bad(
                    path,
                    format!("kdump sub-header: a VMCOREINFO of {n} bytes"),
                ));
            } else {
                let t = read(at, n as usize, "VMCOREINFO")?;
                Some(
                    String::from_utf8_lossy(&t)
                        .trim_end_matches('\0')
                        .to_string(),
                )
            }
        } else {
            None
        };
        let ps = bs as usize;
        Ok(Kdump {
            file,
            path: path.to_path_buf(),
            len,
            header,
            dumped,
            ranks,
            dumped_frames: total,
            ram_frames,
            ram,
            pd_offset,
            vmcoreinfo,
            state: RefCell::new(State {
                cache: PageCache::new(ps),
                decoders: Decoders::new(),
                compressed: Vec::with_capacity(ps),
                damage: Damage::default(),
            }),
        })
    }

    /// The VMCOREINFO text the sub-header points to.
    pub fn vmcoreinfo(&self) -> Option<&str> {
        self.vmcoreinfo.as_deref()
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The physical memory ranges of RAM (the first bitmap), `[start,
    /// end)`.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let bs = self.header.block_size;
        self.ram.iter().map(move |&(s, e)| (s * bs, e * bs))
    }

    /// Frames of RAM, and of them the frames in the dump.
    pub fn frames(&self) -> (u64, u64) {
        (self.ram_frames, self.dumped_frames)
    }

    /// Whether frame `pfn` is in the dump, and its index among those that
    /// are (its page descriptor's).
    pub fn rank(&self, pfn: u64) -> Option<u64> {
        if pfn >= self.header.max_mapnr {
            return None;
        }
        let w = (pfn / 64) as usize;
        let bit = pfn % 64;
        let word = self.dumped[w];
        if word & (1 << bit) == 0 {
            return None;
        }
        let group = w / RANK_WORDS;
        let before: u64 = self.dumped[group * RANK_WORDS..w]
            .iter()
            .map(|x| x.count_ones() as u64)
            .sum();
        Some(self.ranks[group] + before + (word & ((1 << bit) - 1)).count_ones() as u64)
    }

    /// Notes on what the dump lacks, known when it is opened: what
    /// makedumpfile's filter left out, and whether it finished.
    pub fn open_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let h = &self.header;
        let left_out = self.ram_frames.saturating_sub(self.dumped_frames);
        if h.dump_level & !1 != 0 || left_out > 0 {
            notes.push(format!(
                "makedumpfile filtered this dump (dump level {}: {} left out): {left_out} of its {} pages of RAM are not in it; what the snapshot reads (page tables, struct pages, command lines) from those is missing",
                h.dump_level,
                dump_level_words(h.dump_level),
                self.ram_frames
            ));
        }
        if h.status & EXCLUDED_VMEMMAP != 0 {
            notes.push("makedumpfile left out the struct pages of free memory (-e)".into());
        }
        if h.status & INCOMPLETE != 0 {
            notes.push("makedumpfile did not finish this dump (it is marked incomplete): pages it did not write are missing".into());
        }
        notes
    }

    /// Notes on the frames that could not be read so far: left out by the
    /// filter, or damaged.
    pub fn read_notes(&self) -> Vec<String> {
        let st = self.state.borrow();
        let d = &st.damage;
        let mut notes = Vec::new();
        if !d.filtered.is_empty() {
            let more = if d.filtered.len() >= REMEMBER {
                " or more"
            } else {
                ""
            };
            notes.push(format!(
                "{}{more} pages the snapshot read (page tables, struct pages, command lines) are not in the dump: makedumpfile's filter left them out",
                d.filtered.len()
            ));
        }
        if let Some((pfn, why)) = d.corrupt.iter().next() {
            let more = if d.corrupt.len() >= REMEMBER {
                " or more"
            } else {
                ""
            };
            notes.push(format!(
                "{}{more} pages of the dump are damaged and were read as missing (the first, frame {pfn:#x}: {why})",
                d.corrupt.len()
            ));
        }
        notes
    }

    /// Reads physical memory at `paddr` into `buf`. `Ok(false)` if any of
    /// it is not in the dump (not RAM, filtered out, or damaged).
    pub fn read_phys(&self, mut paddr: u64, mut buf: &mut [u8]) -> Result<bool> {
        let ps = self.header.block_size;
        let mut st = self.state.borrow_mut();
        while !buf.is_empty() {
            let pfn = paddr / ps;
            let within = (paddr % ps) as usize;
            let n = (ps as usize - within).min(buf.len());
            let (now, rest) = buf.split_at_mut(n);
            if st.cache.get(pfn).is_none() && !self.load(&mut st, pfn)? {
                return Ok(false);
            }
            let page = st.cache.get(pfn).expect("loaded");
            now.copy_from_slice(&page[within..within + n]);
            paddr += n as u64;
            buf = rest;
        }
        Ok(true)
    }

    /// Reads and decompresses frame `pfn` into the cache; `false` if it
    /// is not in the dump or damaged.
    fn load(&self, st: &mut State, pfn: u64) -> Result<bool> {
        let Some(rank) = self.rank(pfn) else {
            if self.is_ram(pfn) && st.damage.filtered.len() < REMEMBER {
                st.damage.filtered.insert(pfn);
            }
            return Ok(false);
        };
        let io = |error| DumpError::Io {
            path: self.path.clone(),
            error,
        };
        let mut pd = [0u8; PD_LEN as usize];
        let at = self.pd_offset + rank * PD_LEN;
        if at + PD_LEN > self.len {
            return Ok(self.damaged(
                st,
                pfn,
                "its page descriptor lies past the end of the file".into(),
            ));
        }
        self.file.read_exact_at(&mut pd, at).map_err(io)?;
        let offset = u64_at(&pd, 0);
        let size = u32_at(&pd, 8) as u64;
        let flags = u32_at(&pd, 12);
        let ps = self.header.block_size;
        let codec = match Codec::of_flags(flags) {
            Ok(c) => c,
            Err(e) => return Ok(self.damaged(st, pfn, e)),
        };
        if size == 0 || size > ps || (codec.is_none() && size != ps) {
            return Ok(self.damaged(st, pfn, format!("its page descriptor gives {size} bytes")));
        }
        if offset.checked_add(size).is_none_or(|e| e > self.len) {
            return Ok(self.damaged(st, pfn, "its data lies past the end of the file".into()));
        }
        let decoded = {
            let State {
                cache,
                decoders,
                compressed,
                ..
            } = &mut *st;
            let out = cache.slot_for(pfn);
            match codec {
                None => {
                    self.file.read_exact_at(out, offset).map_err(io)?;
                    Ok(())
                }
                Some(c) => {
                    compressed.resize(size as usize, 0);
                    self.file.read_exact_at(compressed, offset).map_err(io)?;
                    decoders.decompress(c, compressed, out)
                }
            }
        };
        if let Err(e) = decoded {
            return Ok(self.damaged(st, pfn, e));
        }
        st.cache.keep(pfn);
        Ok(true)
    }

    fn damaged(&self, st: &mut State, pfn: u64, why: String) -> bool {
        if st.damage.corrupt.len() < REMEMBER {
            st.damage.corrupt.entry(pfn).or_insert(why);
        }
        false
    }

    fn is_ram(&self, pfn: u64) -> bool {
        let i = self.ram.partition_point(|&(_, end)| end <= pfn);
        self.ram.get(i).is_some_and(|&(s, _)| s <= pfn)
    }
}

/// The runs of set bits of the first bitmap (`bytes` bytes at `at`, over
/// `frames` frames), read a MiB at a time, and their count.
fn ram_runs(
    file: &File,
    at: u64,
    bytes: u64,
    frames: u64,
) -> std::io::Result<(Vec<(u64, u64)>, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut count = 0;
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    while done < bytes {
        let n = ((bytes - done) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], at + done)?;
        for (i, &b) in buf[..n].iter().enumerate() {
            if b == 0 {
                continue;
            }
            let first = (done + i as u64) * 8;
            if b == 0xff && first + 8 <= frames {
                count += 8;
                match runs.last_mut() {
                    Some(r) if r.1 == first => r.1 = first + 8,
                    _ => runs.push((first, first + 8)),
                }
                continue;
            }
            for bit in 0..8 {
                let pfn = (done + i as u64) * 8 + bit;
                if b & (1 << bit) == 0 || pfn >= frames {
                    continue;
                }
                count += 1;
                match runs.last_mut() {
                    Some(r) if r.1 == pfn => r.1 = pfn + 1,
                    _ => runs.push((pfn, pfn + 1)),
                }
            }
        }
        done += n as u64;
    }
    Ok((runs, count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// How a frame is stored in [`file`].
    #[derive(Clone, Copy, PartialEq)]
    enum How {
        Hole,
        Filtered,
        Raw,
        Packed(Codec),
        Garbage(Codec),
    }

    fn page_of(pfn: u64) -> Vec<u8> {
        (0..4096u64)
            .map(|i| ((i * 31 + pfn * 7) % 97) as u8)
            .collect()
    }

    fn pack(codec: Codec, p: &[u8]) -> Vec<u8> {
        match codec {
            Codec::Zlib => {
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(p).unwrap();
                e.finish().unwrap()
            }
            Codec::Lzo => lzokay_native::compress(p).unwrap(),
            Codec::Snappy => snap::raw::Encoder::new().compress_vec(p).unwrap(),
            Codec::Zstd => zstd::bulk::compress(p, 1).unwrap(),
        }
    }

    fn flag(codec: Codec) -> u32 {
        match codec {
            Codec::Zlib => crate::codec::ZLIB,
            Codec::Lzo => crate::codec::LZO,
            Codec::Snappy => crate::codec::SNAPPY,
            Codec::Zstd => crate::codec::ZSTD,
        }
    }

    /// A kdump file of `frames` frames, each stored as `how` says, in a
    /// file of the temporary directory.
    fn file(name: &str, frames: u64, how: &dyn Fn(u64) -> How) -> PathBuf {
        const BS: usize = 4096;
        let half = (frames as usize).div_ceil(8).next_multiple_of(BS);
        let bitmap_at = 2 * BS;
        let pd_at = bitmap_at + 2 * half;
        let mut f = vec![0u8; pd_at];
        f[..8].copy_from_slice(SIGNATURE);
        f[8..12].copy_from_slice(&6i32.to_le_bytes());
        f[12 + 4 * 65..12 + 4 * 65 + 6].copy_from_slice(b"x86_64");
        f[428..432].copy_from_slice(&(BS as i32).to_le_bytes());
        f[432..436].copy_from_slice(&1i32.to_le_bytes());
        f[436..440].copy_from_slice(&((2 * half / BS) as u32).to_le_bytes());
        f[BS + 96..BS + 104].copy_from_slice(&frames.to_le_bytes());
        let dumped: Vec<u64> = (0..frames)
            .filter(|&p| !matches!(how(p), How::Hole | How::Filtered))
            .collect();
        for p in 0..frames {
            if how(p) != How::Hole {
                f[bitmap_at + p as usize / 8] |= 1 << (p % 8);
            }
        }
        for &p in &dumped {
            f[bitmap_at + half + p as usize / 8] |= 1 << (p % 8);
        }
        let mut at = (pd_at + dumped.len() * 24) as u64;
        let mut data = Vec::new();
        for &p in &dumped {
            let (bytes, flags) = match how(p) {
                How::Raw => (page_of(p), 0),
                How::Packed(c) => (pack(c, &page_of(p)), flag(c)),
                How::Garbage(c) => (vec![0xa5; 100], flag(c)),
                _ => unreachable!(),
            };
            f.extend(at.to_le_bytes());
            f.extend((bytes.len() as u32).to_le_bytes());
            f.extend(flags.to_le_bytes());
            f.extend(0u64.to_le_bytes());
            at += bytes.len() as u64;
            data.extend(bytes);
        }
        f.extend(data);
        let path =
            std::env::temp_dir().join(format!("pagescope-kdump-{}-{name}", std::process::id()));
        std::fs::write(&path, f).unwrap();
        path
    }

    const CODECS: [Codec; 4] = [Codec::Zlib, Codec::Lzo, Codec::Snappy, Codec::Zstd];

    /// Frames of every kind, over more than one rank group, with holes.
    fn how(p: u64) -> How {
        match p % 11 {
            0 => How::Hole,
            1 => How::Filtered,
            2 => How::Raw,
            3 if p % 7 == 0 => How::Garbage(CODECS[(p % 4) as usize]),
            _ => How::Packed(CODECS[(p % 4) as usize]),
        }
    }

    #[test]
    fn frames_are_found_by_the_bitmap_and_decoded_by_their_codec() {
        let frames = 3000;
        let path = file("mixed", frames, &how);
        let k = Kdump::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let ram = (0..frames).filter(|&p| how(p) != How::Hole).count() as u64;
        let dumped = (0..frames)
            .filter(|&p| !matches!(how(p), How::Hole | How::Filtered))
            .count() as u64;
        assert_eq!(k.frames(), (ram, dumped));
        // Ranks count the frames dumped before.
        let mut n = 0;
        for p in 0..frames {
            match how(p) {
                How::Hole | How::Filtered => assert_eq!(k.rank(p), None, "{p}"),
                _ => {
                    assert_eq!(k.rank(p), Some(n), "{p}");
                    n += 1;
                }
            }
        }
        assert_eq!(k.rank(frames), None);
        // Twice over: the second time partly from the cache.
        for _ in 0..2 {
            let mut page = vec![0u8; 4096];
            for p in 0..frames {
                let ok = k.read_phys(p * 4096, &mut page).unwrap();
                match how(p) {
                    How::Raw | How::Packed(_) => {
                        assert!(ok, "{p}");
                        assert_eq!(page, page_of(p), "{p}");
                    }
                    _ => assert!(!ok, "{p}"),
                }
            }
        }
        // A read across two pages: both must be there.
        let mut two = vec![0u8; 200];
        assert!(k.read_phys(4 * 4096 - 100, &mut two).unwrap());
        assert_eq!(&two[..100], &page_of(3)[4096 - 100..]);
        assert_eq!(&two[100..], &page_of(4)[..100]);
        assert!(!k.read_phys(2 * 4096 - 100, &mut two).unwrap());
        // The notes count the filtered frames read and the damaged ones.
        let notes = k.read_notes();
        let filtered = (0..frames).filter(|&p| how(p) == How::Filtered).count();
        let garbage = (0..frames)
            .filter(|&p| matches!(how(p), How::Garbage(_)))
            .count();
        assert!(
            notes[0].starts_with(&format!("{filtered} pages the snapshot read")),
            "{notes:?}"
        );
        assert!(
            notes[1].starts_with(&format!("{garbage} pages of the dump are damaged")),
            "{notes:?}"
        );
        assert_eq!(k.ranges().next(), Some((4096, 11 * 4096)));
    }

    #[test]
    fn a_header_that_does_not_hold_together_is_refused() {
        let path = file("whole", 100, &|_| How::Raw);
        let whole = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let refused = |name: &str, f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = whole.clone();
            f(&mut b);
            let p =
                std::env::temp_dir().join(format!("pagescope-kdump-{}-{name}", std::process::id()));
            std::fs::write(&p, b).unwrap();
            let e = Kdump::open(&p).unwrap_err().to_string();
            std::fs::remove_file(&p).unwrap();
            e
        };
        assert!(refused("bs", &|b| b[428..432]
            .copy_from_slice(&1000i32.to_le_bytes()))
        .contains("block size"));
        assert!(
            refused("ver", &|b| b[8..12].copy_from_slice(&0i32.to_le_bytes())).contains("version")
        );
        assert!(refused("mapnr", &|b| b[4096 + 96..4096 + 104]
            .copy_from_slice(&(1u64 << 40).to_le_bytes()))
        .contains("can't cover"));
        assert!(refused("bitmap", &|b| b[436..440]
            .copy_from_slice(&u32::MAX.to_le_bytes()))
        .contains("cut short"));
        assert!(refused("last", &|b| b.truncate(b.len() - 1)).contains("cut short"));
        // Marked incomplete (makedumpfile's disk filled up): read as far
        // as it goes, the rest missing, with a note.
        let mut b = whole.clone();
        b[424..428].copy_from_slice(&INCOMPLETE.to_le_bytes());
        b.truncate(b.len() - 4096 * 10);
        let p =
            std::env::temp_dir().join(format!("pagescope-kdump-{}-incomplete", std::process::id()));
        std::fs::write(&p, b).unwrap();
        let k = Kdump::open(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        let mut page = vec![0u8; 4096];
        assert!(k.read_phys(0, &mut page).unwrap());
        assert_eq!(page, page_of(0));
        assert!(!k.read_phys(99 * 4096, &mut page).unwrap());
        assert!(k.open_notes().iter().any(|n| n.contains("did not finish")));
        assert!(
            k.read_notes()[0].contains("past the end of the file"),
            "{:?}",
            k.read_notes()
        );
    }
}
