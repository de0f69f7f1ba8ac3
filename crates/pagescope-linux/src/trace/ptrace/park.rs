//! Parking: before an injection changes a thread's registers they are
//! written next to a `pause()` loop of pagescope's code, where the thread
//! waits should pagescope die in the middle; `--release` finds such
//! threads ([`Parked::find`]) and gives them their registers back. Also
//! the bootstrap written into the vDSO for the calls that make the
//! mover's page, and the vDSO's own `syscall` instruction.

use super::code::{
    BOOT_BYTES, BOOT_CODE, BOOT_LOOP, BOOT_MAGIC, BOOT_RECORD, MOVER_BATCH, MOVER_CODE, PARK_MAGIC,
    PARK_RECORD, PAUSE_PC, RECORD_BYTES,
};
use super::process::seize_error;
use pagescope_sys::ptrace::{self, Regs};
use pagescope_sys::wait::{self, waitpid, Status};
use rustix::io::Errno;
use std::io;

/// Writes a bootstrap into the unused end of the vDSO of `pid` (the zero
/// bytes that round its image up to whole pages; the process gets its
/// own copy of that page): a magic word, the `syscall` instruction and
/// `pause()` loop that start [`MOVER_CODE`], and room for a parking
/// record. Returns the address of its `syscall`, or `None` if the vDSO
/// has no room (the first calls of a set-up then run at a `syscall` of
/// the vDSO's own code, with no parking).
///
/// A set-up's first call maps the mover's page: until then the program
/// has no page of pagescope's, and a thread let go in the middle of that
/// call by pagescope's death would run on into the vDSO with the call's
/// registers. Parked at the bootstrap it waits in `pause()` instead, for
/// `--release`.
pub fn vdso_bootstrap(pid: u32) -> io::Result<Option<u64>> {
    let (start, bytes) = vdso(pid)?;
    // One written before (a process traced again): used again.
    let at = (0..bytes.len().saturating_sub(BOOT_BYTES))
        .step_by(64)
        .find(|&i| bytes[i..i + 8] == BOOT_MAGIC.to_le_bytes())
        .or_else(|| {
            let last = bytes.iter().rposition(|&b| b != 0)?;
            // Clear of whatever the image ends with, by 64 bytes at least.
            let at = (last + 1 + 64).next_multiple_of(64);
            (at + BOOT_BYTES <= bytes.len()).then_some(at)
        });
    let Some(at) = at else {
        return Ok(None);
    };
    let boot = start + at as u64;
    let mut area = BOOT_MAGIC.to_le_bytes().to_vec();
    area.resize(BOOT_CODE as usize, 0);
    area.extend_from_slice(&MOVER_CODE[..BOOT_LOOP]);
    area.resize(BOOT_RECORD as usize + 8, 0);
    write_code(pid, boot, &area)?;
    Ok(Some(boot + BOOT_CODE))
}

/// Writes `bytes` at `addr` in `pid` through `/proc/PID/mem`, which
/// writes into a page mapped without write permission (the mover's code
/// page): the kernel gives the process its own copy of the page.
pub fn write_code(pid: u32, addr: u64, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    crate::procfs::ProcDir::live(pid)
        .mem()?
        .write_all_at(bytes, addr)
}

/// The threads of `pid` blocked in `pause()` in the loop of a page that
/// holds [`MOVER_CODE`], or of a vDSO bootstrap ([`vdso_bootstrap`]):
/// each with the address of the parking record there and its bytes.
fn in_pause_loop(pid: u32) -> Vec<(u32, u64, Vec<u8>)> {
    let mut out = Vec::new();
    let proc = crate::procfs::ProcDir::live(pid);
    let Ok(tasks) = proc.tasks() else {
        return out;
    };
    let mut buf = Vec::new();
    for tid in tasks {
        // A thread blocked in a system call: pause (34).
        let Ok(Some(sc)) = proc.task(tid).and_then(|t| t.syscall(&mut buf)) else {
            continue;
        };
        if sc.nr != 34 {
            continue;
        }
        let pc = sc.pc;
        let code = pc & !4095;
        let mut page = vec![0u8; PARK_RECORD as usize + RECORD_BYTES];
        if (code + 2..=code + MOVER_BATCH).contains(&pc)
            && crate::trace::remote::read(pid, code, &mut page).is_ok()
            && page[..MOVER_CODE.len()] == MOVER_CODE
        {
            out.push((
                tid,
                code + PARK_RECORD,
                page.split_off(PARK_RECORD as usize),
            ));
            continue;
        }
        let Some(boot) = pc.checked_sub(PAUSE_PC + BOOT_CODE) else {
            continue;
        };
        let mut area = vec![0u8; BOOT_BYTES];
        if crate::trace::remote::read(pid, boot, &mut area).is_ok()
            && area[..8] == BOOT_MAGIC.to_le_bytes()
            && area[BOOT_CODE as usize..][..BOOT_LOOP] == MOVER_CODE[..BOOT_LOOP]
        {
            out.push((
                tid,
                boot + BOOT_RECORD,
                area.split_off(BOOT_RECORD as usize),
            ));
        }
    }
    out
}

