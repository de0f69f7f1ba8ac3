//! The subcommands, one module each: each validates its arguments, runs
//! the collector or reader from the libraries, and hands the result to a
//! renderer ([`crate::output`]).

mod analyze;
mod completions;
mod diff;
mod export;
mod feed;
mod html;
mod pages;
mod record;
#[cfg(target_arch = "x86_64")]
mod release;
mod report;
mod serve;
mod snapshot;
mod top;
// `trace` (and its `--release`) inject system calls with x86_64's
// registers: the library builds it only there.
#[cfg(target_arch = "x86_64")]
mod trace;

use crate::cli::{Cli, Command};
use anyhow::Result;

/// Runs a parsed command line; returns the exit code.
pub fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Snapshot(a) => snapshot::run(a),
        Command::Report(a) => report::run(a).map(|()| 0),
        Command::Diff(a) => diff::run(a).map(|()| 0),
        Command::Record(a) => record::run(a),
        #[cfg(target_arch = "x86_64")]
        Command::Trace(a) => match a.release {
            Some(root) => release::run(root, a.progress.quiet).map(|()| 0),
            None => trace::run(a),
        },
        #[cfg(not(target_arch = "x86_64"))]
        Command::Trace(_) => Err(anyhow::anyhow!(
            "pagescope trace is not supported here: it needs an x86_64 machine"
        )),
        Command::Analyze(a) => analyze::run(a).map(|()| 0),
        Command::Serve(a) => serve::run(a),
        Command::Top(a) => top::run(a),
        Command::Completions(a) => completions::completions(a).map(|()| 0),
        Command::Man(a) => completions::man(a).map(|()| 0),
        Command::Export(a) => export::run(a),
    }
}
