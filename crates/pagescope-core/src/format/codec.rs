//! The columnar encoding of a [`PageChunk`].
//!
//! Pages are stored column by column, each column chosen so that zstd sees
//! long runs of equal bytes: virtual page numbers as deltas (1 for
//! consecutive pages), pagemap flag bits 55-63 on their own, frame bits
//! (PFN or swap entry) as signed deltas (1 for physically contiguous
//! pages), then the kpageflags, kpagecount, memcg and node columns for the
//! pages that have a physical side. postcard writes every integer as a
//! varint, so the common deltas take one byte before compression.

use crate::kpageflags::KPageFlags;
use crate::model::{PageChunk, PageRecord, PhysInfo};
use crate::pagemap::{PagemapEntry, FRAME_MASK};
use serde::{Deserialize, Serialize};

/// The stored form of a chunk.
#[derive(Serialize, Deserialize, Default)]
struct Columns {
    pid: u32,
    start_time: u64,
    page_size: u64,
    vpn_delta: Vec<u64>,
    entry_flags: Vec<u16>,
    frame_delta: Vec<i64>,
    /// One bit per page, LSB first: the page has a physical side.
    has_phys: Vec<u8>,
    kflags: Vec<u64>,
    kcount: Vec<u64>,
    memcg: Vec<u64>,
    node: Vec<u16>,
}

/// Encodes a chunk. `page_size` turns addresses into page numbers.
pub fn encode_pages(chunk: &PageChunk, page_size: u64) -> Vec<u8> {
    let n = chunk.pages.len();
    let mut c = Columns {
        pid: chunk.pid,
        start_time: chunk.start_time,
        page_size,
        vpn_delta: Vec::with_capacity(n),
        entry_flags: Vec::with_capacity(n),
        frame_delta: Vec::with_capacity(n),
        has_phys: vec![0; n.div_ceil(8)],
        ..Columns::default()
    };
    let (mut prev_vpn, mut prev_frame) = (0u64, 0u64);
    for (i, p) in chunk.pages.iter().enumerate() {
        let vpn = p.vaddr / page_size;
        c.vpn_delta.push(vpn.wrapping_sub(prev_vpn));
        prev_vpn = vpn;
        c.entry_flags.push((p.entry.0 >> 55) as u16);
        let frame = p.entry.frame_bits();
        c.frame_delta.push(frame.wrapping_sub(prev_frame) as i64);
        prev_frame = frame;
        if let Some(ph) = p.phys {
            c.has_phys[i / 8] |= 1 << (i % 8);
            c.kflags.push(ph.flags.bits());
            c.kcount.push(ph.count);
            c.memcg.push(ph.memcg);
            c.node.push(ph.node);
        }
    }
    postcard::to_stdvec(&c).expect("encoding into a Vec cannot fail")
}

/// Decodes a chunk, checking that the columns agree. The error is a
/// sentence saying what is inconsistent.
pub fn decode_pages(bytes: &[u8]) -> Result<PageChunk, String> {
    let c: Columns = postcard::from_bytes(bytes).map_err(|e| format!("bad page chunk: {e}"))?;
    let n = c.vpn_delta.len();
    if c.entry_flags.len() != n || c.frame_delta.len() != n || c.has_phys.len() != n.div_ceil(8) {
        return Err("page chunk columns differ in length".into());
    }
    if c.page_size == 0 || !c.page_size.is_power_of_two() {
        return Err(format!("page chunk has page size {}", c.page_size));
    }
    let phys_count: usize = c.has_phys.iter().map(|b| b.count_ones() as usize).sum();
    if [c.kflags.len(), c.kcount.len(), c.memcg.len(), c.node.len()]
        .iter()
        .any(|&l| l != phys_count)
    {
        return Err("page chunk physical columns differ in length".into());
    }
    let mut pages = Vec::with_capacity(n);
    let (mut vpn, mut frame, mut k) = (0u64, 0u64, 0usize);
    for i in 0..n {
        vpn = vpn.wrapping_add(c.vpn_delta[i]);
        frame = frame.wrapping_add(c.frame_delta[i] as u64) & FRAME_MASK;
        let vaddr = vpn
            .checked_mul(c.page_size)
            .ok_or("page chunk address overflows")?;
        if i > 0 && c.vpn_delta[i] == 0 {
            return Err("page chunk repeats an address".into());
        }
        let entry = PagemapEntry(((c.entry_flags[i] as u64) << 55) | frame);
        let phys = if c.has_phys[i / 8] & (1 << (i % 8)) != 0 {
            let ph = PhysInfo {
                flags: KPageFlags::from_bits_retain(c.kflags[k]),
                count: c.kcount[k],
                memcg: c.memcg[k],
                node: c.node[k],
            };
            k += 1;
            Some(ph)
        } else {
            None
        };
        pages.push(PageRecord { vaddr, entry, phys });
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
