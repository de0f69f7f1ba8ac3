//! What the recorder reads of the machine: kernel memory and swap, from
//! `/proc/meminfo`.

use pagescope_core::parse::meminfo;
use pagescope_core::record::KernelResident;
use pagescope_core::{Error, Result};
use std::path::Path;

/// Kernel memory resident now, from `/proc/meminfo`.
pub fn kernel_resident(proc_root: &Path, page_size: u64) -> Result<KernelResident> {
    let path = proc_root.join("meminfo");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let m = meminfo::parse(&text).map_err(|e| Error::corrupt(&path, e.to_string()))?;
    let kb = |key: &str| m.iter().find(|(k, _)| k == key).map_or(0, |(_, v)| *v);
    let pages = |kb: u64| kb * 1024 / page_size;
    Ok(KernelResident {
        slab: pages(kb("Slab")),
        page_tables: pages(kb("PageTables") + kb("SecPageTables")),
        kernel_stack: pages(kb("KernelStack")),
    })
}

/// Whether the machine has swap switched on (`SwapTotal` of
/// `/proc/meminfo` above 0).
pub(super) fn has_swap(proc_root: &Path) -> bool {
    std::fs::read_to_string(proc_root.join("meminfo"))
        .ok()
        .and_then(|t| meminfo::parse(&t).ok())
        .and_then(|m| m.into_iter().find(|(k, _)| k == "SwapTotal"))
        .is_some_and(|(_, kb)| kb > 0)
}
