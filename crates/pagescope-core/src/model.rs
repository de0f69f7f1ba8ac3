//! The data model of a snapshot: what the collector harvests from the
//! kernel, what the recording format stores, and what analyses consume.
//!
//! A snapshot is a stream: one [`SystemInfo`], then for each process one
//! [`ProcessRecord`] (the task and its VMAs) followed by zero or more
//! [`PageChunk`]s (its pages), then one [`Trailer`]. Collectors, the file
//! writer, the file reader and the analyses all speak this stream through
//! [`SnapshotSink`], so a live report and a report from a file are the same
//! code.

use crate::kpageflags::KPageFlags;
use crate::pagemap::PagemapEntry;
use crate::Result;
use serde::{Deserialize, Serialize};

/// Machine-wide facts, recorded once at the start of a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemInfo {
    /// `uname -r`.
    pub kernel_release: String,
    /// `uname -n`.
    pub hostname: String,
    /// Page size in bytes.
    pub page_size: u64,
    /// Wall-clock time of the snapshot's start, ns since the Unix epoch.
    pub time_unix_ns: u64,
    /// Clock ticks per second (for task times in ticks).
    pub clock_ticks: u64,
    /// Whether pagemap showed page frame numbers (needs CAP_SYS_ADMIN)
    /// and kpageflags/kpagecount could be read.
    pub pfns_visible: bool,
    /// Whether /proc/kpagecgroup could be read (needs CONFIG_MEMCG).
    pub memcg_visible: bool,
    /// One line per figure that could not be collected, and why.
    #[serde(deserialize_with = "crate::format::limits::notes")]
    pub missing: Vec<String>,
    /// `/proc/meminfo`, in its order, values in kB (or pages for the
    /// HugePages_* counts, as the kernel prints them).
    #[serde(deserialize_with = "crate::format::limits::meminfo")]
    pub meminfo: Vec<(String, u64)>,
    /// `/proc/slabinfo` caches (empty without root).
    #[serde(deserialize_with = "crate::format::limits::slabs")]
    pub slabs: Vec<SlabCache>,
    /// System RAM ranges of `/proc/iomem`, as `[start, end]` inclusive
    /// physical addresses (empty without root: the kernel hides them).
    #[serde(deserialize_with = "crate::format::limits::ranges")]
    pub ram_ranges: Vec<(u64, u64)>,
    /// Memory block size from sysfs, bytes.
    pub memory_block_size: u64,
    /// PFN ranges per NUMA node from sysfs memory blocks.
    #[serde(deserialize_with = "crate::format::limits::ranges")]
    pub nodes: Vec<NodeRange>,
    /// The PIDs asked for, or empty for every process.
    #[serde(deserialize_with = "crate::format::limits::pids")]
    pub selected_pids: Vec<u32>,
    /// The machine and boot the snapshot was taken on, stored in an
    /// [`Origin`] frame of its own after the system record (so that
    /// readers older than it still read this record); `None` in files
    /// written before it.
    #[serde(skip)]
    pub origin: Option<Origin>,
    /// Whether the pages of hugetlb mappings were read
    /// ([`SnapshotSink::hugetlb`]), said by a frame of its own after the
    /// system record (`HUGETLB_READ`): files written before pagescope
    /// read them have none, and their hugetlb figures are unknown (null),
    /// not 0.
    #[serde(skip)]
    pub hugetlb_read: bool,
}

/// Which machine, and which boot of it, a file was written on: what ties
/// its figures to a machine and a moment when files of many machines are
/// put together (`pagescope export`). Every kind of file stores one, in a
/// frame of its own after its first record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The host name (`uname -n`, of the writer's UTS namespace).
    pub host: String,
    /// `/proc/sys/kernel/random/boot_id`, which the kernel draws anew at
    /// each boot; `None` where it could not be read.
    pub boot_id: Option<String>,
}

impl SystemInfo {
    /// A meminfo value by key, in kB.
    pub fn meminfo_kb(&self, key: &str) -> Option<u64> {
        self.meminfo.iter().find(|(k, _)| k == key).map(|&(_, v)| v)
    }

    /// The highest PFN + 1 of any RAM range or node range, for sizing
    /// per-PFN tables.
    pub fn max_pfn(&self) -> u64 {
        let ram = self
            .ram_ranges
            .iter()
            .map(|&(_, end)| end.saturating_add(1) / self.page_size.max(1))
            .max()
            .unwrap_or(0);
        let node = self.nodes.iter().map(|n| n.end_pfn).max().unwrap_or(0);
        ram.max(node)
    }

