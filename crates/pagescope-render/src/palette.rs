//! The charts' colours: one per class, the same class the same colour in
//! every chart, and the classes of one chart told apart.
//!
//! The colours are Kelly's twenty colours of maximum contrast (K. L.
//! Kelly, "Twenty-two colors of maximum contrast", 1965, less white and
//! black). Each class a chart may draw has its own; the twelve frame
//! classes of `physmap` are at least 27 apart in CIELAB (ΔE*76), the eight
//! page classes of `processes` at least 31 (checked by the tests).

/// Kelly's colours, in his order.
pub const KELLY: [(u8, u8, u8); 20] = [
    (0xF3, 0xC3, 0x00), // vivid yellow
    (0x87, 0x56, 0x92), // strong purple
    (0xF3, 0x84, 0x00), // vivid orange
    (0xA1, 0xCA, 0xF1), // very light blue
    (0xBE, 0x00, 0x32), // vivid red
    (0xC2, 0xB2, 0x80), // grayish yellow
    (0x84, 0x84, 0x82), // medium gray
    (0x00, 0x88, 0x56), // vivid green
    (0xE6, 0x8F, 0xAC), // strong purplish pink
    (0x00, 0x67, 0xA5), // strong blue
    (0xF9, 0x93, 0x79), // strong yellowish pink
    (0x60, 0x4E, 0x97), // strong violet
    (0xF6, 0xA6, 0x00), // vivid orange yellow
    (0xB3, 0x44, 0x6C), // strong purplish red
    (0xDC, 0xD3, 0x00), // vivid greenish yellow
    (0x88, 0x2D, 0x17), // strong reddish brown
    (0x8D, 0xB6, 0x00), // vivid yellowish green
    (0x65, 0x45, 0x22), // deep yellowish brown
    (0xE2, 0x58, 0x22), // vivid reddish orange
    (0x2B, 0x3D, 0x26), // dark olive green
];

/// The colour (an index into [`KELLY`]) of each class that charts draw.
const CLASSES: [(&str, usize); 42] = [
    // Frame classes (physmap).
    ("free", 3),
    ("anon", 4),
    ("cache_mapped", 7),
    ("cache_unmapped", 16),
    ("slab", 1),
    ("page_table", 2),
    ("kernel_other", 17),
    ("reserved", 6),
    ("huge", 9),
    ("thp", 8),
    ("ksm", 0),
    ("zero", 19),
    // Page classes of a process (processes, diff).
    ("stack", 15),
    ("data", 12),
    ("text", 13),
    ("heap", 18),
    ("lib_bss", 5),
    ("lib_data", 14),
    ("lib_text", 10),
    ("other", 6),
    // Segments of a unit (unit-totals).
    ("rodata", 10),
    ("bss", 5),
    // What was referenced (recordings).
    ("user", 4),
    ("page cache", 7),
    // Reads and writes (refs).
    ("reads", 9),
    ("writes", 2),
    // Sharing (vmas, alerts).
    ("single", 18),
    ("shared", 9),
    ("sharing unknown", 6),
    // Residency (units).
    ("resident", 7),
    ("not resident", 3),
    // Policies (mrc).
    ("LRU", 9),
    ("FIFO", 2),
    ("CLOCK", 7),
    // Working set (wss).
    ("interval", 9),
    ("window", 4),
    // One series of a view's own.
    ("rss delta", 9),
    ("pages", 9),
    ("intervals", 9),
    ("regions", 9),
    ("resident memory", 9),
    ("references", 9),
];

/// The order in which series of no known class take colours: the most
/// different first.
const OTHERS: [usize; 10] = [9, 2, 7, 4, 1, 0, 17, 3, 8, 6];

/// The colours of a chart's series: each known class its own colour, the
/// others (`node 0`, a view's first numeric column) the first colours
/// no other series of the chart has.
pub fn colours(series: &[String]) -> Vec<(u8, u8, u8)> {
    let known = |name: &str| {
        let name = if name.ends_with(" intervals") {
            "window"
        } else {
            name
        };
        CLASSES.iter().find(|(n, _)| *n == name).map(|&(_, i)| i)
    };
    let mut used: Vec<usize> = series.iter().filter_map(|s| known(s)).collect();
    series
        .iter()
        .map(|s| {
            let i = known(s).unwrap_or_else(|| {
                let free = OTHERS
                    .iter()
                    .copied()
                    .chain(0..KELLY.len())
                    .find(|k| !used.contains(k))
                    .unwrap_or(used.len() % KELLY.len());
                used.push(free);
                free
            });
            KELLY[i]
        })
        .collect()
}

/// The CIELAB coordinates of an sRGB colour (D65), to measure how far
/// apart two colours look.
pub fn lab((r, g, b): (u8, u8, u8)) -> [f64; 3] {
    let lin = |c: u8| {
        let c = c as f64 / 255.0;
        if c > 0.04045 {
            ((c + 0.055) / 1.055).powf(2.4)
        } else {
            c / 12.92
        }
    };
    let (r, g, b) = (lin(r), lin(g), lin(b));
    let x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047;
    let y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
    let z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883;
    let f = |t: f64| {
        if t > 0.008856 {
            t.cbrt()
        } else {
            7.787 * t + 16.0 / 116.0
        }
    };
    [
        116.0 * f(y) - 16.0,
        500.0 * (f(x) - f(y)),
        200.0 * (f(y) - f(z)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn min_distance(names: &[&str]) -> f64 {
        let series: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let c = colours(&series);
        let mut min = f64::MAX;
        for i in 0..c.len() {
            for j in i + 1..c.len() {
                let (a, b) = (lab(c[i]), lab(c[j]));
                let d =
                    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt();
                min = min.min(d);
            }
        }
        min
    }

    /// The twelve frame classes of physmap are twelve colours, none close
    /// to another; so are the page classes of a process.
    #[test]
    fn classes_are_told_apart() {
        let frames: Vec<&str> = pagescope_core::physclass::ALL
            .iter()
            .map(|c| c.name())
            .collect();
        assert_eq!(frames.len(), 12);
        assert!(min_distance(&frames) > 27.0, "{}", min_distance(&frames));
        let pages = [
            "stack", "data", "text", "heap", "lib_bss", "lib_data", "lib_text", "other",
        ];
        assert!(min_distance(&pages) > 30.0, "{}", min_distance(&pages));
        for chart in [
            &["text", "rodata", "data", "bss"][..],
            &["LRU", "FIFO", "CLOCK"],
            &["user", "page cache"],
            &["single", "shared", "sharing unknown"],
            &["node 0", "node 1", "node 2"],
        ] {
            assert!(min_distance(chart) > 30.0, "{chart:?}");
        }
    }

    /// A class has its colour in every chart, whatever else it holds.
    #[test]
    fn a_class_keeps_its_colour() {
        let a = colours(&["data".into(), "text".into()]);
        let b = colours(&["text".into(), "rodata".into(), "data".into(), "bss".into()]);
        assert_eq!(a[0], b[2]);
        assert_eq!(a[1], b[0]);
    }
}
