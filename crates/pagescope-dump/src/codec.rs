//! The four ways makedumpfile compresses a page (`-c` zlib, `-l` lzo,
//! `-p` snappy, `-z` zstd), each page on its own: a zlib stream
//! (`compress2`), an LZO1X stream, a raw snappy block, a zstd frame. A
//! page decodes to exactly a page, or it is corrupt.

use crate::lzo;

/// A page's compression (`page_desc.flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// `DUMP_DH_COMPRESSED_ZLIB`.
    Zlib,
    /// `DUMP_DH_COMPRESSED_LZO`.
    Lzo,
    /// `DUMP_DH_COMPRESSED_SNAPPY`.
    Snappy,
    /// `DUMP_DH_COMPRESSED_ZSTD`.
    Zstd,
}

/// `DUMP_DH_COMPRESSED_ZLIB`.
pub const ZLIB: u32 = 0x1;
/// `DUMP_DH_COMPRESSED_LZO`.
pub const LZO: u32 = 0x2;
/// `DUMP_DH_COMPRESSED_SNAPPY`.
pub const SNAPPY: u32 = 0x4;
/// `DUMP_DH_COMPRESSED_ZSTD`.
pub const ZSTD: u32 = 0x20;

impl Codec {
    /// The codec of a page descriptor's flags: `Ok(None)` for a page
    /// stored as it is, an error for flags of more than one codec.
    pub fn of_flags(flags: u32) -> Result<Option<Codec>, String> {
        let c = flags & (ZLIB | LZO | SNAPPY | ZSTD);
        Ok(Some(match c {
            0 => return Ok(None),
            ZLIB => Codec::Zlib,
            LZO => Codec::Lzo,
            SNAPPY => Codec::Snappy,
            ZSTD => Codec::Zstd,
            _ => {
                return Err(format!(
                    "page descriptor flags {flags:#x} name more than one codec"
                ))
            }
        }))
    }

    /// The codec's name, as makedumpfile's options say it.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Zlib => "zlib",
            Codec::Lzo => "lzo",
            Codec::Snappy => "snappy",
            Codec::Zstd => "zstd",
        }
    }
}

/// Decoders, kept from page to page.
pub struct Decoders {
    zlib: flate2::Decompress,
    snappy: snap::raw::Decoder,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl std::fmt::Debug for Decoders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Decoders")
    }
}

impl Default for Decoders {
    fn default() -> Self {
        Decoders::new()
    }
}

impl Decoders {
    /// New decoders (zstd's context is made when first needed).
    pub fn new() -> Decoders {
        Decoders {
            zlib: flate2::Decompress::new(true),
            snappy: snap::raw::Decoder::new(),
            zstd: None,
        }
    }

    /// Decodes `input` into `out`, which it must fill exactly.
    pub fn decompress(&mut self, codec: Codec, input: &[u8], out: &mut [u8]) -> Result<(), String> {
        match codec {
            Codec::Zlib => {
                self.zlib.reset(true);
                let status = self
                    .zlib
                    .decompress(input, out, flate2::FlushDecompress::Finish)
                    .map_err(|e| format!("zlib: {e}"))?;
                if status != flate2::Status::StreamEnd || self.zlib.total_out() != out.len() as u64
                {
                    return Err(format!(
                        "zlib: the stream gives {} bytes, not a page of {}",
                        self.zlib.total_out(),
                        out.len()
                    ));
                }
                Ok(())
            }
            Codec::Lzo => lzo::decompress(input, out).map_err(|e| e.to_string()),
            Codec::Snappy => {
                let n = snap::raw::decompress_len(input).map_err(|e| format!("snappy: {e}"))?;
                if n != out.len() {
                    return Err(format!(
                        "snappy: the block gives {n} bytes, not a page of {}",
                        out.len()
                    ));
                }
                let got = self
                    .snappy
                    .decompress(input, out)
                    .map_err(|e| format!("snappy: {e}"))?;
                if got != out.len() {
                    return Err(format!(
                        "snappy: the block gave {got} bytes, not {}",
                        out.len()
                    ));
                }
                Ok(())
            }
            Codec::Zstd => {
                let d = match &mut self.zstd {
                    Some(d) => d,
                    None => self
                        .zstd
                        .insert(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?),
                };
                let got = d
                    .decompress_to_buffer(input, out)
                    .map_err(|e| format!("zstd: {e}"))?;
                if got != out.len() {
                    return Err(format!(
                        "zstd: the frame gave {got} bytes, not a page of {}",
                        out.len()
                    ));
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn page() -> Vec<u8> {
        (0..4096u32).map(|i| (i * 7 % 253) as u8).collect()
    }

    fn compress(codec: Codec, p: &[u8]) -> Vec<u8> {
        match codec {
            Codec::Zlib => {
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(p).unwrap();
                e.finish().unwrap()
            }
            Codec::Lzo => lzokay_native::compress(p).unwrap(),
            Codec::Snappy => snap::raw::Encoder::new().compress_vec(p).unwrap(),
            Codec::Zstd => zstd::bulk::compress(p, 1).unwrap(),
        }
    }

    #[test]
    fn each_codec_decodes_a_page_and_refuses_damage() {
        let p = page();
        let mut d = Decoders::new();
        for codec in [Codec::Zlib, Codec::Lzo, Codec::Snappy, Codec::Zstd] {
            let c = compress(codec, &p);
            assert!(c.len() < p.len(), "{}", codec.name());
            let mut out = vec![0u8; 4096];
            d.decompress(codec, &c, &mut out).unwrap();
            assert_eq!(out, p, "{}", codec.name());
            // Twice: the kept decoder starts afresh.
            out.fill(0);
            d.decompress(codec, &c, &mut out).unwrap();
            assert_eq!(out, p, "{}", codec.name());
            // Cut short: an error.
            assert!(
                d.decompress(codec, &c[..c.len() / 2], &mut out).is_err(),
                "{}",
                codec.name()
            );
            // Into a page of another size: an error.
            let mut small = vec![0u8; 2048];
            assert!(
                d.decompress(codec, &c, &mut small).is_err(),
                "{}",
                codec.name()
            );
            let mut big = vec![0u8; 8192];
            assert!(
                d.decompress(codec, &c, &mut big).is_err(),
                "{}",
                codec.name()
            );
            // Bytes changed: a page or an error, never a panic.
            for i in 0..c.len() {
                let mut bad = c.clone();
                bad[i] ^= 0x5a;
                let _ = d.decompress(codec, &bad, &mut out);
            }
        }
    }

    #[test]
    fn flags_name_one_codec() {
        assert_eq!(Codec::of_flags(0), Ok(None));
        assert_eq!(Codec::of_flags(ZLIB), Ok(Some(Codec::Zlib)));
        assert_eq!(Codec::of_flags(LZO), Ok(Some(Codec::Lzo)));
        assert_eq!(Codec::of_flags(SNAPPY), Ok(Some(Codec::Snappy)));
        assert_eq!(Codec::of_flags(ZSTD), Ok(Some(Codec::Zstd)));
        assert!(Codec::of_flags(ZLIB | ZSTD).is_err());
    }
}
