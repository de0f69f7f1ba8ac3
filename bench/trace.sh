#!/usr/bin/env bash
# The cost of `pagescope trace`: six workloads untraced, traced with a
# 2 MiB and an 8 MiB pool, and under valgrind's lackey (--trace-mem=yes),
# the peer tool that logs every memory access. Each reference outside the
# pool costs a fault:
#   - pagetest writing one word per page of 64 MiB, 3 times: every
#     reference is a fault (pagescope's worst case);
#   - sort of 200 000 generated lines (3 MB);
#   - xz -1 compressing 1 MB of them;
#   - python3 sorting and hashing 2048 random 4 KiB blobs (8 MiB);
# and two whose working set is several times the pool, as real programs'
# often is:
#   - python3 sorting 500 000 random floats (about 25 MiB of objects);
#   - xz with two threads (-T2, 256 KiB blocks) compressing 3 MB.
# Prints one table: median slowdown per pool, lackey's slowdown and how
# many times longer it takes than the largest pool, references and bytes
# per reference in the trace files; then the median slowdown per pool,
# and one `summary:` line per pool.
# Every traced run must print what the untraced run printed. The floor
# column is what the references would cost at bench/uffd_floor.c's time
# per fault, the least a userfaultfd tracer can take here; "floor + calls"
# adds the calls pagescope makes for a fault on an evicted page.
# Needs root, valgrind, xz and gcc.
#
#   bench/trace.sh        RUNS=5 LACKEY_RUNS=1 POOLS="2M 8M" EVICT=auto CPU= TRACE_ARGS=
#
# CPU=N traces with --cpu N (and runs the untraced and lackey runs on
# CPU N too).
# TRACE_ARGS adds options to every traced run (--no-idle-poll: idle CPUs
# may sleep).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
LACKEY_RUNS=${LACKEY_RUNS:-1}
POOLS=${POOLS:-2M 8M}
. bench/common.sh
need valgrind xz gcc
gcc -O2 -pthread -o "$WORK/uffd_floor" bench/uffd_floor.c
# The interpreter itself: python3 may be a launcher whose shells would be
# traced too.
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
# shellcheck disable=SC2086
cat > "$WORK/floats.py" <<'PY'
import random, sys
r = random.Random(1)
a = [r.random() for _ in range(int(sys.argv[1]))]
a.sort()
print(sum(a[:10]), a[len(a) // 2])
PY
FLOOR="$WORK/uffd_floor" python3 bench/trace.py "$BIN" "$WORK" "$RUNS" "$LACKEY_RUNS" $POOLS -- \
    "pagetest 64M write x3" "$BIN/pagetest --size 64M --mode anon --op write --iterations 3 --sleep 0" \
    "sort 200000 lines" "sort -S 64M $WORK/lines" \
    "xz -1 of 1 MB" "xz -T1 -1 -c $WORK/1m" \
    "python3 hash 8 MiB" "$PY $WORK/hash.py 2048" \
    "python3 sort 500 000 floats" "$PY $WORK/floats.py 500000" \
    "xz -T2 -1 of 3 MB" "xz -T2 --block-size=262144 -1 -c $WORK/lines"
