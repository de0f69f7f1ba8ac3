//! Mattson stack distances, counted with a bitmap of markers and a
//! Fenwick tree over its blocks.

/// Slots per block of the bitmap (8 words of 64 bits).
const BLOCK_WORDS: usize = 8;
const BLOCK_SLOTS: usize = 64 * BLOCK_WORDS;
/// The fewest slots the bitmap has (small in tests, so that they rebuild
/// it often).
const MIN_SLOTS: usize = if cfg!(test) { 2 * BLOCK_SLOTS } else { 1 << 16 };

/// Counts the stack distance of each reference of a stream of page ids:
/// the number of distinct pages touched since the same page was last
/// touched, itself included. A reference hits in an LRU memory of `m`
/// pages exactly when its distance is at most `m`.
///
/// Each page's last reference holds a marker, one bit in a bitmap of
/// slots in time order; the distance is the count of markers after the
/// page's own, plus one. A Fenwick tree keeps the markers of each whole
/// block of 512 slots, so a count is a walk of that small tree (one entry
/// per block: it stays in the nearest cache), the markers of the block's
/// words before the slot's (a byte per word, kept as bits are set and
/// cleared, so eight counts sum in a few instructions rather than a
/// popcount each: the generic x86-64 target has no POPCNT) and one
/// popcount; a new reference, always in the last block, only sets its
/// bit.
/// When the slots run out they are rebuilt over the live markers only
/// (each page's new slot is its marker's rank in the bitmap), so there
/// are never more than about four times the distinct pages and each
/// reference costs O(log(M / 512)). What a reference touches at random
/// (its page's slot, its distance's count: 4 bytes a page each) stays in
/// a 512 KiB cache up to about 60 000 pages.
#[derive(Debug, Default)]
pub struct StackDistance {
    /// One bit per slot: the slot holds its page's last reference.
    bits: Vec<u64>,
    /// Per block, a byte per word: the markers in that word of `bits`.
    counts: Vec<u64>,
    /// Fenwick tree of the markers per block, for the blocks before the
    /// one `next` is in (whole blocks); that block's are in `bits` alone.
    blocks: Vec<u32>,
    /// Per page id: its slot + 1, or 0 if never seen.
    last: Vec<u32>,
    next: usize,
    /// Pages seen (one marker each).
    live: u64,
    /// `hist[d]`: references with stack distance `d` (1-based), modulo
    /// 2^32; `wraps[d]` counts 2^32s.
    hist: Vec<u32>,
    wraps: rustc_hash::FxHashMap<usize, u64>,
    /// First references.
    pub cold: u64,
    /// All references.
    pub references: u64,
}

impl StackDistance {
    /// Adds `v` (wrapping: `u32::MAX` takes one away) to block `b`.
    #[inline]
    fn add(&mut self, b: usize, v: u32) {
        let mut i = b + 1;
        let n = self.blocks.len();
        while i <= n {
            self.blocks[i - 1] = self.blocks[i - 1].wrapping_add(v);
            i += i & i.wrapping_neg();
        }
    }

    /// Markers in blocks `[0, b)`.
    #[inline]
    fn blocks_before(&self, mut b: usize) -> u64 {
        let mut s = 0u32;
        while b > 0 {
            s = s.wrapping_add(self.blocks[b - 1]);
            b &= b - 1;
        }
        s as u64
    }

    /// Markers in slots `[0, slot]`.
    #[inline]
    fn markers_through(&self, slot: usize) -> u64 {
        let w = slot / 64;
        let b = w / BLOCK_WORDS;
        // The counts of the block's words before `w`: bytes summed in
        // pairs (at most 128 each), then the four pairs at once.
        let below = self.counts[b] & ((1u64 << (8 * (w % BLOCK_WORDS))) - 1);
        let words = sum_bytes(below);
        let mask = u64::MAX >> (63 - slot % 64);
        self.blocks_before(b) + words + (self.bits[w] & mask).count_ones() as u64
    }

    /// Adds `v` (1, or `u64::MAX` to take one away) to the count of the
    /// word that holds `slot`.
    #[inline]
    fn count(&mut self, slot: usize, v: u64) {
        let w = slot / 64;
        let lane = 8 * (w % BLOCK_WORDS);
        let c = &mut self.counts[w / BLOCK_WORDS];
        *c = c.wrapping_add(v << lane);
    }

    fn rebuild(&mut self) {
        // Room for three times as many references again as there are
        // live pages: a rebuild (a pass over the pages and the bitmap)
        // every `3 x live` references or fewer.
        let size = (self.live as usize * 4 + BLOCK_SLOTS)
            .max(MIN_SLOTS)
            .next_multiple_of(BLOCK_SLOTS);
        // Each live marker moves to its rank among the markers.
        let mut before = Vec::with_capacity(self.bits.len());
        let mut live = 0u32;
        for w in &self.bits {
            before.push(live);
            live += w.count_ones();
        }
        for l in self.last.iter_mut().filter(|l| **l != 0) {
            let s = *l as usize - 1;
            let below = self.bits[s / 64] & ((1u64 << (s % 64)) - 1);
            *l = before[s / 64] + below.count_ones() + 1;
        }
        let live = live as usize;
        self.bits = vec![0; size / 64];
        for w in 0..live / 64 {
            self.bits[w] = u64::MAX;
        }
        if live % 64 != 0 {
            self.bits[live / 64] = (1u64 << (live % 64)) - 1;
        }
        self.counts = self
            .bits
            .chunks(BLOCK_WORDS)
            .map(|ws| {
                ws.iter()
                    .enumerate()
                    .map(|(i, w)| (w.count_ones() as u64) << (8 * i))
                    .sum()
            })
            .collect();
        // O(n) Fenwick build: every whole block below `live` holds 512.
        let n = size / BLOCK_SLOTS;
        self.blocks = vec![0; n];
        for i in 0..n {
            if i < live / BLOCK_SLOTS {
                self.blocks[i] += BLOCK_SLOTS as u32;
            }
            let parent = i | (i + 1);
            if parent < n {
                let v = self.blocks[i];
                self.blocks[parent] += v;
            }
        }
        self.next = live;
    }

