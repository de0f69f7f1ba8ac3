#!/usr/bin/env python3
"""Damages pages of a makedumpfile compressed (kdump) file, in place.

    kdump_damage.py KDUMP PFN...

Each frame's data is overwritten at its start with 0xff bytes, and a
page stored uncompressed is marked zlib-compressed, so that it no longer
decodes to a page. Prints how many frames were damaged (a frame not in
the dump is skipped).
"""
import struct
import sys


def main():
    path, pfns = sys.argv[1], [int(p, 0) for p in sys.argv[2:]]
    n = 0
    with open(path, "r+b") as f:
        h = f.read(464)
        if h[:8] != b"KDUMP   ":
            sys.exit("%s: not a kdump file" % path)
        block, sub_blocks, bitmap_blocks = struct.unpack_from("<iiI", h, 428)
        f.seek(block + 96)
        max_mapnr = struct.unpack("<Q", f.read(8))[0]
        bitmap_at = (1 + sub_blocks) * block
        half = bitmap_blocks * block // 2
        f.seek(bitmap_at + half)
        dumped = f.read((max_mapnr + 7) // 8)
        pd_at = (1 + sub_blocks + bitmap_blocks) * block
        # The rank of each frame: bits set before it.
        counts = [0]
        for b in dumped:
            counts.append(counts[-1] + bin(b).count("1"))
        for pfn in pfns:
            byte, bit = divmod(pfn, 8)
            if pfn >= max_mapnr or not dumped[byte] >> bit & 1:
                continue
            rank = counts[byte] + bin(dumped[byte] & ((1 << bit) - 1)).count("1")
            f.seek(pd_at + 24 * rank)
            offset, size, flags = struct.unpack("<qII", f.read(16))
            f.seek(offset)
            f.write(b"\xff" * min(size, 16))
            if flags & 0x27 == 0:
                f.seek(pd_at + 24 * rank + 12)
                f.write(struct.pack("<I", flags | 1))
            n += 1
    print(n)


if __name__ == "__main__":
    main()
