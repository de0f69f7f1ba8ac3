//! `pagetest`: the verification workload of the memref paper (section 4).
//!
//! It maps a buffer, touches every page once per iteration (reading or
//! writing one word per page), sleeps between iterations, and prints one
//! JSON line per event on stdout, flushed at once, so that a test knows
//! exactly which pages were referenced and when:
//!
//! ```text
//! {"event":"ready","pid":P,"start":ADDR,"end":ADDR,"pages":N,"page_size":4096,"mode":"anon","op":"write"}
//! {"event":"iteration","index":0,"start_ns":T0,"end_ns":T1}
//! {"event":"done"}
//! ```
//!
//! Times are CLOCK_MONOTONIC nanoseconds. With `--fork N`, N children
//! then share the buffer and read it (each says `{"event":"child","pid":P}`
//! when it starts, waits `--child-delay`, and says
//! `{"event":"child-read","pid":P,"checksum":SUM}` once it has read; then
//! the parent says `{"event":"forked","pids":[...]}`), the first writing
//! `--child-writes` pages; with `--grow SIZE --every
//! DUR`, more anonymous memory is mapped and written at each step
//! (`{"event":"grow","bytes":B,"total_bytes":T,...}`); with `--pageout
//! AMOUNT`, the first AMOUNT of the buffer is paged out after the first
//! iteration (`{"event":"pageout","start":ADDR,"end":ADDR,"pages":N}`,
//! the range and the pages asked out). In `read` mode the buffer is
//! first filled (before `ready`), since reading never-written anonymous
//! memory maps only the shared zero page. With `--hold` it keeps the
//! memory after `done` until killed. With `--leader-exits` it holds the
//! memory in a second thread and its main thread exits alone (saying
//! `{"event":"leader-exits","tid":T}` first, T the thread that holds):
//! the process runs on with a zombie leader. Each SIGUSR1 then hands the
//! holding over to a new thread, and the one that held ends
//! (`{"event":"relay","tid":T}`, T the new holder). With
//! `--clone-sibling`, after each iteration it starts a process of its
//! memory under its parent (`{"event":"sibling","pid":P}`).

#![forbid(unsafe_code)]

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use pagescope_sys::clone::Forked;
use pagescope_sys::mem::Region;
use serde_json::json;
use std::io::Write;
use std::os::fd::AsFd;
use std::time::Duration;

/// Where the buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// A `Vec` from the C library's malloc.
    Malloc,
    /// A private anonymous mmap.
    Anon,
    /// A shared mapping of a regular file (page cache), unlinked at once.
    File,
    /// A shared mapping of a memfd (shmem).
    Shm,
    /// A private anonymous mmap of hugetlb pages (`MAP_HUGETLB`, the
    /// default huge page size; the size is rounded up to it). The kernel
    /// must hold enough in its pool (`vm.nr_hugepages`).
    Hugetlb,
}

/// What each touch does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Op {
    /// Read one word per page.
    Read,
    /// Write one word per page.
    Write,
}

