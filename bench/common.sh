# Shared by the benchmark scripts: checks, a release build, and a fleet
# of held pagetest processes that is killed on exit.
#
#   . bench/common.sh; need TOOL...; start_pagetests N SIZE
# sets BIN (release binaries), WORK (a temporary directory), PIDS.

need() {
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "bench: $tool is missing (apt-get install $tool)" >&2; exit 1; }
    done
    [ "$(id -u)" -eq 0 ] || { echo "bench: run as root (page frame numbers need CAP_SYS_ADMIN)" >&2; exit 1; }
}

cargo build --release --workspace -q
BIN=$PWD/target/release
WORK=$(mktemp -d)
PIDS=()
stop_pagetests() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    PIDS=()
}
cleanup() {
    stop_pagetests
    rm -rf "$WORK"
}
trap cleanup EXIT

# start_pagetests N SIZE: N x pagetest --size SIZE --mode anon --op write
# --hold, waiting until every one has written its buffer.
start_pagetests() {
    echo "starting $1 pagetest processes of $2 each" >&2
    for i in $(seq 1 "$1"); do
        "$BIN/pagetest" --size "$2" --mode anon --op write --hold > "$WORK/pt.$i" &
        PIDS+=($!)
    done
    for i in $(seq 1 "$1"); do
        until grep -q '"done"' "$WORK/pt.$i" 2>/dev/null; do sleep 0.05; done
    done
}
