//! What a collection finds of one process (or the sum of a cgroup's).

/// RSS, PSS, USS, swap and working set in bytes; `None` where not read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Figures {
    /// Resident.
    pub rss: Option<u64>,
    /// Proportional set size.
    pub pss: Option<u64>,
    /// Unique set size (smaps Private_Clean + Private_Dirty).
    pub uss: Option<u64>,
    /// In swap.
    pub swap: Option<u64>,
    /// Referenced since the last collection.
    pub working_set: Option<u64>,
}

impl Figures {
    /// Adds `other`'s figures to those it has (a sum keeps a figure that
    /// some member lacks: the members that have it are summed).
    pub fn add(&mut self, other: &Figures) {
        let add = |a: &mut Option<u64>, b: Option<u64>| {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0) + b);
            }
        };
        add(&mut self.rss, other.rss);
        add(&mut self.pss, other.pss);
        add(&mut self.uss, other.uss);
        add(&mut self.swap, other.swap);
        add(&mut self.working_set, other.working_set);
    }
}

/// A process as the collector first met it: its figures and how its
/// working set is to be read.
pub struct Seen {
    /// The pid.
    pub pid: u32,
    /// Its start time (clock ticks after boot): a pid reused is another
    /// process.
    pub start_time: u64,
    /// Its figures, the working set still to come.
    pub figures: Figures,
    /// Whether its smaps_rollup was read (a process skipped or refused
    /// gets no working set either).
    pub walked: bool,
}
