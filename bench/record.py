"""The configurations of bench/record.sh, and a table of their results.

Each run starts one pagetest writing its buffer over and over, lets it
fault the buffer in, then measures its throughput (pages written per
second, from its own iteration times) for WINDOW seconds unrecorded and
then for WINDOW seconds while `pagescope record --pid` records it (or
`--system` records the whole machine, pagetest among it): the slowdown is
the ratio of the two, in the same process. The recorder's CPU
is the sum of the recording's recorder_cpu_ns over its duration, in % of
one core.
"""
import json
import os
import statistics
import subprocess
import sys
import time

BIN, WORK, SIZE, WINDOW, RUNS = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])

CONFIGS = [
    ("refs 100ms", ["--backend", "refs", "--interval", "100ms"]),
    ("refs 1s", ["--backend", "refs", "--interval", "1s"]),
    ("refs 100ms --no-freeze", ["--backend", "refs", "--interval", "100ms", "--no-freeze"]),
    ("refs 1s --no-freeze", ["--backend", "refs", "--interval", "1s", "--no-freeze"]),
    # The whole machine (every process's smaps each second), pagetest among them.
    ("refs 1s --system", ["--backend", "refs", "--interval", "1s", "--system"]),
    ("fault 100ms", ["--backend", "fault", "--interval", "100ms"]),
    ("fault 1s", ["--backend", "fault", "--interval", "1s"]),
    ("fault 1s --sample 0.1", ["--backend", "fault", "--interval", "1s", "--sample", "0.1"]),
    ("fault 1s --sample 0.01", ["--backend", "fault", "--interval", "1s", "--sample", "0.01"]),
    ("fault 1s --sample 0.001", ["--backend", "fault", "--interval", "1s", "--sample", "0.001"]),
]
# BACKENDS="refs fault" (the default: what this machine has) picks them;
# CONFIG="refs 1s --system" runs that one alone.
CONFIGS = [c for c in CONFIGS if c[0].split()[0] in os.environ.get("BACKENDS", "refs fault").split()]
CONFIGS = [c for c in CONFIGS if os.environ.get("CONFIG", c[0]) == c[0]]


def throughput(its, t0, t1, pages):
    """Pages per second over the iterations wholly inside [t0, t1]. With
    fewer than two, at most one more iteration fitted in the window: that
    gives an upper bound, returned negated so the table can say so."""
    inside = [i for i in its if i["start_ns"] >= t0 and i["end_ns"] <= t1]
    if len(inside) < 2:
        return -pages * (len(inside) + 1) / ((t1 - t0) / 1e9)
    return pages * len(inside) / ((inside[-1]["end_ns"] - inside[0]["start_ns"]) / 1e9)


def fmt_rate(x):
    return f"< {-x / 1e6:.2f}" if x < 0 else f"{x / 1e6:.2f}"


def fmt_ratio(base, rec):
    return f"> {base / -rec:.1f}x" if rec < 0 else f"{base / rec:.2f}x"


def run(opts):
    pt = subprocess.Popen([f"{BIN}/pagetest", "--size", SIZE, "--mode", "anon", "--op", "write",
                           "--iterations", "100000000", "--sleep", "0"],
                          stdout=subprocess.PIPE, text=True)
    try:
        ready = json.loads(pt.stdout.readline())
        pages = ready["pages"]
        its = []

        def read_until(deadline_ns, proc=None):
            while time.monotonic_ns() < deadline_ns or (proc is not None and proc.poll() is None):
                line = json.loads(pt.stdout.readline())
                if line["event"] == "iteration":
                    its.append(line)
                if proc is not None and proc.poll() is not None:
                    break

        # The first pass faults the buffer in: the windows start after it.
        while json.loads(pt.stdout.readline())["event"] != "iteration":
            pass
        t0 = time.monotonic_ns()
        read_until(t0 + int(WINDOW * 1e9))
        t1 = time.monotonic_ns()
        rec = f"{WORK}/b.rec"
        target = [] if "--system" in opts else ["--pid", str(ready["pid"])]
        r = subprocess.Popen([f"{BIN}/pagescope", "record", "-q", "-o", rec, "--duration", f"{WINDOW}s",
                              *opts, *target])
        read_until(0, r)
        t2 = time.monotonic_ns()
        base, recorded = throughput(its, t0, t1, pages), throughput(its, t1, t2, pages)
        j = json.loads(subprocess.run([f"{BIN}/pagescope", "analyze", rec, "temporal", "-f", "json"],
                                      check=True, capture_output=True, text=True).stdout)
        rows = j["intervals"]
        cpu = sum(r["recorder_cpu_ns"] for r in rows) / max(rows[-1]["end_ns"], 1) * 100
        return base, recorded, cpu
    finally:
        pt.kill()
        pt.wait()


results = {name: [] for name, _ in CONFIGS}
for r in range(RUNS):
    for name, opts in CONFIGS:
        base, rec, cpu = run(opts)
        results[name].append((base, rec, cpu))
        print(f"round {r + 1}: {name}: {fmt_rate(base)} -> {fmt_rate(rec)} M pages/s "
              f"({fmt_ratio(abs(base), rec)}), recorder {cpu:.1f}% CPU", file=sys.stderr)

print(f"pagetest --size {SIZE} --op write --sleep 0 (one word per page, every page, over and over), "
      f"{WINDOW:.0f} s unrecorded then {WINDOW:.0f} s recorded, {RUNS} runs (medians):\n")
print("| recorder | M pages/s unrecorded | M pages/s recorded | slowdown | recorder CPU (% of one core) |")
print("|---|---|---|---|---|")
for name, _ in CONFIGS:
    rs = results[name]
    # A bound (negative) sorts below every measured rate: the median of
    # rates is taken on what was measured where there is any.
    base = statistics.median(x[0] for x in rs if x[0] > 0) if any(x[0] > 0 for x in rs) else rs[0][0]
    rec = statistics.median_low(x[1] for x in rs)
    print(f"| {name} | {fmt_rate(base)} | {fmt_rate(rec)} | {fmt_ratio(abs(base), rec)} | "
          f"{statistics.median(x[2] for x in rs):.1f} |")
