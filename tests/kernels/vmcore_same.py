#!/usr/bin/env python3
"""Compares the reports of two snapshots of the same dump in two forms
(the ELF core and a makedumpfile-compressed copy), byte for byte.

    vmcore_same.py [--figures] PAGESCOPE ELF-DUMP ELF-SNAPSHOT COPY-DUMP COPY-SNAPSHOT

Prints one line, `pass DETAIL` or `fail DETAIL`. The views compared:
`report processes`, `total`, `physmap` and `vmas` as JSON, and `pages`
(every page of every process: frame, flags, counts, swap entries) as
CSV. The snapshots' notes name the dump file read: each file's name is
replaced by the same word before comparing. A view that
fails on both snapshots with the same message compares equal. Both
snapshots are taken with --physmap. `vmas` is of every user process.

With --figures, only each process's RSS, PSS, USS and swap and the
total view's user pages are compared (a copy whose damage is local: its
command lines and notes differ).
"""
import json
import hashlib
import subprocess
import sys

VIEWS = [("processes", "json"), ("total", "json"), ("physmap", "json"),
         ("vmas", "json"), ("pages", "csv")]


def view(pagescope, dump, snap, name, fmt, extra=()):
    p = subprocess.run([pagescope, "report", name, "--input", snap, "--format", fmt, *extra],
                       capture_output=True)

    def same(b):
        return b.replace(dump.encode(), b"DUMP").replace(snap.encode(), b"SNAPSHOT")
    return p.returncode, same(p.stdout), same(p.stderr)


def figures(pagescope, snap):
    rows = json.loads(subprocess.run(
        [pagescope, "report", "processes", "--input", snap, "--format", "json"],
        check=True, capture_output=True, text=True).stdout)["processes"]
    total = json.loads(subprocess.run(
        [pagescope, "report", "total", "--input", snap, "--format", "json"],
        check=True, capture_output=True, text=True).stdout)
    return (sorted((r["pid"], r["rss_pages"], r["pss_pages"], r["uss_pages"], r["swap_pages"])
                   for r in rows), total["user_pages"])


def main():
    args = sys.argv[1:]
    if args[0] == "--figures":
        pagescope, _, elf, _, copy = args[1:6]
        a, b = figures(pagescope, elf), figures(pagescope, copy)
        if a == b:
            print("pass %d processes, %d user pages" % (len(a[0]), a[1]))
        else:
            print("fail figures differ: %s | %s" % (a, b))
        return
    pagescope, elf_dump, elf, copy_dump, copy = args[:5]
    rows = json.loads(view(pagescope, elf_dump, elf, "processes", "json")[1])["processes"]
    pids = [str(r["pid"]) for r in rows if not r["kernel_thread"]]
    bad, sizes = [], []
    for name, fmt in VIEWS:
        extra = [a for p in pids for a in ("--pid", p)] if name == "vmas" else []
        a = view(pagescope, elf_dump, elf, name, fmt, extra)
        b = view(pagescope, copy_dump, copy, name, fmt, extra)
        if a != b:
            bad.append("%s differs (exit %d/%d, %d/%d bytes, %s)" % (
                name, a[0], b[0], len(a[1]), len(b[1]),
                (b[2] or a[2]).decode(errors="replace").strip()[:200]))
        elif a[0] != 0:
            sizes.append("%s: exit %d on both (%s)" % (
                name, a[0], a[2].decode(errors="replace").strip()[:120]))
        else:
            sizes.append("%s %d bytes %s" % (name, len(a[1]), hashlib.md5(a[1]).hexdigest()[:8]))
    print(("fail " + "; ".join(bad) + " | " if bad else "pass ") + ", ".join(sizes))


if __name__ == "__main__":
    main()
