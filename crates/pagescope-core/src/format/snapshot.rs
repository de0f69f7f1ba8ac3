//! Snapshots in the recording format: a [`SnapshotSink`] that writes the
//! stream to a file, and a reader that replays a file into any sink.

use super::frame::{decode, open_kind, Completeness, Kind, RecordFile};
use super::{codec, frame_type, limits};
use crate::model::{
    ElfFile, PageChunk, PhysChunk, ProcessRecord, SmapsCounters, SnapshotSink, SystemInfo, Task,
    Trailer, Unread, Vma,
};
use crate::{Error, Result};
use std::io::{Read, Write};
use std::path::Path;

/// Writes a snapshot stream as frames.
#[derive(Debug)]
pub struct SnapshotWriter<W: Write> {
    file: RecordFile<W>,
    page_size: u64,
    /// Reused encoder and buffer for page chunks.
    encoder: codec::PageEncoder,
    encoded: Vec<u8>,
}

impl<W: Write> SnapshotWriter<W> {
    /// Starts a snapshot file; `path` names it in errors.
    pub fn new(out: W, path: &Path) -> Result<SnapshotWriter<W>> {
        Ok(SnapshotWriter {
            file: RecordFile::new(out, path, Kind::Snapshot)?,
            page_size: 4096,
            encoder: codec::PageEncoder::default(),
            encoded: Vec::new(),
        })
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.file.frames.bytes
    }

    /// Writes `chunk` in frames of `frame_type` of at most
    /// [`limits::CHUNK_PAGES`] pages.
    fn chunks(&mut self, frame_type: u16, chunk: &PageChunk) -> Result<()> {
        if chunk.pages.len() > limits::CHUNK_PAGES {
            for pages in chunk.pages.chunks(limits::CHUNK_PAGES) {
                self.chunks(
                    frame_type,
                    &PageChunk {
                        pid: chunk.pid,
                        start_time: chunk.start_time,
                        pages: pages.to_vec(),
                    },
                )?;
            }
            return Ok(());
        }
        self.encoder
            .encode(chunk, self.page_size, &mut self.encoded);
        self.file.raw(frame_type, &self.encoded)
    }

    fn put<T>(&mut self, frame_type: u16, value: &T) -> Result<()>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        self.file.put(frame_type, value)
    }
}

impl<W: Write> SnapshotSink for SnapshotWriter<W> {
    fn system(&mut self, system: &SystemInfo) -> Result<()> {
        self.page_size = system.page_size.max(1);
        self.put(frame_type::SYSTEM, system)?;
        if let Some(origin) = &system.origin {
            self.put(frame_type::ORIGIN, origin)?;
        }
        if system.hugetlb_read {
            self.put(frame_type::HUGETLB_READ, &())?;
        }
        Ok(())
    }

    fn process(&mut self, process: &ProcessRecord) -> Result<()> {
        self.put(frame_type::PROCESS, process)
    }

    /// Writes the pages in frames of at most [`limits::CHUNK_PAGES`].
    fn pages(&mut self, chunk: &PageChunk) -> Result<()> {
        self.chunks(frame_type::PAGES, chunk)
    }

    /// Writes the hugetlb pages as the others, in frames of their own.
    fn hugetlb(&mut self, chunk: &PageChunk) -> Result<()> {
        self.chunks(frame_type::HUGETLB_PAGES, chunk)
    }

    fn finish(&mut self, trailer: &Trailer) -> Result<()> {
        self.put(frame_type::END, trailer)
    }

    fn elf(&mut self, elf: &ElfFile) -> Result<()> {
        self.put(frame_type::ELF, elf)
    }

    /// Writes the frames' classes in chunks of at most
    /// [`limits::CHUNK_FRAMES`].
    fn physmap(&mut self, chunk: &PhysChunk) -> Result<()> {
        for (i, classes) in chunk.classes.chunks(limits::CHUNK_FRAMES).enumerate() {
            let part = PhysChunk {
                start_pfn: chunk.start_pfn + (i * limits::CHUNK_FRAMES) as u64,
                classes: classes.to_vec(),
            };
            self.put(frame_type::PHYSMAP, &part)?;
        }
        Ok(())
    }
}

/// A process record as files written before [`ProcessRecord::unread`]
/// hold it: the same fields, in the same order, without that one.
#[derive(serde::Deserialize)]
struct ProcessBeforeUnread {
    task: Task,
    vmas: Vec<Vma>,
    rollup: Option<SmapsCounters>,
}

