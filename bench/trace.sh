#!/usr/bin/env bash
# The cost of `pagescope trace`: pagetest writing (or reading) one word
# per page of its buffer, untraced, traced with each eviction method the
# kernel has (move: UFFDIO_MOVE, Linux 6.8+; copy: any kernel), and under
# valgrind's lackey (--trace-mem=yes), the peer tool that logs every
# memory access. Each reference outside the pool costs a fault; pagetest
# makes every reference one (the worst case); sort touches each page many
# times. Prints hyperfine's tables, with the ratios to untraced. Needs
# root, hyperfine and valgrind.
#
#   bench/trace.sh [SIZE] [OP]     (default 64M write; 3 iterations)
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-64M}
OP=${2:-write}
RUNS=${RUNS:-5}
. bench/common.sh
need hyperfine valgrind
PT="$BIN/pagetest --size $SIZE --mode anon --op $OP --iterations 3 --sleep 0"
# A program that touches each page many times: sort of 50000 generated
# lines (1.8 MB).
awk 'BEGIN { srand(7); for (i = 0; i < 50000; i++) printf "%08x %d\n", int(rand() * 4294967295), i }' > "$WORK/data"
SORT="sort -S 64M $WORK/data"
# bench WORKLOAD COMMAND WARMUP: untraced, traced by each method, under lackey.
bench() {
    local name=$1 cmd=$2 args=(-n untraced "$2")
    for evict in move copy; do
        if "$BIN/pagescope" trace -q --evict "$evict" -o /dev/null -- true 2>/dev/null; then
            args+=(-n "trace --evict $evict" "$BIN/pagescope trace -q --evict $evict --pool 2M -o $WORK/t.trace -- $cmd")
        else
            echo "trace --evict $evict: not on this kernel" >&2
        fi
    done
    args+=(-n "valgrind lackey" "valgrind --tool=lackey --trace-mem=yes --log-file=/dev/null $cmd")
    hyperfine -N --output=null --warmup "$3" --runs "$RUNS" --export-markdown "$WORK/$name.md" "${args[@]}" >&2
    echo "$name, traced with a 2 MiB pool ($("$BIN/pagescope" analyze "$WORK/t.trace" refs -f json | python3 -c 'import json,sys; print(json.load(sys.stdin)["references"])') references in the last trace):"
    cat "$WORK/$name.md"
    echo
}
bench "pagetest --size $SIZE --op $OP --iterations 3" "$PT" 1
# (lackey takes minutes here: no warm-up run)
bench "sort of 50000 lines" "$SORT" 0
