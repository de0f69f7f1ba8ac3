//! The file brought along with a dump (`--btf`): raw BTF (a copy of the
//! crashed machine's `/sys/kernel/btf/vmlinux`) or the kernel's vmlinux,
//! whose `.BTF` section gives the types and whose symbol table gives the
//! addresses VMCOREINFO does not print (`init_task`, ...), at link time:
//! the dump's `KERNELOFFSET` shifts them. With raw BTF, or a vmlinux
//! whose symbols were stripped (the one inside a distribution's vmlinuz),
//! the kernel's `System.map` (`--system-map`) gives those addresses.

use crate::btf::Btf;
use crate::dumpfile::{Dump, Machine};
use crate::mmu::{Arch, Mmu};
use crate::vmcoreinfo::VmcoreInfo;
use crate::{DumpError, Result};
use object::{Object, ObjectSection, ObjectSymbol};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The symbols pagescope looks up in a vmlinux.
pub const SYMBOLS: &[&str] = &[
    "init_task",
    "init_uts_ns",
    "init_top_pgt",
    "swapper_pg_dir",
    "empty_zero_page",
    "huge_zero_page",
    "huge_zero_folio",
    "special_mapping_vmops",
    "legacy_special_mapping_vmops",
    "iomem_resource",
    "mem_section",
    "vmemmap_base",
    "node_data",
    "vm_zone_stat",
    "vm_node_stat",
    "_totalram_pages",
    "blockdev_superblock",
    "nr_swapfiles",
];

/// What the brought file gave.
#[derive(Debug)]
pub struct KernelFile {
    /// The file.
    pub path: PathBuf,
    /// Its types.
    pub btf: Btf,
    /// Link-time addresses of [`SYMBOLS`] it has (empty for raw BTF).
    pub symbols: HashMap<String, u64>,
    /// Its GNU build id, lower-case hex (a vmlinux only).
    pub build_id: Option<String>,
    /// The release in its `init_uts_ns` (a vmlinux only).
    pub release: Option<String>,
    /// Whether it is a vmlinux (an ELF file) rather than raw BTF.
    pub is_elf: bool,
    /// Whether it is the kernel's own, read from the dump
    /// ([`KernelFile::from_dump`]).
    pub from_dump: bool,
}

