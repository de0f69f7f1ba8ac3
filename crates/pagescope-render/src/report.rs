//! The format-neutral report document.

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
        }
    }

    /// Whether tables right-align it.
    pub fn is_numeric(&self) -> bool {
        matches!(
            self,
            Value::Int(_) | Value::Signed(_) | Value::Float(..) | Value::Hex(_)
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
}

impl Column {
    /// A column that a narrow terminal never drops.
    pub const ALWAYS: u8 = u8::MAX;
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
}
