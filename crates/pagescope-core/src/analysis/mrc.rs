//! `analyze FILE mrc`: miss-ratio curves of a trace.
//!
//! LRU is exact for every memory size at once: Mattson's stack algorithm
//! gives each reference its stack distance (the number of distinct pages
//! touched since the same page was last touched, itself included), and a
//! reference hits in an LRU memory of `m` pages exactly when its distance
//! is at most `m`. Distances are counted with a Fenwick tree over the
//! times of each page's last reference; when the tree fills up it is
//! rebuilt over the live pages only, so it never holds more than twice
//! the distinct pages and each reference costs O(log M).
//!
//! FIFO and CLOCK have no stack property, so they are simulated at each
//! size reported.

use super::refs::{PageKey, TraceMaps};
use crate::format::TraceVisitor;
use crate::trace::{Mapping, ProcessEvent, Ref, TraceEnd, TraceHeader};
use crate::Result;
use std::collections::{HashMap, VecDeque};

/// Counts the stack distance of each reference of a stream of page ids.
#[derive(Debug, Default)]
pub struct StackDistance {
    tree: Vec<u32>,
    /// Per page id: its slot + 1, or 0 if never seen.
    last: Vec<u32>,
    /// Per slot: the page id whose last reference it is.
    slot_page: Vec<u32>,
    next: usize,
    /// `hist[d]`: references with stack distance `d` (1-based).
    pub hist: Vec<u64>,
    /// First references.
    pub cold: u64,
    /// All references.
    pub references: u64,
}

impl StackDistance {
    fn add(&mut self, mut i: usize, v: i32) {
        i += 1;
        while i <= self.tree.len() {
            self.tree[i - 1] = self.tree[i - 1].wrapping_add_signed(v);
            i += i & i.wrapping_neg();
        }
    }

    /// Sum of markers in slots `[0, i)`.
    fn prefix(&self, mut i: usize) -> u64 {
        let mut s = 0u64;
        while i > 0 {
            s += self.tree[i - 1] as u64;
            i -= i & i.wrapping_neg();
        }
        s
    }

    fn rebuild(&mut self, live: usize) {
        let size = (live * 2).max(1024);
        let mut order: Vec<(u32, u32)> = self
            .last
            .iter()
            .enumerate()
            .filter(|(_, &s)| s != 0)
            .map(|(p, &s)| (s - 1, p as u32))
            .collect();
        order.sort_unstable();
        self.tree = vec![0; size];
        self.slot_page = vec![0; size];
        for (new, &(_, page)) in order.iter().enumerate() {
            self.last[page as usize] = new as u32 + 1;
            self.slot_page[new] = page;
        }
        // O(n) Fenwick build: every slot below `order.len()` holds 1.
        for i in 0..size {
            if i < order.len() {
                self.tree[i] += 1;
            }
            let parent = i | (i + 1);
            if parent < size {
                let v = self.tree[i];
                self.tree[parent] += v;
            }
        }
        self.next = order.len();
    }

    /// Records a reference to page id `page`.
    pub fn push(&mut self, page: u32) {
        let p = page as usize;
        if p >= self.last.len() {
            self.last.resize(p + 1, 0);
        }
        if self.next >= self.tree.len() {
            let live = self.last.iter().filter(|&&s| s != 0).count();
            self.rebuild(live + 1);
        }
        self.references += 1;
        let prev = self.last[p];
        if prev == 0 {
            self.cold += 1;
        } else {
            let prev = prev as usize - 1;
            // Distinct pages whose last reference is after `prev`, plus
            // this page itself.
            let d = (self.prefix(self.next) - self.prefix(prev + 1)) as usize + 1;
            if d >= self.hist.len() {
                self.hist.resize(d + 1, 0);
            }
            self.hist[d] += 1;
            self.add(prev, -1);
        }
        let slot = self.next;
        self.next += 1;
        self.add(slot, 1);
        self.slot_page[slot] = page;
        self.last[p] = slot as u32 + 1;
    }

