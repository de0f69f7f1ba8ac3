//! The format's limits: how large a frame may be, how many items a chunk
//! or a list in a record may hold, and how much memory a record may
//! decode to.
//!
//! A reader checks each limit before it allocates for what the limit
//! bounds, and refuses a file that breaks one as corrupt: so the memory a
//! reader takes for one frame is bounded by these figures, whatever the
//! file claims. Writers never write past them (a chunk is split; a record
//! that would break one is refused with the reader's own words).
//! docs/format.md lists every limit with its reason.
//!
//! Lists in records (postcard sequences: VMAs, rows of an interval, ...)
//! are decoded through [`list`]-based functions named after what they
//! hold, given to serde with `deserialize_with`: each checks the count
//! the sequence claims against its limit, and charges the memory it will
//! take to the record's budget ([`RECORD_BYTES`]), before allocating.

use super::frame_type;
use serde::de::{DeserializeOwned, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use std::cell::RefCell;
use std::marker::PhantomData;

/// Pages in one page chunk.
pub const CHUNK_PAGES: usize = 1 << 16;
/// References in one reference chunk.
pub const CHUNK_REFS: usize = 1 << 16;
/// Frames in one physical-map chunk.
pub const CHUNK_FRAMES: usize = 1 << 16;

/// Largest decompressed payload of a page chunk: [`CHUNK_PAGES`] pages of
/// the longest varints every column can hold (see `PAGE_CHUNK_WORST`).
pub const PAGES_RAW: u32 = 4 << 20;
/// Largest decompressed payload of a reference chunk.
pub const REFS_RAW: u32 = 4 << 20;
/// Largest decompressed payload of a physical-map chunk.
pub const PHYSMAP_RAW: u32 = 128 << 10;
/// Largest decompressed payload of any other frame (a record), and of a
/// frame of a type this build does not know (skipped unread).
pub const RECORD_RAW: u32 = 64 << 20;

/// Memory the lists of one record may take once decoded, counted as
/// their items' in-memory size (strings are not counted: each costs no
/// more than its bytes in the frame).
pub const RECORD_BYTES: usize = 256 << 20;

/// VMAs of one process (4 times the kernel's default
/// `vm.max_map_count`, 65 530).
pub const VMAS: usize = 1 << 18;
/// `VmFlags` mnemonics of one VMA (the kernel knows about 40).
pub const VM_FLAGS: usize = 64;
/// Arguments of one command line (the kernel's argument area holds at
/// most 6 MiB, two bytes for the shortest non-empty argument).
pub const ARGS: usize = 1 << 21;
/// Processes or threads in one list (the kernel's `pid_max` is at most
/// 4 194 304): pids asked for, thread stack pointers.
pub const PIDS: usize = 1 << 22;
/// Notes (one line each, at most one per process) in one record.
pub const NOTES: usize = 1 << 22;
/// Lines of `/proc/meminfo`.
pub const MEMINFO: usize = 1 << 12;
/// Slab caches, RAM ranges, NUMA node ranges of one machine.
pub const RANGES: usize = 1 << 16;
/// Segments of one ELF file (`e_phnum` is 16 bits).
pub const ELF_SEGMENTS: usize = 1 << 16;
/// Allocated sections of one ELF file.
pub const ELF_SECTIONS: usize = 1 << 20;
/// Physical rows, and virtual rows, of one interval (with 4 KiB blocks,
/// 16 GiB referenced in one interval).
pub const ROWS: usize = 1 << 22;
/// Page runs of one process in one interval.
pub const RUNS: usize = 1 << 22;
/// Processes with page runs in one interval.
pub const RUN_PROCESSES: usize = 1 << 16;
/// Entries of an interval's 2 MiB density histogram (one per count of
/// pages in a region, 16 bits).
pub const HUGE: usize = 1 << 16;

/// The most bytes a page chunk of [`CHUNK_PAGES`] pages can take: the
/// fixed fields (pid 5, start time 10, page size 10, count 5), eight
/// length prefixes (4 bytes each, for lengths below 2^28), and per page
/// the longest varints of its columns (page number 10, flags 2, frame
/// 10, kpageflags 10, kpagecount 10, memcg 10, node 3) and one bit.
const PAGE_CHUNK_WORST: usize = 30 + 8 * 4 + CHUNK_PAGES * 55 + CHUNK_PAGES / 8;
const _: () = assert!(PAGE_CHUNK_WORST <= PAGES_RAW as usize);
/// The same for a reference chunk: time unit 5, count 5, page shift 1,
/// first time 10, six length prefixes, and per reference time 10, page
/// 10, thread, process and mapping changes 5 each, and one bit.
const REF_CHUNK_WORST: usize = 21 + 6 * 4 + CHUNK_REFS * 35 + CHUNK_REFS / 8;
const _: () = assert!(REF_CHUNK_WORST <= REFS_RAW as usize);
const _: () = assert!(10 + 4 + CHUNK_FRAMES <= PHYSMAP_RAW as usize);

/// The largest decompressed payload of a frame of `frame_type`, or `None`
/// for a type this build does not know (readers skip those without
/// decompressing them; their stored size is bounded by [`RECORD_RAW`]).
pub fn max_raw(frame_type: u16) -> Option<u32> {
    use frame_type::*;
    match frame_type {
        PAGES | HUGETLB_PAGES => Some(PAGES_RAW),
        REFS | REFS_IN_UNITS | REFS_PREDICTED | REFS_FOLDED => Some(REFS_RAW),
        PHYSMAP => Some(PHYSMAP_RAW),
        SYSTEM | PROCESS | ELF | TRACE_HEADER | MAPPING | MAPPING_WITH_DEVICE | MAPPINGS
        | RESIDENCIES | PROCESS_EVENT | RESIDENCY | RECORD_HEADER | INTERVAL | PROCESS_INFO
        | RECORD_SAMPLING | ORIGIN | END => Some(RECORD_RAW),
        _ => None,
    }
}

/// What is being decoded: the memory left in the record's budget, and
/// the first limit broken (postcard keeps no message of its own).
struct Decoding {
    left: usize,
    broken: Option<String>,
}

// The budget of the record that [`decode_record`] is decoding on this
// thread: serde's `deserialize_with` functions get only the deserializer,
// and postcard's has no room for it. Outside a record (`None`), lists
// keep their counts only.
thread_local! {
    static DECODING: RefCell<Option<Decoding>> = const { RefCell::new(None) };
}

/// Decodes one postcard record within the limits: the error says which
/// limit it broke, or what postcard found wrong.
pub(crate) fn decode_record<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    decode_within(bytes, RECORD_BYTES)
}

