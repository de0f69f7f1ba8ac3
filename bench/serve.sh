#!/usr/bin/env bash
# `pagescope serve` against prometheus-process-exporter (smaps gathering
# on: -gather-smaps, its default) on the same machine: N held pagetest
# processes (default 200 x 40M, as bench/snapshot.sh) and one 4 GiB
# pagetest writing its buffer over and over (the watched process). Each
# phase lasts DURATION seconds and collects every INTERVAL seconds:
#
#   baseline     nothing collects
#   pagescope    pagescope serve --interval INTERVAL (refs, the default)
#   pagescope-none  the same with --backend none (the figures
#                process-exporter gives: no working set)
#   exporter     process-exporter, every process tracked, scraped every
#                INTERVAL seconds with curl
#
# Per phase: CPU time per collection (utime + stime of the collector's
# process over the phase, divided by its collections), and the watched
# process's iteration times (pagetest's iteration events): the longest
# iteration against the median of the baseline is the longest stop.
# Needs root, curl, python3, prometheus-process-exporter.
#
#   bench/serve.sh [PROCESSES] [SIZE_PER_PROCESS]     (default 200 40M)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
SIZE=${2:-40M}
DURATION=${DURATION:-60}
INTERVAL=${INTERVAL:-5}
. bench/common.sh
need curl python3 prometheus-process-exporter
start_pagetests "$N" "$SIZE"
"$BIN/pagetest" --size 4G --mode anon --op write --iterations 100000000 --sleep 10ms \
    > "$WORK/watched" &
WATCHED=$!
PIDS+=("$WATCHED")
until grep -q '"iteration"' "$WORK/watched" 2>/dev/null; do sleep 0.1; done
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# pagetest's start_ns/end_ns are CLOCK_MONOTONIC, as Python's monotonic_ns.
mark() { echo "$1 $(python3 -c 'import time; print(time.monotonic_ns())')" >> "$WORK/phases"; }

# phase NAME PID URL: scrapes URL every INTERVAL s for DURATION s (PID's
# CPU time measured around it); for pagescope, counts its collections.
phase() {
    local name=$1 pid=$2 url=$3 t0 t1 n=0 last="" cur
    sleep 2
    t0=$(cpu_ticks "$pid")
    mark "$name-start"
    local end=$((SECONDS + DURATION))
    while [ $SECONDS -lt $end ]; do
        cur=$(curl -s "$url" | grep '^pagescope_collection_cpu_seconds_total' || true)
        if [ -z "$cur" ]; then n=$((n + 1)); elif [ "$cur" != "$last" ]; then n=$((n + 1)); last=$cur; fi
        sleep "$INTERVAL"
    done
    mark "$name-end"
    t1=$(cpu_ticks "$pid")
    echo "$name $n $((t1 - t0))" >> "$WORK/cpu"
}

mark baseline-start
sleep "$DURATION"
mark baseline-end

for backend in refs none; do
    P=$(port)
    "$BIN/pagescope" serve --listen "127.0.0.1:$P" --interval "${INTERVAL}s" --backend "$backend" \
        2>/dev/null &
    S=$!
    name=pagescope; [ "$backend" = none ] && name=pagescope-none
    phase "$name" "$S" "http://127.0.0.1:$P/metrics"
    kill "$S"; wait "$S" || true
done

P=$(port)
cat > "$WORK/pe.yml" <<'YML'
process_names:
  - name: "{{.Comm}}"
    cmdline:
      - '.+'
YML
prometheus-process-exporter -config.path "$WORK/pe.yml" -gather-smaps=true -threads=false \
    -web.listen-address "127.0.0.1:$P" >/dev/null 2>&1 &
E=$!
phase exporter "$E" "http://127.0.0.1:$P/metrics"
curl -s "http://127.0.0.1:$P/metrics" | grep -c '^namedprocess_namegroup_memory_bytes' \
    > "$WORK/pe.series" || true
kill "$E"; wait "$E" || true

python3 - "$WORK" "$N" "$SIZE" "$(getconf CLK_TCK)" <<'PY'
import json, sys, statistics
work, n, size, hz = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
marks = {}
for line in open(f"{work}/phases"):
    k, v = line.split(); marks[k] = int(v)
iters = [json.loads(l) for l in open(f"{work}/watched") if '"iteration"' in l]
def rows(name):
    s, e = marks[f"{name}-start"], marks[f"{name}-end"]
    out = []
    for it in iters:
        if s <= it["start_ns"] and it["end_ns"] <= e:
            out.append((it["end_ns"] - it["start_ns"]) / 1e6)
    return out
cpu = {}
for line in open(f"{work}/cpu"):
    name, count, ticks = line.split(); cpu[name] = (int(count), int(ticks))
base = rows("baseline")
print(f"{n} x pagetest --size {size} held, one 4 GiB pagetest writing its buffer in a loop")
print()
print("| phase | collections | CPU per collection | watched: median iteration | longest | longest - baseline median |")
print("|---|---|---|---|---|---|")
bmed = statistics.median(base) if base else None
for name in ["baseline", "pagescope", "pagescope-none", "exporter"]:
    r = rows(name)
    c = cpu.get(name)
    cc = f"{c[0]}" if c else "-"
    per = f"{c[1] / hz / max(c[0], 1) * 1000:.0f} ms" if c else "-"
    if r:
        print(f"| {name} | {cc} | {per} | {statistics.median(r):.1f} ms | {max(r):.1f} ms | {max(r) - bmed:+.1f} ms |")
    else:
        print(f"| {name} | {cc} | {per} | - | - | - |")
PY
echo "process-exporter series of memory: $(cat "$WORK/pe.series")"
