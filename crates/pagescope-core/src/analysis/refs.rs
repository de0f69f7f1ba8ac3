//! `analyze FILE refs`: references of a trace, in total, per thread and
//! per mapping.

use crate::format::TraceVisitor;
use crate::trace::{Mapping, MappingKind, ProcessEvent, Ref, TraceEnd, TraceHeader};
use crate::Result;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The identity of a page across processes: a private page belongs to its
/// process; a shared-memory page to its file (device and inode) and
/// offset, so two processes touching one shared page touch one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageKey {
    /// A private page.
    Private {
        /// Its process.
        pid: u32,
        /// Its address.
        addr: u64,
    },
    /// A shared-memory page.
    Shared {
        /// Its file's device ([`Mapping::dev`]).
        dev: u64,
        /// Its file's inode.
        inode: u64,
        /// Its byte offset in the file.
        offset: u64,
    },
}

/// What a mapping says about the identity of its pages: for a
/// shared-memory mapping, its file (device, inode) and where it starts
/// (address, offset in the file); `None` for private pages.
pub type SharedBase = Option<(u64, u64, u64, u64)>;

/// The [`SharedBase`] of mapping `m`.
pub fn shared_base(m: &Mapping) -> SharedBase {
    (m.kind == MappingKind::Shared && m.inode != 0).then_some((m.dev, m.inode, m.start, m.offset))
}

/// The identity of the page `r` references, `base` being what its
/// mapping says ([`shared_base`]).
#[inline]
pub fn key_in(r: &Ref, base: SharedBase) -> PageKey {
    match base {
        Some((dev, inode, start, offset)) => PageKey::Shared {
            dev,
            inode,
            offset: r.addr.wrapping_sub(start).wrapping_add(offset),
        },
        None => PageKey::Private {
            pid: r.pid,
            addr: r.addr,
        },
    }
}

/// The identity of the page `r` references, `mapping` being its mapping.
pub fn page_key(r: &Ref, mapping: Option<&Mapping>) -> PageKey {
    key_in(r, mapping.and_then(shared_base))
}

/// What every trace analysis keeps besides the references: the header,
/// the mapping table (which says what each page is) and the end record.
#[derive(Debug, Default)]
pub struct TraceMaps {
    /// The trace header.
    pub header: Option<TraceHeader>,
    /// Mappings by id (last record wins).
    pub mappings: BTreeMap<u32, Mapping>,
    /// The end record, if the trace is complete.
    pub end: Option<TraceEnd>,
    /// Every process the trace names (in its events and mappings).
    pub pids: BTreeSet<u32>,
    /// The one process the analysis selects, if it selects one.
    pub selected: Option<u32>,
}

impl TraceMaps {
    /// Keeps the header.
    pub fn set_header(&mut self, header: &TraceHeader) {
        self.header = Some(header.clone());
    }

    /// Keeps a mapping record.
    pub fn add(&mut self, m: &Mapping) {
        self.pids.insert(m.pid);
        self.mappings.insert(m.id, m.clone());
    }

    /// Notes the process of an event.
    pub fn event(&mut self, e: &ProcessEvent) {
        self.pids.insert(e.pid);
    }

    /// The process the analysis selects, if the trace does not name it.
    pub fn selected_but_absent(&self) -> Option<u32> {
        self.selected.filter(|p| !self.pids.contains(p))
    }

    /// The page's identity ([`page_key`]).
    pub fn key(&self, r: &Ref) -> PageKey {
        page_key(r, self.mappings.get(&r.mapping))
    }
}

/// Counts over one selection of references.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefCounts {
    /// References.
    pub references: u64,
    /// Of which reads.
    pub reads: u64,
    /// Of which writes.
    pub writes: u64,
    /// Distinct pages referenced.
    pub distinct_pages: u64,
}

#[derive(Debug, Default)]
struct Acc {
    counts: RefCounts,
    pages: HashSet<PageKey>,
}

impl Acc {
    fn add(&mut self, r: &Ref, key: PageKey) {
        self.counts.references += 1;
        if r.write {
            self.counts.writes += 1;
        } else {
            self.counts.reads += 1;
        }
        if self.pages.insert(key) {
            self.counts.distinct_pages += 1;
        }
    }
}

/// The `refs` analysis, fed by [`crate::format::read_trace`].
#[derive(Debug, Default)]
pub struct RefStats {
    /// Header and mappings.
    pub maps: TraceMaps,
    /// Process events.
    pub events: Vec<ProcessEvent>,
    range: Option<(u64, u64)>,
    pid: Option<u32>,
    total: Acc,
    threads: BTreeMap<(u32, u32), Acc>,
    /// Per (mapping id, referencing pid): a child forked with a mapping
    /// references it under the parent's id.
    per_mapping: BTreeMap<(u32, u32), Acc>,
    commands: HashMap<u32, String>,
}

impl RefStats {
    /// Counts references whose address is in `[start, end)` if a range is
    /// given, and of process `pid` if one is, else all.
    pub fn new(range: Option<(u64, u64)>, pid: Option<u32>) -> RefStats {
        RefStats {
            range,
            pid,
            maps: TraceMaps {
                selected: pid,
                ..TraceMaps::default()
            },
            ..RefStats::default()
        }
    }

