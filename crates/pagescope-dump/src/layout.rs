//! The offsets and sizes a walk of the kernel's structures needs, found
//! once: from VMCOREINFO where it prints them, from BTF for the rest.
//! A BTF that disagrees with the dump's own VMCOREINFO on any offset or
//! size both give is of another kernel, and is refused.

use crate::btf::Btf;
use crate::vmcoreinfo::VmcoreInfo;

/// Byte offsets and sizes.
#[derive(Clone, Debug, Default)]
#[allow(missing_docs)]
pub struct Layout {
    pub task_tasks: u64,
    pub task_pid: u64,
    pub task_tgid: u64,
    pub task_comm: u64,
    pub task_flags: u64,
    pub task_mm: u64,
    pub task_real_parent: u64,
    pub task_real_cred: u64,
    pub task_start_boottime: u64,
    pub task_signal: u64,
    pub signal_nr_threads: u64,
    pub cred_uid: u64,
    pub mm_mt_root: u64,
    pub mm_pgd: u64,
    pub mm_start_brk: u64,
    pub mm_brk: u64,
    pub mm_start_stack: u64,
    pub mm_arg_start: u64,
    pub mm_arg_end: u64,
    pub mm_exe_file: u64,
    /// maple_range_64: pivots, slots, and their counts.
    pub mr64_pivot: u64,
    pub mr64_slot: u64,
    pub mr64_slots: u64,
    /// maple_arange_64.
    pub ma64_pivot: u64,
    pub ma64_slot: u64,
    pub ma64_slots: u64,
    pub vma_start: u64,
    pub vma_end: u64,
    pub vma_mm: u64,
    pub vma_flags: u64,
    pub vma_pgoff: u64,
    pub vma_file: u64,
    pub vma_ops: u64,
    pub vma_private: u64,
    pub special_mapping_name: u64,
    pub file_mnt: u64,
    pub file_dentry: u64,
    pub file_inode: u64,
    pub dentry_parent: u64,
    pub dentry_name_len: u64,
    pub dentry_name: u64,
    pub dentry_hash_pprev: u64,
    pub inode_ino: u64,
    pub inode_sb: u64,
    pub sb_dev: u64,
    /// Of `struct mount`: the embedded vfsmount, parent and mountpoint.
    pub mount_mnt: u64,
    pub mount_parent: u64,
    pub mount_mountpoint: u64,
    pub vfsmount_root: u64,
    pub page_size: u64,
    pub page_flags: u64,
    pub page_refcount: u64,
    pub page_mapcount: u64,
    pub page_mapping: u64,
    pub page_compound_head: u64,
    pub page_private: u64,
    pub page_compound: Compound,
    pub uts_name: u64,
    pub utsname_nodename: u64,
    pub utsname_release: u64,
    pub resource_start: u64,
    pub resource_end: u64,
    pub resource_name: u64,
    pub resource_sibling: u64,
    pub resource_child: u64,
}

/// Where a compound page keeps its order and mapcounts: in its first
/// tail page, as fields of `struct page` (6.1) or of `struct folio`
/// (6.12). Offsets from the head page's `struct page`.
#[derive(Clone, Copy, Debug)]
pub enum Compound {
    /// `page.compound_dtor`, `page.compound_order` (bytes) and
    /// `page.compound_mapcount`.
    Page {
        /// `compound_dtor`.
        dtor: u64,
        /// `compound_order`.
        order: u64,
        /// `compound_mapcount`.
        mapcount: u64,
    },
    /// `folio._flags_1` (the order in its low byte, the second page's
    /// flags), `folio._large_mapcount`, `folio._entire_mapcount`.
    Folio {
        /// `_flags_1`.
        flags_1: u64,
        /// `_large_mapcount`.
        large_mapcount: u64,
        /// `_entire_mapcount`.
        entire_mapcount: u64,
    },
}

impl Default for Compound {
    fn default() -> Self {
        Compound::Page {
            dtor: 0,
            order: 0,
            mapcount: 0,
        }
    }
}

