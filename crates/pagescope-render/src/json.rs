//! JSON, the stable machine interface: one object with `view`,
//! `page_size`, `notes`, each field under its key, and each table as an
//! array of row objects under its key. Keys are snake_case; counts are in
//! pages, and the totals and each process's RSS, PSS, USS and swap are
//! also given in bytes (`rss_bytes` beside `rss_pages`); a figure that
//! could not be collected is `null`.

use crate::report::{bytes_key, bytes_value};
use crate::{Renderer, Report, Value};
use serde_json::{json, Map, Value as Json};
use std::io;

/// Renders JSON.
#[derive(Debug)]
pub struct JsonRenderer;

pub(crate) fn to_json(v: &Value) -> Json {
    match v {
        Value::Int(i) => json!(i),
        Value::Signed(i) => json!(i),
        Value::Hex(i) => json!(i),
        Value::Float(f, _) => json!((f * 1e4).round() / 1e4),
        Value::Text(s) => json!(s),
        Value::Bool(b) => json!(b),
        Value::Missing => Json::Null,
        Value::Pages(n, 0) if *n < 0.0 => json!(*n as i64),
        Value::Pages(n, 0) => json!(*n as u64),
        Value::Pages(n, _) => json!((n * 1e4).round() / 1e4),
    }
}

/// The report as a JSON value.
pub fn to_value(report: &Report) -> Json {
    let mut doc = Map::new();
    doc.insert("view".into(), json!(report.view));
    doc.insert("page_size".into(), json!(report.page_size));
    doc.insert("notes".into(), json!(report.notes));
    for (key, _, value) in &report.fields {
        doc.insert(key.to_string(), to_json(value));
        if let (Value::Pages(..), Some(twin)) = (value, bytes_key(key)) {
            doc.insert(twin, to_json(&bytes_value(value, report.page_size)));
        }
    }
    for table in &report.tables {
        let rows: Vec<Json> = table
            .rows
            .iter()
            .map(|row| {
                let mut m = Map::new();
                for (c, v) in table.columns.iter().zip(row) {
                    m.insert(c.key.to_string(), to_json(v));
                    if let Some(twin) = bytes_key(c.key).filter(|_| c.bytes_twin) {
                        m.insert(twin, to_json(&bytes_value(v, report.page_size)));
                    }
                }
                Json::Object(m)
            })
            .collect();
        doc.insert(table.key.to_string(), Json::Array(rows));
    }
    Json::Object(doc)
}

impl Renderer for JsonRenderer {
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, &to_value(report))?;
        writeln!(out)
    }
}