    /// The whole selection.
    pub fn total(&self) -> &RefCounts {
        &self.total.counts
    }

    /// Per (pid, tid), in order.
    pub fn threads(&self) -> impl Iterator<Item = ((u32, u32), &RefCounts)> {
        self.threads.iter().map(|(&k, a)| (k, &a.counts))
    }

    /// Per mapping id and process that referenced it, in order: a
    /// process forked with a mapping has rows of its own under the
    /// mapping's id.
    pub fn per_mapping(&self) -> impl Iterator<Item = ((u32, u32), &RefCounts)> {
        self.per_mapping.iter().map(|(&k, a)| (k, &a.counts))
    }

    /// The command a process ran last (from its start or exec event).
    pub fn command(&self, pid: u32) -> &str {
        self.commands.get(&pid).map_or("", String::as_str)
    }
}

impl TraceVisitor for RefStats {
    fn header(&mut self, header: &TraceHeader) -> Result<()> {
        self.maps.set_header(header);
        Ok(())
    }

    fn mapping(&mut self, m: &Mapping) -> Result<()> {
        self.maps.add(m);
        Ok(())
    }

    fn event(&mut self, e: &ProcessEvent) -> Result<()> {
        use crate::trace::ProcessEventKind as K;
        match &e.kind {
            K::Start { command } | K::Exec { command } => {
                self.commands.insert(e.pid, command.join(" "));
            }
            K::Fork { parent } => {
                let c = self.command(*parent).to_string();
                self.commands.insert(e.pid, c);
            }
            K::Exit { .. } => {}
        }
        self.maps.event(e);
        self.events.push(e.clone());
        Ok(())
    }

    fn refs(&mut self, refs: &[Ref]) -> Result<()> {
        for r in refs {
            if let Some((s, e)) = self.range {
                if r.addr < s || r.addr >= e {
                    continue;
                }
            }
            if self.pid.is_some_and(|p| p != r.pid) {
                continue;
            }
            let key = self.maps.key(r);
            self.total.add(r, key);
            self.threads.entry((r.pid, r.tid)).or_default().add(r, key);
            self.per_mapping
                .entry((r.mapping, r.pid))
                .or_default()
                .add(r, key);
        }
        Ok(())
    }

    fn end(&mut self, e: &TraceEnd) -> Result<()> {
        self.maps.end = Some(e.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(addr: u64, write: bool, tid: u32, mapping: u32) -> Ref {
        Ref {
            time_ns: 0,
            pid: 7,
            tid,
            addr,
            write,
            mapping,
        }
    }

    #[test]
    fn counts_and_range() {
        let refs = [
            r(0x1000, true, 7, 0),
            r(0x2000, false, 7, 0),
            r(0x1000, false, 8, 0),
            r(0x9000, true, 8, 1),
        ];
        let mut s = RefStats::new(None, None);
        s.refs(&refs).unwrap();
        assert_eq!(
            *s.total(),
            RefCounts {
                references: 4,
                reads: 2,
                writes: 2,
                distinct_pages: 3
            }
        );
        assert_eq!(s.threads().count(), 2);
        let mut s = RefStats::new(Some((0x1000, 0x3000)), None);
        s.refs(&refs).unwrap();
        assert_eq!(s.total().references, 3);
        assert_eq!(s.total().distinct_pages, 2);
        // One process: the last reference is another's.
        let mut other = refs.to_vec();
        other[3].pid = 9;
        let mut s = RefStats::new(None, Some(9));
        s.refs(&other).unwrap();
        assert_eq!((s.total().references, s.total().writes), (1, 1));
        let mut s = RefStats::new(None, Some(7));
        s.refs(&other).unwrap();
        assert_eq!(s.total().references, 3);
    }

    #[test]
    fn shared_pages_are_one_object() {
        let m = |id, pid, start| Mapping {
            id,
            pid,
            start,
            end: start + 0x10000,
            perms: "rw-s".into(),
            offset: 0,
            path: "/memfd:x".into(),
            inode: 42,
            dev: 1,
            kind: MappingKind::Shared,
            traced: true,
        };
        let mut s = RefStats::new(None, None);
        s.mapping(&m(0, 1, 0x10000)).unwrap();
        s.mapping(&m(1, 2, 0x50000)).unwrap();
        // The same inode number on another file system: another file.
        s.mapping(&Mapping {
            dev: 2,
            ..m(2, 2, 0x90000)
        })
        .unwrap();
        let mut a = r(0x11000, false, 1, 0);
        a.pid = 1;
        let mut b = r(0x51000, false, 2, 1);
        b.pid = 2;
        s.refs(&[a, b]).unwrap();
        assert_eq!(s.total().distinct_pages, 1);
        let mut c = r(0x91000, false, 2, 2);
        c.pid = 2;
        s.refs(&[c]).unwrap();
        assert_eq!(s.total().distinct_pages, 2);
    }
}