/// Decodes a process record, of this version or of files written before
/// it said what could not be read. In those, a process that is not a
/// kernel thread and has no VMA and no rollup is one whose memory could
/// not be read: the collector skips every process that exits while read,
/// and a live process has VMAs.
fn decode_process(path: &Path, at: u64, payload: &[u8]) -> Result<ProcessRecord> {
    let bad = |e: postcard::Error| {
        Error::corrupt(path, format!("frame at byte {at}: bad process record: {e}"))
    };
    let (old, rest): (ProcessBeforeUnread, &[u8]) =
        postcard::take_from_bytes(payload).map_err(bad)?;
    let unread = if rest.is_empty() {
        if !old.task.kernel_thread && old.vmas.is_empty() && old.rollup.is_none() {
            Unread::Memory
        } else {
            Unread::Nothing
        }
    } else {
        postcard::from_bytes(rest).map_err(bad)?
    };
    Ok(ProcessRecord {
        task: old.task,
        vmas: old.vmas,
        rollup: old.rollup,
        unread,
    })
}

/// Refuses VMAs that can't be: empty or reversed, not on page
/// boundaries, out of address order or overlapping (the kernel's maps
/// file lists them in order, each a whole number of pages).
fn check_vmas(p: &ProcessRecord, page_size: u64) -> std::result::Result<(), String> {
    let mut prev_end = 0;
    for v in &p.vmas {
        if v.start >= v.end
            || v.start % page_size != 0
            || v.end % page_size != 0
            || v.start < prev_end
        {
            return Err(format!(
                "pid {}: VMA {:#x}-{:#x} is empty, not on page boundaries, or out of order",
                p.task.pid, v.start, v.end
            ));
        }
        prev_end = v.end;
    }
    Ok(())
}