fn bad(path: &Path, why: impl Into<String>) -> DumpError {
    DumpError::Bad {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

impl KernelFile {
    /// Reads `path`: raw BTF, or an ELF vmlinux with a `.BTF` section.
    pub fn open(path: &Path) -> Result<KernelFile> {
        let io = |error| DumpError::Io {
            path: path.to_path_buf(),
            error,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let mut head = [0u8; 4];
        let n = std::os::unix::fs::FileExt::read_at(&file, &mut head, 0).map_err(io)?;
        if n >= 2 && Btf::is_btf(&head) {
            let bytes = std::fs::read(path).map_err(io)?;
            let btf = Btf::parse(&bytes).map_err(|e| bad(path, e))?;
            return Ok(KernelFile {
                path: path.to_path_buf(),
                btf,
                symbols: HashMap::new(),
                build_id: None,
                release: None,
                is_elf: false,
                from_dump: false,
            });
        }
        if n < 4 || head != *b"\x7fELF" {
            return Err(bad(path, "neither BTF nor an ELF vmlinux"));
        }
        let cache = object::read::ReadCache::new(file);
        let elf = object::File::parse(&cache)
            .map_err(|e| bad(path, format!("not a readable ELF file: {e}")))?;
        let section = elf.section_by_name(".BTF").ok_or_else(|| {
            bad(
                path,
                "this vmlinux has no .BTF section (a kernel built with CONFIG_DEBUG_INFO_BTF has one)",
            )
        })?;
        let data = section
            .data()
            .map_err(|e| bad(path, format!(".BTF: {e}")))?;
        let btf = Btf::parse(data).map_err(|e| bad(path, format!(".BTF: {e}")))?;
        let symbols = symbols_of(&elf);
        let build_id = elf
            .build_id()
            .ok()
            .flatten()
            .map(|id| id.iter().map(|b| format!("{b:02x}")).collect());
        // The release in the image's init_uts_ns: new_utsname's third
        // field (sysname and nodename are 65 bytes each).
        let release = (|| {
            let at = *symbols.get("init_uts_ns")?;
            let name = btf.field("uts_namespace", "name")?.offset;
            let rel = btf.field("new_utsname", "release")?.offset;
            let addr = at + name + rel;
            elf.sections().find_map(|s| {
                let d = s.data_range(addr, 65).ok().flatten()?;
                let end = d.iter().position(|&b| b == 0).unwrap_or(d.len());
                Some(String::from_utf8_lossy(&d[..end]).into_owned())
            })
        })();
        Ok(KernelFile {
            path: path.to_path_buf(),
            btf,
            symbols,
            build_id,
            release,
            is_elf: true,
            from_dump: false,
        })
    }

    /// The kernel's own types and symbols, read from the dump: kallsyms'
    /// tables, whose addresses VMCOREINFO gives, then the BTF between
    /// `__start_BTF` and `__stop_BTF`. Symbols are kept at link time, as
    /// a vmlinux's are. Refused, naming the file to bring, where the dump
    /// does not have them.
    pub fn from_dump(core: &Dump, machine: Machine, info: &VmcoreInfo) -> Result<KernelFile> {
        let path = core.path();
        let bring = |why: String| {
            bad(
                path,
                format!(
                    "{why}: bring the crashed kernel's vmlinux with BTF (--btf vmlinux, release {r}; Debian ships it in linux-image-{r}-dbg as /usr/lib/debug/boot/vmlinux-{r})",
                    r = info.release
                ),
            )
        };
        if !crate::kallsyms::available(info) {
            return Err(bring(
                "the dump's VMCOREINFO gives no task list or structure layouts, nor the kernel's kallsyms tables to find them in the dump".into(),
            ));
        }
        let top = info
            .symbol(machine.top_table())
            .ok_or_else(|| bring(format!("VMCOREINFO has no SYMBOL({})", machine.top_table())))?;
        let arch = Arch::of(machine, info, core.phys_base()).map_err(|e| bad(path, e))?;
        let mut mmu = Mmu::new(core, arch, top).map_err(|e| bad(path, e))?;
        let mut wanted: Vec<&str> = SYMBOLS.to_vec();
        wanted.extend(["__start_BTF", "__stop_BTF"]);
        // x86_64 keeps per-CPU symbols absolute (KALLSYMS_ABSOLUTE_PERCPU).
        let absolute = machine == Machine::X86_64;
        let found = crate::kallsyms::lookup(&mut mmu, info, absolute, &wanted)?.map_err(|e| {
            bring(format!(
                "the kernel's kallsyms in the dump can't be read ({e})"
            ))
        })?;
        let (Some(&start), Some(&stop)) = (found.get("__start_BTF"), found.get("__stop_BTF"))
        else {
            return Err(bring("the kernel's own kallsyms has no __start_BTF (a kernel built without CONFIG_KALLSYMS_ALL lists no data symbols, one without CONFIG_DEBUG_INFO_BTF has no BTF)".into()));
        };
        let len = stop.wrapping_sub(start);
        if len == 0 || len > MAX_BTF {
            return Err(bring(format!(
                "the kernel's BTF in the dump has {len} bytes"
            )));
        }
        let mut bytes = vec![0u8; len as usize];
        if !mmu.read(start, &mut bytes)? {
            return Err(bring("the kernel's BTF is not in the dump".into()));
        }
        let btf =
            Btf::parse(&bytes).map_err(|e| bring(format!("the kernel's BTF in the dump: {e}")))?;
        let symbols = found
            .into_iter()
            .filter(|(n, _)| !n.ends_with("_BTF"))
            .map(|(n, a)| (n, a.wrapping_sub(info.kernel_offset)))
            .collect();
        Ok(KernelFile {
            path: path.to_path_buf(),
            btf,
            symbols,
            build_id: None,
            release: None,
            is_elf: false,
            from_dump: true,
        })
    }
}

/// The largest BTF read from a dump (a distribution kernel's is 5 to 10
/// MB).
const MAX_BTF: u64 = 64 << 20;

/// The link-time addresses of [`SYMBOLS`] in a vmlinux's `.symtab`. The
/// table and its names are read whole, each in one read (a distribution's
/// vmlinux has some 150 000 symbols; reading each name on its own was
/// 28 500 small reads), and walked as ELF64 little-endian entries (24
/// bytes: name, info, other, section, value, size); without them, through
/// `object`'s symbol iterator.
fn symbols_of<'d, R: object::ReadRef<'d>>(elf: &object::File<'d, R>) -> HashMap<String, u64> {
    let mut symbols = HashMap::new();
    let tables = (|| {
        let symtab = elf.section_by_name(".symtab")?.data().ok()?;
        let strtab = elf.section_by_name(".strtab")?.data().ok()?;
        Some((symtab, strtab))
    })();
    let Some((symtab, strtab)) = tables.filter(|_| elf.is_little_endian() && elf.is_64()) else {
        for s in elf.symbols() {
            if let Ok(name) = s.name() {
                if SYMBOLS.contains(&name) && s.address() != 0 {
                    symbols.entry(name.to_string()).or_insert(s.address());
                }
            }
        }
        return symbols;
    };
    for e in symtab.chunks_exact(24) {
        let at = u32::from_le_bytes(e[0..4].try_into().expect("4 bytes")) as usize;
        let value = u64::from_le_bytes(e[8..16].try_into().expect("8 bytes"));
        let Some(rest) = strtab.get(at..) else {
            continue;
        };
        let name = &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())];
        if value != 0 {
            if let Some(&n) = SYMBOLS.iter().find(|&&n| n.as_bytes() == name) {
                symbols.entry(n.to_string()).or_insert(value);
            }
        }
    }
    symbols
}

/// The link-time addresses of [`SYMBOLS`] (and `_stext`, to match the
/// map with the dump) in a `System.map` (`ADDRESS TYPE NAME` a line, as
/// the kernel build writes it and distributions ship it in /boot).
pub fn system_map(path: &Path) -> Result<HashMap<String, u64>> {
    let text = std::fs::read(path).map_err(|error| DumpError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let mut symbols = HashMap::new();
    let mut lines = 0;
    for line in text.split(|&b| b == b'\n') {
        let line = String::from_utf8_lossy(line);
        let mut w = line.split_ascii_whitespace();
        let (Some(addr), Some(kind), Some(name), None) = (w.next(), w.next(), w.next(), w.next())
        else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        if kind.len() != 1 {
            continue;
        }
        lines += 1;
        if (name == "_stext" || SYMBOLS.contains(&name)) && addr != 0 {
            symbols.entry(name.to_string()).or_insert(addr);
        }
    }
    if lines == 0 {
        return Err(bad(
            path,
            "not a System.map (lines of ADDRESS TYPE NAME); Debian's /boot/System.map is a placeholder, the real one is in linux-image-RELEASE-dbg (/usr/lib/debug/boot/System.map-RELEASE)",
        ));
    }
    Ok(symbols)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_system_map_gives_the_symbols_pagescope_looks_up() {
        let dir = std::env::temp_dir().join(format!("pagescope-sysmap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let map = dir.join("System.map");
        std::fs::write(
            &map,
            "0000000000000000 D __per_cpu_start\nffffffff81000000 T _stext\nffffffff82a0c940 D init_task\nffffffff82a0c940 d init_task_dup junk\nffffffff8260f000 D init_top_pgt\n",
        )
        .unwrap();
        let s = system_map(&map).unwrap();
        assert_eq!(s.get("init_task"), Some(&0xffff_ffff_82a0_c940));
        assert_eq!(s.get("init_top_pgt"), Some(&0xffff_ffff_8260_f000));
        assert_eq!(s.get("_stext"), Some(&0xffff_ffff_8100_0000));
        assert_eq!(s.len(), 3);
        std::fs::write(
            &map,
            "ffffffffffffffff B The real System.map is in the linux-image-<version>-dbg package\n",
        )
        .unwrap();
        let e = system_map(&map).unwrap_err().to_string();
        assert!(e.contains("not a System.map"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
