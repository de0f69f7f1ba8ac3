//! The crashed kernel as pagescope reads it: its memory through its page
//! tables, the layout of its structures, its symbols at run time, and
//! small typed reads that say `None` where memory is not in the dump.

use crate::layout::Layout;
use crate::mmu::Mmu;
use crate::page::Frames;
use crate::vmcoreinfo::VmcoreInfo;
use crate::Result;

/// The kernel of a dump, ready to be read.
#[derive(Debug)]
pub struct Kernel<'a> {
    /// Its memory.
    pub mmu: Mmu<'a>,
    /// Its structures' layout.
    pub layout: Layout,
    /// Its VMCOREINFO.
    pub info: VmcoreInfo,
    /// Its page frames.
    pub frames: Frames,
    /// Run-time addresses of the symbols found.
    pub symbols: std::collections::HashMap<String, u64>,
}

impl Kernel<'_> {
    /// A run-time symbol address.
    pub fn symbol(&self, name: &str) -> Option<u64> {
        self.symbols.get(name).copied()
    }

    /// `n` bytes at `va`.
    pub fn bytes(&mut self, va: u64, n: usize) -> Result<Option<Vec<u8>>> {
        let mut b = vec![0; n];
        Ok(self.mmu.read(va, &mut b)?.then_some(b))
    }

    /// A u64 at `va`.
    pub fn u64(&mut self, va: u64) -> Result<Option<u64>> {
        let mut b = [0; 8];
        Ok(self.mmu.read(va, &mut b)?.then(|| u64::from_le_bytes(b)))
    }

    /// A u32 at `va`.
    pub fn u32(&mut self, va: u64) -> Result<Option<u32>> {
        let mut b = [0; 4];
        Ok(self.mmu.read(va, &mut b)?.then(|| u32::from_le_bytes(b)))
    }

    /// A NUL-terminated string of at most `max` bytes at `va`.
    pub fn cstr(&mut self, va: u64, max: usize) -> Result<Option<String>> {
        // Read up to the end of the page first, the rest only if needed.
        let first = ((0x1000 - (va & 0xfff)) as usize).min(max);
        let Some(mut b) = self.bytes(va, first)? else {
            return Ok(None);
        };
        if !b.contains(&0) && first < max {
            if let Some(rest) = self.bytes(va + first as u64, max - first)? {
                b.extend(rest);
            }
        }
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Ok(Some(String::from_utf8_lossy(&b[..end]).into_owned()))
    }

    /// The frame number of a kernel-image address.
    pub fn image_pfn(&mut self, va: u64) -> Result<Option<u64>> {
        Ok(self.mmu.kernel_phys(va)?.map(|pa| pa >> 12))
    }
}
