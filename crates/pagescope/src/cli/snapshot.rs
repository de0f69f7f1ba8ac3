//! `pagescope snapshot`.

use super::{Pids, Progress};
use clap::Args;
use std::path::PathBuf;

/// `pagescope snapshot`.
#[derive(Debug, Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub select: Pids,
    /// Output file ("-" for standard output, when it is a pipe or a
    /// file: a terminal is refused).
    #[arg(short, long, value_name = "FILE", default_value = "pagescope.snap")]
    pub output: PathBuf,
    #[command(flatten)]
    pub progress: Progress,
    /// Also record the physical map: every page frame of the machine
    /// classed (free, anonymous, page cache, slab, ...), for `physmap`
    /// (with `--vmcore`: from the dump's `struct page`s).
    #[arg(long)]
    pub physmap: bool,
    /// Threads reading processes (default: one per CPU).
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// Read a kernel crash dump of an x86_64 or arm64 machine (an ELF
    /// core: qemu's `dump-guest-memory`, `virsh dump`, /proc/vmcore,
    /// `makedumpfile -E`; or makedumpfile's compressed kdump file) instead
    /// of the live system (docs/dumps.md).
    #[arg(long, value_name = "FILE", group = "dump")]
    pub vmcore: Option<PathBuf>,
    /// Read the running kernel's memory through /proc/kcore (root) by the
    /// same walk as `--vmcore`, with its BTF (/sys/kernel/btf/vmlinux
    /// unless `--btf`) and symbols (/proc/kallsyms unless `--system-map`).
    #[arg(long, group = "dump")]
    pub kcore: bool,
    /// The crashed kernel's vmlinux (with its .BTF section and symbols),
    /// or its BTF (`/sys/kernel/btf/vmlinux`), for `--vmcore`. Without it,
    /// the kernel's own BTF and symbols are read from the dump, where its
    /// VMCOREINFO gives kallsyms and kallsyms lists data symbols.
    #[arg(long, value_name = "FILE", requires = "dump")]
    pub btf: Option<PathBuf>,
    /// The crashed kernel's System.map (/boot/System.map-RELEASE), for
    /// the symbols a BTF file or a stripped vmlinux lacks, for `--vmcore`.
    #[arg(long, value_name = "FILE", requires = "dump")]
    pub system_map: Option<PathBuf>,
}
