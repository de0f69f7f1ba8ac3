//! A set of page frame numbers whose memory follows the frames it holds,
//! not the highest one: frames are kept per block of 32 768 (128 MiB of
//! 4 KiB pages), each block as a sorted list of 16-bit offsets while it
//! holds few, as a bitmap (4 KiB) once the list would be larger (the
//! layout of roaring bitmaps). A bitmap sized by the highest frame would
//! take 256 MiB for one frame at 8 TiB, and a snapshot can name any
//! frame.

use std::collections::HashMap;

/// Frames per block.
const BLOCK_BITS: u32 = 15;
/// Offsets a block lists before it turns into a bitmap: 2048 of 2 bytes
/// take as much as the bitmap.
const LIST_MAX: usize = 1 << 11;
/// Blocks found by index (the first 8 TiB of 4 KiB frames); higher ones
/// by hash.
const INDEXED_BLOCKS: u64 = 1 << 16;

#[derive(Debug)]
enum Block {
    List(Vec<u16>),
    Bits(Box<[u64; 1 << (BLOCK_BITS - 6)]>),
}

impl Block {
    /// Adds `offset`; true if it was not there.
    fn insert(&mut self, offset: u16) -> bool {
        match self {
            Block::List(list) => {
                let Err(at) = list.binary_search(&offset) else {
                    return false;
                };
                if list.len() < LIST_MAX {
                    list.insert(at, offset);
                    return true;
                }
                let mut bits = Box::new([0u64; 1 << (BLOCK_BITS - 6)]);
                for &o in list.iter() {
                    bits[o as usize / 64] |= 1 << (o % 64);
                }
                *self = Block::Bits(bits);
                self.insert(offset)
            }
            Block::Bits(bits) => {
                let (word, bit) = (offset as usize / 64, 1u64 << (offset % 64));
                let fresh = bits[word] & bit == 0;
                bits[word] |= bit;
                fresh
            }
        }
    }
}

/// A set of page frame numbers.
#[derive(Debug, Default)]
pub struct PfnSet {
    indexed: Vec<Option<Block>>,
    far: HashMap<u64, Block>,
    len: u64,
}

impl PfnSet {
    /// An empty set.
    pub fn new() -> PfnSet {
        PfnSet::default()
    }

    /// Adds `pfn`; true if it was not in the set.
    pub fn insert(&mut self, pfn: u64) -> bool {
        let (block, offset) = (pfn >> BLOCK_BITS, (pfn & ((1 << BLOCK_BITS) - 1)) as u16);
        let fresh_block = || Block::List(Vec::new());
        let b = if block < INDEXED_BLOCKS {
            let i = block as usize;
            if i >= self.indexed.len() {
                self.indexed.resize_with(i + 1, || None);
            }
            self.indexed[i].get_or_insert_with(fresh_block)
        } else {
            self.far.entry(block).or_insert_with(fresh_block)
        };
        let fresh = b.insert(offset);
        self.len += u64::from(fresh);
        fresh
    }

    /// Frames in the set.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// Dense runs (lists that turn into bitmaps), scattered frames and
    /// frames past the indexed blocks, against a hash set.
    #[test]
    fn dense_sparse_and_far_frames() {
        let mut set = PfnSet::new();
        let mut truth = HashSet::new();
        let frames = (0..40_000u64)
            .chain((0..100_000).map(|i| i * 7919 % (1 << 31)))
            .chain((0..1000).map(|i| (1 << 40) + i * 3))
            .chain([u64::MAX, 0, 5, u64::MAX]);
        for pfn in frames {
            assert_eq!(set.insert(pfn), truth.insert(pfn), "{pfn}");
        }
        assert_eq!(set.len(), truth.len() as u64);
    }

    /// One frame per block, all over the indexed range: a few MiB, where
    /// a bitmap of the highest frame would take 256 MiB.
    #[test]
    fn scattered_frames_take_little() {
        let mut set = PfnSet::new();
        for block in 0..INDEXED_BLOCKS {
            assert!(set.insert((block << BLOCK_BITS) + 17));
        }
        let lists = set
            .indexed
            .iter()
            .flatten()
            .filter(|b| matches!(b, Block::List(l) if l.len() == 1))
            .count() as u64;
        assert_eq!(lists, INDEXED_BLOCKS);
    }

    proptest! {
        #[test]
        fn as_a_hash_set(frames in proptest::collection::vec(
            prop_oneof![0u64..70_000, 0u64..1 << 33, any::<u64>()], 0..3000)
        ) {
            let mut set = PfnSet::new();
            let mut truth = HashSet::new();
            for pfn in frames {
                prop_assert_eq!(set.insert(pfn), truth.insert(pfn));
            }
            prop_assert_eq!(set.len(), truth.len() as u64);
        }
    }
}
