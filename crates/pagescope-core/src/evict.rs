//! The policy of `pagescope trace`'s eviction, apart from its mechanism:
//! the pool of pages let into the program (FIFO replacement, in batches),
//! and the plan that turns the pages to evict into runs, each one call
//! of the tracer (`UFFDIO_MOVE` or `UFFDIO_COPY` of a run of neighbours,
//! `madvise` of a run of shared memory). `pagescope-linux` executes the
//! plans; nothing here touches a process.
//!
//! A page is named by its address space (a key the tracer gives each
//! traced address space) and its address: `(space, address)`.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;

/// A page of a traced program: its address space's key, and its address.
pub type Page = (u32, u64);

/// The most pages in one run of a plan ([`plan`], [`neighbour_runs`]).
pub const MAX_RUN: usize = 4096;

/// The pages that leave a full pool together: an eighth of it, at most
/// 64. One eviction per fault would cost one call in the mover per page;
/// in a batch, a run of neighbouring pages goes with one call.
pub fn evict_batch(cap: usize) -> usize {
    (cap / 8).clamp(1, 64)
}

/// The pool: the pages let into the program, FIFO over every traced
/// address space. Entries of pages that left by other means (unmapped,
/// moved) are skipped when they reach the front.
#[derive(Debug, Default)]
pub struct Pool {
    cap: usize,
    /// Keep the replacement order (a trace); a sampler evicts at its
    /// boundaries only, and has no order to keep.
    ordered: bool,
    fifo: VecDeque<(u32, u64, u64)>,
    /// page -> (generation, writable)
    live: HashMap<Page, (u64, bool)>,
    gen: u64,
}

/// The pages a full pool gives up ([`Pool::shrink`]), oldest first, each
/// with what the pool knew of it, to be taken back by [`Pool::keep`] if
/// it can't leave now.
#[derive(Debug, Default)]
pub struct Shrink {
    victims: Vec<(Page, u64, bool)>,
}

impl Shrink {
    /// The pages to evict, sorted (the order [`plan`] takes).
    pub fn pages(&self) -> Vec<Page> {
        let mut pages: Vec<Page> = self.victims.iter().map(|v| v.0).collect();
        pages.sort_unstable();
        pages
    }
}

impl Pool {
    /// An empty pool of `cap` pages; `ordered`: keep the replacement
    /// order (without, [`Pool::shrink`] finds nothing to evict).
    pub fn new(cap: usize, ordered: bool) -> Pool {
        Pool {
            cap,
            ordered,
            ..Pool::default()
        }
    }

    /// Its size in pages.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The pages in it.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether it holds no page.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Whether `page` is in it, and if so whether it may be written (a
    /// page let in for a read is write-protected until its first write).
    pub fn writable(&self, page: Page) -> Option<bool> {
        self.live.get(&page).map(|&(_, w)| w)
    }

    /// Lets `page` in (again: it goes to the back).
    pub fn insert(&mut self, page: Page, writable: bool) {
        self.gen += 1;
        let gen = self.gen;
        self.live.insert(page, (gen, writable));
        if self.ordered {
            self.fifo.push_back((page.0, page.1, gen));
        }
    }

    /// Marks `page`, in the pool, writable; it keeps its place.
    pub fn opened(&mut self, page: Page) {
        if let Some(e) = self.live.get_mut(&page) {
            e.1 = true;
        }
    }

    /// Takes `page` out (it left by other means); whether it was in.
    pub fn remove(&mut self, page: Page) -> bool {
        self.live.remove(&page).is_some()
    }

    /// Takes out the pages of space `key` in `[start, end)`.
    pub fn remove_range(&mut self, key: u32, start: u64, end: u64) {
        self.live
            .retain(|&(k, p), _| k != key || p < start || p >= end);
    }

    /// The pages of space `key` in `[from, from + len)` moved to `to`
    /// (`mremap`): they stay in, at their new addresses, at the back.
    pub fn remap(&mut self, key: u32, from: u64, to: u64, len: u64) {
        let moved: Vec<(Page, bool)> = self
            .live
            .iter()
            .filter(|(&(k, p), _)| k == key && p >= from && p < from + len)
            .map(|(&page, &(_, w))| (page, w))
            .collect();
        for ((k, p), w) in moved {
            self.live.remove(&(k, p));
            self.insert((k, p - from + to), w);
        }
    }