    /// LRU misses in a memory of `pages` pages (cold misses included).
    pub fn lru_misses(&self, pages: u64) -> u64 {
        let hits: u64 = self
            .hist
            .iter()
            .take((pages as usize).saturating_add(1).min(self.hist.len()))
            .sum();
        self.references - hits
    }
}

/// FIFO misses of `stream` in a memory of `pages` pages.
pub fn fifo_misses(stream: &[u32], distinct: usize, pages: usize) -> u64 {
    let mut resident = vec![false; distinct];
    let mut queue = VecDeque::with_capacity(pages);
    let mut misses = 0;
    for &p in stream {
        if resident[p as usize] {
            continue;
        }
        misses += 1;
        if queue.len() == pages {
            let old: u32 = queue.pop_front().expect("full");
            resident[old as usize] = false;
        }
        queue.push_back(p);
        resident[p as usize] = true;
    }
    misses
}

/// CLOCK (second chance) misses of `stream` in a memory of `pages` pages.
pub fn clock_misses(stream: &[u32], distinct: usize, pages: usize) -> u64 {
    const NONE: u32 = u32::MAX;
    let mut frame_of = vec![NONE; distinct];
    let mut frames: Vec<(u32, bool)> = Vec::with_capacity(pages);
    let mut hand = 0;
    let mut misses = 0;
    for &p in stream {
        let f = frame_of[p as usize];
        if f != NONE {
            frames[f as usize].1 = true;
            continue;
        }
        misses += 1;
        if frames.len() < pages {
            frame_of[p as usize] = frames.len() as u32;
            frames.push((p, false));
            continue;
        }
        loop {
            let (q, referenced) = frames[hand];
            if referenced {
                frames[hand].1 = false;
                hand = (hand + 1) % pages;
            } else {
                frame_of[q as usize] = NONE;
                frames[hand] = (p, false);
                frame_of[p as usize] = hand as u32;
                hand = (hand + 1) % pages;
                break;
            }
        }
    }
    misses
}

/// One point of the curves.
#[derive(Clone, Debug, PartialEq)]
pub struct MrcPoint {
    /// Memory size in pages.
    pub pages: u64,
    /// LRU miss ratio.
    pub lru: f64,
    /// FIFO miss ratio.
    pub fifo: f64,
    /// CLOCK miss ratio.
    pub clock: f64,
}

/// The `mrc` analysis, fed by [`crate::format::read_trace`].
#[derive(Debug, Default)]
pub struct Mrc {
    /// Header and mappings.
    pub maps: TraceMaps,
    ids: HashMap<PageKey, u32>,
    stream: Vec<u32>,
    stack: StackDistance,
    pid: Option<u32>,
}

impl Mrc {
    /// An empty analysis.
    pub fn new() -> Mrc {
        Mrc::default()
    }

    /// An empty analysis of the references of process `pid` alone.
    pub fn of_process(pid: u32) -> Mrc {
        let mut m = Mrc {
            pid: Some(pid),
            ..Mrc::default()
        };
        m.maps.selected = Some(pid);
        m
    }

    /// References seen.
    pub fn references(&self) -> u64 {
        self.stack.references
    }

    /// Distinct pages seen.
    pub fn distinct_pages(&self) -> u64 {
        self.ids.len() as u64
    }

    /// Cold (first) references.
    pub fn cold(&self) -> u64 {
        self.stack.cold
    }

    /// The memory sizes reported: powers of two and the points halfway
    /// between, from one page to past the distinct pages, and the
    /// distinct page count itself.
    pub fn sizes(&self) -> Vec<u64> {
        let top = self.distinct_pages().max(1);
        let mut v = Vec::new();
        let mut p = 1u64;
        while p <= top.saturating_mul(2) {
            v.push(p);
            if p >= 2 {
                v.push(p + p / 2);
            }
            p *= 2;
        }
        v.push(top);
        v.sort_unstable();
        v.dedup();
        v.retain(|&s| s <= top.saturating_mul(2));
        v
    }

