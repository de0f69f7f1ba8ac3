//! `pagescope report pages`: every page, streamed row by row, since a
//! machine has millions of them.

use super::feed::feed;
use crate::cli::ReportArgs;
use crate::output::{note, render_format, stdout};
use crate::BadInput;
use anyhow::{Context, Result};
use pagescope_core::analysis::pages::{FlagFilter, PageDump, PageRow};
use pagescope_linux::snapshot::Detail;
use pagescope_render::stream::{row_stream, Cell, StreamColumn};

/// The columns of the page dump.
const PAGE_COLUMNS: [StreamColumn; 15] = [
    StreamColumn {
        key: "pid",
        title: "PID",
        width: 7,
    },
    StreamColumn {
        key: "comm",
        title: "COMM",
        width: 15,
    },
    StreamColumn {
        key: "vaddr",
        title: "VADDR",
        width: 14,
    },
    StreamColumn {
        key: "pfn",
        title: "PFN",
        width: 9,
    },
    StreamColumn {
        key: "phys_addr",
        title: "PHYS",
        width: 12,
    },
    StreamColumn {
        key: "pagemap",
        title: "PAGEMAP",
        width: 7,
    },
    StreamColumn {
        key: "perms",
        title: "PERM",
        width: 4,
    },
    StreamColumn {
        key: "vma_flags",
        title: "VMAFLG",
        width: 6,
    },
    StreamColumn {
        key: "class",
        title: "CLASS",
        width: 6,
    },
    StreamColumn {
        key: "kpageflags",
        title: "KPAGEFLAGS",
        width: 27,
    },
    StreamColumn {
        key: "count",
        title: "COUNT",
        width: 5,
    },
    StreamColumn {
        key: "node",
        title: "NODE",
        width: 4,
    },
    StreamColumn {
        key: "swap_type",
        title: "SWTYPE",
        width: 6,
    },
    StreamColumn {
        key: "swap_offset",
        title: "SWAP-OFFSET",
        width: 11,
    },
    StreamColumn {
        key: "owner",
        title: "OWNER",
        width: 0,
    },
];

/// Runs `report pages`.
pub fn run(args: &ReportArgs) -> Result<()> {
    let filter = match &args.flags {
        Some(f) => FlagFilter::parse(f)
            .map_err(|e| anyhow::anyhow!("--flags: {e}"))
            .context(BadInput)?,
        None => FlagFilter::default(),
    };
    let mut out = stdout();
    let mut stream = Some(row_stream(
        render_format(args.rendering.format),
        "pages",
        "pages",
        &PAGE_COLUMNS,
        9,
        &mut out,
    )?);
    let (mut pagemap_syms, mut kflags) = (String::new(), String::new());
    let mut dump = PageDump::new(filter, |r: &PageRow<'_>| {
        let phys = r.phys.filter(|_| r.entry.pfn().is_some());
        let pfn = r.entry.pfn().filter(|_| phys.is_some()).map(|p| p.0);
        let swap = r
            .entry
            .swap_type()
            .zip(r.entry.swap_offset())
            .filter(|&(_, o)| r.entry.is_in_swap() && o != 0);
        pagemap_syms.clear();
        pagemap_syms.push_str(&r.entry.symbols());
        if let Some(p) = phys {
            p.flags.write_short_symbols(&mut kflags);
        }
        let cells = [
            Cell::Int(r.pid as u64),
            Cell::Text(r.comm),
            Cell::Hex(r.vaddr),
            pfn.map_or(Cell::Missing, Cell::Hex),
            pfn.map_or(Cell::Missing, |p| Cell::Hex(p * r.page_size)),
            Cell::Text(&pagemap_syms),
            Cell::Text(r.vma.map_or("----", |v| v.perms.as_str())),
            Cell::Text(r.vma_flags),
            Cell::Text(r.class.name()),
            phys.map_or(Cell::Missing, |_| Cell::Text(&kflags)),
            phys.map_or(Cell::Missing, |p| Cell::Int(p.count)),
            phys.map_or(Cell::Missing, |p| {
                if p.node == u16::MAX {
                    Cell::Missing
                } else {
                    Cell::Int(p.node as u64)
                }
            }),
            // A page in swap: its swap entry (zero, and so missing,
            // without CAP_SYS_ADMIN; offset 0 is the swap header).
            swap.map_or(Cell::Missing, |(t, _)| Cell::Int(t as u64)),
            swap.map_or(Cell::Missing, |(_, o)| Cell::Hex(o)),
            Cell::Text(r.owner),
        ];
        stream
            .as_mut()
            .expect("open until the dump ends")
            .row(&cells)
            .map_err(|e| pagescope_core::Error::io("standard output", e))
    });
    let cut = feed(args, Detail::Full, &mut dump)?;
    let mut notes: Vec<String> = cut.into_iter().collect();
    notes.extend(dump.system.missing.iter().cloned());
    notes.extend(dump.notes.iter().cloned());
    if !filter.is_empty() && !dump.system.pfns_visible {
        notes.push("--flags needs page flags, which this snapshot lacks (taken without CAP_SYS_ADMIN): no page passes".into());
    }
    let ps = dump.system.page_size;
    drop(dump);
    for n in &notes {
        note(n);
    }
    // Finishing flushes the output.
    stream.take().expect("still open").finish(ps, &notes)?;
    Ok(())
}
