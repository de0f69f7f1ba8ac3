//! One self-contained HTML page holding several views of one file: the
//! file's facts on top, then per view its notes, fields, chart (the
//! [`svg`](crate::svg) renderer's picture, inline) and tables.
//!
//! The page fetches nothing: its style sheet and script are inline
//! (`html.css`, `html.js`), and so are the pictures. Every string that
//! comes from the file (command lines, paths, notes) is escaped.
//!
//! Tables sort when a heading is clicked: a numeric cell keeps its raw
//! value (pages, as JSON counts them) in `data-v`, so `1.5 MiB` sorts
//! after `900 KiB`; a missing figure sorts last. A page opened with
//! `#sort=TABLE:COLUMN:asc|desc` (several, comma-separated) starts
//! sorted so, e.g. `#sort=processes:pid:asc`. Tables are named (in
//! `data-table`) `VIEW`, or `VIEW-KEY` where the table's key is not the
//! view's name; columns by their JSON keys. Sections have the view's
//! name as id. Heat maps zoom: wheel or buttons, drag
//! to pan.

use crate::report::{Report, Style, Table, Value};
use crate::svg::SvgRenderer;
use crate::Renderer;
use std::fmt::Write as _;
use std::io;

/// The page's style sheet.
const CSS: &str = include_str!("html.css");
/// The page's script: sorting, and zooming heat maps.
const JS: &str = include_str!("html.js");
/// Rows a table shows at most.
pub const MAX_ROWS: usize = 5000;
/// The longest text layout shown, in bytes.
const MAX_TEXT: usize = 256 * 1024;

/// A page: a file's facts and its views.
#[derive(Clone, Debug, Default)]
pub struct Page {
    /// The title (the page's and its heading).
    pub title: String,
    /// Facts about the file (host, kernel, time, command, ...), in order.
    pub facts: Vec<(String, String)>,
    /// The views.
    pub sections: Vec<Section>,
    /// Views left out, each with why (and where to find it).
    pub left_out: Vec<(String, String)>,
}

/// One view on the page.
#[derive(Clone, Debug)]
pub struct Section {
    /// Its heading.
    pub heading: String,
    /// One line on what it shows.
    pub about: String,
    /// The view.
    pub report: Report,
}

/// `s` with `&`, `<`, `>`, `"` and `'` escaped: safe in text and in a
/// quoted attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The id of a section: its view's name, made unique on the page.
fn section_id(report: &Report, taken: &mut Vec<String>) -> String {
    let base = report.view.to_string();
    let mut id = base.clone();
    let mut n = 2;
    while taken.contains(&id) {
        id = format!("{base}-{n}");
        n += 1;
    }
    taken.push(id.clone());
    id
}

/// The name of a table, for `#sort=`: the section's id, and the table's
/// key where it differs.
fn table_id(section: &str, table: &Table) -> String {
    if table.key == section {
        section.to_string()
    } else {
        format!("{section}-{}", table.key)
    }
}

/// The raw value of a numeric cell, as JSON writes it.
fn raw(v: &Value) -> Option<String> {
    match v {
        Value::Missing | Value::Text(_) | Value::Bool(_) => None,
        v => Some(crate::json::to_json(v).to_string()),
    }
}

