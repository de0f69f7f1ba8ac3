//! Pairing a new process's first stop with its creator's event stop, so
//! that the freezer knows, of a process it holds where it starts, whether
//! it has an address space of its own.
//!
//! A process made by a traced thread (`fork`, `vfork`, `clone`) shows up
//! twice: the creator stops at `PTRACE_EVENT_FORK`, `VFORK` or `CLONE`
//! (the event message names the new task), and the new task, attached by
//! the kernel, stops before its first instruction. The kernel starts the
//! new task before it stops the creator, so either stop may be read
//! first. Only the creator's stop says who made it: the new task's
//! parent in `/proc` is not its creator with `CLONE_PARENT` (it is the
//! creator's parent), and a creator whose process's main thread has
//! exited has no address space under the process's pid. Whether the new
//! process shares its creator's memory is asked of the creator thread
//! itself ([`Creation::new`]), while it is held at its event stop.

use std::collections::{HashMap, HashSet};
use std::io;

/// A process held between boundaries before the first instruction of
/// its image ([`crate::record::freeze::Freezer::take_born`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Born {
    /// Its pid.
    pub pid: u32,
    /// Whether it has just exec'd (a new address space of its own);
    /// otherwise it is a new process at its first stop.
    pub exec: bool,
    /// Whether its address space is its own: after an exec, or a new
    /// process that is not a vfork child and whose memory is not its
    /// creator's (`CLONE_VM`). Only such a process can be reset alone:
    /// clearing the bits of one that shares its creator's address space
    /// clears its creator's.
    pub own_memory: bool,
}

/// How a new process was made, from its creator's event stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Creation {
    /// The thread that made it.
    pub creator: u32,
    /// Whether the new process has an address space of its own.
    pub own_memory: bool,
}

impl Creation {
    /// The creation by `creator`: `vfork` if the event was
    /// `PTRACE_EVENT_VFORK` (the child runs in its parent's memory until
    /// its exec, and is never reset before it), `same_vm` the answer of
    /// `kcmp(KCMP_VM)` of the creator thread and the new task. A
    /// comparison that failed (either is gone) counts as shared: such a
    /// process is left to the next boundary rather than risk clearing
    /// its creator's bits.
    pub fn new(creator: u32, vfork: bool, same_vm: io::Result<bool>) -> Creation {
        Creation {
            creator,
            own_memory: !vfork && matches!(same_vm, Ok(false)),
        }
    }
}

/// New tasks whose two stops have not both been read yet.
#[derive(Debug, Default)]
pub struct Births {
    /// Creations read at the creator's stop, by new task, whose first
    /// stop has not been read.
    made: HashMap<u32, Creation>,
    /// New processes held at their first stop whose creator's stop has
    /// not been read.
    waiting: HashSet<u32>,
}

impl Births {
    /// The creator's event stop says `creation` made `tid`. Returns the
    /// new process if it was waiting at its first stop. `known` says
    /// whether the freezer already holds `tid` (its first stop was read
    /// while freezing, or it is a thread): then there is nothing to keep.
    pub fn made(&mut self, tid: u32, creation: Creation, known: bool) -> Option<Born> {
        if self.waiting.remove(&tid) {
            return Some(Born {
                pid: tid,
                exec: false,
                own_memory: creation.own_memory,
            });
        }
        if !known {
            self.made.insert(tid, creation);
        }
        None
    }

    /// A new process at its first stop, held. Returns it if its
    /// creator's stop has been read; otherwise it waits for it.
    pub fn first_stop(&mut self, pid: u32) -> Option<Born> {
        match self.made.remove(&pid) {
            Some(c) => Some(Born {
                pid,
                exec: false,
                own_memory: c.own_memory,
            }),
            None => {
                self.waiting.insert(pid);
                None
            }
        }
    }

    /// Forgets `tid`: a new thread at its first stop, a new process whose
    /// first stop came at a boundary, a task that ended.
    pub fn forget(&mut self, tid: u32) {
        self.made.remove(&tid);
        self.waiting.remove(&tid);
    }

    /// The held processes are let go (a boundary's thaw restarts them):
    /// none waits any more, and each is set up at that boundary as a
    /// process first seen there. Creations whose new task the freezer
    /// holds by now (`held`) are dropped.
    pub fn thaw(&mut self, held: impl Fn(u32) -> bool) {
        self.waiting.clear();
        self.made.retain(|&t, _| !held(t));
    }

    /// Whether nothing is pending.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.made.is_empty() && self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(creator: u32) -> Creation {
        Creation::new(creator, false, Ok(false))
    }

    #[test]
    fn a_vfork_child_or_one_sharing_memory_is_never_its_own() {
        assert!(own(1).own_memory);
        // vfork: even where kcmp says the memory differs (CLONE_VFORK
        // without CLONE_VM).
        assert!(!Creation::new(1, true, Ok(false)).own_memory);
        assert!(!Creation::new(1, true, Ok(true)).own_memory);
        // CLONE_VM.
        assert!(!Creation::new(1, false, Ok(true)).own_memory);
        // The creator or the child gone: not known, so not reset.
        let gone = io::Error::from_raw_os_error(3);
        assert!(!Creation::new(1, false, Err(gone)).own_memory);
    }

    #[test]
    fn the_creator_read_first_gives_the_child_at_its_first_stop() {
        let mut b = Births::default();
        assert_eq!(b.made(20, own(10), false), None);
        let born = b.first_stop(20).unwrap();
        assert_eq!(
            born,
            Born {
                pid: 20,
                exec: false,
                own_memory: true
            }
        );
        assert!(b.is_empty());
    }

    #[test]
    fn the_child_read_first_waits_for_its_creator() {
        let mut b = Births::default();
        assert_eq!(b.first_stop(20), None);
        let shared = Creation::new(10, false, Ok(true));
        let born = b.made(20, shared, true).unwrap();
        assert!(!born.own_memory);
        assert!(b.is_empty());
    }

    #[test]
    fn a_child_seen_at_a_boundary_or_a_thread_leaves_nothing() {
        let mut b = Births::default();
        // A thread (or a process whose first stop was read while
        // freezing): the freezer holds it already.
        assert_eq!(b.made(21, own(10), true), None);
        assert!(b.is_empty());
        // A thread whose creator's stop is read after its own.
        b.made(22, own(10), false);
        b.forget(22);
        assert!(b.is_empty());
    }

    #[test]
    fn a_thaw_lets_the_waiting_go_and_drops_the_held() {
        let mut b = Births::default();
        b.first_stop(20);
        b.made(30, own(10), false);
        b.made(31, own(10), false);
        b.thaw(|t| t == 30);
        // 20 was restarted by the thaw: its creator's stop, read now,
        // sets nothing up.
        assert_eq!(b.made(20, own(10), true), None);
        // 31 has not stopped yet: it is set up where it does.
        assert!(b.first_stop(31).is_some());
        assert!(b.is_empty());
    }
}
