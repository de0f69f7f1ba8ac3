//! `snapshot --vmcore` refuses what it can't read: each bad input exits 2
//! with one line that says what is wrong, never a panic. The dumps here
//! are small ELF files made by hand; the real dump is read in the `full`
//! guest kernel (tests/kernels, `full vmcore`).

use std::path::{Path, PathBuf};
use std::process::Command;

const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;
const EM_RISCV: u16 = 243;

/// A note: name, type, text.
fn note(name: &str, text: &str) -> Vec<u8> {
    let mut n = Vec::new();
    let name = format!("{name}\0");
    n.extend((name.len() as u32).to_le_bytes());
    n.extend((text.len() as u32).to_le_bytes());
    n.extend(0u32.to_le_bytes());
    n.extend(name.as_bytes());
    n.resize(n.len().next_multiple_of(4), 0);
    n.extend(text.as_bytes());
    n.resize(n.len().next_multiple_of(4), 0);
    n
}

/// An ELF core: a note segment (if any), then one PT_LOAD of `memory` at
/// physical 0 that claims `claim` bytes in the file.
fn elf_core(machine: u16, notes: Option<Vec<u8>>, memory: &[u8], claim: u64) -> Vec<u8> {
    let phnum = 1 + notes.is_some() as u16;
    let data_at = 64 + 56 * phnum as u64;
    let mut f = Vec::new();
    f.extend(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    f.extend(4u16.to_le_bytes()); // ET_CORE
    f.extend(machine.to_le_bytes());
    f.extend(1u32.to_le_bytes());
    f.extend(0u64.to_le_bytes()); // entry
    f.extend(64u64.to_le_bytes()); // phoff
    f.extend(0u64.to_le_bytes()); // shoff
    f.extend(0u32.to_le_bytes());
    for h in [64u16, 56, phnum, 64, 0, 0] {
        f.extend(h.to_le_bytes());
    }
    let phdr = |f: &mut Vec<u8>, ty: u32, off: u64, paddr: u64, filesz: u64, memsz: u64| {
        f.extend(ty.to_le_bytes());
        f.extend(0u32.to_le_bytes());
        for v in [off, 0xffff_8880_0000_0000 + paddr, paddr, filesz, memsz, 0] {
            f.extend(v.to_le_bytes());
        }
    };
    let notes_len = notes.as_ref().map_or(0, |n| n.len() as u64);
    if notes.is_some() {
        phdr(&mut f, 4, data_at, 0, notes_len, notes_len);
    }
    phdr(
        &mut f,
        1,
        data_at + notes_len,
        0,
        claim,
        claim.max(memory.len() as u64),
    );
    if let Some(n) = notes {
        f.extend(n);
    }
    f.extend(memory);
    f
}

/// A 6.1-style VMCOREINFO with the symbols a raw BTF needs beside it.
fn vmcoreinfo(release: &str, page: u64) -> String {
    format!(
        "OSRELEASE={release}\nPAGESIZE=4096\nSYMBOL(init_uts_ns)=ffffffff80001000\nOFFSET(uts_namespace.name)=0\nSYMBOL(init_task)=ffffffff80002000\nSYMBOL(init_top_pgt)=ffffffff80003000\nSIZE(page)={page}\nOFFSET(page.flags)=0\nNUMBER(phys_base)=0\nNUMBER(pgtable_l5_enabled)=0\nKERNELOFFSET=0\n"
    )
}

struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Dir {
        Dir(tempfile::tempdir().expect("a temporary directory"))
    }
    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.path().join(name);
        std::fs::write(&p, bytes).expect("write");
        p
    }
}

