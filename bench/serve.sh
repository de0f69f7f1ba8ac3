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
#                INTERVAL seconds (bash /dev/tcp)
#
# Then the stalls: one more 4 GiB process (bench/map_loop.c) maps, writes
# and unmaps a page in a loop; its mmap and munmap wait for any walk that
# holds its memory-map lock (the writer's passes over its buffer do not),
# and its faults get it walked at every collection. Four more phases,
# with it running:
#
#   stall-baseline          nothing collects
#   stall-pagescope         pagescope serve (it is read from its pagemap,
#                           paced: --pagemap-above 256M, the default)
#   stall-pagescope-rollup  the same with --pagemap-above 0 (smaps_rollup)
#   stall-exporter          process-exporter
#
# Per phase: CPU time per collection (utime + stime of the collector's
# process over the phase, divided by its collections), and the watched
# process's iteration times (pagetest's iteration events): the longest
# iteration against the median of the baseline is the longest stop; the
# load average at the phase's end; for pagescope, the processes its last
# collection walked, by reason (pagescope_walked_processes). For the
# stall phases, map_loop's longest round (rounds over 2 ms are printed).
#
# The script itself starts no process while a phase runs (it scrapes with
# bash's /dev/tcp and waits with `read -t`): a process that starts or
# ends maps or unmaps pages of the C library that every process shares,
# which changes their PSS and makes pagescope walk them again.
# Needs root, curl, python3, a C compiler, prometheus-process-exporter.
#
#   bench/serve.sh [PROCESSES] [SIZE_PER_PROCESS]     (default 200 40M)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
SIZE=${2:-40M}
DURATION=${DURATION:-60}
INTERVAL=${INTERVAL:-5}
. bench/common.sh
need curl python3 cc prometheus-process-exporter
start_pagetests "$N" "$SIZE"
"$BIN/pagetest" --size 4G --mode anon --op write --iterations 100000000 --sleep 10ms \
    > "$WORK/watched" &
WATCHED=$!
PIDS+=("$WATCHED")
until grep -q '"iteration"' "$WORK/watched" 2>/dev/null; do sleep 0.1; done
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Nothing below starts a process while a phase runs, not even a subshell
# (a fork is a process mapping the C library): values come back in
# variables (printf -v), times from bash's $EPOCHREALTIME.
# cpu_ticks VAR PID: VAR = utime + stime of PID (no space in its name).
cpu_ticks() { local -a f; read -r -a f < "/proc/$2/stat"; printf -v "$1" '%d' $((f[13] + f[14])); }
# load VAR: VAR = the 1, 5 and 15 minute load averages, joined by /.
load() { local a b c _; read -r a b c _ < /proc/loadavg; printf -v "$1" '%s/%s/%s' "$a" "$b" "$c"; }
# pagetest's start_ns/end_ns are CLOCK_MONOTONIC, as Python's monotonic_ns.
OFFSET=$(python3 -c 'import time; print(time.time_ns() - time.monotonic_ns())')
mark() { local t=${EPOCHREALTIME/./}; printf '%s %d\n' "$1" $((t * 1000 - OFFSET)) >> "$WORK/phases"; }

# A descriptor that never has input: `read -t` on it sleeps in the shell.
exec {NEVER}<> <(:)
pause() { read -r -t "$1" -u "$NEVER" _ || true; }
# scrape PORT: GET /metrics with bash alone; sets CUR (pagescope's CPU
# counter line, empty for another exporter) and WALKED (its walks).
scrape() {
    local line
    CUR="" WALKED=""
    exec {SOCK}<>"/dev/tcp/127.0.0.1/$1"
    printf 'GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n' >&"$SOCK"
    while IFS= read -r line <&"$SOCK"; do
        case $line in
            pagescope_collection_cpu_seconds_total*) CUR=$line ;;
            pagescope_walked_processes*) WALKED="$WALKED ${line#pagescope_walked_processes}" ;;
        esac
    done
    exec {SOCK}<&-
}

# phase NAME PID PORT: scrapes PORT every INTERVAL s for DURATION s (PID's
# CPU time measured around it); for pagescope, counts its collections.
phase() {
    local name=$1 pid=$2 port=$3 t0 t1 la n=0 last=""
    # Warm-up, not measured: the collector's first collections, and this
    # shell's first runs of its scrape code, which map more pages of bash
    # and the C library (moving the PSS of every process that maps them,
    # so the next collection walks them all again: once per run of a
    # shell, not per phase of a long-running collector).
    pause 2
    scrape "$port"
    pause $((INTERVAL + 1))
    # Counted from here: collections whose result differs from the one a
    # scrape sees now (a first collection that took long can still be
    # the last one; its CPU time is before t0).
    scrape "$port"
    last=$CUR
    cpu_ticks t0 "$pid"
    mark "$name-start"
    local end=$((SECONDS + DURATION))
    while [ $SECONDS -lt $end ]; do
        scrape "$port"
        if [ -z "$CUR" ]; then
            n=$((n + 1))
        elif [ "$CUR" != "$last" ]; then
            n=$((n + 1)); last=$CUR
            [ -z "$WALKED" ] || echo "$name$WALKED" >> "$WORK/walks"
        fi
        pause "$INTERVAL"
    done
    mark "$name-end"
    cpu_ticks t1 "$pid"
    load la
    echo "$name $n $((t1 - t0)) $la" >> "$WORK/cpu"
    [ -z "$WALKED" ] || echo "$name walked in its last collection:$WALKED" >> "$WORK/walked"
}

