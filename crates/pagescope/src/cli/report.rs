//! `pagescope report` and `pagescope diff`: views of snapshots.

use super::{parse, Pids, Rendering};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// The report views.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum View {
    /// Machine totals: user pages, page cache, kernel, free.
    Total,
    /// Per process RSS, PSS, USS, swap, and pages by class.
    Processes,
    /// Each VMA of a process and its page map.
    Vmas,
    /// Each executable unit's segments across processes, with maps.
    Units,
    /// Per unit .text, .data and .bss pages summed over processes.
    UnitTotals,
    /// VMAs holding both single-use and shared pages.
    Alerts,
    /// Every resident page (frame, flags, share count, owner), hugetlb
    /// pages included, and every page in swap (its swap entry).
    Pages,
    /// The whole machine by physical address: frames by class per block.
    Physmap,
    /// Every view of a snapshot file on one self-contained HTML page
    /// (--input FILE, -o OUT).
    Html,
}

/// What the columns of `report` mean: `report --help` and the man page.
pub const COLUMN_LEGEND: &str = "\
Sizes:
  Tables show sizes in KiB, MiB and GiB (binary units) by default; --units bytes
  shows bytes, --units pages pages. JSON and CSV count pages (with page_size) and
  give RSS, PSS, USS, swap and the totals in bytes too (rss_bytes beside rss_pages).
  A figure that could not be read is - in tables and null in JSON.

Columns of `processes`:
  RSS          resident memory (smaps' rule: not the zero page, not VM_PFNMAP or VM_IO)
  PSS          proportional set size: each resident page divided among the processes
               that map it
  USS          unique set size: pages only this process maps (smaps Private_*)
  SWAP         memory in swap
  RW, RX       resident pages in writable, in executable mappings
  TOTAL        the pages counted by class (the sum of the class columns)
  STACK, DATA, TEXT, HEAP
               the program's own pages by class (HEAP holds its .bss too)
  LIBBSS, LIBDATA, LIBTEXT
               shared libraries' pages by class
  OTHER        pages of no class above (other files, shared memory)
  SINGLE       pages no other process maps (kpagecount 1)
  MULTI        pages other processes map too
  ANON         anonymous memory
  THREADS      threads of the process
  KTHREAD      a kernel thread (PF_KTHREAD): no memory of its own; listed only with
               --all, or when --pid names it
  COUNTED-BY   where RSS, PSS and USS come from: pages (pagemap and kpagecount,
               from a snapshot or --classes) or smaps (the kernel's smaps_rollup)
  BY-PERMS     yes: the classes were guessed from permissions (the ELF headers could
               not be read)
  SMAPS-RSS, SMAPS-PSS, SMAPS-USS, SMAPS-SWAP
               the kernel's own smaps sums, read at the same moment, to compare
  COMMAND      the command line

Columns of the other views:
  vmas         PAGES virtual size, RES resident, SINGLE and SHARED resident pages
               mapped by this process only or by others too, MAP one digit a page:
               how many processes have it resident (. none)
  units        PROCS processes mapping the segment, VIRT its size, RES resident
               anywhere, RESSUM resident summed over the processes
  unit-totals  TEXT-V, TEXT-P (and RODATA, DATA, BSS): mapped (virtual) and
               resident (physical) sizes, summed over the processes
  alerts       SINGLE and SHARED pages of a VMA holding both, and why (HINT)
  physmap      page frames by class per block: FREE, ANON, CACHE (page cache,
               mapped), UNMAPPED (page cache, unmapped), SLAB, PGTBL (page tables),
               KERNEL (other kernel memory), RSVD (reserved or offline), HUGE
               (hugetlb), THP (transparent huge pages of a PMD's size,
               anonymous, shmem or file), KSM, ZERO (the zero page); MOST the
               largest class
  diff         the change of each figure between the two snapshots
";

/// `pagescope report`.
#[derive(Debug, Args)]
#[command(after_long_help = COLUMN_LEGEND)]
pub struct ReportArgs {
    /// The view.
    pub view: View,
    /// A snapshot file ("-" for standard input); without it, the live
    /// system is read.
    #[arg(short, long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    #[command(flatten)]
    pub select: Pids,
    #[command(flatten)]
    pub rendering: Rendering,
    /// `processes`: count mapped (virtual) pages instead of resident ones.
    #[arg(long = "virtual")]
    pub virtual_view: bool,
    /// `processes` on the live system: read every page to count them by
    /// class (by default only the kernel's smaps_rollup sums are read).
    #[arg(long)]
    pub classes: bool,
    /// `processes`: list kernel threads too (left out by default, in
    /// JSON and CSV as well; a kernel thread named by --pid is listed).
    #[arg(long)]
    pub all: bool,
    /// `pages`: only pages with these kpageflags (page-types names,
    /// comma-separated, `~` for "not set"), e.g. `anonymous,~lru`.
    #[arg(long, value_name = "FLAGS")]
    pub flags: Option<String>,
    /// `physmap`: block size to sum frames over (default: the memory
    /// block size), e.g. 64M; one that gives more than 64 Ki blocks is
    /// refused.
    #[arg(long, value_name = "SIZE", value_parser = parse::block)]
    pub block: Option<u64>,
    /// `html`: the page to write ("-" for standard output); made with
    /// mode 0600, as it holds command lines.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `pagescope diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The earlier snapshot ("-" for standard input).
    pub old: PathBuf,
    /// The later snapshot ("-" for standard input, if the earlier is a
    /// file).
    pub new: PathBuf,
    #[command(flatten)]
    pub select: Pids,
    #[command(flatten)]
    pub rendering: Rendering,
    /// List kernel threads that started or ended too (left out by
    /// default).
    #[arg(long)]
    pub all: bool,
}
