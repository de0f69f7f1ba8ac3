//! Soft-dirty bits (CONFIG_MEM_SOFT_DIRTY): pagemap bit 55 is set on a
//! page written since the process's last `clear_refs` 4. Written pages
//! come from them where the kernel has them (see [`super::writes`]).

use super::process::{clear_refs, gone_ok};
use crate::pagemap::PagemapReader;
use crate::procfs::ProcDir;
use pagescope_core::Result;
use std::io::Write;
use std::path::Path;

/// Whether the kernel tracks soft-dirty bits (CONFIG_MEM_SOFT_DIRTY).
/// Every kernel accepts `4` in `clear_refs`, and without the option
/// pagemap bit 55 is simply never set, so the test is on pagescope
/// itself: clear, write one page, and see whether its bit comes back.
pub fn has_soft_dirty(proc_root: &Path, page_size: u64) -> bool {
    let page = vec![0u8; 2 * page_size as usize];
    let addr = (page.as_ptr() as u64).next_multiple_of(page_size);
    let own = ProcDir::own(proc_root);
    let ok = own
        .open_write("clear_refs")
        .is_ok_and(|mut f| f.write_all(b"4").is_ok());
    if !ok {
        return false;
    }
    let offset = (addr - page.as_ptr() as u64) as usize;
    // A volatile write, so that it is not optimised away.
    let mut page = page;
    pagescope_sys::touch::write_volatile(&mut page[offset], 1);
    let Ok(mut reader) = own.pagemap_reader(page_size) else {
        return false;
    };
    let mut dirty = false;
    let _ = reader.for_each(addr, addr + page_size, |_, e| dirty = e.is_soft_dirty());
    std::hint::black_box(&page);
    dirty
}

/// Clears the soft-dirty bits of `pids` (`clear_refs` 4); processes that
/// exit meanwhile are skipped.
pub(super) fn clear(proc_root: &Path, pids: &[u32]) -> Result<()> {
    for &pid in pids {
        if let Ok(dir) = ProcDir::open_memory(proc_root, pid) {
            gone_ok(clear_refs(&dir, b"4"))?;
        }
    }
    Ok(())
}

/// Counts the soft-dirty present pages of `[start, end)`.
pub(super) fn count(dir: &ProcDir, start: u64, end: u64, page_size: u64) -> Result<u64> {
    let file = dir.open_file("pagemap")?;
    let mut reader = PagemapReader::new(file, dir.path().join("pagemap"), page_size);
    let mut n = 0;
    reader.for_each(start, end, |_, e| {
        if e.is_present() && e.is_soft_dirty() {
            n += 1;
        }
    })?;
    Ok(n)
}
