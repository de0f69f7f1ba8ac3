//! Where a report's snapshot comes from: a file, standard input, or the
//! live system read there and then.

use crate::cli::{ReportArgs, View};
use crate::input::{check_pids_exist, read_snapshot_file};
use crate::progress::Bar;
use anyhow::{Context, Result};
use pagescope_core::analysis::PidFilter;
use pagescope_core::model::SnapshotSink;
use pagescope_linux::snapshot::{collect, Config, Detail};

/// Feeds the snapshot (file, standard input or live, with `detail`)
/// through `sink`; returns a note if a file was cut short.
pub fn feed(
    args: &ReportArgs,
    detail: Detail,
    sink: &mut (impl SnapshotSink + Send),
) -> Result<Option<String>> {
    let pids = &args.select.pids;
    match &args.input {
        Some(path) => read_snapshot_file(path, pids, sink),
        None => {
            let mut filtered = PidFilter::new(pids, sink);
            check_pids_exist(pids)?;
            let config = Config {
                pids: pids.clone(),
                detail,
                physmap: args.view == View::Physmap,
                ..Config::default()
            };
            let bar = Bar::new(false);
            let r = collect(&config, &mut filtered, &mut |p| bar.update(p));
            bar.finish();
            r.context("reading the live system")?;
            Ok(None)
        }
    }
}
