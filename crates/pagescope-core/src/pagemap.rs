//! The layout of a `/proc/PID/pagemap` entry.
//!
//! One little-endian u64 per virtual page, as documented in the kernel's
//! Documentation/admin-guide/mm/pagemap.rst ("pagemap, from the userspace
//! perspective"):
//!
//! | bits  | meaning |
//! |-------|---------|
//! | 0-54  | page frame number if present (zero without CAP_SYS_ADMIN) |
//! | 0-4   | swap type if swapped |
//! | 5-54  | swap offset if swapped |
//! | 55    | pte is soft-dirty (Documentation/admin-guide/mm/soft-dirty.rst) |
//! | 56    | page exclusively mapped (since 4.2) |
//! | 57    | pte is uffd-wp write-protected (since 5.13) |
//! | 58    | pte is a guard region (since 6.15) |
//! | 59-60 | zero |
//! | 61    | page is file-page or shared-anon (since 3.5) |
//! | 62    | page swapped |
//! | 63    | page present |

use crate::units::Pfn;
use bitflags::bitflags;
use serde::{Deserialize, Serialize};

/// The swap type the kernel gives its PTE markers (`SWP_PTE_MARKER`,
/// include/linux/swapops.h: the last of the 32 types): a guard region
/// (`MADV_GUARD_INSTALL`), a uffd-wp marker on an empty PTE, a poisoned
/// page. pagemap marks them swapped (bit 62), though nothing is in swap.
pub const PTE_MARKER_SWAP_TYPE: u8 = 31;

/// Mask of the frame bits (0-54): the PFN of a present page, or the swap
/// type and offset of a swapped one.
pub const FRAME_MASK: u64 = (1 << 55) - 1;

bitflags! {
    /// The flag bits (55-63) of a pagemap entry, each at its kernel bit
    /// position (Documentation/admin-guide/mm/pagemap.rst).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub struct PagemapFlags: u64 {
        /// Bit 55: the PTE is soft-dirty (written since the last
        /// `clear_refs` 4; CONFIG_MEM_SOFT_DIRTY).
        const SOFT_DIRTY = 1 << 55;
        /// Bit 56: the page is mapped exclusively (by this one mapping).
        const EXCLUSIVE = 1 << 56;
        /// Bit 57: the PTE is write-protected by userfaultfd (uffd-wp).
        const UFFD_WP = 1 << 57;
        /// Bit 58: the PTE is a guard region (MADV_GUARD_INSTALL).
        const GUARD = 1 << 58;
        /// Bit 59: reserved, always zero.
        const RESERVED_59 = 1 << 59;
        /// Bit 60: reserved, always zero.
        const RESERVED_60 = 1 << 60;
        /// Bit 61: the page is a file page or shared anonymous memory.
        const FILE_OR_SHARED = 1 << 61;
        /// Bit 62: the page is swapped out.
        const SWAPPED = 1 << 62;
        /// Bit 63: the page is present in RAM.
        const PRESENT = 1 << 63;
    }
}

/// One raw pagemap entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PagemapEntry(pub u64);

impl PagemapEntry {
    /// The flag bits 55-63.
    pub fn flags(self) -> PagemapFlags {
        PagemapFlags::from_bits_truncate(self.0)
    }

    /// Bit 63: the page is in RAM.
    pub fn is_present(self) -> bool {
        self.0 & PagemapFlags::PRESENT.bits() != 0
    }

    /// Bit 62: the page is in swap.
    pub fn is_swapped(self) -> bool {
        self.0 & PagemapFlags::SWAPPED.bits() != 0
    }

    /// Whether the page is in swap, as smaps' `Swap` counts: bit 62, but
    /// not a guard region (bit 58) nor another PTE marker (swap type
    /// [`PTE_MARKER_SWAP_TYPE`], visible with CAP_SYS_ADMIN), which
    /// pagemap marks swapped too.
    pub fn is_in_swap(self) -> bool {
        self.is_swapped()
            && !self.flags().contains(PagemapFlags::GUARD)
            && (self.frame_bits() == 0 || self.swap_type() != Some(PTE_MARKER_SWAP_TYPE))
    }

    /// Bit 61: a file page or shared anonymous page.
    pub fn is_file_or_shared(self) -> bool {
        self.0 & PagemapFlags::FILE_OR_SHARED.bits() != 0
    }

