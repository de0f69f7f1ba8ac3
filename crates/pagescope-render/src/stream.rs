//! Row-at-a-time output for views too large to hold in memory (the page
//! dump): the same four formats, written as rows arrive.

use crate::report::{Chart, Report, Value};
use crate::{Format, Renderer};
use std::collections::HashMap;
use std::io::{self, Write};

/// A column of a streamed table, with its fixed width in tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamColumn {
    /// snake_case key.
    pub key: &'static str,
    /// Heading.
    pub title: &'static str,
    /// Width in tables (values are padded, never cut).
    pub width: usize,
}

/// A table being written row by row.
pub trait RowStream {
    /// Writes one row, one value per column.
    fn row(&mut self, values: &[Value]) -> io::Result<()>;
    /// Ends the output; `page_size` and `notes` are known only at the end
    /// of a stream.
    fn finish(self: Box<Self>, page_size: u64, notes: &[String]) -> io::Result<()>;
}

struct TableStream<'a> {
    out: &'a mut (dyn Write + Send),
    columns: &'a [StreamColumn],
    line: String,
}

impl RowStream for TableStream<'_> {
    fn row(&mut self, values: &[Value]) -> io::Result<()> {
        self.line.clear();
        for (i, (c, v)) in self.columns.iter().zip(values).enumerate() {
            if i > 0 {
                self.line.push_str("  ");
            }
            let s = v.display();
            let last = i + 1 == self.columns.len();
            if v.is_numeric() {
                self.line.push_str(&format!("{s:>w$}", w = c.width));
            } else if last {
                self.line.push_str(&s);
            } else {
                self.line.push_str(&format!("{s:<w$}", w = c.width));
            }
        }
        writeln!(self.out, "{}", self.line.trim_end())
    }

    fn finish(self: Box<Self>, _: u64, _: &[String]) -> io::Result<()> {
        self.out.flush()
    }
}

struct CsvStream<'a> {
    w: csv::Writer<&'a mut (dyn Write + Send)>,
}

impl RowStream for CsvStream<'_> {
    fn row(&mut self, values: &[Value]) -> io::Result<()> {
        self.w.write_record(values.iter().map(|v| match v {
            Value::Missing => String::new(),
            Value::Hex(h) => h.to_string(),
            other => other.display(),
        }))?;
        Ok(())
    }

    fn finish(mut self: Box<Self>, _: u64, _: &[String]) -> io::Result<()> {
        self.w.flush()
    }
}

struct JsonStream<'a> {
    out: &'a mut (dyn Write + Send),
    columns: &'a [StreamColumn],
    first: bool,
}

impl RowStream for JsonStream<'_> {
    fn row(&mut self, values: &[Value]) -> io::Result<()> {
        let mut m = serde_json::Map::new();
        for (c, v) in self.columns.iter().zip(values) {
            m.insert(c.key.to_string(), crate::json::to_json(v));
        }
        self.out
            .write_all(if self.first { b"\n    " } else { b",\n    " })?;
        self.first = false;
        serde_json::to_writer(&mut *self.out, &m)?;
        Ok(())
    }

    fn finish(self: Box<Self>, page_size: u64, notes: &[String]) -> io::Result<()> {
        let notes = serde_json::to_string(notes)?;
        writeln!(
            self.out,
            "\n  ],\n  \"page_size\": {page_size},\n  \"notes\": {notes}\n}}"
        )?;
        self.out.flush()
    }
}

/// Counts rows by one column's value and draws the largest counts.
struct SvgStream<'a> {
    out: &'a mut (dyn Write + Send),
    by: usize,
    title: String,
    counts: HashMap<String, u64>,
}

impl RowStream for SvgStream<'_> {
    fn row(&mut self, values: &[Value]) -> io::Result<()> {
        *self.counts.entry(values[self.by].display()).or_default() += 1;
        Ok(())
    }

    fn finish(self: Box<Self>, page_size: u64, notes: &[String]) -> io::Result<()> {
        let mut bars: Vec<(String, u64)> = self.counts.into_iter().collect();
        bars.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let report = Report {
            view: "pages",
            page_size,
            notes: notes.to_vec(),
            chart: Some(Chart {
                title: self.title,
                y_label: "pages".into(),
                series: vec!["pages".into()],
                bars: bars.into_iter().map(|(k, n)| (k, vec![n as f64])).collect(),
            }),
            ..Report::default()
        };
        crate::svg::SvgRenderer.render(&report, &mut *self.out)?;
        self.out.flush()
    }
}

/// Starts a streamed table in `format`. JSON writes `{"view": VIEW,
/// KEY: [rows...], "page_size": N, "notes": [...]}`; SVG draws how many
/// rows have each value of column `chart_by`.
pub fn row_stream<'a>(
    format: Format,
    view: &'static str,
    key: &'static str,
    columns: &'a [StreamColumn],
    chart_by: usize,
    out: &'a mut (dyn Write + Send),
) -> io::Result<Box<dyn RowStream + Send + 'a>> {
    Ok(match format {
        Format::Table => {
            let mut s = TableStream {
                out,
                columns,
                line: String::new(),
            };
            let titles: Vec<Value> = columns
                .iter()
                .map(|c| Value::Text(c.title.to_string()))
                .collect();
            s.row(&titles)?;
            Box::new(s)
        }
        Format::Csv => {
            let mut w = csv::Writer::from_writer(out);
            w.write_record(columns.iter().map(|c| c.key))?;
            Box::new(CsvStream { w })
        }
        Format::Json => {
            write!(
                out,
                "{{\n  \"view\": {},\n  \"{key}\": [",
                serde_json::to_string(view)?
            )?;
            Box::new(JsonStream {
                out,
                columns,
                first: true,
            })
        }
        Format::Svg => Box::new(SvgStream {
            out,
            by: chart_by,
            title: format!("{view}: pages by {}", columns[chart_by].key),
            counts: HashMap::new(),
        }),
    })
}
