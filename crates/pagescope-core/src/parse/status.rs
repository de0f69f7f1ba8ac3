//! `/proc/PID/status`: `Key:\tvalue` lines (man 5 proc).

use super::{dec, hex, ParseError};

/// The fields of `/proc/PID/status` that pagescope keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// `Name`.
    pub name: String,
    /// `Tgid`.
    pub tgid: u32,
    /// Real uid (first of `Uid`).
    pub uid: u32,
    /// `Uid`: real, effective, saved and filesystem uids.
    pub uids: [u32; 4],
    /// `TracerPid`: the process tracing it, 0 if none.
    pub tracer_pid: u32,
    /// `CapPrm`: permitted capabilities, bit N for capability N.
    pub cap_permitted: u64,
    /// `CapEff`: effective capabilities.
    pub cap_effective: u64,
    /// `Threads`.
    pub threads: u32,
    /// `VmRSS` in kB (absent for kernel threads).
    pub vm_rss_kb: Option<u64>,
    /// `VmSwap` in kB (absent for kernel threads).
    pub vm_swap_kb: Option<u64>,
    /// `SigPnd`: the signals pending for this thread alone (a mask, bit
    /// `n - 1` for signal `n`).
    pub sig_pending: u64,
}

const WHAT: &str = "status";

/// Parses `/proc/PID/status`.
pub fn parse(text: &str) -> Result<Status, ParseError> {
    let mut s = Status::default();
    let mut have_tgid = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Name" => s.name = value.to_string(),
            "Tgid" => {
                s.tgid = dec(WHAT, line, value)?;
                have_tgid = true;
            }
            "Uid" => {
                for (i, v) in value.split_whitespace().take(4).enumerate() {
                    s.uids[i] = dec(WHAT, line, v)?;
                }
                s.uid = s.uids[0];
            }
            "TracerPid" => s.tracer_pid = dec(WHAT, line, value)?,
            "CapPrm" => s.cap_permitted = hex(WHAT, line, value)?,
            "CapEff" => s.cap_effective = hex(WHAT, line, value)?,
            "Threads" => s.threads = dec(WHAT, line, value)?,
            "SigPnd" => s.sig_pending = hex(WHAT, line, value)?,
            "VmRSS" => s.vm_rss_kb = Some(dec(WHAT, line, value.trim_end_matches("kB").trim())?),
            "VmSwap" => s.vm_swap_kb = Some(dec(WHAT, line, value.trim_end_matches("kB").trim())?),
            _ => {}
        }
    }
    if !have_tgid {
        return Err(ParseError::new(
            WHAT,
            text.lines().next().unwrap_or(""),
            "no Tgid line",
        ));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_text() {
        let text = "Name:\tcat\nUmask:\t0022\nState:\tR (running)\nTgid:\t812\nNgid:\t0\nPid:\t812\nPPid:\t700\nTracerPid:\t0\nUid:\t1000\t1001\t1002\t1003\nGid:\t1000\t1000\t1000\t1000\nVmRSS:\t    1024 kB\nVmSwap:\t      12 kB\nThreads:\t1\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t0000000000080000\n";
        let s = parse(text).unwrap();
        assert_eq!(s.name, "cat");
        assert_eq!(s.tgid, 812);
        assert_eq!(s.uid, 1000);
        assert_eq!(s.uids, [1000, 1001, 1002, 1003]);
        assert_eq!(s.tracer_pid, 0);
        assert_eq!(s.cap_permitted, 0x1ff_ffff_ffff);
        assert_eq!(s.cap_effective, 1 << 19);
        assert_eq!(s.threads, 1);
        assert_eq!(s.vm_rss_kb, Some(1024));
        assert_eq!(s.vm_swap_kb, Some(12));
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("").is_err());
        assert!(parse("Tgid:\tabc\n").is_err());
    }
}
