//! The kernel's own symbol table (kallsyms), read from a dump's memory
//! at the addresses VMCOREINFO prints for its tables (newer kernels, and
//! Debian's 6.1, print `SYMBOL(kallsyms_names)` and the rest): the
//! run-time address of each symbol pagescope looks up, and of
//! `__start_BTF`/`__stop_BTF`, between which the kernel keeps its own
//! BTF. With them a dump needs no file brought along (`--btf`).
//!
//! The format is kernel/kallsyms.c's (`kallsyms_expand_symbol`,
//! `kallsyms_sym_address`): each name a length (one byte, or two with
//! the high bit set) and that many token numbers, each token a
//! NUL-terminated string of `kallsyms_token_table` at
//! `kallsyms_token_index[number]`, the first character the symbol's type;
//! each address `kallsyms_relative_base` plus a 32-bit offset, or, where
//! the kernel keeps per-CPU symbols absolute (x86_64), a non-negative
//! offset as it is and a negative one below the base.

use crate::mmu::Mmu;
use crate::vmcoreinfo::VmcoreInfo;
use crate::Result;
use std::collections::HashMap;

/// At most this many symbols (a kernel has about 100 000 to 200 000).
const MAX_SYMS: u64 = 4 << 20;
/// Names are read this many bytes at a time.
const BLOCK: usize = 64 << 10;

/// Where the tables are, from VMCOREINFO; `None` if it does not give
/// them all.
#[derive(Clone, Copy, Debug)]
struct Tables {
    names: u64,
    num_syms: u64,
    token_table: u64,
    token_index: u64,
    offsets: u64,
    relative_base: u64,
}

impl Tables {
    fn of(info: &VmcoreInfo) -> Option<Tables> {
        Some(Tables {
            names: info.symbol("kallsyms_names")?,
            num_syms: info.symbol("kallsyms_num_syms")?,
            token_table: info.symbol("kallsyms_token_table")?,
            token_index: info.symbol("kallsyms_token_index")?,
            offsets: info.symbol("kallsyms_offsets")?,
            relative_base: info.symbol("kallsyms_relative_base")?,
        })
    }
}

/// Whether VMCOREINFO gives the tables.
pub fn available(info: &VmcoreInfo) -> bool {
    Tables::of(info).is_some()
}

/// The run-time addresses of the symbols of `wanted` that kallsyms
/// lists; `Err` says what could not be read.
pub fn lookup(
    mmu: &mut Mmu<'_>,
    info: &VmcoreInfo,
    absolute_percpu: bool,
    wanted: &[&str],
) -> Result<std::result::Result<HashMap<String, u64>, String>> {
    let Some(t) = Tables::of(info) else {
        return Ok(Err("VMCOREINFO gives no kallsyms tables".into()));
    };
    let mut b4 = [0u8; 4];
    let mut b8 = [0u8; 8];
    if !mmu.read(t.num_syms, &mut b4)? || !mmu.read(t.relative_base, &mut b8)? {
        return Ok(Err(
            "kallsyms_num_syms or kallsyms_relative_base is not in the dump".into(),
        ));
    }
    let n = u64::from(u32::from_le_bytes(b4));
    let base = u64::from_le_bytes(b8);
    if n == 0 || n > MAX_SYMS {
        return Ok(Err(format!("kallsyms_num_syms is {n}")));
    }
    let mut index = [0u8; 512];
    if !mmu.read(t.token_index, &mut index)? {
        return Ok(Err("kallsyms_token_index is not in the dump".into()));
    }
    let index: Vec<usize> = index
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]) as usize)
        .collect();
    // The token table ends with the NUL of its last token.
    let last = index.iter().copied().max().unwrap_or(0);
    let mut tokens = vec![0u8; last + 256];
    if !mmu.read(t.token_table, &mut tokens)? {
        return Ok(Err("kallsyms_token_table is not in the dump".into()));
    }
    let token = |b: u8| -> &[u8] {
        let s = &tokens[index[b as usize]..];
        &s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())]
    };
    let mut offsets = vec![0u8; n as usize * 4];
    if !mmu.read(t.offsets, &mut offsets)? {
        return Ok(Err("kallsyms_offsets is not in the dump".into()));
    }
    let mut names = Names {
        at: t.names,
        buf: Vec::new(),
        pos: 0,
    };
    let mut found = HashMap::new();
    let mut name = Vec::new();
    for i in 0..n as usize {
        let Some(first) = names.byte(mmu)? else {
            return Ok(Err(format!("kallsyms_names is cut short at symbol {i}")));
        };
        let mut len = u32::from(first);
        if len & 0x80 != 0 {
            let Some(hi) = names.byte(mmu)? else {
                return Ok(Err(format!("kallsyms_names is cut short at symbol {i}")));
            };
            len = (len & 0x7f) | (u32::from(hi) << 7);
        }
        name.clear();
        for _ in 0..len {
            let Some(b) = names.byte(mmu)? else {
                return Ok(Err(format!("kallsyms_names is cut short at symbol {i}")));
            };
            name.extend_from_slice(token(b));
        }
        // The first character is the type.
        let Some(text) = name.get(1..).and_then(|s| std::str::from_utf8(s).ok()) else {
            continue;
        };
        if wanted.contains(&text) && !found.contains_key(text) {
            let off = i32::from_le_bytes(offsets[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
            let addr = if !absolute_percpu {
                base.wrapping_add(u64::from(off as u32))
            } else if off >= 0 {
                off as u64
            } else {
                base.wrapping_sub(1).wrapping_sub(off as i64 as u64)
            };
            found.insert(text.to_string(), addr);
        }
    }
    Ok(Ok(found))
}

/// `kallsyms_names`, read a block at a time.
struct Names {
    at: u64,
    buf: Vec<u8>,
    pos: usize,
}

impl Names {
    fn byte(&mut self, mmu: &mut Mmu<'_>) -> Result<Option<u8>> {
        if self.pos == self.buf.len() {
            // A block, or less at the end of mapped memory.
            let mut want = BLOCK;
            loop {
                let mut b = vec![0u8; want];
                if mmu.read(self.at, &mut b)? {
                    self.at = self.at.wrapping_add(want as u64);
                    self.buf = b;
                    self.pos = 0;
                    break;
                }
                if want == 1 {
                    return Ok(None);
                }
                want /= 2;
            }
        }
        self.pos += 1;
        Ok(Some(self.buf[self.pos - 1]))
    }
}
