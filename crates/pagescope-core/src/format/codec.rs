//! The columnar encoding of a [`PageChunk`].
//!
//! Pages are stored column by column, each column chosen so that zstd sees
//! long runs of equal bytes: virtual page numbers as deltas (1 for
//! consecutive pages), pagemap flag bits 55-63 on their own, frame bits
//! (PFN or swap entry) as signed deltas (1 for physically contiguous
//! pages), then the kpageflags, kpagecount, memcg and node columns for the
//! pages that have a physical side. Each column is a byte string of
//! LEB128 varints (signed deltas zigzag-encoded), so the common deltas
//! take one byte before compression.

use super::limits::CHUNK_PAGES;
use crate::kpageflags::KPageFlags;
use crate::model::{PageChunk, PageRecord, PhysInfo};
use crate::pagemap::{PagemapEntry, FRAME_MASK};
use serde::{Deserialize, Serialize};

/// The stored form of a chunk.
#[derive(Serialize, Deserialize, Default, Debug)]
struct Columns {
    pid: u32,
    start_time: u64,
    page_size: u64,
    pages: u32,
    #[serde(with = "serde_bytes")]
    vpn_delta: Vec<u8>,
    #[serde(with = "serde_bytes")]
    entry_flags: Vec<u8>,
    #[serde(with = "serde_bytes")]
    frame_delta: Vec<u8>,
    /// One bit per page, LSB first: the page has a physical side.
    #[serde(with = "serde_bytes")]
    has_phys: Vec<u8>,
    #[serde(with = "serde_bytes")]
    kflags: Vec<u8>,
    #[serde(with = "serde_bytes")]
    kcount: Vec<u8>,
    #[serde(with = "serde_bytes")]
    memcg: Vec<u8>,
    #[serde(with = "serde_bytes")]
    node: Vec<u8>,
}

/// Appends `v` as an LEB128 varint.
pub(crate) fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Zigzag: small negative and positive numbers become small unsigned ones.
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(crate) fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// Reads varints from one column, checking every bound.
pub(crate) struct Column<'a> {
    name: &'static str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Column<'a> {
    pub(crate) fn new(name: &'static str, bytes: &'a [u8]) -> Column<'a> {
        Column {
            name,
            bytes,
            pos: 0,
        }
    }

    #[inline]
    pub(crate) fn next(&mut self) -> Result<u64, String> {
        // Most values of most columns are one byte, most of the rest two.
        match self.bytes.get(self.pos..self.pos + 2) {
            Some(&[b, _]) if b < 0x80 => {
                self.pos += 1;
                Ok(b.into())
            }
            Some(&[b, c]) if c < 0x80 => {
                self.pos += 2;
                Ok((b & 0x7f) as u64 | (c as u64) << 7)
            }
            _ => self.next_long(),
        }
    }

    #[inline(never)]
    fn next_long(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&b) = self.bytes.get(self.pos) else {
                return Err(format!("column {} is too short", self.name));
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                break;
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(format!("column {} has a bad varint", self.name))
    }

    pub(crate) fn done(&self) -> Result<(), String> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(format!("column {} is too long", self.name))
        }
    }
}

/// Encodes page chunks, reusing its column buffers between chunks.
#[derive(Debug, Default)]
pub struct PageEncoder {
    c: Columns,
}

impl PageEncoder {
    /// Encodes `chunk` into `out` (cleared first). `page_size` turns
    /// addresses into page numbers.
    pub fn encode(&mut self, chunk: &PageChunk, page_size: u64, out: &mut Vec<u8>) {
        let c = &mut self.c;
        let n = chunk.pages.len();
        c.pid = chunk.pid;
        c.start_time = chunk.start_time;
        c.page_size = page_size;
        c.pages = n as u32;
        for col in [
            &mut c.vpn_delta,
            &mut c.entry_flags,
            &mut c.frame_delta,
            &mut c.kflags,
            &mut c.kcount,
            &mut c.memcg,
            &mut c.node,
        ] {
            col.clear();
        }
        c.has_phys.clear();
        c.has_phys.resize(n.div_ceil(8), 0);
        let (mut prev_vpn, mut prev_frame) = (0u64, 0u64);
        for (i, p) in chunk.pages.iter().enumerate() {
            let vpn = p.vaddr / page_size;
            put(&mut c.vpn_delta, vpn.wrapping_sub(prev_vpn));
            prev_vpn = vpn;
            put(&mut c.entry_flags, p.entry.0 >> 55);
            let frame = p.entry.frame_bits();
            put(
                &mut c.frame_delta,
                zigzag(frame.wrapping_sub(prev_frame) as i64),
            );
            prev_frame = frame;
            if let Some(ph) = p.phys {
                c.has_phys[i / 8] |= 1 << (i % 8);
                put(&mut c.kflags, ph.flags.bits());
                put(&mut c.kcount, ph.count);
                put(&mut c.memcg, ph.memcg);
                put(&mut c.node, ph.node as u64);
            }
        }
        out.clear();
        let buf = std::mem::take(out);
        *out = postcard::to_extend(&*c, buf).expect("encoding into a Vec cannot fail");
    }
}

