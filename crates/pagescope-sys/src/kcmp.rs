//! kcmp(2): whether two processes share a kernel resource.
//!
//! The system call number is linux-raw-sys's; the comparison types are
//! not there (nor in libc or rustix for Linux), so they are written from
//! `include/uapi/linux/kcmp.h`'s `enum kcmp_type`.

use std::io;

/// `KCMP_FILE`: one open file.
const KCMP_FILE: i32 = 0;
/// `KCMP_VM`: one address space.
const KCMP_VM: i32 = 1;

/// Whether processes `a` and `b` share one address space (`KCMP_VM`).
pub fn same_vm(a: u32, b: u32) -> io::Result<bool> {
    kcmp(a, b, KCMP_VM, 0, 0)
}

/// Whether descriptor `fa` of process `a` and `fb` of `b` are one open
/// file (`KCMP_FILE`).
pub fn same_file(a: u32, fa: i32, b: u32, fb: i32) -> io::Result<bool> {
    kcmp(a, b, KCMP_FILE, fa as libc::c_long, fb as libc::c_long)
}

fn kcmp(a: u32, b: u32, kind: i32, x: libc::c_long, y: libc::c_long) -> io::Result<bool> {
    // SAFETY: kcmp takes integers only.
    let r = unsafe {
        libc::syscall(
            linux_raw_sys::general::__NR_kcmp as libc::c_long,
            a as libc::c_long,
            b as libc::c_long,
            kind as libc::c_long,
            x,
            y,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_shares_its_own_address_space_and_files() {
        let me = std::process::id();
        assert!(same_vm(me, me).unwrap());
        assert!(same_file(me, 0, me, 0).unwrap_or(true));
        // Process 1 (init) has an address space of its own.
        if let Ok(same) = same_vm(me, 1) {
            assert!(!same);
        }
    }
}
