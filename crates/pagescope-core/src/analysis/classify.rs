//! What each page of a process is: stack, heap, or the .text, .data or
//! .bss of the application or of a library, as the 2005 suite's "basic
//! information" counts them.
//!
//! File-backed VMAs are matched to the ELF headers recorded in the
//! snapshot: the first mapping of a file gives its load bias, and from
//! there every page's runtime address falls in a known section (`.text`,
//! `.rodata`, `.data`, `.bss`, ...), including the anonymous mapping that
//! holds the rest of a file's `.bss`. When a file's headers are unknown
//! (unreadable, not ELF), permissions decide instead (`r-x` text, `rw-p`
//! data, the anonymous `rw-p` right after a file's `rw-p` its .bss), and
//! the VMA is marked heuristic.

use crate::model::{ElfFile, SectionKind, Task, Vma};
use std::collections::HashMap;

/// A page's class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageClass {
    /// Main or thread stack.
    Stack,
    /// `[heap]` and other private anonymous memory.
    Heap,
    /// Code of an executable unit (`.text`, `.plt`, ...).
    Text,
    /// Read-only data of a unit (`.rodata`, `.eh_frame`, headers).
    Rodata,
    /// Initialised data of a unit (`.data`, `.got`, `.data.rel.ro`).
    Data,
    /// Zero-initialised data of a unit (`.bss`).
    Bss,
    /// Shared memory (shmem, memfd, SysV, shared anonymous).
    Shm,
    /// A mapped file that is not an executable unit.
    File,
    /// Kernel-provided mappings (`[vdso]`, `[vvar]`, `[vsyscall]`) and
    /// inaccessible reservations.
    Other,
}

impl PageClass {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            PageClass::Stack => "stack",
            PageClass::Heap => "heap",
            PageClass::Text => "text",
            PageClass::Rodata => "rodata",
            PageClass::Data => "data",
            PageClass::Bss => "bss",
            PageClass::Shm => "shm",
            PageClass::File => "file",
            PageClass::Other => "other",
        }
    }
}

/// The executable unit a VMA belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitRef {
    /// Index into the snapshot's ELF table (`None` when the headers are
    /// unknown and permissions decided).
    pub elf: Option<usize>,
    /// The file.
    pub path: String,
    /// The application's own executable (not a library).
    pub app: bool,
    /// Load bias: runtime address minus link-time address.
    pub bias: u64,
}

/// What a VMA is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmaClass {
    /// The unit, for its file mappings and its .bss mapping.
    pub unit: Option<UnitRef>,
    /// The class of pages no section claims (and of all pages when there
    /// is no unit).
    pub base: PageClass,
    /// Classified by permissions, not ELF headers.
    pub heuristic: bool,
    /// A stack.
    pub stack: bool,
}

/// A file's identity: device major, minor, inode.
type FileKey = (u32, u32, u64);

/// The ELF files of a snapshot, by (device, inode), with each file's
/// sections as sorted runtime-offset ranges.
#[derive(Debug, Default)]
pub struct ElfTable {
    /// The files, in the order first seen.
    pub files: Vec<ElfFile>,
    by_key: HashMap<FileKey, usize>,
}

impl ElfTable {
    /// Adds a file.
    pub fn add(&mut self, e: ElfFile) {
        if let std::collections::hash_map::Entry::Vacant(v) = self.by_key.entry(e.key()) {
            v.insert(self.files.len());
            self.files.push(e);
        }
    }

    /// The index of a VMA's file, if its headers are known.
    pub fn find(&self, v: &Vma) -> Option<usize> {
        self.by_key
            .get(&(v.dev_major, v.dev_minor, v.inode))
            .copied()
    }

