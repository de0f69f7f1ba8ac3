#!/bin/bash
# `pagescope analyze TRACE mrc`: references per second of the exact LRU
# curve (--lru-only), of LRU with FIFO and CLOCK, and of SHARDS samples
# (--sample 0.01, 0.001), and the samples' mean absolute error against
# the exact LRU curve (over the report's sizes and over libCacheSim's 100
# evenly spaced ones).
#
# The traces are real programs traced with `pagescope trace`:
#   - python3 sorting 2 000 000 random floats, pool 8 MiB: about 12 M
#     references over 27 000 pages, and about 10 minutes to trace (set
#     BIG=FILE to reuse a trace of it);
#   - the four workloads of bench/trace.sh, pool 2 MiB (49 000 to 2.3 M
#     references).
#
#   sudo bench/mrc.sh            RUNS=3 (hyperfine runs per command)
#   sudo ONLY=recorded bench/mrc.sh   the curves from recordings alone
#
# Curves from recordings (`analyze REC mrc`): each workload above, and
# bench/trace.sh's python3 sort of 500 000 floats and `xz -T2` (traced
# with an 8 MiB pool), is recorded with the fault backend (INTERVAL,
# default 10ms), and the estimate is set against the exact curve of its
# trace (`--against`): the mean absolute error and the largest, over the
# sizes at and above the tracer's pool.
#
# Needs root (pagescope trace), hyperfine, xz, python3.
set -euo pipefail
RUNS=${RUNS:-3}
. bench/common.sh
need hyperfine xz
cargo build --release -q -p pagescope-core --example mrc_error
PY=$(python3 -c 'import sys; print(sys.executable)')
awk 'BEGIN { srand(7); for (i = 0; i < 200000; i++) printf "%08x %d\n", int(rand() * 4294967295), i }' > "$WORK/lines"
head -c 1000000 "$WORK/lines" > "$WORK/1m"
cat > "$WORK/hash.py" <<'PY'
import hashlib, random, sys
r = random.Random(7)
blobs = [r.randbytes(4096) for _ in range(int(sys.argv[1]))]
h = hashlib.sha256()
for b in sorted(blobs):
    h.update(b)
print(h.hexdigest(), sum(map(len, blobs)))
PY

trace() { # NAME POOL COMMAND...
    local name=$1 pool=$2
    shift 2
    echo "tracing $name (pool $pool)" >&2
    "$BIN/pagescope" trace --pool "$pool" -o "$WORK/$name.trace" -- "$@" > /dev/null
}
cat > "$WORK/floats.py" <<'PY'
import random, sys
r = random.Random(1)
a = [r.random() for _ in range(int(sys.argv[1]))]
a.sort()
print(sum(a[:10]), a[len(a) // 2])
PY
INTERVAL=${INTERVAL:-10ms}

if [ "${ONLY:-}" = recorded ]; then
    :
elif [ -n "${BIG:-}" ]; then
    cp "$BIG" "$WORK/pysort.trace"
else
    trace pysort 8M "$PY" -c 'import random; random.seed(1); a = [random.random() for _ in range(2000000)]; a.sort()'
fi
trace pagetest 2M "$BIN/pagetest" --size 64M --mode anon --op write --iterations 3 --sleep 0
trace sort 2M sort -S 64M "$WORK/lines"
trace xz 2M xz -T1 -1 -c "$WORK/1m"
trace pyhash 2M "$PY" "$WORK/hash.py" 2048

trace pyfloats 8M "$PY" "$WORK/floats.py" 500000
trace xz2 8M xz -T2 --block-size=262144 -1 -c "$WORK/lines"

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
echo "== curves from recordings (fault backend, --interval $INTERVAL) against the traces"
against() { # NAME COMMAND...
    local name=$1
    shift
    "$BIN/pagescope" record -q --backend fault --interval "$INTERVAL" -o "$WORK/$name.rec" -- "$@" > /dev/null
    "$BIN/pagescope" analyze "$WORK/$name.rec" mrc --against "$WORK/$name.trace" --format json \
        > "$WORK/$name.json" 2> "$WORK/$name.err" || { cat "$WORK/$name.err" >&2; exit 1; }
    python3 - "$name" "$WORK/$name.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[2]))
print(f"{sys.argv[1]:<9} {d['intervals']:>6} intervals {d['references']:>9} references "
      f"{d['distinct_pages']:>7} pages: mean absolute error {d['trace_mae']:.4f}, "
      f"largest {d['trace_largest_error']:.4f}")
PY
}
against pagetest "$BIN/pagetest" --size 64M --mode anon --op write --iterations 3 --sleep 0
against sort sort -S 64M "$WORK/lines"
against xz xz -T1 -1 -c "$WORK/1m"
against pyhash "$PY" "$WORK/hash.py" 2048
against pyfloats "$PY" "$WORK/floats.py" 500000
against xz2 xz -T2 --block-size=262144 -1 -c "$WORK/lines"
[ "${ONLY:-}" = recorded ] && exit 0

for t in pysort pagetest sort xz pyhash; do
    f="$WORK/$t.trace"
    refs=$("$BIN/pagescope" analyze "$f" refs --format json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["references"])')
    echo "== $t: $refs references"
    "$BIN/examples/mrc_error" "$f" 0.01 0.001
    [ "$t" = pysort ] || continue
    hyperfine -N -w 1 -r "$RUNS" --export-json "$WORK/h.json" \
        "$BIN/pagescope analyze $f mrc --format json --lru-only" \
        "$BIN/pagescope analyze $f mrc --format json" \
        "$BIN/pagescope analyze $f mrc --format json --sample 0.01" \
        "$BIN/pagescope analyze $f mrc --format json --sample 0.001" > /dev/null 2>&1
    python3 - "$WORK/h.json" "$refs" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["results"]
refs = int(sys.argv[2])
for r in runs:
    what = r["command"].split(" mrc --format json")[1].strip() or "LRU, FIFO and CLOCK"
    print(f"{what:<24} median {r['median']:.3f} s wall, user {r['user']:.3f} s: "
          f"{refs / r['median'] / 1e6:.1f} M refs/s wall, {refs / r['user'] / 1e6:.1f} M refs/s of user CPU")
PY
done
