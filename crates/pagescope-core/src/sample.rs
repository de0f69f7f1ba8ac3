//! The fixed random sample of pages that `record --backend fault
//! --sample` watches: which pages are in it, a pure function of the page
//! number and the fraction, so that the recorder (which moves the sampled
//! pages out) and the analyses (which scale what the sample saw to the
//! whole) agree on it.

/// Pages per group of the sample ([`in_sample`]): 4 MiB of 4 KiB pages.
pub const GROUP: u64 = 1024;

/// splitmix64: 64 well-mixed bits from `x`.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Whether page number `page` (its address over the page size) is in the fixed random sample of `fraction` of the
/// pages, the same at every boundary. The address space is cut into
/// aligned groups of [`GROUP`] pages, and each group holds
/// `fraction x 1024` pages of the sample, rounded down or up (up with
/// the chance of the fraction dropped, so every page's chance is
/// `fraction`); a permutation of the group drawn from a hash of the
/// group's number picks which. A range touched in full thus holds its
/// share of the sample to within about a page per group, where pages
/// drawn one by one would make it vary by its square root: the sample of
/// 4 GiB at 0.001 varies by about 0.5% (one standard deviation) instead
/// of 3%.
pub fn in_sample(page: u64, fraction: f64) -> bool {
    if fraction >= 1.0 {
        return true;
    }
    let (group, slot) = (page / GROUP, page % GROUP);
    let h = mix(group);
    let share = fraction * GROUP as f64;
    let up = ((h >> 11) as f64 / (1u64 << 53) as f64) < share.fract();
    let take = share.floor() as u64 + u64::from(up);
    // A bijection of 0..1024 (odd multipliers and right xor-shifts are
    // each one on ten bits), seeded by the group's hash.
    let mask = GROUP - 1;
    let h2 = mix(h);
    let mut x = slot ^ (h2 & mask);
    x = x.wrapping_mul((h2 >> 10) | 1) & mask;
    x ^= x >> 5;
    x = x.wrapping_mul((h2 >> 30) | 1) & mask;
    x ^= x >> 4;
    x < take
}

/// Pages of the sample among the `len` pages from page number `first`.
pub fn sampled_in(first: u64, len: u64, fraction: f64) -> u64 {
    (first..first + len)
        .filter(|&p| in_sample(p, fraction))
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sampled pages of group `g` at `fraction`.
    fn in_group(g: u64, fraction: f64) -> Vec<u64> {
        (0..GROUP)
            .filter(|&j| in_sample(g * GROUP + j, fraction))
            .collect()
    }

    /// Every group holds its share rounded down or up, and over many
    /// groups the shares come to the fraction.
    #[test]
    fn each_group_holds_its_share_of_the_sample() {
        for fraction in [0.25, 0.1, 0.01, 0.001, 0.0001] {
            let share = fraction * GROUP as f64;
            let mut total = 0;
            for g in 0..2000 {
                let n = in_group(g, fraction).len() as f64;
                assert!(n == share.floor() || n == share.ceil(), "{fraction}: {n}");
                total += n as u64;
            }
            let want = 2000.0 * share;
            // Only the rounding varies: at most one page per group, as a
            // coin of the dropped fraction (2000 groups: 5 deviations).
            let sd = (2000.0 * share.fract() * (1.0 - share.fract())).sqrt();
            assert!(
                (total as f64 - want).abs() <= 5.0 * sd + 1.0,
                "{fraction}: {total} pages, want {want}"
            );
        }
        assert_eq!(in_group(7, 1.0).len() as u64, GROUP);
    }

    /// The pages are spread over the group, differently in each group, so
    /// that a program touching one page in every group (or a run of
    /// pages) meets the fraction, not a fixed slot.
    #[test]
    fn the_sample_is_spread_and_varies_by_group() {
        let a = in_group(3, 0.25);
        let runs = 1 + a.windows(2).filter(|w| w[1] != w[0] + 1).count();
        assert!(runs > 64, "{runs} runs");
        assert_ne!(a, in_group(4, 0.25));
        // Slot 0 of 100 000 groups: sampled a tenth of the time (within
        // 4 standard deviations of 95 pages).
        let hits = (0..100_000u64)
            .filter(|g| in_sample(g * GROUP, 0.1))
            .count() as f64;
        assert!((hits - 10_000.0).abs() < 380.0, "{hits}");
        // And the first 100 pages of each of 1000 groups.
        let hits = (0..1000u64)
            .flat_map(|g| (0..100).map(move |j| g * GROUP + j))
            .filter(|&p| in_sample(p, 0.1))
            .count() as f64;
        assert!((hits - 10_000.0).abs() < 380.0, "{hits}");
    }
}
