//! Processes in the dump: the task list from `init_task`, each mm's VMAs
//! from its maple tree (6.1's `mm_mt`), and file paths from the dentry
//! chain, crossing mounts as `d_path` does.

use crate::kernel::Kernel;
use crate::Result;
use pagescope_core::model::Vma;

/// `PF_KTHREAD` (include/linux/sched.h).
const PF_KTHREAD: u32 = 0x0020_0000;
/// Most tasks a list may hold before it is taken for a loop.
const MAX_TASKS: usize = 1 << 22;
/// `USER_HZ` on x86_64: /proc's clock ticks.
pub const USER_HZ: u64 = 100;

/// vm_flags bits (include/linux/mm.h, 6.1).
pub const VM_READ: u64 = 0x1;
/// `VM_WRITE`.
pub const VM_WRITE: u64 = 0x2;
/// `VM_EXEC`.
pub const VM_EXEC: u64 = 0x4;
/// `VM_MAYSHARE`.
pub const VM_MAYSHARE: u64 = 0x80;
/// `VM_PFNMAP`.
pub const VM_PFNMAP: u64 = 0x400;
/// `VM_LOCKED`.
pub const VM_LOCKED: u64 = 0x2000;
/// `VM_HUGETLB`.
pub const VM_HUGETLB: u64 = 0x40_0000;
/// `VM_SOFTDIRTY`.
pub const VM_SOFTDIRTY: u64 = 0x800_0000;
/// `VM_MIXEDMAP`.
pub const VM_MIXEDMAP: u64 = 0x1000_0000;

/// The `VmFlags` mnemonics of smaps by bit (fs/proc/task_mmu.c,
/// `show_smap_vma_flags`, x86_64 in 6.1).
const MNEMONICS: &[(u32, &str)] = &[
    (0, "rd"),
    (1, "wr"),
    (2, "ex"),
    (3, "sh"),
    (4, "mr"),
    (5, "mw"),
    (6, "me"),
    (7, "ms"),
    (8, "gd"),
    (10, "pf"),
    (13, "lo"),
    (14, "io"),
    (15, "sr"),
    (16, "rr"),
    (17, "dc"),
    (18, "de"),
    (20, "ac"),
    (21, "nr"),
    (22, "ht"),
    (23, "sf"),
    (24, "ar"),
    (25, "wf"),
    (26, "dd"),
    (27, "sd"),
    (28, "mm"),
    (29, "hg"),
    (30, "nh"),
    (31, "mg"),
    (9, "um"),
    (12, "uw"),
    (37, "ui"),
];

/// The smaps `VmFlags` mnemonics of `flags`, in smaps' order (by bit).
pub fn vm_flag_names(flags: u64) -> Vec<String> {
    let mut m: Vec<(u32, &str)> = MNEMONICS
        .iter()
        .copied()
        .filter(|&(b, _)| flags >> b & 1 == 1)
        .collect();
    m.sort_by_key(|&(b, _)| b);
    m.into_iter().map(|(_, n)| n.to_string()).collect()
}

/// One task (a thread group's leader) as the dump holds it.
#[derive(Clone, Debug, Default)]
pub struct TaskInfo {
    /// `struct task_struct *`.
    pub addr: u64,
    /// pid.
    pub pid: u32,
    /// tgid.
    pub tgid: u32,
    /// Parent's tgid.
    pub ppid: u32,
    /// comm.
    pub comm: String,
    /// PF_* flags.
    pub flags: u32,
    /// `struct mm_struct *` (0 for a kernel thread).
    pub mm: u64,
    /// Real uid.
    pub uid: u32,
    /// Start, ns after boot (`start_boottime`).
    pub start_ns: u64,
    /// Threads in the group.
    pub threads: u32,
}

impl TaskInfo {
    /// A kernel thread.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }
}

/// Every thread group leader on `init_task`'s list (`init_task` itself,
/// pid 0, is not listed, as /proc does not). `Err` text if the list can't
/// be followed from its start.
pub fn tasks(
    k: &mut Kernel<'_>,
    init_task: u64,
    notes: &mut Vec<String>,
) -> Result<Option<Vec<TaskInfo>>> {
    let l = k.layout.clone();
    let head = init_task + l.task_tasks;
    let mut out = Vec::new();
    let mut next = match k.u64(head)? {
        Some(n) => n,
        None => return Ok(None),
    };
    let mut seen = std::collections::HashSet::new();
    while next != head {
        if out.len() >= MAX_TASKS || !seen.insert(next) {
            notes.push("the task list loops; it was cut where it did".into());
            break;
        }
        let t = next - l.task_tasks;
        let Some(n) = k.u64(next)? else {
            notes.push(format!("the task list breaks at {t:#x} (memory not in the dump); tasks after it are missing"));
            break;
        };
        next = n;
        match task(k, t)? {
            Some(info) => out.push(info),
            None => notes.push(format!("task at {t:#x}: not in the dump; skipped")),
        }
    }
    Ok(Some(out))
}

