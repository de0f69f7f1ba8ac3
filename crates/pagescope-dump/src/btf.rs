//! A reader of BTF, the kernel's compact type information
//! (Documentation/bpf/btf.rst, include/uapi/linux/btf.h): the layouts of
//! the structures a dump is walked through, which VMCOREINFO does not
//! give (tasks, mm, VMAs, files), and the values of enums
//! (`enum pageflags`).
//!
//! Only what a layout needs is kept: every type's kind, name, size or
//! referred type, and for structs, unions and enums their members. Every
//! length the data claims is checked against the data before it is used.

use std::collections::HashMap;

/// BTF's magic number, as a little-endian u16 at the start.
const MAGIC: u16 = 0xeb9f;

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// A member of a struct or union.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Member {
    name: u32,
    ty: u32,
    /// Offset in bits from the start of the struct.
    bit_offset: u32,
}

/// One type, as much of it as pagescope uses.
#[derive(Clone, Debug)]
struct Type {
    kind: u32,
    /// Size in bytes (int, struct, union, enum, float, datasec) or the
    /// type referred to (pointer, typedef, qualifiers, var, func).
    size_or_type: u32,
    members: Vec<Member>,
    /// Enumerators: name and value.
    values: Vec<(u32, i64)>,
    /// For an array: element type and count.
    array: Option<(u32, u32)>,
}

/// Parsed BTF.
#[derive(Debug)]
pub struct Btf {
    strings: Vec<u8>,
    /// Index 0 is `void`.
    types: Vec<Type>,
    /// Struct and union names to their ids (complete ones only).
    by_name: HashMap<String, u32>,
}

/// Where a member sits: its byte offset from the start of the outermost
/// struct, and its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Offset in bytes.
    pub offset: u64,
    /// The member's type id.
    pub ty: u32,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at.checked_add(4)?)
        .map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")))
}

impl Btf {
    /// Whether `bytes` start like BTF.
    pub fn is_btf(bytes: &[u8]) -> bool {
        bytes.len() >= 2 && u16::from_le_bytes([bytes[0], bytes[1]]) == MAGIC
    }

