//! SVG pictures of a view's [`Chart`]: stacked bars, lines, or a heat
//! map; a view without a chart of its own is drawn as bars of its first
//! table's first numeric column (or of its numeric fields).
//!
//! The pictures are laid out here, element by element, so that the box of
//! every text is known: labels are shortened to fit, the legend sits in a
//! column of its own right of the data, the picture grows to hold its
//! labels, and no text leaves it (the tests check each text's box against
//! the picture with [`text_box`]). Colours come from [`crate::palette`]:
//! one per class, the same in every chart. Sizes are drawn in B, KiB, MiB
//! or GiB, counts with integer ticks, and the bars where a figure is not
//! known are shaded and labelled.

use crate::palette;
use crate::report::{human_size, Chart, Quantity, Report, Style, Value};
use crate::Renderer;
use std::fmt::Write as _;
use std::io;

/// Renders SVG.
#[derive(Debug)]
pub struct SvgRenderer;

/// Bars (or points) drawn at most.
const MAX_BARS: usize = 600;
/// Heat-map columns and rows drawn at most.
const MAX_HEAT: (usize, usize) = (2000, 256);
/// Characters a label keeps.
const LABEL_CHARS: usize = 28;
/// The font size of labels, ticks and the legend.
const FONT: f64 = 12.0;
/// The font size of the title.
const TITLE_FONT: f64 = 15.0;

/// The widest a sans-serif text of `chars` characters can be at `size`,
/// for layout: 0.62 em a character bounds the common fonts' average.
pub fn text_width(chars: usize, size: f64) -> f64 {
    chars as f64 * size * 0.62
}

/// The box (x0, y0, x1, y1) a text drawn by this module covers, from
/// its attributes: `x`, `y` (the middle of its line), `font-size`,
/// `text-anchor`, and whether it is turned to read upwards
/// (`rotate(-90 x y)`).
pub fn text_box(x: f64, y: f64, size: f64, anchor: &str, chars: usize, up: bool) -> [f64; 4] {
    let w = text_width(chars, size);
    let (before, after) = match anchor {
        "end" => (w, 0.0),
        "middle" => (w / 2.0, w / 2.0),
        _ => (0.0, w),
    };
    // Ascenders reach 0.5 em above the middle, descenders 0.6 below.
    let (above, below) = (0.5 * size, 0.6 * size);
    if up {
        [x - above, y - after, x + below, y + before]
    } else {
        [x - before, y - above, x + after, y + below]
    }
}

/// Text anchors.
#[derive(Clone, Copy)]
enum Anchor {
    Start,
    Middle,
    End,
}

/// An SVG document being written.
struct Svg {
    body: String,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn rgb((r, g, b): (u8, u8, u8)) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

impl Svg {
    fn new() -> Svg {
        Svg {
            body: String::new(),
        }
    }

    /// A text centred vertically on `y`; `up` turns it to read upwards.
    fn text(&mut self, x: f64, y: f64, size: f64, anchor: Anchor, up: bool, s: &str) {
        let anchor = match anchor {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        };
        let turn = if up {
            format!(" transform=\"rotate(-90 {x:.1} {y:.1})\"")
        } else {
            String::new()
        };
        let _ = writeln!(
            self.body,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" dy=\"0.35em\" font-size=\"{size}\" \
             text-anchor=\"{anchor}\"{turn}>{}</text>",
            escape(s)
        );
    }

    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, extra: &str) {
        let _ = writeln!(
            self.body,
            "<rect x=\"{x:.2}\" y=\"{y:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{fill}\"{extra}/>",
            w.max(0.0),
            h.max(0.0)
        );
    }

    fn line(&mut self, x0: f64, y0: f64, x1: f64, y1: f64, stroke: &str) {
        let _ = writeln!(
            self.body,
            "<line x1=\"{x0:.1}\" y1=\"{y0:.1}\" x2=\"{x1:.1}\" y2=\"{y1:.1}\" stroke=\"{stroke}\"/>"
        );
    }

    fn finish(self, width: f64, height: f64) -> String {
        let (w, h) = (width.ceil(), height.ceil());
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\">\n\
             <rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\n{}</svg>\n",
            self.body
        )
    }
}

