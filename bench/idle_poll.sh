#!/usr/bin/env bash
# What keeping idle CPUs polling costs the CPUs a trace does not use.
#
# `pagescope trace --cpu N` runs a program whose every reference is a
# fault (pagetest writing one word per page of 64 MiB, ITER times) on CPU
# N, in two ways, RUNS times each, alternating:
#   per-cpu   pagescope as it is: CPU N's own resume latency limit only;
#   machine   the limit pagescope held before, every CPU of the machine
#             (a helper holds /dev/cpu_dma_latency at 0 for the run, and
#             pagescope runs with --no-idle-poll).
# For each it prints the trace's wall time, and for every other CPU how
# its idle time split between polling and the deeper states (cpuidle's
# own residency counters, /sys/devices/system/cpu/cpuM/cpuidle/stateK/time):
# the share of idle time spent polling is what the machine pays.
# Needs root and two CPUs or more.
#
#   bench/idle_poll.sh       RUNS=5 ITER=5 CPU=(the last one)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
ITER=${ITER:-5}
. bench/common.sh
need python3
CPUS=$(nproc)
[ "$CPUS" -ge 2 ] || { echo "bench: needs two CPUs or more" >&2; exit 1; }
CPU=${CPU:-$((CPUS - 1))}
[ -e /sys/devices/system/cpu/cpu0/power/pm_qos_resume_latency_us ] ||
    { echo "bench: this kernel has no per-CPU resume latency limits" >&2; exit 1; }

# Idle residency (us) per CPU: "cpu poll deeper" lines.
residency() {
    for d in /sys/devices/system/cpu/cpu[0-9]*; do
        local cpu=${d##*cpu} poll=0 deep=0
        for s in "$d"/cpuidle/state*; do
            [ -e "$s/time" ] || continue
            if [ "$(cat "$s/name")" = POLL ]; then
                poll=$((poll + $(cat "$s/time")))
            else
                deep=$((deep + $(cat "$s/time")))
            fi
        done
        echo "$cpu $poll $deep"
    done
}

# Holds the machine-wide limit at 0 until its stdin closes.
cat > "$WORK/hold.py" <<'PY'
import os, struct, sys
fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
os.write(fd, struct.pack("i", 0))
print("held", flush=True)
sys.stdin.read()
PY

one() { # one MODE: prints "MODE wall_s cpu poll_us deep_us" per other CPU
    local mode=$1 args=() holder=
    if [ "$mode" = machine ]; then
        args=(--no-idle-poll)
        coproc HOLD { python3 "$WORK/hold.py"; }
        read -r _ <&"${HOLD[0]}"
        holder=$HOLD_PID
    fi
    residency > "$WORK/before"
    local t0 t1
    t0=$(date +%s.%N)
    "$BIN/pagescope" trace -q -o "$WORK/t.trace" --cpu "$CPU" "${args[@]}" -- \
        "$BIN/pagetest" --size 64M --op write --iterations "$ITER" --sleep 0 > /dev/null
    t1=$(date +%s.%N)
    residency > "$WORK/after"
    if [ -n "$holder" ]; then
        exec {HOLD[1]}>&-
        wait "$holder" 2>/dev/null || true
    fi
    join "$WORK/before" "$WORK/after" | while read -r cpu p0 d0 p1 d1; do
        [ "$cpu" = "$CPU" ] && continue
        echo "$mode $(echo "$t1 - $t0" | bc -l) $cpu $((p1 - p0)) $((d1 - d0))"
    done
}

for _ in $(seq 1 "$RUNS"); do
    one per-cpu
    one machine
done > "$WORK/runs"

python3 - "$WORK/runs" "$CPU" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print(f"trace --cpu {sys.argv[2]} of pagetest (every reference a fault); other CPUs' idle time:")
print(f"{'mode':<9} {'wall s':>8} {'polling share':>14}")
summary = {}
for mode in ("per-cpu", "machine"):
    r = [x for x in rows if x[0] == mode]
    wall = statistics.median(float(x[1]) for x in r)
    poll = sum(int(x[3]) for x in r)
    deep = sum(int(x[4]) for x in r)
    share = poll / (poll + deep) if poll + deep else float("nan")
    summary[mode] = (wall, share)
    print(f"{mode:<9} {wall:>8.3f} {share:>13.1%}")
w0, s0 = summary["per-cpu"]
w1, s1 = summary["machine"]
print(f"summary: wall per-cpu/machine={w0 / w1:.2f} other-cpus polling per-cpu={s0:.1%} machine={s1:.1%}")
PY
