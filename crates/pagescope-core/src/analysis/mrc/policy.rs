//! FIFO and CLOCK, simulated at many memory sizes in one pass each.
//!
//! Neither policy has LRU's stack property, so each size is its own
//! simulation; what is shared is the pass over the stream and the work of
//! a reference that hits.
//!
//! **FIFO.** A page stays exactly `m` insertions: the resident pages are
//! those whose last insertion is among the last `m`. So a memory of `m`
//! pages needs no queue, only the count of insertions so far (`c`, one a
//! miss) and each page's count at its last insertion (`ins`): a
//! reference hits iff `c - ins <= m`. The sizes of a group sit side by
//! side in each page's row, and a reference updates every size of the
//! group with the same few vector instructions, hit or miss.
//!
//! **CLOCK.** Each page has a bit per size saying whether it is resident
//! there and one saying whether it was referenced since the hand passed.
//! A reference sets its referenced bits wherever it is resident (one OR
//! for every size); only the sizes where it misses turn their hand.

/// Sizes simulated together by one FIFO pass (lanes of a page's row).
const FIFO_LANES: usize = 16;

/// References between two renormalizations of the FIFO counters: each
/// counter moves at most once a reference, so differences stay below
/// 2^31 and never wrap.
const RENORM: usize = 1 << 30;

/// FIFO misses of `stream` (page ids below `distinct`) in a memory of
/// `pages` pages, simulated with a queue (the definition).
pub fn fifo_misses(stream: &[u32], distinct: usize, pages: usize) -> u64 {
    let mut resident = vec![false; distinct];
    let mut queue = std::collections::VecDeque::with_capacity(pages);
    let mut misses = 0;
    for &p in stream {
        if resident[p as usize] {
            continue;
        }
        misses += 1;
        if pages == 0 {
            continue;
        }
        if queue.len() == pages {
            let old: u32 = queue.pop_front().expect("full");
            resident[old as usize] = false;
        }
        queue.push_back(p);
        resident[p as usize] = true;
    }
    misses
}

/// CLOCK (second chance) misses of `stream` in a memory of `pages`
/// pages, simulated frame by frame (the definition).
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
        if pages == 0 {
            continue;
        }
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

/// Splits `sizes` into those that need a simulation and those that
/// never evict (at least `distinct` pages: only first references miss).
fn to_simulate(sizes: &[u64], distinct: usize) -> Vec<usize> {
    (0..sizes.len())
        .filter(|&i| sizes[i] > 0 && sizes[i] < distinct as u64)
        .collect()
}

/// First references: the misses of a memory that never evicts.
fn first_references(stream: &[u32], distinct: usize) -> u64 {
    let mut seen = vec![false; distinct];
    stream
        .iter()
        .filter(|&&p| !std::mem::replace(&mut seen[p as usize], true))
        .count() as u64
}

fn fill_trivial(stream: &[u32], distinct: usize, sizes: &[u64], out: &mut [Option<u64>]) {
    let mut cold = None;
    for (i, &s) in sizes.iter().enumerate() {
        if out[i].is_none() {
            out[i] = Some(if s == 0 {
                stream.len() as u64
            } else {
                *cold.get_or_insert_with(|| first_references(stream, distinct))
            });
        }
    }
}

/// FIFO misses of `stream` at each of `sizes` (pages), in
/// `ceil(sizes / 16)` passes.
pub fn fifo_curve(stream: &[u32], distinct: usize, sizes: &[u64]) -> Vec<u64> {
    fifo_curve_renormalized(stream, distinct, sizes, RENORM)
}

fn fifo_curve_renormalized(
    stream: &[u32],
    distinct: usize,
    sizes: &[u64],
    renorm: usize,
) -> Vec<u64> {
    let mut out = vec![None; sizes.len()];
    for group in to_simulate(sizes, distinct).chunks(FIFO_LANES) {
        let mut m = [u32::MAX - 1; FIFO_LANES];
        for (lane, &i) in group.iter().enumerate() {
            m[lane] = sizes[i] as u32;
        }
        let misses = fifo_group(stream, distinct, &m, renorm);
        for (lane, &i) in group.iter().enumerate() {
            out[i] = Some(misses[lane]);
        }
    }
    fill_trivial(stream, distinct, sizes, &mut out);
    out.into_iter().map(|v| v.expect("filled")).collect()
}

fn fifo_group(
    stream: &[u32],
    distinct: usize,
    m: &[u32; FIFO_LANES],
    renorm: usize,
) -> [u64; FIFO_LANES] {
    // A page never inserted reads as inserted m + 1 insertions ago: a
    // miss, and renormalization keeps it one.
    let mut c = [0u32; FIFO_LANES];
    let never: [u32; FIFO_LANES] = std::array::from_fn(|k| 0u32.wrapping_sub(m[k]).wrapping_sub(1));
    let mut ins = vec![never; distinct];
    let mut base = [0u32; FIFO_LANES];
    let mut total = [0u64; FIFO_LANES];
    for chunk in stream.chunks(renorm) {
        for &p in chunk {
            let row = &mut ins[p as usize];
            for k in 0..FIFO_LANES {
                let miss = c[k].wrapping_sub(row[k]) > m[k];
                row[k] = if miss { c[k] } else { row[k] };
                c[k] = c[k].wrapping_add(miss as u32);
            }
        }
        for k in 0..FIFO_LANES {
            total[k] += c[k].wrapping_sub(base[k]) as u64;
        }
        base = c;
        for row in ins.iter_mut() {
            for k in 0..FIFO_LANES {
                if c[k].wrapping_sub(row[k]) > m[k] {
                    row[k] = c[k].wrapping_sub(m[k]).wrapping_sub(1);
                }
            }
        }
    }
    total
}