    /// The NUMA node of a PFN, if the node ranges know it.
    pub fn node_of(&self, pfn: u64) -> Option<u16> {
        self.nodes
            .iter()
            .find(|n| n.start_pfn <= pfn && pfn < n.end_pfn)
            .map(|n| n.node)
    }
}

/// One slab cache of `/proc/slabinfo`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlabCache {
    /// Cache name.
    pub name: String,
    /// Objects in use.
    pub active_objs: u64,
    /// Objects allocated.
    pub num_objs: u64,
    /// Object size in bytes.
    pub objsize: u64,
    /// Pages per slab.
    pub pages_per_slab: u64,
    /// Number of slabs.
    pub num_slabs: u64,
}

impl SlabCache {
    /// Pages the cache holds: slabs times pages per slab.
    pub fn pages(&self) -> u64 {
        self.num_slabs * self.pages_per_slab
    }
}

/// A contiguous PFN range `[start_pfn, end_pfn)` on one NUMA node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRange {
    /// Node number.
    pub node: u16,
    /// First PFN.
    pub start_pfn: u64,
    /// One past the last PFN.
    pub end_pfn: u64,
}

/// One process (threads folded into their thread group) and its VMAs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessRecord {
    /// The task.
    pub task: Task,
    /// Its VMAs in address order (empty for kernel threads, and when only
    /// the rollup was read).
    #[serde(deserialize_with = "crate::format::limits::vmas")]
    pub vmas: Vec<Vma>,
    /// The kernel's `smaps_rollup` sums, when only those were read
    /// (a quick collection for per-process figures); `None` in a full
    /// snapshot, where the VMAs carry the counters.
    pub rollup: Option<SmapsCounters>,
    /// What of the process could not be read (the kernel refused it: a
    /// process of another user, without CAP_SYS_PTRACE). Its figures are
    /// then unknown, not zero. Last, so that readers of files written
    /// before it existed find it absent (docs/format.md).
    pub unread: Unread,
}

impl ProcessRecord {
    /// Whether its memory (smaps or smaps_rollup) was read: a kernel
    /// thread has none, which is known.
    pub fn memory_read(&self) -> bool {
        self.unread != Unread::Memory
    }

    /// Whether its pages (pagemap) were read, as far as the collection
    /// reads pages at all (not in a rollup-only read).
    pub fn pages_read(&self) -> bool {
        self.unread == Unread::Nothing
    }
}

/// What of a process could not be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unread {
    /// Everything the collection reads of a process was read.
    #[default]
    Nothing,
    /// Its memory: smaps (or smaps_rollup), so no VMA and no figure of its
    /// memory is known; only the task (pid, command, threads, ...) is.
    Memory,
    /// Its pages (pagemap): its VMAs and their smaps counters are known,
    /// which of its pages are resident is not.
    Pages,
}

/// A process as `/proc/PID/{stat,status,cmdline,cgroup}` describe it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// Process id (the thread group id: threads fold into it).
    pub pid: u32,
    /// Thread group id (equal to `pid` for a process).
    pub tgid: u32,
    /// Parent pid.
    pub ppid: u32,
    /// Command name (`comm`, at most 15 bytes).
    pub comm: String,
    /// Command line, argument by argument.
    #[serde(deserialize_with = "crate::format::limits::args")]
    pub cmdline: Vec<String>,
    /// Real user id.
    pub uid: u32,
    /// cgroup v2 path (the `0::` line), or the first line's path.
    pub cgroup: String,
    /// Number of threads.
    pub threads: u32,
    /// Minor faults.
    pub minflt: u64,
    /// Major faults.
    pub majflt: u64,
    /// User time, clock ticks.
    pub utime: u64,
    /// System time, clock ticks.
    pub stime: u64,
    /// Start time, clock ticks after boot. With the pid it identifies the
    /// process: a reused pid has a later start time.
    pub start_time: u64,
    /// A kernel thread (PF_KTHREAD): listed, with no memory.
    pub kernel_thread: bool,
    /// The executable (`/proc/PID/exe`), empty if unreadable.
    pub exe: String,
    /// Stack pointers of the threads, where the kernel reported them
    /// (`/proc/PID/task/TID/syscall`): the VMAs holding them are thread
    /// stacks.
    #[serde(deserialize_with = "crate::format::limits::pids")]
    pub thread_sps: Vec<u64>,
}

