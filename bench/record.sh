#!/usr/bin/env bash
# pagescope record's cost to the recorded program: pagetest writing a
# 4 GiB buffer over and over, its throughput (pages written per second,
# from its own iteration times, first-touch pass excluded) with no
# recorder and with each backend at 100 ms and 1 s, and the recorder's own
# CPU (from the recording). Configurations alternate run by run.
#
#   bench/record.sh [SIZE] [ITERATIONS] [RUNS]     (default 4G 300 3: about 10 s a run)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
need python3
python3 bench/record.py "$BIN" "$WORK" "${1:-4G}" "${2:-300}" "${3:-3}"