/// Encodes a chunk into a new buffer.
pub fn encode_pages(chunk: &PageChunk, page_size: u64) -> Vec<u8> {
    let mut out = Vec::new();
    PageEncoder::default().encode(chunk, page_size, &mut out);
    out
}

/// Decodes a chunk, checking that the columns agree. The error is a
/// sentence saying what is inconsistent.
pub fn decode_pages(bytes: &[u8]) -> Result<PageChunk, String> {
    let c: Columns = postcard::from_bytes(bytes).map_err(|e| format!("bad page chunk: {e}"))?;
    let n = c.pages as usize;
    if n > CHUNK_PAGES {
        return Err(format!(
            "page chunk of {n} pages, more than the {CHUNK_PAGES} a chunk may hold"
        ));
    }
    if c.page_size == 0 || !c.page_size.is_power_of_two() {
        return Err(format!("page chunk has page size {}", c.page_size));
    }
    // Every page takes at least a byte of each per-page column, and every
    // page with a physical side one of each physical column.
    let phys = c
        .has_phys
        .iter()
        .map(|b| b.count_ones() as usize)
        .sum::<usize>();
    let per_page = [&c.vpn_delta, &c.entry_flags, &c.frame_delta];
    let per_phys = [&c.kflags, &c.kcount, &c.memcg, &c.node];
    if c.has_phys.len() != n.div_ceil(8)
        || per_page.iter().any(|col| col.len() < n)
        || per_phys.iter().any(|col| col.len() < phys)
    {
        return Err("page chunk columns differ in length".into());
    }
    let mut vpns = Column::new("vpn_delta", &c.vpn_delta);
    let mut flags = Column::new("entry_flags", &c.entry_flags);
    let mut frames = Column::new("frame_delta", &c.frame_delta);
    let mut kflags = Column::new("kflags", &c.kflags);
    let mut kcount = Column::new("kcount", &c.kcount);
    let mut memcg = Column::new("memcg", &c.memcg);
    let mut node = Column::new("node", &c.node);
    let mut pages = Vec::with_capacity(n);
    let (mut vpn, mut frame) = (0u64, 0u64);
    for i in 0..n {
        let delta = vpns.next()?;
        if i > 0 && delta == 0 {
            return Err("page chunk repeats an address".into());
        }
        vpn = vpn.wrapping_add(delta);
        let vaddr = vpn
            .checked_mul(c.page_size)
            .ok_or("page chunk address overflows")?;
        let high = flags.next()?;
        if high >= 1 << 9 {
            return Err("page chunk has pagemap flags beyond bit 63".into());
        }
        frame = frame.wrapping_add(unzigzag(frames.next()?) as u64) & FRAME_MASK;
        let entry = PagemapEntry((high << 55) | frame);
        let phys = if c.has_phys[i / 8] & (1 << (i % 8)) != 0 {
            Some(PhysInfo {
                flags: KPageFlags::from_bits_retain(kflags.next()?),
                count: kcount.next()?,
                memcg: memcg.next()?,
                node: u16::try_from(node.next()?).map_err(|_| "page chunk node out of range")?,
            })
        } else {
            None
        };
        pages.push(PageRecord { vaddr, entry, phys });
    }
    for col in [&vpns, &flags, &frames, &kflags, &kcount, &memcg, &node] {
        col.done()?;
    }
    Ok(PageChunk {
        pid: c.pid,
        start_time: c.start_time,
        pages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::limits;
    use proptest::prelude::*;

    fn page(vaddr: u64, entry: u64, phys: Option<(u64, u64)>) -> PageRecord {
        PageRecord {
            vaddr,
            entry: PagemapEntry(entry),
            phys: phys.map(|(flags, count)| PhysInfo {
                flags: KPageFlags::from_bits_retain(flags),
                count,
                memcg: 77,
                node: 0,
            }),
        }
    }

    #[test]
    fn round_trip() {
        let chunk = PageChunk {
            pid: 42,
            start_time: 9,
            pages: vec![
                page(0x7000_0000_0000, (1 << 63) | 500, Some((0x1828, 1))),
                page(0x7000_0000_1000, (1 << 63) | 501, Some((0x1828, 2))),
                page(0x7000_0000_5000, (1 << 62) | (3 << 5) | 1, None),
                page(0x7000_0000_6000, (1 << 63) | 100, Some((0, 1))),
            ],
        };
        let bytes = encode_pages(&chunk, 4096);
        assert_eq!(decode_pages(&bytes).unwrap(), chunk);
    }

    #[test]
    fn varints() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put(&mut b, v);
            let mut c = Column::new("t", &b);
            assert_eq!(c.next().unwrap(), v);
            c.done().unwrap();
        }
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert!(Column::new("t", &[0xff; 11]).next().is_err());
        assert!(Column::new("t", &[0x80]).next().is_err());
    }

    /// The most pages a chunk may hold, each with the longest encoding
    /// of every column, fit the frame limit and come back; one more page
    /// is refused from the count alone.
    #[test]
    fn a_chunk_of_the_most_pages_round_trips() {
        let top = u64::MAX / 4096 * 4096;
        // Addresses far apart both ways (every other page delta wraps),
        // frames alternating between 0 and the top.
        let mut pages: Vec<PageRecord> = (0..limits::CHUNK_PAGES as u64)
            .map(|i| {
                let vaddr = if i % 2 == 0 { i * 4096 } else { top - i * 4096 };
                let frame = if i % 2 == 0 { FRAME_MASK } else { 0 };
                page(vaddr, (0x1ff << 55) | frame, Some((u64::MAX, u64::MAX)))
            })
            .collect();
        for p in pages.iter_mut() {
            p.phys.as_mut().unwrap().memcg = u64::MAX;
            p.phys.as_mut().unwrap().node = u16::MAX;
        }
        let chunk = PageChunk {
            pid: u32::MAX,
            start_time: u64::MAX,
            pages,
        };
        let raw = encode_pages(&chunk, 4096);
        assert!(
            raw.len() <= limits::PAGES_RAW as usize,
            "{} bytes",
            raw.len()
        );
        assert!(raw.len() > limits::CHUNK_PAGES * 50, "{} bytes", raw.len());
        assert_eq!(decode_pages(&raw).unwrap(), chunk);
        let mut over = chunk;
        over.pages.push(page(top, 1 << 63, None));
        let e = decode_pages(&encode_pages(&over, 4096)).unwrap_err();
        assert_eq!(
            e,
            "page chunk of 65537 pages, more than the 65536 a chunk may hold"
        );
    }

    /// A count the columns can't hold is refused before any page is
    /// decoded.
    #[test]
    fn a_count_beyond_the_columns_is_refused() {
        let chunk = PageChunk {
            pid: 1,
            start_time: 1,
            pages: vec![page(4096, 1 << 63, Some((1, 1))), page(8192, 1 << 63, None)],
        };
        let mut c: Columns = postcard::from_bytes(&encode_pages(&chunk, 4096)).unwrap();
        c.pages = 3;
        c.has_phys = vec![0b111];
        let e = decode_pages(&postcard::to_stdvec(&c).unwrap()).unwrap_err();
        assert_eq!(e, "page chunk columns differ in length");
    }

    #[test]
    fn contiguous_pages_compress_to_little() {
        let pages = (0..65536u64)
            .map(|i| {
                page(
                    0x7f00_0000_0000 + i * 4096,
                    (1 << 63) | (1 << 56) | (0x10_0000 + i),
                    Some((0x5828, 1)),
                )
            })
            .collect();
        let chunk = PageChunk {
            pid: 1,
            start_time: 1,
            pages,
        };
        let raw = encode_pages(&chunk, 4096);
        let packed = zstd::bulk::compress(&raw, 3).unwrap();
        assert!(
            packed.len() < 65536 / 8,
            "{} bytes for 64Ki pages",
            packed.len()
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_pages(&bytes);
        }

        #[test]
        fn arbitrary_chunks_round_trip(
            raw in proptest::collection::btree_map(0u64..1 << 30, (any::<u64>(), proptest::option::of((any::<u64>(), any::<u64>()))), 0..64)
        ) {
            let pages: Vec<PageRecord> = raw.into_iter().map(|(vpn, (e, ph))| page(vpn * 4096, e, ph)).collect();
            let chunk = PageChunk { pid: 3, start_time: 4, pages };
            prop_assert_eq!(decode_pages(&encode_pages(&chunk, 4096)).unwrap(), chunk);
        }
    }
}