/// The `/proc/PID/smaps` counters of one VMA, in kB as the kernel prints
/// them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmapsCounters {
    /// `Size`.
    pub size: u64,
    /// `Rss`.
    pub rss: u64,
    /// `Pss`.
    pub pss: u64,
    /// `Shared_Clean`.
    pub shared_clean: u64,
    /// `Shared_Dirty`.
    pub shared_dirty: u64,
    /// `Private_Clean`.
    pub private_clean: u64,
    /// `Private_Dirty`.
    pub private_dirty: u64,
    /// `Referenced`.
    pub referenced: u64,
    /// `Anonymous`.
    pub anonymous: u64,
    /// `AnonHugePages`.
    pub anon_huge_pages: u64,
    /// `Swap`.
    pub swap: u64,
    /// `SwapPss`.
    pub swap_pss: u64,
    /// `Locked`.
    pub locked: u64,
}

impl SmapsCounters {
    /// Adds another VMA's counters.
    pub fn add(&mut self, o: &SmapsCounters) {
        self.size += o.size;
        self.rss += o.rss;
        self.pss += o.pss;
        self.shared_clean += o.shared_clean;
        self.shared_dirty += o.shared_dirty;
        self.private_clean += o.private_clean;
        self.private_dirty += o.private_dirty;
        self.referenced += o.referenced;
        self.anonymous += o.anonymous;
        self.anon_huge_pages += o.anon_huge_pages;
        self.swap += o.swap;
        self.swap_pss += o.swap_pss;
        self.locked += o.locked;
    }
}

/// One virtual memory area.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vma {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `rwxp` / `rwxs` permissions as the kernel prints them.
    pub perms: String,
    /// File offset in bytes.
    pub offset: u64,
    /// Device major number.
    pub dev_major: u32,
    /// Device minor number.
    pub dev_minor: u32,
    /// Inode number (0 for anonymous memory).
    pub inode: u64,
    /// Path or pseudo-name (`[heap]`, `[stack]`, ...), empty if anonymous.
    pub path: String,
    /// The two-letter `VmFlags` mnemonics.
    #[serde(deserialize_with = "crate::format::limits::vm_flags")]
    pub vm_flags: Vec<String>,
    /// The smaps counters.
    pub smaps: SmapsCounters,
}

impl Vma {
    /// Number of pages the VMA spans.
    pub fn pages(&self, page_size: u64) -> u64 {
        (self.end - self.start) / page_size
    }

    /// Readable.
    pub fn is_read(&self) -> bool {
        self.perms.as_bytes().first() == Some(&b'r')
    }

    /// Writable.
    pub fn is_write(&self) -> bool {
        self.perms.as_bytes().get(1) == Some(&b'w')
    }

    /// Executable.
    pub fn is_exec(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// Shared (`s`) rather than private (`p`).
    pub fn is_shared(&self) -> bool {
        self.perms.as_bytes().get(3) == Some(&b's')
    }

    /// Whether the VMA has a given VmFlags mnemonic (`io`, `pf`, ...).
    pub fn has_vm_flag(&self, flag: &str) -> bool {
        self.vm_flags.iter().any(|f| f == flag)
    }
}

/// Section kinds, by what the loader makes of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SectionKind {
    /// Executable code (SHF_EXECINSTR): `.text`, `.plt`, `.init`, ...
    #[default]
    Text,
    /// Read-only data: `.rodata`, `.eh_frame`, symbol tables, ...
    Rodata,
    /// Initialised writable data (PROGBITS, SHF_WRITE): `.data`, `.got`,
    /// `.data.rel.ro`, ...
    Data,
    /// Zero-initialised writable data (NOBITS): `.bss`, `.tbss`.
    Bss,
}

/// An allocated section of an ELF file, at its link-time address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElfSection {
    /// Name (`.text`, ...).
    pub name: String,
    /// Link-time virtual address (`sh_addr`).
    pub addr: u64,
    /// Size in memory.
    pub size: u64,
    /// What it holds.
    pub kind: SectionKind,
}

/// A loadable segment (PT_LOAD) of an ELF file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElfSegment {
    /// File offset (`p_offset`).
    pub offset: u64,
    /// Link-time virtual address (`p_vaddr`).
    pub vaddr: u64,
    /// Bytes in the file (`p_filesz`).
    pub filesz: u64,
    /// Bytes in memory (`p_memsz`; the rest is .bss).
    pub memsz: u64,
    /// `p_flags`: 1 execute, 2 write, 4 read.
    pub flags: u32,
}