    /// The class of a page of file `elf` at link-time address `addr`: by
    /// the sections overlapping the page (code first, then data, read-only
    /// data, bss), else by the segment holding it.
    pub fn class_at(&self, elf: usize, addr: u64, page_size: u64) -> Option<PageClass> {
        let f = &self.files[elf];
        // Link-time addresses come from a wrapping bias: the page may be
        // the last of the address space.
        let page = addr & !(page_size - 1);
        let end = page.saturating_add(page_size);
        let mut best: Option<PageClass> = None;
        let rank = |c: PageClass| match c {
            PageClass::Text => 0,
            PageClass::Data => 1,
            PageClass::Rodata => 2,
            _ => 3,
        };
        for s in &f.sections {
            if s.addr < end && page < s.addr.saturating_add(s.size) {
                let c = match s.kind {
                    SectionKind::Text => PageClass::Text,
                    SectionKind::Rodata => PageClass::Rodata,
                    SectionKind::Data => PageClass::Data,
                    SectionKind::Bss => PageClass::Bss,
                };
                if best.is_none_or(|b| rank(c) < rank(b)) {
                    best = Some(c);
                }
            }
        }
        if best.is_some() {
            return best;
        }
        f.segments.iter().find_map(|s| {
            let lo = s.vaddr & !(page_size - 1);
            let hi = s.vaddr.saturating_add(s.memsz);
            if page < lo || page >= hi {
                return None;
            }
            Some(if s.flags & 1 != 0 {
                PageClass::Text
            } else if s.flags & 2 == 0 {
                PageClass::Rodata
            } else if page < s.vaddr.saturating_add(s.filesz) {
                PageClass::Data
            } else {
                PageClass::Bss
            })
        })
    }

    /// How far from the page holding link-time address `addr` the next
    /// page is whose class ([`ElfTable::class_at`]) or segment may differ:
    /// the nearest page boundary of a section, a segment, or a segment's
    /// file-backed part above it, or the end of the address space. Every
    /// page in between is classed as the one at `addr`.
    pub fn next_change(&self, elf: usize, addr: u64, page_size: u64) -> u64 {
        let f = &self.files[elf];
        let page = addr & !(page_size - 1);
        // Page boundaries; one past the address space is none.
        let floor = |a: u64| Some(a & !(page_size - 1));
        let ceil = |a: u64| a.div_ceil(page_size).checked_mul(page_size);
        let sections = f
            .sections
            .iter()
            .flat_map(|s| [floor(s.addr), ceil(s.addr.saturating_add(s.size))]);
        let segments = f.segments.iter().flat_map(|s| {
            [
                floor(s.vaddr),
                ceil(s.vaddr.saturating_add(s.memsz)),
                ceil(s.vaddr.saturating_add(s.filesz)),
            ]
        });
        // The link-time address wraps (a bias is a wrapping difference):
        // the page after the last one is page 0.
        let wrap = if page == 0 {
            u64::MAX
        } else {
            page.wrapping_neg()
        };
        sections
            .chain(segments)
            .flatten()
            .filter(|&b| b > page)
            .map(|b| b - page)
            .fold(wrap, u64::min)
    }

    /// The load bias of file `elf` given one VMA mapping it: the segment
    /// holding the VMA's file offset says which link-time address the
    /// VMA's start corresponds to.
    fn bias(&self, elf: usize, v: &Vma, page_size: u64) -> Option<u64> {
        let f = &self.files[elf];
        let seg = f.segments.iter().find(|s| {
            let lo = s.offset & !(page_size - 1);
            v.offset >= lo && v.offset < s.offset.saturating_add(s.filesz.max(1))
        })?;
        Some(
            v.start
                .wrapping_sub(seg.vaddr)
                .wrapping_sub(v.offset)
                .wrapping_add(seg.offset),
        )
    }

    /// The runtime extent `[start, end)` of file `elf`'s segments.
    fn extent(&self, elf: usize, bias: u64, page_size: u64) -> (u64, u64) {
        let f = &self.files[elf];
        let lo = f.segments.iter().map(|s| s.vaddr).min().unwrap_or(0);
        let hi = f
            .segments
            .iter()
            .map(|s| s.vaddr.saturating_add(s.memsz))
            .max()
            .unwrap_or(0);
        (
            bias.wrapping_add(lo) & !(page_size - 1),
            bias.wrapping_add(hi)
                .div_ceil(page_size)
                .saturating_mul(page_size),
        )
    }
}

