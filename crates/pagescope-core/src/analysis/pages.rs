//! The page dump: each present page of the selected processes with its
//! frame, its pagemap and kpageflags bits, its share count and its
//! owner, and each page they have in swap (its pagemap entry holds the
//! swap entry), streamed to a callback so that a dump of millions of
//! pages never sits in memory. `--flags anon,~lru` selects present pages
//! by kpageflags, as the kernel's page-types does. The pages of hugetlb
//! mappings are in it too (kpageflags `huge`), in base pages, as
//! page-types lists them.

use super::classify::{classify_vmas, ElfTable, PageClass, VmaClass};
use super::{is_resident, VmaCursor};
use crate::kpageflags::KPageFlags;
use crate::model::{
    ElfFile, PageChunk, PhysInfo, ProcessRecord, SnapshotSink, SystemInfo, Trailer, Vma,
};
use crate::pagemap::PagemapEntry;
use crate::Result;

/// A kpageflags filter: flags that must be set, and flags that must be
/// clear.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlagFilter {
    /// All of these set.
    pub set: KPageFlags,
    /// None of these set.
    pub clear: KPageFlags,
}

impl FlagFilter {
    /// Parses `anon,~lru`: comma-separated kpageflags names (page-types'
    /// long names or the kernel's, any case), `~` for "must be clear".
    pub fn parse(text: &str) -> std::result::Result<FlagFilter, String> {
        let mut f = FlagFilter::default();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let (neg, name) = match word.strip_prefix('~') {
                Some(n) => (true, n),
                None => (false, word),
            };
            let flag = KPageFlags::from_symbol_name(name).ok_or_else(|| {
                let known: Vec<&str> = crate::kpageflags::SYMBOLS.iter().map(|s| s.2).collect();
                format!("unknown page flag {name:?} (known: {})", known.join(", "))
            })?;
            if neg {
                f.clear |= flag;
            } else {
                f.set |= flag;
            }
        }
        Ok(f)
    }

    /// Whether no flag is asked for.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.clear.is_empty()
    }

    /// Whether `flags` passes.
    pub fn accepts(&self, flags: KPageFlags) -> bool {
        flags.contains(self.set) && !flags.intersects(self.clear)
    }
}

/// One page of the dump.
#[derive(Debug)]
pub struct PageRow<'a> {
    /// Process id.
    pub pid: u32,
    /// Command name.
    pub comm: &'a str,
    /// Virtual address.
    pub vaddr: u64,
    /// The pagemap entry.
    pub entry: PagemapEntry,
    /// The frame's flags, count, memcg and node, if PFNs were visible.
    pub phys: Option<PhysInfo>,
    /// The VMA.
    pub vma: Option<&'a Vma>,
    /// The VMA's flags in the 2005 suite's form (`S X r w x B`).
    pub vma_flags: &'a str,
    /// The page's class.
    pub class: PageClass,
    /// Page size in bytes.
    pub page_size: u64,
    /// The owner: the unit's path, or the VMA's name, or `[anon]`.
    pub owner: &'a str,
}

/// The analysis: calls `emit` for every present page that passes the
/// filter, and, without a filter, for every page in swap.
pub struct PageDump<F: FnMut(&PageRow<'_>) -> Result<()>> {
    /// The machine.
    pub system: SystemInfo,
    /// Notes from the end record.
    pub notes: Vec<String>,
    /// Whether the end record was seen.
    pub complete: bool,
    /// Pages emitted.
    pub emitted: u64,
    filter: FlagFilter,
    elfs: ElfTable,
    comm: String,
    pid: u32,
    start_time: u64,
    vmas: Vec<Vma>,
    classes: Vec<VmaClass>,
    /// Each VMA's flags, in the 2005 suite's form.
    vma_flags: Vec<String>,
    cursor: VmaCursor,
    emit: F,
}

impl<F: FnMut(&PageRow<'_>) -> Result<()>> std::fmt::Debug for PageDump<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageDump")
            .field("emitted", &self.emitted)
            .finish()
    }
}

