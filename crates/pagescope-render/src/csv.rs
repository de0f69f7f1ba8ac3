//! CSV for spreadsheets: the first table with a header row of its keys;
//! a report with no table gives `key,value` rows of its fields.

use crate::{Renderer, Report, Value};
use std::io;

/// Renders CSV.
#[derive(Debug)]
pub struct CsvRenderer;

impl Renderer for CsvRenderer {
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
        let mut w = csv::Writer::from_writer(out);
        let cell = |v: &Value| match v {
            Value::Missing => String::new(),
            Value::Float(f, _) => format!("{f:.4}"),
            Value::Hex(v) => v.to_string(),
            other => other.display(),
        };
        match report.tables.first() {
            Some(table) => {
                w.write_record(table.columns.iter().map(|c| c.key))?;
                for row in &table.rows {
                    w.write_record(row.iter().map(cell))?;
                }
            }
            None => {
                w.write_record(["key", "value"])?;
                w.write_record(["page_size".to_string(), report.page_size.to_string()])?;
                for (key, _, value) in &report.fields {
                    w.write_record([key.to_string(), cell(value)])?;
                }
            }
        }
        w.flush()
    }
}
