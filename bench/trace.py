"""The workloads of bench/trace.sh, timed untraced, traced with each pool
and under valgrind's lackey, and a table of the results.

Each workload's commands run in alternation (untraced, then each pool;
RUNS rounds) so that every ratio compares runs made under the same
conditions; the table gives median times and the ratio of the medians.
Lackey runs LACKEY_RUNS times after them (a run takes minutes). Every
run's standard output must equal the untraced one: a traced program
computes what it computes untraced, and the bench stops if one does not.
With CPU=N in the environment, pagescope traces with `--cpu N`, and the
untraced and lackey runs run on CPU N too (taskset), so that every
ratio compares runs on one CPU. TRACE_ARGS adds options to every
traced run (e.g. TRACE_ARGS=--no-idle-poll). FLOOR names the
uffd_floor program (bench/uffd_floor.c): its time per fault, times a
workload's references, is the least any userfaultfd tracer could add
(the "floor" column, for the largest pool); its time with `calls`, the
calls pagescope adds to a fault on an evicted page (read of the slot,
index entry cleared before the wake), gives the "floor + calls" column. The run ends with one `summary:` line per
pool (median slowdown, the floor's, the median ratio of pagescope's time
per reference to the floor's per fault, the largest bytes per reference).

    trace.py BIN WORK RUNS LACKEY_RUNS POOL... -- (NAME COMMAND)...
"""
import json
import os
import shlex
import statistics
import subprocess
import sys
import time


def floor(row, pool, us):
    """The slowdown if each reference cost `us`, the floor's fault."""
    return 1 + row["pools"][pool][1] * us / 1e6 / row["untraced"]


def run(argv):
    t0 = time.perf_counter()
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE).stdout
    return time.perf_counter() - t0, out


def same(name, label, want, got):
    # pagetest's lines carry times and a pid: compare its checksum.
    def key(out):
        for line in reversed(out.splitlines()):
            try:
                event = json.loads(line)
            except ValueError:
                return out
            if isinstance(event, dict) and event.get("event") == "done":
                return event["checksum"]
        return out
    if key(want) != key(got):
        sys.exit(f"bench: {name}: {label} printed something else than untraced")


def refs(bin_dir, trace):
    out = subprocess.run(
        [f"{bin_dir}/pagescope", "analyze", trace, "refs", "-f", "json"],
        check=True, stdout=subprocess.PIPE).stdout
    return json.loads(out)["references"]


def fmt_ratio(x):
    return f"{x:.1f}x" if x < 100 else f"{x:.0f}x"


