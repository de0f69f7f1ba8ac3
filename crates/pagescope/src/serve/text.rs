//! The /proc text the collector reads at every collection, parsed from
//! bytes without allocating: `stat` (the fields it needs), `statm`,
//! `smaps_rollup`, the counters of `vmstat`, and from `maps` the files a
//! process maps. Pure functions of the text, tested on literal kernel
//! text.

/// The fields of `/proc/PID/stat` the collector uses (proc(5)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat<'a> {
    /// `comm`, between the parentheses.
    pub comm: &'a [u8],
    /// Field 3, the state letter.
    pub state: u8,
    /// Field 4.
    pub ppid: u32,
    /// Field 9, the kernel's `PF_*` flags.
    pub flags: u64,
    /// Field 10: minor faults of every thread, alive or exited.
    pub minflt: u64,
    /// Field 12: major faults likewise.
    pub majflt: u64,
    /// Field 20: its threads.
    pub num_threads: u64,
    /// Field 22, clock ticks after boot.
    pub start_time: u64,
}

/// `PF_KTHREAD` (include/linux/sched.h).
const PF_KTHREAD: u64 = 0x0020_0000;

impl Stat<'_> {
    /// A kernel thread (it has no memory of its own).
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }

    /// A zombie or dead process: state `Z` or `X`. Its memory is gone,
    /// unless only its main thread has exited
    /// ([`Stat::is_zombie_leader`]).
    pub fn is_dead(&self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }

    /// A process whose main thread has exited while its other threads
    /// run on: state `Z` with more than one thread. Its memory is read
    /// through one of those (`ProcDir::live_thread`).
    pub fn is_zombie_leader(&self) -> bool {
        self.state == b'Z' && self.num_threads > 1
    }
}

fn num(field: &[u8]) -> Option<u64> {
    if field.is_empty() {
        return None;
    }
    field.iter().try_fold(0u64, |n, &c| {
        c.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(c - b'0')))
            .flatten()
    })
}

/// Parses `/proc/PID/stat`.
pub fn stat(text: &[u8]) -> Option<Stat<'_>> {
    let open = text.iter().position(|&c| c == b'(')?;
    let close = text.iter().rposition(|&c| c == b')')?;
    let comm = text.get(open + 1..close)?;
    // Fields from 3 (state) on, after ") ".
    let mut f = text.get(close + 2..)?.split(|&c| c == b' ');
    let mut nth = |n: usize| f.nth(n);
    let state = *nth(0)?.first()?; // 3
    let ppid = num(nth(0)?)? as u32; // 4
    let flags = num(nth(4)?)?; // 9
    let minflt = num(nth(0)?)?; // 10
    let majflt = num(nth(1)?)?; // 12
    let num_threads = num(nth(7)?)?; // 20
    let start_time = num(nth(1)?)?; // 22
    Some(Stat {
        comm,
        state,
        ppid,
        flags,
        minflt,
        majflt,
        num_threads,
        start_time,
    })
}

/// `/proc/PID/statm`'s `resident` and `shared` (file and shmem pages
/// mapped), in pages: the mm's own counters, which every mapping and
/// unmapping of a page updates, whoever does it.
pub fn statm(text: &[u8]) -> Option<(u64, u64)> {
    let mut f = text.split(|c| c.is_ascii_whitespace());
    let _size = f.next()?;
    Some((num(f.next()?)?, num(f.next()?)?))
}

/// The lines of `smaps_rollup` the collector uses, in kB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rollup {
    /// `Rss`.
    pub rss: u64,
    /// `Pss`.
    pub pss: u64,
    /// `Pss_Anon`: under `Anonymous` when some anonymous page is mapped
    /// by another process too (after a fork).
    pub pss_anon: Option<u64>,
    /// `Private_Clean + Private_Dirty`.
    pub private: u64,
    /// `Referenced`.
    pub referenced: u64,
    /// `Anonymous`.
    pub anonymous: u64,
    /// `KSM`.
    pub ksm: u64,
    /// `Swap`.
    pub swap: u64,
    /// `SwapPss`: under `Swap` when a swap entry is shared.
    pub swap_pss: u64,
}