/// [`decode_record`] with a budget of `budget` bytes.
fn decode_within<T: DeserializeOwned>(bytes: &[u8], budget: usize) -> Result<T, String> {
    let fresh = Decoding {
        left: budget,
        broken: None,
    };
    let outer = DECODING.with(|d| d.replace(Some(fresh)));
    let decoded = postcard::from_bytes::<T>(bytes);
    let done = DECODING.with(|d| d.replace(outer));
    match (decoded, done.and_then(|d| d.broken)) {
        (Ok(v), _) => Ok(v),
        (Err(_), Some(why)) => Err(why),
        (Err(e), None) => Err(e.to_string()),
    }
}

/// Refuses `count` items of `what` beyond `max`.
fn check_count(what: &str, count: usize, max: usize) -> Result<(), String> {
    if count > max {
        return Err(format!(
            "{count} {what}, more than the {max} a record may hold"
        ));
    }
    Ok(())
}

/// Charges `count` items of `size` bytes to the budget of the record
/// being decoded, or refuses them if they would overdraw it.
fn spend(what: &str, count: usize, size: usize) -> Result<(), String> {
    DECODING.with(|d| {
        let mut d = d.borrow_mut();
        let Some(d) = d.as_mut() else {
            return Ok(()); // not a record of a file: counts only
        };
        let bytes = count.saturating_mul(size);
        d.left = d.left.checked_sub(bytes).ok_or_else(|| {
            format!(
                "{count} {what} would take more than the {} MiB a record may decode to",
                RECORD_BYTES >> 20
            )
        })?;
        Ok(())
    })
}

/// Notes the limit broken, for [`decode_record`], and makes the error.
fn broken<E: serde::de::Error>(why: String) -> E {
    DECODING.with(|d| {
        if let Some(d) = d.borrow_mut().as_mut() {
            d.broken.get_or_insert_with(|| why.clone());
        }
    });
    E::custom(why)
}

struct ListVisitor<T> {
    what: &'static str,
    max: usize,
    item: PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for ListVisitor<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a list of at most {} {}", self.max, self.what)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let size = std::mem::size_of::<T>();
        // postcard gives the count the list claims when the bytes left
        // could hold it: check it all before allocating anything.
        let claimed = seq.size_hint();
        if let Some(n) = claimed {
            check_count(self.what, n, self.max)
                .and_then(|()| spend(self.what, n, size))
                .map_err(broken)?;
        }
        let mut items = Vec::with_capacity(claimed.unwrap_or(0).min((64 << 10) / size.max(1)));
        while let Some(item) = seq.next_element()? {
            if claimed.is_none() {
                check_count(self.what, items.len() + 1, self.max)
                    .and_then(|()| spend(self.what, 1, size))
                    .map_err(broken)?;
            }
            items.push(item);
        }
        Ok(items)
    }
}