/// Touch every page of a buffer once per iteration, and say when.
#[derive(Debug, Parser)]
#[command(name = "pagetest", version, about)]
struct Args {
    /// Buffer size (e.g. 256M, 1G).
    #[arg(long, value_parser = parse_size)]
    size: u64,
    /// Where the buffer lives.
    #[arg(long, value_enum, default_value_t = Mode::Anon)]
    mode: Mode,
    /// Put the (anonymous) buffer in the middle of a `MAP_NORESERVE`
    /// mapping of this size that nothing else touches (e.g. 8T): a large,
    /// sparsely used address range.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    reserve: Option<u64>,
    /// Read or write each page.
    #[arg(long, value_enum, default_value_t = Op::Write)]
    op: Op,
    /// Passes over the buffer.
    #[arg(long, default_value_t = 1)]
    iterations: u64,
    /// Pause after each iteration (e.g. 1s, 100ms).
    #[arg(long, value_parser = parse_duration, default_value = "0")]
    sleep: Duration,
    /// Pause after `ready`, before the first iteration (so that a recorder
    /// attached at `ready`, or the fill of `--op read`, stays apart from it).
    #[arg(long, value_parser = parse_duration, default_value = "0")]
    delay: Duration,
    /// After `ready` (and `--delay`), wait for a line on standard input
    /// before the first iteration: whoever attaches at `ready` says when
    /// it is in place.
    #[arg(long)]
    wait_stdin: bool,
    /// Make the `userfaultfd` system call fail with EPERM from the start
    /// (a seccomp filter), as a sandbox might: a tracer attached
    /// later must make its userfaultfd through /dev/userfaultfd.
    #[arg(long)]
    deny_userfaultfd: bool,
    /// Write every page once before `ready`, so that the first iteration
    /// touches memory already there, as the later ones do (`--op read`
    /// always does).
    #[arg(long)]
    prefault: bool,
    /// Keep the memory after the last iteration until killed.
    #[arg(long)]
    hold: bool,
    /// After `done`, keep the memory in a new thread and end the main
    /// thread alone (exit(2)): the process lives on in that thread, with
    /// a zombie leader (`/proc/PID/stat` says `Z`, `/proc/PID/smaps` is
    /// empty, `/proc/PID/task/TID/smaps` shows the memory). Each SIGUSR1
    /// then starts a new holding thread and ends the one that held.
    #[arg(long, conflicts_with_all = ["hold", "grow", "fork"])]
    leader_exits: bool,
    /// End the main thread alone right after `ready` (saying
    /// `{"event":"leader-exits","tid":T}`), and do the rest (the
    /// iterations, `done`, `--hold`) in a new thread T: the process
    /// touches its buffer with a zombie leader.
    #[arg(long, conflicts_with_all = ["leader_exits", "fork", "grow", "wait_stdin"])]
    leader_exits_first: bool,
    /// Directory for the file of `--mode file` (default: the current one).
    #[arg(long, value_name = "DIR")]
    dir: Option<std::path::PathBuf>,
    /// After the iterations, fork N children that share the buffer
    /// (copy-on-write for private modes) and read every page of it; they
    /// live as long as the parent.
    #[arg(long, value_name = "N", default_value_t = 0)]
    fork: u32,
    /// The first child then writes this many pages of the buffer (from
    /// its start), making private copies of them.
    #[arg(long, value_name = "PAGES", default_value_t = 0, requires = "fork")]
    child_writes: u64,
    /// Each child waits this long before it reads the buffer.
    #[arg(long, value_parser = parse_duration, default_value = "0", requires = "fork")]
    child_delay: Duration,
    /// After the iterations, grow by mapping and writing this much more
    /// anonymous memory every `--every` (needs --hold).
    #[arg(long, value_parser = parse_size, requires_all = ["every", "hold"])]
    grow: Option<u64>,
    /// Interval of `--grow`.
    #[arg(long, value_parser = parse_duration, requires = "grow")]
    every: Option<Duration>,
    /// After the first iteration, page out the first AMOUNT of the
    /// buffer (`madvise(MADV_PAGEOUT)`) and say so in a `pageout` event:
    /// a number of pages, or a fraction of the buffer with a decimal
    /// point (0.25). The kernel pages out only pages this process alone
    /// maps, and anonymous memory only where there is swap: how many
    /// went is the kernel's to tell (smaps `Swap`, pagemap bit 62).
    #[arg(long, value_name = "AMOUNT", value_parser = parse_amount)]
    pageout: Option<Amount>,
    /// After each iteration, start a process that shares this one's
    /// memory and parent (`clone` with `CLONE_VM` and `CLONE_PARENT`) and
    /// ends at once, and say so (`{"event":"sibling","pid":P}`): its
    /// parent in `/proc` is pagetest's parent, which reaps it.
    #[arg(long)]
    clone_sibling: bool,
    /// Ask for transparent huge pages (`madvise(MADV_HUGEPAGE)`) on the
    /// anonymous buffer before touching it (whether the kernel gives
    /// them is its to tell: smaps `AnonHugePages`).
    #[arg(long)]
    thp: bool,
}