impl Rollup {
    /// Whether some of its anonymous memory (resident or in swap) is
    /// shared with another process, so that another's fault or exit can
    /// change its PSS and USS. Without `Pss_Anon` (kernels before 5.10)
    /// every process with anonymous memory is taken to share it.
    pub fn shares_anonymous(&self) -> bool {
        let anon = match self.pss_anon {
            Some(p) => p < self.anonymous,
            None => self.anonymous > 0,
        };
        anon || self.swap_pss < self.swap || self.ksm > 0
    }
}

/// Parses `/proc/PID/smaps_rollup` (empty for a process without memory:
/// zeros). `None` if a known line has no number.
pub fn rollup(text: &[u8]) -> Option<Rollup> {
    let mut r = Rollup::default();
    let (mut clean, mut dirty) = (0, 0);
    for line in text.split(|&c| c == b'\n') {
        let Some(colon) = line.iter().position(|&c| c == b':') else {
            continue;
        };
        let (key, rest) = (&line[..colon], &line[colon + 1..]);
        let slot = match key {
            b"Rss" => &mut r.rss,
            b"Pss" => &mut r.pss,
            b"Private_Clean" => &mut clean,
            b"Private_Dirty" => &mut dirty,
            b"Referenced" => &mut r.referenced,
            b"Anonymous" => &mut r.anonymous,
            b"KSM" => &mut r.ksm,
            b"Swap" => &mut r.swap,
            b"SwapPss" => &mut r.swap_pss,
            b"Pss_Anon" => {
                r.pss_anon = Some(kb(rest)?);
                continue;
            }
            _ => continue,
        };
        *slot = kb(rest)?;
    }
    r.private = clean + dirty;
    Some(r)
}

/// `   1234 kB` -> 1234.
fn kb(rest: &[u8]) -> Option<u64> {
    let t = rest.trim_ascii();
    num(t.strip_suffix(b"kB").unwrap_or(t).trim_ascii())
}

/// The `/proc/vmstat` counters of events that change processes' pages
/// without those processes running or their counters moving (see
/// `refresh`). Absent counters (kernel options) read 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Events {
    /// `pswpin + pswpout + zswpin + zswpout`: pages to or from swap.
    pub swap: u64,
    /// `thp_collapse_alloc`: huge pages made by khugepaged (a collapse
    /// may map pages that were not mapped).
    pub collapse: u64,
}

/// Parses `/proc/vmstat`.
pub fn vmstat(text: &[u8]) -> Events {
    let mut e = Events::default();
    for line in text.split(|&c| c == b'\n') {
        let mut f = line.split(|&c| c == b' ');
        let (Some(key), Some(v)) = (f.next(), f.next()) else {
            continue;
        };
        let v = num(v).unwrap_or(0);
        match key {
            b"pswpin" | b"pswpout" | b"zswpin" | b"zswpout" => e.swap += v,
            b"thp_collapse_alloc" => e.collapse += v,
            _ => {}
        }
    }
    e
}

/// What `/proc/PID/maps` says that matters to other processes' figures:
/// the files (device and inode) the process maps, sorted, whether one of
/// them lives in memory (tmpfs, memfd, SysV shared memory: device major
/// 0), and a hash of its lines of files (its mappings of files changed
/// or not; anonymous mappings share pages with no other process but by
/// a fork, which is followed apart).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mapped {
    /// (device, inode) of each file mapped, sorted, without repeats.
    pub files: Vec<(u64, u64)>,
    /// Whether a mapped file is in memory (its pages go to swap).
    pub shmem: bool,
    /// A hash of the lines that map files.
    pub hash: u64,
}

