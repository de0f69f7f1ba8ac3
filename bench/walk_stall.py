#!/usr/bin/env python3
"""How long a walk of a process's page tables (reading its
/proc/PID/smaps_rollup, what `pagescope serve` and `top` do) can stall that
process's own memory-map changes, measured without pagescope: a child
process maps SIZE of anonymous memory in one mapping and writes every page,
then maps and unmaps one page over and over, timing each call; every PERIOD
seconds this script either does nothing, or reads the child's smaps_rollup
(timing the read). mmap and munmap take the memory-map lock for writing,
which a walk holds for reading; page faults take a per-VMA lock on recent
kernels and are not stalled. Prints the median and longest mmap+munmap
pair per action, and the longest walk. Needs root (or the same user).

    bench/walk_stall.py [SIZE_MIB ...]        (default 256 1024 4096)

Environment: DURATION (s per action, default 20), PERIOD (s, default 1).
"""
import mmap
import os
import statistics
import sys
import time

DURATION = float(os.environ.get("DURATION", "20"))
PERIOD = float(os.environ.get("PERIOD", "1"))


def child(size_mib, out_fd, ready_fd):
    buf = mmap.mmap(-1, size_mib << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    page = mmap.PAGESIZE
    for off in range(0, len(buf), page):
        buf[off] = 1
    os.write(ready_fd, b"r")
    times = []
    end = time.monotonic() + 2 * DURATION + 5
    while time.monotonic() < end:
        t = time.perf_counter_ns()
        m = mmap.mmap(-1, page)
        m.close()
        times.append(time.perf_counter_ns() - t)
        if len(times) >= 1000:
            os.write(out_fd, ("%d %d\n" % (time.monotonic_ns(), max(times))).encode())
            times.clear()
    os._exit(0)


def measure(size_mib):
    r, w = os.pipe()
    rr, rw = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(rr)
        child(size_mib, w, rw)
    os.close(w)
    os.close(rw)
    os.read(rr, 1)
    phases = {}
    walks = []
    for action in ["nothing", "smaps_rollup"]:
        start = time.monotonic_ns()
        end = time.monotonic() + DURATION
        while time.monotonic() < end:
            if action == "smaps_rollup":
                t = time.perf_counter_ns()
                with open(f"/proc/{pid}/smaps_rollup") as f:
                    f.read()
                walks.append(time.perf_counter_ns() - t)
            time.sleep(PERIOD)
        phases[action] = (start, time.monotonic_ns())
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    data = b""
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(r)
    batches = [tuple(map(int, line.split())) for line in data.decode().splitlines()]
    rows = []
    for action, (s, e) in phases.items():
        worst = [m / 1e6 for (at, m) in batches if s <= at <= e]
        rows.append((action, statistics.median(worst), max(worst)))
    return rows, max(walks) / 1e6


def main():
    sizes = [int(s) for s in sys.argv[1:]] or [256, 1024, 4096]
    print("| mapping | action | longest mmap+munmap per 1000: median | longest | longest walk |")
    print("|---|---|---|---|---|")
    for size in sizes:
        rows, walk = measure(size)
        for action, med, longest in rows:
            w = f"{walk:.1f} ms" if action == "smaps_rollup" else "-"
            print(f"| {size} MiB | {action} | {med:.2f} ms | {longest:.2f} ms | {w} |", flush=True)


if __name__ == "__main__":
    main()
