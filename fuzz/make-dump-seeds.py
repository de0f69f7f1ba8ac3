#!/usr/bin/env python3
"""Makes the read_dump fuzz target's seeds (fuzz/seeds/read_dump/) from
real dumps: each cut down to its headers, notes or VMCOREINFO, and its
first few frames, a few tens of KB, kept valid (the readers open them and
read their pages).

    fuzz/make-dump-seeds.py DUMP...

A DUMP is an ELF core or a makedumpfile compressed (kdump) file; the
guest check keeps one with PAGESCOPE_KEEP_DUMP (tests/kernels/run), and
`makedumpfile -c/-l/-p/-z -d 0` makes the compressed ones from it. Each
seed is named after its source's kind and codec (and machine, for an
arm64 ELF core).
"""
import os
import struct
import sys

FRAMES = 8
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds", "read_dump")


def elf_seed(f):
    """The ELF header, one PT_NOTE and the first FRAMES pages of the first
    PT_LOAD, laid out as makedumpfile -E does (program headers at 64)."""
    eh = bytearray(f.read(64))
    phoff = struct.unpack_from("<Q", eh, 32)[0]
    phnum = struct.unpack_from("<H", eh, 56)[0]
    f.seek(phoff)
    phdrs = [struct.unpack("<IIQQQQQQ", f.read(56)) for _ in range(phnum)]
    note = next(p for p in phdrs if p[0] == 4)
    load = next(p for p in phdrs if p[0] == 1)
    f.seek(note[2])
    notes = f.read(note[5])
    f.seek(load[2])
    n = min(load[5], FRAMES * 4096)
    memory = f.read(n)
    note_at = 64 + 2 * 56
    load_at = note_at + len(notes)
    struct.pack_into("<QQ", eh, 32, 64, 0)
    struct.pack_into("<HHHHHH", eh, 52, 64, 56, 2, 64, 0, 0)
    out = bytes(eh)
    out += struct.pack("<IIQQQQQQ", 4, 0, note_at, 0, 0, len(notes), len(notes), 0)
    out += struct.pack("<IIQQQQQQ", 1, load[1], load_at, load[3], load[4], n, n, 0)
    machine = struct.unpack_from("<H", eh, 18)[0]
    return out + notes + memory, {62: "elf", 183: "elf-arm64"}.get(machine, "elf-%d" % machine)


def kdump_seed(f):
    """The header and sub-header blocks as they are (VMCOREINFO and the
    notes inside), bitmaps over the first FRAMES frames, their page
    descriptors and data."""
    h = bytearray(f.read(464))
    block, sub_blocks, bitmap_blocks = struct.unpack_from("<iiI", h, 428)
    f.seek(0)
    head = bytearray(f.read((1 + sub_blocks) * block))
    half = bitmap_blocks * block // 2
    bitmap_at = (1 + sub_blocks) * block
    f.seek(bitmap_at)
    ram = f.read(half)
    dumped = f.read(half)
    pd_at = bitmap_at + 2 * half
    frames = [p for p in range(FRAMES) if dumped[p // 8] >> (p % 8) & 1]
    codecs = set()
    descs, data = [], []
    for rank, p in enumerate(frames):
        f.seek(pd_at + 24 * rank)
        offset, size, flags, pflags = struct.unpack("<qIIQ", f.read(24))
        f.seek(offset)
        data.append(f.read(size))
        descs.append((size, flags, pflags))
        codecs.add({0: "raw", 1: "zlib", 2: "lzo", 4: "snappy", 0x20: "zstd"}.get(flags & 0x27, "mixed"))
    struct.pack_into("<I", head, 436, 2)  # a block for each bitmap
    struct.pack_into("<I", head, 440, FRAMES)
    struct.pack_into("<Q", head, block + 96, FRAMES)
    bm = bytearray(2 * block)
    bm[0] = ram[0] & ((1 << FRAMES) - 1)
    bm[block] = dumped[0] & ((1 << FRAMES) - 1)
    out = bytes(head) + bytes(bm)
    at = len(out) + 24 * len(frames)
    for (size, flags, pflags), d in zip(descs, data):
        out += struct.pack("<qIIQ", at, size, flags, pflags)
        at += size
    out += b"".join(data)
    codecs.discard("raw")
    return out, "kdump-" + ("-".join(sorted(codecs)) or "raw")


def main():
    os.makedirs(OUT, exist_ok=True)
    for path in sys.argv[1:]:
        with open(path, "rb") as f:
            magic = f.read(8)
            f.seek(0)
            if magic[:4] == b"\x7fELF":
                seed, kind = elf_seed(f)
            elif magic == b"KDUMP   ":
                seed, kind = kdump_seed(f)
            else:
                sys.exit("%s: neither an ELF core nor a kdump file" % path)
        name = os.path.join(OUT, kind)
        with open(name, "wb") as o:
            o.write(seed)
        print("%s: %d bytes" % (name, len(seed)))


if __name__ == "__main__":
    main()