/// An ELF file mapped by some process, recorded once per snapshot so that
/// analyses can tell its .text, .data and .bss pages apart with no access
/// to the file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElfFile {
    /// Path as the maps file shows it.
    pub path: String,
    /// Device major of the file.
    pub dev_major: u32,
    /// Device minor of the file.
    pub dev_minor: u32,
    /// Inode.
    pub inode: u64,
    /// `e_type`: 2 executable, 3 shared object or PIE.
    pub elf_type: u16,
    /// PT_LOAD segments.
    #[serde(deserialize_with = "crate::format::limits::elf_segments")]
    pub segments: Vec<ElfSegment>,
    /// Allocated sections (empty if the file has no section headers).
    #[serde(deserialize_with = "crate::format::limits::elf_sections")]
    pub sections: Vec<ElfSection>,
}

impl ElfFile {
    /// The key that matches it to VMAs.
    pub fn key(&self) -> (u32, u32, u64) {
        (self.dev_major, self.dev_minor, self.inode)
    }
}

/// The physical side of a present page, from the PFN-indexed files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhysInfo {
    /// `/proc/kpageflags`.
    pub flags: KPageFlags,
    /// `/proc/kpagecount`: how many times the page is mapped.
    pub count: u64,
    /// `/proc/kpagecgroup`: inode of the page's memory cgroup (0 if none
    /// or unknown).
    pub memcg: u64,
    /// NUMA node, or `u16::MAX` if unknown.
    pub node: u16,
}

/// One virtual page with anything to say (present, swapped or flagged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRecord {
    /// Virtual address of the page.
    pub vaddr: u64,
    /// The pagemap entry.
    pub entry: PagemapEntry,
    /// For a present page whose PFN was visible, its frame's flags,
    /// count, cgroup and node.
    pub phys: Option<PhysInfo>,
}

/// A run of one process's pages, in ascending virtual address order.
/// Pages with an all-zero pagemap entry are left out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageChunk {
    /// The process.
    pub pid: u32,
    /// Its start time, so that chunks never mix two processes of one pid.
    pub start_time: u64,
    /// The pages.
    pub pages: Vec<PageRecord>,
}

/// Closes a snapshot: counts, and the notes gathered on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trailer {
    /// Processes recorded.
    pub processes: u64,
    /// Page records written.
    pub pages: u64,
    /// Processes skipped, and other notes (one line each).
    #[serde(deserialize_with = "crate::format::limits::notes")]
    pub notes: Vec<String>,
    /// Wall-clock duration of the collection, ns.
    pub duration_ns: u64,
}

/// A consumer of the snapshot stream: the file writer, the analyses, or
/// anything that wants a snapshot as it is collected or read.
pub trait SnapshotSink {
    /// The machine-wide facts, first.
    fn system(&mut self, system: &SystemInfo) -> Result<()>;
    /// A process and its VMAs, before its pages.
    fn process(&mut self, process: &ProcessRecord) -> Result<()>;
    /// Some pages of the process last given to [`SnapshotSink::process`].
    fn pages(&mut self, chunk: &PageChunk) -> Result<()>;
    /// Some pages of the hugetlb mappings (VmFlags `ht`) of the process
    /// last given to [`SnapshotSink::process`], apart from its other
    /// pages: the kernel counts them in no Rss, Pss or Swap of smaps
    /// (`Private_Hugetlb`, `Shared_Hugetlb` instead), and neither do
    /// sinks that take only [`SnapshotSink::pages`]. Pagemap gives one
    /// entry per base page of a huge page.
    fn hugetlb(&mut self, _chunk: &PageChunk) -> Result<()> {
        Ok(())
    }
    /// The end of the stream (not called when a file was cut short).
    fn finish(&mut self, trailer: &Trailer) -> Result<()>;
    /// The end of a file cut short, instead of [`SnapshotSink::finish`].
    /// `pages_cut`: it ends in the pages of the process last given to
    /// [`SnapshotSink::process`], so some of them may be missing.
    fn cut_short(&mut self, _pages_cut: bool) -> Result<()> {
        Ok(())
    }
    /// An ELF file, before the first process that maps it.
    fn elf(&mut self, _elf: &ElfFile) -> Result<()> {
        Ok(())
    }
    /// A run of the physical map (only in snapshots taken with it).
    fn physmap(&mut self, _chunk: &PhysChunk) -> Result<()> {
        Ok(())
    }
}

/// A run of page frames, each classed by its kpageflags and kpagecount
/// (the whole-machine physical map).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhysChunk {
    /// First PFN.
    pub start_pfn: u64,
    /// One [`crate::physclass::PhysClass`] code per frame.
    #[serde(with = "serde_bytes")]
    pub classes: Vec<u8>,
}