/// Runs `snapshot --vmcore DUMP [--btf BTF]`; returns the exit code and
/// standard error.
fn snapshot(dir: &Dir, dump: &Path, btf: Option<&Path>) -> (i32, String) {
    let out_file = dir.0.path().join("out.snap");
    let mut c = Command::new(env!("CARGO_BIN_EXE_pagescope"));
    c.args(["snapshot", "-q", "-o"])
        .arg(&out_file)
        .arg("--vmcore")
        .arg(dump);
    if let Some(b) = btf {
        c.arg("--btf").arg(b);
    }
    let out = c.output().expect("pagescope runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Exit 2, one line starting `error:`, naming `what`.
fn refused(dir: &Dir, dump: &Path, btf: Option<&Path>, what: &str) {
    let (code, err) = snapshot(dir, dump, btf);
    assert_eq!(code, 2, "exit code, stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(what), "{what:?} not in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_file_that_is_not_an_elf_core_is_refused() {
    let d = Dir::new();
    let text = d.file("notes.txt", b"this is not a dump at all\n");
    refused(&d, &text, None, "not an ELF core");
    let empty = d.file("empty", b"");
    refused(&d, &empty, None, "not an ELF core");
    // An ELF file cut inside its header.
    let core = elf_core(
        EM_X86_64,
        Some(note("VMCOREINFO", &vmcoreinfo("6.1.0", 80))),
        &[0; 64],
        64,
    );
    let cut = d.file("cut-header", &core[..40]);
    refused(&d, &cut, None, "cut short");
}

#[test]
fn a_dump_cut_short_is_refused() {
    let d = Dir::new();
    let core = elf_core(
        EM_X86_64,
        Some(note("VMCOREINFO", &vmcoreinfo("6.1.0", 80))),
        &[0; 4096],
        1 << 20,
    );
    let dump = d.file("cut.core", &core);
    refused(&d, &dump, None, "cut short");
}

/// A segment whose physical range would pass 2^64 is refused (found by
/// the read_dump fuzz target: the sum overflowed).
#[test]
fn a_segment_past_the_end_of_physical_memory_is_refused() {
    let d = Dir::new();
    let mut core = elf_core(
        EM_X86_64,
        Some(note("VMCOREINFO", &vmcoreinfo("6.1.0", 80))),
        &[0; 4096],
        4096,
    );
    // The PT_LOAD header is the second; its p_paddr is 24 bytes in.
    let at = 64 + 56 + 24;
    core[at..at + 8].copy_from_slice(&(u64::MAX - 100).to_le_bytes());
    let dump = d.file("past-the-end.core", &core);
    refused(
        &d,
        &dump,
        None,
        "past the end of the physical address space",
    );
}

#[test]
fn a_dump_without_vmcoreinfo_is_refused() {
    let d = Dir::new();
    let core = elf_core(EM_X86_64, Some(note("CORE", "registers")), &[0; 4096], 4096);
    let dump = d.file("novmcoreinfo.core", &core);
    refused(&d, &dump, None, "no VMCOREINFO");
    let bare = elf_core(EM_X86_64, None, &[0; 4096], 4096);
    let dump = d.file("nonotes.core", &bare);
    refused(&d, &dump, None, "no VMCOREINFO");
}

#[test]
fn a_dump_of_another_architecture_is_refused() {
    let d = Dir::new();
    let core = elf_core(
        EM_RISCV,
        Some(note("VMCOREINFO", &vmcoreinfo("6.1.0", 80))),
        &[0; 4096],
        4096,
    );
    let dump = d.file("riscv.core", &core);
    refused(
        &d,
        &dump,
        None,
        "machine type 243 (ELF e_machine); pagescope reads x86_64 and arm64 dumps",
    );
}

#[test]
fn an_arm64_dump_with_pages_of_64_kib_is_refused() {
    let d = Dir::new();
    let info = vmcoreinfo("6.1.0", 80).replace("PAGESIZE=4096", "PAGESIZE=65536");
    let core = elf_core(
        EM_AARCH64,
        Some(note("VMCOREINFO", &info)),
        &[0; 4096],
        4096,
    );
    let dump = d.file("arm64.core", &core);
    refused(
        &d,
        &dump,
        None,
        "page size 65536: pagescope reads arm64 dumps with 4 or 16 KiB pages",
    );
}

#[test]
fn without_the_kernels_types_the_error_names_the_file_to_bring() {
    let d = Dir::new();
    let core = elf_core(
        EM_X86_64,
        Some(note("VMCOREINFO", &vmcoreinfo("6.1.0-test", 80))),
        &[0; 4096],
        4096,
    );
    let dump = d.file("dump.core", &core);
    refused(&d, &dump, None, "--btf vmlinux, release 6.1.0-test");
    // A --btf that is neither BTF nor ELF.
    let junk = d.file("junk.btf", b"junk");
    refused(&d, &dump, Some(&junk), "neither BTF nor an ELF vmlinux");
}

/// This machine's BTF (another kernel than the dump's) is refused: the
/// release at the dump's init_uts_ns matches its VMCOREINFO, but the
/// struct page the BTF describes is not the size the dump's VMCOREINFO
/// gives.
#[test]
fn btf_of_another_kernel_is_refused() {
    let host = Path::new("/sys/kernel/btf/vmlinux");
    let Ok(bytes) = std::fs::read(host) else {
        eprintln!("skip: this kernel has no /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF)");
        return;
    };
    let btf = pagescope_dump::btf::Btf::parse(&bytes).expect("the kernel's BTF parses");
    let name = btf
        .field("uts_namespace", "name")
        .expect("uts_namespace.name")
        .offset;
    let release = btf
        .field("new_utsname", "release")
        .expect("new_utsname.release")
        .offset;
    let page = btf.struct_size("page").expect("struct page");
    assert_ne!(
        page, 80,
        "the fake dump's struct page must differ from this kernel's"
    );
    // init_uts_ns at 0xffffffff80001000: physical 0x1000 (phys_base 0).
    let mut memory = vec![0u8; 0x4000];
    let at = 0x1000 + (name + release) as usize;
    memory[at..at + 10].copy_from_slice(b"6.1.0-test");
    let core = elf_core(
        EM_X86_64,
        Some(note("VMCOREINFO", &vmcoreinfo("6.1.0-test", 80))),
        &memory,
        memory.len() as u64,
    );
    let d = Dir::new();
    let dump = d.file("dump.core", &core);
    let copy = d.file("vmlinux.btf", &bytes);
    refused(&d, &dump, Some(&copy), "the BTF is of another kernel");
    // A release that differs at init_uts_ns: refused before any layout.
    let core = elf_core(
        EM_X86_64,
        Some(note("VMCOREINFO", &vmcoreinfo("6.1.0-other", page))),
        &memory,
        memory.len() as u64,
    );
    let dump = d.file("other.core", &core);
    refused(&d, &dump, Some(&copy), "does not match the dump");
}

/// A page of a kdump file made by hand: stored as it is, compressed with
/// zstd, damaged (zstd's flag over bytes that are not a frame), or left
/// out (in RAM, not in the dump: makedumpfile's filter).
#[derive(Clone, Copy, PartialEq)]
enum Kpage {
    Raw,
    Zstd,
    Damaged,
    Filtered,
}

/// makedumpfile's compressed kdump format over `memory` (4 KiB pages from
/// physical 0): the header (`machine` in its utsname), a sub-header with
/// VMCOREINFO (if any) in the block after it, the two bitmaps, the page
/// descriptors and the pages, each stored as `kind(pfn)` says.
fn kdump_file(
    machine: &str,
    vmcoreinfo: Option<&str>,
    memory: &[u8],
    kind: impl Fn(u64) -> Kpage,
) -> Vec<u8> {
    const BS: usize = 4096;
    let frames = memory.len().div_ceil(BS) as u64;
    let bitmap_half = (frames as usize).div_ceil(8).next_multiple_of(BS);
    let sub_hdr_blocks = 2;
    let bitmap_at = (1 + sub_hdr_blocks) * BS;
    let pd_at = bitmap_at + 2 * bitmap_half;
    let dumped: Vec<u64> = (0..frames)
        .filter(|&p| kind(p) != Kpage::Filtered)
        .collect();
    let mut data_at = pd_at + dumped.len() * 24;
    let mut f = vec![0u8; pd_at];
    f[..8].copy_from_slice(b"KDUMP   ");
    f[8..12].copy_from_slice(&6i32.to_le_bytes());
    let uts = |f: &mut Vec<u8>, field: usize, s: &str| {
        let at = 12 + field * 65;
        f[at..at + s.len()].copy_from_slice(s.as_bytes());
    };
    uts(&mut f, 0, "Linux");
    uts(&mut f, 2, "6.1.0-test");
    uts(&mut f, 4, machine);
    f[428..432].copy_from_slice(&(BS as i32).to_le_bytes());
    f[432..436].copy_from_slice(&(sub_hdr_blocks as i32).to_le_bytes());
    f[436..440].copy_from_slice(&((2 * bitmap_half / BS) as u32).to_le_bytes());
    f[440..444].copy_from_slice(&(frames as u32).to_le_bytes());
    // The sub-header: phys_base 0, dump level 31 if anything is left
    // out, VMCOREINFO in the next block, max_mapnr_64.
    let sub = BS;
    let level: i32 = if dumped.len() as u64 == frames { 0 } else { 31 };
    f[sub + 8..sub + 12].copy_from_slice(&level.to_le_bytes());
    if let Some(v) = vmcoreinfo {
        f[sub + 32..sub + 40].copy_from_slice(&((2 * BS) as u64).to_le_bytes());
        f[sub + 40..sub + 48].copy_from_slice(&(v.len() as u64).to_le_bytes());
        f[2 * BS..2 * BS + v.len()].copy_from_slice(v.as_bytes());
    }
    f[sub + 96..sub + 104].copy_from_slice(&frames.to_le_bytes());
    for p in 0..frames {
        f[bitmap_at + (p / 8) as usize] |= 1 << (p % 8);
    }
    for &p in &dumped {
        f[bitmap_at + bitmap_half + (p / 8) as usize] |= 1 << (p % 8);
    }
    let mut data = Vec::new();
    for &p in &dumped {
        let page = &memory[p as usize * BS..(p as usize + 1) * BS];
        let (bytes, flags) = match kind(p) {
            Kpage::Raw => (page.to_vec(), 0u32),
            Kpage::Zstd => (zstd::bulk::compress(page, 3).expect("zstd"), 0x20),
            _ => (b"not a zstd frame at all".to_vec(), 0x20),
        };
        f.extend((data_at as u64).to_le_bytes());
        f.extend((bytes.len() as u32).to_le_bytes());
        f.extend(flags.to_le_bytes());
        f.extend(0u64.to_le_bytes());
        data_at += bytes.len();
        data.extend(bytes);
    }
    f.extend(data);
    f
}

/// The memory of `btf_of_another_kernel_is_refused`: `release` at the
/// init_uts_ns of [`vmcoreinfo`] for the BTF in `bytes`.
fn uts_memory(btf: &pagescope_dump::btf::Btf, release: &str) -> Vec<u8> {
    let name = btf
        .field("uts_namespace", "name")
        .expect("uts_namespace.name")
        .offset;
    let rel = btf
        .field("new_utsname", "release")
        .expect("new_utsname.release")
        .offset;
    let mut memory = vec![0u8; 0x4000];
    let at = 0x1000 + (name + rel) as usize;
    memory[at..at + release.len()].copy_from_slice(release.as_bytes());
    memory
}

#[test]
fn a_compressed_dump_cut_short_is_refused() {
    let d = Dir::new();
    let memory: Vec<u8> = (0..0x8000u32).map(|i| (i % 241) as u8).collect();
    let full = kdump_file("x86_64", Some(&vmcoreinfo("6.1.0", 80)), &memory, |p| {
        if p % 2 == 0 {
            Kpage::Zstd
        } else {
            Kpage::Raw
        }
    });
    // Cut in the header, the sub-header, the VMCOREINFO, the bitmaps, the
    // page descriptors, the last page.
    for (i, cut) in [
        100,
        4096 + 50,
        8192 + 10,
        12288 + 100,
        20480 + 30,
        full.len() - 1,
    ]
    .into_iter()
    .enumerate()
    {
        let dump = d.file(&format!("cut{i}.kdump"), &full[..cut]);
        refused(&d, &dump, None, "cut short");
    }
    // Whole, it reads as far as the missing BTF.
    let dump = d.file("whole.kdump", &full);
    refused(&d, &dump, None, "--btf vmlinux, release 6.1.0");
}

#[test]
fn a_compressed_dump_without_vmcoreinfo_is_refused() {
    let d = Dir::new();
    let dump = d.file(
        "novmcoreinfo.kdump",
        &kdump_file("x86_64", None, &[0; 8192], |_| Kpage::Raw),
    );
    refused(&d, &dump, None, "no VMCOREINFO");
}

#[test]
fn a_compressed_dump_of_another_architecture_is_refused() {
    let d = Dir::new();
    let core = kdump_file(
        "riscv64",
        Some(&vmcoreinfo("6.1.0", 80)),
        &[0; 8192],
        |_| Kpage::Raw,
    );
    let dump = d.file("riscv.kdump", &core);
    refused(
        &d,
        &dump,
        None,
        "machine \"riscv64\" (its kdump header); pagescope reads x86_64 and arm64 dumps",
    );
}

#[test]
fn other_forms_of_makedumpfile_are_named() {
    let d = Dir::new();
    let mut flat = b"makedumpfile\0\0\0\0".to_vec();
    flat.resize(4096, 0);
    let dump = d.file("flat", &flat);
    refused(&d, &dump, None, "makedumpfile -R");
    // One part of a split dump.
    let mut split = kdump_file("x86_64", Some(&vmcoreinfo("6.1.0", 80)), &[0; 8192], |_| {
        Kpage::Raw
    });
    split[4096 + 12..4096 + 16].copy_from_slice(&1i32.to_le_bytes());
    let dump = d.file("split.kdump", &split);
    refused(&d, &dump, None, "--reassemble");
}

/// The compressed dump is read as the ELF core is (the check that a BTF
/// of another kernel is refused gets as far); a damaged or filtered page
/// where the kernel's release must be read is named in the one line.
#[test]
fn a_compressed_dump_is_read_and_its_damage_named() {
    let host = Path::new("/sys/kernel/btf/vmlinux");
    let Ok(bytes) = std::fs::read(host) else {
        eprintln!("skip: this kernel has no /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF)");
        return;
    };
    let btf = pagescope_dump::btf::Btf::parse(&bytes).expect("the kernel's BTF parses");
    let memory = uts_memory(&btf, "6.1.0-test");
    let d = Dir::new();
    let copy = d.file("vmlinux.btf", &bytes);
    let info = vmcoreinfo("6.1.0-test", 80);
    let core = kdump_file("x86_64", Some(&info), &memory, |_| Kpage::Zstd);
    let dump = d.file("dump.kdump", &core);
    refused(&d, &dump, Some(&copy), "the BTF is of another kernel");
    // init_uts_ns's page (frame 1) damaged.
    let core = kdump_file("x86_64", Some(&info), &memory, |p| {
        if p == 1 {
            Kpage::Damaged
        } else {
            Kpage::Zstd
        }
    });
    let dump = d.file("damaged.kdump", &core);
    refused(
        &d,
        &dump,
        Some(&copy),
        "1 pages of the dump are damaged and were read as missing (the first, frame 0x1: zstd",
    );
    // Filtered out.
    let core = kdump_file("x86_64", Some(&info), &memory, |p| {
        if p == 1 {
            Kpage::Filtered
        } else {
            Kpage::Raw
        }
    });
    let dump = d.file("filtered.kdump", &core);
    refused(
        &d,
        &dump,
        Some(&copy),
        "makedumpfile's filter left them out",
    );
}

/// Runs `snapshot --vmcore DUMP ARGS...`; exit 2 with one line naming
/// `what`.
fn refused_with(dir: &Dir, dump: &Path, args: &[&Path], what: &str) {
    let out_file = dir.0.path().join("out.snap");
    let out = Command::new(env!("CARGO_BIN_EXE_pagescope"))
        .args(["snapshot", "-q", "-o"])
        .arg(&out_file)
        .arg("--vmcore")
        .arg(dump)
        .args(args)
        .output()
        .expect("pagescope runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit code, stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(what), "{what:?} not in: {err}");
}

#[test]
fn raw_btf_takes_its_symbols_from_a_system_map_of_the_same_kernel() {
    let host = Path::new("/sys/kernel/btf/vmlinux");
    let Ok(bytes) = std::fs::read(host) else {
        eprintln!("skip: this kernel has no /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF)");
        return;
    };
    let btf = pagescope_dump::btf::Btf::parse(&bytes).expect("the kernel's BTF parses");
    let name = btf.field("uts_namespace", "name").expect("name").offset;
    let release = btf.field("new_utsname", "release").expect("release").offset;
    let mut memory = vec![0u8; 0x4000];
    let at = 0x1000 + (name + release) as usize;
    memory[at..at + 10].copy_from_slice(b"6.1.0-test");
    // As 6.1 prints it: no init_task (the kernel is at its link address).
    let info = vmcoreinfo("6.1.0-test", 80).replace("SYMBOL(init_task)=ffffffff80002000\n", "")
        + "SYMBOL(_stext)=ffffffff80000000\n";
    let core = elf_core(
        EM_X86_64,
        Some(note("VMCOREINFO", &info)),
        &memory,
        memory.len() as u64,
    );
    let d = Dir::new();
    let dump = d.file("dump.core", &core);
    let copy = d.file("vmlinux.btf", &bytes);
    let btf_arg = Path::new("--btf");
    let map_arg = Path::new("--system-map");
    // Without a map, the error says to bring one.
    refused_with(
        &d,
        &dump,
        &[btf_arg, &copy],
        "--system-map /boot/System.map-6.1.0-test",
    );
    // Debian's placeholder is named as such.
    let placeholder = d.file(
        "placeholder.map",
        b"ffffffffffffffff B The real System.map is in the linux-image-<version>-dbg package\n",
    );
    refused_with(
        &d,
        &dump,
        &[btf_arg, &copy, map_arg, &placeholder],
        "the real one is in linux-image-RELEASE-dbg",
    );
    // A map of another build: its init_uts_ns is elsewhere.
    let other = d.file(
        "other.map",
        b"ffffffff80000000 T _stext\nffffffff80005000 D init_uts_ns\nffffffff80002000 D init_task\n",
    );
    refused_with(
        &d,
        &dump,
        &[btf_arg, &copy, map_arg, &other],
        "is of another kernel: it puts init_uts_ns at 0xffffffff80005000",
    );
    // The kernel's own map gives init_task: the read goes on to the
    // layout, where this fake dump's struct page (80 bytes) is refused.
    let own = d.file(
        "System.map",
        b"ffffffff80000000 T _stext\nffffffff80001000 D init_uts_ns\nffffffff80002000 D init_task\nffffffff80003000 D init_top_pgt\n",
    );
    refused_with(
        &d,
        &dump,
        &[btf_arg, &copy, map_arg, &own],
        "the BTF is of another kernel",
    );
}

#[test]
fn kcore_on_a_kernel_without_it_says_so_in_one_line() {
    if Path::new("/proc/kcore").exists() {
        eprintln!("skip: this kernel has /proc/kcore (its walk is checked in tests/kernels)");
        return;
    }
    let d = Dir::new();
    let out = Command::new(env!("CARGO_BIN_EXE_pagescope"))
        .args(["snapshot", "-q", "--kcore", "-o"])
        .arg(d.0.path().join("k.snap"))
        .output()
        .expect("pagescope runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code, stderr: {err}");
    assert_eq!(
        err.trim_end(),
        "error: this kernel has no /proc/kcore (it was built without CONFIG_PROC_KCORE): --kcore needs it"
    );
    assert!(!d.0.path().join("k.snap").exists(), "no file is written");
    // --kcore and --vmcore are two sources: one at a time.
    let out = Command::new(env!("CARGO_BIN_EXE_pagescope"))
        .args(["snapshot", "--kcore", "--vmcore", "x.core"])
        .output()
        .expect("pagescope runs");
    assert_eq!(out.status.code(), Some(2));
}
