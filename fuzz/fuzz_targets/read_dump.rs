//! Fuzzes the crash-dump readers: the dump file of either kind (ELF core,
//! makedumpfile's compressed kdump format with its four codecs), its
//! VMCOREINFO, and the BTF reader. Any input must open and read, or be
//! refused with an error, never a panic, an allocation beyond the file's
//! size, or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagescope_dump::btf::Btf;
use pagescope_dump::dumpfile::Dump;
use pagescope_dump::vmcoreinfo::VmcoreInfo;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The readers take a file: one per fuzzing process, written anew for
/// each input.
fn file() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("pagescope-fuzz-dump-{}", std::process::id()))
    })
}

/// Removes the input's file when the input is done.
struct Removed(&'static PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = Btf::parse(data);
    let path = file();
    let _removed = Removed(path);
    if std::fs::write(path, data).is_err() {
        return;
    }
    let Ok(dump) = Dump::open(path) else {
        return;
    };
    if let Some(text) = dump.vmcoreinfo() {
        let _ = VmcoreInfo::parse(text);
    }
    let _ = dump.machine();
    let _ = dump.phys_base();
    let _ = dump.open_notes();
    // The first pages of the first ranges, twice (the second time from
    // the compressed dump's cache), and reads across a page's end.
    let mut page = vec![0u8; 4096];
    for _ in 0..2 {
        for (start, end) in dump.ranges().into_iter().take(8) {
            let mut a = start;
            while a < end && a < start.saturating_add(16 * 4096) {
                let _ = dump.read_phys(a, &mut page);
                let _ = dump.read_phys(a.saturating_add(4000), &mut page[..200]);
                a = a.saturating_add(4096);
            }
        }
    }
    let _ = dump.read_notes();
});
