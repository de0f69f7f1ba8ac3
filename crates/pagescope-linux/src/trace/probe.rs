//! The feature probe: what this kernel's userfaultfd can do, asked before
//! any program is touched.

use crate::trace::uffd::{self};
use pagescope_core::trace::EvictMethod;
use pagescope_core::{Error, Result};

/// Whether this kernel can trace shared memory: minor faults and write
/// protection of shmem ([`uffd::FEATURES_SHMEM`], Linux 5.19).
pub fn shmem_supported() -> bool {
    uffd::Uffd::probe_features().is_ok_and(|f| f & uffd::FEATURES_SHMEM == uffd::FEATURES_SHMEM)
}

/// How pages will be evicted: `want`, or with `None` the best this kernel
/// has (`UFFDIO_MOVE` from Linux 6.8, else copying). Refuses before the
/// program starts if the kernel can't trace at all, or lacks `want`.
pub fn evict_method(want: Option<EvictMethod>) -> Result<EvictMethod> {
    let available = uffd::Uffd::probe_features().map_err(|e| {
        let errno = e.raw_os_error().unwrap_or(0);
        let why = crate::cause::userfaultfd_refused(errno);
        if errno == rustix::io::Errno::PERM.raw_os_error() {
            Error::NotPermitted {
                what: "userfaultfd".into(),
                needs: why,
            }
        } else {
            Error::Unsupported {
                what: "userfaultfd".into(),
                needs: why,
            }
        }
    })?;
    let missing = uffd::missing_features(available);
    if !missing.is_empty() {
        return Err(Error::Unsupported {
            what: format!("userfaultfd feature {}", missing.join(", ")),
            needs: "Linux 5.7 or later with CONFIG_USERFAULTFD".into(),
        });
    }
    let has_move = available & uffd::FEATURE_MOVE != 0;
    match want {
        Some(EvictMethod::Move) if !has_move => Err(Error::Unsupported {
            what: "userfaultfd feature MOVE".into(),
            needs: "Linux 6.8 or later to evict by moving pages; `--evict copy` works on \
                    older kernels"
                .into(),
        }),
        Some(m) => Ok(m),
        None if has_move => Ok(EvictMethod::Move),
        None => Ok(EvictMethod::Copy),
    }
}
