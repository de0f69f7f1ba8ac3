//! An LZO1X decoder, for the pages `makedumpfile -l` compresses (with
//! liblzo2's `lzo1x_1_compress`).
//!
//! Written from the bitstream's description (the Linux kernel's
//! Documentation/staging/lzo.rst): every length and distance is checked
//! against the input and the output, so a corrupt page is an error, never
//! a read out of bounds, a panic or an output larger than the page.
//! (Of the crates that decode LZO1X, `minilzo-rs` and `lzo1x` are GPL and
//! could not be linked into pagescope; `lzokay-native` indexes and
//! subtracts unchecked, and panics on a corrupt stream.)

/// Why a stream does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LzoError {
    /// The input ends inside an instruction.
    InputOverrun,
    /// The stream would write past the end of the output.
    OutputOverrun,
    /// A copy reaches back before the start of the output.
    LookbehindOverrun,
    /// The stream ends with bytes left over, or fills less than the
    /// output.
    Length,
    /// An instruction no compressor writes.
    Invalid,
}

impl std::fmt::Display for LzoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LzoError::InputOverrun => "lzo: the input ends inside an instruction",
            LzoError::OutputOverrun => "lzo: the stream writes past the end of the page",
            LzoError::LookbehindOverrun => "lzo: a copy reaches back before the page",
            LzoError::Length => "lzo: the stream's length does not match the page's",
            LzoError::Invalid => "lzo: an invalid instruction",
        })
    }
}

struct Decoder<'a> {
    input: &'a [u8],
    ip: usize,
    out: &'a mut [u8],
    op: usize,
}

impl Decoder<'_> {
    fn byte(&mut self) -> Result<usize, LzoError> {
        let b = *self.input.get(self.ip).ok_or(LzoError::InputOverrun)?;
        self.ip += 1;
        Ok(b as usize)
    }

    fn le16(&mut self) -> Result<usize, LzoError> {
        Ok(self.byte()? | self.byte()? << 8)
    }

    /// A length's extension: zero bytes count 255 each, then a non-zero
    /// byte; `base` is added.
    fn extended(&mut self, base: usize) -> Result<usize, LzoError> {
        let mut zeros = 0usize;
        loop {
            let b = self.byte()?;
            if b != 0 {
                return Ok(base + zeros * 255 + b);
            }
            zeros += 1;
            // Longer than any page could need.
            if zeros > 1 << 16 {
                return Err(LzoError::Invalid);
            }
        }
    }

    fn literals(&mut self, n: usize) -> Result<(), LzoError> {
        let src = self
            .input
            .get(self.ip..self.ip + n)
            .ok_or(LzoError::InputOverrun)?;
        let dst = self
            .out
            .get_mut(self.op..self.op + n)
            .ok_or(LzoError::OutputOverrun)?;
        dst.copy_from_slice(src);
        self.ip += n;
        self.op += n;
        Ok(())
    }

    /// Copies `len` bytes from `distance` back (overlapping copies repeat
    /// bytes, as the format means them to).
    fn copy(&mut self, distance: usize, len: usize) -> Result<(), LzoError> {
        if distance == 0 || distance > self.op {
            return Err(LzoError::LookbehindOverrun);
        }
        if self.op + len > self.out.len() {
            return Err(LzoError::OutputOverrun);
        }
        let from = self.op - distance;
        for i in 0..len {
            self.out[self.op + i] = self.out[from + i];
        }
        self.op += len;
        Ok(())
    }
}

