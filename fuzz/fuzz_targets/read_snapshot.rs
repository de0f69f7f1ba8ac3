//! Fuzzes the snapshot reader with the analyses and views of `report`
//! as sinks: any input must give a report, a "cut short", or an error,
//! never a panic, an allocation beyond the format's limits, or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagescope_core::analysis::pages::{FlagFilter, PageDump};
use pagescope_core::analysis::physmap::Physmap;
use pagescope_core::analysis::total::Total;
use pagescope_core::analysis::usage::{Usage, UsageOptions};
use pagescope_core::format::{decode_pages, read_snapshot, Completeness};
use pagescope_render::{renderer, views, Format, Report};
use std::path::Path;

/// Renders a report as JSON and as a table, into nothing.
fn render(report: &Report) {
    for format in [Format::Json, Format::Table] {
        let _ = renderer(format, Some(100)).render(report, &mut std::io::sink());
    }
}

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz");
    let mut u = Usage::new(UsageOptions {
        maps_for: Vec::new(),
        all_maps: true,
    });
    if read_snapshot(data, path, &mut u).is_ok() {
        for (virtual_view, kernel_threads) in [(false, false), (true, true)] {
            render(&views::processes(
                &u,
                views::ProcessesOptions {
                    virtual_view,
                    kernel_threads,
                },
            ));
        }
        let pids: Vec<u32> = u.processes.iter().map(|p| p.pid).collect();
        render(&views::vmas(&u, &pids));
        render(&views::units(&u));
        render(&views::unit_totals(&u));
        render(&views::alerts(&u));
    }
    let mut t = Total::new();
    if let Ok(done) = read_snapshot(data, path, &mut t) {
        if done != Completeness::Complete {
            t.close();
        }
        render(&views::total(&t));
    }
    let mut p = Physmap::new(0);
    if read_snapshot(data, path, &mut p).is_ok() && p.frames > 0 {
        render(&views::physmap(&p));
    }
    let mut rows = 0u64;
    let mut dump = PageDump::new(FlagFilter::default(), |_| {
        rows += 1;
        Ok(())
    });
    let _ = read_snapshot(data, path, &mut dump);
    let _ = decode_pages(data);
});
