//! Reference chunks: the columnar form in which traces store their
//! references (frame types 19, 24, 28 and 31), encoded and decoded.
//!
//! Each chunk holds up to [`CHUNK_REFS`] references column by column:
//! time deltas, page-number deltas (zigzag), thread and process changes,
//! mapping ids (against the one the address predicts, [`MappingTable`]),
//! and the write bits (a column of their own, or folded into the page
//! column). docs/format.md has the layouts and what each saves.

use super::codec::{put, unzigzag, zigzag, Column};
use super::frame_type;
use super::limits::CHUNK_REFS;
use super::maptable::MappingTable;
use crate::trace::Ref;
use serde::{Deserialize, Serialize};

/// The stored form of a chunk of references.
#[derive(Serialize, Deserialize, Default, Debug)]
pub(super) struct RefColumns {
    count: u32,
    page_shift: u8,
    first_time: u64,
    #[serde(with = "serde_bytes")]
    time_delta: Vec<u8>,
    #[serde(with = "serde_bytes")]
    page_delta: Vec<u8>,
    /// Per reference: tid delta, zigzag.
    #[serde(with = "serde_bytes")]
    tid_delta: Vec<u8>,
    /// Per reference: pid delta, zigzag.
    #[serde(with = "serde_bytes")]
    pid_delta: Vec<u8>,
    /// Per reference: mapping id delta, zigzag.
    #[serde(with = "serde_bytes")]
    pub(super) mapping_delta: Vec<u8>,
    /// One bit per reference, LSB first.
    #[serde(with = "serde_bytes")]
    write: Vec<u8>,
}

/// The stored form of a chunk of references with times in `time_unit`
/// nanoseconds (frame type 24); `columns.first_time` and the time deltas
/// count units.
#[derive(Serialize, Deserialize, Default, Debug)]
pub(super) struct RefChunk {
    pub(super) time_unit: u32,
    pub(super) columns: RefColumns,
}

/// Encodes references into the columnar form, with times rounded down to
/// a multiple of `time_unit` ns (at least 1): a chunk of frame type 24.
pub fn encode_refs(refs: &[Ref], page_size: u64, time_unit: u32, out: &mut Vec<u8>) {
    encode(refs, page_size, time_unit, None, Layout::Plain, out)
}

/// How a chunk's columns are laid out, by frame type.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Types 19 and 24: each page against the previous reference's, each
    /// mapping id against the previous one, writes in a bit column.
    Plain,
    /// Type 28: pages against the thread's last, mapping ids against the
    /// table's prediction.
    Predicted,
    /// Type 31: as type 28, each write bit folded into its page's value
    /// (the zigzag page difference times 2, plus 1 for a write), the bit
    /// column empty.
    Folded,
}

/// As [`encode_refs`], each mapping id stored as its difference from the
/// one `table` predicts (the mappings written before the chunk): a chunk
/// of frame type 28, read with [`decode_refs_predicted`].
pub fn encode_refs_predicted(
    refs: &[Ref],
    page_size: u64,
    time_unit: u32,
    table: &MappingTable,
    out: &mut Vec<u8>,
) {
    encode(
        refs,
        page_size,
        time_unit,
        Some(table),
        Layout::Predicted,
        out,
    )
}

/// As [`encode_refs_predicted`], each write bit folded into the page
/// column: a chunk of frame type 31 (what `pagescope trace` writes), read
/// with [`decode_refs_folded`]. A write after a read of the same page
/// (its write-protect fault) is then one value, `1`, which zstd stores
/// with the page numbers' own patterns rather than in a column of bits of
/// its own. Page numbers must fit in 62 bits (any page of at least 4
/// bytes does).
pub fn encode_refs_folded(
    refs: &[Ref],
    page_size: u64,
    time_unit: u32,
    table: &MappingTable,
    out: &mut Vec<u8>,
) {
    encode(refs, page_size, time_unit, Some(table), Layout::Folded, out)
}

/// In a chunk of type 28, each page number is stored against the last
/// page of the same thread in the chunk (threads that interleave each
/// keep their own run), else against the previous reference's; in older
/// chunks, always the previous reference's. The running thread's page is
/// kept apart from the others': the map is touched only when the thread
/// changes.
struct ThreadPages {
    per_thread: bool,
    /// The thread of the last reference and its page.
    current: Option<(u32, u64)>,
    others: rustc_hash::FxHashMap<u32, u64>,
}

impl ThreadPages {
    fn new(per_thread: bool) -> ThreadPages {
        ThreadPages {
            per_thread,
            current: None,
            others: Default::default(),
        }
    }

    /// The page a reference of `tid` is stored against; `previous` is
    /// the previous reference's.
    #[inline]
    fn base(&self, tid: u32, previous: u64) -> u64 {
        if !self.per_thread {
            return previous;
        }
        match self.current {
            Some((t, page)) if t == tid => page,
            _ => self.others.get(&tid).copied().unwrap_or(previous),
        }
    }

