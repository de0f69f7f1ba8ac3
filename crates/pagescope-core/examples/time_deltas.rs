//! The time between consecutive references of a trace: percentiles, and
//! the order-0 entropy of the deltas at several resolutions (how many
//! bits per reference any compressor needs for the time column at best).
//! The figures of docs/format.md come from it:
//!
//! ```text
//! cargo run --release -p pagescope-core --example time_deltas -- t.trace
//! ```

use pagescope_core::format::{read_trace, TraceVisitor};
use pagescope_core::trace::{Ref, TraceHeader};
use std::collections::HashMap;

#[derive(Default)]
struct Times(Vec<u64>);

impl TraceVisitor for Times {
    fn header(&mut self, _: &TraceHeader) -> pagescope_core::Result<()> {
        Ok(())
    }
    fn refs(&mut self, refs: &[Ref]) -> pagescope_core::Result<()> {
        self.0.extend(refs.iter().map(|r| r.time_ns));
        Ok(())
    }
}

fn entropy_bits(values: impl Iterator<Item = u64>) -> f64 {
    let mut counts: HashMap<u64, u64> = HashMap::new();
    let mut n = 0u64;
    for v in values {
        *counts.entry(v).or_default() += 1;
        n += 1;
    }
    counts
        .values()
        .map(|&c| {
            let p = c as f64 / n as f64;
            -p * p.log2()
        })
        .sum()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: time_deltas TRACE")?;
    let mut times = Times::default();
    let file = std::io::BufReader::new(std::fs::File::open(&path)?);
    read_trace(file, std::path::Path::new(&path), &mut times)?;
    let mut deltas: Vec<u64> = times.0.windows(2).map(|w| w[1] - w[0]).collect();
    if deltas.is_empty() {
        return Err("fewer than two references".into());
    }
    let entropy: Vec<(u64, f64)> = [1u64, 1000]
        .iter()
        .map(|&unit| (unit, entropy_bits(deltas.iter().map(|d| d / unit))))
        .collect();
    deltas.sort_unstable();
    let at = |q: usize| deltas[(deltas.len() - 1) * q / 100];
    println!(
        "{} deltas: 10th percentile {} ns, median {} ns, 90th {} ns",
        deltas.len(),
        at(10),
        at(50),
        at(90)
    );
    for (unit, bits) in entropy {
        println!("in units of {unit} ns: {bits:.1} bits of entropy per delta");
    }
    Ok(())
}
