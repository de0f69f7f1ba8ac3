//! pagescope's reader of kernel crash dumps: `pagescope snapshot
//! --vmcore` walks a dump's page tables and `struct page`s and writes the
//! same snapshot stream a live snapshot does
//! ([`pagescope_core::model::SnapshotSink`]), so that every report and
//! `diff` read it unchanged.
//!
//! Modules, in the order they may use each other: [`btf`] and
//! [`vmcoreinfo`] parse the kernel's self-descriptions; [`elfcore`] reads
//! an ELF core, [`kdump`] makedumpfile's compressed format (its pages
//! decoded by [`codec`] and [`lzo`]), and [`dumpfile`] either, told apart
//! by its first bytes; [`kernelfile`] the vmlinux or BTF brought along, or [`kallsyms`] the
//! kernel's own symbols and BTF from the dump;
//! [`layout`] finds the offsets the walk needs; [`mmu`] walks page
//! tables, whose entries [`x86_64`] and [`arm64`] decode into [`entry`]'s
//! terms; [`page`] reads `struct page`s as kpageflags and kpagecount;
//! [`kernel`] ties these into one readable kernel; [`proc`] reads tasks,
//! VMAs and paths; [`physmap`] classes every frame; [`vmstat`] reads the machine's totals; [`collect`] makes the
//! stream.
//!
//! The dump is never loaded into memory: its headers and notes are read
//! when it is opened, and its memory a page table or a `struct page` at a
//! time, with `pread` (a compressed dump's pages through a small cache of
//! decompressed pages). Nothing here touches the live system.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod arm64;
pub mod btf;
pub mod codec;
pub mod collect;
pub mod dumpfile;
pub mod elfcore;
pub mod entry;
pub mod kallsyms;
pub mod kdump;
pub mod kernel;
pub mod kernelfile;
pub mod layout;
pub mod lzo;
pub mod mmu;
pub mod page;
pub mod pagecache;
pub mod physmap;
pub mod proc;
pub mod vmcoreinfo;
pub mod vmstat;
pub mod x86_64;

pub use collect::{collect, Config};

use std::path::PathBuf;

/// What can go wrong reading a dump.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DumpError {
    /// The dump or the file brought with it is not what it must be: not
    /// a dump, cut short, without VMCOREINFO, of another kernel or
    /// architecture. The input is at fault (exit 2).
    #[error("{path}: {why}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong, in words.
        why: String,
    },
    /// Reading a file failed.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// The sink (the output file) failed.
    #[error(transparent)]
    Sink(#[from] pagescope_core::Error),
    /// Stopped by the caller's stop function (Ctrl-C).
    #[error("interrupted")]
    Interrupted,
}

/// This crate's results.
pub type Result<T> = std::result::Result<T, DumpError>;
