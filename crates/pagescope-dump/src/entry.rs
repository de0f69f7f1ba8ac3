//! What a page table entry says, decoded by an architecture
//! ([`crate::x86_64`], [`crate::arm64`]) for the walk of [`crate::mmu`].

/// What an entry says of its page beyond where it is: the bits pagemap
/// and smaps report, decoded from the architecture's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pte {
    /// `pte_young`: referenced since the bit was last cleared.
    pub young: bool,
    /// `pte_dirty`: written since it was last clean.
    pub dirty: bool,
    /// `pte_soft_dirty` (`pte_swp_soft_dirty` for a swap entry).
    pub soft_dirty: bool,
    /// `pte_uffd_wp` (`pte_swp_uffd_wp`).
    pub uffd_wp: bool,
    /// `pte_special`: no `struct page` stands behind it (the zero page).
    pub special: bool,
}

/// What a walk finds for one virtual page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A page in memory (or PROT_NONE): its frame, the level it was mapped
    /// at (0 a PTE, 1 a PMD, 2 a PUD), and its bits.
    Present {
        /// Page frame number of this page.
        pfn: u64,
        /// 0 PTE, 1 PMD, 2 PUD.
        level: u8,
        /// The entry's bits.
        pte: Pte,
    },
    /// A swap entry (or another non-present entry: migration, marker).
    Swap {
        /// Swap type (`__swp_type`).
        swap_type: u64,
        /// Swap offset (`__swp_offset`), plus the page's index for an
        /// entry above PTE level.
        offset: u64,
        /// The entry's bits.
        pte: Pte,
    },
}

/// One table entry, decoded by an architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Desc {
    /// Nothing mapped.
    None,
    /// The next level's table at this physical address.
    Table(u64),
    /// A page or block at this physical address (of the level's size).
    Leaf(u64, Pte),
    /// A swap (or migration, marker) entry: type and offset.
    Swap(u64, u64, Pte),
}
