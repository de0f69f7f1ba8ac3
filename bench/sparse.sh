#!/usr/bin/env bash
# Sparse-mapping snapshot benchmark: one process with a large reserved,
# mostly untouched mapping (pagetest's buffer in the middle of a
# MAP_NORESERVE reservation, as a sanitizer's shadow or a heap reserved
# at -Xmx is), snapshotted by pid, with smem's table of the same process
# beside it. Where the kernel has PAGEMAP_SCAN (6.7+), pagescope reads
# pagemap only where the page tables hold something; without it, the
# whole VMA (and the snapshot says so in a note). Then the same for a
# program built with AddressSanitizer (bench/asan_hold.c, gcc
# -fsanitize=address), whose shadow is terabytes of such mappings.
#
#   bench/sparse.sh [RESERVE] [SIZE]      (default 8T 256K)
set -euo pipefail
cd "$(dirname "$0")/.."
RESERVE=${1:-8T}
SIZE=${2:-256K}
RUNS=${RUNS:-15}
. bench/common.sh
need hyperfine smem python3 gcc
gcc -O1 -fsanitize=address -o "$WORK/asan_hold" bench/asan_hold.c

"$BIN/pagetest" --size "$SIZE" --reserve "$RESERVE" --op write --hold > "$WORK/pt" &
PIDS+=($!)
until grep -q '"done"' "$WORK/pt" 2>/dev/null; do sleep 0.05; done
PID=${PIDS[0]}
SNAP=$WORK/sparse.snap
hyperfine --warmup 1 --runs "$RUNS" --export-json "$WORK/sparse.json" \
    -n pagescope "$BIN/pagescope snapshot -q --pid $PID -o $SNAP" \
    -n smem "smem -P '^$BIN/pagetest' -c 'pid name rss pss uss swap' > /dev/null" >&2
"$BIN/pagescope" snapshot -q --pid "$PID" -o "$SNAP"
NOTES=$("$BIN/pagescope" report total --input "$SNAP" --format json)

"$WORK/asan_hold" 64 > "$WORK/asan" &
PIDS+=($!)
until grep -q ready "$WORK/asan" 2>/dev/null; do sleep 0.05; done
APID=${PIDS[1]}
hyperfine --warmup 1 --runs "$RUNS" --export-json "$WORK/asan.json" \
    -n pagescope "$BIN/pagescope snapshot -q --pid $APID -o $SNAP" \
    -n smem "smem -P '^$WORK/asan_hold' -c 'pid name rss pss uss swap' > /dev/null" >&2
"$BIN/pagescope" snapshot -q --pid "$APID" -o "$SNAP"
ANOTES=$("$BIN/pagescope" report total --input "$SNAP" --format json)

python3 - "$WORK" "$NOTES" "$ANOTES" "$RESERVE" "$SIZE" "$(uname -r)" <<'PY'
import json, sys
work, total, atotal, reserve, size, kernel = sys.argv[1:]
for name, runs, total in [
    (f"pagetest --size {size} --reserve {reserve}", "sparse", total),
    ("asan_hold 64 (AddressSanitizer, 64 MiB written)", "asan", atotal),
]:
    r = {x["command"]: x for x in json.load(open(f"{work}/{runs}.json"))["results"]}
    p, s = r["pagescope"]["median"], r["smem"]["median"]
    total = json.loads(total)
    print(f"workload: {name} (kernel {kernel})")
    print(f"  pagescope snapshot --pid  median {p*1000:8.1f} ms   ({total['user_pages']} pages)")
    print(f"  smem table of it          median {s*1000:8.1f} ms")
    print(f"  smem/pagescope            {s/p:.2f}")
    for n in total["notes"]:
        print(f"  note: {n}")
PY
