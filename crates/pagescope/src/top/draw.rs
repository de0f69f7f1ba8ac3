//! The screen: the header (the refresh, the sort key, pagescope's own
//! CPU, the machine's totals, a note on what could not be read), then the
//! table of processes or cgroups, or the detail of one process (its
//! working set over the refreshes as a sparkline, its VMAs), and a line
//! of keys (or the filter being typed). Names, paths and messages are
//! drawn [`printable`]: their control characters as `?`.

use super::detail::{Detail, Vma};
use super::state::{Column, Mode, State};
use pagescope_render::report::{human_size, printable};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Sparkline, Table, TableState};
use ratatui::Frame;

/// What the header says besides the collection.
#[derive(Debug, Default)]
pub struct Header {
    /// The refresh interval, as the user gave it.
    pub interval: String,
    /// The working-set backend's name (`none`: none).
    pub backend: String,
    /// pagescope's own CPU over the last refresh, percent of one core.
    pub cpu_percent: Option<f64>,
    /// Why some figures are missing (one line).
    pub note: Option<String>,
    /// The last collection's error, if it failed.
    pub error: Option<String>,
}

/// A size for the table: human units, `-` when missing.
pub fn size(v: Option<u64>) -> String {
    match v {
        Some(b) => human_size(b as f64),
        None => "-".into(),
    }
}

const SIZES: [Column; 5] = [
    Column::Pss,
    Column::Uss,
    Column::Rss,
    Column::Swap,
    Column::WorkingSet,
];

/// Draws the whole screen.
pub fn draw(f: &mut Frame<'_>, s: &State, h: &Header, detail: Option<&Detail>) {
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());
    draw_header(f, head, s, h);
    match (s.detail, detail) {
        (Some(pid), Some(d)) => draw_detail(f, body, s, pid, d),
        _ => draw_table(f, body, s),
    }
    let keys = if s.editing {
        Line::from(vec![
            Span::styled("filter: ", Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(format!("{}_", printable(&s.filter))),
            Span::styled(
                "   (Enter keeps it, Esc clears it)",
                Style::new().fg(Color::DarkGray),
            ),
        ])
    } else if s.detail.is_some() {
        Line::from("Esc back   Up/Down scroll the VMAs   q quit")
    } else {
        Line::from(
            "p u r s w sort by PSS USS RSS swap wset   n i by name pid   / filter   \
             c cgroups   Enter detail   q quit",
        )
    };
    f.render_widget(
        Paragraph::new(keys).style(Style::new().fg(Color::Gray)),
        foot,
    );
}

fn draw_header(f: &mut Frame<'_>, area: Rect, s: &State, h: &Header) {
    let c = &s.collection;
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let cpu = match h.cpu_percent {
        Some(p) => format!("{p:.1}%"),
        None => "-".into(),
    };
    let what = match s.mode {
        Mode::Processes => format!("{} processes", c.processes.len()),
        Mode::Cgroups => format!("{} cgroups", c.cgroups.len()),
    };
    let mut first = vec![
        Span::styled("pagescope top", bold),
        Span::raw(format!(
            "   every {}   working set: {}   sort: ",
            h.interval, h.backend
        )),
        Span::styled(s.sort.title(), bold),
        Span::raw(format!("   own CPU {cpu}   {what}")),
    ];
    if !s.filter.is_empty() {
        first.push(Span::raw(format!("   filter: {}", printable(&s.filter))));
    }
    let m = &c.machine;
    let ps = c.page_size;
    let pages = |p: u64| human_size((p * ps) as f64);
    let second = Line::from(vec![
        Span::styled("machine", bold),
        Span::raw(format!(
            "   user {}   page cache {}   kernel {}   free {}   of {}",
            pages(m.anon_pages_meminfo),
            pages(m.page_cache_pages),
            pages(m.slab_pages + m.page_table_pages + m.kernel_stack_pages),
            pages(m.free_pages),
            pages(m.mem_total_pages),
        )),
    ]);
    let third = match (&h.error, &h.note) {
        (Some(e), _) => Line::styled(
            format!("error: {}", printable(e)),
            Style::new().fg(Color::Red),
        ),
        (None, Some(n)) => Line::styled(
            format!("note: {}", printable(n)),
            Style::new().fg(Color::Yellow),
        ),
        (None, None) => Line::from(""),
    };
    f.render_widget(Paragraph::new(vec![Line::from(first), second, third]), area);
}

fn right(s: String) -> Cell<'static> {
    Cell::from(Line::from(s).right_aligned())
}

fn heading(col: Column, sort: Column) -> Cell<'static> {
    let title = if col == sort {
        format!("{}▼", col.title())
    } else {
        col.title().to_string()
    };
    let style = match col == sort {
        true => Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
        false => Style::new().add_modifier(Modifier::BOLD),
    };
    match col {
        Column::Name => Cell::from(title).style(style),
        _ => Cell::from(Line::from(title).right_aligned()).style(style),
    }
}

