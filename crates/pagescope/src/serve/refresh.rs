//! Which processes a collection walks again (reads their smaps_rollup),
//! and why: the policy, apart from the reading (`collect`).
//!
//! A process's smaps_rollup figures (RSS, PSS, USS, swap) are a function
//! of the pages its page tables map and of how many processes map each
//! of them. Between two collections they can change only if:
//!
//! - it mapped or unmapped pages itself: a page is mapped by a fault
//!   (its own `minflt`/`majflt` in `stat` count every one, a `read()`
//!   into untouched memory included) and unmapped by munmap, madvise or
//!   reclaim, which move the mm's counters (`statm`); a fork makes its
//!   anonymous pages shared (a new process names it as parent); pages in
//!   swap go away without either only by its own munmap (it ran and has
//!   swap);
//! - the kernel changed them without it running: swap-out and reclaim
//!   unmap pages and so move the counters of every process that mapped
//!   them; a tmpfs or memfd page going to or from swap without being
//!   mapped moves the `Swap` of those who map that file (vmstat's swap
//!   counters, for processes that map such a file or have swap);
//!   khugepaged's collapse may map pages (vmstat `thp_collapse_alloc`);
//!   KSM merges pages (its `pages_shared`/`pages_sharing`): these two
//!   re-read every process. Migration and compaction move pages without
//!   changing who maps them: no figure moves;
//! - a process sharing its pages mapped or unmapped some: anonymous
//!   pages are shared only after a fork (and by KSM), so a process whose
//!   anonymous memory is shared (`Pss_Anon` under `Anonymous`, or
//!   `SwapPss` under `Swap`) is walked again when a process appeared or
//!   went, or another such process faulted or unmapped; file pages are
//!   shared by whoever maps the file, so a process is walked again when
//!   a process mapping one of its files (device and inode, from `maps`)
//!   appeared, went, or changed what it maps of files (`statm` shared,
//!   or its `maps` text).
//!
//! With the `refs` working set, a process that ran is walked too (its
//! `Referenced` is the working set); one that did not run referenced
//! nothing, and its working set is 0 without a walk. A process above
//! `--max-working-set-size` has no working set (its bits are not
//! cleared), so running alone does not get it walked.
//!
//! What escapes these signals is a page mapped and another unmapped in
//! the same interval with no fault of the process's own (another process
//! writing into it with `process_vm_writev`, or `UFFDIO_COPY`) and its
//! counters left as they were: `--max-age` bounds how long such a figure
//! can stand, and each figure's age is exported.

/// Why a process is walked again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// First seen (or its pid reused).
    New,
    /// It faulted or its counters (`statm`) moved, or its mappings
    /// changed.
    Own,
    /// It forked: its anonymous pages are now shared.
    Forked,
    /// It ran, and the working set or its swap needs a walk.
    Ran,
    /// A machine-wide event (THP collapse, KSM).
    Machine,
    /// Pages went to or came from swap, and it has swap or maps tmpfs.
    Swap,
    /// It shares anonymous pages, and a process that may share them
    /// changed.
    AnonSharer,
    /// A process mapping one of its files changed.
    FileSharer,
    /// Its figures reached their age limit.
    Age,
}

/// What a collection saw of a process, against the last time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen<'a> {
    /// First seen.
    pub new: bool,
    /// Its run time moved.
    pub ran: bool,
    /// Its fault counters moved.
    pub faulted: bool,
    /// Its anonymous resident pages (statm resident - shared) moved.
    pub anon_moved: bool,
    /// Its file pages mapped (statm shared) or its mappings moved.
    pub file_moved: bool,
    /// A new process names it as parent.
    pub forked: bool,
    /// Its figures' age passed its limit.
    pub due: bool,
    /// It had swap at its last walk.
    pub swap: bool,
    /// It maps a file in memory (tmpfs, memfd).
    pub shmem: bool,
    /// Its anonymous memory was shared at its last walk.
    pub anon_shared: bool,
    /// Above the working-set size cap: the working set wants no walk.
    pub no_working_set: bool,
    /// The files it maps now (device, inode), sorted.
    pub files: &'a [(u64, u64)],
    /// The files whose pages it may have mapped or unmapped (when
    /// `file_moved`): all it maps and mapped if its count of file pages
    /// moved, those mapped or unmapped if only its mappings did.
    pub touched: &'a [(u64, u64)],
}