/// Parses `/proc/PID/maps` into a [`Mapped`].
pub fn maps(text: &[u8]) -> Mapped {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut m = Mapped::default();
    for line in text.split(|&c| c == b'\n') {
        let mut f = line.split(|&c| c == b' ').filter(|f| !f.is_empty());
        let (Some(_), Some(_), Some(_), Some(dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some(inode) = num(inode).filter(|&i| i != 0) else {
            continue;
        };
        let Some(colon) = dev.iter().position(|&c| c == b':') else {
            continue;
        };
        let hex = |s: &[u8]| u64::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok();
        let (Some(major), Some(minor)) = (hex(&dev[..colon]), hex(&dev[colon + 1..])) else {
            continue;
        };
        m.shmem |= major == 0;
        m.files.push(((major << 32) | minor, inode));
        line.hash(&mut h);
    }
    m.hash = h.finish();
    m.files.sort_unstable();
    m.files.dedup();
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields() {
        let text = b"4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 1234 0 7 0 10 20 0 0 20 0 \
                     1 0 98765 4096 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        let s = stat(text).unwrap();
        assert_eq!(s.comm, b"a (weird) name");
        assert_eq!(
            (
                s.state,
                s.ppid,
                s.flags,
                s.minflt,
                s.majflt,
                s.num_threads,
                s.start_time
            ),
            (b'S', 1, 4194560, 1234, 7, 1, 98765)
        );
        assert!(!s.is_kernel_thread() && !s.is_dead() && !s.is_zombie_leader());
        let leader = b"4242 (pagetest) Z 1 4242 4242 0 -1 4194564 1234 0 7 0 10 20 0 0 20 0 \
                       2 0 98765 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        let z = stat(leader).unwrap();
        assert_eq!((z.num_threads, z.start_time), (2, 98765));
        assert!(z.is_dead() && z.is_zombie_leader());
        let k = b"2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 2 0 0 \
                  18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 0 0 0 0 0 0\n";
        assert!(stat(k).unwrap().is_kernel_thread());
        assert_eq!(stat(b"12 (x"), None);
    }

    #[test]
    fn statm_resident_and_shared() {
        assert_eq!(statm(b"2345 678 90 12 0 300 0\n"), Some((678, 90)));
        assert_eq!(statm(b"0 0 0 0 0 0 0\n"), Some((0, 0)));
        assert_eq!(statm(b""), None);
    }

    const ROLLUP: &[u8] = b"\
55d0c8a4e000-7ffc1d7f3000 ---p 00000000 00:00 0                          [rollup]
Rss:               67712 kB
Pss:               66237 kB
Pss_Dirty:         65648 kB
Pss_Anon:          65536 kB
Pss_File:            701 kB
Pss_Shmem:             0 kB
Shared_Clean:       1552 kB
Shared_Dirty:          0 kB
Private_Clean:       512 kB
Private_Dirty:     65648 kB
Referenced:        65660 kB
Anonymous:         65648 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                 64 kB
SwapPss:              32 kB
Locked:                0 kB
";

    #[test]
    fn rollup_lines() {
        let r = rollup(ROLLUP).unwrap();
        assert_eq!(
            r,
            Rollup {
                rss: 67712,
                pss: 66237,
                pss_anon: Some(65536),
                private: 66160,
                referenced: 65660,
                anonymous: 65648,
                ksm: 0,
                swap: 64,
                swap_pss: 32,
            }
        );
        assert!(r.shares_anonymous());
        let alone = Rollup {
            pss_anon: Some(10),
            anonymous: 10,
            ..Rollup::default()
        };
        assert!(!alone.shares_anonymous());
        assert_eq!(rollup(b"").unwrap(), Rollup::default());
        assert_eq!(rollup(b"Rss: lots kB\n"), None);
    }

    #[test]
    fn vmstat_events() {
        let e =
            vmstat(b"nr_free_pages 123\npswpin 5\npswpout 7\nthp_collapse_alloc 2\nzswpout 1\n");
        assert_eq!(
            e,
            Events {
                swap: 13,
                collapse: 2
            }
        );
    }

    #[test]
    fn maps_files() {
        let text = b"\
55d0c8a4e000-55d0c8a50000 r--p 00000000 fd:01 1234                       /usr/bin/cat
55d0c8a50000-55d0c8a55000 r-xp 00002000 fd:01 1234                       /usr/bin/cat
7f0000000000-7f0000100000 rw-s 00000000 00:01 77                         /memfd:pagetest (deleted)
7f0000200000-7f0000300000 rw-p 00000000 00:00 0 
7ffc1d7d2000-7ffc1d7f3000 rw-p 00000000 00:00 0                          [stack]
";
        let m = maps(text);
        assert_eq!(m.files, [(1, 77), ((0xfd << 32) | 1, 1234)]);
        assert!(m.shmem);
        assert_ne!(m.hash, maps(b"").hash);
        // Anonymous mappings leave the hash as it was.
        let mut more = text.to_vec();
        more.extend_from_slice(b"7f0000400000-7f0000500000 rw-p 00000000 00:00 0 \n");
        assert_eq!(maps(&more).hash, m.hash);
        assert!(!maps(b"").shmem);
    }
}