fn is_special(v: &Vma) -> bool {
    v.path.starts_with('[')
        && v.path != "[heap]"
        && v.path != "[stack]"
        && !v.path.starts_with("[anon")
}

fn is_anon(v: &Vma) -> bool {
    v.inode == 0 && (v.path.is_empty() || v.path == "[heap]" || v.path.starts_with("[anon"))
}

/// Classifies every VMA of a process.
pub fn classify_vmas(task: &Task, vmas: &[Vma], elfs: &ElfTable, page_size: u64) -> Vec<VmaClass> {
    let exe = task.exe.trim_end_matches(" (deleted)");
    let mut out: Vec<VmaClass> = Vec::with_capacity(vmas.len());
    // Units by file key: the first mapping fixes the bias and extent.
    let mut units: HashMap<FileKey, (UnitRef, (u64, u64))> = HashMap::new();
    for v in vmas {
        if v.inode == 0 || !v.path.starts_with('/') {
            continue;
        }
        let key = (v.dev_major, v.dev_minor, v.inode);
        if units.contains_key(&key) {
            continue;
        }
        let path = v.path.trim_end_matches(" (deleted)").to_string();
        let app = path == exe;
        if let Some(i) = elfs.find(v) {
            if let Some(bias) = elfs.bias(i, v, page_size) {
                let ext = elfs.extent(i, bias, page_size);
                units.insert(
                    key,
                    (
                        UnitRef {
                            elf: Some(i),
                            path,
                            app,
                            bias,
                        },
                        ext,
                    ),
                );
            }
        }
    }
    let thread_stack = |v: &Vma| {
        task.thread_sps
            .iter()
            .any(|&sp| v.start <= sp && sp < v.end)
    };
    for (i, v) in vmas.iter().enumerate() {
        let key = (v.dev_major, v.dev_minor, v.inode);
        let mut c = VmaClass {
            unit: None,
            base: PageClass::Other,
            heuristic: false,
            stack: false,
        };
        if v.path == "[stack]" || v.has_vm_flag("gd") || thread_stack(v) {
            c.stack = true;
            c.base = PageClass::Stack;
        } else if is_special(v) {
            c.base = PageClass::Other;
        } else if v.is_shared()
            && (is_anon(v)
                || v.path.starts_with("/dev/shm")
                || v.path.starts_with("/memfd:")
                || v.path.starts_with("/SYSV"))
        {
            c.base = PageClass::Shm;
        } else if let Some((u, _)) = units.get(&key) {
            c.unit = Some(u.clone());
            c.base = PageClass::Rodata;
        } else if v.inode != 0 && v.path.starts_with('/') {
            // A file without known ELF headers: an executable mapping
            // makes it a unit, classified by permissions.
            let prev_file_exec = vmas
                .iter()
                .any(|w| (w.dev_major, w.dev_minor, w.inode) == key && w.is_exec());
            if prev_file_exec {
                let path = v.path.trim_end_matches(" (deleted)").to_string();
                c.unit = Some(UnitRef {
                    elf: None,
                    app: path == exe,
                    path,
                    bias: 0,
                });
                c.heuristic = true;
                c.base = if v.is_exec() {
                    PageClass::Text
                } else if v.is_write() {
                    PageClass::Data
                } else {
                    PageClass::Rodata
                };
            } else if v.is_shared() && v.path.starts_with("/memfd:") {
                c.base = PageClass::Shm;
            } else {
                c.base = PageClass::File;
            }
        } else if is_anon(v) {
            c.base = PageClass::Heap;
            // The anonymous continuation of a unit's .bss.
            if let Some((u, _)) = units
                .values()
                .find(|(_, (lo, hi))| v.start >= *lo && v.start < *hi)
            {
                c.unit = Some(u.clone());
            } else if i > 0 {
                let p = &vmas[i - 1];
                let pc: &VmaClass = &out[i - 1];
                if p.end == v.start
                    && p.is_write()
                    && !p.is_shared()
                    && pc.unit.is_some()
                    && v.is_write()
                    && !v.is_shared()
                    && v.path.is_empty()
                    && pc.heuristic
                {
                    c.unit = pc.unit.clone();
                    c.heuristic = true;
                    c.base = PageClass::Bss;
                }
            }
            if c.unit.is_none() && v.perms.starts_with("---") {
                c.base = PageClass::Other;
            }
        }
        out.push(c);
    }
    // Thread stacks without stack pointers: a private rw-p anonymous VMA
    // right above a PROT_NONE guard, in a multi-threaded process.
    if task.threads > 1 && task.thread_sps.is_empty() {
        for i in 1..vmas.len() {
            let (g, v) = (&vmas[i - 1], &vmas[i]);
            if g.end == v.start
                && g.perms == "---p"
                && is_anon(g)
                && v.perms == "rw-p"
                && v.path.is_empty()
                && out[i].unit.is_none()
            {
                out[i].stack = true;
                out[i].base = PageClass::Stack;
                out[i].heuristic = true;
            }
        }
    }
    out
}

