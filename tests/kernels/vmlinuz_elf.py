#!/usr/bin/env python3
"""Writes the kernel ELF image inside a bzImage (a distribution's vmlinuz).

    vmlinuz_elf.py VMLINUZ OUT

The bzImage carries the kernel's vmlinux, stripped of its symbols but with
its .BTF section and build id, compressed by one of the kernel's codecs;
this finds the compressed stream by its magic bytes and decompresses it
with the codec's own tool (lz4, xz, zstd, gzip: Debian's 6.1 cloud kernel
uses lz4), keeping the first stream that decompresses to an ELF file.
Exits 1 if none does.
"""
import subprocess
import sys

CODECS = [
    (b"\x02\x21\x4c\x18", ["lz4", "-dc"]),
    (b"\xfd7zXZ\x00", ["xz", "-dc"]),
    (b"\x28\xb5\x2f\xfd", ["zstd", "-dc"]),
    (b"\x1f\x8b\x08", ["gzip", "-dc"]),
]


def main():
    image, out = sys.argv[1:3]
    data = open(image, "rb").read()
    for magic, cmd in CODECS:
        at = data.find(magic)
        while at >= 0:
            # The stream is followed by the rest of the image: the tools
            # complain of it after writing the whole kernel.
            p = subprocess.run(cmd, input=data[at:], capture_output=True)
            if p.stdout[:4] == b"\x7fELF":
                with open(out, "wb") as f:
                    f.write(p.stdout)
                print("%s at byte %d: %d bytes" % (cmd[0], at, len(p.stdout)))
                return 0
            at = data.find(magic, at + 1)
    print("no compressed ELF image found in %s" % image, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
