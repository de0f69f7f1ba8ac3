//! `/proc/PID/numa_maps`: per VMA, its policy and pages per node.
//!
//! `7f4c1a600000 default file=/usr/lib/libc.so.6 mapped=40 mapmax=20 N0=40
//! kernelpagesize_kB=4` (Documentation/filesystems/proc.rst, numa_maps).

use super::{dec, hex, ParseError};

/// One numa_maps line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumaMapsLine {
    /// Start address of the VMA.
    pub start: u64,
    /// Memory policy.
    pub policy: String,
    /// Pages per node, `(node, pages)`.
    pub nodes: Vec<(u16, u64)>,
    /// `anon=` pages.
    pub anon: u64,
    /// `dirty=` pages.
    pub dirty: u64,
    /// `mapped=` pages.
    pub mapped: u64,
    /// `kernelpagesize_kB=`.
    pub kernel_page_size_kb: u64,
}

const WHAT: &str = "numa_maps";

/// Parses a numa_maps file.
pub fn parse(text: &str) -> Result<Vec<NumaMapsLine>, ParseError> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut words = line.split_whitespace();
        let start = hex(WHAT, line, words.next().unwrap_or(""))?;
        let policy = words
            .next()
            .ok_or_else(|| ParseError::new(WHAT, line, "no policy"))?
            .to_string();
        let mut entry = NumaMapsLine {
            start,
            policy,
            ..NumaMapsLine::default()
        };
        for w in words {
            let Some((k, v)) = w.split_once('=') else {
                continue; // bare words: heap, stack, huge
            };
            match k {
                "anon" => entry.anon = dec(WHAT, line, v)?,
                "dirty" => entry.dirty = dec(WHAT, line, v)?,
                "mapped" => entry.mapped = dec(WHAT, line, v)?,
                "kernelpagesize_kB" => entry.kernel_page_size_kb = dec(WHAT, line, v)?,
                _ if k.len() > 1
                    && k.starts_with('N')
                    && k[1..].bytes().all(|b| b.is_ascii_digit()) =>
                {
                    entry
                        .nodes
                        .push((dec(WHAT, line, &k[1..])?, dec(WHAT, line, v)?));
                }
                _ => {}
            }
        }
        out.push(entry);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_text() {
        let text = "7f1f6a000000 default anon=65536 dirty=65536 active=0 N0=65536 kernelpagesize_kB=4
7f4c1a600000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 mapped=40 mapmax=20 N0=30 N1=10 kernelpagesize_kB=4
7ffd5a1c3000 default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4
";
        let m = parse(text).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].anon, 65536);
        assert_eq!(m[0].nodes, vec![(0, 65536)]);
        assert_eq!(m[1].nodes, vec![(0, 30), (1, 10)]);
        assert_eq!(m[1].mapped, 40);
        assert_eq!(m[2].kernel_page_size_kb, 4);
        assert!(parse("xyz default\n").is_err());
    }
}