    /// Parses raw BTF (`/sys/kernel/btf/vmlinux`, or a vmlinux's `.BTF`
    /// section). The error says what is wrong with it.
    pub fn parse(bytes: &[u8]) -> Result<Btf, String> {
        if !Btf::is_btf(bytes) {
            return Err("no BTF magic".into());
        }
        if bytes.len() < 24 {
            return Err("BTF header cut short".into());
        }
        if bytes[2] != 1 {
            return Err(format!("BTF version {} (1 is known)", bytes[2]));
        }
        let field = |i: usize| u32_at(bytes, 4 + 4 * i).expect("header checked") as usize;
        let (hdr_len, type_off, type_len, str_off, str_len) =
            (field(0), field(1), field(2), field(3), field(4));
        let section = |off: usize, len: usize, what: &str| {
            hdr_len
                .checked_add(off)
                .and_then(|s| Some((s, s.checked_add(len)?)))
                .and_then(|(s, e)| bytes.get(s..e))
                .ok_or_else(|| format!("BTF {what} section lies past the end of the data"))
        };
        let types_bytes = section(type_off, type_len, "type")?;
        let strings = section(str_off, str_len, "string")?.to_vec();
        let mut btf = Btf {
            strings,
            types: vec![Type {
                kind: 0,
                size_or_type: 0,
                members: Vec::new(),
                values: Vec::new(),
                array: None,
            }],
            by_name: HashMap::new(),
        };
        let t = types_bytes;
        let mut at = 0usize;
        while at < t.len() {
            let short = || format!("BTF type {} cut short", btf.types.len());
            let name = u32_at(t, at).ok_or_else(short)?;
            let info = u32_at(t, at + 4).ok_or_else(short)?;
            let size_or_type = u32_at(t, at + 8).ok_or_else(short)?;
            at += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 == 1;
            let mut ty = Type {
                kind,
                size_or_type,
                members: Vec::new(),
                values: Vec::new(),
                array: None,
            };
            let extra = |n: usize| -> Result<&[u8], String> {
                t.get(at..at.checked_add(n).ok_or_else(short)?)
                    .ok_or_else(short)
            };
            let len = match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
                | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => 0,
                KIND_ARRAY => {
                    let a = extra(12)?;
                    ty.array = Some((u32_at(a, 0).expect("12"), u32_at(a, 8).expect("12")));
                    12
                }
                KIND_STRUCT | KIND_UNION => {
                    let m = extra(vlen * 12)?;
                    ty.members = m
                        .chunks_exact(12)
                        .map(|c| {
                            let off = u32_at(c, 8).expect("12");
                            Member {
                                name: u32_at(c, 0).expect("12"),
                                ty: u32_at(c, 4).expect("12"),
                                bit_offset: if kind_flag { off & 0xff_ffff } else { off },
                            }
                        })
                        .collect();
                    vlen * 12
                }
                KIND_ENUM => {
                    let m = extra(vlen * 8)?;
                    ty.values = m
                        .chunks_exact(8)
                        .map(|c| {
                            (
                                u32_at(c, 0).expect("8"),
                                u32_at(c, 4).expect("8") as i32 as i64,
                            )
                        })
                        .collect();
                    vlen * 8
                }
                KIND_ENUM64 => {
                    let m = extra(vlen * 12)?;
                    ty.values = m
                        .chunks_exact(12)
                        .map(|c| {
                            let lo = u32_at(c, 4).expect("12") as u64;
                            let hi = u32_at(c, 8).expect("12") as u64;
                            (u32_at(c, 0).expect("12"), (hi << 32 | lo) as i64)
                        })
                        .collect();
                    vlen * 12
                }
                KIND_FUNC_PROTO => vlen * 8,
                KIND_DATASEC => vlen * 12,
                k => return Err(format!("BTF type {} has unknown kind {k}", btf.types.len())),
            };
            extra(len)?;
            at += len;
            if matches!(kind, KIND_STRUCT | KIND_UNION) && name != 0 {
                let id = btf.types.len() as u32;
                let n = btf.string(name).to_string();
                btf.by_name.entry(n).or_insert(id);
            }
            btf.types.push(ty);
        }
        Ok(btf)
    }

    fn string(&self, off: u32) -> &str {
        let rest = self.strings.get(off as usize..).unwrap_or_default();
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }

    fn get(&self, id: u32) -> Option<&Type> {
        self.types.get(id as usize)
    }

    /// The id of the struct or union `name`.
    pub fn struct_id(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// The type under typedefs and qualifiers.
    fn resolve(&self, mut id: u32) -> Option<u32> {
        for _ in 0..32 {
            let t = self.get(id)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return Some(id),
            }
        }
        None
    }

    /// The size in bytes of a type (`None` for void, functions, forward
    /// declarations).
    pub fn size_of(&self, id: u32) -> Option<u64> {
        let id = self.resolve(id)?;
        let t = self.get(id)?;
        match t.kind {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 | KIND_FLOAT => {
                Some(t.size_or_type as u64)
            }
            KIND_PTR => Some(8),
            KIND_ARRAY => {
                let (elem, n) = t.array?;
                Some(self.size_of(elem)? * n as u64)
            }
            _ => None,
        }
    }

    /// The size of struct `name`.
    pub fn struct_size(&self, name: &str) -> Option<u64> {
        self.size_of(self.struct_id(name)?)
    }

    /// The element count of an array type.
    pub fn array_len(&self, id: u32) -> Option<u64> {
        let t = self.get(self.resolve(id)?)?;
        (t.kind == KIND_ARRAY).then(|| t.array.map(|(_, n)| n as u64))?
    }

    /// A member of a struct or union by name, looking through anonymous
    /// structs and unions as C does.
    fn member(&self, id: u32, name: &str) -> Option<Field> {
        let t = self.get(self.resolve(id)?)?;
        if !matches!(t.kind, KIND_STRUCT | KIND_UNION) {
            return None;
        }
        for m in &t.members {
            let here = (m.bit_offset / 8) as u64;
            if m.name == 0 {
                if let Some(f) = self.member(m.ty, name) {
                    return Some(Field {
                        offset: here + f.offset,
                        ty: f.ty,
                    });
                }
            } else if self.string(m.name) == name {
                return Some(Field {
                    offset: here,
                    ty: m.ty,
                });
            }
        }
        None
    }

    /// A member of struct `strukt` by a path of names (`f_path.dentry`),
    /// its offset from the start of `strukt`.
    pub fn field(&self, strukt: &str, path: &str) -> Option<Field> {
        let mut id = self.struct_id(strukt)?;
        let mut offset = 0;
        let mut last = None;
        for name in path.split('.') {
            let f = self.member(id, name)?;
            offset += f.offset;
            id = f.ty;
            last = Some(Field { offset, ty: f.ty });
        }
        last
    }

    /// The value of an enumerator of any enum (`PG_locked`).
    pub fn enum_value(&self, name: &str) -> Option<i64> {
        self.types
            .iter()
            .filter(|t| matches!(t.kind, KIND_ENUM | KIND_ENUM64))
            .flat_map(|t| t.values.iter())
            .find(|(n, _)| self.string(*n) == name)
            .map(|&(_, v)| v)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds BTF by hand: strings, then types as (name, info, size, extra
    /// words).
    #[derive(Default)]
    pub(crate) struct Builder {
        strings: Vec<u8>,
        types: Vec<u8>,
        next: u32,
    }

    impl Builder {
        pub(crate) fn new() -> Builder {
            Builder {
                strings: vec![0],
                types: Vec::new(),
                next: 1,
            }
        }
        pub(crate) fn s(&mut self, s: &str) -> u32 {
            let off = self.strings.len() as u32;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            off
        }
        fn push(&mut self, name: &str, kind: u32, vlen: u32, size: u32, extra: &[u32]) -> u32 {
            let n = if name.is_empty() { 0 } else { self.s(name) };
            for w in [n, kind << 24 | vlen, size].iter().chain(extra) {
                self.types.extend_from_slice(&w.to_le_bytes());
            }
            self.next += 1;
            self.next - 1
        }
        pub(crate) fn int(&mut self, name: &str, size: u32) -> u32 {
            self.push(name, KIND_INT, 0, size, &[size * 8])
        }
        pub(crate) fn ptr(&mut self, to: u32) -> u32 {
            self.push("", KIND_PTR, 0, to, &[])
        }
        pub(crate) fn array(&mut self, elem: u32, index: u32, n: u32) -> u32 {
            self.push("", KIND_ARRAY, 0, 0, &[elem, index, n])
        }
        /// Members as (name, type, byte offset).
        pub(crate) fn strukt(
            &mut self,
            name: &str,
            size: u32,
            members: &[(&str, u32, u32)],
        ) -> u32 {
            let mut extra = Vec::new();
            for &(m, ty, off) in members {
                let n = if m.is_empty() { 0 } else { self.s(m) };
                extra.extend([n, ty, off * 8]);
            }
            self.push(name, KIND_STRUCT, members.len() as u32, size, &extra)
        }
        pub(crate) fn union(&mut self, name: &str, size: u32, members: &[(&str, u32, u32)]) -> u32 {
            let id = self.strukt(name, size, members);
            // Patch the kind of the type just written.
            let at = self.types.len() - 12 * (members.len() + 1) + 4;
            let info = KIND_UNION << 24 | members.len() as u32;
            self.types[at..at + 4].copy_from_slice(&info.to_le_bytes());
            id
        }
        pub(crate) fn enumeration(&mut self, name: &str, values: &[(&str, i32)]) -> u32 {
            let mut extra = Vec::new();
            for &(v, x) in values {
                let n = self.s(v);
                extra.extend([n, x as u32]);
            }
            self.push(name, KIND_ENUM, values.len() as u32, 4, &extra)
        }
        pub(crate) fn bytes(&self) -> Vec<u8> {
            let mut b = Vec::new();
            b.extend_from_slice(&MAGIC.to_le_bytes());
            b.extend_from_slice(&[1, 0]);
            for w in [
                24u32,
                0,
                self.types.len() as u32,
                self.types.len() as u32,
                self.strings.len() as u32,
            ] {
                b.extend_from_slice(&w.to_le_bytes());
            }
            b.extend_from_slice(&self.types);
            b.extend_from_slice(&self.strings);
            b
        }
    }

    #[test]
    fn members_through_anonymous_unions_and_paths() {
        let mut b = Builder::new();
        let long = b.int("long unsigned int", 8);
        let int = b.int("int", 4);
        let inner = b.strukt("", 16, &[("hash", int, 0), ("len", int, 4), ("x", long, 8)]);
        let u = b.union("", 16, &[("", inner, 0), ("hash_len", long, 0)]);
        let p = b.ptr(long);
        let qstr = b.strukt("qstr", 24, &[("", u, 0), ("name", p, 16)]);
        let arr = b.array(long, int, 15);
        b.strukt(
            "dentry",
            64,
            &[("d_flags", int, 0), ("d_name", qstr, 32), ("pivot", arr, 8)],
        );
        b.enumeration("pageflags", &[("PG_locked", 0), ("PG_head", 16)]);
        let btf = Btf::parse(&b.bytes()).unwrap();
        assert_eq!(btf.field("dentry", "d_name.name").unwrap().offset, 48);
        assert_eq!(btf.field("dentry", "d_name.len").unwrap().offset, 36);
        assert_eq!(btf.field("qstr", "hash_len").unwrap().offset, 0);
        assert_eq!(btf.struct_size("dentry"), Some(64));
        let f = btf.field("dentry", "pivot").unwrap();
        assert_eq!(
            (btf.array_len(f.ty), btf.size_of(f.ty)),
            (Some(15), Some(120))
        );
        assert_eq!(btf.enum_value("PG_head"), Some(16));
        assert_eq!(btf.field("dentry", "nothing"), None);
        assert_eq!(btf.field("nostruct", "x"), None);
    }

    #[test]
    fn damaged_btf_is_refused_not_misread() {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        b.strukt("s", 8, &[("a", int, 0), ("b", int, 4)]);
        let bytes = b.bytes();
        assert!(Btf::parse(&bytes[..10]).is_err());
        // Cut inside the type section: the lengths point past the end.
        assert!(Btf::parse(&bytes[..40]).is_err());
        assert!(Btf::parse(b"not btf at all, not at all").is_err());
        // A struct claiming more members than the section holds.
        let mut bad = bytes.clone();
        let at = 24 + 16 + 4; // the struct's info word
        bad[at..at + 4].copy_from_slice(&(KIND_STRUCT << 24 | 1000).to_le_bytes());
        assert!(Btf::parse(&bad).is_err());
    }
}
