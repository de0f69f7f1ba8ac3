#!/bin/bash
# `pagescope analyze TRACE mrc`: references per second of the exact LRU
# curve (--lru-only), of LRU with FIFO and CLOCK, and of SHARDS samples
# (--sample 0.01, 0.001), and the samples' mean absolute error against
# the exact LRU curve.
#
# The traces are real programs traced with `pagescope trace`:
#   - python3 sorting 2 000 000 random floats, pool 8 MiB: about 12 M
#     references over 27 000 pages, and about 10 minutes to trace (set
#     BIG=FILE to reuse a trace of it);
#   - the four workloads of bench/trace.sh, pool 2 MiB (49 000 to 2.3 M
#     references).
#
#   sudo bench/mrc.sh            RUNS=3 (hyperfine runs per command)
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
if [ -n "${BIG:-}" ]; then
    cp "$BIG" "$WORK/pysort.trace"
else
    trace pysort 8M "$PY" -c 'import random; random.seed(1); a = [random.random() for _ in range(2000000)]; a.sort()'
fi
trace pagetest 2M "$BIN/pagetest" --size 64M --mode anon --op write --iterations 3 --sleep 0
trace sort 2M sort -S 64M "$WORK/lines"
trace xz 2M xz -T1 -1 -c "$WORK/1m"
trace pyhash 2M "$PY" "$WORK/hash.py" 2048

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
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
