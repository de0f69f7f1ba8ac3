//! ELF headers of mapped files: loadable segments and allocated sections,
//! read with the `object` crate through a read cache, so only the headers
//! and the section-name table are read, never the whole file.

use object::read::elf::{ElfFile64, FileHeader, ProgramHeader, SectionHeader};
use object::read::ReadCache;
use object::{elf, Endianness};
use pagescope_core::model::{ElfFile, ElfSection, ElfSegment, SectionKind};
use std::fs::File;
use std::path::Path;

/// Reads the segments and sections of a 64-bit ELF file. `None` if the
/// file is not a readable 64-bit ELF file (a data file, a font, a
/// 32-bit library, or a file that is gone).
pub fn read(path: &Path, key: (u32, u32, u64), display: &str) -> Option<ElfFile> {
    let file = File::open(path).ok()?;
    let cache = ReadCache::new(file);
    let elf = ElfFile64::<Endianness, _>::parse(&cache).ok()?;
    let endian = elf.endian();
    let header = elf.elf_header();
    let data = elf.data();
    let segments = header
        .program_headers(endian, data)
        .ok()?
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD)
        .map(|p| ElfSegment {
            offset: p.p_offset(endian),
            vaddr: p.p_vaddr(endian),
            filesz: p.p_filesz(endian),
            memsz: p.p_memsz(endian),
            flags: p.p_flags(endian),
        })
        .collect();
    let table = elf.elf_section_table();
    let sections = table
        .iter()
        .filter_map(|s| {
            let flags = s.sh_flags(endian);
            if flags & u64::from(elf::SHF_ALLOC) == 0 || s.sh_size(endian) == 0 {
                return None;
            }
            let kind = if flags & u64::from(elf::SHF_EXECINSTR) != 0 {
                SectionKind::Text
            } else if flags & u64::from(elf::SHF_WRITE) == 0 {
                SectionKind::Rodata
            } else if s.sh_type(endian) == elf::SHT_NOBITS {
                SectionKind::Bss
            } else {
                SectionKind::Data
            };
            let name = table
                .section_name(endian, s)
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .unwrap_or_default();
            Some(ElfSection {
                name,
                addr: s.sh_addr(endian),
                size: s.sh_size(endian),
                kind,
            })
        })
        .collect();
    Some(ElfFile {
        path: display.to_string(),
        dev_major: key.0,
        dev_minor: key.1,
        inode: key.2,
        elf_type: header.e_type(endian),
        segments,
        sections,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_executable() {
        let exe = std::env::current_exe().unwrap();
        let e = read(&exe, (0, 0, 1), "self").unwrap();
        assert!(
            e.segments.iter().any(|s| s.flags & 1 != 0),
            "no executable segment"
        );
        assert!(
            e.segments.iter().any(|s| s.flags & 2 != 0),
            "no writable segment"
        );
        let text = e.sections.iter().find(|s| s.name == ".text").unwrap();
        assert_eq!(text.kind, SectionKind::Text);
        assert!(e
            .sections
            .iter()
            .any(|s| s.name == ".bss" && s.kind == SectionKind::Bss));
        assert!(e.sections.iter().any(|s| s.kind == SectionKind::Rodata));
    }

    #[test]
    fn non_elf_is_none() {
        let status = crate::procfs::ProcDir::own(&crate::Root::default().proc).file_path("status");
        assert!(read(&status, (0, 0, 0), "x").is_none());
        assert!(read(Path::new("/nonexistent"), (0, 0, 0), "x").is_none());
    }
}
