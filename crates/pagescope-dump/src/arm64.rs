//! arm64 page table entries as Linux writes them
//! (arch/arm64/include/asm/pgtable-hwdef.h, pgtable-prot.h, pgtable.h),
//! for the walk of [`crate::mmu`]: the VMSAv8-64 descriptors of the 4 KiB
//! and 16 KiB translation granules with 48-bit physical addresses (or
//! 52-bit ones with LPA2, which 52-bit virtual addresses imply), blocks
//! above PTE level, PROT_NONE entries (not valid, with a software bit) and
//! swap entries. Linux 6.10 moved the software bits of entries that are
//! not valid ([`Bits`]).

use crate::entry::{Desc, Pte};

/// `PTE_VALID`: the hardware may use the entry.
pub const VALID: u64 = 1 << 0;
/// `PTE_TABLE_BIT`: above the last level a table, else a block; at the
/// last level set on every page (`PTE_TYPE_PAGE`).
pub const TABLE: u64 = 1 << 1;
/// `PTE_RDONLY` (AP[2]).
pub const RDONLY: u64 = 1 << 7;
/// `PTE_AF`: the access flag.
pub const AF: u64 = 1 << 10;
/// `PTE_DBM`, which Linux uses as `PTE_WRITE`.
pub const DBM: u64 = 1 << 51;
/// `PTE_DIRTY`: software dirty.
pub const SW_DIRTY: u64 = 1 << 55;
/// `PTE_SPECIAL`.
pub const SPECIAL: u64 = 1 << 56;
/// `PTE_PROT_NONE` (only when not valid), before 6.10.
pub const PROT_NONE: u64 = 1 << 58;
/// `PMD_PRESENT_INVALID`: a huge page made invalid while it is split or
/// migrated (only when not valid, above the last level), before 6.10.
pub const PMD_PRESENT_INVALID: u64 = 1 << 59;
/// `PTE_PRESENT_INVALID` (`PTE_NG`, only when not valid) from 6.10: a
/// PROT_NONE page or an invalidated huge page.
pub const PRESENT_INVALID: u64 = 1 << 11;
/// `PTE_UFFD_WP` from 6.10.
pub const UFFD_WP: u64 = 1 << 58;
/// `PTE_SWP_UFFD_WP` from 6.10.
pub const SWP_UFFD_WP: u64 = 1 << 3;

/// Which kernel's software bits an entry has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bits {
    /// Before 6.10: PROT_NONE in bit 58, an invalidated PMD in bit 59,
    /// swap type in bits 3-7 and offset from bit 8, no uffd-wp.
    Before610,
    /// From 6.10: both present-but-invalid kinds in bit 11, uffd-wp in
    /// bit 58 (bit 3 of a swap entry), swap type in bits 6-10 and offset
    /// from bit 12.
    Since610,
}

impl Bits {
    /// The bits of a kernel of `release` ("6.12.57+deb13-arm64").
    pub fn of_release(release: &str) -> Bits {
        let mut n = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let major = n.next().unwrap_or(0);
        let minor = n.next().unwrap_or(0);
        if (major, minor) >= (6, 10) {
            Bits::Since610
        } else {
            Bits::Before610
        }
    }
}

/// The output address of a descriptor at `level`: bits 47 down to the
/// level's size (`PTE_ADDR_LOW`), or with LPA2 (52-bit addresses with 4
/// or 16 KiB pages) bits 49 down, and bits 51-50 from the descriptor's
/// bits 9-8 (`__pte_to_phys`).
fn address(raw: u64, level: u8, page_shift: u32, lpa2: bool) -> u64 {
    let low = page_shift + (page_shift - 3) * level as u32;
    let below = !((1u64 << low) - 1);
    if lpa2 {
        (raw & ((1u64 << 50) - 1) & below) | (((raw >> 8) & 3) << 50)
    } else {
        raw & ((1u64 << 48) - 1) & below
    }
}

/// `__swp_type` and `__swp_offset` (5 bits of type, 50 of offset).
pub fn swap_entry(raw: u64, bits: Bits) -> (u64, u64) {
    let (t, o) = match bits {
        Bits::Before610 => (3, 8),
        Bits::Since610 => (6, 12),
    };
    ((raw >> t) & 0x1f, (raw >> o) & ((1 << 50) - 1))
}