/// `s` cut to `n` characters: the start and the end kept, `…` between.
pub fn shorten(s: &str, n: usize) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= n {
        return s.to_string();
    }
    let head = (n - 1) / 2;
    let tail = n - 1 - head;
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[chars.len() - tail..]);
    out
}

/// A value axis: the ticks, in the unit shown, and how to print them.
struct Axis {
    /// Values are multiplied by this to be shown (bytes per page over the
    /// unit's bytes).
    scale: f64,
    /// The unit, for the axis label (`MiB`), if any.
    unit: &'static str,
    lo: f64,
    hi: f64,
    step: f64,
    decimals: usize,
}

impl Axis {
    fn new(quantity: Quantity, lo: f64, hi: f64) -> Axis {
        let (scale, unit) = match quantity {
            Quantity::Pages(ps) => {
                let top = lo.abs().max(hi.abs()) * ps as f64;
                let (div, unit) = [
                    (1u64 << 40, "TiB"),
                    (1 << 30, "GiB"),
                    (1 << 20, "MiB"),
                    (1 << 10, "KiB"),
                ]
                .into_iter()
                .find(|&(d, _)| top >= d as f64)
                .unwrap_or((1, "B"));
                (ps as f64 / div as f64, unit)
            }
            _ => (1.0, ""),
        };
        let (mut lo, mut hi) = (lo * scale, hi * scale);
        if quantity == Quantity::Ratio {
            lo = lo.min(0.0);
            hi = hi.max(1.0);
        }
        if hi <= lo {
            hi = lo + 1.0;
        }
        let raw = (hi - lo) / 5.0;
        let mag = 10f64.powf(raw.log10().floor());
        let mut step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .into_iter()
            .map(|m| m * mag)
            .find(|s| *s >= raw)
            .unwrap_or(10.0 * mag);
        let whole = quantity == Quantity::Count || unit == "B" || unit == "KiB";
        if whole {
            step = step.max(1.0).round();
        }
        let mut decimals = 0;
        while decimals < 6 && (step * 10f64.powi(decimals as i32)).fract().abs() > 1e-6 {
            decimals += 1;
        }
        Axis {
            scale,
            unit,
            lo: (lo / step).floor() * step,
            hi: (hi / step).ceil() * step,
            step,
            decimals,
        }
    }

    fn ticks(&self) -> Vec<(f64, String)> {
        let n = ((self.hi - self.lo) / self.step).round() as i64;
        (0..=n)
            .map(|i| {
                let v = self.lo + i as f64 * self.step;
                (v, format!("{v:.d$}", d = self.decimals))
            })
            .collect()
    }
}