/// A part of the buffer: pages, or a fraction of it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Amount {
    Pages(u64),
    Fraction(f64),
}

impl Amount {
    /// The pages of a buffer of `pages` this amount is (at most all).
    fn of(self, pages: usize) -> usize {
        match self {
            Amount::Pages(n) => usize::try_from(n).unwrap_or(usize::MAX).min(pages),
            Amount::Fraction(f) => ((pages as f64 * f).round() as usize).min(pages),
        }
    }
}

fn parse_amount(s: &str) -> Result<Amount, String> {
    if s.contains('.') {
        match s.parse::<f64>() {
            Ok(f) if f > 0.0 && f <= 1.0 => Ok(Amount::Fraction(f)),
            _ => Err(format!("{s:?}: a fraction must be in (0, 1]")),
        }
    } else {
        s.parse::<u64>()
            .map(Amount::Pages)
            .map_err(|_| format!("{s:?}: pages (a whole number) or a fraction (0.25)"))
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    match pagescope_core::units::parse_size(s)? {
        0 => Err("size must be at least one page".into()),
        n => Ok(n),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    pagescope_core::units::parse_duration(s)
}

fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn emit(v: serde_json::Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{v}")?;
    out.flush()?;
    Ok(())
}

/// The buffer, kept for the life of the program (the mapping or
/// allocation is never freed before exit).
type Buffer = Region;

fn map_buffer(args: &Args, len: usize) -> Result<Buffer> {
    if args.reserve.is_some() && args.mode != Mode::Anon {
        bail!("--reserve places an anonymous buffer: it needs --mode anon");
    }
    match args.mode {
        Mode::Malloc => Ok(Region::heap(len)),
        Mode::Anon => match args.reserve {
            Some(reserve) => Region::anonymous_in_reserve(len, reserve as usize)
                .context("mmap of the reservation holding the buffer"),
            None => Region::anonymous(len).context("mmap of the anonymous buffer"),
        },
        Mode::Hugetlb => Region::hugetlb(len).context("mmap of the hugetlb buffer (MAP_HUGETLB)"),
        Mode::File | Mode::Shm => {
            let fd = if args.mode == Mode::Shm {
                rustix::fs::memfd_create("pagetest", rustix::fs::MemfdFlags::CLOEXEC)
                    .context("memfd_create")?
            } else {
                let dir = args.dir.clone().unwrap_or_else(|| ".".into());
                let path = dir.join(format!("pagetest-{}.buf", std::process::id()));
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
                // Unlink at once: the mapping keeps the file alive, and a
                // killed pagetest leaves nothing behind.
                std::fs::remove_file(&path).ok();
                f.into()
            };
            rustix::fs::ftruncate(&fd, len as u64).context("sizing the buffer file")?;
            Region::shared(fd.as_fd(), len).context("mmap of the buffer file")
        }
    }
}

/// Touches one word of each of the first `len` bytes' pages of `buf`
/// (reads or writes `value`); returns the sum of the words read.
fn touch(buf: &Buffer, len: usize, page: usize, op: Op, value: u64) -> u64 {
    buf.touch(len, page, (op == Op::Write).then_some(value))
}

fn run(args: Args) -> Result<()> {
    if args.deny_userfaultfd {
        pagescope_sys::uffd::deny_userfaultfd().context("seccomp filter")?;
    }
    let page = rustix::param::page_size();
    let unit = match args.mode {
        Mode::Hugetlb => huge_page_size()?,
        _ => page as u64,
    };
    let len = usize::try_from(args.size.div_ceil(unit) * unit)
        .context("size too large for this machine")?;
    if len / page > usize::MAX / 2 {
        bail!("size too large");
    }
    let buf = map_buffer(&args, len)?;
    if args.thp {
        if args.mode != Mode::Anon {
            bail!("--thp asks for huge pages of an anonymous buffer: it needs --mode anon");
        }
        buf.advise_huge().context("madvise(MADV_HUGEPAGE)")?;
    }
    if args.op == Op::Read || args.prefault {
        touch(&buf, len, page, Op::Write, 1);
    }
    let start = buf.addr() as u64;
    emit(json!({
        "event": "ready",
        "pid": std::process::id(),
        "start": start,
        "end": start + len as u64,
        "pages": len / page,
        "page_size": page,
        "mode": format!("{:?}", args.mode).to_lowercase(),
        "op": format!("{:?}", args.op).to_lowercase(),
    }))?;
    if args.leader_exits_first {
        return leader_exits_first(args, buf, len, page);
    }
    after_ready(&args, &buf, len, page)
}

/// Starts a thread that runs the rest of pagetest ([`after_ready`]) and
/// ends the process with its result, says which thread it is, and ends
/// the main thread alone.
fn leader_exits_first(args: Args, buf: Buffer, len: usize, page: usize) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (said_tx, said) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("pagetest-worker".into())
        .spawn(move || {
            let _ = tx.send(thread_id());
            // The main thread says which thread this is before any line
            // of the rest.
            let _ = said.recv();
            let code = match after_ready(&args, &buf, len, page) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("pagetest: {e:#}");
                    1
                }
            };
            std::process::exit(code)
        })
        .context("starting the thread that goes on")?;
    let tid = rx
        .recv()
        .context("the thread that goes on")?
        .context("its id (/proc/thread-self)")?;
    emit(json!({"event": "leader-exits", "tid": tid}))?;
    let _ = said_tx.send(());
    pagescope_sys::thread::exit_this_thread()
}

