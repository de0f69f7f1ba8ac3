//! The machine's totals from the kernel's own counters: the lines of
//! `/proc/meminfo` that fs/proc/meminfo.c computes from `vm_zone_stat`
//! and `vm_node_stat` (the global counters of mm/vmstat.c, which
//! meminfo reads too), `_totalram_pages`, and `Buffers` from the block
//! devices' page caches (`nr_blockdev_pages`). The per-CPU deltas not yet
//! folded into the global counters (at most a second's worth) are not
//! read, as meminfo does not read them.

use crate::btf::Btf;
use crate::kernel::Kernel;
use crate::Result;

/// The counters' indexes (from BTF's `enum zone_stat_item` and `enum
/// node_stat_item`) and the offsets `nr_blockdev_pages` follows.
#[derive(Clone, Debug, Default)]
pub struct Items {
    free: Option<u64>,
    file: Option<u64>,
    swapcache: Option<u64>,
    shmem: Option<u64>,
    anon: Option<u64>,
    slab_reclaimable: Option<u64>,
    slab_unreclaimable: Option<u64>,
    page_tables: Option<u64>,
    secondary_page_tables: Option<u64>,
    kernel_stack_kb: Option<u64>,
    /// `super_block.s_inodes`, `inode.i_sb_list`, `inode.i_mapping`,
    /// `address_space.nrpages`.
    blockdev: Option<(u64, u64, u64, u64)>,
}

impl Items {
    /// Finds the items in the kernel's BTF.
    pub fn new(btf: &Btf) -> Items {
        let e = |n: &str| btf.enum_value(n).and_then(|v| u64::try_from(v).ok());
        let f = |s: &str, m: &str| btf.field(s, m).map(|f| f.offset);
        Items {
            free: e("NR_FREE_PAGES"),
            file: e("NR_FILE_PAGES"),
            swapcache: e("NR_SWAPCACHE"),
            shmem: e("NR_SHMEM"),
            anon: e("NR_ANON_MAPPED"),
            slab_reclaimable: e("NR_SLAB_RECLAIMABLE_B"),
            slab_unreclaimable: e("NR_SLAB_UNRECLAIMABLE_B"),
            page_tables: e("NR_PAGETABLE"),
            secondary_page_tables: e("NR_SECONDARY_PAGETABLE"),
            kernel_stack_kb: e("NR_KERNEL_STACK_KB"),
            blockdev: match (
                f("super_block", "s_inodes"),
                f("inode", "i_sb_list"),
                f("inode", "i_mapping"),
                f("address_space", "nrpages"),
            ) {
                (Some(a), Some(b), Some(c), Some(d)) => Some((a, b, c, d)),
                _ => None,
            },
        }
    }
}

/// At most this many block device inodes are followed (a list damaged
/// in the dump must not loop).
const MAX_BDEVS: u64 = 1 << 16;

/// meminfo's lines from the counters, in kB, in meminfo's order; a line
/// whose counter is not in the dump (or not in this kernel) is left out.
pub fn meminfo(k: &mut Kernel<'_>, items: &Items, page_size: u64) -> Result<Vec<(String, u64)>> {
    let kb = page_size / 1024;
    let (Some(zone), Some(node)) = (k.symbol("vm_zone_stat"), k.symbol("vm_node_stat")) else {
        return Ok(Vec::new());
    };
    // atomic_long_t each.
    let mut at = |base: u64, item: Option<u64>| -> Result<Option<u64>> {
        match item {
            Some(i) => Ok(k
                .u64(base.wrapping_add(i.wrapping_mul(8)))?
                .map(|v| (v as i64).max(0) as u64)),
            None => Ok(None),
        }
    };
    let free = at(zone, items.free)?;
    let file = at(node, items.file)?;
    let swapcache = at(node, items.swapcache)?;
    let shmem = at(node, items.shmem)?;
    let anon = at(node, items.anon)?;
    let sreclaimable = at(node, items.slab_reclaimable)?;
    let sunreclaim = at(node, items.slab_unreclaimable)?;
    let page_tables = at(node, items.page_tables)?;
    let sec_page_tables = at(node, items.secondary_page_tables)?;
    let stack_kb = at(node, items.kernel_stack_kb)?;
    let total = match k.symbol("_totalram_pages") {
        Some(a) => k.u64(a)?,
        None => None,
    };
    let buffers = blockdev_pages(k, items)?;
    let mut out = Vec::new();
    let mut line = |name: &str, pages: Option<u64>| {
        if let Some(p) = pages {
            out.push((name.to_string(), p.saturating_mul(kb)));
        }
    };
    line("MemTotal", total);
    line("MemFree", free);
    line("Buffers", buffers);
    // meminfo: NR_FILE_PAGES less the swap cache and the buffers.
    if let (Some(f), Some(b)) = (file, buffers) {
        line(
            "Cached",
            Some(f.saturating_sub(swapcache.unwrap_or(0)).saturating_sub(b)),
        );
    }
    line("SwapCached", swapcache);
    line("AnonPages", anon);
    line("Shmem", shmem);
    line("SReclaimable", sreclaimable);
    line("SUnreclaim", sunreclaim);
    // Counted in kB already.
    line("KernelStack", stack_kb.map(|s| s / kb.max(1)));
    line("PageTables", page_tables);
    line("SecPageTables", sec_page_tables);
    Ok(out)
}

/// `nr_blockdev_pages`: the pages in the page caches of the block
/// devices' inodes (`blockdev_superblock`'s inode list).
fn blockdev_pages(k: &mut Kernel<'_>, items: &Items) -> Result<Option<u64>> {
    let (Some(sbp), Some((s_inodes, i_sb_list, i_mapping, nrpages))) =
        (k.symbol("blockdev_superblock"), items.blockdev)
    else {
        return Ok(None);
    };
    let Some(sb) = k.u64(sbp)? else {
        return Ok(None);
    };
    let head = sb.wrapping_add(s_inodes);
    let mut sum = 0;
    let mut next = k.u64(head)?;
    let mut n = 0;
    while let Some(p) = next {
        if p == head {
            return Ok(Some(sum));
        }
        n += 1;
        if n > MAX_BDEVS {
            return Ok(None);
        }
        let inode = p.wrapping_sub(i_sb_list);
        let Some(mapping) = k.u64(inode.wrapping_add(i_mapping))? else {
            return Ok(None);
        };
        let Some(pages) = k.u64(mapping.wrapping_add(nrpages))? else {
            return Ok(None);
        };
        sum = pages.saturating_add(sum);
        next = k.u64(p)?;
    }
    Ok(None)
}