    /// The curves at [`Mrc::sizes`].
    pub fn curve(&self) -> Vec<MrcPoint> {
        let n = self.references().max(1) as f64;
        let distinct = self.ids.len();
        self.sizes()
            .into_iter()
            .map(|pages| MrcPoint {
                pages,
                lru: self.stack.lru_misses(pages) as f64 / n,
                fifo: fifo_misses(&self.stream, distinct, pages as usize) as f64 / n,
                clock: clock_misses(&self.stream, distinct, pages as usize) as f64 / n,
            })
            .collect()
    }
}

impl TraceVisitor for Mrc {
    fn header(&mut self, header: &TraceHeader) -> Result<()> {
        self.maps.set_header(header);
        Ok(())
    }

    fn mapping(&mut self, m: &Mapping) -> Result<()> {
        self.maps.add(m);
        Ok(())
    }

    fn end(&mut self, e: &TraceEnd) -> Result<()> {
        self.maps.end = Some(e.clone());
        Ok(())
    }

    fn event(&mut self, e: &ProcessEvent) -> Result<()> {
        self.maps.event(e);
        Ok(())
    }

    fn refs(&mut self, refs: &[Ref]) -> Result<()> {
        for r in refs.iter().filter(|r| self.pid.is_none_or(|p| p == r.pid)) {
            let key = self.maps.key(r);
            let next = self.ids.len() as u32;
            let id = *self.ids.entry(key).or_insert(next);
            self.stream.push(id);
            self.stack.push(id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stack distance by its definition, for checking.
    fn naive_lru_misses(stream: &[u32], pages: usize) -> u64 {
        let mut stack: Vec<u32> = Vec::new();
        let mut misses = 0;
        for &p in stream {
            match stack.iter().position(|&q| q == p) {
                Some(i) if stack.len() - i <= pages => {
                    stack.remove(i);
                }
                Some(i) => {
                    misses += 1;
                    stack.remove(i);
                }
                None => misses += 1,
            }
            stack.push(p);
        }
        misses
    }

    #[test]
    fn cyclic_scan_is_all_misses_below_its_size() {
        let n = 100u32;
        let stream: Vec<u32> = (0..5).flat_map(|_| 0..n).collect();
        let mut s = StackDistance::default();
        for &p in &stream {
            s.push(p);
        }
        assert_eq!(s.cold, n as u64);
        for m in [1, 50, 99] {
            assert_eq!(s.lru_misses(m), stream.len() as u64);
            assert_eq!(
                fifo_misses(&stream, n as usize, m as usize),
                stream.len() as u64
            );
        }
        for m in [100, 101, 1000] {
            assert_eq!(s.lru_misses(m), n as u64);
        }
    }

    #[test]
    fn matches_the_definition_through_rebuilds() {
        // A pseudo-random stream over 3000 pages: long enough to rebuild
        // the tree many times.
        let mut x = 12345u64;
        let stream: Vec<u32> = (0..40_000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let hot = (x >> 33) % 10 < 7;
                ((x >> 40) % if hot { 200 } else { 3000 }) as u32
            })
            .collect();
        let mut s = StackDistance::default();
        for &p in &stream {
            s.push(p);
        }
        for m in [1, 7, 64, 199, 200, 500, 2999, 3000] {
            assert_eq!(
                s.lru_misses(m),
                naive_lru_misses(&stream, m as usize),
                "m={m}"
            );
        }
    }

    #[test]
    fn clock_and_fifo_on_a_small_example() {
        // 1 2 3 1 4 with 3 frames: FIFO evicts 1 for 4; CLOCK gives 1 a
        // second chance and evicts 2.
        let s = [1, 2, 3, 1, 4, 1];
        assert_eq!(fifo_misses(&s, 5, 3), 5);
        assert_eq!(clock_misses(&s, 5, 3), 4);
    }
}
