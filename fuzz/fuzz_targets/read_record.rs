//! Fuzzes the recording reader with every view of `analyze` on a
//! recording: any input must give the views, a "cut short", or an error,
//! never a panic, an allocation beyond the format's limits, or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagescope_core::analysis::temporal::{Recording, Select};
use pagescope_core::format::read_record;
use pagescope_render::{record_views, renderer, Format, Report};
use std::path::Path;

fn render(report: pagescope_core::Result<Report>) {
    if let Ok(report) = report {
        for format in [Format::Json, Format::Table] {
            let _ = renderer(format, Some(100)).render(&report, &mut std::io::sink());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Recording::default();
    if read_record(data, Path::new("fuzz"), &mut r).is_err() {
        return;
    }
    // Everything, then the first process and the first row's range.
    let pid = r.intervals.iter().flat_map(|i| &i.virt).map(|v| v.pid).next();
    let range = r
        .intervals
        .iter()
        .flat_map(|i| &i.virt)
        .map(|v| (v.start, v.end))
        .next();
    for sel in [
        Select::default(),
        Select { range: None, pid },
        Select { range, pid: None },
    ] {
        render(record_views::temporal(&r, sel));
        render(record_views::spatial(&r, sel));
        render(record_views::heatmap(&r, sel));
        render(record_views::wss(&r, 10, sel));
        render(record_views::processes(&r, sel));
    }
    render(record_views::hugepages(&r));
    render(record_views::numa(&r));
});