/// Replays a snapshot file into `sink`. Returns whether the file was
/// complete; a file cut short is replayed up to its last complete frame.
/// Errors name the file and what is wrong with it.
pub fn read_snapshot<R: Read>(
    input: R,
    path: &Path,
    sink: &mut dyn SnapshotSink,
) -> Result<Completeness> {
    let mut reader = open_kind(input, path, Kind::Snapshot, "a snapshot")?;
    let mut seen_system = false;
    let mut seen_process = false;
    // The stream is in a process's pages: nothing else came after its
    // record yet.
    let mut in_pages = false;
    let mut page_size = 0;
    // The system record goes to the sink once its origin frame, if any,
    // is read: at the next frame of another type, or at the end.
    let mut pending: Option<SystemInfo> = None;
    loop {
        let frame = reader.next_or_end(seen_system)?;
        if !matches!(&frame, Ok(f) if matches!(f.frame_type, frame_type::ORIGIN | frame_type::HUGETLB_READ))
        {
            if let Some(s) = pending.take() {
                sink.system(&s)?;
            }
        }
        let frame = match frame {
            Ok(f) => f,
            Err(cut) => {
                sink.cut_short(in_pages)?;
                return Ok(cut);
            }
        };
        let at = frame.offset;
        in_pages &= matches!(
            frame.frame_type,
            frame_type::PAGES | frame_type::HUGETLB_PAGES
        );
        match frame.frame_type {
            frame_type::SYSTEM => {
                if seen_system {
                    return Err(Error::corrupt(
                        path,
                        format!("frame at byte {at}: second system record"),
                    ));
                }
                let s: SystemInfo = decode(path, at, "system", &frame.payload)?;
                if s.page_size == 0 || !s.page_size.is_power_of_two() {
                    return Err(Error::corrupt(
                        path,
                        format!("page size {} is impossible", s.page_size),
                    ));
                }
                page_size = s.page_size;
                pending = Some(s);
                seen_system = true;
            }
            _ if !seen_system => {
                return Err(Error::corrupt(path, "does not start with a system record"));
            }
            frame_type::ORIGIN => match pending.as_mut() {
                Some(s) if s.origin.is_none() => {
                    s.origin = Some(decode(path, at, "origin", &frame.payload)?);
                }
                _ => {
                    return Err(Error::corrupt(
                        path,
                        format!("frame at byte {at}: origin not right after the system record"),
                    ));
                }
            },
            frame_type::HUGETLB_READ => {
                match pending.as_mut() {
                    Some(s) => s.hugetlb_read = true,
                    None => {
                        return Err(Error::corrupt(
                        path,
                        format!("frame at byte {at}: hugetlb mark not right after the system record"),
                    ));
                    }
                }
            }
            frame_type::PROCESS => {
                let p = decode_process(path, at, &frame.payload)?;
                check_vmas(&p, page_size)
                    .map_err(|why| Error::corrupt(path, format!("frame at byte {at}: {why}")))?;
                sink.process(&p)?;
                seen_process = true;
                // Pages follow only a process whose pages were read: not
                // a kernel thread, not one read from smaps_rollup alone.
                in_pages = p.pages_read() && !p.task.kernel_thread && p.rollup.is_none();
            }
            frame_type::PAGES | frame_type::HUGETLB_PAGES => {
                if !seen_process {
                    return Err(Error::corrupt(
                        path,
                        format!("frame at byte {at}: pages before any process"),
                    ));
                }
                let chunk = codec::decode_pages(&frame.payload)
                    .map_err(|why| Error::corrupt(path, format!("frame at byte {at}: {why}")))?;
                match frame.frame_type {
                    frame_type::PAGES => sink.pages(&chunk)?,
                    _ => sink.hugetlb(&chunk)?,
                }
            }
            frame_type::ELF => {
                let e: ElfFile = decode(path, at, "elf", &frame.payload)?;
                sink.elf(&e)?;
            }
            frame_type::PHYSMAP => {
                let c: PhysChunk = decode(path, at, "physical map", &frame.payload)?;
                let n = c.classes.len();
                if n > limits::CHUNK_FRAMES || c.start_pfn.checked_add(n as u64).is_none() {
                    return Err(Error::corrupt(
                        path,
                        format!(
                            "frame at byte {at}: physical map chunk of {n} frames from {}: \
                             more than the {} a chunk may hold, or past any frame",
                            c.start_pfn,
                            limits::CHUNK_FRAMES
                        ),
                    ));
                }
                sink.physmap(&c)?;
            }
            frame_type::END => {
                let t: Trailer = decode(path, at, "end", &frame.payload)?;
                sink.finish(&t)?;
                return Ok(Completeness::Complete);
            }
            _ => {} // A newer frame type: skip it.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record of a replayed stream, in order.
    #[derive(Default)]
    struct Seen(Vec<ProcessRecord>, Option<SystemInfo>);

    impl SnapshotSink for Seen {
        fn system(&mut self, s: &SystemInfo) -> Result<()> {
            self.1 = Some(s.clone());
            Ok(())
        }
        fn process(&mut self, p: &ProcessRecord) -> Result<()> {
            self.0.push(p.clone());
            Ok(())
        }
        fn pages(&mut self, _: &PageChunk) -> Result<()> {
            Ok(())
        }
        fn finish(&mut self, _: &Trailer) -> Result<()> {
            Ok(())
        }
    }

    fn task(pid: u32, kernel_thread: bool) -> Task {
        Task {
            pid,
            kernel_thread,
            ..Task::default()
        }
    }

    fn vma() -> Vma {
        Vma {
            start: 0x1000,
            end: 0x3000,
            perms: "rw-p".into(),
            ..Vma::default()
        }
    }

    #[test]
    fn what_could_not_be_read_round_trips() {
        let records = [
            ProcessRecord {
                task: task(10, false),
                vmas: vec![vma()],
                ..ProcessRecord::default()
            },
            ProcessRecord {
                task: task(11, false),
                unread: Unread::Memory,
                ..ProcessRecord::default()
            },
            ProcessRecord {
                task: task(12, false),
                vmas: vec![vma()],
                unread: Unread::Pages,
                ..ProcessRecord::default()
            },
        ];
        let path = Path::new("mem.snap");
        let mut w = SnapshotWriter::new(Vec::new(), path).unwrap();
        w.system(&SystemInfo {
            page_size: 4096,
            ..SystemInfo::default()
        })
        .unwrap();
        for r in &records {
            w.process(r).unwrap();
        }
        w.finish(&Trailer::default()).unwrap();
        let bytes = w.file.frames.into_inner();
        let mut seen = Seen::default();
        read_snapshot(&bytes[..], path, &mut seen).unwrap();
        assert_eq!(seen.0, records);
    }

    /// A file cut right after a process whose pages follow it ends "in
    /// its pages"; cut after a kernel thread, a process read from
    /// smaps_rollup alone or one whose pages were refused, it does not:
    /// no page of theirs is missing.
    #[test]
    fn a_file_cut_after_a_process_without_pages_misses_none() {
        #[derive(Default)]
        struct Cut(Option<bool>);
        impl SnapshotSink for Cut {
            fn system(&mut self, _: &SystemInfo) -> Result<()> {
                Ok(())
            }
            fn process(&mut self, _: &ProcessRecord) -> Result<()> {
                Ok(())
            }
            fn pages(&mut self, _: &PageChunk) -> Result<()> {
                Ok(())
            }
            fn finish(&mut self, _: &Trailer) -> Result<()> {
                Ok(())
            }
            fn cut_short(&mut self, pages_cut: bool) -> Result<()> {
                self.0 = Some(pages_cut);
                Ok(())
            }
        }
        let user = ProcessRecord {
            task: task(10, false),
            vmas: vec![vma()],
            ..ProcessRecord::default()
        };
        let rollup = ProcessRecord {
            rollup: Some(Default::default()),
            ..user.clone()
        };
        let refused = ProcessRecord {
            unread: Unread::Pages,
            ..user.clone()
        };
        let kernel = ProcessRecord {
            task: task(2, true),
            ..ProcessRecord::default()
        };
        for (last, cut) in [
            (&user, true),
            (&kernel, false),
            (&rollup, false),
            (&refused, false),
        ] {
            let path = Path::new("cut.snap");
            let mut w = SnapshotWriter::new(Vec::new(), path).unwrap();
            w.system(&SystemInfo {
                page_size: 4096,
                ..SystemInfo::default()
            })
            .unwrap();
            w.process(last).unwrap();
            let bytes = w.file.frames.into_inner();
            let mut seen = Cut::default();
            read_snapshot(&bytes[..], path, &mut seen).unwrap();
            assert_eq!(seen.0, Some(cut), "{:?}", last.task.pid);
        }
    }

    /// The origin travels in a frame of its own right after the system
    /// record; the sink gets it with that record, even from a file cut
    /// right after it. A file without one (written before it) reads as
    /// `None`, and one anywhere else is refused.
    #[test]
    fn the_origin_comes_with_the_system_record() {
        let path = Path::new("o.snap");
        let system = SystemInfo {
            page_size: 4096,
            hostname: "db-7".into(),
            origin: Some(crate::model::Origin {
                host: "db-7".into(),
                boot_id: Some("0f3c".into()),
            }),
            ..SystemInfo::default()
        };
        let mut w = SnapshotWriter::new(Vec::new(), path).unwrap();
        w.system(&system).unwrap();
        let cut = w.bytes() as usize;
        w.process(&ProcessRecord {
            task: task(10, false),
            vmas: vec![vma()],
            ..ProcessRecord::default()
        })
        .unwrap();
        w.finish(&Trailer::default()).unwrap();
        let bytes = w.file.frames.into_inner();
        for end in [bytes.len(), cut] {
            let mut seen = Seen::default();
            read_snapshot(&bytes[..end], path, &mut seen).unwrap();
            assert_eq!(seen.1.as_ref(), Some(&system));
        }
        let mut w = SnapshotWriter::new(Vec::new(), path).unwrap();
        w.system(&SystemInfo {
            origin: None,
            ..system.clone()
        })
        .unwrap();
        w.finish(&Trailer::default()).unwrap();
        let mut seen = Seen::default();
        read_snapshot(&w.file.frames.into_inner()[..], path, &mut seen).unwrap();
        assert_eq!(seen.1.unwrap().origin, None);
        let mut w = SnapshotWriter::new(Vec::new(), path).unwrap();
        w.system(&system).unwrap();
        w.put(frame_type::ORIGIN, system.origin.as_ref().unwrap())
            .unwrap();
        let e =
            read_snapshot(&w.file.frames.into_inner()[..], path, &mut Seen::default()).unwrap_err();
        assert!(e.to_string().contains("origin not right after"), "{e}");
    }

    /// Whether hugetlb pages were read comes back from the frame after the
    /// system record (and its origin); a file without it, as every file
    /// written before pagescope read them, says they were not, so that
    /// their figures are unknown, not 0.
    #[test]
    fn whether_hugetlb_pages_were_read_round_trips() {
        let path = Path::new("h.snap");
        for origin in [None, Some(crate::model::Origin::default())] {
            for hugetlb_read in [false, true] {
                let system = SystemInfo {
                    page_size: 4096,
                    origin: origin.clone(),
                    hugetlb_read,
                    ..SystemInfo::default()
                };
                let mut w = SnapshotWriter::new(Vec::new(), path).unwrap();
                w.system(&system).unwrap();
                let cut = w.bytes() as usize;
                w.finish(&Trailer::default()).unwrap();
                let bytes = w.file.frames.into_inner();
                for end in [bytes.len(), cut] {
                    let mut seen = Seen::default();
                    read_snapshot(&bytes[..end], path, &mut seen).unwrap();
                    assert_eq!(seen.1.as_ref(), Some(&system));
                }
            }
        }
        let mut w = SnapshotWriter::new(Vec::new(), path).unwrap();
        w.system(&SystemInfo {
            page_size: 4096,
            ..SystemInfo::default()
        })
        .unwrap();
        w.process(&ProcessRecord {
            task: task(10, false),
            vmas: vec![vma()],
            ..ProcessRecord::default()
        })
        .unwrap();
        w.put(frame_type::HUGETLB_READ, &()).unwrap();
        let e =
            read_snapshot(&w.file.frames.into_inner()[..], path, &mut Seen::default()).unwrap_err();
        assert!(
            e.to_string().contains("hugetlb mark not right after"),
            "{e}"
        );
    }

    /// Files written before `unread` existed hold the other fields only:
    /// a user process with no VMA and no rollup is one whose memory could
    /// not be read; the others were read.
    #[test]
    fn records_of_older_files_say_what_was_not_read() {
        let old = |t: Task, vmas: Vec<Vma>, rollup: Option<SmapsCounters>| {
            let bytes = postcard::to_stdvec(&(t, vmas, rollup)).unwrap();
            decode_process(Path::new("old.snap"), 0, &bytes).unwrap()
        };
        assert_eq!(old(task(1, false), vec![], None).unread, Unread::Memory);
        assert_eq!(
            old(task(1, false), vec![vma()], None).unread,
            Unread::Nothing
        );
        let rollup = Some(SmapsCounters::default());
        assert_eq!(old(task(1, false), vec![], rollup).unread, Unread::Nothing);
        assert_eq!(old(task(2, true), vec![], None).unread, Unread::Nothing);
        // And readers that predate the field read the new records: the
        // fields they know come first, unchanged.
        let new = ProcessRecord {
            task: task(3, false),
            vmas: vec![vma()],
            unread: Unread::Pages,
            ..ProcessRecord::default()
        };
        let bytes = postcard::to_stdvec(&new).unwrap();
        let (t, vmas, rollup): (Task, Vec<Vma>, Option<SmapsCounters>) =
            postcard::from_bytes(&bytes).unwrap();
        assert_eq!((t, vmas, rollup), (new.task, new.vmas, new.rollup));
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;
    use crate::analysis::physmap::Physmap;
    use crate::model::{PageRecord, PhysInfo};
    use crate::pagemap::PagemapEntry;

    /// Every page and every frame a sink is handed, in order.
    #[derive(Default)]
    struct Collect {
        chunks: Vec<PageChunk>,
        phys: Vec<PhysChunk>,
    }

    impl SnapshotSink for Collect {
        fn system(&mut self, _: &SystemInfo) -> Result<()> {
            Ok(())
        }
        fn process(&mut self, _: &ProcessRecord) -> Result<()> {
            Ok(())
        }
        fn pages(&mut self, chunk: &PageChunk) -> Result<()> {
            self.chunks.push(chunk.clone());
            Ok(())
        }
        fn finish(&mut self, _: &Trailer) -> Result<()> {
            Ok(())
        }
        fn physmap(&mut self, chunk: &PhysChunk) -> Result<()> {
            self.phys.push(chunk.clone());
            Ok(())
        }
    }

    /// A sink handed more pages or frames than a chunk holds writes them
    /// in chunks of the most it holds, which read back as they were.
    #[test]
    fn the_writer_splits_what_a_chunk_cannot_hold() {
        let n = 2 * limits::CHUNK_PAGES + 5;
        let pages: Vec<PageRecord> = (0..n as u64)
            .map(|i| PageRecord {
                vaddr: (1 << 30) + i * 4096,
                entry: PagemapEntry((1 << 63) | i),
                phys: Some(PhysInfo {
                    flags: crate::kpageflags::KPageFlags::from_bits_retain(1 << 5),
                    count: 1,
                    memcg: 0,
                    node: 0,
                }),
            })
            .collect();
        let chunk = PageChunk {
            pid: 9,
            start_time: 3,
            pages,
        };
        let classes: Vec<u8> = (0..n).map(|i| (i % 12) as u8).collect();
        let mut file = Vec::new();
        let mut w = SnapshotWriter::new(&mut file, Path::new("s")).unwrap();
        w.system(&SystemInfo {
            page_size: 4096,
            ..SystemInfo::default()
        })
        .unwrap();
        w.process(&ProcessRecord::default()).unwrap();
        w.pages(&chunk).unwrap();
        w.physmap(&PhysChunk {
            start_pfn: 100,
            classes: classes.clone(),
        })
        .unwrap();
        w.finish(&Trailer::default()).unwrap();
        drop(w);
        let mut c = Collect::default();
        read_snapshot(&file[..], Path::new("s"), &mut c).unwrap();
        let sizes: Vec<usize> = c.chunks.iter().map(|c| c.pages.len()).collect();
        assert_eq!(sizes, [limits::CHUNK_PAGES, limits::CHUNK_PAGES, 5]);
        assert!(c.chunks.iter().all(|c| (c.pid, c.start_time) == (9, 3)));
        let all: Vec<PageRecord> = c.chunks.into_iter().flat_map(|c| c.pages).collect();
        assert_eq!(all, chunk.pages);
        let starts: Vec<u64> = c.phys.iter().map(|p| p.start_pfn).collect();
        let step = limits::CHUNK_FRAMES as u64;
        assert_eq!(starts, [100, 100 + step, 100 + 2 * step]);
        let all: Vec<u8> = c.phys.iter().flat_map(|p| p.classes.clone()).collect();
        assert_eq!(all, classes);
        // And the physical map adds them up as one.
        let mut p = Physmap::new(0);
        read_snapshot(&file[..], Path::new("s"), &mut p).unwrap();
        assert_eq!(p.frames, n as u64);
    }

    /// A record that breaks a limit is not written: the writer says so in
    /// the reader's words, and the file stays readable up to it.
    #[test]
    fn the_writer_refuses_what_a_reader_would() {
        use crate::model::Vma;
        let mut file = Vec::new();
        let mut w = SnapshotWriter::new(&mut file, Path::new("s")).unwrap();
        w.system(&SystemInfo {
            page_size: 4096,
            ..SystemInfo::default()
        })
        .unwrap();
        let flags = |n: usize| ProcessRecord {
            vmas: vec![Vma {
                start: 0x1000,
                end: 0x2000,
                vm_flags: vec!["rd".into(); n],
                ..Vma::default()
            }],
            ..ProcessRecord::default()
        };
        w.process(&flags(limits::VM_FLAGS)).unwrap();
        let e = w.process(&flags(limits::VM_FLAGS + 1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "s: cannot write a process record: 65 VmFlags, more than the 64 a record may hold"
        );
        drop(w);
        let mut c = Collect::default();
        let done = read_snapshot(&file[..], Path::new("s"), &mut c).unwrap();
        assert!(matches!(done, Completeness::CutShort { .. }));
    }

    /// VMAs that no maps file lists are refused, naming the process.
    #[test]
    fn impossible_vmas_are_refused() {
        use crate::model::{Task, Vma};
        let vma = |start: u64, end: u64| Vma {
            start,
            end,
            ..Vma::default()
        };
        let good = [vma(0x1000, 0x3000), vma(0x3000, 0x4000)];
        let bad = [
            vec![vma(0x3000, 0x1000)],
            vec![vma(0x1000, 0x1000)],
            vec![vma(0x1000, 0x1800)],
            vec![vma(0x1000, 0x3000), vma(0x2000, 0x4000)],
        ];
        let file = |vmas: &[Vma]| {
            let mut file = Vec::new();
            let mut w = SnapshotWriter::new(&mut file, Path::new("s")).unwrap();
            w.system(&SystemInfo {
                page_size: 4096,
                ..SystemInfo::default()
            })
            .unwrap();
            w.process(&ProcessRecord {
                task: Task {
                    pid: 42,
                    ..Task::default()
                },
                vmas: vmas.to_vec(),
                ..ProcessRecord::default()
            })
            .unwrap();
            drop(w);
            file
        };
        read_snapshot(&file(&good)[..], Path::new("s"), &mut Collect::default()).unwrap();
        for vmas in bad {
            let e = read_snapshot(&file(&vmas)[..], Path::new("s"), &mut Collect::default())
                .unwrap_err()
                .to_string();
            assert!(e.contains("pid 42: VMA"), "{e}");
        }
    }
}
