#!/usr/bin/env python3
"""How long a walk of a process's page tables can stall that process's
own memory-map changes: a child process maps SIZE of anonymous memory in
one mapping and writes every page, then maps, writes and unmaps one page
over and over, timing each round. mmap and munmap take the memory-map lock for
writing, which a walk holds for reading; page faults take a per-VMA lock
on recent kernels and are not stalled. Each action lasts DURATION seconds:

    nothing            nothing reads the child
    smaps_rollup       this script reads its smaps_rollup every PERIOD s
                       (timing the read)
    pagescope-rollup   `pagescope serve --interval PERIOD --pagemap-above 0`
                       (every process's smaps_rollup, as before pagemap
                       reading)
    pagescope          `pagescope serve --interval PERIOD` (its default:
                       a process above 256 MiB is read from its pagemap,
                       paced)
    process-exporter   prometheus-process-exporter with -gather-smaps,
                       scraped every PERIOD s

The child mapping and unmapping is walked at every collection of
`pagescope serve` (its counters move). Prints, per action, the median and
longest of the child's longest mmap+munmap pair per 1000, and the
longest walk where the script times it. Needs root.

    bench/walk_stall.py [SIZE_MIB ...]        (default 256 1024 4096)

Environment: DURATION (s per action, default 20), PERIOD (s, default 1),
ACTIONS (default all five, in the order above), PAGESCOPE (the binary,
default target/release/pagescope).
"""
import mmap
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

DURATION = float(os.environ.get("DURATION", "20"))
PERIOD = float(os.environ.get("PERIOD", "1"))
ACTIONS = os.environ.get(
    "ACTIONS", "nothing smaps_rollup pagescope-rollup pagescope process-exporter"
).split()
PAGESCOPE = os.environ.get(
    "PAGESCOPE",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "pagescope"),
)


def child(size_mib, out_fd, ready_fd):
    buf = mmap.mmap(-1, size_mib << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    page = mmap.PAGESIZE
    for off in range(0, len(buf), page):
        buf[off] = 1
    os.write(ready_fd, b"r")
    times = []
    end = time.monotonic() + len(ACTIONS) * (DURATION + 5) + 5
    while time.monotonic() < end:
        t = time.perf_counter_ns()
        m = mmap.mmap(-1, page)
        m[0] = 1  # a fault: the counters pagescope serve watches move
        m.close()
        times.append(time.perf_counter_ns() - t)
        if len(times) >= 1000:
            os.write(out_fd, ("%d %d\n" % (time.monotonic_ns(), max(times))).encode())
            times.clear()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
        return r.read().decode()


def start_server(action):
    """Starts the collector of `action` (None if it has none) and waits
    until it answers: (process, port)."""
    port = free_port()
    listen = f"127.0.0.1:{port}"
    interval = f"{int(PERIOD * 1000)}ms"
    if action == "pagescope-rollup":
        cmd = [PAGESCOPE, "serve", "--listen", listen, "--interval", interval, "--budget", "100",
               "--pagemap-above", "0"]
    elif action == "pagescope":
        cmd = [PAGESCOPE, "serve", "--listen", listen, "--interval", interval, "--budget", "100"]
    elif action == "process-exporter":
        if not shutil.which("prometheus-process-exporter"):
            sys.exit("walk_stall: prometheus-process-exporter is missing (apt-get install it)")
        conf = f"/tmp/walk_stall.{os.getpid()}.yml"
        with open(conf, "w") as f:
            f.write('process_names:\n  - name: "{{.Comm}}"\n    cmdline:\n      - \'.+\'\n')
        cmd = ["prometheus-process-exporter", "-config.path", conf, "-gather-smaps=true",
               "-threads=false", "-web.listen-address", listen]
    else:
        return None
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            scrape(port)
            break
        except OSError:
            time.sleep(0.05)
    if action == "process-exporter":
        os.unlink(conf)
    return proc, port


def measure(size_mib):
    # A file, not a pipe: nothing reads it before the end, and a full
    # pipe would stop the child.
    out = tempfile.TemporaryFile()
    rr, rw = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rr)
        child(size_mib, out.fileno(), rw)
    os.close(rw)
    os.read(rr, 1)
    phases = {}
    walks = []
    for action in ACTIONS:
        server = start_server(action)
        start = time.monotonic_ns()
        end = time.monotonic() + DURATION
        while time.monotonic() < end:
            if action == "smaps_rollup":
                t = time.perf_counter_ns()
                with open(f"/proc/{pid}/smaps_rollup") as f:
                    f.read()
                walks.append(time.perf_counter_ns() - t)
            elif action == "process-exporter":
                scrape(server[1])
            time.sleep(PERIOD)
        phases[action] = (start, time.monotonic_ns())
        if server:
            if action.startswith("pagescope"):
                text = scrape(server[1])
                paced = [l for l in text.splitlines()
                         if l.startswith(("pagescope_pagemap_processes ", "pagescope_walked_processes{"))]
                print(f"  {size_mib} MiB, {action}: {' '.join(paced) or 'no pagemap count'}", file=sys.stderr)
            server[0].terminate()
            server[0].wait()
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    out.seek(0)
    data = out.read()
    out.close()
    batches = [tuple(map(int, line.split())) for line in data.decode().splitlines()]
    rows = []
    for action, (s, e) in phases.items():
        worst = [m / 1e6 for (at, m) in batches if s <= at <= e]
        rows.append((action, statistics.median(worst), max(worst)))
    return rows, max(walks) / 1e6 if walks else None


def main():
    sizes = [int(s) for s in sys.argv[1:]] or [256, 1024, 4096]
    print("| mapping | action | longest mmap+write+munmap per 1000: median | longest | longest walk |")
    print("|---|---|---|---|---|")
    for size in sizes:
        rows, walk = measure(size)
        for action, med, longest in rows:
            w = f"{walk:.1f} ms" if action == "smaps_rollup" and walk else "-"
            print(f"| {size} MiB | {action} | {med:.2f} ms | {longest:.2f} ms | {w} |", flush=True)


if __name__ == "__main__":
    main()