fn task(k: &mut Kernel<'_>, t: u64) -> Result<Option<TaskInfo>> {
    let l = k.layout.clone();
    let Some(b) = k.bytes(
        t,
        l.task_comm
            .max(l.task_start_boottime)
            .max(l.task_real_cred)
            .max(l.task_signal) as usize
            + 16,
    )?
    else {
        return Ok(None);
    };
    let u64_at = |o: u64| u64::from_le_bytes(b[o as usize..o as usize + 8].try_into().expect("8"));
    let u32_at = |o: u64| u32::from_le_bytes(b[o as usize..o as usize + 4].try_into().expect("4"));
    let comm = &b[l.task_comm as usize..l.task_comm as usize + 16];
    let end = comm.iter().position(|&c| c == 0).unwrap_or(16);
    let parent = u64_at(l.task_real_parent);
    let ppid = match k.u32(parent + l.task_tgid)? {
        Some(p) if parent != t => p,
        _ => 0,
    };
    let cred = u64_at(l.task_real_cred);
    let uid = k.u32(cred + l.cred_uid)?.unwrap_or(0);
    let signal = u64_at(l.task_signal);
    let threads = k.u32(signal + l.signal_nr_threads)?.unwrap_or(1);
    Ok(Some(TaskInfo {
        addr: t,
        pid: u32_at(l.task_pid),
        tgid: u32_at(l.task_tgid),
        ppid,
        comm: String::from_utf8_lossy(&comm[..end]).into_owned(),
        flags: u32_at(l.task_flags),
        mm: u64_at(l.task_mm),
        uid,
        start_ns: u64_at(l.task_start_boottime),
        threads,
    }))
}

/// The mm fields pagescope reads.
#[derive(Clone, Debug, Default)]
pub struct MmInfo {
    /// The PGD's kernel address.
    pub pgd: u64,
    /// `start_brk`, `brk`: the heap.
    pub heap: (u64, u64),
    /// `start_stack`.
    pub start_stack: u64,
    /// `arg_start`, `arg_end`: the command line.
    pub args: (u64, u64),
    /// `exe_file`.
    pub exe_file: u64,
}

/// The mm at `mm`.
pub fn mm(k: &mut Kernel<'_>, mm: u64) -> Result<Option<MmInfo>> {
    let l = k.layout.clone();
    let mut r = |o| k.u64(mm + o);
    let (Some(pgd), Some(sb), Some(b), Some(ss), Some(a0), Some(a1), Some(exe)) = (
        r(l.mm_pgd)?,
        r(l.mm_start_brk)?,
        r(l.mm_brk)?,
        r(l.mm_start_stack)?,
        r(l.mm_arg_start)?,
        r(l.mm_arg_end)?,
        r(l.mm_exe_file)?,
    ) else {
        return Ok(None);
    };
    Ok(Some(MmInfo {
        pgd,
        heap: (sb, b),
        start_stack: ss,
        args: (a0, a1),
        exe_file: exe,
    }))
}

/// One VMA's raw fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmaInfo {
    /// `vm_start`.
    pub start: u64,
    /// `vm_end`.
    pub end: u64,
    /// `vm_flags`.
    pub flags: u64,
    /// `vm_pgoff`.
    pub pgoff: u64,
    /// `vm_file`.
    pub file: u64,
    /// `vm_ops`.
    pub ops: u64,
    /// `vm_private_data`.
    pub private: u64,
}

