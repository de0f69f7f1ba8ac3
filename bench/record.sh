#!/usr/bin/env bash
# pagescope record's cost to the recorded program: pagetest writing a
# 4 GiB buffer over and over, its throughput (pages written per second,
# from its own iteration times) unrecorded and then recorded by each
# backend this kernel has, at 100 ms and 1 s, and the recorder's own CPU
# (from the recording). See bench/record.py.
#
#   bench/record.sh [SIZE] [WINDOW_SECONDS] [RUNS]     (default 4G 10 2)
#   BACKENDS=refs bench/record.sh                      (only some backends)
#   CONFIG="refs 1s --system" bench/record.sh          (one configuration)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
need python3
python3 bench/record.py "$BIN" "$WORK" "${1:-4G}" "${2:-10}" "${3:-2}"
