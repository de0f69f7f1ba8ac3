//! `pagescope completions` and `pagescope man`: what a shell and `man`
//! need, made from the same clap definitions as the parser.

use clap::Args;
use std::path::PathBuf;

/// `pagescope completions`.
#[derive(Debug, Args)]
#[command(after_help = "Install (bash):\n  \
    pagescope completions bash > /usr/share/bash-completion/completions/pagescope\n\
    zsh: pagescope completions zsh > /usr/local/share/zsh/site-functions/_pagescope\n\
    fish: pagescope completions fish > ~/.config/fish/completions/pagescope.fish")]
pub struct CompletionsArgs {
    /// The shell whose completion script to print.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `pagescope man`.
#[derive(Debug, Args)]
#[command(after_help = "Install:\n  \
    pagescope man -o /usr/local/share/man/man1 && mandb -q\n\
    Read one without installing: man -l pagescope-report.1")]
pub struct ManArgs {
    /// The directory to write the pages into (pagescope.1,
    /// pagescope-report.1, ...); made if missing.
    #[arg(short, long, value_name = "DIR", default_value = ".")]
    pub output: PathBuf,
}