/// The id of the calling thread (`/proc/thread-self`).
fn thread_id() -> Option<u32> {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|l| l.file_name()?.to_str()?.parse::<u32>().ok())
}

/// What pagetest does after `ready`: the delay, the iterations, the
/// children, `done`, and growing or holding on.
fn after_ready(args: &Args, buf: &Buffer, len: usize, page: usize) -> Result<()> {
    let mut checksum = 0u64;
    if !args.delay.is_zero() {
        std::thread::sleep(args.delay);
    }
    if args.wait_stdin {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
    }
    for i in 0..args.iterations {
        let t0 = now_ns();
        checksum = checksum.wrapping_add(touch(buf, len, page, args.op, i + 2));
        let t1 = now_ns();
        emit(json!({"event": "iteration", "index": i, "start_ns": t0, "end_ns": t1}))?;
        if args.clone_sibling {
            let pid = pagescope_sys::clone::clone_vm_sibling().context("clone(CLONE_VM)")?;
            emit(json!({"event": "sibling", "pid": pid}))?;
        }
        if let (0, Some(amount)) = (i, args.pageout) {
            pageout(buf, page, amount.of(len / page))?;
        }
        if !args.sleep.is_zero() {
            std::thread::sleep(args.sleep);
        }
    }
    if args.fork > 0 {
        let pids = fork_children(args, buf, page)?;
        emit(json!({"event": "forked", "pids": pids}))?;
    }
    emit(json!({"event": "done", "checksum": checksum}))?;
    if let (Some(size), Some(every)) = (args.grow, args.every) {
        grow(size, every, page)?;
    }
    if args.hold {
        hold();
    }
    if args.leader_exits {
        leader_exits()?;
    }
    Ok(())
}

/// Starts a thread that holds on, says which thread it is, and ends the
/// main thread alone. The buffer stays: the main thread runs no
/// destructor as it ends.
fn leader_exits() -> Result<()> {
    // Taken by the holding threads alone (`sigtimedwait`): blocked here,
    // and so in every thread started from now on.
    pagescope_sys::signals::block_in_thread(&[rustix::process::Signal::USR1.as_raw()], true)
        .context("blocking SIGUSR1")?;
    let tid = start_holder()?;
    emit(json!({"event": "leader-exits", "tid": tid}))?;
    pagescope_sys::thread::exit_this_thread()
}