    /// Empties it.
    pub fn clear(&mut self) {
        self.live.clear();
    }

    /// The pages in it for which `pick` holds, sorted: the pages a
    /// sampler's boundary evicts.
    pub fn pages_where(&self, mut pick: impl FnMut(Page) -> bool) -> Vec<Page> {
        let mut pages: Vec<Page> = self.live.keys().copied().filter(|&p| pick(p)).collect();
        pages.sort_unstable();
        pages
    }

    /// The pool's replacement, once it is over its size: its oldest
    /// [`evict_batch`] pages leave it (none while it is within its size).
    pub fn shrink(&mut self) -> Shrink {
        let mut out = Shrink::default();
        if self.live.len() <= self.cap {
            return out;
        }
        let target = self.cap + 1 - evict_batch(self.cap);
        while self.live.len() > target {
            let Some((key, page, gen)) = self.fifo.pop_front() else {
                break;
            };
            match self.live.get(&(key, page)) {
                Some(&(g, writable)) if g == gen => {
                    self.live.remove(&(key, page));
                    out.victims.push(((key, page), gen, writable));
                }
                _ => continue,
            }
        }
        out
    }

    /// Takes back the pages of `shrink` that could not leave now
    /// (`later`: their address space is changing), at the head of the
    /// pool, in their order, to be tried at the next shrink.
    pub fn keep(&mut self, shrink: &Shrink, later: &[Page]) {
        if later.is_empty() {
            return;
        }
        let later: std::collections::HashSet<Page> = later.iter().copied().collect();
        for &(page, gen, writable) in shrink.victims.iter().rev() {
            if later.contains(&page) {
                self.live.insert(page, (gen, writable));
                self.fifo.push_front((page.0, page.1, gen));
            }
        }
    }
}

/// A traced mapping as a plan sees it: where it ends, and whether it is
/// shared memory (whose pages leave by being unmapped, not moved).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Its end address.
    pub end: u64,
    /// Shared memory.
    pub shared: bool,
}

/// A run of a plan: neighbouring pages of one mapping of one address
/// space, evicted with one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// The address space.
    pub key: u32,
    /// Its first page's address.
    pub start: u64,
    /// Its pages, as a range of the planned pages.
    pub pages: Range<usize>,
    /// Of shared memory.
    pub shared: bool,
}

impl Run {
    /// Its pages.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether it has no page (never, in a plan).
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
}

/// Plans the eviction of `pages` (sorted) of `page_size` bytes: runs of
/// neighbours in one mapping, [`MAX_RUN`] pages at most, in the order of
/// `pages`. `mapping(key, addr)` tells of the mapping that starts at or
/// below `addr` in space `key`: `None` if the space is gone (its pages
/// are left out of the plan), `Some(None)` if there is none; a page
/// beyond the end of that mapping (or with none) is a private run of
/// its own.
pub fn plan(
    pages: &[Page],
    page_size: u64,
    mut mapping: impl FnMut(u32, u64) -> Option<Option<Extent>>,
) -> Vec<Run> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < pages.len() {
        let (key, start) = pages[i];
        let Some(below) = mapping(key, start) else {
            i += 1;
            continue;
        };
        let (map_end, shared) = below.map_or((start + page_size, false), |m| {
            (m.end.max(start + page_size), m.shared && start < m.end)
        });
        let mut j = i + 1;
        while j < pages.len()
            && j - i < MAX_RUN
            && pages[j].0 == key
            && pages[j].1 == start + (j - i) as u64 * page_size
            && pages[j].1 < map_end
        {
            j += 1;
        }
        runs.push(Run {
            key,
            start,
            pages: i..j,
            shared,
        });
        i = j;
    }
    runs
}

/// The private runs of one address space in a plan: what one batch of
/// its mover moves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// The address space.
    pub key: u32,
    /// Each run's first page and length in pages.
    pub runs: Vec<(u64, u64)>,
}