/// What entry `raw` of a table at `level` holds (0 the last level). A
/// kernel table's entry counts only if valid; a user table's PROT_NONE
/// entries (and a huge page's present-but-invalid PMD) are pages, its
/// other non-empty entries swap entries.
pub fn decode(raw: u64, level: u8, kernel: bool, page_shift: u32, bits: Bits, lpa2: bool) -> Desc {
    if raw == 0 {
        return Desc::None;
    }
    let valid = raw & VALID != 0;
    let table = level > 0 && raw & TABLE != 0;
    if kernel && !valid {
        return Desc::None;
    }
    if valid && table {
        return Desc::Table(address(raw, 0, page_shift, lpa2));
    }
    let present = valid
        || match bits {
            Bits::Before610 => {
                raw & PROT_NONE != 0 || (level == 1 && raw & PMD_PRESENT_INVALID != 0)
            }
            Bits::Since610 => raw & PRESENT_INVALID != 0,
        };
    if present && !table {
        return Desc::Leaf(
            address(raw, level, page_shift, lpa2),
            Pte {
                young: raw & AF != 0,
                // pte_sw_dirty, or pte_hw_dirty: writable and not read-only.
                dirty: raw & SW_DIRTY != 0 || (raw & DBM != 0 && raw & RDONLY == 0),
                // arm64 has no soft-dirty bit.
                soft_dirty: false,
                uffd_wp: bits == Bits::Since610 && raw & UFFD_WP != 0,
                special: level == 0 && raw & SPECIAL != 0,
            },
        );
    }
    let (swap_type, offset) = swap_entry(raw, bits);
    Desc::Swap(
        swap_type,
        offset,
        Pte {
            uffd_wp: bits == Bits::Since610 && raw & SWP_UFFD_WP != 0,
            ..Pte::default()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Bits = Bits::Before610;

    #[test]
    fn entries_decode_as_the_kernel_encodes_them() {
        // A user page of frame 0x4_5678 (4 KiB): valid, page, user,
        // non-global, accessed, writable and hardware-dirty, no execute.
        let pte = 0x0068_0000_4567_8fc3u64 & !RDONLY | DBM;
        match decode(pte, 0, false, 12, B, false) {
            Desc::Leaf(pa, p) => {
                assert_eq!(pa, 0x4567_8000);
                assert!(p.young && p.dirty && !p.special);
            }
            d => panic!("{d:?}"),
        }
        // Clean: read-only with DBM, no software dirty bit.
        match decode(pte | RDONLY, 0, false, 12, B, false) {
            Desc::Leaf(_, p) => assert!(!p.dirty),
            d => panic!("{d:?}"),
        }
        // PROT_NONE (mprotect): not valid, still a page.
        let none = (pte & !VALID & !AF) | PROT_NONE;
        match decode(none, 0, false, 12, B, false) {
            Desc::Leaf(pa, p) => assert_eq!((pa, p.young), (0x4567_8000, false)),
            d => panic!("{d:?}"),
        }
        // ... but not in a kernel table.
        assert_eq!(decode(none, 0, true, 12, B, false), Desc::None);
        // A swap entry of type 1, offset 0x777 (__swp_entry).
        let swp = (1u64 << 3) | (0x777 << 8);
        assert_eq!(
            decode(swp, 0, false, 12, B, false),
            Desc::Swap(1, 0x777, Pte::default())
        );
        // At PMD level: a table, and a 2 MiB block (4 KiB granule) whose
        // address drops the bits below 2 MiB.
        assert_eq!(
            decode(0x4020_1003, 1, false, 12, B, false),
            Desc::Table(0x4020_1000)
        );
        assert!(matches!(
            decode(0x4020_0f01, 1, false, 12, B, false),
            Desc::Leaf(0x4020_0000, _)
        ));
        // A 32 MiB block of the 16 KiB granule.
        match decode(0x8300_0f01, 1, false, 14, B, false) {
            Desc::Leaf(pa, _) => assert_eq!(pa, 0x8200_0000),
            d => panic!("{d:?}"),
        }
        // A huge page split in progress: present, not valid.
        assert!(matches!(
            decode(0x4020_0f00 | PMD_PRESENT_INVALID, 1, false, 12, B, false),
            Desc::Leaf(0x4020_0000, _)
        ));
        assert_eq!(decode(0, 2, false, 12, B, false), Desc::None);
    }

    #[test]
    fn entries_of_6_10_and_later_decode_by_their_bits() {
        let n = Bits::Since610;
        assert_eq!(Bits::of_release("6.12.57+deb13-arm64-16k"), n);
        assert_eq!(Bits::of_release("6.10.0"), n);
        assert_eq!(Bits::of_release("6.9.12"), B);
        assert_eq!(Bits::of_release("6.1.0-40-cloud-arm64"), B);
        // A user page (16 KiB) with uffd-wp.
        let pte = 0x0068_0000_4567_cfc3u64 | UFFD_WP;
        match decode(pte, 0, false, 14, n, false) {
            Desc::Leaf(pa, p) => assert_eq!((pa, p.uffd_wp), (0x4567_c000, true)),
            d => panic!("{d:?}"),
        }
        // PROT_NONE: not valid, PTE_NG set.
        let none = (pte & !VALID) | PRESENT_INVALID;
        assert!(matches!(
            decode(none, 0, false, 14, n, false),
            Desc::Leaf(0x4567_c000, _)
        ));
        // A swap entry of type 2, offset 0x99, uffd-wp.
        let swp = (2u64 << 6) | (0x99 << 12) | SWP_UFFD_WP;
        match decode(swp, 0, false, 14, n, false) {
            Desc::Swap(2, 0x99, p) => assert!(p.uffd_wp),
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn lpa2_entries_carry_the_top_address_bits_in_bits_9_and_8() {
        // A 16 KiB page at physical 0x000d_0000_4567_c000: bits 51-50
        // (0b11) in bits 9-8, bits 49-14 in place.
        let pa: u64 = 0x000d_0000_4567_c000;
        let raw = (pa & ((1 << 50) - 1)) | (3 << 8) | 0x403;
        match decode(raw, 0, false, 14, Bits::Since610, true) {
            Desc::Leaf(got, _) => assert_eq!(got, pa),
            d => panic!("{d:?}"),
        }
        // The same bits without LPA2 are shareability, not address.
        match decode(raw, 0, false, 14, Bits::Since610, false) {
            Desc::Leaf(got, _) => assert_eq!(got, pa & ((1 << 48) - 1)),
            d => panic!("{d:?}"),
        }
    }
}
