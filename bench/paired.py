#!/usr/bin/env python3
"""Times two commands in alternation (A B A B ...) and prints the median of
each and the median of the per-pair ratios A/B.

Pairing keeps the ratio meaningful on a machine whose speed drifts (a VM
with noisy neighbours): both commands of a pair see the same conditions.

    paired.py [--runs N] [--warmup W] --json OUT -- 'COMMAND A' 'COMMAND B'
"""
import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time


def run(cmd):
    t0 = time.perf_counter()
    subprocess.run(shlex.split(cmd), check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", required=True)
    ap.add_argument("a")
    ap.add_argument("b")
    args = ap.parse_args()
    for _ in range(args.warmup):
        run(args.a)
        run(args.b)
    ta, tb = [], []
    for _ in range(args.runs):
        ta.append(run(args.a))
        tb.append(run(args.b))
    ratios = [x / y for x, y in zip(ta, tb)]
    out = {
        "a": args.a,
        "b": args.b,
        "a_median": statistics.median(ta),
        "b_median": statistics.median(tb),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "a_times": ta,
        "b_times": tb,
    }
    json.dump(out, open(args.json, "w"), indent=1)
    print(
        f"A {out['a_median']*1000:.1f} ms  B {out['b_median']*1000:.1f} ms  "
        f"A/B median {out['ratio_median']:.2f} (min {out['ratio_min']:.2f}, max {out['ratio_max']:.2f})",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