/// The chart a view without its own gets: bars of the first numeric
/// column of its first table, or of its numeric fields (its sizes, if it
/// has any).
fn fallback(report: &Report) -> Chart {
    let numeric = |v: &Value| {
        matches!(
            v,
            Value::Int(_) | Value::Float(..) | Value::Signed(_) | Value::Pages(..)
        )
    };
    let quantity = |v: &Value| match v {
        Value::Pages(..) => Quantity::Pages(report.page_size.max(1)),
        _ => Quantity::Count,
    };
    if let Some(t) = report.tables.first() {
        let first = t.rows.first();
        let label = first.and_then(|r| r.iter().position(|v| matches!(v, Value::Text(_))));
        // Prefer the second numeric column: the first is often an id.
        let value = first.and_then(|r| {
            let mut nums = r.iter().enumerate().filter(|(_, v)| numeric(v));
            let a = nums.next().map(|(i, _)| i);
            nums.next().map(|(i, _)| i).or(a)
        });
        if let Some(vi) = value {
            return Chart {
                title: format!("{}: {}", report.view, t.columns[vi].title),
                y_label: t.columns[vi].key.replace('_', " "),
                series: vec![t.columns[vi].key.to_string()],
                bars: t
                    .rows
                    .iter()
                    .filter_map(|r| {
                        let name = label.map(|l| r[l].display()).unwrap_or_default();
                        Some((name, vec![number(&r[vi])?]))
                    })
                    .collect(),
                y_unit: quantity(&t.rows[0][vi]),
                ..Chart::default()
            };
        }
    }
    let sizes = report
        .fields
        .iter()
        .any(|(_, _, v)| matches!(v, Value::Pages(..)));
    Chart {
        title: report.view.to_string(),
        y_label: if sizes { "memory" } else { "count" }.into(),
        series: vec![if sizes { "resident memory" } else { "count" }.into()],
        bars: report
            .fields
            .iter()
            .filter(|(_, _, v)| !sizes || matches!(v, Value::Pages(..)))
            .filter_map(|(k, _, v)| {
                Some((k.replace("_pages", "").replace('_', " "), vec![number(v)?]))
            })
            .collect(),
        y_unit: if sizes {
            Quantity::Pages(report.page_size.max(1))
        } else {
            Quantity::Count
        },
        ..Chart::default()
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

/// The layout of the x labels under `n` slots of `slot` pixels: every
/// `step`-th label, turned upwards if they would not fit side by side;
/// the room they take below the axis, and how far a label side by side
/// reaches past its slot on either side.
fn x_labels(labels: &[String], slot: f64) -> (usize, bool, f64, f64) {
    let widest = labels
        .iter()
        .map(|l| text_width(l.chars().count(), FONT))
        .fold(0.0, f64::max);
    let step_for = |room: f64| ((room / slot).ceil() as usize).max(1);
    let flat = step_for(widest + 10.0);
    let up = step_for(FONT + 4.0);
    // Side by side when that keeps at least every fourth label, or when
    // the labels are as short as numbers.
    if widest <= text_width(8, FONT) || flat <= 4.max(up) {
        (flat, false, FONT + 6.0, (widest - slot).max(0.0) / 2.0)
    } else {
        (up, true, widest + 8.0, 0.0)
    }
}

/// The legend's column: a swatch and a name per series, top to bottom.
fn legend_width(series: &[String]) -> f64 {
    let widest = series.iter().map(|s| s.chars().count()).max().unwrap_or(0);
    24.0 + 18.0 + text_width(widest, FONT)
}

fn draw_legend(
    svg: &mut Svg,
    x: f64,
    y: f64,
    series: &[String],
    colours: &[(u8, u8, u8)],
    line: bool,
) {
    for (i, (name, c)) in series.iter().zip(colours).enumerate() {
        let cy = y + 10.0 + i as f64 * 20.0;
        if line {
            let _ = writeln!(
                svg.body,
                "<line x1=\"{:.1}\" y1=\"{cy:.1}\" x2=\"{:.1}\" y2=\"{cy:.1}\" stroke=\"{}\" stroke-width=\"3\"/>",
                x,
                x + 14.0,
                rgb(*c)
            );
        } else {
            svg.rect(x, cy - 6.0, 14.0, 12.0, &rgb(*c), "");
        }
        svg.text(x + 20.0, cy, FONT, Anchor::Start, false, name);
    }
}

/// Bars or lines over categories.
fn draw_xy(chart: &Chart) -> String {
    let bars = &chart.bars[..chart.bars.len().min(MAX_BARS)];
    let n = bars.len().max(1);
    let labels: Vec<String> = bars.iter().map(|(l, _)| shorten(l, LABEL_CHARS)).collect();
    let lines = chart.style == Style::Lines;
    let (lo, hi) = bars.iter().fold((0f64, 0f64), |(lo, hi), (_, vals)| {
        if lines {
            let top = vals.iter().copied().fold(0f64, f64::max);
            let bottom = vals.iter().copied().fold(0f64, f64::min);
            return (lo.min(bottom), hi.max(top));
        }
        let pos: f64 = vals.iter().filter(|v| **v > 0.0).sum();
        let neg: f64 = vals.iter().filter(|v| **v < 0.0).sum();
        (lo.min(neg), hi.max(pos))
    });
    let axis = Axis::new(chart.y_unit, lo, hi);
    let ticks = axis.ticks();
    let y_title = if axis.unit.is_empty() {
        chart.y_label.clone()
    } else {
        format!("{} ({})", chart.y_label, axis.unit)
    };
    let widest_tick = ticks
        .iter()
        .map(|(_, t)| t.chars().count())
        .max()
        .unwrap_or(1);
    // Left: the axis title (turned up), the ticks' labels, the ticks.
    let plot_w = (n as f64 * 24.0).clamp(480.0, 1400.0);
    let slot = plot_w / n as f64;
    let (label_step, labels_up, label_room, overhang) = x_labels(&labels, slot);
    let left = (12.0 + FONT + 8.0 + text_width(widest_tick, FONT) + 10.0).max(overhang + 4.0);
    let colours = palette::colours(&chart.series);
    let legend = chart.series.len() > 1;
    let legend_w = if legend {
        legend_width(&chart.series)
    } else {
        0.0
    };
    let top = 16.0 + TITLE_FONT + 14.0;
    let plot_h = (320f64).max(chart.series.len() as f64 * 20.0 + 10.0);
    let bottom = 8.0 + label_room + 8.0 + FONT + 10.0;
    let title = shorten(&chart.title, 100);
    let y_title = shorten(&y_title, (plot_h / (FONT * 0.62)) as usize);
    // Right of the plot: room for the last label's overhang, then the
    // legend.
    let gap = (overhang + 4.0).max(20.0);
    let width = (left + plot_w + gap + legend_w + 10.0)
        .max(text_width(title.chars().count(), TITLE_FONT) + 20.0);
    let height = top + plot_h + bottom;
    let mut svg = Svg::new();
    svg.text(
        width / 2.0,
        16.0 + TITLE_FONT / 2.0,
        TITLE_FONT,
        Anchor::Middle,
        false,
        &title,
    );
    let y_of = |v: f64| top + plot_h - (v * axis.scale - axis.lo) / (axis.hi - axis.lo) * plot_h;
    // Where the figure is unknown: shaded, and said.
    if let Some((k, why)) = &chart.unknown {
        let k = (*k).min(n);
        if k > 0 {
            let w = k as f64 * slot;
            svg.rect(left, top, w, plot_h, "#d9d9d9", " fill-opacity=\"0.6\"");
            let room = ((plot_w - 8.0) / text_width(1, FONT)) as usize;
            svg.text(
                left + 6.0,
                top + plot_h / 2.0,
                FONT,
                Anchor::Start,
                false,
                &shorten(why, room),
            );
        }
    }
    // Grid and ticks.
    for (v, t) in &ticks {
        let y = top + plot_h - (v - axis.lo) / (axis.hi - axis.lo) * plot_h;
        svg.line(left, y, left + plot_w, y, "#e6e6e6");
        svg.line(left - 5.0, y, left, y, "#000000");
        svg.text(left - 8.0, y, FONT, Anchor::End, false, t);
    }
    svg.text(
        12.0 + FONT / 2.0,
        top + plot_h / 2.0,
        FONT,
        Anchor::Middle,
        true,
        &y_title,
    );
    // The data.
    for (s, c) in colours.iter().enumerate() {
        let fill = rgb(*c);
        if lines {
            let points: Vec<String> = bars
                .iter()
                .enumerate()
                .map(|(i, (_, v))| {
                    let x = left + (i as f64 + 0.5) * slot;
                    format!("{x:.1},{:.1}", y_of(v.get(s).copied().unwrap_or(0.0)))
                })
                .collect();
            let _ = writeln!(
                svg.body,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{fill}\" stroke-width=\"2\"/>",
                points.join(" ")
            );
            continue;
        }
        let gap = if slot >= 6.0 { slot * 0.15 } else { 0.0 };
        for (i, (_, vals)) in bars.iter().enumerate() {
            let v = vals.get(s).copied().unwrap_or(0.0);
            if v == 0.0 {
                continue;
            }
            let (y0, y1) = if v > 0.0 {
                let below: f64 = vals[..s].iter().filter(|v| **v > 0.0).sum();
                (below, below + v)
            } else {
                let below: f64 = vals[..s].iter().filter(|v| **v < 0.0).sum();
                (below + v, below)
            };
            let x = left + i as f64 * slot + gap / 2.0;
            svg.rect(x, y_of(y1), slot - gap, y_of(y0) - y_of(y1), &fill, "");
        }
    }
    // Axes.
    svg.line(left, top, left, top + plot_h, "#000000");
    let zero = y_of(0.0).clamp(top, top + plot_h);
    svg.line(left, zero, left + plot_w, zero, "#000000");
    svg.line(left, top + plot_h, left + plot_w, top + plot_h, "#000000");
    // The x labels, every label_step-th.
    let base = top + plot_h + 8.0;
    for (i, l) in labels.iter().enumerate().step_by(label_step) {
        let x = left + (i as f64 + 0.5) * slot;
        svg.line(x, top + plot_h, x, top + plot_h + 4.0, "#000000");
        if labels_up {
            svg.text(x, base, FONT, Anchor::End, true, l);
        } else {
            svg.text(x, base + FONT / 2.0, FONT, Anchor::Middle, false, l);
        }
    }
    if !chart.x_label.is_empty() {
        let room = (plot_w / text_width(1, FONT)) as usize;
        svg.text(
            left + plot_w / 2.0,
            base + label_room + 8.0 + FONT / 2.0,
            FONT,
            Anchor::Middle,
            false,
            &shorten(&chart.x_label, room),
        );
    }
    if legend {
        draw_legend(
            &mut svg,
            left + plot_w + gap,
            top,
            &chart.series,
            &colours,
            lines,
        );
    }
    svg.finish(width, height)
}

/// A heat map: columns are the chart's bars (time), rows its series
/// (addresses, the first at the bottom), white for nothing to dark blue
/// for the most on a logarithmic scale, with the scale on the right.
fn draw_heat(chart: &Chart) -> String {
    let cols = &chart.bars[..chart.bars.len().min(MAX_HEAT.0)];
    let rows = chart.series.len().min(MAX_HEAT.1).max(1);
    let names: Vec<String> = chart
        .series
        .iter()
        .take(rows)
        .map(|s| shorten(s, LABEL_CHARS))
        .collect();
    let widest = names.iter().map(|s| s.chars().count()).max().unwrap_or(1);
    let plot_w = (cols.len() as f64 * 8.0).clamp(480.0, 1400.0);
    let cell_w = plot_w / cols.len().max(1) as f64;
    let cell_h = (320.0 / rows as f64).clamp(2.0, 24.0);
    let plot_h = cell_h * rows as f64;
    let top = 16.0 + TITLE_FONT + 14.0;
    let labels: Vec<String> = cols.iter().map(|(l, _)| shorten(l, LABEL_CHARS)).collect();
    let (label_step, labels_up, label_room, overhang) = x_labels(&labels, cell_w);
    let left = (12.0 + FONT + 8.0 + text_width(widest, FONT) + 8.0).max(overhang + 4.0);
    let max = cols
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0f64, f64::max)
        .max(1.0);
    let value = |v: f64| match chart.y_unit {
        Quantity::Pages(ps) => human_size(v * ps as f64),
        _ => format!("{v:.0}"),
    };
    let scale_label = format!("most: {}", value(max));
    let scale_w = 30.0 + text_width(scale_label.chars().count().max(7), FONT);
    let title = shorten(&chart.title, 100);
    // Right of the plot: room for the last label's overhang, then the
    // scale.
    let gap = (overhang + 4.0).max(20.0);
    let width =
        (left + plot_w + gap + scale_w).max(text_width(title.chars().count(), TITLE_FONT) + 20.0);
    let bottom = 8.0 + label_room + 8.0 + FONT + 10.0;
    let height = top + plot_h.max(140.0) + bottom;
    let mut svg = Svg::new();
    svg.text(
        width / 2.0,
        16.0 + TITLE_FONT / 2.0,
        TITLE_FONT,
        Anchor::Middle,
        false,
        &title,
    );
    let shade = |t: f64| {
        let c = |dark: f64| (255.0 - t * (255.0 - dark)) as u8;
        rgb((c(8.0), c(48.0), c(107.0)))
    };
    for (x, (_, vals)) in cols.iter().enumerate() {
        for (y, v) in vals.iter().take(rows).enumerate() {
            if *v <= 0.0 {
                continue;
            }
            // Logarithmic, so that a few pages still show next to a
            // block referenced in full.
            let t = (v.ln_1p() / max.ln_1p()).clamp(0.0, 1.0);
            svg.rect(
                left + x as f64 * cell_w,
                top + plot_h - (y + 1) as f64 * cell_h,
                cell_w,
                cell_h,
                &shade(t),
                "",
            );
        }
    }
    svg.rect(left, top, plot_w, plot_h, "none", " stroke=\"#000000\"");
    // Row labels, as many as fit.
    let row_step = ((FONT + 2.0) / cell_h).ceil().max(1.0) as usize;
    for (y, name) in names.iter().enumerate().step_by(row_step) {
        let cy = top + plot_h - (y as f64 + 0.5) * cell_h;
        svg.text(left - 6.0, cy, FONT, Anchor::End, false, name);
    }
    svg.text(
        12.0 + FONT / 2.0,
        top + plot_h / 2.0,
        FONT,
        Anchor::Middle,
        true,
        &shorten(&chart.y_label, (plot_h / text_width(1, FONT)) as usize),
    );
    let base = top + plot_h + 8.0;
    for (i, l) in labels.iter().enumerate().step_by(label_step) {
        let x = left + (i as f64 + 0.5) * cell_w;
        if labels_up {
            svg.text(x, base, FONT, Anchor::End, true, l);
        } else {
            svg.text(x, base + FONT / 2.0, FONT, Anchor::Middle, false, l);
        }
    }
    let x_label = if chart.x_label.is_empty() {
        "interval"
    } else {
        &chart.x_label
    };
    svg.text(
        left + plot_w / 2.0,
        base + label_room + 8.0 + FONT / 2.0,
        FONT,
        Anchor::Middle,
        false,
        x_label,
    );
    // The scale: a strip from nothing to the most.
    let sx = left + plot_w + gap;
    for k in 0..10 {
        let t = (k as f64 + 1.0) / 10.0;
        svg.rect(
            sx,
            top + 100.0 - (k + 1) as f64 * 10.0,
            14.0,
            10.0,
            &shade(t),
            "",
        );
    }
    svg.rect(sx, top, 14.0, 100.0, "none", " stroke=\"#000000\"");
    svg.text(sx, top + 112.0, FONT, Anchor::Start, false, &scale_label);
    svg.text(sx, top + 128.0, FONT, Anchor::Start, false, "(log scale)");
    svg.finish(width, height.max(top + 140.0 + bottom))
}

impl Renderer for SvgRenderer {
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
        let chart = report.chart.clone().unwrap_or_else(|| fallback(report));
        let svg = match chart.style {
            Style::Heat => draw_heat(&chart),
            Style::Bars | Style::Lines => draw_xy(&chart),
        };
        out.write_all(svg.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_shortened_in_the_middle() {
        assert_eq!(shorten("abc", 5), "abc");
        assert_eq!(shorten("/usr/lib/libc.so.6", 9), "/usr…so.6");
        assert_eq!(shorten("/usr/lib/libc.so.6", 9).chars().count(), 9);
    }

    /// Ticks of counts are integers; of sizes, in the unit that fits.
    #[test]
    fn axes() {
        let a = Axis::new(Quantity::Count, 0.0, 3.0);
        assert!(
            a.ticks().iter().all(|(_, t)| !t.contains('.')),
            "{:?}",
            a.ticks()
        );
        let a = Axis::new(Quantity::Pages(4096), 0.0, 65536.0);
        assert_eq!(a.unit, "MiB");
        assert_eq!(a.ticks().last().unwrap().1, "300");
        let a = Axis::new(Quantity::Ratio, 0.0, 0.92);
        assert_eq!(a.ticks().last().unwrap().1, "1.0");
        let a = Axis::new(Quantity::Pages(4096), -3.0, 10.0);
        assert_eq!(a.unit, "KiB");
        assert!(a.lo < 0.0);
    }
}
