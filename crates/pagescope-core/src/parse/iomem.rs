//! `/proc/iomem`: the top-level "System RAM" ranges.
//!
//! Lines are `start-end : name`, nested entries indented by two spaces.
//! Without root the kernel prints every address as zero
//! (kernel/resource.c, `r_show`), which [`system_ram`] reports as empty.

use super::{hex, ParseError};

const WHAT: &str = "iomem";

/// The top-level System RAM ranges, `[start, end]` inclusive.
pub fn system_ram(text: &str) -> Result<Vec<(u64, u64)>, ParseError> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with(' ') || line.is_empty() {
            continue;
        }
        let Some((range, name)) = line.split_once(" : ") else {
            return Err(ParseError::new(WHAT, line, "no ' : '"));
        };
        if name.trim() != "System RAM" {
            continue;
        }
        let (a, b) = range
            .split_once('-')
            .ok_or_else(|| ParseError::new(WHAT, line, "no range"))?;
        let (start, end) = (hex(WHAT, line, a)?, hex(WHAT, line, b)?);
        if start == 0 && end == 0 {
            // Hidden by the kernel from a reader without root.
            continue;
        }
        out.push((start, end));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_text() {
        let text = "00000000-00000fff : Reserved
00001000-0009fbff : System RAM
000a0000-000bffff : PCI Bus 0000:00
00100000-bfffffff : System RAM
  01000000-01ffffff : Kernel code
100000000-63fffffff : System RAM
";
        assert_eq!(
            system_ram(text).unwrap(),
            vec![
                (0x1000, 0x9fbff),
                (0x100000, 0xbfffffff),
                (0x100000000, 0x63fffffff)
            ]
        );
        let hidden = "00000000-00000000 : System RAM\n";
        assert!(system_ram(hidden).unwrap().is_empty());
        assert!(system_ram("zz-yy : System RAM\n").is_err());
    }
}
