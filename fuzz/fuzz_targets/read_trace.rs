//! Fuzzes the trace reader with the analyses and views of `analyze` on a
//! trace (`refs`, `mrc`), and the reference-chunk decoder: any input must
//! give the views, a "cut short", or an error, never a panic, an
//! allocation beyond the format's limits, or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagescope_core::analysis::mrc::Mrc;
use pagescope_core::analysis::refs::RefStats;
use pagescope_core::format::{
    decode_refs, decode_refs_folded, decode_refs_predicted, read_trace, MappingTable,
};
use pagescope_render::{renderer, views, Format, Report};
use std::path::Path;

fn render(report: &Report) {
    for format in [Format::Json, Format::Table] {
        let _ = renderer(format, Some(100)).render(report, &mut std::io::sink());
    }
}

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz");
    let mut s = RefStats::new(None, None);
    if read_trace(data, path, &mut s).is_ok() {
        render(&views::refs(&s));
    }
    let mut m = Mrc::new();
    if read_trace(data, path, &mut m).is_ok() {
        render(&views::mrc(&m));
    }
    let _ = decode_refs(data, false);
    let _ = decode_refs(data, true);
    let _ = decode_refs_predicted(data, &MappingTable::default());
    let _ = decode_refs_folded(data, &MappingTable::default());
});
