//! CSV for spreadsheets: the first table with a header row of its keys;
//! a report with no table gives `key,value` rows of its fields. Counts
//! are in pages; the main ones have a `_bytes` twin, as in JSON.

use crate::report::{bytes_key, bytes_value};
use crate::{Renderer, Report, Value};
use std::io;

/// Renders CSV.
#[derive(Debug)]
pub struct CsvRenderer;

/// The CSV writer's error as the io::Error it holds, if it holds one
/// (its kind, such as a closed pipe's, is then kept: the CSV error has
/// no source to find it by), else wrapped.
pub(crate) fn io_error(e: csv::Error) -> io::Error {
    if !e.is_io_error() {
        return io::Error::other(e);
    }
    match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        other => io::Error::other(format!("{other:?}")),
    }
}

impl Renderer for CsvRenderer {
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
        let mut w = csv::Writer::from_writer(out);
        let cell = |v: &Value| match v {
            Value::Missing => String::new(),
            Value::Float(f, _) => format!("{f:.4}"),
            Value::Hex(v) => v.to_string(),
            Value::Pages(f, d) if *d > 0 => format!("{f:.4}"),
            other => other.display(),
        };
        match report.tables.first() {
            Some(table) => {
                let twin = |c: &crate::Column| bytes_key(c.key).filter(|_| c.bytes_twin);
                let mut header = Vec::new();
                for c in &table.columns {
                    header.push(c.key.to_string());
                    header.extend(twin(c));
                }
                w.write_record(&header).map_err(io_error)?;
                for row in &table.rows {
                    let mut cells = Vec::new();
                    for (c, v) in table.columns.iter().zip(row) {
                        cells.push(cell(v));
                        if twin(c).is_some() {
                            cells.push(cell(&bytes_value(v, report.page_size)));
                        }
                    }
                    w.write_record(&cells).map_err(io_error)?;
                }
            }
            None => {
                w.write_record(["key", "value"]).map_err(io_error)?;
                w.write_record(["page_size".to_string(), report.page_size.to_string()])
                    .map_err(io_error)?;
                for (key, _, value) in &report.fields {
                    w.write_record([key.to_string(), cell(value)])
                        .map_err(io_error)?;
                    if let (Value::Pages(..), Some(twin)) = (value, bytes_key(key)) {
                        w.write_record([twin, cell(&bytes_value(value, report.page_size))])
                            .map_err(io_error)?;
                    }
                }
            }
        }
        w.flush()
    }
}
