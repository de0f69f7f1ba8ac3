//! `floor`: the least work a snapshot of every process can do in the
//! kernel, as a yardstick for `pagescope snapshot`.
//!
//! For every process it reads `/proc/PID/maps` for the ranges, `pread`s
//! the pagemap of every range in 512 KiB batches, and for the present
//! pages `pread`s `/proc/kpageflags` and `/proc/kpagecount` over sorted
//! runs of PFNs. It keeps nothing, parses nothing else, writes nothing.
//! It prints the pages and frames it saw so a run can be checked.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;

const BATCH: usize = 64 * 1024;
const GAP: u64 = 64;
const MAX_RUN: u64 = 32 * 1024;

/// Reads `out.len()` entries from `index` through the reused `bytes`.
fn read_u64s(f: &File, index: u64, out: &mut [u64], bytes: &mut [u8]) -> usize {
    let bytes = &mut bytes[..out.len() * 8];
    let n = f.read_at(bytes, index * 8).unwrap_or(0);
    for (i, c) in bytes[..n - n % 8].chunks_exact(8).enumerate() {
        out[i] = u64::from_le_bytes(c.try_into().unwrap());
    }
    n / 8
}

fn main() {
    let kflags = File::open("/proc/kpageflags").expect("/proc/kpageflags (run as root)");
    let kcount = File::open("/proc/kpagecount").expect("/proc/kpagecount (run as root)");
    let mut entries = vec![0u64; BATCH];
    let mut run = vec![0u64; MAX_RUN as usize];
    let mut pfns: Vec<u64> = Vec::new();
    let mut bytes = vec![0u8; BATCH.max(MAX_RUN as usize) * 8];
    let (mut pages, mut frames, mut checksum) = (0u64, 0u64, 0u64);
    let mut maps = String::new();
    let page = rustix::param::page_size() as u64;
    for dent in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = dent
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        maps.clear();
        let Ok(mut m) = File::open(format!("/proc/{pid}/maps")) else {
            continue;
        };
        if m.read_to_string(&mut maps).is_err() {
            continue;
        }
        let Ok(pagemap) = File::open(format!("/proc/{pid}/pagemap")) else {
            continue;
        };
        pfns.clear();
        for line in maps.lines() {
            let Some((range, _)) = line.split_once(' ') else {
                continue;
            };
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
                continue;
            };
            let (mut vpn, end) = (a / page, b / page);
            while vpn < end {
                let want = ((end - vpn) as usize).min(BATCH);
                let got = read_u64s(&pagemap, vpn, &mut entries[..want], &mut bytes);
                for &e in &entries[..got] {
                    if e >> 63 == 1 {
                        pages += 1;
                        pfns.push(e & ((1 << 55) - 1));
                    }
                }
                if got < want {
                    break;
                }
                vpn += got as u64;
            }
        }
        pfns.sort_unstable();
        pfns.dedup();
        let mut i = 0;
        while i < pfns.len() {
            let first = pfns[i];
            let mut j = i + 1;
            while j < pfns.len() && pfns[j] - pfns[j - 1] <= GAP && pfns[j] - first < MAX_RUN {
                j += 1;
            }
            let len = (pfns[j - 1] - first + 1) as usize;
            read_u64s(&kflags, first, &mut run[..len], &mut bytes);
            checksum ^= run[0];
            read_u64s(&kcount, first, &mut run[..len], &mut bytes);
            checksum ^= run[0];
            frames += (j - i) as u64;
            i = j;
        }
    }
    println!("pages {pages} frames {frames} checksum {checksum:x}");
}
