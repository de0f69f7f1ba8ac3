#!/usr/bin/env python3
"""Rewrites an ELF core's headers, in place, so that makedumpfile reads it.

    elf_phdrs_first.py CORE

makedumpfile (1.7.2, Debian 12) reads the program headers right after
the ELF header, at byte 64, as the kernel's /proc/vmcore has them; qemu's
dump-guest-memory (7.2) writes section headers there and the program
headers after them, and makedumpfile then finds no PT_LOAD. This moves
the program headers to byte 64 and drops the section headers (qemu's
carry only the count of program headers beyond 65535, and a string
table). Nothing else moves: the notes and memory stay where the program
headers say. Prints what it did.
"""
import struct
import sys


def main():
    path = sys.argv[1]
    with open(path, "r+b") as f:
        eh = bytearray(f.read(64))
        if eh[:4] != b"\x7fELF" or eh[4] != 2 or eh[5] != 1:
            sys.exit("%s: not a 64-bit little-endian ELF file" % path)
        phoff, shoff = struct.unpack_from("<QQ", eh, 32)
        phentsize, phnum = struct.unpack_from("<HH", eh, 54)
        if phoff == 64:
            print("program headers already at 64")
            return
        if phnum == 0xffff or phentsize != 56:
            sys.exit("%s: %d program headers of %d bytes: not moved" % (path, phnum, phentsize))
        f.seek(phoff)
        phdrs = f.read(56 * phnum)
        first = min(struct.unpack_from("<Q", phdrs, 56 * i + 8)[0] for i in range(phnum))
        if 64 + len(phdrs) > first:
            sys.exit("%s: no room for the program headers before the data at %d" % (path, first))
        struct.pack_into("<QQ", eh, 32, 64, 0)
        struct.pack_into("<HHHHHH", eh, 52, 64, 56, phnum, 64, 0, 0)
        f.seek(0)
        f.write(eh)
        f.write(phdrs)
        # The rest of the old headers, up to the first data: zeros.
        f.write(b"\0" * (first - 64 - len(phdrs)))
    print("moved %d program headers from %d to 64 (section headers were at %d)" % (phnum, phoff, shoff))


if __name__ == "__main__":
    main()