    #[inline]
    fn set(&mut self, tid: u32, page: u64) {
        if !self.per_thread {
            return;
        }
        match &mut self.current {
            Some((t, p)) if *t == tid => *p = page,
            current => {
                if let Some((t, p)) = current.replace((tid, page)) {
                    self.others.insert(t, p);
                }
            }
        }
    }
}

/// The mapping id a reference's is stored against: the table's
/// prediction, else the previous reference's.
#[inline]
fn predicted(table: Option<&MappingTable>, pid: u32, addr: u64, previous: u32) -> u32 {
    table.and_then(|t| t.predict(pid, addr)).unwrap_or(previous)
}

fn encode(
    refs: &[Ref],
    page_size: u64,
    time_unit: u32,
    table: Option<&MappingTable>,
    layout: Layout,
    out: &mut Vec<u8>,
) {
    let fold = layout == Layout::Folded;
    let unit = time_unit.max(1);
    let shift = page_size.max(1).trailing_zeros() as u8;
    let mut c = RefColumns {
        count: refs.len() as u32,
        page_shift: shift,
        first_time: refs.first().map_or(0, |r| r.time_ns / unit as u64),
        write: if fold {
            Vec::new()
        } else {
            vec![0; refs.len().div_ceil(8)]
        },
        ..RefColumns::default()
    };
    let (mut t, mut page, mut tid, mut pid, mut map) = (c.first_time, 0u64, 0u32, 0u32, 0u32);
    let mut threads = ThreadPages::new(layout != Layout::Plain);
    for (i, r) in refs.iter().enumerate() {
        let now = r.time_ns / unit as u64;
        put(&mut c.time_delta, now.wrapping_sub(t));
        t = now;
        let p = r.addr >> shift;
        let from = threads.base(r.tid, page);
        let z = zigzag(p.wrapping_sub(from) as i64);
        put(
            &mut c.page_delta,
            if fold {
                (z << 1) | u64::from(r.write)
            } else {
                z
            },
        );
        page = p;
        threads.set(r.tid, p);
        put(&mut c.tid_delta, zigzag(r.tid as i64 - tid as i64));
        tid = r.tid;
        put(&mut c.pid_delta, zigzag(r.pid as i64 - pid as i64));
        pid = r.pid;
        let base = predicted(table, r.pid, p << shift, map);
        put(&mut c.mapping_delta, zigzag(r.mapping as i64 - base as i64));
        map = r.mapping;
        if r.write && !fold {
            c.write[i / 8] |= 1 << (i % 8);
        }
    }
    out.clear();
    let chunk = RefChunk {
        time_unit: unit,
        columns: c,
    };
    *out = postcard::to_extend(&chunk, std::mem::take(out)).expect("a Vec takes any bytes");
}

/// `v` changed by `delta`, or an error where the sum leaves 64 bits (it
/// must then be out of the 32 bits [`to_u32`] takes anyway).
#[inline]
fn moved(v: i64, delta: i64, what: &str) -> std::result::Result<i64, String> {
    v.checked_add(delta)
        .ok_or_else(|| format!("reference chunk: {what} change {delta} out of range"))
}

#[inline]
fn to_u32(v: i64, what: &str) -> std::result::Result<u32, String> {
    u32::try_from(v).map_err(|_| format!("reference chunk: {what} {v} out of range"))
}

/// Decodes a chunk written by [`encode_refs`] (frame type 24), or with
/// `in_ns` one of frame type 19 (times in ns), checking every bound.
pub fn decode_refs(bytes: &[u8], in_ns: bool) -> std::result::Result<Vec<Ref>, String> {
    let mut out = Vec::new();
    decode_chunk(bytes, in_ns, None, Layout::Plain, &mut out)?;
    Ok(out)
}

/// Decodes a chunk written by [`encode_refs_predicted`] (frame type 28)
/// against the same mappings.
pub fn decode_refs_predicted(
    bytes: &[u8],
    table: &MappingTable,
) -> std::result::Result<Vec<Ref>, String> {
    let mut out = Vec::new();
    decode_chunk(bytes, false, Some(table), Layout::Predicted, &mut out)?;
    Ok(out)
}

/// Decodes a chunk written by [`encode_refs_folded`] (frame type 31)
/// against the same mappings.
pub fn decode_refs_folded(
    bytes: &[u8],
    table: &MappingTable,
) -> std::result::Result<Vec<Ref>, String> {
    let mut out = Vec::new();
    decode_refs_into(bytes, frame_type::REFS_FOLDED, table, &mut out)?;
    Ok(out)
}

