#!/usr/bin/env bash
# Report views on a snapshot of more than 2 million pages: 200 processes
# of pagetest --size 40M --hold, snapshotted once (with the physical map),
# then each view and diff timed from the file with hyperfine, JSON output
# to /dev/null. Needs root and hyperfine.
#
#   bench/views.sh [PROCESSES] [SIZE_PER_PROCESS]     (default 200 40M)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
SIZE=${2:-40M}
RUNS=${RUNS:-5}
. bench/common.sh
need hyperfine python3
start_pagetests "$N" "$SIZE"
SNAP=$WORK/views.snap
"$BIN/pagescope" snapshot -q --physmap -o "$SNAP"
stop_pagetests
PAGES=$("$BIN/pagescope" report total -i "$SNAP" -f json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["rss_sum_pages"])')
FIRST=$(head -1 "$WORK/pt.1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
echo "snapshot: $PAGES pages, $(stat -c %s "$SNAP") bytes" >&2
ARGS=()
for view in total processes "processes --virtual" units unit-totals alerts "vmas --pid $FIRST" \
    pages "pages --flags anonymous,~lru" physmap; do
    ARGS+=(-n "$view" "$BIN/pagescope report $view -i $SNAP -f json")
done
ARGS+=(-n "diff" "$BIN/pagescope diff $SNAP $SNAP -f json")
hyperfine -N --output=null --warmup 1 --runs "$RUNS" --export-markdown "$WORK/views.md" "${ARGS[@]}" >&2
echo "views on a snapshot of $PAGES pages ($N x pagetest --size $SIZE):"
cat "$WORK/views.md"
