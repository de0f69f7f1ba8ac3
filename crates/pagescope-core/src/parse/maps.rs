//! `/proc/PID/maps` lines (also the header line of each smaps entry).
//!
//! Format (Documentation/filesystems/proc.rst, "/proc/PID/maps"):
//! `address perms offset dev inode pathname`, e.g.
//! `7f4c1a600000-7f4c1a628000 r--p 00000000 fe:01 1835 /usr/lib/libc.so.6`.

use super::{dec, hex, ParseError};

/// One maps line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapsLine {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `rwxp` / `rwxs`.
    pub perms: String,
    /// File offset.
    pub offset: u64,
    /// Device major.
    pub dev_major: u32,
    /// Device minor.
    pub dev_minor: u32,
    /// Inode.
    pub inode: u64,
    /// Path or pseudo-name; empty for anonymous memory.
    pub path: String,
}

const WHAT: &str = "maps";

/// Whether a line looks like a maps line (starts with `hex-hex `).
pub fn is_maps_line(line: &str) -> bool {
    let Some(first) = line.split(' ').next() else {
        return false;
    };
    match first.split_once('-') {
        Some((a, b)) => {
            !a.is_empty()
                && !b.is_empty()
                && a.bytes().all(|c| c.is_ascii_hexdigit())
                && b.bytes().all(|c| c.is_ascii_hexdigit())
        }
        None => false,
    }
}

/// Parses one maps line.
pub fn parse_line(line: &str) -> Result<MapsLine, ParseError> {
    // The path may contain spaces, so split off the first five fields only.
    let mut rest = line;
    let mut fields = [""; 5];
    for f in fields.iter_mut() {
        rest = rest.trim_start_matches(' ');
        let end = rest.find(' ').unwrap_or(rest.len());
        *f = &rest[..end];
        rest = &rest[end..];
    }
    let [range, perms, offset, dev, inode] = fields;
    let (start, end) = range
        .split_once('-')
        .ok_or_else(|| ParseError::new(WHAT, line, "no address range"))?;
    let (major, minor) = dev
        .split_once(':')
        .ok_or_else(|| ParseError::new(WHAT, line, "no device"))?;
    if perms.len() != 4 {
        return Err(ParseError::new(
            WHAT,
            line,
            "permissions are not 4 characters",
        ));
    }
    let parsed = MapsLine {
        start: hex(WHAT, line, start)?,
        end: hex(WHAT, line, end)?,
        perms: perms.to_string(),
        offset: hex(WHAT, line, offset)?,
        dev_major: hex(WHAT, line, major)? as u32,
        dev_minor: hex(WHAT, line, minor)? as u32,
        inode: dec(WHAT, line, inode)?,
        path: rest.trim_start_matches(' ').to_string(),
    };
    if parsed.end < parsed.start {
        return Err(ParseError::new(WHAT, line, "range ends before it starts"));
    }
    Ok(parsed)
}

/// Parses a whole maps file.
pub fn parse(text: &str) -> Result<Vec<MapsLine>, ParseError> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(parse_line)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
55d0c2a00000-55d0c2a02000 r--p 00000000 fe:01 1311286                    /usr/bin/cat
55d0c3e2b000-55d0c3e4c000 rw-p 00000000 00:00 0                          [heap]
7f4c1a600000-7f4c1a628000 r-xp 00028000 fe:01 1835                       /usr/lib/x86_64-linux-gnu/libc.so.6
7f4c1a800000-7f4c1a801000 rw-s 00000000 00:01 4242                       /memfd:with space (deleted)
7ffd5a1c3000-7ffd5a1e4000 rw-p 00000000 00:00 0                          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
7f4c1a900000-7f4c1a901000 rw-p 00000000 00:00 0 
";

    #[test]
    fn parses_kernel_text() {
        let maps = parse(TEXT).unwrap();
        assert_eq!(maps.len(), 7);
        assert_eq!(maps[0].start, 0x55d0c2a00000);
        assert_eq!(maps[0].end, 0x55d0c2a02000);
        assert_eq!(maps[0].path, "/usr/bin/cat");
        assert_eq!(maps[0].dev_major, 0xfe);
        assert_eq!(maps[0].dev_minor, 1);
        assert_eq!(maps[0].inode, 1311286);
        assert_eq!(maps[1].path, "[heap]");
        assert_eq!(maps[2].offset, 0x28000);
        assert_eq!(maps[2].perms, "r-xp");
        assert_eq!(maps[3].path, "/memfd:with space (deleted)");
        assert_eq!(maps[5].end, 0xffffffffff601000);
        assert_eq!(maps[6].path, "");
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_line("hello world").is_err());
        assert!(parse_line("1000-zz r--p 0 00:00 0").is_err());
        assert!(parse_line("2000-1000 r--p 0 00:00 0").is_err());
        assert!(parse_line("").is_err());
        assert!(is_maps_line("55d0c2a00000-55d0c2a02000 r--p"));
        assert!(!is_maps_line("Rss:   4 kB"));
    }
}
