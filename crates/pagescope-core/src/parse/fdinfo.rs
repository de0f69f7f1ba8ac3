//! `/proc/PID/fdinfo/FD`: `key:\tvalue` lines about one descriptor
//! (Documentation/filesystems/proc.rst, "/proc/<pid>/fdinfo").

/// The process a pidfd names (its `Pid:` line), if it is alive: the
/// kernel prints -1 once it has exited (and 0 if it is in no pid
/// namespace of the reader). `None` too without the line.
pub fn pidfd_pid(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .and_then(|p| u32::try_from(p).ok().filter(|&p| p > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_of_a_pidfd() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nPid:\t4242\nNSpid:\t4242\n";
        assert_eq!(pidfd_pid(text), Some(4242));
        assert_eq!(pidfd_pid("pos:\t0\nPid:\t-1\nNSpid:\t-1\n"), None);
        assert_eq!(pidfd_pid("pos:\t0\nPid:\t0\n"), None);
        assert_eq!(pidfd_pid("pos:\t0\nflags:\t02\n"), None);
    }
}