/// Whether `pid` is a mover that pagescope never attached (it died
/// between the `clone` that made it and the attach, so the kernel did
/// not kill it with pagescope): a process of one thread, waiting in the
/// `pause()` loop of a mover's code page with no parking record naming
/// it. (No thread of the program waits there but a parked one, which a
/// record names.) It holds a copy of the program's descriptors as they
/// were at the `clone` (a pipe's write end keeps the reader waiting), so
/// `--release` ends it.
pub fn stray_mover(pid: u32) -> bool {
    let threads = crate::procfs::ProcDir::live(pid)
        .tasks()
        .map_or(0, |t| t.len());
    threads == 1 && in_pause_loop(pid).len() == 1 && Parked::find(pid).is_empty()
}

/// A thread left in the `pause()` loop of a mover's code page (or of
/// the bootstrap in the vDSO) by an injection that pagescope did not live
/// to finish, and the registers to give it back.
///
/// Before an injection changes a thread's registers, the tracer writes
/// them into the code page (at [`PARK_RECORD`]: magic, thread id,
/// `user_regs_struct`; in the bootstrap, after its code), and clears the
/// record once the thread has them back. A thread whose record is still
/// there *and* that sits in the loop (the program's own code never runs
/// there) is parked.
#[derive(Debug, Clone, Copy)]
pub struct Parked {
    /// The thread.
    pub tid: u32,
    /// Its parking record's address.
    pub record: u64,
    regs: Regs,
}

impl Parked {
    pub(super) fn record(tid: u32, regs: &Regs) -> Vec<u8> {
        let mut out = Vec::with_capacity(RECORD_BYTES);
        out.extend_from_slice(&PARK_MAGIC.to_le_bytes());
        out.extend_from_slice(&u64::from(tid).to_le_bytes());
        for w in regs.to_words() {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// The parked threads of process `pid`: each thread blocked in
    /// `pause()` whose instruction pointer is in the loop of a page
    /// holding [`MOVER_CODE`] and a record naming it.
    pub fn find(pid: u32) -> Vec<Parked> {
        let mut out = Vec::new();
        for (tid, record, rec) in in_pause_loop(pid) {
            let word = |i: usize| u64::from_le_bytes(rec[i * 8..i * 8 + 8].try_into().unwrap());
            if word(0) != PARK_MAGIC || word(1) != u64::from(tid) {
                continue;
            }
            let regs = Regs::from_words(std::array::from_fn(|i| word(2 + i)));
            out.push(Parked { tid, record, regs });
        }
        out
    }

    /// Gives the thread its registers back (attached for that moment
    /// only): it leaves the `pause()` and goes on with its own code, as
    /// it would have after the injection. Clears the record.
    pub fn unpark(&self, pid: u32) -> io::Result<()> {
        let t = self.tid;
        ptrace::seize(t, 0).map_err(|e| seize_error(t, e))?;
        let r = (|| {
            ptrace::interrupt(t)?;
            loop {
                match waitpid(Some(t), wait::ALL) {
                    Err(Errno::INTR) => continue,
                    Ok(Some((_, Status::Event { .. }))) => break,
                    // A signal that came meanwhile: deliver it later.
                    Ok(Some((_, Status::Stopped(sig)))) => ptrace::cont(t, sig)?,
                    Ok(other) => {
                        return Err(io::Error::other(format!(
                            "thread {} went away while parked: {other:?}",
                            self.tid
                        )))
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            ptrace::setregs(self.tid, &self.regs)?;
            Ok(())
        })();
        let _ = write_code(pid, self.record, &[0u8; 8]);
        let _ = ptrace::detach(t, 0);
        r
    }
}

/// Finds a `syscall` instruction (bytes 0f 05) in the vDSO of `pid`, for
/// injection where the thread's own can't be used.
pub fn vdso_syscall(pid: u32) -> io::Result<u64> {
    let (start, bytes) = vdso(pid)?;
    bytes
        .windows(2)
        .position(|w| w == [0x0f, 0x05])
        .map(|i| start + i as u64)
        .ok_or_else(|| io::Error::other("no syscall instruction in the vDSO"))
}

/// The vDSO of `pid`: its address and bytes.
fn vdso(pid: u32) -> io::Result<(u64, Vec<u8>)> {
    let (start, end) = crate::procfs::ProcDir::live(pid)
        .vdso(&mut Vec::new())?
        .ok_or_else(|| io::Error::other("the process has no vDSO (booted with vdso=0?)"))?;
    let mut bytes = vec![0u8; (end - start) as usize];
    crate::trace::remote::read(pid, start, &mut bytes)?;
    Ok((start, bytes))
}