/// Decodes a list of at most `max` items of `what`, charged to the
/// record's budget.
pub(crate) fn list<'de, D, T>(d: D, what: &'static str, max: usize) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    d.deserialize_seq(ListVisitor {
        what,
        max,
        item: PhantomData,
    })
}

/// One `deserialize_with` function per kind of list, named after it.
macro_rules! lists {
    ($($name:ident: $what:literal, $max:expr;)*) => {$(
        #[doc = concat!("Decodes a list of ", $what, " within its limit.")]
        pub(crate) fn $name<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
        where
            D: Deserializer<'de>,
            T: Deserialize<'de>,
        {
            list(d, $what, $max)
        }
    )*};
}

lists! {
    vmas: "VMAs", VMAS;
    vm_flags: "VmFlags", VM_FLAGS;
    args: "arguments", ARGS;
    pids: "pids", PIDS;
    notes: "notes", NOTES;
    meminfo: "meminfo lines", MEMINFO;
    ranges: "ranges", RANGES;
    slabs: "slab caches", RANGES;
    elf_segments: "ELF segments", ELF_SEGMENTS;
    elf_sections: "ELF sections", ELF_SECTIONS;
    phys_rows: "physical rows", ROWS;
    virt_rows: "virtual rows", ROWS;
    runs: "page runs", RUNS;
    run_processes: "processes with page runs", RUN_PROCESSES;
    huge: "density histogram entries", HUGE;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Two {
        #[serde(deserialize_with = "runs")]
        a: Vec<(u64, u64)>,
        #[serde(deserialize_with = "runs")]
        b: Vec<(u64, u64)>,
    }

    #[test]
    fn lists_round_trip_up_to_their_limit() {
        let two = Two {
            a: vec![(1, 2); RUNS],
            b: vec![],
        };
        let bytes = postcard::to_stdvec(&two).unwrap();
        assert_eq!(decode_record::<Two>(&bytes).unwrap(), two);
        let over = Two {
            a: vec![(1, 2); RUNS + 1],
            b: vec![],
        };
        let bytes = postcard::to_stdvec(&over).unwrap();
        let e = decode_record::<Two>(&bytes).unwrap_err();
        assert_eq!(
            e,
            "4194305 page runs, more than the 4194304 a record may hold"
        );
    }

    /// A count is refused from its prefix alone, before the items.
    #[test]
    fn a_claimed_count_is_refused_before_its_items() {
        let mut bytes = Vec::new();
        super::super::codec::put(&mut bytes, RUNS as u64 + 1);
        bytes.resize(bytes.len() + 2 * (RUNS + 1), 1);
        let e = decode_record::<Two>(&bytes).unwrap_err();
        assert!(e.contains("more than the 4194304"), "{e}");
        // Claimed beyond the bytes present: postcard stops at their end.
        assert!(decode_record::<Two>(&bytes[..64]).is_err());
    }

    /// Lists under their own limits still share the record's budget.
    #[test]
    fn the_budget_spans_the_record() {
        #[derive(Serialize, Deserialize, Debug)]
        struct Many {
            #[serde(deserialize_with = "run_processes")]
            each: Vec<Two>,
        }
        // 1 MiB: 16 processes of 4096 runs of 16 bytes, and one more.
        let many = |processes| Many {
            each: (0..processes)
                .map(|_| Two {
                    a: vec![(1, 1); 4096],
                    b: vec![],
                })
                .collect(),
        };
        let bytes = postcard::to_stdvec(&many(16)).unwrap();
        let takes = 16 * std::mem::size_of::<Two>() + 16 * 4096 * 16;
        assert!(decode_within::<Many>(&bytes, takes).is_ok());
        let e = decode_within::<Many>(&bytes, takes - 1).unwrap_err();
        assert!(e.contains("page runs would take more than"), "{e}");
        // Outside a record (another serde format), only counts are kept.
        assert!(postcard::from_bytes::<Many>(&bytes).is_ok());
    }

    #[test]
    fn unknown_frame_types_have_no_limit_of_their_own() {
        assert_eq!(max_raw(frame_type::PAGES), Some(PAGES_RAW));
        assert_eq!(max_raw(frame_type::INTERVAL), Some(RECORD_RAW));
        assert_eq!(max_raw(99), None);
    }
}
