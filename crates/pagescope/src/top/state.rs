//! What `top` shows and how: the rows of the last collection (processes
//! or cgroups), sorted by a column and filtered by name, the selected
//! row, and each process's working set over the refreshes seen.

use crate::serve::collect::Collection;
use crate::serve::figures::Figures;
use std::cmp::Ordering;
use std::collections::{HashMap, VecDeque};

/// How many refreshes of a process's working set are kept.
pub const HISTORY: usize = 240;

/// A column to sort by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    /// The pid, smallest first.
    Pid,
    /// The name, in alphabetical order.
    Name,
    /// PSS, largest first (and so the sizes below).
    Pss,
    /// USS.
    Uss,
    /// RSS.
    Rss,
    /// Swap.
    Swap,
    /// Working set.
    WorkingSet,
}

impl Column {
    /// The column a key sorts by.
    pub fn of_key(c: char) -> Option<Column> {
        Some(match c {
            'i' => Column::Pid,
            'n' => Column::Name,
            'p' => Column::Pss,
            'u' => Column::Uss,
            'r' => Column::Rss,
            's' => Column::Swap,
            'w' => Column::WorkingSet,
            _ => return None,
        })
    }

    /// Its heading.
    pub fn title(self) -> &'static str {
        match self {
            Column::Pid => "PID",
            Column::Name => "NAME",
            Column::Pss => "PSS",
            Column::Uss => "USS",
            Column::Rss => "RSS",
            Column::Swap => "SWAP",
            Column::WorkingSet => "WSET",
        }
    }

    /// The size it reads from figures, for the size columns.
    pub fn size(self, f: &Figures) -> Option<Option<u64>> {
        Some(match self {
            Column::Pss => f.pss,
            Column::Uss => f.uss,
            Column::Rss => f.rss,
            Column::Swap => f.swap,
            Column::WorkingSet => f.working_set,
            Column::Pid | Column::Name => return None,
        })
    }
}

/// Processes, or the sums of their cgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One row per process.
    Processes,
    /// One row per cgroup.
    Cgroups,
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The process's pid (none for a cgroup).
    pub pid: Option<u32>,
    /// Its command name, or the cgroup's path.
    pub name: String,
    /// Its figures.
    pub figures: Figures,
    /// How old its figures are (a process; `None` for a cgroup, or a
    /// process never walked).
    pub age: Option<std::time::Duration>,
}

/// The view's state.
#[derive(Debug)]
pub struct State {
    /// Processes or cgroups.
    pub mode: Mode,
    /// The column rows are sorted by.
    pub sort: Column,
    /// Only rows whose name holds this (any case).
    pub filter: String,
    /// Whether keys go to the filter.
    pub editing: bool,
    /// The selected row's key (pid, or cgroup path), kept across
    /// refreshes.
    pub selected: Option<Key>,
    /// The process whose detail is shown.
    pub detail: Option<u32>,
    /// The first VMA shown in the detail.
    pub vma_offset: usize,
    /// The rows shown, in order.
    pub rows: Vec<Row>,
    /// Working set in bytes per refresh, oldest first, per pid.
    pub history: HashMap<u32, VecDeque<u64>>,
    /// The last collection.
    pub collection: Collection,
}

/// What identifies a row across refreshes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    /// A process.
    Pid(u32),
    /// A cgroup.
    Cgroup(String),
}

impl Row {
    fn key(&self) -> Key {
        match self.pid {
            Some(p) => Key::Pid(p),
            None => Key::Cgroup(self.name.clone()),
        }
    }
}

impl Default for State {
    fn default() -> State {
        State {
            mode: Mode::Processes,
            sort: Column::Pss,
            filter: String::new(),
            editing: false,
            selected: None,
            detail: None,
            vma_offset: 0,
            rows: Vec::new(),
            history: HashMap::new(),
            collection: Collection::default(),
        }
    }
}

impl State {
    /// Takes a new collection: extends the histories (dropping those of
    /// processes gone) and rebuilds the rows.
    pub fn update(&mut self, c: Collection) {
        let mut history = std::mem::take(&mut self.history);
        for p in &c.processes {
            let mut h = history.remove(&p.pid).unwrap_or_default();
            if let Some(ws) = p.figures.working_set {
                if h.len() == HISTORY {
                    h.pop_front();
                }
                h.push_back(ws);
            }
            self.history.insert(p.pid, h);
        }
        self.collection = c;
        self.rebuild();
    }

