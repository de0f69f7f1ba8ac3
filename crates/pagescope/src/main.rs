//! The `pagescope` command: parses the command line, runs the command,
//! and turns errors into one line and an exit code.
//!
//! Exit codes: 0 success; 1 the job failed (a missing process, an
//! interface that could not be read); 2 bad usage or a bad input file
//! (empty, foreign, corrupt, or cut short before any data); 130 stopped by
//! Ctrl-C or SIGTERM before the job was done (`snapshot`, `record` and
//! `trace` of running processes, `trace` of a command it lets go).

//!
//! Modules depend one way: `main` -> `commands` (one module per
//! subcommand) -> `cli` (what clap parses) and the helpers `input`,
//! `output`, `progress` and `idle`, which depend on no command.

mod cli;
mod commands;
mod idle;
mod input;
mod output;
mod progress;
mod serve;
mod top;

use clap::Parser;
use std::process::ExitCode;

/// An error whose exit code is 2: the input, not the system, is at fault.
#[derive(Debug)]
pub struct BadInput;

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("bad input")
    }
}

impl std::error::Error for BadInput {}

/// Whether `e` comes of a reader that stopped reading (`pagescope report
/// pages | head`): the command then ends quietly, as `cat` would. The
/// io::Error may be anywhere in the chain: inside pagescope_core's `Io`,
/// or wrapped by a writer (the CSV writer's error holds it).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    fn broken(io: &std::io::Error) -> bool {
        io.kind() == std::io::ErrorKind::BrokenPipe
            || io.get_ref().is_some_and(|inner| within(inner))
    }
    fn within(e: &(dyn std::error::Error + 'static)) -> bool {
        let here = match e.downcast_ref::<pagescope_core::Error>() {
            Some(pagescope_core::Error::Io { error, .. }) => broken(error),
            _ => e.downcast_ref::<std::io::Error>().is_some_and(broken),
        };
        here || e.source().is_some_and(within)
    }
    e.chain().any(within)
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let bad_input = e.downcast_ref::<BadInput>().is_some();
            // The BadInput marker is the outermost context; print the rest.
            let msg = if bad_input {
                e.chain()
                    .skip(1)
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(": ")
            } else {
                format!("{e:#}")
            };
            eprintln!("error: {msg}");
            ExitCode::from(if bad_input { 2 } else { 1 })
        }
    }
}
