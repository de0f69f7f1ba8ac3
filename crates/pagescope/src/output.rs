//! What the commands write: reports rendered to standard output in the
//! chosen format, notes on standard error, and how an output file is
//! named in messages. (Output files themselves are created by
//! `pagescope_linux::output`: mode 0600, `-` for standard output.)

use crate::cli::OutputFormat;
use anyhow::Result;
use pagescope_render::report::printable;
use pagescope_render::{renderer, Format, Report};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

/// Prints the notes of `report`, then renders it to standard output (a
/// table as wide as the terminal, if it is one).
pub fn emit(report: &Report, format: OutputFormat) -> Result<()> {
    for n in &report.notes {
        note(n);
    }
    let width = terminal_size::terminal_size().map(|(w, _)| w.0 as usize);
    let mut out = stdout();
    renderer(render_format(format), width).render(report, &mut out)?;
    out.flush()?;
    Ok(())
}

/// A line on standard error that qualifies the result (its control
/// characters as `?`: a note may name a process or a path).
pub fn note(line: &str) {
    eprintln!("note: {}", printable(line));
}

/// Buffered standard output, for a report or a stream of rows (not
/// locked: a stream is written from the collector's threads).
pub fn stdout() -> BufWriter<std::io::Stdout> {
    BufWriter::new(std::io::stdout())
}

/// The renderers' name of an output format.
pub fn render_format(format: OutputFormat) -> Format {
    match format {
        OutputFormat::Table => Format::Table,
        OutputFormat::Csv => Format::Csv,
        OutputFormat::Json => Format::Json,
        OutputFormat::Svg => Format::Svg,
    }
}

/// Whether `path` (an `--output`) is standard output (`-`).
pub fn is_stdout(path: &Path) -> bool {
    pagescope_linux::output::is_stdout(path)
}

/// Whether writing a binary file to `path` would put it on a terminal:
/// `-` while standard output is one (`stdout_is_terminal`).
pub fn binary_to_terminal(path: &Path, stdout_is_terminal: bool) -> bool {
    is_stdout(path) && stdout_is_terminal
}

/// Refuses `-o -` for a binary file (`what`) when standard output is a
/// terminal, as gzip and zstd do: its bytes would garble the terminal and
/// be of no use. A pipe or a file is fine. A usage error (exit 2).
pub fn refuse_binary_to_terminal(path: &Path, what: &str) -> Result<()> {
    if binary_to_terminal(path, std::io::stdout().is_terminal()) {
        return Err(anyhow::anyhow!(
            "-o -: standard output is a terminal, and {what} is binary (pipe it to another \
             command, or redirect it to a file)"
        )
        .context(crate::BadInput));
    }
    Ok(())
}

/// How messages name an output: `-` is standard output.
pub fn output_name(path: &Path) -> PathBuf {
    if is_stdout(path) {
        PathBuf::from("standard output")
    } else {
        path.to_path_buf()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_standard_output_on_a_terminal_is_refused() {
        assert!(binary_to_terminal(Path::new("-"), true));
        assert!(!binary_to_terminal(Path::new("-"), false));
        assert!(!binary_to_terminal(Path::new("s.snap"), true));
        assert!(!binary_to_terminal(Path::new("/dev/tty"), true));
    }
}
