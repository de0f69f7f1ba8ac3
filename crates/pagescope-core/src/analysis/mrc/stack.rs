//! Mattson stack distances, counted with a Fenwick tree.

/// Counts the stack distance of each reference of a stream of page ids:
/// the number of distinct pages touched since the same page was last
/// touched, itself included. A reference hits in an LRU memory of `m`
/// pages exactly when its distance is at most `m`.
///
/// Each page's last reference holds a marker in a slot of a Fenwick tree,
/// slots in time order; the distance is the count of markers after the
/// page's own, plus one. When the slots run out the tree is rebuilt over
/// the live markers only, so it never holds more than twice the distinct
/// pages and each reference costs O(log M).
#[derive(Debug, Default)]
pub struct StackDistance {
    tree: Vec<u32>,
    /// Per page id: its slot + 1, or 0 if never seen.
    last: Vec<u32>,
    /// Per slot: the page id whose reference it was.
    slot_page: Vec<u32>,
    next: usize,
    /// Pages seen (one marker each).
    live: u64,
    /// `hist[d]`: references with stack distance `d` (1-based).
    pub hist: Vec<u64>,
    /// First references.
    pub cold: u64,
    /// All references.
    pub references: u64,
}

impl StackDistance {
    #[inline]
    fn add(&mut self, mut i: usize, v: u32) {
        i += 1;
        let n = self.tree.len();
        while i <= n {
            self.tree[i - 1] = self.tree[i - 1].wrapping_add(v);
            i += i & i.wrapping_neg();
        }
    }

    /// Sum of markers in slots `[0, i)`.
    #[inline]
    fn prefix(&self, mut i: usize) -> u64 {
        let mut s = 0u32;
        while i > 0 {
            s = s.wrapping_add(self.tree[i - 1]);
            i &= i - 1;
        }
        s as u64
    }

    fn rebuild(&mut self) {
        // Room for as many references again as there are live pages, and
        // at least 2^16: a rebuild every `live` references or fewer.
        let size = (self.live as usize * 2 + 2).max(1 << 16);
        let mut live = 0;
        for slot in 0..self.next {
            let page = self.slot_page[slot];
            if self.last[page as usize] == slot as u32 + 1 {
                self.slot_page[live] = page;
                self.last[page as usize] = live as u32 + 1;
                live += 1;
            }
        }
        self.slot_page.resize(size, 0);
        self.tree = vec![0; size];
        // O(n) Fenwick build: every slot below `live` holds 1.
        for i in 0..size {
            if i < live {
                self.tree[i] += 1;
            }
            let parent = i | (i + 1);
            if parent < size {
                let v = self.tree[i];
                self.tree[parent] += v;
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
        if self.next >= self.tree.len() {
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
            let d = self.live - self.prefix(prev + 1) + 1;
            let i = d as usize;
            if i >= self.hist.len() {
                self.hist.resize(i + 1, 0);
            }
            self.hist[i] += 1;
            self.add(prev, u32::MAX);
            d
        };
        let slot = self.next;
        self.next += 1;
        self.add(slot, 1);
        self.slot_page[slot] = page;
        self.last[p] = slot as u32 + 1;
        d
    }

    /// References with a stack distance of at most `d` (the hits of an
    /// LRU memory of `d` pages).
    pub fn hits_within(&self, d: u64) -> u64 {
        self.hist
            .iter()
            .take((d as usize).saturating_add(1).min(self.hist.len()))
            .sum()
    }

    /// LRU misses in a memory of `pages` pages (cold misses included).
    pub fn lru_misses(&self, pages: u64) -> u64 {
        self.references - self.hits_within(pages)
    }
}
