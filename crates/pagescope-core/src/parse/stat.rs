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
    /// (38) exit_signal: the signal sent to the parent when it dies (0:
    /// none, a clone without one); `None` if the kernel did not print it.
    pub exit_signal: Option<i32>,
    /// (48) arg_start: where the arguments start; 0 if the kernel shows
    /// it not (to a reader without ptrace access, or before Linux 3.5).
    pub arg_start: u64,
    /// (51) env_end: where the environment ends; 0 as `arg_start`.
    pub env_end: u64,
}

/// PF_KTHREAD (include/linux/sched.h): the task is a kernel thread.
pub const PF_KTHREAD: u64 = 0x0020_0000;
/// PF_EXITING (include/linux/sched.h): the task is getting shut down.
pub const PF_EXITING: u64 = 0x0000_0004;

impl Stat {
    /// A kernel thread.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }

    /// A zombie or dead task (state `Z` or `X`).
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }

    /// Dead, or on its way out (`PF_EXITING`).
    pub fn is_exiting(&self) -> bool {
        self.is_dead() || self.flags & PF_EXITING != 0
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
    // Fields later kernels added, or that are hidden: absent is no error.
    let optional = |n: usize| rest.get(n - 3).and_then(|f| f.parse::<u64>().ok());
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
        exit_signal: rest.get(38 - 3).and_then(|f| f.parse().ok()),
        arg_start: optional(48).unwrap_or(0),
        env_end: optional(51).unwrap_or(0),
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
        assert_eq!(s.exit_signal, Some(17));
        assert_eq!((s.arg_start, s.env_end), (0, 0));
        assert!(!s.is_kernel_thread());
        assert!(!s.is_dead() && !s.is_exiting());
    }

    #[test]
    fn late_fields_and_states() {
        // A zombie mover: a clone without exit signal; its argument and
        // environment pages (fields 48 and 51).
        let text = "77 (pagescope-mov) Z 70 70 70 0 -1 4194316 0 0 0 0 0 0 0 0 20 0 1 0 500 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 140737488345000 140737488345100 140737488345100 140737488346000 0\n";
        let s = parse(text).unwrap();
        assert_eq!(s.exit_signal, Some(0));
        assert_eq!(s.arg_start, 140737488345000);
        assert_eq!(s.env_end, 140737488346000);
        assert!(s.is_dead() && s.is_exiting());
        // Running, but on its way out (PF_EXITING in the flags).
        let text = "78 (x) R 1 78 78 0 -1 4194308 0 0 0 0 0 0 0 0 20 0 1 0 500";
        let s = parse(text).unwrap();
        assert!(!s.is_dead() && s.is_exiting());
        // Fields up to 22 only: the later ones are absent.
        assert_eq!(s.exit_signal, None);
        assert_eq!((s.arg_start, s.env_end), (0, 0));
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
