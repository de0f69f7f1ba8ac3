//! The ELF core file: its PT_LOAD segments map physical addresses to file
//! offsets, and its notes hold VMCOREINFO. qemu's `dump-guest-memory`,
//! `virsh dump`, `makedumpfile -E` and a copy of `/proc/vmcore` all write
//! this form.
//!
//! Only the headers and notes are read when the file is opened; memory is
//! read later, a page at a time, with `pread` (`FileExt::read_at`), into
//! a small cache of pages ([`PageCache`]: the walk reads the same page
//! table and `struct page` pages many times over), so a dump of any size
//! costs no more memory than that cache.

use crate::pagecache::PageCache;
use crate::{DumpError, Result};
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader};
use object::read::ReadCache;
use object::Endianness;
use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// One PT_LOAD segment: `memsz` bytes of physical memory from `paddr`,
/// the first `filesz` of them in the file at `offset` (the rest read as
/// zeros, as `makedumpfile -E` leaves excluded zero pages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// First physical address.
    pub paddr: u64,
    /// Bytes of memory.
    pub memsz: u64,
    /// Bytes in the file.
    pub filesz: u64,
    /// Where they start in the file.
    pub offset: u64,
}

/// An opened ELF core.
#[derive(Debug)]
pub struct ElfCore {
    file: File,
    path: PathBuf,
    /// Segments sorted by physical address.
    segments: Vec<Segment>,
    /// The VMCOREINFO note's text.
    vmcoreinfo: Option<String>,
    /// `e_machine`.
    pub machine: u16,
    /// Pages read.
    cache: RefCell<PageCache>,
}

/// The pages cached: x86_64's.
const PAGE: u64 = 4096;