fn draw_table(f: &mut Frame<'_>, area: Rect, s: &State) {
    let processes = s.mode == Mode::Processes;
    let mut head: Vec<Cell<'_>> = Vec::new();
    let mut widths = Vec::new();
    if processes {
        head.push(heading(Column::Pid, s.sort));
        widths.push(Constraint::Length(8));
    }
    head.push(match processes {
        true => heading(Column::Name, s.sort),
        false => Cell::from("CGROUP").style(Style::new().add_modifier(Modifier::BOLD)),
    });
    widths.push(match processes {
        true => Constraint::Length(16),
        false => Constraint::Min(24),
    });
    for col in SIZES {
        head.push(heading(col, s.sort));
        widths.push(Constraint::Length(11));
    }
    if processes {
        head.push(
            Cell::from(Line::from("AGE").right_aligned())
                .style(Style::new().add_modifier(Modifier::BOLD)),
        );
        widths.push(Constraint::Length(6));
        widths.push(Constraint::Min(0));
    }
    let rows = s.rows.iter().map(|r| {
        let mut cells = Vec::new();
        if let Some(pid) = r.pid {
            cells.push(right(pid.to_string()));
        }
        cells.push(Cell::from(printable(&r.name).into_owned()));
        for col in SIZES {
            cells.push(right(size(col.size(&r.figures).flatten())));
        }
        if r.pid.is_some() {
            cells.push(right(match r.age {
                Some(a) => format!("{}s", a.as_secs()),
                None => "-".into(),
            }));
        }
        Row::new(cells)
    });
    let table = Table::new(rows, widths)
        .header(Row::new(head))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(Block::new().borders(Borders::TOP));
    let mut state = TableState::default().with_selected(s.selected_index());
    f.render_stateful_widget(table, area, &mut state);
}

fn draw_detail(f: &mut Frame<'_>, area: Rect, s: &State, pid: u32, d: &Detail) {
    let [info, spark, vmas] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(7),
        Constraint::Min(3),
    ])
    .areas(area);
    let p = s.collection.processes.iter().find(|p| p.pid == pid);
    let name = p.map_or("(gone)", |p| p.comm.as_str());
    let mut line = vec![Span::styled(
        format!("pid {pid} {}", printable(name)),
        Style::new().add_modifier(Modifier::BOLD),
    )];
    if let Some(p) = p {
        for col in SIZES {
            let v = size(col.size(&p.figures).flatten());
            line.push(Span::raw(format!("   {} {v}", col.title())));
        }
    }
    f.render_widget(
        Paragraph::new(Line::from(line)).block(Block::new().borders(Borders::TOP)),
        info,
    );
    let history: Vec<u64> = s
        .history
        .get(&pid)
        .map(|h| h.iter().copied().collect())
        .unwrap_or_default();
    let title = match (history.last(), history.iter().max()) {
        (Some(last), Some(peak)) => format!(
            " working set per refresh: {} refreshes, last {}, peak {} ",
            history.len(),
            human_size(*last as f64),
            human_size(*peak as f64)
        ),
        _ => " working set per refresh: none yet ".to_string(),
    };
    // The latest refreshes that fit, right-aligned like a scrolling chart.
    let width = spark.width.saturating_sub(2) as usize;
    let shown = &history[history.len().saturating_sub(width)..];
    f.render_widget(
        Sparkline::default()
            .block(Block::new().borders(Borders::ALL).title(title))
            .data(shown)
            .max(history.iter().copied().max().unwrap_or(0).max(1))
            .style(Style::new().fg(Color::Green)),
        spark,
    );
    match d {
        Detail::Unread(why) => f.render_widget(
            Paragraph::new(format!("VMAs: {}", printable(why)))
                .block(Block::new().borders(Borders::TOP)),
            vmas,
        ),
        Detail::Vmas(list) => draw_vmas(f, vmas, list, s.vma_offset),
    }
}

/// A bar of `width` cells, the resident share of the VMA filled.
fn resident_bar(v: &Vma, width: usize) -> String {
    let share = match v.bytes.size {
        0 => 0.0,
        n => v.bytes.rss as f64 / n as f64,
    };
    let full = ((share * width as f64).round() as usize).min(width);
    format!("{}{}", "█".repeat(full), "·".repeat(width - full))
}

fn draw_vmas(f: &mut Frame<'_>, area: Rect, list: &[Vma], offset: usize) {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let head = Row::new(vec![
        Cell::from("ADDRESS"),
        Cell::from("PERM"),
        right("SIZE".into()),
        right("RSS".into()),
        right("PSS".into()),
        right("SWAP".into()),
        right("REF".into()),
        Cell::from("RESIDENT"),
        Cell::from("PATH"),
    ])
    .style(bold);
    let offset = offset.min(list.len().saturating_sub(1));
    let rows = list[offset..].iter().map(|v| {
        let b = &v.bytes;
        Row::new(vec![
            Cell::from(format!("{:x}-{:x}", v.map.start, v.map.end)),
            Cell::from(v.map.perms.clone()),
            right(human_size(b.size as f64)),
            right(human_size(b.rss as f64)),
            right(human_size(b.pss as f64)),
            right(human_size(b.swap as f64)),
            right(human_size(b.referenced as f64)),
            Cell::from(resident_bar(v, 10)),
            Cell::from(match v.map.path.as_str() {
                "" => "[anon]".to_string(),
                p => printable(p).into_owned(),
            }),
        ])
    });
    let widths = [
        Constraint::Length(25),
        Constraint::Length(4),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Min(10),
    ];
    let title = format!(" {} VMAs, largest resident first ", list.len());
    let table = Table::new(rows, widths)
        .header(head)
        .block(Block::new().borders(Borders::TOP).title(title));
    f.render_widget(table, area);
}
