#!/usr/bin/env bash
# `pagescope top`'s own CPU at its default refresh (2 s) with N held
# pagetest processes (default 200 x 40M, as bench/serve.sh): top runs in a
# 200x50 tmux session of its own for DURATION seconds (default 60) per
# backend (refs, the default, and none); its CPU is utime + stime of
# /proc/PID/stat over that time (after a first refresh), in percent of
# one core. Goal: under 2%. Needs root and tmux.
#
#   bench/top.sh [PROCESSES] [SIZE_PER_PROCESS]     (default 200 40M)
#   TOP_ARGS="--budget 100" bench/top.sh           (no budget: the 2 s refresh kept)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
SIZE=${2:-40M}
DURATION=${DURATION:-60}
. bench/common.sh
need tmux
start_pagetests "$N" "$SIZE"
SESSION=pagescope-bench-top-$$
tmuxs() { tmux -L "$SESSION" -f /dev/null "$@"; }
trap 'tmuxs kill-session -t "$SESSION" 2>/dev/null || true; cleanup' EXIT
ticks_per_s=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "backend processes cpu_s wall_s cpu_pct_of_a_core"
for backend in refs none; do
    tmuxs new-session -d -s "$SESSION" -x 200 -y 50 "$BIN/pagescope" top --backend "$backend" ${TOP_ARGS:-}
    pid=$(tmuxs display -p -t "$SESSION" '#{pane_pid}')
    sleep 3
    shown=$(tmuxs capture-pane -p -t "$SESSION" | head -1)
    t0=$(cpu_ticks "$pid"); s0=$(date +%s.%N)
    sleep "$DURATION"
    t1=$(cpu_ticks "$pid"); s1=$(date +%s.%N)
    tmuxs send-keys -t "$SESSION" q
    sleep 0.5
    tmuxs kill-session -t "$SESSION" 2>/dev/null || true
    procs=$(echo "$shown" | grep -o '[0-9]* processes' || echo '? processes')
    python3 -c "
cpu = ($t1 - $t0) / $ticks_per_s; wall = $s1 - $s0
print('$backend', '${procs% processes}', f'{cpu:.2f}', f'{wall:.1f}', f'{100 * cpu / wall:.2f}')"
done
