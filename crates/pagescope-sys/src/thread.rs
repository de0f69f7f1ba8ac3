//! Ending one thread of this process while the others run on.

/// Ends the calling thread alone, with exit(2) (not `exit_group(2)`):
/// the process runs on in its other threads. Called on the main thread,
/// it leaves what the kernel calls a zombie leader: `/proc/PID/stat`
/// says `Z` while the process lives, and `/proc/PID/{maps,smaps,pagemap}`
/// read empty (the leader has no address space left), while those of
/// `/proc/PID/task/TID` of a live thread show the process's memory.
///
/// Nothing of the thread is cleaned up: no destructor runs and its stack
/// is never freed, so whatever other threads borrowed from it stays
/// valid. Buffered output of the thread's own must be flushed first.
pub fn exit_this_thread() -> ! {
    // SAFETY: exit(2) takes a status and never returns; it ends only the
    // calling thread. No memory is freed (see above), so no reference
    // another thread holds dangles.
    unsafe {
        libc::syscall(libc::SYS_exit, 0);
    }
    unreachable!("exit(2) returned")
}