impl VmaClass {
    /// The class of the page at `vaddr` in this VMA.
    pub fn page_class(&self, elfs: &ElfTable, vaddr: u64, page_size: u64) -> PageClass {
        match &self.unit {
            Some(UnitRef {
                elf: Some(i), bias, ..
            }) => elfs
                .class_at(*i, vaddr.wrapping_sub(*bias), page_size)
                .unwrap_or(if self.base == PageClass::Heap {
                    PageClass::Bss
                } else {
                    self.base
                }),
            _ => self.base,
        }
    }

    /// The unit's path, if any.
    pub fn unit_path(&self) -> Option<&str> {
        self.unit.as_ref().map(|u| u.path.as_str())
    }

    /// Whether the VMA belongs to the application itself.
    pub fn is_app(&self) -> bool {
        self.unit.as_ref().is_some_and(|u| u.app)
    }

    /// The 2005 suite's VMA flags: `S` stack, `X` the application's own,
    /// `r` `w` `x`, `B` .bss or heap; `.` where a flag is clear.
    pub fn paper_flags(&self, v: &Vma) -> String {
        let bss_or_heap = matches!(self.base, PageClass::Heap | PageClass::Bss)
            || (self.unit.is_some() && !v.is_exec() && v.inode == 0);
        [
            if self.stack { 'S' } else { '.' },
            if self.is_app() { 'X' } else { '.' },
            if v.is_read() { 'r' } else { '.' },
            if v.is_write() { 'w' } else { '.' },
            if v.is_exec() { 'x' } else { '.' },
            if bss_or_heap { 'B' } else { '.' },
        ]
        .iter()
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ElfSection, ElfSegment};

    const PS: u64 = 4096;

