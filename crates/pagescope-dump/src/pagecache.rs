//! A small cache of a dump's pages, as the walk reads them: page tables
//! and `struct page`s are read a few bytes at a time, many times over, and
//! a read from the cache saves a `pread` (an ELF core) or a decompression
//! (a compressed dump). Direct-mapped by a hash of the frame number:
//! [`CACHE_BYTES`] of memory, whatever the dump's size.

/// Bytes of pages held (1024 pages of 4 KiB).
pub const CACHE_BYTES: usize = 4 << 20;

/// The cache.
#[derive(Debug)]
pub struct PageCache {
    /// The frame each slot holds (`u64::MAX`: none).
    tags: Vec<u64>,
    pages: Vec<u8>,
    page: usize,
}

impl PageCache {
    /// A cache of pages of `page` bytes.
    pub fn new(page: usize) -> PageCache {
        let slots = (CACHE_BYTES / page).max(1);
        PageCache {
            tags: vec![u64::MAX; slots],
            pages: vec![0u8; slots * page],
            page,
        }
    }

    fn slot(&self, pfn: u64) -> usize {
        (pfn.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % self.tags.len()
    }

    /// Frame `pfn`'s page, if held.
    pub fn get(&self, pfn: u64) -> Option<&[u8]> {
        let s = self.slot(pfn);
        (self.tags[s] == pfn).then(|| &self.pages[s * self.page..(s + 1) * self.page])
    }

    /// The slot for frame `pfn`, emptied, to be filled and then kept with
    /// [`PageCache::keep`].
    pub fn slot_for(&mut self, pfn: u64) -> &mut [u8] {
        let s = self.slot(pfn);
        self.tags[s] = u64::MAX;
        &mut self.pages[s * self.page..(s + 1) * self.page]
    }

    /// Marks the slot of `pfn`, filled, as holding it.
    pub fn keep(&mut self, pfn: u64) {
        let s = self.slot(pfn);
        self.tags[s] = pfn;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_what_was_kept_until_its_slot_is_taken() {
        let mut c = PageCache::new(4096);
        assert!(c.get(5).is_none());
        c.slot_for(5).fill(7);
        assert!(c.get(5).is_none(), "not kept yet");
        c.keep(5);
        assert_eq!(c.get(5).map(|p| p[100]), Some(7));
        // Another frame in the same slot evicts it.
        let other = (6..)
            .find(|&p| c.slot(p) == c.slot(5))
            .expect("a frame in the same slot");
        c.slot_for(other).fill(9);
        assert!(c.get(5).is_none());
        c.keep(other);
        assert_eq!(c.get(other).map(|p| p[0]), Some(9));
    }
}
