#!/usr/bin/env bash
# Makes the seed corpus of the fuzz targets (fuzz/seeds/TARGET/): real
# files of each kind, a few KB each, written by the built pagescope from
# a small pagetest, and their copies with frames stored uncompressed. Run it again when the format changes (with the
# versions below), and commit the new seeds beside the old. Needs root (page frame numbers, the refs, fault and trace
# backends) and a built workspace (`cargo build --workspace`).
#
# The fuzz run itself (.ci/run) starts from these committed seeds, so it
# needs neither root nor this script. The crash-dump target's seeds
# (read_dump) come from a guest's dump: fuzz/make-dump-seeds.py.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${CARGO_TARGET_DIR:-target}/debug
pagescope=$bin/pagescope
pagetest=$bin/pagetest
for b in "$pagescope" "$pagetest"; do
    [ -x "$b" ] || { echo "$b missing: run cargo build --workspace" >&2; exit 1; }
done

# Seeds of every format version stay: readers must keep reading older
# files. A seed's name carries its kind's version (none for version 1);
# set these to the versions pagescope writes (format::Kind::version).
SNAP_V=1
REC_V=2
TRACE_V=4
tag() { [ "$1" = 1 ] || echo "-v$1"; }
seeds=fuzz/seeds
mkdir -p "$seeds"/{read_snapshot,read_record,read_trace}
made=()
work=$(mktemp -d)
held=
cleanup() {
    if [ -n "$held" ]; then
        kill "$held" 2>/dev/null || true
        wait "$held" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# A snapshot of one held pagetest: its pages, VMAs and ELF files.
"$pagetest" --size 256K --hold >"$work/pt.out" &
held=$!
until grep -q '"done"' "$work/pt.out"; do sleep 0.05; done
"$pagescope" snapshot -q --pid "$held" -o "$seeds/read_snapshot/pagetest$(tag $SNAP_V).snap"
kill "$held"
wait "$held" 2>/dev/null || true
held=

# Recordings: the refs backend (rows per VMA), and the fault backend on a
# sample (page runs, the density histogram, the sampling frame).
"$pagescope" record -q --backend refs --interval 50ms -o "$seeds/read_record/refs$(tag $REC_V).rec" \
    -- "$pagetest" --size 256K --iterations 3 --sleep 50ms >/dev/null
"$pagescope" record -q --backend fault --sample 0.5 --interval 50ms \
    -o "$seeds/read_record/fault-sampled$(tag $REC_V).rec" \
    -- "$pagetest" --size 256K --iterations 3 --sleep 50ms >/dev/null

# A trace, with a pool smaller than the buffer so that pages are evicted
# and referenced again.
"$pagescope" trace -q --pool 128K -o "$seeds/read_trace/pagetest$(tag $TRACE_V).trace" \
    -- "$pagetest" --size 256K --iterations 2 >/dev/null

made=("$seeds/read_snapshot/pagetest$(tag $SNAP_V).snap"
    "$seeds/read_record/refs$(tag $REC_V).rec"
    "$seeds/read_record/fault-sampled$(tag $REC_V).rec"
    "$seeds/read_trace/pagetest$(tag $TRACE_V).trace")

# The same files with their frames stored uncompressed, so that the
# fuzzer's mutations land in the records as well as in zstd's streams.
cargo build -q -p pagescope-core --example uncompressed
for f in "${made[@]}"; do
    "${CARGO_TARGET_DIR:-target}/debug/examples/uncompressed" "$f" "${f%.*}-uncompressed.${f##*.}"
done

ls -l "$seeds"/*