# serve_phase NAME ARGS...: pagescope serve with ARGS for a phase.
serve_phase() {
    local name=$1 P S
    shift
    P=$(port)
    "$BIN/pagescope" serve --listen "127.0.0.1:$P" --interval "${INTERVAL}s" "$@" 2>/dev/null &
    S=$!
    PIDS+=("$S")
    phase "$name" "$S" "$P"
    kill "$S"; wait "$S" || true
}
cat > "$WORK/pe.yml" <<'YML'
process_names:
  - name: "{{.Comm}}"
    cmdline:
      - '.+'
YML
# exporter_phase NAME: process-exporter for a phase.
exporter_phase() {
    local P E
    P=$(port)
    prometheus-process-exporter -config.path "$WORK/pe.yml" -gather-smaps=true -threads=false \
        -web.listen-address "127.0.0.1:$P" >/dev/null 2>&1 &
    E=$!
    PIDS+=("$E")
    phase "$1" "$E" "$P"
    curl -s "http://127.0.0.1:$P/metrics" | grep -c '^namedprocess_namegroup_memory_bytes' \
        > "$WORK/pe.series" || true
    kill "$E"; wait "$E" || true
}
# baseline_phase NAME: nothing collects.
baseline_phase() {
    mark "$1-start"
    pause "$DURATION"
    mark "$1-end"
    local la
    load la
    echo "$1 0 0 $la" >> "$WORK/cpu"
}

baseline_phase baseline
serve_phase pagescope
serve_phase pagescope-none --backend none
exporter_phase exporter

cc -O2 -o "$WORK/map_loop" bench/map_loop.c
"$WORK/map_loop" 4096 $((4 * DURATION + 60)) > "$WORK/map_loop.out" &
PIDS+=("$!")
until grep -q ready "$WORK/map_loop.out" 2>/dev/null; do sleep 0.1; done
baseline_phase stall-baseline
serve_phase stall-pagescope
serve_phase stall-pagescope-rollup --pagemap-above 0
exporter_phase stall-exporter

python3 - "$WORK" "$N" "$SIZE" "$(getconf CLK_TCK)" <<'PY'
import json, sys, statistics
work, n, size, hz = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
marks = {}
for line in open(f"{work}/phases"):
    k, v = line.split(); marks[k] = int(v)
iters = [json.loads(l) for l in open(f"{work}/watched") if '"iteration"' in l]
slow = [(float(l.split()[1]), int(float(l.split()[3])))
        for l in open(f"{work}/map_loop.out") if l.startswith("slow ")]
def stall(name):
    s, e = marks[f"{name}-start"], marks[f"{name}-end"]
    r = [ms for ms, at in slow if s <= at <= e]
    return f"{max(r):.1f} ms ({len(r)} rounds over 2 ms)" if r else "under 2 ms"
def rows(name):
    s, e = marks[f"{name}-start"], marks[f"{name}-end"]
    out = []
    for it in iters:
        if s <= it["start_ns"] and it["end_ns"] <= e:
            out.append((it["end_ns"] - it["start_ns"]) / 1e6)
    return out
cpu, load = {}, {}
for line in open(f"{work}/cpu"):
    name, count, ticks, la = line.split(); cpu[name] = (int(count), int(ticks)); load[name] = la
del cpu["baseline"], cpu["stall-baseline"]
base = rows("baseline")
print(f"{n} x pagetest --size {size} held, one 4 GiB pagetest writing its buffer in a loop")
print()
print("| phase | collections | CPU per collection | watched: median iteration | longest | longest - baseline median | load average (1/5/15 min) at its end |")
print("|---|---|---|---|---|---|---|")
bmed = statistics.median(base) if base else None
for name in ["baseline", "pagescope", "pagescope-none", "exporter"]:
    r = rows(name)
    c = cpu.get(name)
    cc = f"{c[0]}" if c else "-"
    per = f"{c[1] / hz / max(c[0], 1) * 1000:.0f} ms" if c else "-"
    if r:
        print(f"| {name} | {cc} | {per} | {statistics.median(r):.1f} ms | {max(r):.1f} ms | {max(r) - bmed:+.1f} ms | {load[name]} |")
    else:
        print(f"| {name} | {cc} | {per} | - | - | - | {load[name]} |")
print()
print("Stalls: one more 4 GiB process mapping, writing and unmapping a page in a loop (bench/map_loop.c)")
print()
print("| phase | collections | CPU per collection | map_loop: longest round | load average (1/5/15 min) at its end |")
print("|---|---|---|---|---|")
for name in ["stall-baseline", "stall-pagescope", "stall-pagescope-rollup", "stall-exporter"]:
    c = cpu.get(name)
    cc = f"{c[0]}" if c else "-"
    per = f"{c[1] / hz / max(c[0], 1) * 1000:.0f} ms" if c else "-"
    print(f"| {name} | {cc} | {per} | {stall(name)} | {load[name]} |")
PY
echo "process-exporter series of memory: $(cat "$WORK/pe.series")"
# Every collection's walks seen in a phase, summed by reason.
python3 - "$WORK/walks" <<'PY'
import re, sys, collections
sums = collections.defaultdict(collections.Counter)
for line in open(sys.argv[1]):
    name, rest = line.split(" ", 1)
    for reason, n in re.findall(r'reason="(\w+)"\} (\d+)', rest):
        sums[name][reason] += int(n)
for name, c in sums.items():
    print(f"{name}: processes walked in the phase's collections: " + ", ".join(f"{r} {n}" for r, n in c.most_common()))
PY
cat "$WORK/walked" 2>/dev/null || true
