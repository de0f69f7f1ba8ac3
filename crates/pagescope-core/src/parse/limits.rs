//! `/proc/PID/limits`: a process's resource limits, one line each
//! (`Limit  Soft Limit  Hard Limit  Units`, fs/proc/base.c `proc_pid_limits`).

use super::ParseError;

/// The soft limit on descriptor numbers (`Max open files`,
/// `RLIMIT_NOFILE`): `Ok(None)` if it is `unlimited`.
pub fn open_files(text: &str) -> Result<Option<u64>, ParseError> {
    const WHAT: &str = "/proc/PID/limits";
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .ok_or_else(|| ParseError::new(WHAT, "", "no \"Max open files\" line"))?;
    let soft = line["Max open files".len()..]
        .split_whitespace()
        .next()
        .ok_or_else(|| ParseError::new(WHAT, line, "no soft limit"))?;
    if soft == "unlimited" {
        return Ok(None);
    }
    super::dec(WHAT, line, soft).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As Linux 6.x prints it.
    const LIMITS: &str = "\
Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max stack size            8388608              unlimited            bytes     
Max processes             96365                96365                processes 
Max open files            1024                 524288               files     
Max locked memory         8388608              8388608              bytes     
";

    #[test]
    fn soft_limit_of_open_files() {
        assert_eq!(open_files(LIMITS), Ok(Some(1024)));
        let unlimited = LIMITS.replace("1024                ", "unlimited           ");
        assert_eq!(open_files(&unlimited), Ok(None));
        assert!(open_files("Limit  Soft Limit\nMax cpu time  unlimited\n").is_err());
        assert!(open_files("Max open files  lots  4096  files\n").is_err());
    }
}
