//! The LRU side of `analyze mrc`: each reference's page identified and
//! numbered in order of first reference (the sampled ones, with a
//! sample), and the stack distances counted, on a thread of their own
//! while the trace is read.
//!
//! The reading thread hands over the references as decoded, chunk by
//! chunk, and what each mapping record says about its pages in between,
//! in trace order; it only decompresses and decodes. Everything that
//! grows with the references is done here.

use super::super::refs::{key_in, shared_base, SharedBase};
use super::{PageKey, Sampling, StackDistance};
use crate::trace::{Mapping, Ref};
use rustc_hash::FxHashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

/// Pages per block of the page table of [`PageIds`] (2 MiB of 4 KiB pages).
const BLOCK_BITS: u32 = 9;
const BLOCK: usize = 1 << BLOCK_BITS;
/// Blocks in the cache in front of the hash map of [`PageIds`].
const RECENT: usize = 32;
/// A page seen and not sampled.
const SKIPPED: u32 = u32::MAX;

/// Numbers pages (their [`PageKey`]) 0, 1, 2... in order of first
/// reference. Pages are kept in blocks of 512 neighbours (by address, or
/// by offset in a shared file), found by a hash of the block's key, behind
/// a small cache of recent blocks: one hash lookup per change of block, not per
/// reference.
#[derive(Debug)]
pub(super) struct PageIds {
    shift: u32,
    blocks: FxHashMap<PageKey, u32>,
    /// Per block, per page: its id + 1, [`SKIPPED`], or 0 if unseen.
    slots: Vec<[u32; BLOCK]>,
    recent: [Option<(PageKey, u32)>; RECENT],
    /// Pages seen.
    pub(super) seen: u64,
    /// Pages numbered (the sampled ones).
    pub(super) numbered: u32,
}

impl PageIds {
    fn new(shift: u32) -> PageIds {
        PageIds {
            shift,
            blocks: FxHashMap::default(),
            slots: Vec::new(),
            recent: [None; RECENT],
            seen: 0,
            numbered: 0,
        }
    }

    /// Where page `key`'s slot is (block, page), its block made if new.
    #[inline]
    fn slot(&mut self, key: PageKey) -> (usize, usize) {
        let (block, low) = match key {
            PageKey::Private { pid, addr } => {
                let page = addr >> self.shift;
                (
                    PageKey::Private {
                        pid,
                        addr: page >> BLOCK_BITS,
                    },
                    page as usize & (BLOCK - 1),
                )
            }
            PageKey::Shared { dev, inode, offset } => {
                let page = offset >> self.shift;
                (
                    PageKey::Shared {
                        dev,
                        inode,
                        offset: page >> BLOCK_BITS,
                    },
                    page as usize & (BLOCK - 1),
                )
            }
        };
        // A direct-mapped cache of recent blocks, by block number.
        let way = match block {
            PageKey::Private { pid, addr } => addr ^ pid as u64,
            PageKey::Shared { inode, offset, .. } => offset ^ inode,
        } as usize
            % RECENT;
        let b = match self.recent[way] {
            Some((k, b)) if k == block => b,
            _ => {
                let next = self.slots.len() as u32;
                let b = *self.blocks.entry(block).or_insert(next);
                if b == next {
                    self.slots.push([0; BLOCK]);
                }
                self.recent[way] = Some((block, b));
                b
            }
        };
        (b as usize, low)
    }

    /// The id of page `key`, numbered at its first reference if `keep`
    /// says so; `None` for a page not kept.
    #[inline]
    fn id(&mut self, key: PageKey, keep: impl FnOnce(&PageKey) -> bool) -> Option<u32> {
        let (b, low) = self.slot(key);
        match self.slots[b][low] {
            SKIPPED => None,
            0 => {
                self.seen += 1;
                if !keep(&key) {
                    self.slots[b][low] = SKIPPED;
                    return None;
                }
                let id = self.numbered;
                self.slots[b][low] = id + 1;
                self.numbered += 1;
                Some(id)
            }
            n => Some(n - 1),
        }
    }
}

