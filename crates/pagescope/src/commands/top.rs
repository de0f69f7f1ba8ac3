//! `pagescope top`: collects with `serve`'s collector every `--interval`,
//! draws the view ([`crate::top`]) in the terminal's alternate screen in
//! raw mode, and reads keys between refreshes. The terminal is put back
//! as it was on every way out: `q` (exit 0), Ctrl-C or SIGINT (130),
//! SIGTERM (0), an error, or a panic (ratatui's hook restores it first).

use crate::cli::{TopArgs, TopBackend};
use crate::serve::collect::{Collector, Settings};
use crate::serve::schedule::Schedule;
use crate::serve::working_set::WorkingSet;
use crate::top::detail::{self, Detail};
use crate::top::draw::{self, Header};
use crate::top::state::{Column, Mode, State};
use crate::BadInput;
use anyhow::{Context, Result};
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use pagescope_linux::observer::ObserverLock;
use pagescope_linux::{signals, Root};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Runs `top`; returns the exit code.
pub fn run(args: TopArgs) -> Result<u8> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(anyhow::anyhow!(
            "pagescope top draws in a terminal, and standard input or output is not one \
             (for figures in a pipe or a file: pagescope report processes, or pagescope serve)"
        ))
        .context(BadInput);
    }
    signals::block().context("blocking SIGINT and SIGTERM")?;
    let root = Root::default();
    let proc = root.proc.clone();
    let settings = Settings {
        root,
        max_process_size: args.max_process_size,
        pagemap_above: args.pagemap_above,
        max_working_set_size: args.max_working_set_size,
        cmdline: false,
        max_age: args.max_age,
    };
    // A working set clears every process's accessed bits: one such
    // pagescope at a time. If another has them, top goes on without.
    let mut refused = None;
    let mut _machine = None;
    let (ws, backend) = match args.backend {
        TopBackend::Refs => match ObserverLock::acquire_machine(&settings.root.run, "top") {
            Ok(lock) => {
                _machine = lock;
                (WorkingSet::refs(), "refs")
            }
            Err(e) => {
                refused = Some(match ObserverLock::machine_holder(&settings.root.run) {
                    Some(holder) => format!(
                        "no working set: pagescope {holder} clears every process's \
                         referenced bits already, and two would clear each other's"
                    ),
                    None => format!("no working set: {e}"),
                });
                (WorkingSet::None, "none")
            }
        },
        TopBackend::None => (WorkingSet::None, "none"),
    };
    let mut collector = Collector::new(settings, ws);
    let schedule = Schedule {
        interval: args.interval,
        budget: args.budget / 100.0,
    };
    let terminal = match ratatui::try_init() {
        Ok(t) => t,
        Err(e) => {
            ratatui::restore();
            return Err(e).context("setting up the terminal");
        }
    };
    let mut screen = Screen(Some(terminal));
    let mut app = App {
        state: State::default(),
        header: Header {
            interval: duration(args.interval),
            backend: backend.into(),
            ..Header::default()
        },
        detail: None,
        proc,
        buf: Vec::new(),
    };
    let mut mark = (process_cpu(), Instant::now());
    let mut next = Instant::now();
    let mut first = true;
    let mut dirty = true;
    loop {
        if Instant::now() >= next {
            let started = Instant::now();
            let mut period = args.interval;
            match collector.collect() {
                Ok(c) => {
                    period = schedule.period(c.cpu);
                    app.state.update(c);
                    app.header.error = None;
                }
                Err(e) => app.header.error = Some(e.to_string()),
            }
            app.header.interval = match period > args.interval {
                true => format!(
                    "{} (--interval {} stretched by --budget {}%)",
                    duration(period),
                    duration(args.interval),
                    args.budget
                ),
                false => duration(args.interval),
            };
            app.read_detail();
            app.header.note = match (&refused, note(&app.state)) {
                (Some(r), Some(n)) => Some(format!("{r}; {n}")),
                (r, n) => r.clone().or(n),
            };
            let (cpu, now) = (process_cpu(), Instant::now());
            if !first {
                let used = cpu.saturating_sub(mark.0).as_secs_f64();
                let wall = now.duration_since(mark.1).as_secs_f64();
                app.header.cpu_percent = Some(100.0 * used / wall.max(1e-3));
            }
            first = false;
            mark = (cpu, now);
            next = started + period;
            dirty = true;
        }
        if dirty {
            let t = screen.0.as_mut().expect("the terminal lives until the end");
            t.draw(|f| draw::draw(f, &app.state, &app.header, app.detail.as_ref()))
                .context("drawing")?;
            dirty = false;
        }
        if signals::stop_pending() {
            let code = match signals::wait(Duration::ZERO) {
                Some(sig) if signals::is_interrupt(sig) => 130,
                _ => 0,
            };
            return Ok(code);
        }
        let wait = next
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(250));
        if event::poll(wait).context("reading the terminal")? {
            match event::read().context("reading the terminal")? {
                Event::Key(k) if k.kind != KeyEventKind::Release => {
                    if let Some(code) = app.key(k) {
                        return Ok(code);
                    }
                    dirty = true;
                }
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
    }
}

