//! x86_64 page table entries as the kernel writes them
//! (arch/x86/include/asm/pgtable_types.h, pgtable_64.h), for the walk of
//! [`crate::mmu`]: 4 or 5 levels, huge pages at PMD (2 MiB) and PUD
//! (1 GiB) level, PROT_NONE entries (whose frame is stored inverted, the
//! L1TF mitigation) and swap entries.

use crate::entry::{Desc, Pte};

/// `_PAGE_PRESENT`.
pub const PRESENT: u64 = 1 << 0;
/// `_PAGE_RW`.
pub const RW: u64 = 1 << 1;
/// `_PAGE_ACCESSED`.
pub const ACCESSED: u64 = 1 << 5;
/// `_PAGE_DIRTY`.
pub const DIRTY: u64 = 1 << 6;
/// `_PAGE_PSE`: a huge page at PMD or PUD level.
pub const PSE: u64 = 1 << 7;
/// `_PAGE_PROTNONE` (the global bit, on entries that are not present).
pub const PROTNONE: u64 = 1 << 8;
/// `_PAGE_UFFD_WP` (`_PAGE_BIT_SOFTW2`).
pub const UFFD_WP: u64 = 1 << 10;
/// `_PAGE_SOFT_DIRTY` (`_PAGE_BIT_SOFTW3`).
pub const SOFT_DIRTY: u64 = 1 << 11;
/// `_PAGE_SWP_SOFT_DIRTY`: soft-dirty in a swap entry.
pub const SWP_SOFT_DIRTY: u64 = 1 << 1;
/// `_PAGE_SWP_UFFD_WP`: uffd-wp in a swap entry.
pub const SWP_UFFD_WP: u64 = 1 << 2;
/// `_PAGE_KNL_ERRATUM_MASK`: bits hardware may set on an empty entry.
const ERRATUM: u64 = ACCESSED | DIRTY;
/// `PTE_PFN_MASK` for 52 physical address bits.
const PFN_MASK: u64 = 0x000f_ffff_ffff_f000;
/// The part of the kernel image's mapping read by its offset rather than
/// the tables: `KERNEL_IMAGE_SIZE` without KASLR, below the modules.
pub const IMAGE_FAST: u64 = 512 << 20;
/// `__START_KERNEL_map`: where the kernel image is mapped.
pub const START_KERNEL_MAP: u64 = 0xffff_ffff_8000_0000;

/// `pte_none`: nothing there.
pub fn is_none(raw: u64) -> bool {
    raw & !ERRATUM == 0
}

/// `pte_present`: in memory, or PROT_NONE.
pub fn is_present(raw: u64) -> bool {
    raw & (PRESENT | PROTNONE) != 0
}

/// The frame of a present entry, undoing the L1TF inversion of PROT_NONE
/// entries (`protnone_mask`); `mask` selects the address bits of the
/// level (and drops the memory-encryption bit).
pub fn frame(raw: u64, mask: u64) -> u64 {
    let v = if raw & PRESENT == 0 { !raw } else { raw };
    v & mask
}

/// The swap type and offset of a non-present entry (`__swp_type`,
/// `__swp_offset`: type in bits 59-63, offset inverted in bits 9-58).
pub fn swap_entry(raw: u64) -> (u64, u64) {
    (raw >> 59, (!raw << 5) >> 14)
}

/// `_PAGE_SPECIAL` (`_PAGE_BIT_SOFTW1`).
pub const SPECIAL: u64 = 1 << 9;

/// The address mask of a level's entries (0 PTE, 1 PMD, 2 PUD), without
/// the memory-encryption bit.
fn mask(level: u8, sme: u64) -> u64 {
    PFN_MASK & !sme & !((1u64 << (12 + 9 * level as u32)) - 1)
}

/// What entry `raw` of a table at `level` holds. A kernel table's entry
/// counts only if present (`_PAGE_PRESENT`); a user table's PROT_NONE
/// entries are pages, and its other non-empty entries swap entries.
pub fn decode(raw: u64, level: u8, kernel: bool, sme: u64) -> Desc {
    let leaf = level == 0 || (level <= 2 && raw & PSE != 0);
    if kernel {
        return match (raw & PRESENT != 0, leaf) {
            (false, _) => Desc::None,
            (true, true) => Desc::Leaf(raw & mask(level, sme), Pte::default()),
            (true, false) => Desc::Table(raw & mask(0, sme)),
        };
    }
    if is_none(raw) {
        return Desc::None;
    }
    if is_present(raw) {
        if !leaf {
            return Desc::Table(raw & mask(0, sme));
        }
        return Desc::Leaf(
            frame(raw, mask(level, sme)),
            Pte {
                young: raw & ACCESSED != 0,
                dirty: raw & DIRTY != 0,
                soft_dirty: raw & SOFT_DIRTY != 0,
                uffd_wp: raw & UFFD_WP != 0,
                special: level == 0 && raw & SPECIAL != 0,
            },
        );
    }
    let (swap_type, offset) = swap_entry(raw);
    Desc::Swap(
        swap_type,
        offset,
        Pte {
            soft_dirty: raw & SWP_SOFT_DIRTY != 0,
            uffd_wp: raw & SWP_UFFD_WP != 0,
            ..Pte::default()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_decode_as_the_kernel_encodes_them() {
        // A present, dirty, accessed, writable PTE of frame 0x12345.
        let pte = 0x8000_0000_1234_5067;
        assert!(is_present(pte) && !is_none(pte));
        assert_eq!(frame(pte, PFN_MASK) >> 12, 0x12345);
        // PROT_NONE: not present, bit 8, frame stored inverted.
        let protnone = (!(0x12345u64 << 12) & PFN_MASK) | PROTNONE | ACCESSED;
        assert!(is_present(protnone));
        assert_eq!(frame(protnone, PFN_MASK) >> 12, 0x12345);
        // Only the erratum bits: empty.
        assert!(is_none(ACCESSED | DIRTY));
        // A swap entry of type 1, offset 0x777 (__swp_entry: type in
        // 59-63, !offset from bit 9, then the type bits shifted in).
        let off: u64 = 0x777;
        let raw = ((!off << 14) >> 5) | (1u64 << 59);
        assert_eq!(swap_entry(raw), (1, 0x777));
        assert!(!is_present(raw) && !is_none(raw));
        assert_eq!(
            decode(raw, 0, false, 0),
            Desc::Swap(1, 0x777, Pte::default())
        );
        // Decoded as pages: the frame, young and dirty.
        match decode(pte, 0, false, 0) {
            Desc::Leaf(pa, p) => {
                assert_eq!(pa, 0x1234_5000);
                assert!(p.young && p.dirty && !p.special && !p.soft_dirty);
            }
            d => panic!("{d:?}"),
        }
        assert!(matches!(
            decode(protnone, 0, false, 0),
            Desc::Leaf(0x1234_5000, _)
        ));
        // In a kernel table, PROT_NONE's bit is the global bit: no page.
        assert_eq!(decode(protnone, 0, true, 0), Desc::None);
        // A 2 MiB page and a table at PMD level.
        assert!(matches!(
            decode(0x4020_00e7, 1, false, 0),
            Desc::Leaf(0x4020_0000, _)
        ));
        assert_eq!(decode(0x4020_1067, 1, false, 0), Desc::Table(0x4020_1000));
    }
}
