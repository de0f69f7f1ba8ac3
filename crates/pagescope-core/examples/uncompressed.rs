//! Writes a copy of a pagescope file whose frames are stored
//! uncompressed: the same records, which any reader reads the same. The
//! fuzz targets' seeds (fuzz/make-corpus.sh) include such copies, so that
//! a mutated byte lands in a record rather than in zstd's stream.
//!
//! ```text
//! cargo run -p pagescope-core --example uncompressed -- IN OUT
//! ```

use pagescope_core::format::{FrameReader, ReadOutcome};
use std::io::Write;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [input, output] = &args[..] else {
        return Err("usage: uncompressed IN OUT".into());
    };
    let bytes = std::fs::read(input)?;
    let mut reader = FrameReader::new(&bytes[..], input)?;
    // The file header as it was: magic, version, kind.
    let mut out = bytes[..16].to_vec();
    while let ReadOutcome::Frame(f) = reader.next_frame()? {
        let len = u32::try_from(f.payload.len())?.to_le_bytes();
        let mut header = Vec::with_capacity(16);
        header.extend_from_slice(&f.frame_type.to_le_bytes());
        header.extend_from_slice(&0u16.to_le_bytes()); // flags: stored
        header.extend_from_slice(&len); // stored_len
        header.extend_from_slice(&len); // raw_len
        let mut crc = crc32fast::Hasher::new();
        crc.update(&header);
        crc.update(&f.payload);
        header.extend_from_slice(&crc.finalize().to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&f.payload);
    }
    std::fs::File::create(output)?.write_all(&out)?;
    Ok(())
}
