//! Row-at-a-time output for views too large to hold in memory (the page
//! dump): the same four formats, written as rows arrive.

use crate::csv::io_error;
use crate::report::{printable, Chart, Quantity, Report, Style};
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

/// One value of a streamed row, borrowed so that a row costs no
/// allocation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cell<'a> {
    /// A count.
    Int(u64),
    /// An address or frame: hex in tables, an integer elsewhere.
    Hex(u64),
    /// Text.
    Text(&'a str),
    /// Not known.
    Missing,
}

impl Cell<'_> {
    fn is_numeric(&self) -> bool {
        matches!(self, Cell::Int(_) | Cell::Hex(_))
    }

    /// Writes the cell as tables show it (`hex` for addresses, control
    /// characters as `?`) or as CSV and JSON want it.
    fn write(&self, out: &mut String, table: bool) {
        use std::fmt::Write as _;
        match self {
            Cell::Int(v) => {
                let _ = write!(out, "{v}");
            }
            Cell::Hex(v) if table => {
                let _ = write!(out, "{v:#x}");
            }
            Cell::Hex(v) => {
                let _ = write!(out, "{v}");
            }
            Cell::Text(s) if table => out.push_str(&printable(s)),
            Cell::Text(s) => out.push_str(s),
            Cell::Missing if table => out.push('-'),
            Cell::Missing => {}
        }
    }
}

/// A table being written row by row.
pub trait RowStream {
    /// Writes one row, one value per column.
    fn row(&mut self, values: &[Cell<'_>]) -> io::Result<()>;
    /// Ends the output; `page_size` and `notes` are known only at the end
    /// of a stream.
    fn finish(self: Box<Self>, page_size: u64, notes: &[String]) -> io::Result<()>;
}

struct TableStream<'a> {
    out: &'a mut (dyn Write + Send),
    columns: &'a [StreamColumn],
    line: String,
    cell: String,
}

impl RowStream for TableStream<'_> {
    fn row(&mut self, values: &[Cell<'_>]) -> io::Result<()> {
        self.line.clear();
        for (i, (c, v)) in self.columns.iter().zip(values).enumerate() {
            if i > 0 {
                self.line.push_str("  ");
            }
            self.cell.clear();
            v.write(&mut self.cell, true);
            let len = if self.cell.is_ascii() {
                self.cell.len()
            } else {
                self.cell.chars().count()
            };
            let pad = c.width.saturating_sub(len);
            let last = i + 1 == self.columns.len();
            if v.is_numeric() {
                self.line.extend(std::iter::repeat_n(' ', pad));
                self.line.push_str(&self.cell);
            } else {
                self.line.push_str(&self.cell);
                if !last {
                    self.line.extend(std::iter::repeat_n(' ', pad));
                }
            }
        }
        let end = self.line.trim_end().len();
        self.line.truncate(end);
        self.line.push('\n');
        self.out.write_all(self.line.as_bytes())
    }

    fn finish(self: Box<Self>, _: u64, _: &[String]) -> io::Result<()> {
        self.out.flush()
    }
}

struct CsvStream<'a> {
    w: csv::Writer<&'a mut (dyn Write + Send)>,
    cell: String,
}

impl RowStream for CsvStream<'_> {
    fn row(&mut self, values: &[Cell<'_>]) -> io::Result<()> {
        for v in values {
            self.cell.clear();
            v.write(&mut self.cell, false);
            self.w.write_field(&self.cell).map_err(io_error)?;
        }
        self.w.write_record(None::<&[u8]>).map_err(io_error)?;
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
    line: String,
}

impl RowStream for JsonStream<'_> {
    fn row(&mut self, values: &[Cell<'_>]) -> io::Result<()> {
        use std::fmt::Write as _;
        self.line.clear();
        self.line
            .push_str(if self.first { "\n    {" } else { ",\n    {" });
        self.first = false;
        for (i, (c, v)) in self.columns.iter().zip(values).enumerate() {
            if i > 0 {
                self.line.push(',');
            }
            let _ = write!(self.line, "\"{}\":", c.key);
            match v {
                Cell::Int(n) | Cell::Hex(n) => {
                    let _ = write!(self.line, "{n}");
                }
                Cell::Text(s) => {
                    let quoted = serde_json::to_string(s)?;
                    self.line.push_str(&quoted);
                }
                Cell::Missing => self.line.push_str("null"),
            }
        }
        self.line.push('}');
        self.out.write_all(self.line.as_bytes())
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
    fn row(&mut self, values: &[Cell<'_>]) -> io::Result<()> {
        let mut key = String::new();
        values[self.by].write(&mut key, true);
        *self.counts.entry(key).or_default() += 1;
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
                y_label: "memory".into(),
                series: vec!["pages".into()],
                bars: bars.into_iter().map(|(k, n)| (k, vec![n as f64])).collect(),
                style: Style::Bars,
                y_unit: Quantity::Pages(page_size.max(1)),
                x_label: "kpageflags".into(),
                ..Chart::default()
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
                cell: String::new(),
            };
            let titles: Vec<Cell<'_>> = columns.iter().map(|c| Cell::Text(c.title)).collect();
            s.row(&titles)?;
            Box::new(s)
        }
        Format::Csv => {
            let mut w = csv::Writer::from_writer(out);
            w.write_record(columns.iter().map(|c| c.key))
                .map_err(io_error)?;
            Box::new(CsvStream {
                w,
                cell: String::new(),
            })
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
                line: String::new(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_table_shows_control_characters_as_question_marks() {
        let columns = [
            StreamColumn {
                key: "comm",
                title: "COMM",
                width: 8,
            },
            StreamColumn {
                key: "n",
                title: "N",
                width: 3,
            },
        ];
        let mut out = Vec::new();
        let mut s = row_stream(Format::Table, "v", "rows", &columns, 0, &mut out).unwrap();
        s.row(&[Cell::Text("a\u{1b}[2J\n"), Cell::Int(5)]).unwrap();
        s.finish(4096, &[]).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "COMM      N\na?[2J?      5\n"
        );
    }
}