/// Finds every offset, or says which one is missing from the BTF.
pub fn resolve(btf: &Btf, info: &VmcoreInfo) -> Result<Layout, String> {
    // Every OFFSET and SIZE the note prints that BTF knows must agree.
    for (name, off) in info.offsets() {
        let Some((s, m)) = name.split_once('.') else {
            continue;
        };
        if let Some(f) = btf.field(s, m) {
            if f.offset != off {
                return Err(format!(
                    "its {s}.{m} is at {}, the dump's VMCOREINFO says {off}: the BTF is of another kernel",
                    f.offset
                ));
            }
        }
    }
    for (name, size) in info.sizes() {
        if let Some(b) = btf.struct_size(name) {
            if b != size {
                return Err(format!(
                    "its struct {name} has {b} bytes, the dump's VMCOREINFO says {size}: the BTF is of another kernel"
                ));
            }
        }
    }
    let f = |s: &str, m: &str| -> Result<u64, String> {
        btf.field(s, m).map(|f| f.offset).ok_or_else(|| {
            format!("it has no {s}.{m} (pagescope reads the structures of Linux 6.1 and 6.12)")
        })
    };
    let note_or = |key: &str, s: &str, m: &str| -> Result<u64, String> {
        match info.offset(key) {
            Some(o) => Ok(o),
            None => f(s, m),
        }
    };
    let arr = |s: &str, m: &str| -> Result<(u64, u64), String> {
        let fl = btf
            .field(s, m)
            .ok_or_else(|| format!("it has no {s}.{m}"))?;
        let n = btf
            .array_len(fl.ty)
            .ok_or_else(|| format!("{s}.{m} is not an array"))?;
        Ok((fl.offset, n))
    };
    let (mr64_pivot, _) = arr("maple_range_64", "pivot")?;
    let (mr64_slot, mr64_slots) = arr("maple_range_64", "slot")?;
    let (ma64_pivot, _) = arr("maple_arange_64", "pivot")?;
    let (ma64_slot, ma64_slots) = arr("maple_arange_64", "slot")?;
    Ok(Layout {
        task_tasks: f("task_struct", "tasks")?,
        task_pid: f("task_struct", "pid")?,
        task_tgid: f("task_struct", "tgid")?,
        task_comm: f("task_struct", "comm")?,
        task_flags: f("task_struct", "flags")?,
        task_mm: f("task_struct", "mm")?,
        task_real_parent: f("task_struct", "real_parent")?,
        task_real_cred: f("task_struct", "real_cred")?,
        task_start_boottime: f("task_struct", "start_boottime")?,
        task_signal: f("task_struct", "signal")?,
        signal_nr_threads: f("signal_struct", "nr_threads")?,
        cred_uid: f("cred", "uid")?,
        mm_mt_root: f("mm_struct", "mm_mt.ma_root")?,
        mm_pgd: f("mm_struct", "pgd")?,
        mm_start_brk: f("mm_struct", "start_brk")?,
        mm_brk: f("mm_struct", "brk")?,
        mm_start_stack: f("mm_struct", "start_stack")?,
        mm_arg_start: f("mm_struct", "arg_start")?,
        mm_arg_end: f("mm_struct", "arg_end")?,
        mm_exe_file: f("mm_struct", "exe_file")?,
        mr64_pivot,
        mr64_slot,
        mr64_slots,
        ma64_pivot,
        ma64_slot,
        ma64_slots,
        vma_start: f("vm_area_struct", "vm_start")?,
        vma_end: f("vm_area_struct", "vm_end")?,
        vma_mm: f("vm_area_struct", "vm_mm")?,
        vma_flags: f("vm_area_struct", "vm_flags")?,
        vma_pgoff: f("vm_area_struct", "vm_pgoff")?,
        vma_file: f("vm_area_struct", "vm_file")?,
        vma_ops: f("vm_area_struct", "vm_ops")?,
        vma_private: f("vm_area_struct", "vm_private_data")?,
        special_mapping_name: f("vm_special_mapping", "name")?,
        file_mnt: f("file", "f_path.mnt")?,
        file_dentry: f("file", "f_path.dentry")?,
        file_inode: f("file", "f_inode")?,
        dentry_parent: f("dentry", "d_parent")?,
        dentry_name_len: f("dentry", "d_name.len")?,
        dentry_name: f("dentry", "d_name.name")?,
        dentry_hash_pprev: f("dentry", "d_hash.pprev")?,
        inode_ino: f("inode", "i_ino")?,
        inode_sb: f("inode", "i_sb")?,
        sb_dev: f("super_block", "s_dev")?,
        mount_mnt: f("mount", "mnt")?,
        mount_parent: f("mount", "mnt_parent")?,
        mount_mountpoint: f("mount", "mnt_mountpoint")?,
        vfsmount_root: f("vfsmount", "mnt_root")?,
        page_size: info
            .size("page")
            .or_else(|| btf.struct_size("page"))
            .ok_or("no size of struct page")?,
        page_flags: note_or("page.flags", "page", "flags")?,
        page_refcount: note_or("page._refcount", "page", "_refcount")?,
        page_mapcount: note_or("page._mapcount", "page", "_mapcount")?,
        page_mapping: note_or("page.mapping", "page", "mapping")?,
        page_compound_head: note_or("page.compound_head", "page", "compound_head")?,
        page_private: note_or("page.private", "page", "private")?,
        page_compound: if btf.field("folio", "_large_mapcount").is_some() {
            Compound::Folio {
                flags_1: f("folio", "_flags_1")?,
                large_mapcount: f("folio", "_large_mapcount")?,
                entire_mapcount: f("folio", "_entire_mapcount")?,
            }
        } else {
            Compound::Page {
                dtor: note_or("page.compound_dtor", "page", "compound_dtor")?,
                order: note_or("page.compound_order", "page", "compound_order")?,
                mapcount: f("page", "compound_mapcount")?,
            }
        },
        uts_name: note_or("uts_namespace.name", "uts_namespace", "name")?,
        utsname_nodename: f("new_utsname", "nodename")?,
        utsname_release: f("new_utsname", "release")?,
        resource_start: f("resource", "start")?,
        resource_end: f("resource", "end")?,
        resource_name: f("resource", "name")?,
        resource_sibling: f("resource", "sibling")?,
        resource_child: f("resource", "child")?,
    })
}
