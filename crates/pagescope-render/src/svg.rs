//! SVG pictures, drawn with plotters: the view's [`Chart`] as stacked
//! bars, or, for a view without one, its first table's first numeric
//! column as bars labelled by its first text column.

use crate::report::{Chart, Report, Style, Value};
use crate::Renderer;
use plotters::prelude::*;
use std::io;

/// Renders SVG.
#[derive(Debug)]
pub struct SvgRenderer;

/// Bars at most, so that labels stay readable.
const MAX_BARS: usize = 60;

/// A palette that tells neighbouring series apart.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The chart a view without its own gets: bars of the first numeric
/// column of its first table, or of its numeric fields.
fn fallback(report: &Report) -> Chart {
    if let Some(t) = report.tables.first() {
        let label = t
            .rows
            .first()
            .and_then(|r| r.iter().position(|v| matches!(v, Value::Text(_))));
        let value = t.rows.first().and_then(|r| {
            r.iter()
                .position(|v| {
                    matches!(
                        v,
                        Value::Int(_) | Value::Float(..) | Value::Signed(_) | Value::Pages(..)
                    )
                })
                .map(|i| {
                    // Prefer a column that is not an id.
                    r.iter()
                        .enumerate()
                        .skip(i + 1)
                        .find(|(_, v)| {
                            matches!(v, Value::Int(_) | Value::Float(..) | Value::Signed(_))
                        })
                        .map_or(i, |(j, _)| j)
                })
        });
        if let Some(vi) = value {
            return Chart {
                title: format!("{}: {}", report.view, t.columns[vi].title),
                y_label: t.columns[vi].key.to_string(),
                series: vec![t.columns[vi].key.to_string()],
                // Rows whose figure is missing are left out.
                bars: t
                    .rows
                    .iter()
                    .filter_map(|r| {
                        let name = label.map(|l| r[l].display()).unwrap_or_default();
                        Some((name, vec![number(&r[vi])?]))
                    })
                    .collect(),
                style: Style::Bars,
            };
        }
    }
    Chart {
        title: report.view.to_string(),
        y_label: "pages".into(),
        series: vec!["pages".into()],
        bars: report
            .fields
            .iter()
            .filter_map(|(k, _, v)| Some((k.to_string(), vec![number(v)?])))
            .collect(),
        style: Style::Bars,
    }
}

/// A figure as a number; `None` for text and for a missing figure.
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Signed(i) => Some(*i as f64),
        Value::Hex(i) => Some(*i as f64),
        Value::Float(f, _) | Value::Pages(f, _) => Some(*f),
        _ => None,
    }
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let tail: String = s
            .chars()
            .rev()
            .take(n - 1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("~{tail}")
    }
}

/// Columns and rows a heat map draws at most.
const MAX_HEAT: (usize, usize) = (2000, 256);

/// A heat map: columns are the chart's bars (time), rows its series
/// (addresses, first at the bottom), white for 0 to dark blue for the
/// largest value on a logarithmic scale.
fn draw_heat(chart: &Chart, svg: &mut String) -> Result<(), Box<dyn std::error::Error>> {
    let cols = &chart.bars[..chart.bars.len().min(MAX_HEAT.0)];
    let rows = chart.series.len().min(MAX_HEAT.1);
    let root = SVGBackend::with_string(svg, (960, 200 + 6 * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = cols
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0f64, f64::max)
        .max(1.0);
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(140)
        .build_cartesian_2d(0..cols.len().max(1), 0..rows.max(1))?;
    let names = &chart.series;
    let labels: Vec<&String> = cols.iter().map(|(l, _)| l).collect();
    ctx.configure_mesh()
        .disable_mesh()
        .x_desc("interval")
        .y_desc(&chart.y_label)
        .x_label_formatter(&|i| labels.get(*i).map(|s| s.to_string()).unwrap_or_default())
        .y_label_formatter(&|i| names.get(*i).cloned().unwrap_or_default())
        .draw()?;
    ctx.draw_series(cols.iter().enumerate().flat_map(|(x, (_, vals))| {
        vals.iter()
            .take(rows)
            .enumerate()
            .filter(|(_, v)| **v > 0.0)
            .map(move |(y, v)| {
                // Logarithmic, so that a few pages still show next to
                // a block referenced in full.
                let t = (v.ln_1p() / top.ln_1p()).clamp(0.0, 1.0);
                let shade = |c: f64| (255.0 - t * (255.0 - c)) as u8;
                Rectangle::new(
                    [(x, y), (x + 1, y + 1)],
                    RGBColor(shade(8.0), shade(48.0), shade(107.0)).filled(),
                )
            })
    }))?;
    root.present()?;
    Ok(())
}

fn draw(chart: &Chart, svg: &mut String) -> Result<(), Box<dyn std::error::Error>> {
    if chart.style == Style::Heat {
        return draw_heat(chart, svg);
    }
    let bars = &chart.bars[..chart.bars.len().min(MAX_BARS)];
    let width = (160 + 28 * bars.len() as u32).max(640);
    let root = SVGBackend::with_string(svg, (width, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let (lo, hi) = bars.iter().fold((0f64, 0f64), |(lo, hi), (_, vals)| {
        if chart.style == Style::Lines {
            let top = vals.iter().copied().fold(0f64, f64::max);
            return (lo, hi.max(top));
        }
        let pos: f64 = vals.iter().filter(|v| **v > 0.0).sum();
        let neg: f64 = vals.iter().filter(|v| **v < 0.0).sum();
        (lo.min(neg), hi.max(pos))
    });
    let hi = if hi <= lo { lo + 1.0 } else { hi * 1.05 };
    let n = bars.len().max(1);
    let labels: Vec<String> = bars.iter().map(|(l, _)| shorten(l, 24)).collect();
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(140)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n).into_segmented(), lo..hi)?;
    ctx.configure_mesh()
        .disable_x_mesh()
        .y_desc(&chart.y_label)
        .x_labels(n)
        .x_label_style(
            ("sans-serif", 11)
                .into_font()
                .transform(FontTransform::Rotate90),
        )
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()?;
    for (s, name) in chart.series.iter().enumerate() {
        let color = COLORS[s % COLORS.len()];
        if chart.style == Style::Lines {
            let points = bars.iter().enumerate().map(|(i, (_, vals))| {
                (
                    SegmentValue::CenterOf(i),
                    vals.get(s).copied().unwrap_or(0.0),
                )
            });
            ctx.draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 12, y)], color.stroke_width(2))
                });
            continue;
        }
        let rects = bars.iter().enumerate().map(move |(i, (_, vals))| {
            let below: f64 = vals[..s].iter().filter(|v| **v >= 0.0).sum();
            let v = vals.get(s).copied().unwrap_or(0.0);
            let (y0, y1) = if v >= 0.0 {
                (below, below + v)
            } else {
                (v, 0.0)
            };
            Rectangle::new(
                [
                    (SegmentValue::Exact(i), y0),
                    (SegmentValue::Exact(i + 1), y1),
                ],
                color.filled(),
            )
        });
        ctx.draw_series(rects)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    if chart.series.len() > 1 {
        ctx.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

impl Renderer for SvgRenderer {
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
        let chart = report.chart.clone().unwrap_or_else(|| fallback(report));
        let mut svg = String::new();
        draw(&chart, &mut svg).map_err(|e| io::Error::other(format!("drawing the SVG: {e}")))?;
        out.write_all(svg.as_bytes())?;
        if !svg.ends_with('\n') {
            writeln!(out)?;
        }
        Ok(())
    }
}