impl<F: FnMut(&PageRow<'_>) -> Result<()>> PageDump<F> {
    /// A dump through `emit`.
    pub fn new(filter: FlagFilter, emit: F) -> Self {
        PageDump {
            system: SystemInfo::default(),
            notes: Vec::new(),
            complete: false,
            emitted: 0,
            filter,
            elfs: ElfTable::default(),
            comm: String::new(),
            pid: 0,
            start_time: 0,
            vmas: Vec::new(),
            classes: Vec::new(),
            vma_flags: Vec::new(),
            cursor: VmaCursor::default(),
            emit,
        }
    }
}

impl<F: FnMut(&PageRow<'_>) -> Result<()>> SnapshotSink for PageDump<F> {
    fn system(&mut self, system: &SystemInfo) -> Result<()> {
        self.system = system.clone();
        Ok(())
    }

    fn elf(&mut self, elf: &ElfFile) -> Result<()> {
        self.elfs.add(elf.clone());
        Ok(())
    }

    fn process(&mut self, p: &ProcessRecord) -> Result<()> {
        self.pid = p.task.pid;
        self.start_time = p.task.start_time;
        self.comm = p.task.comm.clone();
        self.vmas = p.vmas.clone();
        self.classes = classify_vmas(&p.task, &p.vmas, &self.elfs, self.system.page_size.max(1));
        self.cursor = VmaCursor::default();
        self.vma_flags = p
            .vmas
            .iter()
            .zip(&self.classes)
            .map(|(v, c)| c.paper_flags(v))
            .collect();
        Ok(())
    }

    fn pages(&mut self, chunk: &PageChunk) -> Result<()> {
        self.rows(chunk)
    }

    fn hugetlb(&mut self, chunk: &PageChunk) -> Result<()> {
        self.rows(chunk)
    }

    fn finish(&mut self, trailer: &Trailer) -> Result<()> {
        self.notes = trailer.notes.clone();
        self.complete = true;
        Ok(())
    }
}

impl<F: FnMut(&PageRow<'_>) -> Result<()>> PageDump<F> {
    /// Emits the pages of `chunk` that the dump shows.
    fn rows(&mut self, chunk: &PageChunk) -> Result<()> {
        if chunk.pid != self.pid || chunk.start_time != self.start_time {
            return Ok(());
        }
        let ps = self.system.page_size.max(1);
        for page in &chunk.pages {
            let idx = self.cursor.index_by(&self.vmas, page.vaddr, |v| v);
            let vma = idx.map(|i| &self.vmas[i]);
            if !is_resident(vma, page) && !page.entry.is_in_swap() {
                continue;
            }
            // Pages in swap have no frame, and so no flags to pass.
            if !self.filter.is_empty() && !page.phys.is_some_and(|p| self.filter.accepts(p.flags)) {
                continue;
            }
            let (class, owner, vma_flags) = match idx {
                Some(i) => {
                    let c = &self.classes[i];
                    let v = &self.vmas[i];
                    let owner =
                        c.unit_path()
                            .unwrap_or(if v.path.is_empty() { "[anon]" } else { &v.path });
                    (
                        c.page_class(&self.elfs, page.vaddr, ps),
                        owner,
                        self.vma_flags[i].as_str(),
                    )
                }
                None => (PageClass::Other, "?", "......"),
            };
            let row = PageRow {
                pid: self.pid,
                comm: &self.comm,
                vaddr: page.vaddr,
                entry: page.entry,
                phys: page.phys,
                vma,
                vma_flags,
                class,
                page_size: ps,
                owner,
            };
            (self.emit)(&row)?;
            self.emitted += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters() {
        let f = FlagFilter::parse("anon,~lru").unwrap();
        assert!(f.accepts(KPageFlags::ANON | KPageFlags::MMAP));
        assert!(!f.accepts(KPageFlags::ANON | KPageFlags::LRU));
        assert!(!f.accepts(KPageFlags::MMAP));
        assert!(FlagFilter::parse("").unwrap().is_empty());
        let e = FlagFilter::parse("anon,bogus").unwrap_err();
        assert!(e.contains("bogus") && e.contains("anonymous"), "{e}");
        assert_eq!(FlagFilter::parse("THP").unwrap().set, KPageFlags::THP);
    }
}