/// The VMAs of `mm`, from its maple tree, in address order. VMAs that
/// can't be (not of this mm, reversed, overlapping) are dropped with a
/// note.
pub fn vmas(k: &mut Kernel<'_>, mm: u64, notes: &mut Vec<String>) -> Result<Vec<VmaInfo>> {
    let l = k.layout.clone();
    let Some(root) = k.u64(mm + l.mm_mt_root)? else {
        notes.push("its VMA tree is not in the dump".into());
        return Ok(Vec::new());
    };
    let mut ptrs = Vec::new();
    let mut missing = false;
    maple_walk(k, root, 0, u64::MAX, 0, &mut ptrs, &mut missing)?;
    if missing {
        notes.push("part of its VMA tree is not in the dump; VMAs are missing".into());
    }
    let mut out = Vec::new();
    let mut unreadable = 0;
    for p in ptrs {
        let Some(b) = k.bytes(
            p,
            (l.vma_private
                .max(l.vma_ops)
                .max(l.vma_file)
                .max(l.vma_pgoff)
                .max(l.vma_flags)
                .max(l.vma_mm)
                + 8) as usize,
        )?
        else {
            unreadable += 1;
            continue;
        };
        let at = |o: u64| u64::from_le_bytes(b[o as usize..o as usize + 8].try_into().expect("8"));
        let v = VmaInfo {
            start: at(l.vma_start),
            end: at(l.vma_end),
            flags: at(l.vma_flags),
            pgoff: at(l.vma_pgoff),
            file: at(l.vma_file),
            ops: at(l.vma_ops),
            private: at(l.vma_private),
        };
        let off = k.mmu.page_size() - 1;
        if at(l.vma_mm) != mm || v.start >= v.end || v.start & off != 0 || v.end & off != 0 {
            notes.push(format!(
                "a VMA entry at {p:#x} does not belong to its mm; skipped"
            ));
            continue;
        }
        out.push(v);
    }
    if unreadable > 0 {
        notes.push(format!("{unreadable} of its VMAs are not in the dump"));
    }
    out.sort_by_key(|v| v.start);
    out.dedup();
    let before = out.len();
    let mut last_end = 0;
    out.retain(|v| {
        let ok = v.start >= last_end;
        if ok {
            last_end = v.end;
        }
        ok
    });
    if out.len() < before {
        notes.push("overlapping VMAs; the later ones were dropped".into());
    }
    Ok(out)
}

/// Visits a maple tree node, collecting leaf entries
/// (lib/maple_tree.c: the root is a node when its low two bits are 2,
/// `MAPLE_ROOT_NODE`, and it is above 4096; every slot of a non-leaf node
/// is a node; a node's type is in bits 3-6 of its pointer, its address in
/// the bits above 8).
fn maple_walk(
    k: &mut Kernel<'_>,
    entry: u64,
    min: u64,
    max: u64,
    depth: u32,
    out: &mut Vec<u64>,
    missing: &mut bool,
) -> Result<()> {
    if entry == 0 {
        return Ok(());
    }
    if depth == 0 && !(entry & 3 == 2 && entry > 4096) {
        // A tree of one entry keeps it in the root.
        out.push(entry);
        return Ok(());
    }
    if depth > 16 {
        *missing = true;
        return Ok(());
    }
    let l = k.layout.clone();
    let node = entry & !0xff;
    let kind = (entry >> 3) & 0xf;
    // maple_leaf_64 (1) and maple_range_64 (2) share a layout; 3 is
    // maple_arange_64; 0 (dense) is not used by mm trees.
    let (pivot, slot, slots, leaf) = match kind {
        1 => (l.mr64_pivot, l.mr64_slot, l.mr64_slots, true),
        2 => (l.mr64_pivot, l.mr64_slot, l.mr64_slots, false),
        3 => (l.ma64_pivot, l.ma64_slot, l.ma64_slots, false),
        _ => {
            *missing = true;
            return Ok(());
        }
    };
    let Some(b) = k.bytes(node, 256)? else {
        *missing = true;
        return Ok(());
    };
    let at = |o: u64| {
        let o = o as usize;
        b.get(o..o + 8)
            .map_or(0, |s| u64::from_le_bytes(s.try_into().expect("8")))
    };
    let mut lo = min;
    for i in 0..slots {
        let piv = if i + 1 < slots {
            at(pivot + 8 * i)
        } else {
            max
        };
        if i > 0 && piv == 0 {
            break;
        }
        let child = at(slot + 8 * i);
        if leaf {
            if child != 0 && child & 3 == 0 {
                out.push(child);
            }
        } else {
            maple_walk(k, child, lo, piv, depth + 1, out, missing)?;
        }
        if piv >= max {
            break;
        }
        lo = piv.saturating_add(1);
    }
    Ok(())
}

