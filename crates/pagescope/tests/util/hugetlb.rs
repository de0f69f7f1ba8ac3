//! Hugetlb pages for the tests: the kernel's pool, reserved and put
//! back, and meminfo's figures to check against.

/// A figure of /proc/meminfo (kB, or a count for `HugePages_*`).
pub fn meminfo(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Hugetlb pages of the default size in use (meminfo `HugePages_Total -
/// HugePages_Free`), in kB.
pub fn hugetlb_in_use_kb() -> u64 {
    let n = meminfo("HugePages_Total").unwrap() - meminfo("HugePages_Free").unwrap();
    n * meminfo("Hugepagesize").unwrap()
}

/// Hugetlb pages of the default size added to the kernel's pool
/// (`vm.nr_hugepages`) for a test; the pool is put back as it was when
/// dropped, the test failed or not.
#[derive(Debug)]
pub struct HugePages {
    old: u64,
}

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

impl HugePages {
    /// Asks the kernel for `n` more free hugetlb pages. `Err` says why
    /// it gave fewer, as the kernel tells it (the pool is then as it was).
    pub fn reserve(n: u64) -> Result<HugePages, String> {
        let read = || -> Result<u64, String> {
            let text = std::fs::read_to_string(NR_HUGEPAGES)
                .map_err(|e| format!("{NR_HUGEPAGES}: {e} (a kernel without CONFIG_HUGETLBFS?)"))?;
            text.trim()
                .parse()
                .map_err(|e| format!("{NR_HUGEPAGES}: {e}"))
        };
        let old = read()?;
        let free = meminfo("HugePages_Free").unwrap_or(0);
        let want = old + n.saturating_sub(free);
        if want == old {
            return Ok(HugePages { old });
        }
        let guard = HugePages { old };
        std::fs::write(NR_HUGEPAGES, want.to_string())
            .map_err(|e| format!("writing {want} to {NR_HUGEPAGES}: {e} (needs root)"))?;
        let got = read()?;
        let free = meminfo("HugePages_Free").unwrap_or(0);
        if free < n {
            return Err(format!(
                "asked {NR_HUGEPAGES} for {want} hugetlb pages, the kernel holds {got} \
                 ({free} free; its memory may be too fragmented for {n} more)"
            ));
        }
        Ok(guard)
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = std::fs::write(NR_HUGEPAGES, self.old.to_string());
    }
}
