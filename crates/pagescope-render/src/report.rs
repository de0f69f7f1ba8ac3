//! The format-neutral report document.

use std::borrow::Cow;

/// `s` with each control character (C0, tab, newline, carriage return
/// and escape among them; DEL; C1, U+0080 to U+009F) replaced by `?`, as
/// ps(1) shows them: a process's name, its command line and the paths it
/// maps are anyone's choice, and would otherwise put escape sequences on
/// the terminal, or break a row in two. The invisible format characters
/// ([`is_invisible`]: bidirectional overrides and isolates, zero-width
/// characters, line and paragraph separators) are `?` too: they would
/// let a name show as another, reordered ("Trojan Source",
/// CVE-2021-42574) or with hidden letters. One character for one, so a
/// column's width is that of its text.
pub fn printable(s: &str) -> Cow<'_, str> {
    let hidden = |c: char| c.is_control() || is_invisible(c);
    if s.contains(hidden) {
        Cow::Owned(s.chars().map(|c| if hidden(c) { '?' } else { c }).collect())
    } else {
        Cow::Borrowed(s)
    }
}

/// Whether `c` is a format character that a terminal draws as nothing
/// yet changes how the text around it shows: Unicode's general category
/// Cf (Format; DerivedGeneralCategory.txt) but for the prepended
/// concatenation marks (U+0600 to U+0605 and the like, which are drawn),
/// and the line and paragraph separators (Zl, Zp).
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}' // soft hyphen
            | '\u{61c}' // Arabic letter mark
            | '\u{180e}' // Mongolian vowel separator
            | '\u{200b}'..='\u{200f}' // zero widths, LRM, RLM
            | '\u{2028}'..='\u{2029}' // line and paragraph separators
            | '\u{202a}'..='\u{202e}' // bidi embeddings and overrides
            | '\u{2060}'..='\u{2064}' // word joiner, invisible operators
            | '\u{2066}'..='\u{206f}' // bidi isolates, deprecated formats
            | '\u{feff}' // zero-width no-break space (BOM)
            | '\u{fff9}'..='\u{fffb}' // interlinear annotation
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0001}'
            | '\u{e0020}'..='\u{e007f}' // tags
    )
}

/// One value of a field or cell.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A count or address.
    Int(u64),
    /// A signed difference.
    Signed(i64),
    /// An address or frame number: an integer in JSON and CSV, hex in
    /// tables.
    Hex(u64),
    /// A fractional figure, shown with this many decimals in tables.
    Float(f64, usize),
    /// Text.
    Text(String),
    /// Yes or no.
    Bool(bool),
    /// A figure that could not be collected: `-` in tables, an empty
    /// cell in CSV, `null` in JSON; left out of pictures.
    Missing,
    /// A count of pages (or a change in one), with this many decimals: in
    /// pages in JSON and CSV, in the report's [`Units`] in tables.
    Pages(f64, usize),
}

/// How tables show counts of pages ([`Value::Pages`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Units {
    /// Pages, as JSON and CSV count them.
    #[default]
    Pages,
    /// Bytes: pages times the page size.
    Bytes,
    /// Bytes in the largest binary unit (B, KiB, MiB, GiB, TiB) that keeps
    /// the figure at least 1, with one decimal from MiB up.
    Human,
}

/// `bytes` in binary units: `0`, `512 B`, `12 KiB`, `1.5 MiB`, `3.2 GiB`.
pub fn human_size(bytes: f64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    let sign = if bytes < 0.0 { "-" } else { "" };
    let b = bytes.abs();
    if b < 0.5 {
        return "0".to_string();
    }
    if b < 1024.0 {
        return format!("{sign}{b:.0} B");
    }
    let mut v = b / 1024.0;
    let mut unit = 0;
    // Round first, so that 1023.96 KiB reads as 1.0 MiB, not 1024 KiB.
    while unit + 1 < UNITS.len()
        && (if unit == 0 {
            v.round()
        } else {
            (v * 10.0).round() / 10.0
        }) >= 1024.0
    {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{sign}{v:.0} KiB")
    } else {
        format!("{sign}{v:.1} {}", UNITS[unit])
    }
}

impl Value {
    /// The value as tables and CSV show it.
    pub fn display(&self) -> String {
        match self {
            Value::Int(v) => v.to_string(),
            Value::Signed(v) => v.to_string(),
            Value::Hex(v) => format!("{v:#x}"),
            Value::Float(v, d) => format!("{v:.d$}"),
            Value::Text(s) => s.clone(),
            Value::Bool(b) => if *b { "yes" } else { "no" }.to_string(),
            Value::Missing => "-".to_string(),
            Value::Pages(v, d) => format!("{v:.d$}"),
        }
    }

    /// The value as a table shows it: counts of pages in `units`, of
    /// pages of `page_size` bytes; other values as [`Value::display`].
    pub fn display_in(&self, units: Units, page_size: u64) -> String {
        match (self, units) {
            (Value::Pages(v, _), Units::Bytes) => format!("{:.0}", v * page_size as f64),
            (Value::Pages(v, _), Units::Human) => human_size(v * page_size as f64),
            _ => self.display(),
        }
    }

