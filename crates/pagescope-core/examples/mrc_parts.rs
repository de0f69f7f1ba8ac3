//! Where the time of `analyze mrc` goes, part by part, on one trace: the
//! read (decompression and decoding), numbering pages (a SipHash map of
//! page keys, as before, against the block table of `Mrc`), the stack
//! distances, and FIFO and CLOCK simulated one size per pass (as before)
//! against many sizes per pass. docs/performance.md quotes it:
//!
//! ```text
//! cargo run --release -p pagescope-core --example mrc_parts -- t.trace
//! ```

use pagescope_core::analysis::mrc::{
    clock_curve, clock_misses, fifo_curve, fifo_misses, Mrc, StackDistance,
};
use pagescope_core::analysis::refs::TraceMaps;
use pagescope_core::format::{read_trace, TraceVisitor};
use pagescope_core::trace::{Mapping, Ref, TraceHeader};
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::time::Instant;

/// Reads and keeps the references, and nothing else.
#[derive(Default)]
struct Keep {
    maps: TraceMaps,
    refs: Vec<Ref>,
    count: u64,
    keep: bool,
}

impl TraceVisitor for Keep {
    fn header(&mut self, h: &TraceHeader) -> pagescope_core::Result<()> {
        self.maps.set_header(h);
        Ok(())
    }
    fn mapping(&mut self, m: &Mapping) -> pagescope_core::Result<()> {
        self.maps.add(m);
        Ok(())
    }
    fn refs(&mut self, refs: &[Ref]) -> pagescope_core::Result<()> {
        self.count += refs.len() as u64;
        if self.keep {
            self.refs.extend_from_slice(refs);
        }
        Ok(())
    }
}

fn read(path: &Path, v: &mut dyn TraceVisitor) {
    let f = BufReader::new(File::open(path).expect("open the trace"));
    read_trace(f, path, v).expect("read the trace");
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: mrc_parts TRACE");
    let path = Path::new(&path);
    let rate = |what: &str, n: u64, t: Instant| {
        let s = t.elapsed().as_secs_f64();
        println!("{what:<44} {s:>8.3} s {:>8.1} M refs/s", n as f64 / s / 1e6);
    };
    let t = Instant::now();
    let mut k = Keep::default();
    read(path, &mut k);
    let n = k.count;
    rate("read (decompress, decode)", n, t);
    k.keep = true;
    read(path, &mut k);
    let t = Instant::now();
    let mut ids: HashMap<_, u32> = HashMap::new();
    let mut stream = Vec::with_capacity(k.refs.len());
    for r in &k.refs {
        let key = k.maps.key(r);
        let next = ids.len() as u32;
        stream.push(*ids.entry(key).or_insert(next));
    }
    rate("page ids: SipHash map, mapping per ref", n, t);
    let distinct = ids.len();
    let t = Instant::now();
    let mut s = StackDistance::default();
    for &p in &stream {
        s.push(p);
    }
    rate("stack distances", n, t);
    let t = Instant::now();
    let mut m = Mrc::new();
    read(path, &mut m);
    rate("read + ids + stack distances (Mrc)", n, t);
    let sizes = m.sizes();
    println!("{n} references, {distinct} pages, {} sizes", sizes.len());
    let t = Instant::now();
    let f = fifo_curve(&stream, distinct, &sizes);
    rate("FIFO, 16 sizes a pass", n, t);
    let t = Instant::now();
    let c = clock_curve(&stream, distinct, &sizes);
    rate("CLOCK, 64 sizes a pass", n, t);
    let t = Instant::now();
    let _ = m.curve();
    rate("curves (FIFO and CLOCK on two threads)", n, t);
    // The old way, one size a pass, timed on a few sizes and scaled.
    let few: Vec<usize> = (0..sizes.len()).step_by(6).collect();
    let t = Instant::now();
    for &i in &few {
        assert_eq!(fifo_misses(&stream, distinct, sizes[i] as usize), f[i]);
    }
    let per = t.elapsed().as_secs_f64() / few.len() as f64;
    println!(
        "FIFO, a size a pass: {:.3} s a size, {:.2} s for all",
        per,
        per * sizes.len() as f64
    );
    let t = Instant::now();
    for &i in &few {
        assert_eq!(clock_misses(&stream, distinct, sizes[i] as usize), c[i]);
    }
    let per = t.elapsed().as_secs_f64() / few.len() as f64;
    println!(
        "CLOCK, a size a pass: {:.3} s a size, {:.2} s for all",
        per,
        per * sizes.len() as f64
    );
}
