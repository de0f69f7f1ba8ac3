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
//! memory after `done` until killed.

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use rustix::mm::{mmap, mmap_anonymous, MapFlags, ProtFlags};
use serde_json::json;
use std::io::Write;
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
    /// (a seccomp filter, x86_64), as a sandbox might: a tracer attached
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

/// The buffer: a base pointer and length, owned for the life of the
/// program (the mapping or allocation is never freed before exit).
struct Buffer {
    base: *mut u8,
    len: usize,
    _keep: Option<Vec<u64>>,
}

fn map_buffer(args: &Args, len: usize) -> Result<Buffer> {
    let rw = ProtFlags::READ | ProtFlags::WRITE;
    match args.mode {
        Mode::Malloc => {
            let mut v: Vec<u64> = Vec::with_capacity(len / 8);
            let base = v.as_mut_ptr() as *mut u8;
            Ok(Buffer {
                base,
                len,
                _keep: Some(v),
            })
        }
        Mode::Anon => {
            // SAFETY: a fresh private anonymous mapping at an address the
            // kernel chooses; it overlaps nothing and lives until exit.
            #[allow(unsafe_code)]
            let p = unsafe { mmap_anonymous(std::ptr::null_mut(), len, rw, MapFlags::PRIVATE) }
                .context("mmap of the anonymous buffer")?;
            Ok(Buffer {
                base: p as *mut u8,
                len,
                _keep: None,
            })
        }
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
            // SAFETY: a fresh shared mapping of a file only we hold, at an
            // address the kernel chooses; it lives until exit.
            #[allow(unsafe_code)]
            let p = unsafe { mmap(std::ptr::null_mut(), len, rw, MapFlags::SHARED, &fd, 0) }
                .context("mmap of the buffer file")?;
            Ok(Buffer {
                base: p as *mut u8,
                len,
                _keep: None,
            })
        }
    }
}

fn touch(buf: &Buffer, page: usize, op: Op, value: u64) -> u64 {
    let mut sum = 0;
    let mut off = 0;
    while off < buf.len {
        // SAFETY: `off` is below `len`, 8-aligned (base is page- or
        // malloc-aligned), and the buffer is mapped read-write for the
        // whole run; volatile so each touch really happens.
        #[allow(unsafe_code)]
        unsafe {
            let p = buf.base.add(off) as *mut u64;
            match op {
                Op::Write => std::ptr::write_volatile(p, value),
                Op::Read => sum += std::ptr::read_volatile(p),
            }
        }
        off += page;
    }
    sum
}

/// Installs a seccomp filter under which `userfaultfd(2)` fails with
/// EPERM and every other system call is allowed.
#[cfg(target_arch = "x86_64")]
fn deny_userfaultfd() -> Result<()> {
    const NR_USERFAULTFD: u32 = 323;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    let insn = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let mut filter = [
        // A = seccomp_data.nr
        insn((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 0, 0, 0),
        insn(
            (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            0,
            1,
            NR_USERFAULTFD,
        ),
        insn(
            (libc::BPF_RET | libc::BPF_K) as u16,
            0,
            0,
            SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        insn(
            (libc::BPF_RET | libc::BPF_K) as u16,
            0,
            0,
            SECCOMP_RET_ALLOW,
        ),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    #[allow(unsafe_code)]
    // SAFETY: prctl with integer arguments, then with a pointer to a
    // filter program that outlives the call.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) != 0
        {
            return Err(std::io::Error::last_os_error()).context("seccomp filter");
        }
    }
    Ok(())
}

#[cfg(not(target_arch = "x86_64"))]
fn deny_userfaultfd() -> Result<()> {
    bail!("--deny-userfaultfd is built for x86_64 only")
}

fn run(args: Args) -> Result<()> {
    if args.deny_userfaultfd {
        deny_userfaultfd()?;
    }
    let page = rustix::param::page_size();
    let len = usize::try_from(args.size.div_ceil(page as u64) * page as u64)
        .context("size too large for this machine")?;
    if len / page > usize::MAX / 2 {
        bail!("size too large");
    }
    let buf = map_buffer(&args, len)?;
    if args.op == Op::Read || args.prefault {
        touch(&buf, page, Op::Write, 1);
    }
    let start = buf.base as u64;
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
        checksum = checksum.wrapping_add(touch(&buf, page, args.op, i + 2));
        let t1 = now_ns();
        emit(json!({"event": "iteration", "index": i, "start_ns": t0, "end_ns": t1}))?;
        if let (0, Some(amount)) = (i, args.pageout) {
            pageout(&buf, page, amount.of(len / page))?;
        }
        if !args.sleep.is_zero() {
            std::thread::sleep(args.sleep);
        }
    }
    if args.fork > 0 {
        let pids = fork_children(&args, &buf, page)?;
        emit(json!({"event": "forked", "pids": pids}))?;
    }
    emit(json!({"event": "done", "checksum": checksum}))?;
    if let (Some(size), Some(every)) = (args.grow, args.every) {
        grow(size, every, page)?;
    }
    if args.hold {
        hold();
    }
    Ok(())
}

/// Pages out the first `pages` whole pages of the buffer (from its first
/// page boundary: a malloc'd buffer may start inside a page) and says
/// which.
fn pageout(buf: &Buffer, page: usize, pages: usize) -> Result<()> {
    let base = buf.base as usize;
    let first = base.next_multiple_of(page);
    let pages = pages.min((base + buf.len).saturating_sub(first) / page);
    if pages > 0 {
        // SAFETY: the range is whole pages inside the buffer, which stays
        // mapped; MADV_PAGEOUT only moves its pages to swap (or drops
        // clean ones), keeping their contents.
        #[allow(unsafe_code)]
        unsafe {
            rustix::mm::madvise(
                first as *mut std::ffi::c_void,
                pages * page,
                rustix::mm::Advice::LinuxPageOut,
            )
        }
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
        // SAFETY: a fresh private anonymous mapping at an address the
        // kernel chooses; it is never unmapped.
        #[allow(unsafe_code)]
        let p = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .context("mmap of a growth step")?;
        let step = Buffer {
            base: p as *mut u8,
            len,
            _keep: None,
        };
        touch(&step, page, Op::Write, 1);
        total += len as u64;
        emit(
            json!({"event": "grow", "start": p as u64, "bytes": len, "total_bytes": total, "time_ns": now_ns()}),
        )?;
    }
}

/// Forks the children of `--fork`; returns their pids once each has read
/// the buffer (and the first has written its pages).
fn fork_children(args: &Args, buf: &Buffer, page: usize) -> Result<Vec<i32>> {
    let (rd, wr) = rustix::pipe::pipe().context("pipe")?;
    let mut pids = Vec::new();
    for i in 0..args.fork {
        // SAFETY: pagetest is single-threaded here, so the child may run
        // any code; it only touches the buffer, writes one byte to the
        // pipe and sleeps.
        #[allow(unsafe_code)]
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork failed: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
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
            let sum = touch(buf, page, Op::Read, 0);
            let _ = emit(json!({"event": "child-read", "pid": me, "checksum": sum}));
            if i == 0 && args.child_writes > 0 {
                let n = (args.child_writes as usize).min(buf.len / page);
                let part = Buffer {
                    base: buf.base,
                    len: n * page,
                    _keep: None,
                };
                touch(&part, page, Op::Write, 0x55);
            }
            let _ = rustix::io::write(&wr, &[1]);
            hold();
        }
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