/// The batches of a plan: one per address space (each space's runs are
/// together in a plan), with its private runs in their order.
pub fn batches(runs: &[Run]) -> Vec<Batch> {
    runs.chunk_by(|a, b| a.key == b.key)
        .map(|group| Batch {
            key: group[0].key,
            runs: group
                .iter()
                .filter(|r| !r.shared)
                .map(|r| (r.start, r.len() as u64))
                .collect(),
        })
        .collect()
}

/// Splits sorted `values` into runs of neighbours (each `step` above the
/// one before), `max` values at most each; returns the runs as ranges
/// of `values`.
pub fn neighbour_runs(values: &[u64], step: u64, max: usize) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let mut j = i + 1;
        while j < values.len() && j - i < max && values[j] == values[j - 1] + step {
            j += 1;
        }
        runs.push(i..j);
        i = j;
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const PAGE: u64 = 4096;

    #[test]
    fn batch_is_an_eighth_of_the_pool_within_1_and_64() {
        assert_eq!(evict_batch(1), 1);
        assert_eq!(evict_batch(15), 1);
        assert_eq!(evict_batch(16), 2);
        assert_eq!(evict_batch(512), 64);
        assert_eq!(evict_batch(1 << 20), 64);
    }

    #[test]
    fn a_full_pool_gives_up_its_oldest_pages() {
        let mut pool = Pool::new(16, true);
        for i in 0..17 {
            pool.insert((0, i * PAGE), false);
        }
        let shrink = pool.shrink();
        // 17 pages, 16 of room: 2 (an eighth) leave, the two oldest.
        assert_eq!(shrink.pages(), vec![(0, 0), (0, PAGE)]);
        assert_eq!(pool.len(), 15);
        assert_eq!(pool.writable((0, 0)), None);
        assert_eq!(pool.writable((0, 2 * PAGE)), Some(false));
    }

    #[test]
    fn a_page_let_in_again_goes_to_the_back() {
        let mut pool = Pool::new(2, true);
        pool.insert((0, 0), false);
        pool.insert((0, PAGE), false);
        pool.insert((0, 0), true);
        pool.insert((0, 2 * PAGE), false);
        assert_eq!(pool.shrink().pages(), vec![(0, PAGE)]);
        assert_eq!(pool.writable((0, 0)), Some(true));
    }

    #[test]
    fn pages_that_cannot_leave_now_stay_at_the_head() {
        let mut pool = Pool::new(8, true);
        for i in 0..9 {
            pool.insert((1, i * PAGE), false);
        }
        let shrink = pool.shrink();
        assert_eq!(shrink.pages(), vec![(1, 0)]);
        pool.keep(&shrink, &[(1, 0)]);
        assert_eq!(pool.len(), 9);
        pool.insert((1, 100 * PAGE), false);
        // Tried again first.
        assert_eq!(pool.shrink().pages(), vec![(1, 0), (1, PAGE)]);
    }

    #[test]
    fn an_unordered_pool_never_shrinks() {
        let mut pool = Pool::new(1, false);
        for i in 0..10 {
            pool.insert((0, i * PAGE), false);
        }
        assert!(pool.shrink().pages().is_empty());
        assert_eq!(pool.len(), 10);
    }

    #[test]
    fn remapped_pages_stay_in_at_their_new_addresses() {
        let mut pool = Pool::new(8, true);
        pool.insert((0, 0x1000), true);
        pool.insert((0, 0x2000), false);
        pool.insert((1, 0x1000), false);
        pool.remap(0, 0x1000, 0x9000, 0x1000);
        assert_eq!(pool.writable((0, 0x1000)), None);
        assert_eq!(pool.writable((0, 0x9000)), Some(true));
        assert_eq!(pool.writable((1, 0x1000)), Some(false));
        pool.remove_range(0, 0, 0x10000);
        assert_eq!(pool.len(), 1);
    }

    #[test]
    fn runs_stop_at_a_gap_a_space_a_mapping_and_the_longest_run() {
        let pages: Vec<Page> = [
            (0, 0x1000),
            (0, 0x2000),
            (0, 0x4000), // gap
            (0, 0x5000), // the next mapping starts here
            (1, 0x6000), // another space
        ]
        .to_vec();
        let maps = |k: u32, a: u64| {
            Some(match (k, a) {
                (0, a) if a < 0x5000 => Some(Extent {
                    end: 0x5000,
                    shared: false,
                }),
                (0, _) => Some(Extent {
                    end: 0x8000,
                    shared: true,
                }),
                _ => None,
            })
        };
        let runs = plan(&pages, PAGE, maps);
        let spans: Vec<_> = runs
            .iter()
            .map(|r| (r.key, r.pages.clone(), r.shared))
            .collect();
        assert_eq!(
            spans,
            vec![
                (0, 0..2, false),
                (0, 2..3, false),
                (0, 3..4, true),
                (1, 4..5, false)
            ]
        );
        let long: Vec<Page> = (0..MAX_RUN as u64 + 1).map(|i| (0, i * PAGE)).collect();
        let all = Extent {
            end: u64::MAX,
            shared: false,
        };
        let runs = plan(&long, PAGE, |_, _| Some(Some(all)));
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].len(), MAX_RUN);
    }

    #[test]
    fn a_page_outside_every_mapping_is_a_run_of_its_own() {
        let runs = plan(&[(0, 0), (0, PAGE)], PAGE, |_, _| Some(None));
        assert_eq!(runs.len(), 2);
    }

    #[test]
    fn pages_of_a_gone_space_are_left_out() {
        let pages = [(0, 0), (2, 0), (2, PAGE)];
        let runs = plan(&pages, PAGE, |k, _| (k != 2).then_some(None));
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].pages, 0..1);
    }

    #[test]
    fn a_batch_holds_a_spaces_private_runs() {
        let runs = vec![
            Run {
                key: 0,
                start: 0,
                pages: 0..2,
                shared: false,
            },
            Run {
                key: 0,
                start: 0x8000,
                pages: 2..3,
                shared: true,
            },
            Run {
                key: 3,
                start: 0x1000,
                pages: 3..4,
                shared: false,
            },
        ];
        assert_eq!(
            batches(&runs),
            vec![
                Batch {
                    key: 0,
                    runs: vec![(0, 2)]
                },
                Batch {
                    key: 3,
                    runs: vec![(0x1000, 1)]
                },
            ]
        );
    }

    #[test]
    fn neighbours_make_runs() {
        assert_eq!(
            neighbour_runs(&[1, 2, 3, 5, 6, 9], 1, 100),
            vec![0..3, 3..5, 5..6]
        );
        assert_eq!(neighbour_runs(&[1, 2, 3], 1, 2), vec![0..2, 2..3]);
        assert!(neighbour_runs(&[], 1, 2).is_empty());
    }

    /// Mappings of a few spaces: space -> start -> extent, laid out from
    /// page-number lengths, with gaps between them.
    fn mappings() -> impl Strategy<Value = BTreeMap<u32, BTreeMap<u64, Extent>>> {
        prop::collection::vec(
            prop::collection::vec((0u64..4, 1u64..40, any::<bool>()), 0..6),
            1..4,
        )
        .prop_map(|spaces| {
            spaces
                .into_iter()
                .enumerate()
                .map(|(k, maps)| {
                    let mut at = PAGE;
                    let mut out = BTreeMap::new();
                    for (gap, len, shared) in maps {
                        at += gap * PAGE;
                        let end = at + len * PAGE;
                        out.insert(at, Extent { end, shared });
                        at = end;
                    }
                    (k as u32, out)
                })
                .collect()
        })
    }

    fn below(
        maps: &BTreeMap<u32, BTreeMap<u64, Extent>>,
        key: u32,
        addr: u64,
    ) -> Option<Option<(u64, Extent)>> {
        let space = maps.get(&key)?;
        Some(space.range(..=addr).next_back().map(|(&s, &e)| (s, e)))
    }

    proptest! {
        #[test]
        fn runs_cover_exactly_the_pages_of_live_spaces(
            maps in mappings(),
            picks in prop::collection::btree_set((0u32..5, 0u64..300), 0..200),
        ) {
            let pages: Vec<Page> = picks.into_iter().map(|(k, p)| (k, p * PAGE)).collect();
            let runs = plan(&pages, PAGE, |k, a| below(&maps, k, a).map(|m| m.map(|(_, e)| e)));
            let covered: Vec<Page> = runs.iter().flat_map(|r| pages[r.pages.clone()].to_vec()).collect();
            let live: Vec<Page> = pages.iter().copied().filter(|p| maps.contains_key(&p.0)).collect();
            prop_assert_eq!(covered, live);
            for r in &runs {
                prop_assert!(!r.is_empty() && r.len() <= MAX_RUN);
                prop_assert_eq!(pages[r.pages.start], (r.key, r.start));
                for (i, &(k, a)) in pages[r.pages.clone()].iter().enumerate() {
                    prop_assert_eq!(k, r.key);
                    prop_assert_eq!(a, r.start + i as u64 * PAGE);
                }
            }
        }

        #[test]
        fn no_run_crosses_a_mapping_boundary(
            maps in mappings(),
            picks in prop::collection::btree_set((0u32..3, 0u64..300), 0..200),
        ) {
            let pages: Vec<Page> = picks.into_iter().map(|(k, p)| (k, p * PAGE)).collect();
            let runs = plan(&pages, PAGE, |k, a| below(&maps, k, a).map(|m| m.map(|(_, e)| e)));
            for r in &runs {
                let first = below(&maps, r.key, r.start).unwrap();
                let last = pages[r.pages.end - 1].1;
                let inside = |m: Option<(u64, Extent)>, a: u64| m.filter(|(_, e)| a < e.end).map(|(s, _)| s);
                // Every page of a run is in the run's first page's mapping,
                // or (none there) the run is one page.
                match inside(first, r.start) {
                    Some(s) => prop_assert_eq!(inside(below(&maps, r.key, last).unwrap(), last), Some(s)),
                    None => prop_assert_eq!(r.len(), 1),
                }
                prop_assert_eq!(r.shared, inside(first, r.start).is_some() && first.unwrap().1.shared);
            }
        }

        #[test]
        fn the_pool_never_exceeds_its_size_after_a_shrink(
            cap in 1usize..100,
            touches in prop::collection::vec((0u32..3, 0u64..200, any::<bool>()), 0..600),
        ) {
            let mut pool = Pool::new(cap, true);
            let mut order: Vec<Page> = Vec::new();
            for (k, p, w) in touches {
                let page = (k, p * PAGE);
                pool.insert(page, w);
                order.retain(|&q| q != page);
                order.push(page);
                let shrink = pool.shrink();
                let gone = shrink.pages();
                prop_assert!(pool.len() <= cap);
                // The oldest pages leave, an eighth of the pool (1 to 64) at a time.
                if !gone.is_empty() {
                    prop_assert_eq!(gone.len(), evict_batch(cap).min(order.len()));
                    let mut oldest: Vec<Page> = order.drain(..gone.len()).collect();
                    oldest.sort_unstable();
                    prop_assert_eq!(gone, oldest);
                }
                prop_assert_eq!(pool.len(), order.len());
            }
        }

        #[test]
        fn neighbour_runs_split_only_at_gaps_and_the_limit(
            set in prop::collection::btree_set(0u64..500, 0..300),
            max in 1usize..20,
        ) {
            let values: Vec<u64> = set.into_iter().collect();
            let runs = neighbour_runs(&values, 1, max);
            prop_assert_eq!(runs.iter().map(|r| r.len()).sum::<usize>(), values.len());
            for w in runs.windows(2) {
                prop_assert_eq!(w[0].end, w[1].start);
                let joined = values[w[1].start] == values[w[0].end - 1] + 1;
                prop_assert!(!joined || w[0].len() == max);
            }
            for r in &runs {
                prop_assert!(r.len() <= max);
                prop_assert!(values[r.clone()].windows(2).all(|w| w[1] == w[0] + 1));
            }
        }
    }
}
