//! What each layout of a reference chunk costs on the same references:
//! every chunk of a trace is encoded again as frame types 24 (plain), 28
//! (mapping ids and pages predicted) and 31 (28 with the write bits folded
//! into the page column), each compressed as the writer does (zstd level
//! 3), against the mappings read before it. Prints bytes per reference of
//! the chunks alone, per layout. The layout table of docs/format.md comes
//! from it:
//!
//! ```text
//! cargo run --release -p pagescope-core --example chunk_layouts -- t.trace [UNIT_NS]
//! ```
//!
//! `UNIT_NS`: the trace's time resolution (`trace --time-resolution`, 1 us
//! by default), which the file does not name outside its chunks.

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
    buf: Vec<u8>,
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
        self.add(2)
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
    let mut sizes = Sizes {
        unit,
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
    Ok(())
}