    /// Bit 56: exclusively mapped.
    pub fn is_exclusive(self) -> bool {
        self.0 & PagemapFlags::EXCLUSIVE.bits() != 0
    }

    /// Bit 55: soft-dirty.
    pub fn is_soft_dirty(self) -> bool {
        self.0 & PagemapFlags::SOFT_DIRTY.bits() != 0
    }

    /// Bits 0-54 whatever they mean (PFN, or swap type and offset).
    pub fn frame_bits(self) -> u64 {
        self.0 & FRAME_MASK
    }

    /// The page frame number of a present page. `None` if the page is not
    /// present, and `Some(Pfn(0))` when the reader lacked CAP_SYS_ADMIN
    /// (the kernel then reports zero).
    pub fn pfn(self) -> Option<Pfn> {
        self.is_present().then_some(Pfn(self.frame_bits()))
    }

    /// Swap type (bits 0-4) of a swapped page.
    pub fn swap_type(self) -> Option<u8> {
        self.is_swapped().then_some((self.0 & 0x1f) as u8)
    }

    /// Swap offset (bits 5-54) of a swapped page.
    pub fn swap_offset(self) -> Option<u64> {
        self.is_swapped().then_some((self.0 & FRAME_MASK) >> 5)
    }

    /// Whether the entry says anything at all (present, swapped, or any
    /// flag such as uffd-wp or a guard region).
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The symbols that page-types (tools/mm/page-types.c) uses for
    /// pagemap flags, in a fixed order: `P` present, `S` swapped,
    /// `F` file or shared, `E` exclusive, `D` soft-dirty, `W` uffd-wp,
    /// `G` guard; `-` where a flag is clear.
    pub fn symbols(self) -> String {
        let f = self.flags();
        [
            (PagemapFlags::PRESENT, 'P'),
            (PagemapFlags::SWAPPED, 'S'),
            (PagemapFlags::FILE_OR_SHARED, 'F'),
            (PagemapFlags::EXCLUSIVE, 'E'),
            (PagemapFlags::SOFT_DIRTY, 'D'),
            (PagemapFlags::UFFD_WP, 'W'),
            (PagemapFlags::GUARD, 'G'),
        ]
        .iter()
        .map(|&(flag, c)| if f.contains(flag) { c } else { '-' })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn present_entry() {
        // Present, exclusive, PFN 0x12345.
        let e = PagemapEntry((1 << 63) | (1 << 56) | 0x12345);
        assert!(e.is_present());
        assert!(!e.is_swapped());
        assert!(e.is_exclusive());
        assert_eq!(e.pfn(), Some(Pfn(0x12345)));
        assert_eq!(e.swap_type(), None);
        assert_eq!(e.symbols(), "P--E---");
    }

    #[test]
    fn swapped_entry() {
        // Swapped, type 3, offset 0x777.
        let e = PagemapEntry((1 << 62) | (0x777 << 5) | 3);
        assert!(!e.is_present());
        assert_eq!(e.pfn(), None);
        assert_eq!(e.swap_type(), Some(3));
        assert_eq!(e.swap_offset(), Some(0x777));
        assert!(e.is_in_swap());
        // Without CAP_SYS_ADMIN the type and offset read as zero.
        assert!(PagemapEntry(1 << 62).is_in_swap());
    }

    #[test]
    fn markers_are_not_in_swap() {
        // A guard region as this kernel (6.18) shows it to root: swapped,
        // guard, marker type 31, offset PTE_MARKER_GUARD (4).
        let guard = PagemapEntry(0x4400_0000_0000_009f);
        assert!(guard.is_swapped());
        assert!(!guard.is_in_swap());
        // The same without CAP_SYS_ADMIN.
        assert!(!PagemapEntry((1 << 62) | (1 << 58)).is_in_swap());
        // A uffd-wp marker on an empty PTE (PTE_MARKER_UFFD_WP, 1), as
        // root sees it.
        let wp = PagemapEntry((1 << 62) | (1 << 57) | (1 << 5) | 31);
        assert!(!wp.is_in_swap());
    }

    #[test]
    fn every_flag_bit_is_named() {
        for bit in 55..64 {
            let f = PagemapFlags::from_bits(1 << bit);
            assert!(f.is_some(), "bit {bit} has no name");
        }
        assert_eq!(PagemapFlags::all().bits() | FRAME_MASK, u64::MAX);
    }
}
