"""Runs the configurations of bench/record.sh and prints a table.

Throughput is pages written per second over pagetest's iterations 1..N
(iteration 0 faults the buffer in); slowdown is the ratio to the run
without a recorder in the same round. Recorder CPU is the sum of the
recording's recorder_cpu_ns over its duration, in % of one core.
"""
import json
import statistics
import subprocess
import sys

BIN, WORK, SIZE, ITER, RUNS = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])


CONFIGS = [
    ("none", None),
    ("refs 100ms", ["--backend", "refs", "--interval", "100ms"]),
    ("refs 1s", ["--backend", "refs", "--interval", "1s"]),
    ("refs 100ms --no-freeze", ["--backend", "refs", "--interval", "100ms", "--no-freeze"]),
    ("refs 1s --no-freeze", ["--backend", "refs", "--interval", "1s", "--no-freeze"]),
]


def run(opts):
    pt = [f"{BIN}/pagetest", "--size", SIZE, "--mode", "anon", "--op", "write",
          "--iterations", ITER, "--sleep", "0"]
    rec = f"{WORK}/b.rec"
    cmd = pt if opts is None else [f"{BIN}/pagescope", "record", "-q", "-o", rec, *opts, "--", *pt]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    lines = [json.loads(l) for l in out.splitlines()]
    pages = lines[0]["pages"]
    its = [l for l in lines if l["event"] == "iteration"][1:]
    secs = (its[-1]["end_ns"] - its[0]["start_ns"]) / 1e9
    thr = pages * len(its) / secs
    cpu = None
    if opts is not None:
        j = json.loads(subprocess.run([f"{BIN}/pagescope", "analyze", rec, "temporal", "-f", "json"],
                                      check=True, capture_output=True, text=True).stdout)
        rows = j["intervals"]
        cpu = sum(r["recorder_cpu_ns"] for r in rows) / max(rows[-1]["end_ns"], 1) * 100
    return thr, cpu


results = {name: [] for name, _ in CONFIGS}
for r in range(RUNS):
    base = None
    for name, opts in CONFIGS:
        thr, cpu = run(opts)
        if base is None:
            base = thr
        results[name].append((thr, thr / base, cpu))
        print(f"round {r + 1}: {name}: {thr / 1e6:.2f} M pages/s, "
              f"{'' if cpu is None else f'recorder {cpu:.1f}% CPU, '}{base / thr:.3f}x", file=sys.stderr)

print(f"pagetest --size {SIZE} --op write --iterations {ITER} --sleep 0, {RUNS} rounds (medians):\n")
print("| recorder | M pages/s | slowdown | recorder CPU (% of one core) |")
print("|---|---|---|---|")
for name, _ in CONFIGS:
    rs = results[name]
    thr = statistics.median(x[0] for x in rs)
    slow = statistics.median(1 / x[1] for x in rs)
    cpus = [x[2] for x in rs if x[2] is not None]
    cpu = f"{statistics.median(cpus):.1f}" if cpus else "-"
    print(f"| {name} | {thr / 1e6:.2f} | {slow:.3f}x | {cpu} |")