/// CLOCK misses of `stream` at each of `sizes` (pages), in
/// `ceil(sizes / 64)` passes.
pub fn clock_curve(stream: &[u32], distinct: usize, sizes: &[u64]) -> Vec<u64> {
    let mut out = vec![None; sizes.len()];
    for group in to_simulate(sizes, distinct).chunks(64) {
        let m: Vec<usize> = group.iter().map(|&i| sizes[i] as usize).collect();
        let misses = clock_group(stream, distinct, &m);
        for (lane, &i) in group.iter().enumerate() {
            out[i] = Some(misses[lane]);
        }
    }
    fill_trivial(stream, distinct, sizes, &mut out);
    out.into_iter().map(|v| v.expect("filled")).collect()
}

fn clock_group(stream: &[u32], distinct: usize, m: &[usize]) -> Vec<u64> {
    let all = if m.len() == 64 {
        u64::MAX
    } else {
        (1u64 << m.len()) - 1
    };
    let mut resident = vec![0u64; distinct];
    let mut referenced = vec![0u64; distinct];
    let mut frames: Vec<Vec<u32>> = m.iter().map(|&s| Vec::with_capacity(s)).collect();
    let mut hand = vec![0usize; m.len()];
    let mut misses = vec![0u64; m.len()];
    for &p in stream {
        let p = p as usize;
        let res = resident[p];
        referenced[p] |= res;
        let mut miss = all & !res;
        while miss != 0 {
            let k = miss.trailing_zeros() as usize;
            miss &= miss - 1;
            let bit = 1u64 << k;
            misses[k] += 1;
            resident[p] |= bit;
            let f = &mut frames[k];
            if f.len() < m[k] {
                f.push(p as u32);
                continue;
            }
            let mut h = hand[k];
            loop {
                let q = f[h] as usize;
                if referenced[q] & bit != 0 {
                    referenced[q] &= !bit;
                } else {
                    resident[q] &= !bit;
                    f[h] = p as u32;
                    h += 1;
                    if h == f.len() {
                        h = 0;
                    }
                    break;
                }
                h += 1;
                if h == f.len() {
                    h = 0;
                }
            }
            hand[k] = h;
        }
    }
    misses
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn clock_and_fifo_on_a_small_example() {
        // 1 2 3 1 4 with 3 frames: FIFO evicts 1 for 4; CLOCK gives 1 a
        // second chance and evicts 2.
        let s = [1, 2, 3, 1, 4, 1];
        assert_eq!(fifo_misses(&s, 5, 3), 5);
        assert_eq!(clock_misses(&s, 5, 3), 4);
        assert_eq!(fifo_curve(&s, 5, &[3]), [5]);
        assert_eq!(clock_curve(&s, 5, &[3]), [4]);
    }

    #[test]
    fn many_groups_and_a_renormalization() {
        // More sizes than one FIFO group holds, and every size from 0
        // past the distinct pages.
        let mut x = 7u64;
        let stream: Vec<u32> = (0..20_000)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                ((x >> 35) % 300) as u32
            })
            .collect();
        let sizes: Vec<u64> = (0..=310).step_by(3).collect();
        // Renormalized every 1000 references: the counters' rebase
        // changes nothing.
        let fifo = fifo_curve_renormalized(&stream, 300, &sizes, 1000);
        assert_eq!(fifo, fifo_curve(&stream, 300, &sizes));
        let clock = clock_curve(&stream, 300, &sizes);
        for (i, &s) in sizes.iter().enumerate() {
            assert_eq!(fifo[i], fifo_misses(&stream, 300, s as usize), "FIFO {s}");
            assert_eq!(
                clock[i],
                clock_misses(&stream, 300, s as usize),
                "CLOCK {s}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Every size of one pass equals its own simulation by the
        /// definition, on random streams over few and many pages.
        #[test]
        fn one_pass_equals_the_definition(
            stream in proptest::collection::vec(0u32..64, 0..3000),
            sizes in proptest::collection::vec(0u64..80, 1..40),
        ) {
            let fifo = fifo_curve(&stream, 64, &sizes);
            let clock = clock_curve(&stream, 64, &sizes);
            for (i, &s) in sizes.iter().enumerate() {
                prop_assert_eq!(fifo[i], fifo_misses(&stream, 64, s as usize));
                prop_assert_eq!(clock[i], clock_misses(&stream, 64, s as usize));
            }
        }
    }
}
