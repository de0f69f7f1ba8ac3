//! `/proc/meminfo`: `Key:   N kB` lines, in the kernel's order.

use super::{dec, ParseError};

const WHAT: &str = "meminfo";

/// Parses `/proc/meminfo` into `(key, value)` pairs; values are kB except
/// the `HugePages_*` counts, which the kernel prints as plain numbers.
pub fn parse(text: &str) -> Result<Vec<(String, u64)>, ParseError> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let (key, value) = line
                .split_once(':')
                .ok_or_else(|| ParseError::new(WHAT, line, "no colon"))?;
            let number = value.trim().trim_end_matches("kB").trim();
            Ok((key.to_string(), dec(WHAT, line, number)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_text() {
        let text = "MemTotal:       24684084 kB\nMemFree:        24083720 kB\nHugePages_Total:       0\nHugepagesize:       2048 kB\n";
        let m = parse(text).unwrap();
        assert_eq!(m[0], ("MemTotal".to_string(), 24684084));
        assert_eq!(m[2], ("HugePages_Total".to_string(), 0));
        assert_eq!(m.len(), 4);
        assert!(parse("MemTotal 12 kB").is_err());
    }
}