/// Writes the page.
pub fn write(page: &Page, out: &mut dyn io::Write) -> io::Result<()> {
    let mut h = String::new();
    let title = escape(&page.title);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"pagescope {}\">\n\
         <title>{title}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n<header>\n<h1>{title}</h1>\n",
        env!("CARGO_PKG_VERSION")
    );
    if !page.facts.is_empty() {
        h.push_str("<dl class=\"facts\">\n");
        for (k, v) in &page.facts {
            let _ = writeln!(h, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(v));
        }
        h.push_str("</dl>\n");
    }
    let mut taken = Vec::new();
    let ids: Vec<String> = page
        .sections
        .iter()
        .map(|s| section_id(&s.report, &mut taken))
        .collect();
    h.push_str("<nav><ul>\n");
    for (s, id) in page.sections.iter().zip(&ids) {
        let _ = writeln!(
            h,
            "<li><a href=\"#{}\">{}</a></li>",
            escape(id),
            escape(&s.heading)
        );
    }
    h.push_str("</ul></nav>\n");
    // Notes more than one view carries (what the file could not see) are
    // said once, here.
    let mut common: Vec<&String> = Vec::new();
    for (i, s) in page.sections.iter().enumerate() {
        for n in &s.report.notes {
            let elsewhere = page.sections[i + 1..]
                .iter()
                .any(|o| o.report.notes.contains(n));
            if elsewhere && !common.contains(&n) {
                common.push(n);
            }
        }
    }
    if !common.is_empty() {
        h.push_str("<ul class=\"notes\">\n");
        for n in &common {
            let _ = writeln!(h, "<li>{}</li>", escape(n));
        }
        h.push_str("</ul>\n");
    }
    if !page.left_out.is_empty() {
        h.push_str("<div class=\"left-out\"><p>Not in this page:</p>\n<ul>\n");
        for (view, why) in &page.left_out {
            let _ = writeln!(h, "<li><b>{}</b>: {}</li>", escape(view), escape(why));
        }
        h.push_str("</ul></div>\n");
    }
    h.push_str("</header>\n<main>\n");
    out.write_all(h.as_bytes())?;
    for (s, id) in page.sections.iter().zip(&ids) {
        let mut h = String::new();
        section(&mut h, s, id, &common)?;
        out.write_all(h.as_bytes())?;
    }
    let mut h = String::new();
    let _ = write!(
        h,
        "</main>\n<footer>Made by pagescope {}. Click a column's heading to sort the table \
         by it; sizes sort by their exact value.</footer>\n<script>\n{JS}</script>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION")
    );
    out.write_all(h.as_bytes())
}

fn section(h: &mut String, s: &Section, id: &str, common: &[&String]) -> io::Result<()> {
    let r = &s.report;
    let notes: Vec<&String> = r.notes.iter().filter(|n| !common.contains(n)).collect();
    let _ = writeln!(
        h,
        "<section id=\"{}\">\n<h2>{}</h2>",
        escape(id),
        escape(&s.heading)
    );
    if !s.about.is_empty() {
        let _ = writeln!(h, "<p class=\"about\">{}</p>", escape(&s.about));
    }
    if !notes.is_empty() {
        h.push_str("<ul class=\"notes\">\n");
        for n in &notes {
            let _ = writeln!(h, "<li>{}</li>", escape(n));
        }
        h.push_str("</ul>\n");
    }
    if !r.fields.is_empty() {
        h.push_str("<table class=\"fields\"><tbody>\n");
        for (key, title, value) in &r.fields {
            let _ = writeln!(
                h,
                "<tr data-k=\"{}\"><th>{}</th><td{}>{}</td></tr>",
                escape(key),
                escape(title),
                raw(value).map_or(String::new(), |v| format!(" data-v=\"{}\"", escape(&v))),
                escape(&value.display_in(r.units, r.page_size))
            );
        }
        h.push_str("</tbody></table>\n");
    }
    // A view without a picture of its own (total) reads better as its
    // fields than as the SVG renderer's stand-in bars.
    if r.chart.as_ref().is_some_and(|c| !c.bars.is_empty()) {
        let mut svg = Vec::new();
        SvgRenderer.render(r, &mut svg)?;
        let svg = String::from_utf8_lossy(&svg);
        // The HTML parser puts <svg> in the SVG namespace by itself.
        let svg = svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1);
        let heat = r.chart.as_ref().is_some_and(|c| c.style == Style::Heat);
        if heat {
            h.push_str(
                "<figure class=\"chart zoom\">\n<div class=\"zoom-buttons\">\
                 <button type=\"button\" data-zoom=\"in\" title=\"zoom in\">+</button>\
                 <button type=\"button\" data-zoom=\"out\" title=\"zoom out\">&minus;</button>\
                 <button type=\"button\" data-zoom=\"reset\" title=\"whole picture\">reset</button>\
                 <span>wheel to zoom, drag to move</span></div>\n",
            );
        } else {
            h.push_str("<figure class=\"chart\">\n");
        }
        h.push_str(svg.trim_end());
        h.push_str("\n</figure>\n");
    }
    for t in &r.tables {
        table(h, r, id, t);
    }
    if let Some(text) = &r.text {
        if text.len() <= MAX_TEXT {
            let _ = writeln!(
                h,
                "<details class=\"text\"><summary>As text</summary><pre>{}</pre></details>",
                escape(text)
            );
        } else {
            let _ = writeln!(
                h,
                "<p class=\"note\">The text layout ({} KiB) is left out: run the view in a terminal for it.</p>",
                text.len() / 1024
            );
        }
    }
    h.push_str("</section>\n");
    Ok(())
}

