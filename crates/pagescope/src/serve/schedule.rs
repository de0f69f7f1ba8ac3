//! The collecting thread: collects, renders, stores the text for the
//! scrapes, and waits for the next turn: `--interval` after the last
//! start, and no sooner than its CPU time divided by the budget (so that
//! collections use at most that share of one core however large the
//! machine), until told to stop.

use super::collect::Collector;
use super::http::Latest;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When to collect.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// Time between the starts of two collections, at least.
    pub interval: Duration,
    /// Share of one core (0 to 1) the collections may use.
    pub budget: f64,
}

impl Schedule {
    /// How long after its start the next collection may begin, given the
    /// CPU time `cpu` this one took.
    pub fn period(&self, cpu: Duration) -> Duration {
        self.interval.max(cpu.div_f64(self.budget))
    }
}

/// Collects until `stop` says so (or its sender is dropped).
pub fn run(mut collector: Collector, schedule: Schedule, latest: &Latest, stop: &Receiver<()>) {
    let mut cpu_total = Duration::ZERO;
    loop {
        let started = Instant::now();
        let period = match collector.collect() {
            Ok(c) => {
                cpu_total += c.cpu;
                let text = super::metrics::render(&c, cpu_total);
                *latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(text));
                schedule.period(c.cpu)
            }
            Err(e) => {
                // The last good text stays; the next turn tries again.
                eprintln!("warning: collection failed: {e}");
                schedule.interval
            }
        };
        let wait = period.saturating_sub(started.elapsed());
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_stretches_the_period() {
        let s = Schedule {
            interval: Duration::from_secs(15),
            budget: 0.05,
        };
        // 0.1 s of CPU at 5%: 2 s, under the interval.
        assert_eq!(
            s.period(Duration::from_millis(100)),
            Duration::from_secs(15)
        );
        // 1 s of CPU at 5%: 20 s.
        assert_eq!(s.period(Duration::from_secs(1)), Duration::from_secs(20));
    }
}
