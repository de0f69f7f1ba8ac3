#!/usr/bin/env bash
# Report views on a snapshot of more than 2 million pages: 200 processes
# of pagetest --size 40M --hold, snapshotted once, then each view timed
# from the file with hyperfine. Needs root and hyperfine.
#
#   bench/views.sh [PROCESSES] [SIZE_PER_PROCESS]     (default 200 40M)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
SIZE=${2:-40M}
RUNS=${RUNS:-5}
command -v hyperfine >/dev/null || { echo "bench: hyperfine is missing (apt-get install hyperfine)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "bench: run as root (page frame numbers need CAP_SYS_ADMIN)" >&2; exit 1; }
cargo build --release --workspace -q
BIN=$PWD/target/release
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
for i in $(seq 1 "$N"); do
    "$BIN/pagetest" --size "$SIZE" --mode anon --op write --hold > "$WORK/pt.$i" &
    PIDS+=($!)
done
for i in $(seq 1 "$N"); do
    until grep -q '"done"' "$WORK/pt.$i" 2>/dev/null; do sleep 0.05; done
done
SNAP=$WORK/views.snap
"$BIN/pagescope" snapshot -q -o "$SNAP"
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
PIDS=()
PAGES=$("$BIN/pagescope" report total -i "$SNAP" -f json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["rss_sum_pages"])')
FIRST=$(head -1 "$WORK/pt.1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
echo "snapshot: $PAGES pages, $(stat -c %s "$SNAP") bytes" >&2
ARGS=()
for view in total processes "processes --virtual" units unit-totals alerts "vmas --pid $FIRST"; do
    ARGS+=(-n "$view" "$BIN/pagescope report $view -i $SNAP -f json")
done
hyperfine -N --warmup 1 --runs "$RUNS" --export-markdown "$WORK/views.md" "${ARGS[@]}" >&2
echo "views on a snapshot of $PAGES pages ($N x pagetest --size $SIZE):"
cat "$WORK/views.md"