fn table(h: &mut String, r: &Report, section: &str, t: &Table) {
    let tid = table_id(section, t);
    if t.rows.is_empty() {
        let _ = writeln!(
            h,
            "<p class=\"empty\" data-table=\"{}\">{}: no rows.</p>",
            escape(&tid),
            escape(t.key)
        );
        return;
    }
    // A column is numeric by its first figure that is known.
    let numeric: Vec<bool> = (0..t.columns.len())
        .map(|i| {
            t.rows
                .iter()
                .map(|row| &row[i])
                .find(|v| **v != Value::Missing)
                .is_some_and(Value::is_numeric)
        })
        .collect();
    if t.rows.len() > MAX_ROWS {
        let _ = writeln!(
            h,
            "<p class=\"note\">The first {MAX_ROWS} of {} rows (in the view's order); \
             sorting sorts these. Every row: the view with <code>--format csv</code>.</p>",
            t.rows.len()
        );
    }
    let _ = writeln!(
        h,
        "<div class=\"scroll\"><table class=\"sortable\" data-table=\"{}\">\n<thead><tr>",
        escape(&tid)
    );
    for (c, &num) in t.columns.iter().zip(&numeric) {
        let _ = write!(
            h,
            "<th data-k=\"{}\"{} tabindex=\"0\" title=\"sort by {}\">{}</th>",
            escape(c.key),
            if num { " class=\"num\"" } else { "" },
            escape(c.key),
            escape(c.title)
        );
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for row in t.rows.iter().take(MAX_ROWS) {
        h.push_str("<tr>");
        for ((c, v), &num) in t.columns.iter().zip(row).zip(&numeric) {
            let mut class = Vec::new();
            if num {
                class.push("num");
            }
            if *v == Value::Missing {
                class.push("na");
            }
            if c.key == "map" {
                class.push("map");
            }
            let class = if class.is_empty() {
                String::new()
            } else {
                format!(" class=\"{}\"", class.join(" "))
            };
            let data = raw(v).map_or(String::new(), |v| format!(" data-v=\"{}\"", escape(&v)));
            let _ = write!(
                h,
                "<td{class}{data}>{}</td>",
                escape(&v.display_in(r.units, r.page_size))
            );
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table></div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Chart, Column, Units};

    fn report(view: &'static str, cmd: &str) -> Report {
        Report {
            view,
            page_size: 4096,
            notes: vec!["a <b>note</b>".into()],
            fields: vec![("rss_pages", "RSS", Value::Pages(256.0, 0))],
            tables: vec![Table {
                key: "processes",
                columns: vec![
                    Column {
                        key: "pid",
                        title: "PID",
                        keep: Column::ALWAYS,
                        bytes_twin: false,
                    },
                    Column {
                        key: "pss_pages",
                        title: "PSS",
                        keep: Column::ALWAYS,
                        bytes_twin: true,
                    },
                    Column {
                        key: "cmdline",
                        title: "COMMAND",
                        keep: Column::ALWAYS,
                        bytes_twin: false,
                    },
                ],
                rows: vec![
                    vec![
                        Value::Int(7),
                        Value::Pages(300.5, 1),
                        Value::Text(cmd.into()),
                    ],
                    vec![Value::Int(8), Value::Missing, Value::Text("b".into())],
                ],
            }],
            text: None,
            chart: Some(Chart {
                title: "PSS".into(),
                series: vec!["pss".into()],
                bars: vec![("7".into(), vec![300.5])],
                ..Chart::default()
            }),
            units: Units::Human,
        }
    }

    fn page(sections: Vec<Section>) -> String {
        let page = Page {
            title: "pagescope: snapshot <x>".into(),
            facts: vec![("command".into(), "sh -c '<script>alert(1)</script>'".into())],
            sections,
            left_out: vec![("pages".into(), "one row per page".into())],
        };
        let mut out = Vec::new();
        write(&page, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Text from the file never opens an element: a command line holding
    /// `<script>` shows as text, in a cell, a fact, a note and a chart.
    #[test]
    fn strings_from_the_file_are_escaped() {
        let evil = "x</td><script>alert(\"pwned\")</script>&'";
        let mut r = report("processes", evil);
        r.chart = Some(Chart {
            title: evil.into(),
            series: vec!["a".into()],
            bars: vec![(evil.into(), vec![1.0])],
            ..Chart::default()
        });
        let html = page(vec![Section {
            heading: "Processes".into(),
            about: evil.into(),
            report: r,
        }]);
        // The page's own script is the only one.
        assert_eq!(html.matches("<script").count(), 1, "{html}");
        assert!(!html.contains("alert(\"pwned\")"));
        assert!(html.contains(
            "x&lt;/td&gt;&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;&amp;&#39;"
        ));
        assert!(html.contains("sh -c &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39;"));
        assert!(html.contains("<li>a &lt;b&gt;note&lt;/b&gt;</li>"));
        assert!(html.contains("<title>pagescope: snapshot &lt;x&gt;</title>"));
    }

    /// Every view becomes a section, with its notes, fields, picture and
    /// tables; numeric cells keep their raw value; nothing is fetched.
    #[test]
    fn every_view_is_on_the_page() {
        let html = page(vec![
            Section {
                heading: "Processes".into(),
                about: "per process".into(),
                report: report("processes", "a"),
            },
            Section {
                heading: "Again".into(),
                about: String::new(),
                report: report("processes", "a"),
            },
        ]);
        for s in [
            "<section id=\"processes\">",
            "<section id=\"processes-2\">",
            "<table class=\"sortable\" data-table=\"processes\">",
            "<table class=\"sortable\" data-table=\"processes-2-processes\">",
            "<a href=\"#processes-2\">Again</a>",
            "<th data-k=\"pss_pages\" class=\"num\"",
            // 300.5 pages of 4 KiB, shown in the report's units.
            "<td class=\"num\" data-v=\"300.5\">1.2 MiB</td>",
            "<td class=\"num na\">-</td>",
            "<tr data-k=\"rss_pages\"><th>RSS</th><td data-v=\"256\">1.0 MiB</td></tr>",
            "<li><b>pages</b>: one row per page</li>",
        ] {
            assert!(html.contains(s), "{s} missing from:\n{html}");
        }
        assert_eq!(html.matches("<svg ").count(), 2);
        // A note of more than one view is said once, on top.
        assert_eq!(html.matches("a &lt;b&gt;note").count(), 1);
        assert!(html.find("a &lt;b&gt;note") < html.find("<main>"));
        assert_eq!(html.matches("</section>").count(), 2);
        for url in ["http:", "https:", "url(", "src=", "@import"] {
            assert!(!html.contains(url), "{url} in the page");
        }
        // A view without a picture of its own gets none.
        let mut bare = report("total", "a");
        bare.chart = None;
        let html = page(vec![Section {
            heading: "Total".into(),
            about: String::new(),
            report: bare,
        }]);
        assert!(!html.contains("<svg"));
    }

    /// A heat map gets the zoom buttons; a long table is cut, and says so.
    #[test]
    fn heat_maps_zoom_and_long_tables_are_cut() {
        let mut r = report("heatmap", "a");
        r.chart = Some(Chart {
            series: vec!["0x1000".into(), "0x2000".into()],
            bars: vec![("1".into(), vec![1.0, 2.0]), ("2".into(), vec![0.0, 3.0])],
            style: Style::Heat,
            ..Chart::default()
        });
        let row = r.tables[0].rows[0].clone();
        r.tables[0].rows = vec![row; MAX_ROWS + 3];
        let html = page(vec![Section {
            heading: "Heat map".into(),
            about: String::new(),
            report: r,
        }]);
        assert!(html.contains("<figure class=\"chart zoom\">"));
        assert!(html.contains("data-zoom=\"in\""));
        assert!(html.contains(&format!("The first {MAX_ROWS} of {} rows", MAX_ROWS + 3)));
        assert_eq!(html.matches("<tr>").count(), MAX_ROWS + 1);
    }
}
