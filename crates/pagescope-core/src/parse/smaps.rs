//! `/proc/PID/smaps` and `/proc/PID/smaps_rollup`.
//!
//! Each smaps entry is a maps header line, then `Key:   N kB` lines, then
//! `VmFlags: rd wr mr ...` (Documentation/filesystems/proc.rst,
//! "/proc/PID/smaps"). smaps_rollup is one header line and the same keys
//! summed over the process.

use super::maps::{is_maps_line, parse_line, MapsLine};
use super::{dec, ParseError};
use crate::model::SmapsCounters;

/// One smaps entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SmapsEntry {
    /// The header line.
    pub map: MapsLine,
    /// The counters pagescope keeps.
    pub counters: SmapsCounters,
    /// `VmFlags` mnemonics.
    pub vm_flags: Vec<String>,
}

const WHAT: &str = "smaps";

/// Stores one `Key: N kB` line into the counters; unknown keys are ignored.
fn set_counter(c: &mut SmapsCounters, line: &str) -> Result<(), ParseError> {
    let Some((key, value)) = line.split_once(':') else {
        return Err(ParseError::new(WHAT, line, "no colon"));
    };
    let slot = match key {
        "Size" => &mut c.size,
        "Rss" => &mut c.rss,
        "Pss" => &mut c.pss,
        "Shared_Clean" => &mut c.shared_clean,
        "Shared_Dirty" => &mut c.shared_dirty,
        "Private_Clean" => &mut c.private_clean,
        "Private_Dirty" => &mut c.private_dirty,
        "Referenced" => &mut c.referenced,
        "Anonymous" => &mut c.anonymous,
        "AnonHugePages" => &mut c.anon_huge_pages,
        "Swap" => &mut c.swap,
        "SwapPss" => &mut c.swap_pss,
        "Locked" => &mut c.locked,
        _ => return Ok(()),
    };
    let number = value.trim().trim_end_matches("kB").trim();
    *slot = dec(WHAT, line, number)?;
    Ok(())
}

/// Parses a whole smaps file.
pub fn parse(text: &str) -> Result<Vec<SmapsEntry>, ParseError> {
    let mut out: Vec<SmapsEntry> = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if is_maps_line(line) {
            out.push(SmapsEntry {
                map: parse_line(line)?,
                ..SmapsEntry::default()
            });
            continue;
        }
        let Some(entry) = out.last_mut() else {
            return Err(ParseError::new(WHAT, line, "field before any mapping"));
        };
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            entry.vm_flags = flags.split_whitespace().map(str::to_string).collect();
        } else {
            set_counter(&mut entry.counters, line)?;
        }
    }
    Ok(out)
}

/// Parses `/proc/PID/smaps_rollup` into summed counters. An empty file
/// (a kernel thread) gives zeros.
pub fn parse_rollup(text: &str) -> Result<SmapsCounters, ParseError> {
    let mut c = SmapsCounters::default();
    for line in text.lines() {
        if line.is_empty() || is_maps_line(line) {
            continue;
        }
        set_counter(&mut c, line)?;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
7f1f6a000000-7f1f7a000000 rw-p 00000000 00:00 0 
Size:             262144 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:              262144 kB
Pss:              262144 kB
Pss_Dirty:        262144 kB
Shared_Clean:          0 kB
Shared_Dirty:          0 kB
Private_Clean:         0 kB
Private_Dirty:    262144 kB
Referenced:       262144 kB
Anonymous:        262144 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
THPeligible:           0
ProtectionKey:         0
VmFlags: rd wr mr mw me ac sd 
7ffc8e7a1000-7ffc8e7c2000 rw-p 00000000 00:00 0                          [stack]
Size:                132 kB
Rss:                  12 kB
Pss:                   6 kB
Private_Dirty:        12 kB
Swap:                  4 kB
VmFlags: rd wr mr mw me gd ac 
";

    #[test]
    fn parses_kernel_text() {
        let e = parse(SMAPS).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].counters.rss, 262144);
        assert_eq!(e[0].counters.private_dirty, 262144);
        assert_eq!(e[0].counters.anonymous, 262144);
        assert_eq!(e[0].vm_flags, ["rd", "wr", "mr", "mw", "me", "ac", "sd"]);
        assert_eq!(e[1].map.path, "[stack]");
        assert_eq!(e[1].counters.pss, 6);
        assert_eq!(e[1].counters.swap, 4);
        assert!(e[1].vm_flags.contains(&"gd".to_string()));
    }

    #[test]
    fn rollup() {
        let text = "\
55f0c0a00000-7ffc8e7c2000 ---p 00000000 00:00 0                          [rollup]
Rss:                1960 kB
Pss:                 373 kB
Pss_Anon:            116 kB
Shared_Clean:       1576 kB
Private_Dirty:       140 kB
Swap:                  0 kB
";
        let c = parse_rollup(text).unwrap();
        assert_eq!(c.rss, 1960);
        assert_eq!(c.pss, 373);
        assert_eq!(c.shared_clean, 1576);
        assert_eq!(parse_rollup("").unwrap(), SmapsCounters::default());
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("Rss: 4 kB\n").is_err());
        assert!(parse("1000-2000 r--p 0 00:00 0\nRss: many kB\n").is_err());
    }
}
