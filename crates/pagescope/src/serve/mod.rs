//! `pagescope serve`: memory metrics for Prometheus.
//!
//! One thread collects on its own schedule ([`schedule`]), at most as
//! often as `--interval` and as `--budget` allow, and renders each
//! collection as OpenMetrics text; the HTTP thread ([`http`]) answers
//! every scrape with the last text, so a scrape costs a copy and never
//! walks a process.
//!
//! The modules, each using only those listed before it: `figures` (a
//! process's figures), `text` (the /proc text read at each collection),
//! `refresh` (which processes are walked again, and why), `tracked` (a
//! process followed across collections, its files kept open),
//! `working_set` (the backends), `collect` (one collection), `metrics`
//! (its text), `schedule` (the collecting thread), `http` (the endpoint).

pub mod collect;
pub mod figures;
pub mod http;
pub mod metrics;
pub mod paced;
pub mod refresh;
pub mod schedule;
pub mod text;
pub mod tracked;
pub mod working_set;
