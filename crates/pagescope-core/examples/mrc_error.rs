//! The error of SHARDS curves (`analyze mrc --sample RATE`) against the
//! exact one, on a trace: the mean absolute error of the LRU miss ratio
//! over the sizes the report gives (all of them, and those at or above
//! the tracer's pool), the largest, and the time of each; and the mean
//! absolute error over libCacheSim's grid (`mrcProfiler --size=0.01,1,100`:
//! 100 sizes evenly spaced from 1% to 100% of the distinct pages), the
//! one its published SHARDS errors are measured on. The figures of
//! docs/performance.md come from it:
//!
//! ```text
//! cargo run --release -p pagescope-core --example mrc_error -- t.trace 0.01 0.001
//! ```

use pagescope_core::analysis::mrc::{Mrc, Sampling};
use pagescope_core::format::read_trace;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::time::Instant;

fn read(path: &Path, m: &mut Mrc) -> f64 {
    let t = Instant::now();
    let f = BufReader::new(File::open(path).expect("open the trace"));
    read_trace(f, path, m).expect("read the trace");
    t.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = Path::new(args.first().expect("usage: mrc_error TRACE RATE..."));
    let mut exact = Mrc::new();
    let secs = read(path, &mut exact);
    let sizes = exact.sizes();
    let pool = exact.maps.header.as_ref().map_or(0, |h| h.pool_pages);
    let e = exact.lru_curve(&sizes);
    let distinct = exact.distinct_pages();
    let grid: Vec<u64> = (1..=100u64)
        .map(|i| ((i * distinct) as f64 / 100.0).round().max(1.0) as u64)
        .collect();
    let eg = exact.lru_curve(&grid);
    println!(
        "exact: {} references, {} pages, {} sizes, {secs:.3} s ({:.1} M refs/s)",
        exact.references(),
        exact.distinct_pages(),
        sizes.len(),
        exact.references() as f64 / secs / 1e6
    );
    for rate in &args[1..] {
        let rate: f64 = rate.parse().expect("a rate");
        let mut m = Mrc::new().sampled(Sampling::new(rate).expect("a rate in (0, 1]"));
        let secs = read(path, &mut m);
        let s = m.lru_curve(&sizes);
        let sg = m.lru_curve(&grid);
        let grid_mae =
            eg.iter().zip(&sg).map(|(a, b)| (a - b).abs()).sum::<f64>() / grid.len() as f64;
        let err: Vec<(u64, f64)> = sizes
            .iter()
            .zip(e.iter().zip(&s))
            .map(|(&p, (a, b))| (p, (a - b).abs()))
            .collect();
        let mae = |f: &dyn Fn(u64) -> bool| {
            let v: Vec<f64> = err.iter().filter(|(p, _)| f(*p)).map(|(_, e)| *e).collect();
            v.iter().sum::<f64>() / v.len().max(1) as f64
        };
        println!(
            "rate {rate}: {} sampled references, {secs:.3} s ({:.1} M refs/s); mean absolute \
             error {:.5} over all sizes, {:.5} at or above the pool ({pool} pages); largest {:.5}; \
             {grid_mae:.5} over libCacheSim's grid",
            m.sampled_references(),
            m.references() as f64 / secs / 1e6,
            mae(&|_| true),
            mae(&|p| p >= pool),
            err.iter().map(|(_, e)| *e).fold(0.0, f64::max),
        );
    }
}