def main():
    bin_dir, work, runs, lackey_runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    split = sys.argv.index("--")
    pools = sys.argv[5:split]
    rest = sys.argv[split + 1:]
    workloads = list(zip(rest[0::2], rest[1::2]))
    evict = os.environ.get("EVICT", "auto")
    cpu = os.environ.get("CPU")
    pin = ["taskset", "-c", cpu] if cpu else []
    on_cpu = ["--cpu", cpu] if cpu else []
    extra = shlex.split(os.environ.get("TRACE_ARGS", ""))
    floor_us = None
    if os.environ.get("FLOOR"):
        # As pagescope serves faults: idle CPUs held polling unless told
        # not to, and on one CPU a handler that sleeps rather than spins.
        mode = [] if "--no-idle-poll" in extra else ["idle-poll"]
        mode += ["sleep"] if cpu else []
        def per_fault(more):
            argv = pin + [os.environ["FLOOR"], "16384"] + mode + more
            return statistics.median(float(run(argv)[1]) for _ in range(5))
        floor_us = per_fault([])
        calls_us = per_fault(["calls"])
    rows = []
    for name, cmd in workloads:
        argv = shlex.split(cmd)
        traced = {
            pool: [f"{bin_dir}/pagescope", "trace", "-q", "--evict", evict, "--pool", pool,
                   "-o", f"{work}/{pool}.trace"] + on_cpu + extra + ["--"] + argv
            for pool in pools
        }
        plain, argv = argv, pin + argv
        _, want = run(argv)  # warm-up, and the output every run must print
        times = {"untraced": []} | {pool: [] for pool in pools}
        for i in range(runs):
            print(f"{name}: round {i + 1} of {runs}", file=sys.stderr)
            t, out = run(argv)
            times["untraced"].append(t)
            for pool in pools:
                t, out = run(traced[pool])
                same(name, f"traced with a {pool} pool", want, out)
                times[pool].append(t)
        lackey = []
        for i in range(lackey_runs):
            print(f"{name}: lackey run {i + 1} of {lackey_runs}", file=sys.stderr)
            t, out = run(pin + ["valgrind", "--tool=lackey", "--trace-mem=yes",
                                "--log-file=/dev/null"] + plain)
            same(name, "run under lackey", want, out)
            lackey.append(t)
        base = statistics.median(times["untraced"])
        row = {"name": name, "untraced": base, "pools": {}}
        for pool in pools:
            n = refs(bin_dir, f"{work}/{pool}.trace")
            size = os.path.getsize(f"{work}/{pool}.trace")
            row["pools"][pool] = (statistics.median(times[pool]) / base, n, size / max(n, 1))
        row["lackey"] = statistics.median(lackey) / base if lackey else None
        rows.append(row)

    head = ["workload", "untraced"] + [f"{p} pool" for p in pools] + ["lackey"]
    head += [f"lackey / {pools[-1]}"] + [f"references ({p})" for p in pools]
    if floor_us is not None:
        head += [f"floor ({pools[-1]})", f"floor + calls ({pools[-1]})"]
    head += [f"bytes/ref ({p})" for p in pools]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        cells = [r["name"], f"{r['untraced'] * 1000:.0f} ms"]
        cells += [fmt_ratio(r["pools"][p][0]) for p in pools]
        if r["lackey"] is None:
            cells += ["", ""]
        else:
            cells += [fmt_ratio(r["lackey"]), fmt_ratio(r["lackey"] / r["pools"][pools[-1]][0])]
        cells += [str(r["pools"][p][1]) for p in pools]
        if floor_us is not None:
            cells += [fmt_ratio(floor(r, pools[-1], us)) for us in (floor_us, calls_us)]
        cells += [f"{r['pools'][p][2]:.2f}" for p in pools]
        print("| " + " | ".join(cells) + " |")
    print()
    for p in pools:
        med = statistics.median(r["pools"][p][0] for r in rows)
        print(f"median slowdown with a {p} pool: {med:.2f}x", end="")
        faster = [r["lackey"] / r["pools"][p][0] for r in rows if r["lackey"]]
        if faster:
            print(f"; lackey takes {min(faster):.1f} to {max(faster):.0f} times as long", end="")
        print()
    if floor_us is not None:
        for what, us in (("userfaultfd floor", floor_us), ("floor + calls", calls_us)):
            med = statistics.median(floor(r, pools[-1], us) for r in rows)
            print(f"{what}: {us:.2f} us per fault; "
                  f"median slowdown at that cost with a {pools[-1]} pool: {med:.2f}x")
    # One line per pool: the median slowdown, the floor's (its time per
    # fault times each workload's references), the median over workloads
    # of pagescope's time per reference over the floor's per fault, and
    # the largest bytes per reference of any workload.
    for p in pools:
        med = statistics.median(r["pools"][p][0] for r in rows)
        worst_bytes = max(r["pools"][p][2] for r in rows)
        line = f"summary: pool {p} median_slowdown={med:.2f}"
        if floor_us is not None:
            fl = statistics.median(floor(r, p, floor_us) for r in rows)
            per_ref = [(r["pools"][p][0] - 1) * r["untraced"] / max(r["pools"][p][1], 1) * 1e6
                       for r in rows]
            ratio = statistics.median(us / floor_us for us in per_ref)
            line += f" floor={fl:.2f} ratio={ratio:.2f}"
        print(f"{line} bytes_per_ref={worst_bytes:.2f}")


main()