    fn libc() -> ElfFile {
        // A typical x86-64 shared library: R, RX, R, RW segments.
        ElfFile {
            path: "/lib/libc.so.6".into(),
            dev_major: 8,
            dev_minor: 1,
            inode: 42,
            elf_type: 3,
            segments: vec![
                ElfSegment {
                    offset: 0,
                    vaddr: 0,
                    filesz: 0x28000,
                    memsz: 0x28000,
                    flags: 4,
                },
                ElfSegment {
                    offset: 0x28000,
                    vaddr: 0x28000,
                    filesz: 0x150000,
                    memsz: 0x150000,
                    flags: 5,
                },
                ElfSegment {
                    offset: 0x178000,
                    vaddr: 0x178000,
                    filesz: 0x50000,
                    memsz: 0x50000,
                    flags: 4,
                },
                ElfSegment {
                    offset: 0x1c8e50,
                    vaddr: 0x1c9e50,
                    filesz: 0x5000,
                    memsz: 0x12000,
                    flags: 6,
                },
            ],
            sections: vec![
                ElfSection {
                    name: ".dynsym".into(),
                    addr: 0x400,
                    size: 0x20000,
                    kind: SectionKind::Rodata,
                },
                ElfSection {
                    name: ".text".into(),
                    addr: 0x28800,
                    size: 0x14f000,
                    kind: SectionKind::Text,
                },
                ElfSection {
                    name: ".rodata".into(),
                    addr: 0x178000,
                    size: 0x40000,
                    kind: SectionKind::Rodata,
                },
                ElfSection {
                    name: ".data.rel.ro".into(),
                    addr: 0x1c9e50,
                    size: 0x2000,
                    kind: SectionKind::Data,
                },
                ElfSection {
                    name: ".data".into(),
                    addr: 0x1cc000,
                    size: 0x2e50,
                    kind: SectionKind::Data,
                },
                ElfSection {
                    name: ".bss".into(),
                    addr: 0x1cee50,
                    size: 0xd000,
                    kind: SectionKind::Bss,
                },
            ],
        }
    }

    fn vma(start: u64, end: u64, perms: &str, offset: u64, inode: u64, path: &str) -> Vma {
        Vma {
            start,
            end,
            perms: perms.into(),
            offset,
            dev_major: if inode != 0 { 8 } else { 0 },
            dev_minor: if inode != 0 { 1 } else { 0 },
            inode,
            path: path.into(),
            ..Vma::default()
        }
    }

    fn layout() -> Vec<Vma> {
        let b = 0x7f00_0000_0000u64;
        vec![
            vma(0x5555_0000_0000, 0x5555_0002_1000, "rw-p", 0, 0, "[heap]"),
            vma(b, b + 0x28000, "r--p", 0, 42, "/lib/libc.so.6"),
            vma(
                b + 0x28000,
                b + 0x178000,
                "r-xp",
                0x28000,
                42,
                "/lib/libc.so.6",
            ),
            vma(
                b + 0x178000,
                b + 0x1c8000,
                "r--p",
                0x178000,
                42,
                "/lib/libc.so.6",
            ),
            vma(
                b + 0x1c9000,
                b + 0x1cd000,
                "r--p",
                0x1c8000,
                42,
                "/lib/libc.so.6",
            ),
            vma(
                b + 0x1cd000,
                b + 0x1cf000,
                "rw-p",
                0x1cc000,
                42,
                "/lib/libc.so.6",
            ),
            vma(b + 0x1cf000, b + 0x1dc000, "rw-p", 0, 0, ""),
            vma(0x7ffd_0000_0000, 0x7ffd_0002_1000, "rw-p", 0, 0, "[stack]"),
        ]
    }

    /// Every page up to the next change is classed as the page it is
    /// measured from, and lies in the same segment: a run never spans a
    /// change of either (it may end where neither changes).
    #[test]
    fn runs_end_where_the_class_changes() {
        let mut t = ElfTable::default();
        let mut odd = libc();
        // Unaligned sections, an empty one, one at the top of the space.
        odd.sections.push(ElfSection {
            name: ".tbss".into(),
            addr: 0x1cd123,
            size: 0,
            kind: SectionKind::Bss,
        });
        odd.sections.push(ElfSection {
            name: ".top".into(),
            addr: u64::MAX - 0x1800,
            size: 0x1000,
            kind: SectionKind::Text,
        });
        odd.inode = 43;
        t.add(libc());
        t.add(odd);
        let segment = |f: usize, page: u64| {
            t.files[f].segments.iter().position(|s| {
                let lo = s.vaddr & !(PS - 1);
                let hi = s.vaddr.saturating_add(s.memsz).div_ceil(PS) * PS;
                page >= lo && page < hi
            })
        };
        let pages = (0..0x200u64)
            .map(|i| i * PS)
            .chain((0..4).map(|i| !(PS - 1) - i * PS));
        for f in 0..2 {
            for page in pages.clone() {
                let run = t.next_change(f, page + 7, PS);
                assert!(run >= PS && run % PS == 0, "{page:#x}: {run:#x}");
                let here = (t.class_at(f, page, PS), segment(f, page));
                let span = run.min(0x40 * PS) / PS;
                for k in 1..span {
                    let p = page + k * PS;
                    assert_eq!(
                        (t.class_at(f, p, PS), segment(f, p)),
                        here,
                        "{page:#x} +{k}"
                    );
                }
            }
        }
    }