/// The terminal, restored when dropped (however `run` ends).
struct Screen(Option<ratatui::DefaultTerminal>);

impl Drop for Screen {
    fn drop(&mut self) {
        if let Some(mut t) = self.0.take() {
            let _ = t.show_cursor();
        }
        ratatui::restore();
    }
}

/// The view and what it reads between refreshes.
struct App {
    state: State,
    header: Header,
    detail: Option<Detail>,
    proc: std::path::PathBuf,
    buf: Vec<u8>,
}

impl App {
    /// Reads the VMAs of the process in the detail, if one is.
    fn read_detail(&mut self) {
        self.detail = self
            .state
            .detail
            .map(|pid| detail::read(&self.proc, pid, &mut self.buf));
    }

    /// Handles a key; `Some(exit code)` to leave.
    fn key(&mut self, k: KeyEvent) -> Option<u8> {
        let s = &mut self.state;
        if k.modifiers.contains(KeyModifiers::CONTROL) {
            return matches!(k.code, KeyCode::Char('c')).then_some(130);
        }
        if s.editing {
            match k.code {
                KeyCode::Char(c) => s.filter.push(c),
                KeyCode::Backspace => {
                    s.filter.pop();
                }
                KeyCode::Enter => s.editing = false,
                KeyCode::Esc => {
                    s.filter.clear();
                    s.editing = false;
                }
                _ => return None,
            }
            s.rebuild();
            return None;
        }
        let page = 20;
        let step = match k.code {
            KeyCode::Up => Some(-1),
            KeyCode::Down => Some(1),
            KeyCode::PageUp => Some(-page),
            KeyCode::PageDown => Some(page),
            KeyCode::Home => Some(isize::MIN / 2),
            KeyCode::End => Some(isize::MAX / 2),
            _ => None,
        };
        if let Some(step) = step {
            match s.detail {
                Some(_) => {
                    let n = match &self.detail {
                        Some(Detail::Vmas(v)) => v.len(),
                        _ => 0,
                    };
                    let at = s.vma_offset as isize + step;
                    s.vma_offset = at.clamp(0, n.saturating_sub(1) as isize) as usize;
                }
                None => s.move_selection(step),
            }
            return None;
        }
        match k.code {
            KeyCode::Char('q') => return Some(0),
            KeyCode::Esc => {
                if s.detail.take().is_none() && !s.filter.is_empty() {
                    s.filter.clear();
                    s.rebuild();
                }
                self.detail = None;
            }
            KeyCode::Enter if s.mode == Mode::Processes => {
                s.detail = s.selected_pid();
                s.vma_offset = 0;
                self.read_detail();
            }
            KeyCode::Char('/') if s.detail.is_none() => s.editing = true,
            KeyCode::Char('c') if s.detail.is_none() => {
                s.mode = match s.mode {
                    Mode::Processes => Mode::Cgroups,
                    Mode::Cgroups => Mode::Processes,
                };
                s.selected = None;
                s.rebuild();
            }
            KeyCode::Char(c) => {
                if let Some(col) = Column::of_key(c) {
                    s.sort = col;
                    s.rebuild();
                }
            }
            _ => {}
        }
        None
    }
}

/// Why some processes' figures are missing, in one line.
fn note(s: &State) -> Option<String> {
    let n = s.unread();
    let all = s.collection.processes.len();
    let ws = s.collection.working_set_skipped.unwrap_or(0);
    if n == 0 {
        return (ws > 0).then(|| {
            format!(
                "{ws} of {all} processes are above --max-working-set-size: their working \
                 set shows - (clearing their referenced bits would stall them)"
            )
        });
    }
    let why = match rustix::process::geteuid().is_root() {
        false => "cannot be read without root (smaps_rollup needs ptrace access)",
        true => "were not walked (refused, or above --max-process-size)",
    };
    Some(format!(
        "{n} of {all} processes {why}: their PSS, USS and working set show -"
    ))
}

/// The CPU time of every thread of this process.
fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// `2s`, `500ms`, `12.8s`.
fn duration(d: Duration) -> String {
    match d.subsec_millis() {
        0 => format!("{}s", d.as_secs()),
        _ if d.as_secs() == 0 => format!("{}ms", d.as_millis()),
        _ => format!("{:.1}s", d.as_secs_f64()),
    }
}
