//! Fuzzes the recording-format reader with the analyses as sinks: any
//! input must give a snapshot, a "cut short", or an error, never a panic
//! or an unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagescope_core::analysis::{processes::Processes, total::Total};
use pagescope_core::format::{decode_pages, read_snapshot};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let mut p = Processes::new();
    let _ = read_snapshot(data, Path::new("fuzz"), &mut p);
    let mut t = Total::new();
    if read_snapshot(data, Path::new("fuzz"), &mut t).is_ok() {
        t.close();
    }
    let _ = decode_pages(data);
});