/// A process that went since the last collection.
#[derive(Clone, Copy, Debug, Default)]
pub struct Gone<'a> {
    /// Its anonymous memory was shared.
    pub anon_shared: bool,
    /// The files it mapped.
    pub files: &'a [(u64, u64)],
}

/// Machine-wide events since the last collection.
#[derive(Clone, Copy, Debug, Default)]
pub struct Machine {
    /// Pages went to or came from swap.
    pub swap: bool,
    /// THP collapse or KSM: every process is walked.
    pub all: bool,
}

/// Decides, for each process of `seen`, whether it is walked and why
/// (`None`: its last figures stand). `working_set`: the refs backend
/// wants a walk of every process that ran.
pub fn plan(
    seen: &[Seen<'_>],
    gone: &[Gone<'_>],
    m: Machine,
    working_set: bool,
) -> Vec<Option<Reason>> {
    let mut touched: Vec<(u64, u64)> = Vec::new();
    let mut anon_event = false;
    for g in gone {
        anon_event |= g.anon_shared;
        touched.extend_from_slice(g.files);
    }
    for s in seen {
        anon_event |= s.new || (s.anon_shared && (s.faulted || s.anon_moved));
        if s.new {
            touched.extend_from_slice(s.files);
        }
        if s.file_moved {
            touched.extend_from_slice(s.touched);
        }
    }
    touched.sort_unstable();
    touched.dedup();
    let shares_touched =
        |files: &[(u64, u64)]| files.iter().any(|f| touched.binary_search(f).is_ok());
    seen.iter()
        .map(|s| {
            Some(if s.new {
                Reason::New
            } else if s.faulted || s.anon_moved || s.file_moved {
                Reason::Own
            } else if s.forked {
                Reason::Forked
            } else if s.ran && ((working_set && !s.no_working_set) || s.swap) {
                Reason::Ran
            } else if m.all {
                Reason::Machine
            } else if m.swap && (s.swap || s.shmem) {
                Reason::Swap
            } else if anon_event && s.anon_shared {
                Reason::AnonSharer
            } else if shares_touched(s.files) {
                Reason::FileSharer
            } else if s.due {
                Reason::Age
            } else {
                return None;
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIBC: (u64, u64) = (1, 10);
    const MEMFD: (u64, u64) = (2, 20);

    fn idle(files: &[(u64, u64)]) -> Seen<'_> {
        Seen {
            files,
            ..Seen::default()
        }
    }

    #[test]
    fn an_idle_process_is_not_walked_until_its_age_is_due() {
        let s = [idle(&[LIBC])];
        assert_eq!(plan(&s, &[], Machine::default(), true), [None]);
        let due = [Seen { due: true, ..s[0] }];
        assert_eq!(
            plan(&due, &[], Machine::default(), true),
            [Some(Reason::Age)]
        );
    }

    #[test]
    fn running_alone_needs_a_walk_only_for_the_working_set_or_swap() {
        let s = [Seen {
            ran: true,
            ..idle(&[LIBC])
        }];
        assert_eq!(plan(&s, &[], Machine::default(), false), [None]);
        assert_eq!(plan(&s, &[], Machine::default(), true), [Some(Reason::Ran)]);
        let swapped = [Seen { swap: true, ..s[0] }];
        assert_eq!(
            plan(&swapped, &[], Machine::default(), false),
            [Some(Reason::Ran)]
        );
        // Above the working-set cap, running alone wants no walk.
        let large = [Seen {
            no_working_set: true,
            ..s[0]
        }];
        assert_eq!(plan(&large, &[], Machine::default(), true), [None]);
    }

    #[test]
    fn own_changes_come_first() {
        for s in [
            Seen {
                faulted: true,
                ..Seen::default()
            },
            Seen {
                anon_moved: true,
                ..Seen::default()
            },
            Seen {
                file_moved: true,
                ..Seen::default()
            },
        ] {
            assert_eq!(
                plan(&[s], &[], Machine::default(), false),
                [Some(Reason::Own)]
            );
        }
        let new = Seen {
            new: true,
            ..Seen::default()
        };
        assert_eq!(
            plan(&[new], &[], Machine::default(), false),
            [Some(Reason::New)]
        );
    }

    #[test]
    fn a_sharer_of_a_file_is_walked_when_another_mapper_changes() {
        let a = idle(&[LIBC, MEMFD]);
        let b = idle(&[LIBC]);
        let c = Seen {
            file_moved: true,
            touched: &[MEMFD],
            ..idle(&[MEMFD])
        };
        assert_eq!(
            plan(&[a, b, c], &[], Machine::default(), false),
            [Some(Reason::FileSharer), None, Some(Reason::Own)]
        );
        // Mappings dropped count too, and a process gone.
        let c = Seen {
            file_moved: true,
            touched: &[LIBC],
            ..idle(&[])
        };
        assert_eq!(
            plan(&[a, b, c], &[], Machine::default(), false)[..2],
            [Some(Reason::FileSharer), Some(Reason::FileSharer)]
        );
        let gone = [Gone {
            anon_shared: false,
            files: &[MEMFD],
        }];
        assert_eq!(
            plan(&[a, b], &gone, Machine::default(), false),
            [Some(Reason::FileSharer), None]
        );
        // A process that only faulted anonymous memory touches no file.
        let c = Seen {
            faulted: true,
            ..idle(&[MEMFD])
        };
        assert_eq!(
            plan(&[a, b, c], &[], Machine::default(), false)[..2],
            [None, None]
        );
    }

    #[test]
    fn anonymous_sharers_follow_forks_faults_and_exits() {
        let shared = Seen {
            anon_shared: true,
            ..Seen::default()
        };
        let alone = Seen::default();
        assert_eq!(
            plan(&[shared, alone], &[], Machine::default(), false),
            [None, None]
        );
        let new = Seen {
            new: true,
            ..Seen::default()
        };
        assert_eq!(
            plan(&[shared, alone, new], &[], Machine::default(), false)[..2],
            [Some(Reason::AnonSharer), None]
        );
        let gone = [Gone {
            anon_shared: true,
            files: &[],
        }];
        assert_eq!(
            plan(&[shared, alone], &gone, Machine::default(), false),
            [Some(Reason::AnonSharer), None]
        );
        // Another sharer faulted (a copy on write): the first is walked;
        // a process sharing nothing faulting changes no one.
        let cow = Seen {
            faulted: true,
            ..shared
        };
        assert_eq!(
            plan(&[shared, cow], &[], Machine::default(), false)[0],
            Some(Reason::AnonSharer)
        );
        let faulted = Seen {
            faulted: true,
            ..alone
        };
        assert_eq!(
            plan(&[shared, faulted], &[], Machine::default(), false)[0],
            None
        );
    }

    #[test]
    fn machine_events() {
        let swap = Seen {
            swap: true,
            ..Seen::default()
        };
        let shmem = Seen {
            shmem: true,
            ..Seen::default()
        };
        let plain = Seen::default();
        let m = Machine {
            swap: true,
            all: false,
        };
        assert_eq!(
            plan(&[swap, shmem, plain], &[], m, false),
            [Some(Reason::Swap), Some(Reason::Swap), None]
        );
        let m = Machine {
            swap: false,
            all: true,
        };
        assert_eq!(plan(&[plain], &[], m, false), [Some(Reason::Machine)]);
    }
}
