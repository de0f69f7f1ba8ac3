//! `/proc/slabinfo` (version 2.1; root only).
//!
//! `name active_objs num_objs objsize objperslab pagesperslab : tunables
//! ... : slabdata active_slabs num_slabs sharedavail` (mm/slab_common.c).

use super::{dec, ParseError};
use crate::model::SlabCache;

const WHAT: &str = "slabinfo";

/// Parses `/proc/slabinfo`.
pub fn parse(text: &str) -> Result<Vec<SlabCache>, ParseError> {
    let mut lines = text.lines();
    let version = lines.next().unwrap_or("");
    if !version.starts_with("slabinfo - version: 2.") {
        return Err(ParseError::new(WHAT, version, "unknown slabinfo version"));
    }
    let mut out = Vec::new();
    for line in lines {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        // name, 5 numbers, ':', "tunables", 3, ':', "slabdata", 3
        if f.len() < 16 || f[6] != ":" || f[12] != "slabdata" {
            return Err(ParseError::new(WHAT, line, "unexpected layout"));
        }
        out.push(SlabCache {
            name: f[0].to_string(),
            active_objs: dec(WHAT, line, f[1])?,
            num_objs: dec(WHAT, line, f[2])?,
            objsize: dec(WHAT, line, f[3])?,
            pages_per_slab: dec(WHAT, line, f[5])?,
            num_slabs: dec(WHAT, line, f[14])?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_text() {
        let text = "slabinfo - version: 2.1
# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>
ext4_inode_cache    1040   1170   1096   29    8 : tunables    0    0    0 : slabdata     40     40      0
kmalloc-64         12800  12800     64   64    1 : tunables    0    0    0 : slabdata    200    200      0
";
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "ext4_inode_cache");
        assert_eq!(s[0].pages(), 320);
        assert_eq!(s[1].objsize, 64);
        assert_eq!(s[1].pages(), 200);
        assert!(parse("garbage").is_err());
        assert!(parse("slabinfo - version: 2.1\nfoo 1 2\n").is_err());
    }
}
