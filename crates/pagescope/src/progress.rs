//! The progress bar on stderr: drawn only when stderr is a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pagescope_linux::snapshot::Progress;
use std::io::IsTerminal;

/// A progress bar over processes, or nothing when quiet or not a terminal.
pub struct Bar {
    bar: Option<ProgressBar>,
}

impl Bar {
    /// A bar, hidden unless stderr is a terminal and `quiet` is false.
    pub fn new(quiet: bool) -> Bar {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{bar:30}] {pos}/{len} processes, {msg} ({elapsed})",
                )
                .expect("static template")
                .progress_chars("=> "),
            );
            b
        });
        Bar { bar }
    }

    /// Updates the bar.
    pub fn update(&self, p: Progress) {
        if let Some(b) = &self.bar {
            b.set_length(p.total as u64);
            b.set_position(p.done as u64);
            b.set_message(format!("{} pages", p.pages));
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// A live line on stderr, redrawn every 200 ms by its own thread from
/// `message`, or nothing when quiet or stderr is not a terminal. Start it
/// with the stop signals blocked (the thread inherits the mask).
pub struct Spinner {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Spinner {
    /// Starts the line.
    pub fn start(quiet: bool, message: impl Fn() -> String + Send + 'static) -> Spinner {
        use std::sync::atomic::Ordering;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let done = done.clone();
            std::thread::spawn(move || {
                let bar = ProgressBar::new_spinner();
                while !done.load(Ordering::Relaxed) {
                    bar.set_message(message());
                    bar.tick();
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
                bar.finish_and_clear();
            })
        });
        Spinner { done, thread }
    }

    /// Clears the line.
    pub fn finish(mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
