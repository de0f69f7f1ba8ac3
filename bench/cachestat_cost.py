#!/usr/bin/env python3
"""What counting a shmem file's pages in swap with cachestat(2) costs: a
memfd of each size (GiB) written whole, then cachestat over all of it,
RUNS times; prints the shortest and longest call. This is the walk
`pagescope serve` makes of each shared memory file a process read from
its pagemap maps, while the machine has pages in swap (docs/design.md,
"Serving Prometheus"). Needs Linux 6.5 (cachestat) and x86_64 or another
architecture where its number is 451."""

import ctypes
import mmap
import os
import sys
import time

RUNS = int(os.environ.get("RUNS", "5"))
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recent")]


for gib in [int(a) for a in sys.argv[1:]] or [1, 4]:
    n = gib << 30
    fd = os.memfd_create("cachestat-cost")
    os.ftruncate(fd, n)
    m = mmap.mmap(fd, n, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    chunk = b"\1" * (1 << 20)
    for off in range(0, n, len(chunk)):
        m[off:off + len(chunk)] = chunk
    times = []
    for _ in range(RUNS):
        rng, st = Range(0, n), Stat()
        t = time.perf_counter()
        if libc.syscall(451, fd, ctypes.byref(rng), ctypes.byref(st), 0) != 0:
            sys.exit(f"cachestat: errno {ctypes.get_errno()}")
        times.append(time.perf_counter() - t)
    print(f"{gib} GiB memfd, {st.cache} pages cached, {st.evicted} in swap: "
          f"cachestat {min(times) * 1e3:.1f} ms shortest, {max(times) * 1e3:.1f} ms longest")
    m.close()
    os.close(fd)