    /// Rebuilds the rows from the last collection (after a change of
    /// mode, sort or filter).
    pub fn rebuild(&mut self) {
        let c = &self.collection;
        let mut rows: Vec<Row> = match self.mode {
            Mode::Processes => c
                .processes
                .iter()
                .map(|p| Row {
                    pid: Some(p.pid),
                    name: p.comm.clone(),
                    figures: p.figures,
                    age: p.age,
                })
                .collect(),
            Mode::Cgroups => c
                .cgroups
                .iter()
                .map(|(name, f)| Row {
                    pid: None,
                    name: if name.is_empty() {
                        "?".into()
                    } else {
                        name.clone()
                    },
                    figures: *f,
                    age: None,
                })
                .collect(),
        };
        let filter = self.filter.to_lowercase();
        rows.retain(|r| r.name.to_lowercase().contains(&filter));
        let sort = self.sort;
        rows.sort_by(|a, b| compare(sort, a, b));
        self.rows = rows;
        let kept = self.selected.as_ref().and_then(|k| self.index_of(k));
        if kept.is_none() {
            self.selected = self.rows.first().map(Row::key);
        }
    }

    fn index_of(&self, key: &Key) -> Option<usize> {
        self.rows.iter().position(|r| &r.key() == key)
    }

    /// The index of the selected row.
    pub fn selected_index(&self) -> Option<usize> {
        self.selected.as_ref().and_then(|k| self.index_of(k))
    }

    /// Moves the selection by `delta` rows (clamped to the table).
    pub fn move_selection(&mut self, delta: isize) {
        if self.rows.is_empty() {
            return;
        }
        let at = self.selected_index().unwrap_or(0) as isize;
        let to = (at + delta).clamp(0, self.rows.len() as isize - 1) as usize;
        self.selected = Some(self.rows[to].key());
    }

    /// The selected process's pid.
    pub fn selected_pid(&self) -> Option<u32> {
        match self.selected {
            Some(Key::Pid(p)) => Some(p),
            _ => None,
        }
    }

    /// Processes (of the last collection) whose PSS could not be read.
    pub fn unread(&self) -> usize {
        let p = &self.collection.processes;
        p.iter().filter(|p| p.figures.pss.is_none()).count()
    }
}

/// The order of two rows by `sort`: sizes largest first, a missing size
/// last; ties by pid (or name).
pub fn compare(sort: Column, a: &Row, b: &Row) -> Ordering {
    let by = match sort {
        Column::Pid => a.pid.cmp(&b.pid),
        Column::Name => a.name.to_lowercase().cmp(&b.name.to_lowercase()),
        size => {
            let (x, y) = (size.size(&a.figures), size.size(&b.figures));
            match (x.flatten(), y.flatten()) {
                (Some(x), Some(y)) => y.cmp(&x),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            }
        }
    };
    by.then(a.pid.cmp(&b.pid)).then(a.name.cmp(&b.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::collect::ProcessFigures;

    fn process(pid: u32, comm: &str, pss: Option<u64>, rss: u64) -> ProcessFigures {
        ProcessFigures {
            pid,
            comm: comm.into(),
            cmdline: None,
            figures: Figures {
                pss,
                rss: Some(rss),
                ..Figures::default()
            },
            age: None,
        }
    }

    fn state() -> State {
        let mut s = State::default();
        s.update(Collection {
            processes: vec![
                process(10, "bash", Some(300), 900),
                process(11, "Xorg", None, 5000),
                process(12, "pagetest", Some(2000), 2000),
                process(13, "pagetest", Some(100), 3000),
            ],
            ..Collection::default()
        });
        s
    }

    fn pids(s: &State) -> Vec<u32> {
        s.rows.iter().map(|r| r.pid.unwrap()).collect()
    }

    #[test]
    fn sorts_by_each_column_with_missing_sizes_last() {
        let mut s = state();
        assert_eq!(pids(&s), [12, 10, 13, 11]);
        for (key, want) in [
            ('r', [11, 13, 12, 10]),
            ('i', [10, 11, 12, 13]),
            ('n', [10, 12, 13, 11]),
        ] {
            s.sort = Column::of_key(key).unwrap();
            s.rebuild();
            assert_eq!(pids(&s), want, "sorted by {key}");
        }
    }

    #[test]
    fn the_filter_keeps_names_that_hold_it_and_the_selection_follows() {
        let mut s = state();
        s.move_selection(3);
        assert_eq!(s.selected_pid(), Some(11));
        s.filter = "PAGE".into();
        s.rebuild();
        assert_eq!(pids(&s), [12, 13]);
        // The selected row was filtered out: the first is selected.
        assert_eq!(s.selected_pid(), Some(12));
        s.move_selection(-5);
        assert_eq!(s.selected_pid(), Some(12));
    }

    #[test]
    fn histories_follow_the_processes_and_are_bounded() {
        let mut s = State::default();
        for i in 0..HISTORY as u64 + 5 {
            let mut p = process(7, "a", Some(1), 1);
            p.figures.working_set = Some(i);
            s.update(Collection {
                processes: vec![p, process(8, "b", Some(1), 1)],
                ..Collection::default()
            });
        }
        let h = &s.history[&7];
        assert_eq!(h.len(), HISTORY);
        assert_eq!(h.back(), Some(&(HISTORY as u64 + 4)));
        assert!(s.history[&8].is_empty());
        s.update(Collection::default());
        assert!(s.history.is_empty());
        assert_eq!(s.unread(), 0);
    }
}
