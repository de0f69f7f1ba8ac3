//! Value parsers of the arguments: each checks a value's range where
//! clap's own would not, and says what is expected.

use std::time::Duration;

/// `trace --pool`: a size of at least 16 pages.
pub fn pool(s: &str) -> Result<u64, String> {
    let n = pagescope_core::units::parse_size(s)?;
    // One instruction can touch several pages (its operands, the
    // stack, code in anonymous memory); a pool too small for them all
    // could evict one the instruction still needs, again and again.
    let page = pagescope_linux::system::page_size();
    if n < 16 * page {
        return Err(format!(
            "{s:?}: the pool must hold at least 16 pages ({}K)",
            16 * page / 1024
        ));
    }
    Ok(n)
}

/// `record --sample`: a fraction in (0, 1].
pub fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!(
            "{s:?}: expected a fraction above 0 and at most 1, e.g. 0.1"
        )),
    }
}

/// `record --damon-regions`: MIN-MAX, at least 3 and ordered.
pub fn regions(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{s:?}: expected MIN-MAX, e.g. 10-1000");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let (min, max) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if min < 3 || max < min {
        return Err(format!(
            "{s:?}: DAMON keeps at least 3 regions, and MAX must be at least MIN"
        ));
    }
    Ok((min, max))
}

/// `trace --time-resolution`: from 1ns to 1ms.
pub fn resolution(s: &str) -> Result<Duration, String> {
    let d = pagescope_core::units::parse_duration(s)?;
    if d < Duration::from_nanos(1) || d > Duration::from_millis(1) {
        return Err(format!("{s:?}: must be from 1ns to 1ms"));
    }
    Ok(d)
}

/// The durations of `record`: at least 1ms.
pub fn interval(s: &str) -> Result<Duration, String> {
    let d = pagescope_core::units::parse_duration(s)?;
    if d < Duration::from_millis(1) {
        return Err(format!("{s:?}: must be at least 1ms"));
    }
    Ok(d)
}

/// `analyze --range`: START-END, hex with 0x or decimal, END above START.
pub fn range(s: &str) -> Result<(u64, u64), String> {
    let num = |t: &str| {
        let t = t.trim();
        match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            Some(h) => u64::from_str_radix(h, 16),
            None => t.parse(),
        }
        .map_err(|_| format!("{t:?} is not an address"))
    };
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("{s:?}: expected START-END"))?;
    let (a, b) = (num(a)?, num(b)?);
    if b <= a {
        return Err(format!("{s:?}: END must be above START"));
    }
    Ok((a, b))
}

/// A block size (`record --block`, `report --block`): a power of two of
/// at least a page.
pub fn block(s: &str) -> Result<u64, String> {
    let n = pagescope_core::units::parse_size(s)?;
    if n < pagescope_linux::system::page_size() || !n.is_power_of_two() {
        return Err(format!(
            "{s:?}: the block size must be a power of two of at least one page"
        ));
    }
    Ok(n)
}