/// Decodes a chunk of frame type `frame_type` (19, 24, 28 or 31) into
/// `out`, which it empties first: a reader that decodes chunk after chunk
/// into the same buffer allocates (and the kernel zeroes) its 2 MiB once,
/// not per chunk.
pub fn decode_refs_into(
    bytes: &[u8],
    frame_type: u16,
    table: &MappingTable,
    out: &mut Vec<Ref>,
) -> std::result::Result<(), String> {
    let (in_ns, table, layout) = match frame_type {
        frame_type::REFS => (true, None, Layout::Plain),
        frame_type::REFS_IN_UNITS => (false, None, Layout::Plain),
        frame_type::REFS_PREDICTED => (false, Some(table), Layout::Predicted),
        frame_type::REFS_FOLDED => (false, Some(table), Layout::Folded),
        t => return Err(format!("frame type {t} is not a reference chunk")),
    };
    decode_chunk(bytes, in_ns, table, layout, out)
}

fn decode_chunk(
    bytes: &[u8],
    in_ns: bool,
    table: Option<&MappingTable>,
    layout: Layout,
    out: &mut Vec<Ref>,
) -> std::result::Result<(), String> {
    let fold = layout == Layout::Folded;
    let bad = |e: postcard::Error| format!("bad reference chunk: {e}");
    let (unit, c) = if in_ns {
        (1, postcard::from_bytes::<RefColumns>(bytes).map_err(bad)?)
    } else {
        let chunk: RefChunk = postcard::from_bytes(bytes).map_err(bad)?;
        if chunk.time_unit == 0 {
            return Err("reference chunk: time unit 0".into());
        }
        (chunk.time_unit as u64, chunk.columns)
    };
    let n = c.count as usize;
    if n > CHUNK_REFS {
        return Err(format!(
            "reference chunk of {n} references, more than the {CHUNK_REFS} a chunk may hold"
        ));
    }
    // Every reference takes at least a byte of each column but `write`,
    // which is empty where the write bits are folded.
    let columns = [
        &c.time_delta,
        &c.page_delta,
        &c.tid_delta,
        &c.pid_delta,
        &c.mapping_delta,
    ];
    if c.page_shift >= 40
        || c.write.len() != if fold { 0 } else { n.div_ceil(8) }
        || columns.iter().any(|col| col.len() < n)
    {
        return Err("reference chunk header does not match its columns".into());
    }
    let mut time = Column::new("time", &c.time_delta);
    let mut pages = Column::new("page", &c.page_delta);
    let mut tids = Column::new("tid", &c.tid_delta);
    let mut pids = Column::new("pid", &c.pid_delta);
    let mut maps = Column::new("mapping", &c.mapping_delta);
    out.clear();
    out.reserve(n);
    let (mut t, mut page, mut tid, mut pid, mut map) = (c.first_time, 0u64, 0i64, 0i64, 0i64);
    let mut threads = ThreadPages::new(layout != Layout::Plain);
    for i in 0..n {
        t = t.wrapping_add(time.next()?);
        tid = moved(tid, unzigzag(tids.next()?), "tid")?;
        let thread = to_u32(tid, "tid")?;
        let value = pages.next()?;
        let (z, write) = match fold {
            true => (value >> 1, value & 1 != 0),
            false => (value, c.write[i / 8] & (1 << (i % 8)) != 0),
        };
        page = threads.base(thread, page).wrapping_add(unzigzag(z) as u64);
        threads.set(thread, page);
        pid = moved(pid, unzigzag(pids.next()?), "pid")?;
        let pid = to_u32(pid, "pid")?;
        let addr = page.checked_shl(c.page_shift as u32).unwrap_or(0);
        let base = predicted(table, pid, addr, to_u32(map, "mapping")?);
        map = moved(base as i64, unzigzag(maps.next()?), "mapping")?;
        out.push(Ref {
            time_ns: t.wrapping_mul(unit),
            pid,
            tid: thread,
            addr,
            write,
            mapping: to_u32(map, "mapping")?,
        });
    }
    for col in [&time, &pages, &tids, &pids, &maps] {
        col.done()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread, process or mapping change that would carry the running
    /// value past 64 bits is an error, not an overflow (found by the
    /// read_trace fuzz target).
    #[test]
    fn changes_past_64_bits_are_errors() {
        for column in 0..3 {
            let mut c = RefColumns {
                count: 2,
                page_shift: 12,
                ..RefColumns::default()
            };
            for _ in 0..2 {
                put(&mut c.time_delta, 1);
                put(&mut c.page_delta, 2);
            }
            let mut deltas = [vec![], vec![], vec![]];
            for (i, d) in deltas.iter_mut().enumerate() {
                put(d, zigzag(5));
                put(d, if i == column { zigzag(i64::MAX) } else { 0 });
            }
            let [tid, pid, mapping] = deltas;
            (c.tid_delta, c.pid_delta, c.mapping_delta) = (tid, pid, mapping);
            let bytes = postcard::to_allocvec(&RefChunk {
                time_unit: 1000,
                columns: c,
            })
            .unwrap();
            let table = MappingTable::default();
            let e = decode_refs_folded(&bytes, &table).unwrap_err();
            assert!(e.contains("out of range"), "column {column}: {e}");
        }
    }
}