/// A file's path, device and inode: `d_path` over `f_path` (names up the
/// dentry chain, crossing to the mountpoint at each mount's root), with
/// ` (deleted)` for an unlinked dentry.
pub fn file_path(k: &mut Kernel<'_>, file: u64) -> Result<Option<(String, u32, u32, u64)>> {
    let l = k.layout.clone();
    let (Some(mut mnt), Some(start)) = (k.u64(file + l.file_mnt)?, k.u64(file + l.file_dentry)?)
    else {
        return Ok(None);
    };
    let mut dentry = start;
    let mut mount = mnt.wrapping_sub(l.mount_mnt);
    let mut parts = Vec::new();
    for _ in 0..256 {
        let Some(root) = k.u64(mnt + l.vfsmount_root)? else {
            return Ok(None);
        };
        if dentry == root {
            let Some(parent) = k.u64(mount + l.mount_parent)? else {
                return Ok(None);
            };
            if parent == mount || parent == 0 {
                break;
            }
            let Some(mp) = k.u64(mount + l.mount_mountpoint)? else {
                return Ok(None);
            };
            dentry = mp;
            mount = parent;
            mnt = mount + l.mount_mnt;
            continue;
        }
        let Some(parent) = k.u64(dentry + l.dentry_parent)? else {
            return Ok(None);
        };
        let len = k.u32(dentry + l.dentry_name_len)?.unwrap_or(0).min(255) as usize;
        let name = match k.u64(dentry + l.dentry_name)? {
            Some(p) => k.bytes(p, len)?.unwrap_or_default(),
            None => Vec::new(),
        };
        parts.push(String::from_utf8_lossy(&name).into_owned());
        if parent == dentry {
            break;
        }
        dentry = parent;
    }
    parts.reverse();
    let mut path = format!("/{}", parts.join("/"));
    let pprev = k.u64(start + l.dentry_hash_pprev)?.unwrap_or(1);
    let is_root = k.u64(start + l.dentry_parent)? == Some(start);
    if pprev == 0 && !is_root {
        path.push_str(" (deleted)");
    }
    let (mut major, mut minor, mut ino) = (0, 0, 0);
    if let Some(inode) = k.u64(file + l.file_inode)? {
        ino = k.u64(inode + l.inode_ino)?.unwrap_or(0);
        if let Some(sb) = k.u64(inode + l.inode_sb)? {
            let dev = k.u32(sb + l.sb_dev)?.unwrap_or(0);
            (major, minor) = (dev >> 20, dev & 0xf_ffff);
        }
    }
    Ok(Some((path, major, minor, ino)))
}

/// The model's VMA (without its smaps counters) as `/proc/PID/smaps`
/// shows it: permissions, offset, device, inode, path or pseudo-name.
pub fn vma_record(k: &mut Kernel<'_>, mm: &MmInfo, v: &VmaInfo) -> Result<Vma> {
    let perms = format!(
        "{}{}{}{}",
        if v.flags & VM_READ != 0 { 'r' } else { '-' },
        if v.flags & VM_WRITE != 0 { 'w' } else { '-' },
        if v.flags & VM_EXEC != 0 { 'x' } else { '-' },
        if v.flags & VM_MAYSHARE != 0 { 's' } else { 'p' },
    );
    let mut vma = Vma {
        start: v.start,
        end: v.end,
        perms,
        vm_flags: vm_flag_names(v.flags),
        ..Vma::default()
    };
    if v.file != 0 {
        if let Some((path, major, minor, ino)) = file_path(k, v.file)? {
            vma.path = path;
            vma.dev_major = major;
            vma.dev_minor = minor;
            vma.inode = ino;
        }
        vma.offset = v.pgoff << k.mmu.page_shift();
        return Ok(vma);
    }
    let special = k.symbol("special_mapping_vmops");
    if v.ops != 0 && special == Some(v.ops) && v.private != 0 {
        if let Some(name) = k.u64(v.private + k.layout.special_mapping_name)? {
            if let Some(s) = k.cstr(name, 64)? {
                vma.path = s;
                return Ok(vma);
            }
        }
    }
    if v.start <= mm.heap.1 && v.end >= mm.heap.0 {
        vma.path = "[heap]".into();
    } else if v.start <= mm.start_stack && v.end >= mm.start_stack {
        vma.path = "[stack]".into();
    }
    Ok(vma)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_flags_read_as_smaps_prints_them() {
        // rd wr mr mw me ac sd: a private writable anonymous mapping.
        let f = VM_READ | VM_WRITE | 0x10 | 0x20 | 0x40 | 0x10_0000 | VM_SOFTDIRTY;
        assert_eq!(vm_flag_names(f), ["rd", "wr", "mr", "mw", "me", "ac", "sd"]);
        assert_eq!(vm_flag_names(VM_PFNMAP | 0x4000), ["pf", "io"]);
    }
}
