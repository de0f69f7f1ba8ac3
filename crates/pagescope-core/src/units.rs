//! Newtypes for the quantities pagescope passes around, so that a page
//! frame number is never mistaken for an address or a byte count.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A physical page frame number: the index of a page frame in physical
/// memory (`physical address / page size`), as reported in bits 0-54 of a
/// present `/proc/PID/pagemap` entry and used as the index into
/// `/proc/kpageflags`, `/proc/kpagecount` and `/proc/kpagecgroup`
/// (Documentation/admin-guide/mm/pagemap.rst).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Pfn(pub u64);

impl Pfn {
    /// The physical address of the frame's first byte.
    pub fn phys_addr(self, page_size: u64) -> u64 {
        self.0 * page_size
    }
}

impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A virtual address in a process's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct VirtAddr(pub u64);

impl VirtAddr {
    /// The virtual page number (`address / page size`), which is also the
    /// index of the address's entry in `/proc/PID/pagemap`.
    pub fn page_index(self, page_size: u64) -> u64 {
        self.0 / page_size
    }
}

impl fmt::Display for VirtAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Parses a size such as `4096`, `64K`, `256M`, `1G` or `2MiB` into bytes.
/// Suffixes are binary (K = 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err(format!(
            "{text:?} is not a size (expected e.g. 4096, 64K, 256M, 1G)"
        ));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{text:?} is too large a size"))?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
                "{text:?}: unknown size suffix {other:?} (use K, M, G or T)"
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large a size"))
}

/// Parses a duration such as `100ms`, `1s`, `2.5s`, `500us` or `1m`.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (expected e.g. 100ms, 1s, 2m)"))?;
    let scale = match suffix {
        "ns" => 1e-9,
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" | "" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "{text:?}: unknown duration unit {other:?} (use ns, us, ms, s, m or h)"
            ))
        }
    };
    let secs = value * scale;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("99999999999999999999T").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("100ms").unwrap().as_millis(), 100);
        assert_eq!(parse_duration("1s").unwrap().as_secs(), 1);
        assert_eq!(parse_duration("0").unwrap().as_secs(), 0);
        assert_eq!(parse_duration("2.5s").unwrap().as_millis(), 2500);
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("1y").is_err());
    }
}
