//! What the `damon` record backend asks of the kernel beyond sysfs
//! files: tracefs, for DAMON's trace events.

use std::io;
use std::path::Path;

/// Mounts tracefs at `dir` (as tracing tools do when it isn't mounted).
pub fn mount_tracefs(dir: &Path) -> io::Result<()> {
    rustix::mount::mount(
        "tracefs",
        dir,
        "tracefs",
        rustix::mount::MountFlags::empty(),
        None,
    )?;
    Ok(())
}