fn bad(path: &Path, why: impl Into<String>) -> DumpError {
    DumpError::Bad {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

impl ElfCore {
    /// Opens `path` and reads its headers and notes. A file that is not an
    /// ELF core, or whose segments lie past its end (cut short), is
    /// refused with [`DumpError::Bad`].
    pub fn open(path: &Path) -> Result<ElfCore> {
        ElfCore::open_as(path, false)
    }

    /// Opens the running kernel's `/proc/kcore` (or a file of its form):
    /// its PT_LOAD segments are the kernel's virtual ranges, with the
    /// physical address only for RAM (the direct map) and the kernel
    /// image; the others (vmalloc, modules, vmemmap: `p_paddr` all ones)
    /// and the image, which lies in RAM's segments too, are left out.
    pub fn open_kcore(path: &Path) -> Result<ElfCore> {
        ElfCore::open_as(path, true)
    }

    fn open_as(path: &Path, kcore: bool) -> Result<ElfCore> {
        let io = |error| DumpError::Io {
            path: path.to_path_buf(),
            error,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut magic = [0u8; 4];
        let n = file.read_at(&mut magic, 0).map_err(io)?;
        if n < 4 || magic != *b"\x7fELF" {
            return Err(bad(path, "not an ELF core (no ELF magic)"));
        }
        let cache = ReadCache::new(file.try_clone().map_err(io)?);
        let data = &cache;
        let header = elf::FileHeader64::<Endianness>::parse(data)
            .map_err(|e| bad(path, format!("not a 64-bit ELF file ({e}), or cut short")))?;
        let endian = header
            .endian()
            .map_err(|e| bad(path, format!("ELF header: {e}")))?;
        if header.e_type(endian) != elf::ET_CORE {
            return Err(bad(
                path,
                format!(
                    "an ELF file of type {}, not a core dump",
                    header.e_type(endian)
                ),
            ));
        }
        let machine = header.e_machine(endian);
        let phdrs = header.program_headers(endian, data).map_err(|e| {
            bad(
                path,
                format!("program headers: {e} (the file is cut short?)"),
            )
        })?;
        let mut segments = Vec::new();
        let mut vmcoreinfo = None;
        // In /proc/kcore, RAM's segments (KCORE_RAM) are the direct map,
        // each at `__va` of its physical address: one offset between the
        // two for all, and the lowest addresses that have one. The kernel
        // image's segment (KCORE_TEXT) has a physical address too, at
        // another offset, over the same RAM; the others have none.
        let direct = phdrs
            .iter()
            .filter(|ph| ph.p_type(endian) == elf::PT_LOAD && ph.p_paddr(endian) != u64::MAX)
            .min_by_key(|ph| ph.p_vaddr(endian))
            .map(|ph| ph.p_vaddr(endian).wrapping_sub(ph.p_paddr(endian)));
        for ph in phdrs {
            match ph.p_type(endian) {
                elf::PT_LOAD => {
                    let s = Segment {
                        paddr: ph.p_paddr(endian),
                        memsz: ph.p_memsz(endian),
                        filesz: ph.p_filesz(endian),
                        offset: ph.p_offset(endian),
                    };
                    if s.filesz > s.memsz {
                        return Err(bad(path, format!("a segment at physical {:#x} has more bytes in the file than in memory", s.paddr)));
                    }
                    match s.offset.checked_add(s.filesz) {
                        Some(end) if end <= len => {}
                        _ => {
                            return Err(bad(
                                path,
                                format!(
                                    "cut short: the memory at physical {:#x} should end at byte {} of the file, which has {len}",
                                    s.paddr,
                                    s.offset.saturating_add(s.filesz)
                                ),
                            ))
                        }
                    }
                    let physical = s.paddr != u64::MAX
                        && Some(ph.p_vaddr(endian).wrapping_sub(s.paddr)) == direct;
                    if s.memsz > 0 && (!kcore || physical) {
                        // Every sum of a kept segment's start and size is
                        // then in range.
                        if s.paddr.checked_add(s.memsz).is_none() {
                            return Err(bad(
                                path,
                                format!(
                                    "a segment at physical {:#x} of {} bytes runs past the end of the physical address space",
                                    s.paddr, s.memsz
                                ),
                            ));
                        }
                        segments.push(s);
                    }
                }
                elf::PT_NOTE => {
                    let notes = ph
                        .notes(endian, data)
                        .map_err(|e| bad(path, format!("notes: {e} (the file is cut short?)")))?;
                    let Some(mut notes) = notes else { continue };
                    while let Some(note) =
                        notes.next().map_err(|e| bad(path, format!("notes: {e}")))?
                    {
                        if note.name() == b"VMCOREINFO" {
                            let text = String::from_utf8_lossy(note.desc());
                            vmcoreinfo = Some(text.trim_end_matches('\0').to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        segments.sort_by_key(|s| s.paddr);
        if segments
            .windows(2)
            .any(|w| w[0].paddr + w[0].memsz > w[1].paddr)
        {
            return Err(bad(path, "its memory segments overlap"));
        }
        Ok(ElfCore {
            file,
            path: path.to_path_buf(),
            segments,
            vmcoreinfo,
            machine,
            cache: RefCell::new(PageCache::new(PAGE as usize)),
        })
    }

    /// The VMCOREINFO note's text, if the dump has one.
    pub fn vmcoreinfo(&self) -> Option<&str> {
        self.vmcoreinfo.as_deref()
    }

    /// The physical memory ranges the dump holds, `[start, end)`.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.segments.iter().map(|s| (s.paddr, s.paddr + s.memsz))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads physical memory at `paddr` into `buf`. `Ok(false)` if any of
    /// it is not in the dump (a hole, or memory the dump left out).
    pub fn read_phys(&self, mut paddr: u64, mut buf: &mut [u8]) -> Result<bool> {
        let mut cache = self.cache.borrow_mut();
        while !buf.is_empty() {
            let pfn = paddr / PAGE;
            let within = (paddr % PAGE) as usize;
            let n = (PAGE as usize - within).min(buf.len());
            let (now, rest) = buf.split_at_mut(n);
            if cache.get(pfn).is_none() {
                if self.read_uncached(pfn * PAGE, cache.slot_for(pfn))? {
                    cache.keep(pfn);
                } else if !self.read_uncached(paddr, now)? {
                    // Not the whole page (a segment begins or ends in
                    // it), nor the part asked for.
                    return Ok(false);
                } else {
                    paddr += n as u64;
                    buf = rest;
                    continue;
                }
            }
            let page = cache.get(pfn).expect("kept");
            now.copy_from_slice(&page[within..within + n]);
            paddr += n as u64;
            buf = rest;
        }
        Ok(true)
    }

    /// [`ElfCore::read_phys`] from the file.
    fn read_uncached(&self, mut paddr: u64, mut buf: &mut [u8]) -> Result<bool> {
        while !buf.is_empty() {
            let i = self
                .segments
                .partition_point(|s| s.paddr + s.memsz <= paddr);
            let Some(s) = self.segments.get(i).filter(|s| s.paddr <= paddr) else {
                return Ok(false);
            };
            let within = paddr - s.paddr;
            let n = ((s.memsz - within) as usize).min(buf.len());
            let (now, rest) = buf.split_at_mut(n);
            if within < s.filesz {
                let inf = ((s.filesz - within) as usize).min(n);
                self.file
                    .read_exact_at(&mut now[..inf], s.offset + within)
                    .map_err(|error| DumpError::Io {
                        path: self.path.clone(),
                        error,
                    })?;
                now[inf..].fill(0);
            } else {
                now.fill(0);
            }
            paddr += n as u64;
            buf = rest;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF core of `machine` with one PT_LOAD per (vaddr, paddr,
    /// size), each segment's bytes all its index.
    fn core(machine: u16, loads: &[(u64, u64, u64)]) -> Vec<u8> {
        let phoff = 64u64;
        let data = phoff + 56 * loads.len() as u64;
        let mut f = vec![0u8; 64];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2; // 64-bit
        f[5] = 1; // little-endian
        f[6] = 1;
        f[16..18].copy_from_slice(&elf::ET_CORE.to_le_bytes());
        f[18..20].copy_from_slice(&machine.to_le_bytes());
        f[20..24].copy_from_slice(&1u32.to_le_bytes());
        f[32..40].copy_from_slice(&phoff.to_le_bytes());
        f[52..54].copy_from_slice(&64u16.to_le_bytes());
        f[54..56].copy_from_slice(&56u16.to_le_bytes());
        f[56..58].copy_from_slice(&(loads.len() as u16).to_le_bytes());
        let mut at = data;
        for &(vaddr, paddr, size) in loads {
            for v in [
                elf::PT_LOAD as u64 | (7 << 32),
                at,
                vaddr,
                paddr,
                size,
                size,
                4096,
            ] {
                f.extend(v.to_le_bytes());
            }
            at += size;
        }
        for (i, &(_, _, size)) in loads.iter().enumerate() {
            f.extend(std::iter::repeat_n(i as u8, size as usize));
        }
        f
    }

    #[test]
    fn kcore_keeps_the_direct_map_and_leaves_the_image_alias_out() {
        // arm64's /proc/kcore: RAM at __va (the linear map, lowest), the
        // kernel image at its own address over the same RAM, vmalloc
        // without a physical address.
        let loads = [
            (0xffff_8000_0800_0000, 0x4000_2000, 0x2000), // KCORE_TEXT
            (0xffff_0000_0000_0000, 0x4000_0000, 0x4000), // KCORE_RAM
            (0xffff_0000_1000_0000, 0x5000_0000, 0x1000), // KCORE_RAM
            (0xffff_8000_1000_0000, u64::MAX, 0x1000),    // KCORE_VMALLOC
        ];
        let path = std::env::temp_dir().join(format!("pagescope-kcore-{}", std::process::id()));
        std::fs::write(&path, core(183, &loads)).unwrap();
        let kcore = ElfCore::open_kcore(&path);
        // Read as a dump, the alias overlaps RAM: refused.
        let dump = ElfCore::open(&path);
        std::fs::remove_file(&path).unwrap();
        let kcore = kcore.unwrap();
        assert_eq!(
            kcore.ranges().collect::<Vec<_>>(),
            [(0x4000_0000, 0x4000_4000), (0x5000_0000, 0x5000_1000)]
        );
        let mut b = [9u8; 2];
        assert!(kcore.read_phys(0x4000_2000, &mut b).unwrap());
        assert_eq!(b, [1, 1]);
        assert!(dump.is_err());
    }
}
