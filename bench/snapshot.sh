#!/usr/bin/env bash
# Snapshot benchmark: about 200 processes holding about 8 GiB in all.
#
# Times, in one run and on the same processes:
#   (a) pagescope snapshot of everything
#   (b) floor: only the pagemap and kpageflags/kpagecount reads (bench/floor)
#   (c) smem's per-process table against pagescope report processes (live)
# and reports a/b, smem/pagescope, pages per second, bytes per page in the
# file, and pagescope's peak RSS. Needs root, hyperfine, smem.
#
#   bench/snapshot.sh [PROCESSES] [SIZE_PER_PROCESS]     (default 200 40M)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
SIZE=${2:-40M}
RUNS=${RUNS:-15}
. bench/common.sh
need hyperfine smem /usr/bin/time python3
start_pagetests "$N" "$SIZE"

SNAP=$WORK/bench.snap
# Snapshot against the floor, in alternation (A B A B ...), so that each
# ratio compares runs made under the same conditions.
bench/paired.py --runs "$RUNS" --json "$WORK/pair.json" "$BIN/pagescope snapshot -q -o $SNAP" "$BIN/floor"
bench/paired.py --runs "$RUNS" --json "$WORK/pair1.json" "$BIN/pagescope snapshot -q --jobs 1 -o $SNAP" "$BIN/floor"
hyperfine --warmup 1 --runs "$RUNS" --export-json "$WORK/table.json" \
    -n pagescope "$BIN/pagescope report processes > /dev/null" \
    -n smem "smem -c 'pid name rss pss uss swap' > /dev/null" >&2

/usr/bin/time -f '%M' -o "$WORK/rss" "$BIN/pagescope" snapshot -q -o "$SNAP"
TOTAL_JSON=$("$BIN/pagescope" report total --input "$SNAP" --format json 2>/dev/null)
FLOOR_OUT=$("$BIN/floor")

python3 - "$WORK" "$SNAP" "$TOTAL_JSON" "$FLOOR_OUT" "$N" "$SIZE" <<'PY'
import json, os, sys
work, snap, total, floor, n, size = sys.argv[1:]
pair = json.load(open(f"{work}/pair.json"))
pair1 = json.load(open(f"{work}/pair1.json"))
tabj = {r["command"]: r for r in json.load(open(f"{work}/table.json"))["results"]}
a, b, ab = pair["a_median"], pair["b_median"], pair["ratio_median"]
a1, ab1 = pair1["a_median"], pair1["ratio_median"]
cpus = os.cpu_count()
p, s = tabj["pagescope"]["median"], tabj["smem"]["median"]
total = json.loads(total)
pages = total["rss_sum_pages"]
size_b = os.path.getsize(snap)
peak_kb = int(open(f"{work}/rss").read().split()[-1])
print(f"workload: {n} x pagetest --size {size} ({floor})")
print(f"(a) pagescope snapshot     median {a*1000:8.1f} ms   ({pages} pages, {pages/a/1e6:.2f} M pages/s, {cpus} threads)")
print(f"    same, --jobs 1         median {a1*1000:8.1f} ms")
print(f"(b) floor (reads only)     median {b*1000:8.1f} ms   (one thread)")
print(f"    a/b (median of paired) {ab:.2f}   (goal <= 1.25; pairs {pair['ratio_min']:.2f}-{pair['ratio_max']:.2f}); with --jobs 1: {ab1:.2f}")
print(f"(c) smem table             median {s*1000:8.1f} ms")
print(f"    pagescope report processes (live) median {p*1000:8.1f} ms")
print(f"    smem/pagescope         {s/p:.2f}   (goal >= 3)")
print(f"file size                  {size_b} bytes, {size_b/pages:.3f} bytes per page")
print(f"pagescope snapshot peak RSS {peak_kb/1024:.1f} MiB")
PY