/// Starts a thread that holds on until SIGUSR1, then starts the next
/// one (saying `{"event":"relay","tid":T}`) and ends; returns its id.
fn start_holder() -> Result<u32> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("pagetest-holder".into())
        .spawn(move || {
            let _ = tx.send(thread_id());
            let usr1 = [rustix::process::Signal::USR1.as_raw()];
            while pagescope_sys::signals::timed_wait(&usr1, Duration::from_secs(3600)).is_none() {}
            match start_holder() {
                Ok(next) => {
                    let _ = emit(json!({"event": "relay", "tid": next}));
                }
                Err(e) => eprintln!("pagetest: {e:#}"),
            }
        })
        .context("starting the holding thread")?;
    rx.recv()
        .context("the holding thread")?
        .context("the holding thread's id (/proc/thread-self)")
}

/// Pages out the first `pages` whole pages of the buffer (from its first
/// page boundary: a malloc'd buffer may start inside a page) and says
/// which.
fn pageout(buf: &Buffer, page: usize, pages: usize) -> Result<()> {
    let base = buf.addr();
    let first = base.next_multiple_of(page);
    let pages = pages.min((base + buf.len()).saturating_sub(first) / page);
    if pages > 0 {
        buf.page_out(first - base, pages * page)
            .context("madvise(MADV_PAGEOUT)")?;
    }
    emit(json!({
        "event": "pageout",
        "start": first,
        "end": first + pages * page,
        "pages": pages,
        "time_ns": now_ns(),
    }))
}

/// The default hugetlb page size (`Hugepagesize` of /proc/meminfo).
fn huge_page_size() -> Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    let kb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("Hugepagesize:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .context("no Hugepagesize in /proc/meminfo: this kernel has no hugetlb pages")?;
    Ok(kb * 1024)
}

fn hold() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Maps and writes `size` more bytes every `every`, forever, saying so.
fn grow(size: u64, every: Duration, page: usize) -> Result<()> {
    let len = usize::try_from(size.div_ceil(page as u64) * page as u64)?;
    let mut total = 0u64;
    loop {
        std::thread::sleep(every);
        let step = Region::anonymous(len).context("mmap of a growth step")?;
        touch(&step, len, page, Op::Write, 1);
        total += len as u64;
        emit(
            json!({"event": "grow", "start": step.addr(), "bytes": len, "total_bytes": total, "time_ns": now_ns()}),
        )?;
    }
}

/// Forks the children of `--fork`; returns their pids once each has read
/// the buffer (and the first has written its pages).
fn fork_children(args: &Args, buf: &Buffer, page: usize) -> Result<Vec<i32>> {
    let (rd, wr) = rustix::pipe::pipe().context("pipe")?;
    let mut pids = Vec::new();
    for i in 0..args.fork {
        // pagetest is single-threaded here, so the child may run any
        // code; it only touches the buffer, writes one byte to the pipe
        // and sleeps.
        let forked = pagescope_sys::clone::fork().context("fork")?;
        let Forked::Parent(pid) = forked else {
            // The child: die with the parent, read everything, write
            // what it was told to, report, and wait.
            let _ = rustix::process::set_parent_process_death_signal(Some(
                rustix::process::Signal::KILL,
            ));
            let me = std::process::id();
            let _ = emit(json!({"event": "child", "pid": me}));
            if !args.child_delay.is_zero() {
                std::thread::sleep(args.child_delay);
            }
            let sum = touch(buf, buf.len(), page, Op::Read, 0);
            let _ = emit(json!({"event": "child-read", "pid": me, "checksum": sum}));
            if i == 0 && args.child_writes > 0 {
                let n = (args.child_writes as usize).min(buf.len() / page);
                touch(buf, n * page, page, Op::Write, 0x55);
            }
            let _ = rustix::io::write(&wr, &[1]);
            hold();
        };
        pids.push(pid);
    }
    drop(wr);
    let mut byte = [0u8; 1];
    for _ in 0..args.fork {
        if rustix::io::read(&rd, &mut byte).context("waiting for the children")? == 0 {
            bail!("a child died before reading the buffer");
        }
    }
    Ok(pids)
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pagetest: error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