/// Mapping ids (numbered from 0 by the tracer) kept in a table; others
/// in a hash map.
const DENSE_MAPPINGS: usize = 1 << 16;

/// Each mapping id's [`SharedBase`], from the mapping records so far
/// (the last record of an id wins); an id with no record is private.
#[derive(Debug, Default)]
pub(super) struct Keys {
    dense: Vec<SharedBase>,
    sparse: FxHashMap<u32, SharedBase>,
}

impl Keys {
    /// Mapping `id` says `base` from here on.
    pub fn set(&mut self, id: u32, base: SharedBase) {
        let i = id as usize;
        if i < DENSE_MAPPINGS {
            if i >= self.dense.len() {
                self.dense.resize(i + 1, None);
            }
            self.dense[i] = base;
        } else {
            self.sparse.insert(id, base);
        }
    }

    /// The identity of the page `r` references (as
    /// [`super::super::refs::TraceMaps::key`]).
    #[inline]
    pub fn key(&self, r: &Ref) -> PageKey {
        let i = r.mapping as usize;
        let base = match self.dense.get(i) {
            Some(&b) => b,
            None if i < DENSE_MAPPINGS => None,
            None => self.sparse.get(&r.mapping).copied().flatten(),
        };
        key_in(r, base)
    }
}

/// References given by slice gathered before they are handed on: fewer
/// hand-overs (each may wake the thread) cost less than smaller ones.
/// Decoded chunks are handed on as they are.
pub(super) const SEND: usize = 1 << 14;

/// How the references are counted.
#[derive(Clone, Copy, Debug)]
pub(super) struct Numbering {
    /// log2 of the page size.
    pub shift: u32,
    /// A SHARDS sample, if any.
    pub sample: Option<Sampling>,
    /// The one process counted, if not all.
    pub pid: Option<u32>,
    /// Whether the ids are kept in order (FIFO and CLOCK read them).
    pub keep_stream: bool,
}

/// What the reading thread hands over, in trace order.
enum Part {
    /// A mapping record: its id and what it says.
    Mapping(u32, SharedBase),
    /// References.
    Refs(Vec<Ref>),
}

/// The references counted: their pages numbered and their stack
/// distances.
#[derive(Debug)]
pub(super) struct Counted {
    pub ids: PageIds,
    /// The ids of the references kept, in order, where asked for.
    pub stream: Vec<u32>,
    /// References of the selection, sampled or not.
    pub references: u64,
    /// References kept (in the sample, or all).
    pub kept: u64,
    pub stack: StackDistance,
    keys: Keys,
    how: Numbering,
    buf: Vec<u32>,
}

impl Counted {
    fn new(how: Numbering) -> Counted {
        Counted {
            ids: PageIds::new(how.shift),
            stream: Vec::new(),
            references: 0,
            kept: 0,
            stack: StackDistance::default(),
            keys: Keys::default(),
            how,
            buf: Vec::new(),
        }
    }

    /// Counts `part`; gives back its buffer of references, if any.
    fn take(&mut self, part: Part) -> Option<Vec<Ref>> {
        match part {
            Part::Mapping(id, base) => {
                self.keys.set(id, base);
                None
            }
            Part::Refs(refs) => {
                self.add(&refs);
                Some(refs)
            }
        }
    }

    fn add(&mut self, refs: &[Ref]) {
        let Numbering {
            shift, sample, pid, ..
        } = self.how;
        self.buf.clear();
        for r in refs {
            if pid.is_some_and(|p| p != r.pid) {
                continue;
            }
            self.references += 1;
            let key = self.keys.key(r);
            let keep = |k: &PageKey| sample.is_none_or(|s| s.keeps(k, shift));
            if let Some(id) = self.ids.id(key, keep) {
                self.buf.push(id);
            }
        }
        self.kept += self.buf.len() as u64;
        self.stack.push_all(&self.buf);
        if self.how.keep_stream {
            self.stream.extend_from_slice(&self.buf);
        }
    }
}

