//! The VMCOREINFO note: the kernel's own description of itself for dump
//! readers (Documentation/admin-guide/kdump/vmcoreinfo.rst), one
//! `KEY=VALUE` a line: `OSRELEASE`, `PAGESIZE`, `KERNELOFFSET` (hex),
//! `SYMBOL(name)` (hex addresses), `OFFSET(struct.member)`,
//! `SIZE(struct)`, `LENGTH(name)` and `NUMBER(name)` (decimal; kernels
//! print a few `NUMBER`s in hex with a `0x`), `BUILD-ID`.

use std::collections::HashMap;

/// A parsed VMCOREINFO.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmcoreInfo {
    /// `OSRELEASE`: the kernel's release.
    pub release: String,
    /// `PAGESIZE`.
    pub page_size: u64,
    /// `KERNELOFFSET`: the KASLR shift of the kernel image (0 without).
    pub kernel_offset: u64,
    /// `BUILD-ID`, if the kernel printed one.
    pub build_id: Option<String>,
    symbols: HashMap<String, u64>,
    offsets: HashMap<String, u64>,
    sizes: HashMap<String, u64>,
    lengths: HashMap<String, u64>,
    numbers: HashMap<String, i64>,
}

fn number(v: &str) -> Option<i64> {
    let v = v.trim();
    if let Some(h) = v.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok().map(|x| x as i64);
    }
    v.parse::<i64>().ok()
}

impl VmcoreInfo {
    /// Parses the note's text. Lines of no known form are skipped (new
    /// kernels add keys); a note without `OSRELEASE` or a usable
    /// `PAGESIZE` is refused.
    pub fn parse(text: &str) -> Result<VmcoreInfo, String> {
        let mut v = VmcoreInfo::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let inner = |prefix: &str| {
                key.strip_prefix(prefix)
                    .and_then(|k| k.strip_suffix(')'))
                    .map(str::to_string)
            };
            if key == "OSRELEASE" {
                v.release = value.trim().to_string();
            } else if key == "PAGESIZE" {
                v.page_size = value.trim().parse().unwrap_or(0);
            } else if key == "KERNELOFFSET" {
                v.kernel_offset = u64::from_str_radix(value.trim(), 16)
                    .map_err(|_| format!("KERNELOFFSET={value} is not a hex number"))?;
            } else if key == "BUILD-ID" {
                v.build_id = Some(value.trim().to_ascii_lowercase());
            } else if let Some(k) = inner("SYMBOL(") {
                if let Ok(a) = u64::from_str_radix(value.trim(), 16) {
                    v.symbols.insert(k, a);
                }
            } else if let Some(k) = inner("OFFSET(") {
                if let Some(n) = number(value) {
                    v.offsets.insert(k, n as u64);
                }
            } else if let Some(k) = inner("SIZE(") {
                if let Some(n) = number(value) {
                    v.sizes.insert(k, n as u64);
                }
            } else if let Some(k) = inner("LENGTH(") {
                if let Some(n) = number(value) {
                    v.lengths.insert(k, n as u64);
                }
            } else if let Some(k) = inner("NUMBER(") {
                if let Some(n) = number(value) {
                    v.numbers.insert(k, n);
                }
            }
        }
        if v.release.is_empty() {
            return Err("VMCOREINFO has no OSRELEASE".into());
        }
        if !v.page_size.is_power_of_two() || v.page_size < 1024 {
            return Err(format!(
                "VMCOREINFO has no usable PAGESIZE ({})",
                v.page_size
            ));
        }
        Ok(v)
    }

    /// `SYMBOL(name)`: a run-time address (KASLR included).
    pub fn symbol(&self, name: &str) -> Option<u64> {
        self.symbols.get(name).copied()
    }
    /// `OFFSET(struct.member)`.
    pub fn offset(&self, name: &str) -> Option<u64> {
        self.offsets.get(name).copied()
    }
    /// `SIZE(struct)`.
    pub fn size(&self, name: &str) -> Option<u64> {
        self.sizes.get(name).copied()
    }
    /// `LENGTH(name)`.
    pub fn length(&self, name: &str) -> Option<u64> {
        self.lengths.get(name).copied()
    }
    /// `NUMBER(name)`.
    pub fn number(&self, name: &str) -> Option<i64> {
        self.numbers.get(name).copied()
    }
    /// Every `OFFSET(...)`, for checking a BTF against the dump.
    pub fn offsets(&self) -> impl Iterator<Item = (&str, u64)> {
        self.offsets.iter().map(|(k, &v)| (k.as_str(), v))
    }
    /// Every `SIZE(...)`.
    pub fn sizes(&self) -> impl Iterator<Item = (&str, u64)> {
        self.sizes.iter().map(|(k, &v)| (k.as_str(), v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start of a 6.1 kernel's note, as the `full` guest wrote it.
    const NOTE: &str = "OSRELEASE=6.1.0\nBUILD-ID=0A1b2c\nPAGESIZE=4096\nSYMBOL(init_uts_ns)=ffffffff82012340\nOFFSET(uts_namespace.name)=0\nSYMBOL(mem_section)=ffff88807ffd2000\nLENGTH(mem_section)=2048\nSIZE(mem_section)=16\nOFFSET(mem_section.section_mem_map)=0\nNUMBER(SECTION_SIZE_BITS)=27\nSIZE(page)=64\nOFFSET(page.flags)=0\nNUMBER(PG_lru)=4\nNUMBER(PG_head_mask)=65536\nNUMBER(PAGE_BUDDY_MAPCOUNT_VALUE)=-129\nNUMBER(phys_base)=0\nSYMBOL(init_top_pgt)=ffffffff8200e000\nNUMBER(pgtable_l5_enabled)=0\nKERNELOFFSET=0\nNUMBER(KERNEL_IMAGE_SIZE)=1073741824\nNUMBER(sme_mask)=0\nCRASHTIME=1700000000\nwhatever line\n";

    #[test]
    fn parses_a_kernel_note() {
        let v = VmcoreInfo::parse(NOTE).unwrap();
        assert_eq!(v.release, "6.1.0");
        assert_eq!(v.page_size, 4096);
        assert_eq!(v.kernel_offset, 0);
        assert_eq!(v.build_id.as_deref(), Some("0a1b2c"));
        assert_eq!(v.symbol("init_top_pgt"), Some(0xffffffff8200e000));
        assert_eq!(v.length("mem_section"), Some(2048));
        assert_eq!(v.size("page"), Some(64));
        assert_eq!(v.offset("page.flags"), Some(0));
        assert_eq!(v.number("PAGE_BUDDY_MAPCOUNT_VALUE"), Some(-129));
        assert_eq!(v.number("PG_head_mask"), Some(65536));
        assert_eq!(v.symbol("init_task"), None);
    }

    #[test]
    fn refuses_a_note_without_release_or_page_size() {
        assert!(VmcoreInfo::parse("PAGESIZE=4096\n").is_err());
        assert!(VmcoreInfo::parse("OSRELEASE=6.1\nPAGESIZE=12\n").is_err());
        assert!(VmcoreInfo::parse("OSRELEASE=6.1\nPAGESIZE=4096\nKERNELOFFSET=zz\n").is_err());
    }
}
