#!/usr/bin/env bash
# pagescope against drgn on the same kernel crash dump, doing the same
# work: every process's VMAs, and every present page's frame and page
# flags (docs/performance.md, "Crash dumps against drgn").
#
#   bench/vmcore.sh            (as root; needs drgn: pip install drgn)
#
# The dump: the stock guest of tests/kernels (Debian's 6.1 cloud kernel)
# holding its crash-dump check's workloads and one more pagetest of
# PAGESCOPE_BENCH_HOLD (default 2048M) in a guest of PAGESCOPE_BENCH_MEM
# MiB (default 3072), dumped through QMP (an ELF core), kept under
# PAGESCOPE_BENCH_DIR (default target/bench-vmcore) for the next run,
# with makedumpfile's compressed copies of it (each codec that
# makedumpfile has). The kernel's debug information: the vmlinux of its
# -dbg package (DWARF, which drgn needs, and the .BTF and symbols that
# pagescope reads), fetched once into the kernel cache.
#
# pagescope: `snapshot --vmcore` of each file with the dump in the page
# cache, hyperfine, PAGESCOPE_BENCH_RUNS runs (default 5) after one
# warm-up; drgn: bench/vmcore_drgn.py, once (its open and walk timed
# apart). Both count the present pages they found. Prints the load
# average before and after: run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${PAGESCOPE_BENCH_DIR:-target/bench-vmcore}
HOLD=${PAGESCOPE_BENCH_HOLD:-2048M}
MEM=${PAGESCOPE_BENCH_MEM:-3072}
RUNS=${PAGESCOPE_BENCH_RUNS:-5}
CACHE=${PAGESCOPE_KERNEL_CACHE:-$HOME/.cache/pagescope/kernels}
say() { echo "vmcore bench: $*" >&2; }
for tool in hyperfine makedumpfile python3 apt-get dpkg-deb; do
    command -v "$tool" > /dev/null || { say "$tool is missing"; exit 1; }
done
python3 -c 'import drgn' 2> /dev/null || { say "drgn is missing (pip install drgn)"; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

cargo build --release -q -p pagescope
PS=$PWD/target/release/pagescope

dump=$OUT/stock.vmcore
if [ ! -s "$dump" ]; then
    say "dumping the stock guest with $HOLD held in $MEM MiB (tests/kernels/run stock)"
    PAGESCOPE_GUEST_ONLY=vmcore PAGESCOPE_GUEST_MEM=$MEM PAGESCOPE_VMCORE_HOLD=$HOLD \
        PAGESCOPE_KEEP_DUMP=$dump tests/kernels/run stock >&2 \
        || say "the guest's vmcore check did not pass; the dump is used all the same"
    [ -s "$dump" ] || { say "no dump"; exit 1; }
fi
# makedumpfile 1.7.2 reads the program headers at byte 64 only (done in
# place, once).
python3 tests/kernels/elf_phdrs_first.py "$dump" > /dev/null

# The kernel's vmlinux with DWARF, from its -dbg package.
kdir=$(find "$CACHE" -maxdepth 1 -name 'stock-linux-image-6.1.0-*-cloud-amd64-unsigned' | sort -V | tail -1)
[ -n "$kdir" ] || { say "no stock kernel in $CACHE (tests/kernels/run stock fetches it)"; exit 1; }
pkg=${kdir##*/stock-}
vmlinux=$kdir/vmlinux-dbg
if [ ! -s "$vmlinux" ]; then
    say "fetching ${pkg%-unsigned}-dbg for its vmlinux"
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download -q "${pkg%-unsigned}-dbg" >&2)
    dpkg-deb --fsys-tarfile "$tmp"/*.deb \
        | tar -xO --wildcards './usr/lib/debug/boot/vmlinux-*' > "$vmlinux.tmp"
    mv "$vmlinux.tmp" "$vmlinux"
    rm -rf "$tmp"
fi

# makedumpfile's compressed copies.
files=("$dump")
caps=$(makedumpfile -v 2>&1)
for pair in c:zlib l:lzo z:zstd; do
    opt=${pair%%:*} codec=${pair#*:}
    if [ "$codec" != zlib ] && ! grep -Eq "^$codec[[:space:]]+enabled" <<< "$caps"; then
        say "this makedumpfile lacks $codec"
        continue
    fi
    copy=$OUT/stock.$codec.kdump
    [ -s "$copy" ] || makedumpfile "-$opt" -d 0 "$dump" "$copy" > /dev/null 2>&1 \
        || { say "makedumpfile -$opt failed"; rm -f "$copy"; continue; }
    files+=("$copy")
done

# The guest's RAM (System RAM frames) and the present pages pagescope
# finds; the files in the page cache.
"$PS" snapshot -q --physmap --vmcore "$dump" --btf "$vmlinux" -o "$OUT/dump.snap"
frames=$("$PS" report physmap --input "$OUT/dump.snap" --format json 2> /dev/null \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["frames"])')
present=$("$PS" report pages --input "$OUT/dump.snap" --format csv 2> /dev/null \
    | awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next } $h["pfn"] != "" { n++ } END { print n + 0 }')
cat "${files[@]}" "$vmlinux" > /dev/null
say "guest RAM $((frames * 4096 / 1048576)) MiB, present user pages $present (pagescope)"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
results=()
for f in "${files[@]}"; do
    json=$OUT/hyperfine.$(basename "$f").json
    hyperfine -N --style none --warmup 1 --runs "$RUNS" --export-json "$json" \
        "$PS snapshot -q --vmcore $f --btf $vmlinux -o $OUT/bench.snap" > /dev/null
    results+=("$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
gib = int(sys.argv[2]) * 4096 / 2**30
print("%s %.3f %.3f %.3f %.1f" % (sys.argv[3], r["mean"], r["stddev"] or 0, r["min"], gib / r["mean"]))
' "$json" "$frames" "$(basename "$f")")")
done
say "drgn (one run)"
drgn_start=$(date +%s.%N)
drgn_out=$(python3 bench/vmcore_drgn.py "$dump" "$vmlinux")
drgn_s=$(echo "$(date +%s.%N) - $drgn_start" | bc)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

echo "guest RAM: $((frames * 4096 / 1048576)) MiB; pagescope present user pages: $present"
echo "drgn $(python3 -c 'import drgn; print(drgn.__version__)'): $drgn_out" | tr '\n' ' '
echo
printf '%-28s %10s %8s %8s %8s\n' file "mean s" "sd" "min s" "GiB/s"
for r in "${results[@]}"; do
    # shellcheck disable=SC2086
    printf '%-28s %10s %8s %8s %8s\n' $r
done
elf_mean=$(cut -d' ' -f2 <<< "${results[0]}")
printf 'drgn %.1f s in all on the ELF core: %.0f times pagescope'"'"'s %.3f s\n' \
    "$drgn_s" "$(echo "$drgn_s / $elf_mean" | bc -l)" "$elf_mean"
echo "load average before: $load_before; after: $load_after; $(nproc) CPUs"
rm -f "$OUT/bench.snap"
