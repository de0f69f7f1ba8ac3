//! `/proc/PID/stat`.
//!
//! Space-separated fields (man 5 proc, "/proc/pid/stat"); the second,
//! `(comm)`, may itself hold spaces and parentheses, so the fields after it
//! are found from the *last* `)`.

use super::{dec, ParseError};

/// The fields of `/proc/PID/stat` that pagescope keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// (1) pid.
    pub pid: u32,
    /// (2) comm, without the parentheses.
    pub comm: String,
    /// (3) state.
    pub state: char,
    /// (4) ppid.
    pub ppid: u32,
    /// (9) flags (PF_*).
    pub flags: u64,
    /// (10) minflt.
    pub minflt: u64,
    /// (12) majflt.
    pub majflt: u64,
    /// (14) utime, clock ticks.
    pub utime: u64,
    /// (15) stime, clock ticks.
    pub stime: u64,
    /// (20) num_threads.
    pub num_threads: u32,
    /// (22) starttime, clock ticks after boot.
    pub start_time: u64,
}

/// PF_KTHREAD (include/linux/sched.h): the task is a kernel thread.
pub const PF_KTHREAD: u64 = 0x0020_0000;

impl Stat {
    /// A kernel thread.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }
}

const WHAT: &str = "stat";

/// Parses `/proc/PID/stat`.
pub fn parse(text: &str) -> Result<Stat, ParseError> {
    let line = text.trim_end();
    let open = line
        .find(" (")
        .ok_or_else(|| ParseError::new(WHAT, line, "no '(comm)'"))?;
    let close = line
        .rfind(')')
        .filter(|&c| c > open)
        .ok_or_else(|| ParseError::new(WHAT, line, "no closing ')'"))?;
    let rest: Vec<&str> = line[close + 1..].split_whitespace().collect();
    // rest[0] is field 3 (state); field n is rest[n - 3].
    let field = |n: usize| {
        rest.get(n - 3)
            .copied()
            .ok_or_else(|| ParseError::new(WHAT, line, format!("field {n} missing")))
    };
    Ok(Stat {
        pid: dec(WHAT, line, &line[..open])?,
        comm: line[open + 2..close].to_string(),
        state: field(3)?.chars().next().unwrap_or('?'),
        ppid: dec(WHAT, line, field(4)?)?,
        flags: dec(WHAT, line, field(9)?)?,
        minflt: dec(WHAT, line, field(10)?)?,
        majflt: dec(WHAT, line, field(12)?)?,
        utime: dec(WHAT, line, field(14)?)?,
        stime: dec(WHAT, line, field(15)?)?,
        num_threads: dec(WHAT, line, field(20)?)?,
        start_time: dec(WHAT, line, field(22)?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_text() {
        let text = "4242 (my (odd) prog) S 1 4242 4242 0 -1 4194560 1234 0 5 0 17 3 0 0 20 0 3 0 98765 10485760 640 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        let s = parse(text).unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "my (odd) prog");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.minflt, 1234);
        assert_eq!(s.majflt, 5);
        assert_eq!(s.utime, 17);
        assert_eq!(s.stime, 3);
        assert_eq!(s.num_threads, 3);
        assert_eq!(s.start_time, 98765);
        assert!(!s.is_kernel_thread());
    }

    #[test]
    fn kernel_thread() {
        let text = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0";
        assert!(parse(text).unwrap().is_kernel_thread());
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("").is_err());
        assert!(parse("12 (x) S 1").is_err());
        assert!(parse("x (y) S 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1").is_err());
    }
}
