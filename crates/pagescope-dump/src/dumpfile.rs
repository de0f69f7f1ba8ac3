//! A dump file of either kind, told apart by its first bytes: an ELF
//! core ([`ElfCore`]) or makedumpfile's compressed kdump format
//! ([`Kdump`]). Both give physical memory by `pread`, VMCOREINFO, and
//! the machine they are of.

use crate::elfcore::ElfCore;
use crate::kdump::{self, Kdump};
use crate::{DumpError, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// `EM_X86_64`.
const EM_X86_64: u16 = 62;
/// `EM_AARCH64`.
const EM_AARCH64: u16 = 183;

/// The architectures whose dumps pagescope reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Machine {
    /// x86_64.
    X86_64,
    /// arm64 (aarch64).
    Arm64,
}

impl Machine {
    /// The symbol of the kernel's top-level page table.
    pub fn top_table(self) -> &'static str {
        match self {
            Machine::X86_64 => "init_top_pgt",
            Machine::Arm64 => "swapper_pg_dir",
        }
    }
}

/// An opened dump.
#[derive(Debug)]
pub enum Dump {
    /// An ELF core.
    Elf(ElfCore),
    /// A compressed kdump file.
    Kdump(Box<Kdump>),
}

fn bad(path: &Path, why: impl Into<String>) -> DumpError {
    DumpError::Bad {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

impl Dump {
    /// Opens the running kernel's `/proc/kcore` ([`ElfCore::open_kcore`]).
    pub fn open_kcore(path: &Path) -> Result<Dump> {
        Ok(Dump::Elf(ElfCore::open_kcore(path)?))
    }

    /// Opens `path` as the kind its first bytes say. Another file is
    /// refused with [`DumpError::Bad`], naming what it seems to be where
    /// makedumpfile wrote a form that is not read (flattened, split).
    pub fn open(path: &Path) -> Result<Dump> {
        let io = |error| DumpError::Io {
            path: path.to_path_buf(),
            error,
        };
        let file = File::open(path).map_err(io)?;
        let mut magic = [0u8; 16];
        let mut n = 0;
        while n < magic.len() {
            let got = file.read_at(&mut magic[n..], n as u64).map_err(io)?;
            if got == 0 {
                break;
            }
            n += got;
        }
        let magic = &magic[..n];
        if magic.starts_with(b"\x7fELF") {
            return Ok(Dump::Elf(ElfCore::open(path)?));
        }
        if magic.starts_with(kdump::SIGNATURE) {
            return Ok(Dump::Kdump(Box::new(Kdump::open(path)?)));
        }
        if magic.starts_with(b"makedumpfile\0") {
            return Err(bad(path, "makedumpfile's flattened format (-F): make it a kdump file first with `makedumpfile -R FILE < FLATTENED`"));
        }
        if magic.starts_with(b"DISKDUMP") {
            return Err(bad(path, "an old diskdump file (DISKDUMP), which is not read: only ELF cores and makedumpfile's kdump format"));
        }
        Err(bad(
            path,
            "not an ELF core nor makedumpfile's compressed kdump format (no ELF or KDUMP signature)",
        ))
    }

    /// The VMCOREINFO text.
    pub fn vmcoreinfo(&self) -> Option<&str> {
        match self {
            Dump::Elf(e) => e.vmcoreinfo(),
            Dump::Kdump(k) => k.vmcoreinfo(),
        }
    }

    /// Where the dump would carry VMCOREINFO, for the error that says it
    /// does not.
    pub fn vmcoreinfo_hint(&self) -> &'static str {
        match self {
            Dump::Elf(_) => "the dump has no VMCOREINFO note (qemu writes it with `-device vmcoreinfo` and a guest kernel with FW_CFG_SYSFS; kdump's /proc/vmcore always has it)",
            Dump::Kdump(_) => "the dump has no VMCOREINFO (its kdump sub-header points to none: makedumpfile writes it from /proc/vmcore's note)",
        }
    }

    /// The machine the dump is of; else what it is of, in words.
    pub fn machine(&self) -> std::result::Result<Machine, String> {
        match self {
            Dump::Elf(e) if e.machine == EM_X86_64 => Ok(Machine::X86_64),
            Dump::Elf(e) if e.machine == EM_AARCH64 => Ok(Machine::Arm64),
            Dump::Elf(e) => Err(format!("machine type {} (ELF e_machine)", e.machine)),
            Dump::Kdump(k) if k.header.machine == "x86_64" => Ok(Machine::X86_64),
            Dump::Kdump(k) if k.header.machine == "aarch64" => Ok(Machine::Arm64),
            Dump::Kdump(k) => Err(format!("machine {:?} (its kdump header)", k.header.machine)),
        }
    }

    /// `phys_base` where the file gives it (the kdump sub-header).
    pub fn phys_base(&self) -> Option<u64> {
        match self {
            Dump::Elf(_) => None,
            Dump::Kdump(k) => Some(k.header.phys_base),
        }
    }

    /// The physical memory ranges the dump covers, `[start, end)`.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        match self {
            Dump::Elf(e) => e.ranges().collect(),
            Dump::Kdump(k) => k.ranges().collect(),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        match self {
            Dump::Elf(e) => e.path(),
            Dump::Kdump(k) => k.path(),
        }
    }

    /// Reads physical memory at `paddr` into `buf`. `Ok(false)` if any of
    /// it is not in the dump.
    pub fn read_phys(&self, paddr: u64, buf: &mut [u8]) -> Result<bool> {
        match self {
            Dump::Elf(e) => e.read_phys(paddr, buf),
            Dump::Kdump(k) => k.read_phys(paddr, buf),
        }
    }

    /// What the dump lacks, known when it is opened (a filtered dump).
    pub fn open_notes(&self) -> Vec<String> {
        match self {
            Dump::Elf(_) => Vec::new(),
            Dump::Kdump(k) => k.open_notes(),
        }
    }

    /// What could not be read (damaged or filtered pages), so far.
    pub fn read_notes(&self) -> Vec<String> {
        match self {
            Dump::Elf(_) => Vec::new(),
            Dump::Kdump(k) => k.read_notes(),
        }
    }
}
