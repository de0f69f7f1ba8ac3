//! Aligned text for terminals: fields as `title: value` lines, tables with
//! right-aligned numbers. On a narrow terminal the least important
//! columns are dropped, then the widest text column is cut to fit.
//! Counts of pages are shown in the report's [`Units`](crate::Units).
//! Control characters in the text are shown as `?`
//! ([`printable`](crate::report::printable)).

use crate::report::printable;
use crate::{Column, Renderer, Report, Value};
use std::io;

/// Renders aligned text.
#[derive(Debug)]
pub struct TableRenderer {
    /// Terminal width to fit, if known.
    pub width: Option<usize>,
}

/// A view's own text: each line [`printable`], the line ends kept.
fn printable_lines(text: &str) -> String {
    text.split_inclusive('\n')
        .map(|l| match l.strip_suffix('\n') {
            Some(l) => format!("{}\n", printable(l)),
            None => printable(l).into_owned(),
        })
        .collect()
}

fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push('~');
    out
}

impl Renderer for TableRenderer {
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
        if let Some(text) = &report.text {
            return out.write_all(printable_lines(text).as_bytes());
        }
        if !report.fields.is_empty() {
            let w = report
                .fields
                .iter()
                .map(|(_, t, _)| t.len())
                .max()
                .unwrap_or(0);
            for (_, title, value) in &report.fields {
                writeln!(
                    out,
                    "{title:<w$}  {}",
                    printable(&value.display_in(report.units, report.page_size))
                )?;
            }
        }
        for (n, table) in report.tables.iter().enumerate() {
            if n > 0 || !report.fields.is_empty() {
                writeln!(out)?;
            }
            let all_cells: Vec<Vec<String>> = table
                .rows
                .iter()
                .map(|r| {
                    r.iter()
                        .map(|v| {
                            printable(&v.display_in(report.units, report.page_size)).into_owned()
                        })
                        .collect()
                })
                .collect();
            let mut all_widths: Vec<usize> = table.columns.iter().map(|c| c.title.len()).collect();
            for row in &all_cells {
                for (i, c) in row.iter().enumerate() {
                    all_widths[i] = all_widths[i].max(c.chars().count());
                }
            }
            // Drop columns, least kept first (rightmost first among
            // equals), until the rest fit; text is cut after that.
            let mut shown: Vec<usize> = (0..table.columns.len()).collect();
            if let Some(limit) = self.width {
                let span = |cols: &[usize]| {
                    cols.iter().map(|&i| all_widths[i].min(24)).sum::<usize>()
                        + 2 * cols.len().saturating_sub(1)
                };
                while span(&shown) > limit {
                    let victim = shown
                        .iter()
                        .enumerate()
                        .filter(|(_, &i)| table.columns[i].keep != Column::ALWAYS)
                        .min_by_key(|(pos, &i)| (table.columns[i].keep, usize::MAX - pos))
                        .map(|(pos, _)| pos);
                    match victim {
                        Some(pos) => {
                            shown.remove(pos);
                        }
                        None => break,
                    }
                }
            }
            let cells: Vec<Vec<String>> = all_cells
                .iter()
                .map(|r| shown.iter().map(|&i| r[i].clone()).collect())
                .collect();
            let mut widths: Vec<usize> = shown.iter().map(|&i| all_widths[i]).collect();
            // A column is numeric by its first figure that is known.
            let numeric: Vec<bool> = shown
                .iter()
                .map(|&i| {
                    table
                        .rows
                        .iter()
                        .map(|r| &r[i])
                        .find(|v| **v != Value::Missing)
                        .is_some_and(Value::is_numeric)
                })
                .collect();
            // Fit the width by cutting the widest text column. `widths`,
            // `numeric` and `cells` are by shown position; the column
            // itself is `table.columns[shown[i]]`.
            if let Some(limit) = self.width {
                let total: usize =
                    widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
                if total > limit {
                    if let Some(i) = (0..widths.len())
                        .filter(|&i| !numeric[i])
                        .max_by_key(|&i| widths[i])
                    {
                        let excess = total - limit;
                        widths[i] = widths[i]
                            .saturating_sub(excess)
                            .max(table.columns[shown[i]].title.len())
                            .max(8);
                    }
                }
            }
            let line = |vals: &[String], out: &mut dyn io::Write| -> io::Result<()> {
                let mut s = String::new();
                for (i, v) in vals.iter().enumerate() {
                    if i > 0 {
                        s.push_str("  ");
                    }
                    let v = cut(v, widths[i]);
                    let last = i + 1 == vals.len();
                    if numeric[i] {
                        s.push_str(&format!("{v:>w$}", w = widths[i]));
                    } else if last {
                        s.push_str(&v);
                    } else {
                        s.push_str(&format!("{v:<w$}", w = widths[i]));
                    }
                }
                writeln!(out, "{}", s.trim_end())
            };
            let titles: Vec<String> = shown
                .iter()
                .map(|&i| table.columns[i].title.to_string())
                .collect();
            line(&titles, out)?;
            for row in &cells {
                line(row, out)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Table;
    use std::borrow::Cow;

    #[test]
    fn control_characters_are_question_marks() {
        assert!(matches!(printable("plain ünïcode"), Cow::Borrowed(_)));
        assert_eq!(
            printable("a\tb\nc\rd\u{1b}[2J\u{7}e\u{7f}f\u{80}g\u{9b}h\u{a0}i"),
            "a?b?c?d?[2J?e?f?g?h\u{a0}i"
        );
        assert_eq!(printable_lines("a\u{1b}b\nc\rd\n"), "a?b\nc?d\n");
        // Bidirectional overrides, embeddings and isolates, zero widths,
        // a BOM, separators and tags: each one `?`; accents, wide
        // letters and the drawn Arabic number sign stay.
        assert_eq!(
            printable("\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}|\u{2066}\u{2067}\u{2068}\u{2069}"),
            "?????|????"
        );
        assert_eq!(
            printable("a\u{200b}b\u{200d}c\u{200e}\u{200f}d\u{feff}\u{2028}\u{2060}\u{61c}\u{ad}\u{e0041}e"),
            "a?b?c??d??????e"
        );
        assert!(matches!(printable("é日本\u{600}1"), Cow::Borrowed(_)));
    }

    fn column(key: &'static str, title: &'static str, keep: u8) -> Column {
        Column {
            key,
            title,
            keep,
            bytes_twin: false,
        }
    }

    /// Three columns, the first of which goes on a narrow terminal, in
    /// text 20 wide.
    fn narrow(first: &'static str, second: &'static str, text: &str) -> String {
        let report = Report {
            tables: vec![Table {
                key: "t",
                columns: vec![
                    column("first", first, 0),
                    column("second", second, Column::ALWAYS),
                    column("pid", "PID", Column::ALWAYS),
                ],
                rows: vec![vec![Value::Int(12345), Value::from(text), Value::Int(7)]],
            }],
            ..Report::default()
        };
        let mut out = Vec::new();
        TableRenderer { width: Some(20) }
            .render(&report, &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    /// A text column cut to fit, after a column before it was dropped,
    /// is floored by its own title, not by the dropped column's.
    #[test]
    fn a_cut_column_after_a_dropped_one_is_sized_by_its_own_title() {
        // Its own title is kept whole (a dropped "N" would let it be cut
        // to 15).
        assert_eq!(
            narrow(
                "N",
                "MAPPED FILE PATH",
                "/usr/lib/x86_64-linux-gnu/libc.so.6"
            ),
            "MAPPED FILE PATH  PID\n\
             /usr/lib/x86_64~    7\n"
        );
        // A short title lets it fit the 20 columns (a dropped 16-wide
        // title would make the line 21 wide).
        let text = narrow("REFERENCED PAGES", "NAME", "a-rather-long-process-name");
        assert_eq!(
            text,
            "NAME             PID\n\
             a-rather-long-~    7\n"
        );
        assert!(text.lines().all(|l| l.chars().count() <= 20), "{text}");
    }

    #[test]
    fn a_name_with_control_characters_stays_in_its_row_and_column() {
        let column = |key, title| column(key, title, Column::ALWAYS);
        let report = Report {
            fields: vec![("cmd", "command", Value::from("x\u{1b}]0;pwn\u{7}"))],
            tables: vec![Table {
                key: "t",
                columns: vec![column("comm", "COMM"), column("pid", "PID")],
                rows: vec![
                    vec![Value::from("esc\u{1b}[2J\nx\u{9b}"), Value::Int(7)],
                    vec![Value::from("plain"), Value::Int(12)],
                ],
            }],
            ..Report::default()
        };
        let mut out = Vec::new();
        TableRenderer { width: Some(80) }
            .render(&report, &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "command  x?]0;pwn?\n\
             \n\
             COMM        PID\n\
             esc?[2J?x?    7\n\
             plain        12\n"
        );
        let own = Report {
            text: Some("name: a\u{1b}[2Jb\u{7f}\nnext\n".into()),
            ..Report::default()
        };
        let mut out = Vec::new();
        TableRenderer { width: None }
            .render(&own, &mut out)
            .unwrap();
        assert_eq!(out, b"name: a?[2Jb?\nnext\n");
    }
}
