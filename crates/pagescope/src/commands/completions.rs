//! `pagescope completions` and `pagescope man`: the completion script of
//! a shell, and a man page per command, generated from the clap
//! definitions the parser uses (so they never disagree with it).

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::output::stdout;
use anyhow::{Context, Result};
use clap::CommandFactory;
use std::io::Write;

/// Runs `completions`: the script on standard output.
pub fn completions(args: CompletionsArgs) -> Result<()> {
    let mut out = stdout();
    clap_complete::generate(args.shell, &mut Cli::command(), "pagescope", &mut out);
    out.flush()?;
    Ok(())
}

/// Runs `man`: `pagescope.1` and `pagescope-COMMAND.1` for each
/// subcommand, in the directory asked for.
pub fn man(args: ManArgs) -> Result<()> {
    let dir = &args.output;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("writing the man pages into {}", dir.display()))?;
    Ok(())
}
