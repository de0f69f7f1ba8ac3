//! What each layout of a reference chunk costs on the same references:
//! every chunk of a trace is encoded again as frame types 24 (plain), 28
//! (mapping ids and pages predicted) and 31 (28 with the write bits folded
//! into the page column), each compressed as the writer does (zstd level
//! 3), against the mappings read before it. Prints bytes per reference of
//! the chunks alone, per layout. The layout table of docs/format.md comes
//! from it:
//!
//! ```text
//! cargo run --release -p pagescope-core --example chunk_layouts -- t.trace [UNIT_NS [LEVELS]]
//! ```
//!
//! `UNIT_NS`: the trace's time resolution (`trace --time-resolution`, 1 us
//! by default), which the file does not name outside its chunks.
//! `LEVELS`: zstd levels, comma-separated (`3,9,19`), at which type 31 is
//! also compressed, with the CPU time each took.
//!
//! It also prints what type 31's page column alone costs, against the
//! same column holding, for a page referenced before, its move-to-front
//! rank instead (its LRU stack distance among the (process, page) pairs
//! the trace referenced, which a reader can keep as the writer does),
//! and type 31's difference only for a first reference: a layout no
//! version writes, measured to see what it would save.

use pagescope_core::analysis::mrc::StackDistance;
use pagescope_core::format::{
    encode_refs, encode_refs_folded, encode_refs_predicted, read_trace, MappingTable, TraceVisitor,
};
use pagescope_core::trace::{Mapping, Ref, TraceHeader};

#[derive(Default)]
struct Sizes {
    unit: u32,
    page_size: u64,
    table: MappingTable,
    refs: u64,
    /// Compressed bytes of types 24, 28 and 31.
    bytes: [u64; 3],
    /// Type 31 at other levels: level, bytes, seconds compressing.
    levels: Vec<(i32, u64, f64)>,
    buf: Vec<u8>,
    /// Compressed bytes of type 31's page column, and of the same column
    /// holding move-to-front ranks.
    page_column: [u64; 2],
    /// (pid, page) numbered, and their stack.
    ids: std::collections::HashMap<(u32, u64), u32>,
    stack: StackDistance,
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn packed(b: &[u8]) -> pagescope_core::Result<u64> {
    let p = zstd::bulk::compress(b, 3).map_err(|e| pagescope_core::Error::Io {
        path: "zstd".into(),
        error: e,
    })?;
    Ok(p.len().min(b.len()) as u64)
}

impl Sizes {
    fn add(&mut self, i: usize) -> pagescope_core::Result<()> {
        let packed = zstd::bulk::compress(&self.buf, 3).map_err(|e| pagescope_core::Error::Io {
            path: "zstd".into(),
            error: e,
        })?;
        self.bytes[i] += packed.len().min(self.buf.len()) as u64;
        Ok(())
    }
}

impl TraceVisitor for Sizes {
    fn header(&mut self, h: &TraceHeader) -> pagescope_core::Result<()> {
        self.page_size = h.page_size;
        Ok(())
    }
    fn mapping(&mut self, m: &Mapping) -> pagescope_core::Result<()> {
        self.table.insert(m);
        Ok(())
    }
    fn refs(&mut self, refs: &[Ref]) -> pagescope_core::Result<()> {
        let unit = self.unit;
        self.refs += refs.len() as u64;
        let mut buf = std::mem::take(&mut self.buf);
        encode_refs(refs, self.page_size, unit, &mut buf);
        self.buf = buf;
        self.add(0)?;
        let mut buf = std::mem::take(&mut self.buf);
        encode_refs_predicted(refs, self.page_size, unit, &self.table, &mut buf);
        self.buf = buf;
        self.add(1)?;
        let mut buf = std::mem::take(&mut self.buf);
        encode_refs_folded(refs, self.page_size, unit, &self.table, &mut buf);
        self.buf = buf;
        for (level, bytes, secs) in &mut self.levels {
            let t = std::time::Instant::now();
            let packed =
                zstd::bulk::compress(&self.buf, *level).map_err(|e| pagescope_core::Error::Io {
                    path: "zstd".into(),
                    error: e,
                })?;
            *secs += t.elapsed().as_secs_f64();
            *bytes += packed.len().min(self.buf.len()) as u64;
        }
        self.add(2)?;
        self.page_columns(refs)
    }
}

impl Sizes {
    /// Type 31's page column (each page against its thread's last in the
    /// chunk, doubled, plus 1 for a write), and the same with ranks:
    /// `4 x rank + 2 + write` for a page referenced before, `2 x (type 31's
    /// value)` else, so both kinds stay apart.
    fn page_columns(&mut self, refs: &[Ref]) -> pagescope_core::Result<()> {
        let shift = self.page_size.max(1).trailing_zeros();
        let (mut plain, mut ranked) = (Vec::new(), Vec::new());
        let mut last: std::collections::HashMap<u32, u64> = Default::default();
        let mut previous = 0u64;
        for r in refs {
            let page = r.addr >> shift;
            let base = last.get(&r.tid).copied().unwrap_or(previous);
            let v = zigzag(page.wrapping_sub(base) as i64) * 2 + r.write as u64;
            varint(&mut plain, v);
            last.insert(r.tid, page);
            previous = page;
            let next = self.ids.len() as u32;
            let id = *self.ids.entry((r.pid, page)).or_insert(next);
            match self.stack.push(id) {
                0 => varint(&mut ranked, 2 * v),
                rank => varint(&mut ranked, 4 * rank + 2 + r.write as u64),
            }
        }
        self.page_column[0] += packed(&plain)?;
        self.page_column[1] += packed(&ranked)?;
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: chunk_layouts TRACE")?;
    let unit = match std::env::args().nth(2) {
        Some(u) => u.parse()?,
        None => 1000,
    };
    let levels = match std::env::args().nth(3) {
        Some(l) => l
            .split(',')
            .map(|x| Ok((x.parse()?, 0, 0.0)))
            .collect::<Result<_, std::num::ParseIntError>>()?,
        None => Vec::new(),
    };
    let mut sizes = Sizes {
        unit,
        levels,
        ..Sizes::default()
    };
    let file = std::io::BufReader::new(std::fs::File::open(&path)?);
    read_trace(file, std::path::Path::new(&path), &mut sizes)?;
    if sizes.refs == 0 {
        return Err("no references".into());
    }
    let per = |b: u64| b as f64 / sizes.refs as f64;
    println!(
        "{} references; bytes per reference of the chunks: type 24 {:.3}, type 28 {:.3}, type 31 {:.3}",
        sizes.refs,
        per(sizes.bytes[0]),
        per(sizes.bytes[1]),
        per(sizes.bytes[2])
    );
    println!(
        "type 31's page column: {:.3} bytes per reference; with move-to-front ranks: {:.3}",
        per(sizes.page_column[0]),
        per(sizes.page_column[1])
    );
    for (level, bytes, secs) in &sizes.levels {
        println!(
            "type 31 at zstd level {level}: {:.3} bytes per reference, {:.0} ns per reference compressing",
            per(*bytes),
            secs * 1e9 / sizes.refs as f64
        );
    }
    Ok(())
}
