//! Decoding a wait status (wait(2)'s `WIFEXITED`, `WEXITSTATUS`, ...),
//! as the raw `int` the kernel gave, so that any signal number passes
//! (real-time ones too).

/// Whether the child exited (`WIFEXITED`).
pub fn exited(raw: i32) -> bool {
    libc::WIFEXITED(raw)
}

/// Its exit status (`WEXITSTATUS`), meaningful if [`exited`].
pub fn exit_status(raw: i32) -> i32 {
    libc::WEXITSTATUS(raw)
}

/// Whether a signal ended the child (`WIFSIGNALED`).
pub fn signaled(raw: i32) -> bool {
    libc::WIFSIGNALED(raw)
}

/// The signal that ended it (`WTERMSIG`), meaningful if [`signaled`].
pub fn term_signal(raw: i32) -> i32 {
    libc::WTERMSIG(raw)
}

/// Whether the child is stopped (`WIFSTOPPED`).
pub fn stopped(raw: i32) -> bool {
    libc::WIFSTOPPED(raw)
}

/// The signal of its stop (`WSTOPSIG`), meaningful if [`stopped`].
pub fn stop_signal(raw: i32) -> i32 {
    libc::WSTOPSIG(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statuses of wait(2), as Linux encodes them.
    #[test]
    fn decodes_linux_statuses() {
        assert!(exited(3 << 8) && exit_status(3 << 8) == 3 && !signaled(3 << 8));
        assert!(signaled(9) && term_signal(9) == 9 && !exited(9));
        // A ptrace event stop: SIGTRAP, the event in the third byte.
        let ev = (128 << 16) | (5 << 8) | 0x7f;
        assert!(stopped(ev) && stop_signal(ev) == 5 && !exited(ev));
    }
}