/// Decodes an LZO1X stream into `out`, which it must fill exactly.
pub fn decompress(input: &[u8], out: &mut [u8]) -> Result<(), LzoError> {
    let mut d = Decoder {
        input,
        ip: 0,
        out,
        op: 0,
    };
    // The number of literals the last instruction copied: 0, 1-3, or 4
    // for a longer run.
    let mut state;
    let first = *input.first().ok_or(LzoError::InputOverrun)? as usize;
    if first > 17 {
        d.ip = 1;
        let n = first - 17;
        d.literals(n)?;
        state = n.min(4);
    } else {
        state = 0;
    }
    loop {
        let t = d.byte()?;
        let (distance, len, next);
        if t < 16 {
            if state == 0 {
                // A run of 4 or more literals.
                let n = if t == 0 { d.extended(15)? } else { t } + 3;
                d.literals(n)?;
                state = 4;
                continue;
            }
            let h = d.byte()?;
            next = t & 3;
            if state < 4 {
                // 2 bytes from up to 1 KiB back.
                distance = (h << 2) + (t >> 2) + 1;
                len = 2;
            } else {
                // 3 bytes from 2-3 KiB back.
                distance = (h << 2) + (t >> 2) + 2049;
                len = 3;
            }
        } else if t >= 64 {
            // 3 to 8 bytes from up to 2 KiB back.
            let h = d.byte()?;
            distance = (h << 3) + ((t >> 2) & 7) + 1;
            len = (t >> 5) + 1;
            next = t & 3;
        } else if t >= 32 {
            // From up to 16 KiB back.
            let l = t & 31;
            len = if l == 0 { d.extended(31)? } else { l } + 2;
            let v = d.le16()?;
            distance = (v >> 2) + 1;
            next = v & 3;
        } else {
            // From 16 to 48 KiB back, or the end of the stream.
            let l = t & 7;
            len = if l == 0 { d.extended(7)? } else { l } + 2;
            let v = d.le16()?;
            let far = ((t & 8) << 11) + (v >> 2);
            if far == 0 {
                // The end marker: a length of 3, and nothing after it.
                if len != 3 {
                    return Err(LzoError::Invalid);
                }
                if d.ip != input.len() || d.op != d.out.len() {
                    return Err(LzoError::Length);
                }
                return Ok(());
            }
            distance = far + 16384;
            next = v & 3;
        }
        d.copy(distance, len)?;
        d.literals(next)?;
        state = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages of several kinds: zeros, text, a repeating pattern, bytes of
    /// a simple generator (little to compress).
    fn pages() -> Vec<Vec<u8>> {
        let mut v = vec![vec![0u8; 4096]];
        let text: Vec<u8> = b"pagescope reads makedumpfile's pages. "
            .iter()
            .copied()
            .cycle()
            .take(4096)
            .collect();
        v.push(text);
        v.push((0..4096u32).map(|i| (i % 251) as u8).collect());
        let mut x = 0x1234_5678u32;
        v.push(
            (0..4096)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    (x >> 24) as u8
                })
                .collect(),
        );
        // Mostly zeros with a few words set, as page tables are.
        let mut pt = vec![0u8; 4096];
        for i in (0..4096).step_by(512) {
            pt[i..i + 8].copy_from_slice(&(0x8000_0000_1234_5067u64 + i as u64).to_le_bytes());
        }
        v.push(pt);
        v
    }

    #[test]
    fn decodes_what_an_lzo1x_compressor_wrote() {
        for p in pages() {
            let c = lzokay_native::compress(&p).expect("compresses");
            let mut out = vec![0u8; 4096];
            decompress(&c, &mut out).expect("decodes");
            assert_eq!(out, p);
            // A page of another size is a length error, not a panic.
            let mut short = vec![0u8; 2048];
            assert!(decompress(&c, &mut short).is_err());
            let mut long = vec![0u8; 8192];
            assert_eq!(decompress(&c, &mut long), Err(LzoError::Length));
        }
    }

    #[test]
    fn corrupt_streams_are_errors() {
        for p in pages() {
            let c = lzokay_native::compress(&p).expect("compresses");
            let mut out = vec![0u8; 4096];
            // Cut anywhere: an error.
            for cut in 0..c.len() {
                assert!(decompress(&c[..cut], &mut out).is_err(), "cut at {cut}");
            }
            // Any byte changed: a page that differs, or an error; never a
            // panic.
            for i in 0..c.len() {
                for flip in [0x01u8, 0x80, 0xff] {
                    let mut bad = c.clone();
                    bad[i] ^= flip;
                    let _ = decompress(&bad, &mut out);
                }
            }
        }
        let mut out = vec![0u8; 4096];
        // A copy (16 KiB back) before anything was written.
        assert_eq!(
            decompress(&[0x11, 0x04, 0x00], &mut out),
            Err(LzoError::LookbehindOverrun)
        );
        // The end marker at once: nothing written.
        assert_eq!(
            decompress(&[0x11, 0x00, 0x00], &mut out),
            Err(LzoError::Length)
        );
        // A literal run longer than the input.
        assert_eq!(
            decompress(&[0x40, 0x00], &mut out),
            Err(LzoError::InputOverrun)
        );
        assert_eq!(decompress(&[], &mut out), Err(LzoError::InputOverrun));
    }
}