    /// Records a reference to page id `page`; returns its stack distance,
    /// or 0 for a first reference.
    #[inline]
    pub fn push(&mut self, page: u32) -> u64 {
        let p = page as usize;
        if p >= self.last.len() {
            self.last.resize((p + 1).max(self.last.len() * 2), 0);
        }
        if self.next >= self.bits.len() * 64 {
            self.rebuild();
        }
        self.references += 1;
        let prev = self.last[p];
        let d = if prev == 0 {
            self.cold += 1;
            self.live += 1;
            0
        } else {
            let prev = prev as usize - 1;
            // Markers after `prev` (every live page has one, this page's
            // at `prev`), plus this page itself.
            let d = self.live - self.markers_through(prev) + 1;
            let i = d as usize;
            if i >= self.hist.len() {
                self.hist.resize(i + 1, 0);
            }
            self.hist[i] = self.hist[i].wrapping_add(1);
            if self.hist[i] == 0 {
                *self.wraps.entry(i).or_default() += 1 << 32;
            }
            self.bits[prev / 64] &= !(1 << (prev % 64));
            self.count(prev, u64::MAX);
            if prev / BLOCK_SLOTS < self.next / BLOCK_SLOTS {
                self.add(prev / BLOCK_SLOTS, u32::MAX);
            }
            d
        };
        let slot = self.next;
        self.bits[slot / 64] |= 1 << (slot % 64);
        self.count(slot, 1);
        self.last[p] = slot as u32 + 1;
        self.next += 1;
        if self.next % BLOCK_SLOTS == 0 {
            // A block is whole: its markers go into the tree.
            let b = slot / BLOCK_SLOTS;
            self.add(b, sum_bytes(self.counts[b]) as u32);
        }
        d
    }

    /// Records references to each page of `pages` in turn. Each page's
    /// slot is read a few references before its turn: the reads of
    /// pages met at random miss the caches, and issued ahead they wait
    /// side by side rather than one after the other.
    pub fn push_all(&mut self, pages: &[u32]) {
        const AHEAD: usize = 8;
        for (i, &p) in pages.iter().enumerate() {
            if let Some(&q) = pages.get(i + AHEAD) {
                std::hint::black_box(self.last.get(q as usize).copied());
            }
            self.push(p);
        }
    }

    /// References with a stack distance of at most `d` (the hits of an
    /// LRU memory of `d` pages).
    pub fn hits_within(&self, d: u64) -> u64 {
        let d = (d as usize).saturating_add(1).min(self.hist.len());
        let low: u64 = self.hist[..d].iter().map(|&n| n as u64).sum();
        low + self
            .wraps
            .iter()
            .filter(|(&i, _)| i < d)
            .map(|(_, n)| n)
            .sum::<u64>()
    }

    /// References with stack distance `d` (1-based).
    pub fn at(&self, d: u64) -> u64 {
        let i = d as usize;
        self.hist.get(i).map_or(0, |&n| n as u64) + self.wraps.get(&i).copied().unwrap_or(0)
    }

    /// LRU misses in a memory of `pages` pages (cold misses included).
    pub fn lru_misses(&self, pages: u64) -> u64 {
        self.references - self.hits_within(pages)
    }
}

/// The sum of the eight bytes of `x`, each at most 64.
#[inline]
fn sum_bytes(x: u64) -> u64 {
    const LOW: u64 = 0x00FF_00FF_00FF_00FF;
    let pairs = (x & LOW) + ((x >> 8) & LOW);
    pairs.wrapping_mul(0x0001_0001_0001_0001) >> 48
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The stack distance of each reference by its definition.
    fn naive(stream: &[u32]) -> Vec<u64> {
        let mut stack: Vec<u32> = Vec::new();
        stream
            .iter()
            .map(|&p| match stack.iter().rposition(|&q| q == p) {
                Some(i) => {
                    stack.remove(i);
                    stack.push(p);
                    (stack.len() - i) as u64
                }
                None => {
                    stack.push(p);
                    0
                }
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        /// Every reference's distance is the definition's, through many
        /// rebuilds (the test's bitmap has 1 024 slots at least) and
        /// whole blocks, with few pages (long reuse) and many.
        #[test]
        fn distances_are_the_definitions(
            pages in 1u32..1500,
            picks in prop::collection::vec(any::<u32>(), 0..5000),
        ) {
            let stream: Vec<u32> = picks.iter().map(|x| x % pages).collect();
            let mut s = StackDistance::default();
            let got: Vec<u64> = stream.iter().map(|&p| s.push(p)).collect();
            prop_assert_eq!(got, naive(&stream));
        }
    }

    #[test]
    fn scans_and_repeats() {
        // A cyclic scan of 700 pages, 5 times: every reuse at 700.
        let mut s = StackDistance::default();
        for _ in 0..5 {
            for p in 0..700 {
                s.push(p);
            }
        }
        assert_eq!((s.cold, s.references), (700, 3500));
        assert_eq!(s.at(700), 2800);
        assert_eq!(s.lru_misses(699), 3500);
        assert_eq!(s.lru_misses(700), 700);
        // One page again and again: distance 1.
        let mut s = StackDistance::default();
        for _ in 0..5000 {
            s.push(3);
        }
        assert_eq!(s.at(1), 4999);
    }
}