    /// A count of pages, or missing.
    pub fn pages(v: Option<u64>) -> Value {
        v.map_or(Value::Missing, |n| Value::Pages(n as f64, 0))
    }

    /// A count of pages with a fraction (PSS), one decimal, or missing.
    pub fn pages_f(v: Option<f64>) -> Value {
        v.map_or(Value::Missing, |n| Value::Pages(n, 1))
    }

    /// A change in a count of pages.
    pub fn pages_delta(v: i64) -> Value {
        Value::Pages(v as f64, 0)
    }

    /// Whether tables right-align it.
    pub fn is_numeric(&self) -> bool {
        matches!(
            self,
            Value::Int(_) | Value::Signed(_) | Value::Float(..) | Value::Hex(_) | Value::Pages(..)
        )
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(v)
    }
}

impl From<Option<u64>> for Value {
    fn from(v: Option<u64>) -> Value {
        v.map_or(Value::Missing, Value::Int)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}

/// A column of a table.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// snake_case key (JSON key, CSV header).
    pub key: &'static str,
    /// Heading in tables.
    pub title: &'static str,
    /// How long a too-narrow terminal keeps it: columns with the lowest
    /// value go first; [`Column::ALWAYS`] never goes (text is cut instead).
    pub keep: u8,
    /// A count of pages that JSON and CSV also give in bytes, under the
    /// key with `_pages` made `_bytes` (RSS, PSS, USS, swap).
    pub bytes_twin: bool,
}

impl Column {
    /// A column that a narrow terminal never drops.
    pub const ALWAYS: u8 = u8::MAX;

    /// The column, with a `_bytes` twin in JSON and CSV.
    pub const fn with_bytes(mut self) -> Column {
        self.bytes_twin = true;
        self
    }
}

/// The key of the `_bytes` twin of a key of pages: `rss_pages` gives
/// `rss_bytes`, `user_pages_delta` gives `user_bytes_delta`.
pub fn bytes_key(key: &str) -> Option<String> {
    key.contains("_pages")
        .then(|| key.replacen("_pages", "_bytes", 1))
}

/// The twin in bytes of a count of pages: an integer (PSS rounded to the
/// byte), or missing where the count is.
pub fn bytes_value(v: &Value, page_size: u64) -> Value {
    match v {
        Value::Pages(n, _) => {
            let b = (n * page_size as f64).round();
            if b < 0.0 {
                Value::Signed(b as i64)
            } else {
                Value::Int(b as u64)
            }
        }
        _ => Value::Missing,
    }
}

/// A table of rows.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Table {
    /// The JSON key holding the rows.
    pub key: &'static str,
    /// The columns.
    pub columns: Vec<Column>,
    /// The rows, one value per column.
    pub rows: Vec<Vec<Value>>,
}

/// A bar chart: the picture of a view, drawn by the SVG renderer.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Chart {
    /// Title.
    pub title: String,
    /// What the bars measure (y axis).
    pub y_label: String,
    /// Names of the stacked series, bottom first.
    pub series: Vec<String>,
    /// The bars, left to right: a label and one value per series.
    pub bars: Vec<(String, Vec<f64>)>,
    /// How to draw it.
    pub style: Style,
    /// What the values count, which says how the value axis is labelled.
    pub y_unit: Quantity,
    /// What the bars (or points) stand for, under the x axis.
    pub x_label: String,
    /// The first bars (points) where the figure is not known, and why:
    /// shaded and labelled in the picture.
    pub unknown: Option<(usize, String)>,
}

/// What a chart's values count.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Quantity {
    /// Whole things (references, regions, intervals): integer ticks.
    #[default]
    Count,
    /// Pages of this many bytes: the axis is in B, KiB, MiB or GiB.
    Pages(u64),
    /// A fraction from 0 to 1.
    Ratio,
}

/// How a [`Chart`] is drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Style {
    /// Stacked bars.
    #[default]
    Bars,
    /// Each series as a line through the points (for curves, whose
    /// series must not add up).
    Lines,
    /// A heat map: one column per bar, one row per series, each cell's
    /// colour its value (time by address).
    Heat,
}

/// A view's output, before rendering.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Report {
    /// The view's name.
    pub view: &'static str,
    /// Page size in bytes (all counts are in pages).
    pub page_size: u64,
    /// Lines about missing figures and incomplete input.
    pub notes: Vec<String>,
    /// Named figures, in order.
    pub fields: Vec<(&'static str, &'static str, Value)>,
    /// Tables.
    pub tables: Vec<Table>,
    /// The view's own text layout, which the table renderer prints
    /// instead of the generic one (e.g. the page maps of `vmas`).
    pub text: Option<String>,
    /// The view's picture for SVG; views without one are drawn as bars
    /// of their first numeric column.
    pub chart: Option<Chart>,
    /// How tables show counts of pages (JSON and CSV always count pages,
    /// and give the main ones in bytes too).
    pub units: Units,
}
