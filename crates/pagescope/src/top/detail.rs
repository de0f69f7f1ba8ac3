//! The detail of one process: its VMAs from `/proc/PID/smaps` (or, where
//! its main thread has exited, a live thread's `task/TID/smaps`), each with
//! its size and how much of it is resident, proportional, private, in
//! swap and referenced, largest resident first.

use pagescope_core::model::SmapsCounters;
use pagescope_core::parse::maps::MapsLine;
use pagescope_linux::procfs::ProcDir;
use std::path::Path;

/// One VMA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vma {
    /// Its addresses, permissions and path.
    pub map: MapsLine,
    /// Its counters, in bytes.
    pub bytes: SmapsCounters,
}

/// A process's VMAs, or why they could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detail {
    /// The VMAs, largest RSS first.
    Vmas(Vec<Vma>),
    /// The reason (the process is gone, or smaps is refused).
    Unread(String),
}

/// Reads the VMAs of `pid` under `proc`.
pub fn read(proc: &Path, pid: u32, buf: &mut Vec<u8>) -> Detail {
    // A process whose main thread has exited while others run on: its
    // memory is read through one of those.
    let dir = match ProcDir::open_memory(proc, pid) {
        Ok(d) => d,
        Err(e) => return Detail::Unread(e.to_string()),
    };
    match dir.smaps(buf) {
        Ok(entries) => {
            let mut vmas: Vec<Vma> = entries
                .into_iter()
                .map(|e| Vma {
                    map: e.map,
                    bytes: kb_to_bytes(&e.counters),
                })
                .collect();
            vmas.sort_by(|a, b| {
                (b.bytes.rss, b.bytes.size, a.map.start).cmp(&(
                    a.bytes.rss,
                    a.bytes.size,
                    b.map.start,
                ))
            });
            Detail::Vmas(vmas)
        }
        Err(e) => Detail::Unread(e.to_string()),
    }
}

fn kb_to_bytes(c: &SmapsCounters) -> SmapsCounters {
    let b = |kb: u64| kb * 1024;
    SmapsCounters {
        size: b(c.size),
        rss: b(c.rss),
        pss: b(c.pss),
        shared_clean: b(c.shared_clean),
        shared_dirty: b(c.shared_dirty),
        private_clean: b(c.private_clean),
        private_dirty: b(c.private_dirty),
        referenced: b(c.referenced),
        anonymous: b(c.anonymous),
        anon_huge_pages: b(c.anon_huge_pages),
        swap: b(c.swap),
        swap_pss: b(c.swap_pss),
        locked: b(c.locked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_vmas_with_the_kernels_sums() {
        let proc = pagescope_linux::Root::default().proc;
        let Detail::Vmas(vmas) = read(&proc, std::process::id(), &mut Vec::new()) else {
            panic!("own smaps unreadable");
        };
        assert!(!vmas.is_empty());
        assert!(vmas.windows(2).all(|w| w[0].bytes.rss >= w[1].bytes.rss));
        for v in &vmas {
            assert_eq!(v.bytes.size, v.map.end - v.map.start);
            assert!(v.bytes.rss <= v.bytes.size);
        }
        assert!(matches!(
            read(&proc, u32::MAX, &mut Vec::new()),
            Detail::Unread(_)
        ));
    }
}
