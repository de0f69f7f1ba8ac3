#!/usr/bin/env python3
"""What clearing a process's referenced bits costs that process, measured
without pagescope: a pagetest writes one word to every page of its buffer
over and over (10 ms apart), and every PERIOD seconds this script either
does nothing, reads its /proc/PID/smaps_rollup (the walk `serve` makes),
or writes `1` to its /proc/PID/clear_refs (what `serve --backend refs`
adds). pagetest's own iteration times show the stall: after a clear, its
next pass refills its TLB (the kernel flushes it) and sets every accessed
bit again. Needs root and a release build (cargo build --release).

    sudo bench/clear_refs_stall.py [SIZE ...]     (default 128M 256M 1G 4G)

Environment: DURATION (s per action, default 30), PERIOD (s, default 5).
Prints, per size and action, the median and longest iteration (ms).
"""
import json
import os
import select
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PAGETEST = os.path.join(ROOT, "target", "release", "pagetest")
DURATION = float(os.environ.get("DURATION", "30"))
PERIOD = float(os.environ.get("PERIOD", "5"))


def measure(size, action):
    p = subprocess.Popen(
        [PAGETEST, "--size", size, "--mode", "anon", "--op", "write",
         "--iterations", "100000000", "--sleep", "10ms"],
        stdout=subprocess.PIPE, text=True)
    times = []

    def collect(until):
        while time.monotonic() < until:
            ready, _, _ = select.select([p.stdout], [], [], 0.1)
            if ready:
                line = p.stdout.readline()
                if '"iteration"' in line:
                    e = json.loads(line)
                    times.append((e["end_ns"] - e["start_ns"]) / 1e6)
    try:
        # The first pass faults the buffer in: wait for a second one.
        while len(times) < 2:
            collect(time.monotonic() + 1)
        times.clear()
        end = time.monotonic() + DURATION
        while time.monotonic() < end:
            if action == "clear_refs":
                with open(f"/proc/{p.pid}/clear_refs", "w") as f:
                    f.write("1")
            elif action == "smaps_rollup":
                with open(f"/proc/{p.pid}/smaps_rollup") as f:
                    f.read()
            collect(time.monotonic() + PERIOD)
    finally:
        p.kill()
        p.wait()
    return statistics.median(times), max(times), len(times)


def main():
    sizes = sys.argv[1:] or ["128M", "256M", "1G", "4G"]
    print("| size | action | iterations | median | longest |")
    print("|---|---|---|---|---|")
    for size in sizes:
        for action in ["nothing", "smaps_rollup", "clear_refs"]:
            med, longest, n = measure(size, action)
            print(f"| {size} | {action} | {n} | {med:.1f} ms | {longest:.1f} ms |",
                  flush=True)


if __name__ == "__main__":
    main()