    #[test]
    fn elf_sections_classify_pages() {
        let mut t = ElfTable::default();
        t.add(libc());
        let task = Task {
            exe: "/usr/bin/app".into(),
            ..Task::default()
        };
        let vmas = layout();
        let c = classify_vmas(&task, &vmas, &t, PS);
        let b = 0x7f00_0000_0000u64;
        let class = |i: usize, a: u64| c[i].page_class(&t, a, PS);
        assert_eq!(class(0, 0x5555_0000_0000), PageClass::Heap);
        assert_eq!(class(1, b), PageClass::Rodata);
        assert_eq!(class(2, b + 0x28000), PageClass::Text); // the page holding .text's start
        assert_eq!(class(2, b + 0x100000), PageClass::Text);
        assert_eq!(class(3, b + 0x180000), PageClass::Rodata);
        assert_eq!(class(4, b + 0x1c9000), PageClass::Data); // RELRO
        assert_eq!(class(5, b + 0x1cd000), PageClass::Data);
        assert_eq!(class(5, b + 0x1ce000), PageClass::Data); // .data's tail shares the page with .bss
        assert_eq!(class(6, b + 0x1cf000), PageClass::Bss); // the anonymous .bss mapping
        assert_eq!(class(6, b + 0x1db000), PageClass::Bss);
        assert!(c[6].unit.is_some());
        assert!(!c[6].heuristic);
        assert!(!c[2].is_app());
        assert!(c[7].stack);
        assert_eq!(class(7, 0x7ffd_0000_0000), PageClass::Stack);
    }

    #[test]
    fn permissions_decide_without_headers() {
        let t = ElfTable::default();
        let task = Task {
            exe: "/lib/libc.so.6".into(),
            ..Task::default()
        };
        let vmas = layout();
        let c = classify_vmas(&task, &vmas, &t, PS);
        let b = 0x7f00_0000_0000u64;
        assert_eq!(c[2].page_class(&t, b + 0x28000, PS), PageClass::Text);
        assert!(c[2].heuristic && c[2].is_app());
        assert_eq!(c[5].page_class(&t, b + 0x1cd000, PS), PageClass::Data);
        assert_eq!(c[6].page_class(&t, b + 0x1cf000, PS), PageClass::Bss);
        assert_eq!(c[1].page_class(&t, b, PS), PageClass::Rodata);
    }

    #[test]
    fn thread_stacks() {
        let t = ElfTable::default();
        let mut vmas = vec![
            vma(0x7000_0000_0000, 0x7000_0000_1000, "---p", 0, 0, ""),
            vma(0x7000_0000_1000, 0x7000_0080_1000, "rw-p", 0, 0, ""),
        ];
        let task = Task {
            threads: 2,
            thread_sps: vec![0x7000_0080_0000],
            ..Task::default()
        };
        let c = classify_vmas(&task, &vmas, &t, PS);
        assert!(c[1].stack && !c[1].heuristic);
        let task = Task {
            threads: 2,
            ..Task::default()
        };
        let c = classify_vmas(&task, &vmas, &t, PS);
        assert!(c[1].stack && c[1].heuristic);
        vmas[0].perms = "rw-p".into();
        let c = classify_vmas(&task, &vmas, &t, PS);
        assert!(!c[1].stack);
        assert_eq!(c[1].base, PageClass::Heap);
    }
}
