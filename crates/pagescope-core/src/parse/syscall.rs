//! `/proc/PID/task/TID/syscall`: the system call a thread is blocked in
//! (man 5 proc): its number, six arguments, stack pointer and program
//! counter, e.g. `34 0x0 0x0 0x0 0x0 0x0 0x0 0x7ffd5a1e3e58 0x7f4c1a7012d6`.

/// A thread blocked in a system call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Syscall {
    /// The system call number.
    pub nr: u64,
    /// Its arguments.
    pub args: [u64; 6],
    /// The stack pointer.
    pub sp: u64,
    /// The program counter (just after the `syscall` instruction).
    pub pc: u64,
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// Parses the file; `None` unless the thread is blocked in a system call
/// (the kernel prints `running`, or `-1 sp pc` for a thread stopped
/// outside one).
pub fn parse(text: &str) -> Option<Syscall> {
    let f: Vec<&str> = text.split_whitespace().collect();
    if f.len() != 9 {
        return None;
    }
    let mut args = [0u64; 6];
    for (a, s) in args.iter_mut().zip(&f[1..7]) {
        *a = hex(s)?;
    }
    Some(Syscall {
        nr: f[0].parse().ok()?,
        args,
        sp: hex(f[7])?,
        pc: hex(f[8])?,
    })
}

/// The stack pointer the file names: of a thread blocked in a system
/// call, or stopped outside one (`-1 sp pc`); `None` for a running
/// thread.
pub fn stack_pointer(text: &str) -> Option<u64> {
    let f: Vec<&str> = text.split_whitespace().collect();
    if f.len() < 3 {
        return None;
    }
    u64::from_str_radix(f[f.len() - 2].trim_start_matches("0x"), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_text() {
        let s = parse("34 0x0 0x1 0x2 0x3 0x4 0xff 0x7ffd5a1e3e58 0x7f4c1a7012d6\n").unwrap();
        assert_eq!(s.nr, 34);
        assert_eq!(s.args, [0, 1, 2, 3, 4, 0xff]);
        assert_eq!(s.sp, 0x7ffd5a1e3e58);
        assert_eq!(s.pc, 0x7f4c1a7012d6);
    }

    #[test]
    fn not_in_a_system_call() {
        assert_eq!(parse("running\n"), None);
        assert_eq!(parse("-1 0x7ffd5a1e3e58 0x7f4c1a7012d6\n"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("34 0x0 0x0 0x0 0x0 0x0 zz 0x1 0x2"), None);
    }

    #[test]
    fn stack_pointer_in_and_outside_a_system_call() {
        let text = "34 0x0 0x1 0x2 0x3 0x4 0xff 0x7ffd5a1e3e58 0x7f4c1a7012d6\n";
        assert_eq!(stack_pointer(text), Some(0x7ffd5a1e3e58));
        assert_eq!(
            stack_pointer("-1 0x7ffd5a1e3e00 0x401000\n"),
            Some(0x7ffd5a1e3e00)
        );
        assert_eq!(stack_pointer("running\n"), None);
        assert_eq!(stack_pointer(""), None);
    }
}
