//! Parsers of the kernel's text interfaces.
//!
//! Each takes the text as the kernel printed it and returns plain structs;
//! none touches the file system, so each is tested on literal kernel text.
//! Malformed text yields a [`ParseError`] naming the line, never a panic.

pub mod cgroup;
pub mod fdinfo;
pub mod iomem;
pub mod limits;
pub mod maps;
pub mod meminfo;
pub mod numa_maps;
pub mod slabinfo;
pub mod smaps;
pub mod stat;
pub mod status;
pub mod syscall;

use std::fmt;

/// Text that does not have the shape the kernel gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// What was being parsed.
    pub what: &'static str,
    /// The offending line (shortened).
    pub line: String,
    /// What is wrong with it.
    pub why: String,
}

impl ParseError {
    pub(crate) fn new(what: &'static str, line: &str, why: impl Into<String>) -> ParseError {
        let mut line = line.to_string();
        if line.len() > 120 {
            let mut cut = 120;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
            line.push_str("...");
        }
        ParseError {
            what,
            line,
            why: why.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad {} line {:?}: {}", self.what, self.line, self.why)
    }
}

impl std::error::Error for ParseError {}

/// Parses a hexadecimal number without a `0x` prefix.
pub(crate) fn hex(what: &'static str, line: &str, s: &str) -> Result<u64, ParseError> {
    u64::from_str_radix(s, 16)
        .map_err(|_| ParseError::new(what, line, format!("{s:?} is not hexadecimal")))
}

/// Parses a decimal number.
pub(crate) fn dec<T: std::str::FromStr>(
    what: &'static str,
    line: &str,
    s: &str,
) -> Result<T, ParseError> {
    s.parse()
        .map_err(|_| ParseError::new(what, line, format!("{s:?} is not a number")))
}

/// Splits NUL-separated `/proc/PID/cmdline` text into arguments.
pub fn cmdline(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn cmdline() {
        assert_eq!(
            super::cmdline(b"/bin/sleep\x0010\x00"),
            vec!["/bin/sleep".to_string(), "10".to_string()]
        );
        assert!(super::cmdline(b"").is_empty());
    }
}
