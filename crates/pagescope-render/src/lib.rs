//! pagescope's renderers.
//!
//! Every view is first built as a [`Report`]: a format-neutral document of
//! named fields and tables ([`views`] builds them from the analyses of
//! `pagescope-core`). One [`Renderer`] per format then writes it to any
//! `io::Write`: [`table`] aligns columns for a terminal, [`csv`] writes
//! RFC 4180 rows for a spreadsheet, [`json`] writes the stable machine
//! interface, [`svg`] draws the view's chart. [`html`] puts several
//! views of one file on one self-contained page. Renderers never touch `/proc`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod csv;
pub mod html;
pub mod json;
pub mod palette;
pub mod record_views;
pub mod report;
pub mod stream;
pub mod svg;
pub mod table;
pub mod views;

pub use report::{Chart, Column, Report, Table, Units, Value};

use std::io;

/// Writes a report in one format.
pub trait Renderer {
    /// Renders `report` to `out`.
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()>;
}

/// The output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// Comma-separated values.
    Csv,
    /// JSON.
    Json,
    /// An SVG picture.
    Svg,
}

/// The renderer for a format. `width` is the terminal width for tables.
pub fn renderer(format: Format, width: Option<usize>) -> Box<dyn Renderer> {
    match format {
        Format::Table => Box::new(table::TableRenderer { width }),
        Format::Csv => Box::new(csv::CsvRenderer),
        Format::Json => Box::new(json::JsonRenderer),
        Format::Svg => Box::new(svg::SvgRenderer),
    }
}