/// See the module documentation. Where no thread can be made, the
/// references are counted on the reading thread instead.
#[derive(Debug, Default)]
pub(super) struct Lru {
    sender: Mutex<Option<SyncSender<Part>>>,
    /// Buffers of references the thread is done with, to decode into
    /// again.
    spare: Mutex<Option<Receiver<Vec<Ref>>>>,
    worker: Mutex<Option<JoinHandle<Counted>>>,
    /// Counted without a thread.
    inline: Mutex<Option<Counted>>,
    /// References not yet handed on.
    pending: Vec<Ref>,
    done: OnceLock<Counted>,
}

impl Lru {
    /// Hands on `part`, starting the thread at the first.
    fn hand(&mut self, part: Part, how: Numbering) {
        let inline = self.inline.get_mut().expect("not poisoned");
        if let Some(c) = inline {
            c.take(part);
            return;
        }
        let sender = self.sender.get_mut().expect("not poisoned");
        if sender.is_none() {
            let (tx, rx) = sync_channel::<Part>(16);
            let (back, spare) = sync_channel::<Vec<Ref>>(4);
            let spawned = std::thread::Builder::new()
                .name("mrc-lru".into())
                .spawn(move || {
                    let mut c = Counted::new(how);
                    for part in rx {
                        if let Some(mut refs) = c.take(part) {
                            refs.clear();
                            // Full (the reader has enough) or closed:
                            // the buffer is freed.
                            let _ = back.try_send(refs);
                        }
                    }
                    c
                });
            match spawned {
                Ok(handle) => {
                    *sender = Some(tx);
                    *self.spare.get_mut().expect("not poisoned") = Some(spare);
                    *self.worker.get_mut().expect("not poisoned") = Some(handle);
                }
                Err(_) => {
                    let mut c = Counted::new(how);
                    c.take(part);
                    *inline = Some(c);
                    return;
                }
            }
        }
        if let Some(tx) = sender {
            // A thread that is gone panicked: its panic is the answer
            // (`finish`).
            let _ = tx.send(part);
        }
    }

    /// Hands on the references gathered, if any.
    fn flush(&mut self, how: Numbering) {
        if !self.pending.is_empty() {
            let refs = std::mem::replace(&mut self.pending, Vec::with_capacity(SEND));
            self.hand(Part::Refs(refs), how);
        }
    }

    /// A mapping record, after the references before it.
    pub fn mapping(&mut self, m: &Mapping, how: Numbering) {
        self.flush(how);
        self.hand(Part::Mapping(m.id, shared_base(m)), how);
    }

    /// References, copied.
    pub fn refs(&mut self, refs: &[Ref], how: Numbering) {
        self.pending.extend_from_slice(refs);
        if self.pending.len() >= SEND {
            self.flush(how);
        }
    }

    /// References, handed on as they are; returns a buffer to decode
    /// the next ones into (one the thread is done with, if any).
    pub fn refs_owned(&mut self, refs: Vec<Ref>, how: Numbering) -> Vec<Ref> {
        self.flush(how);
        self.hand(Part::Refs(refs), how);
        let spare = self.spare.get_mut().expect("not poisoned");
        spare
            .as_ref()
            .and_then(|s| s.try_recv().ok())
            .unwrap_or_default()
    }

    /// Everything counted: what was handed on, and what is pending.
    pub fn finish(&self, how: Numbering) -> &Counted {
        self.done.get_or_init(|| {
            let worker = self.worker.lock().expect("not poisoned").take();
            let inline = self.inline.lock().expect("not poisoned").take();
            let mut c = match worker {
                Some(handle) => {
                    // The thread ends when its channel closes.
                    drop(self.sender.lock().expect("not poisoned").take());
                    match handle.join() {
                        Ok(c) => c,
                        Err(panic) => std::panic::resume_unwind(panic),
                    }
                }
                None => inline.unwrap_or_else(|| Counted::new(how)),
            };
            c.add(&self.pending);
            c
        })
    }
}
