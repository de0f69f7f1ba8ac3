#!/bin/sh
# Checks run inside a guest kernel. Each prints one line
#   PAGESCOPE-CHECK <check> <pass|fail|refused-as-expected|skip> <detail>
# which tests/kernels/run collects from the serial console.
kernel=$1
# x86_64 or aarch64 (the arm64 guests): pagescope's `trace` and `--backend
# fault` are x86_64 only, and arm64 kernels have no soft-dirty.
arch=$(uname -m)
# The kernel's page size in KiB (4, or 16 on arm64-16k): the figures below
# that count pages of a buffer of a given size are counted from it.
pkb=$(awk '/^KernelPageSize:/ { print $2; exit }' /proc/self/smaps)
# The pages of 64 MiB (16384 of 4 KiB, 4096 of 16 KiB), and of the 4 MiB
# allowed for what the system itself touches (1024 of 4 KiB).
p64=$((65536 / pkb))
p4=$((4096 / pkb))
# Each check's detail ends with the guest seconds since the previous check,
# so a slow check shows on the console.
last=$(cut -d. -f1 /proc/uptime)
check() {
    now=$(cut -d. -f1 /proc/uptime)
    echo "PAGESCOPE-CHECK $1 $2 $3 [$((now - last)) s]"
    last=$now
}

# within PCT A B: A within PCT percent of B (or one page).
within() {
    awk -v a="$2" -v b="$3" -v p="$1" 'BEGIN { d = a - b; if (d < 0) d = -d; t = b * p / 100; if (t < 1) t = 1; exit !(d <= t) }'
}

# field NAME: the first number in the JSON field NAME on stdin.
field() { sed -n "s/.*\"$1\": *\([0-9]*\).*/\1/p" | head -1; }

# vmcore (full, stock and both arm64 kernels): held workloads (pagetest
# --fork 2 over private anonymous memory, a shared file mapping in tmpfs, shared memory of a
# memfd with a child, and one that paged out half its buffer to swap on
# a loop device over a tmpfs file), snapshotted live; the guest prints what the host
# compares with `snapshot --vmcore` of its dump: per held process RSS,
# USS, swap and PSS, the frames of the first pagetest's buffer (count and
# digest, and a digest of each page's frame, pagemap flags, kpageflags
# and kpagecount), the swap entries of the one in swap (count and
# digest), the physical map's frames per class (the live snapshot is
# taken with --physmap), and the user processes. The live snapshot holds pagescope
# itself, which the dump does not: every page it shares with a held
# process (the C library, the vDSO) has one mapping less at the dump, so
# the PSS and USS to compare are the live ones with pagescope's mappings
# taken out of those pages' counts (a page left with one mapping is
# exclusive). Then it says READY, and waits (a builtin read,
# no new process) for the host's `go` on its second serial port, sent
# once qemu has written the dump: ttyS1 on x86_64; on arm64 (qemu's virt
# has one PL011, the console) a 16550 on PCI, the first ttyS port the
# kernel found a UART at.
vmcore_check() {
    v=/tmp/vm
    mkdir -p $v
    # The stock and arm64 kernels have fw_cfg (which gives qemu the
    # VMCOREINFO) and loop devices as modules, from their packages
    # (tests/kernels/run), in /modules/KERNEL.
    if [ -d /modules/$kernel ]; then
        for m in qemu_fw_cfg loop; do
            insmod /modules/$kernel/$m.ko 2> $v/insmod || echo "PAGESCOPE-VMCORE-MODULE $m: $(head -1 $v/insmod)"
        done
    fi
    ctl=/dev/ttyS1
    if [ "$arch" = aarch64 ]; then
        ctl=/dev/ttyS$(sed -n 's/^\([0-9]*\): uart:[^u].*/\1/p' /proc/tty/driver/serial | head -1)
    fi
    /pagetest --size 64M --mode anon --op write --fork 2 --hold > $v/a.out &
    vma=$!
    /pagetest --size 16M --mode file --dir $v --op write --hold > $v/b.out &
    vmb=$!
    /pagetest --size 16M --mode shm --op write --fork 1 --hold > $v/c.out &
    vmc=$!
    swapdev=none
    if dd if=/dev/zero of=$v/swapfile bs=1M count=32 2>/dev/null && d=$(losetup -f) \
        && losetup "$d" $v/swapfile && mkswap "$d" > /dev/null && swapon "$d"; then
        swapdev=$d
    fi
    /pagetest --size 16M --mode anon --op write --pageout 0.5 --hold > $v/d.out &
    vmd=$!
    # bench/vmcore.sh: a large held buffer (pagescope.vmcore_hold=SIZE),
    # so that the dump has gigabytes in use.
    hold=$(sed -n 's/.*pagescope.vmcore_hold=\([0-9]*[KMG]\).*/\1/p' /proc/cmdline)
    vme=
    if [ -n "$hold" ]; then
        /pagetest --size "$hold" --mode anon --op write --hold > $v/e.out &
        vme=$!
    else
        echo '"done"' > $v/e.out
    fi
    for f in a b c d e; do
        while ! grep -q '"done"' $v/$f.out 2>/dev/null; do sleep 0.1; done
    done
    held=$(cat $v/a.out $v/b.out $v/c.out $v/d.out | sed -n 's/.*"pid":\([0-9]*\).*/\1/p' | sort -un | tr '\n' ' ')
    apid=$(field pid < $v/a.out)
    astart=$(field start < $v/a.out)
    aend=$(field end < $v/a.out)
    if /pagescope snapshot -q --physmap -o $v/live.snap 2> $v/err; then
        /pagescope report processes --input $v/live.snap --format csv > $v/procs.csv 2>/dev/null
        /pagescope report pages --input $v/live.snap --format csv > $v/pages.csv 2>/dev/null
        awk -F, -v held=" $held " '
            NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
            $h["pfn"] == "" { next }
            $h["comm"] == "pagescope" { mine[$h["pfn"]]++; next }
            index(held, " " $h["pid"] " ") && $h["kpageflags"] !~ /z/ { n++; p[n] = $h["pid"]; f[n] = $h["pfn"]; c[n] = $h["count"] }
            END {
                for (i = 1; i <= n; i++) {
                    k = mine[f[i]] + 0
                    if (k == 0) continue
                    c0 = c[i]; if (c0 < 1) c0 = 1
                    c1 = c[i] - k; if (c1 < 1) c1 = 1
                    adj[p[i]] += 1 / c1 - 1 / c0
                    if (c0 >= 2 && c[i] - k == 1) uadj[p[i]]++
                }
                for (q in adj) printf "%s %.9f %d\n", q, adj[q], uadj[q]
            }' $v/pages.csv > $v/adj
        for pid in $held; do
            awk -F, -v pid="$pid" -v adj="$(awk -v p="$pid" '$1 == p { print $2, $3 }' $v/adj)" '
                NR == 1 { split(adj, a, " "); for (i = 1; i <= NF; i++) h[$i] = i; next }
                $h["pid"] == pid {
                    printf "PAGESCOPE-VMCORE-LIVE %s %s %.9f %d %s %s %s\n", pid, $h["rss_pages"], $h["pss_pages"] + a[1], $h["uss_pages"] + a[2], $h["swap_pages"], $h["pss_pages"], $h["uss_pages"]
                }' $v/procs.csv
        done
        awk -F, -v p="$apid" -v s="$astart" -v e="$aend" 'NR > 1 && $1 == p && $3 >= s && $3 < e && $4 != "" { print $4 }' $v/pages.csv | sort -n > $v/pfns
        awk -F, -v p="$apid" -v s="$astart" -v e="$aend" 'NR > 1 && $1 == p && $3 >= s && $3 < e && $4 != "" { print $4 "," $6 "," $10 "," $11 }' $v/pages.csv | sort > $v/rows
        echo "PAGESCOPE-VMCORE-PFNS $apid $astart $aend $(wc -l < $v/pfns) $(md5sum < $v/pfns | cut -d' ' -f1) $(md5sum < $v/rows | cut -d' ' -f1)"
        # The swap entries (type, offset) of the one that paged out.
        dpid=$(field pid < $v/d.out)
        awk -F, -v p="$dpid" 'NR > 1 && $1 == p && $13 != "" { print $3 "," $13 "," $14 }' $v/pages.csv | sort > $v/swapped
        echo "PAGESCOPE-VMCORE-SWAPPED $dpid $(wc -l < $v/swapped) $(md5sum < $v/swapped | cut -d' ' -f1)"
    else
        echo "PAGESCOPE-VMCORE-LIVE-FAILED $(head -1 $v/err)"
    fi
    users=""
    for d in /proc/[0-9]*; do
        [ -e "$d/exe" ] && users="$users ${d#/proc/}"
    done
    echo "PAGESCOPE-VMCORE-PIDS$users"
    # The physical map's frames per class (the top of the JSON, before the
    # blocks), from a snapshot --physmap taken last, just before the dump:
    # the reports above allocate and free memory as they run (the main
    # snapshot with --physmap, taken earlier, classes about 1% of the
    # frames otherwise than the dump: pagescope's own memory, freed since,
    # and the reports' files).
    if /pagescope snapshot -q --physmap --pid $apid -o $v/phys.snap 2> $v/err; then
        echo "PAGESCOPE-VMCORE-PHYSMAP $(/pagescope report physmap --input $v/phys.snap --format json 2>/dev/null \
            | sed -n '/"blocks"/q; s/^  "\(frames\|[a-z_]*_pages\)": \([0-9]*\),$/\1=\2/p' | tr '\n' ' ')"
    else
        echo "PAGESCOPE-VMCORE-PHYSMAP-FAILED $(head -1 $v/err)"
    fi
    echo "PAGESCOPE-VMCORE-SWAP $swapdev"
    # The kernel's own totals, last, for the dump's (its vm_stat counters).
    echo "PAGESCOPE-VMCORE-MEMINFO $(awk '{ sub(":", "", $1); printf "%s=%s ", $1, $2 }' /proc/meminfo)"
    echo "PAGESCOPE-VMCORE-READY"
    if read -t 600 go < $ctl; then :; fi
    echo "PAGESCOPE-VMCORE-RESUMED ${go:-timeout}"
    kill $vma $vmb $vmc $vmd $vme 2>/dev/null
    wait $vma $vmb $vmc $vmd $vme 2>/dev/null
    if [ "$swapdev" != none ]; then
        swapoff "$swapdev"
        losetup -d "$swapdev"
    fi
    rm -rf $v
}
# kcore: `snapshot --kcore` (the running kernel's memory through
# /proc/kcore, by the crash-dump walk) against the kernel's own accounts:
# a held pagetest's RSS equal to its smaps_rollup Rss, and its buffer on
# the same frames (count and digest) as a live snapshot finds them. On a
# kernel without /proc/kcore, the one-line refusal. A kernel whose
# /proc/kallsyms lists no data symbols (no KALLSYMS_ALL: arm64's) has its
# System.map in the initramfs, as a user would bring it.
kcore_check() {
    k=/tmp/kc
    mkdir -p $k
    map=
    [ -f /System.map ] && map="--system-map /System.map"
    if [ ! -e /proc/kcore ]; then
        if /pagescope snapshot -q --kcore -o $k/k.snap 2> $k/err; then
            check kcore fail "no /proc/kcore, yet snapshot --kcore succeeded"
        elif [ "$(wc -l < $k/err)" -eq 1 ] && grep -q '^error: this kernel has no /proc/kcore' $k/err; then
            check kcore refused-as-expected "$(cat $k/err)"
        else
            check kcore fail "no /proc/kcore, and: $(head -2 $k/err | tr '\n' ' ')"
        fi
        rm -rf $k
        return
    fi
    /pagetest --size 32M --mode anon --op write --hold > $k/p.out &
    kp=$!
    while ! grep -q '"done"' $k/p.out 2>/dev/null; do sleep 0.1; done
    pid=$(field pid < $k/p.out)
    start=$(field start < $k/p.out)
    end=$(field end < $k/p.out)
    rss_kb=$(awk '/^Rss:/ { print $2 }' /proc/$pid/smaps_rollup)
    # frames SNAPSHOT: the buffer's frames, sorted, and their count.
    frames() {
        /pagescope report pages --input "$1" --pid $pid --format csv 2>/dev/null \
            | awk -F, -v s="$start" -v e="$end" 'NR > 1 && $3 >= s && $3 < e && $4 != "" { print $4 }' | sort -n > $k/f
        echo "$(wc -l < $k/f) $(md5sum < $k/f | cut -d' ' -f1)"
    }
    if ! /pagescope snapshot -q --pid $pid -o $k/live.snap 2> $k/err; then
        check kcore fail "the live snapshot failed: $(head -1 $k/err)"
    elif /pagescope snapshot -q --kcore $map --pid $pid -o $k/kcore.snap 2> $k/err; [ $? -ne 0 ]; then
        check kcore fail "$(tr '\n' ' ' < $k/err | head -c 400)"
    else
        rss=$(/pagescope report processes --input $k/kcore.snap --format csv 2>/dev/null \
            | awk -F, -v pid=$pid 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next } $h["pid"] == pid { print $h["rss_pages"] }')
        live=$(frames $k/live.snap)
        got=$(frames $k/kcore.snap)
        if [ "$((rss * pkb))" = "$rss_kb" ] && [ "$live" = "$got" ] && [ "${got%% *}" = $((32768 / pkb)) ]; then
            check kcore pass "pid $pid: RSS $rss pages = smaps_rollup $rss_kb kB; buffer frames $got as the live snapshot's"
        else
            check kcore fail "pid $pid: RSS ${rss:-none} pages, smaps_rollup $rss_kb kB; buffer frames kcore $got, live $live"
        fi
    fi
    kill $kp 2>/dev/null
    wait $kp 2>/dev/null
    rm -rf $k
}

# With pagescope.only=vmcore or kcore (tests/kernels/run:
# PAGESCOPE_GUEST_ONLY), that check alone; otherwise vmcore runs last, after every other check (run
# first, it left the guest's clock, jiffies under TCG, running 2.5 to 6
# times too fast through the timed checks after it, in 2 runs of 3, for
# a cause not found: the dump's pause and swap on a loop device alone,
# timed in an idle guest, leave it right).
only=$(sed -n 's/.*pagescope.only=\([a-z]*\).*/\1/p' /proc/cmdline)
if [ -n "$only" ]; then
    case "$only" in
        kcore) kcore_check ;;
        *) case "$kernel" in full* | stock | arm64*) vmcore_check ;; esac ;;
    esac
    exit 0
fi

# snapshot: a held pagetest buffer, snapshotted; its RSS and PSS in the
# processes report against the guest kernel's accounting: RSS against
# smaps_rollup read afterwards, PSS against the kernel's smaps PSS that the
# snapshot read at the same moment (smaps_pss_pages). The two binaries
# share the C library, so pagetest's PSS is lower while pagescope runs
# than in a smaps_rollup read after it: that one is printed, not held.
/pagetest --size 64M --mode anon --op write --hold > /tmp/pt.out &
ptpid=$!
while ! grep -q '"done"' /tmp/pt.out 2>/dev/null; do sleep 0.1; done
pid=$(field pid < /tmp/pt.out)
if /pagescope snapshot -q -o /tmp/s.snap; then
    col() { # NAME: the column NAME of pagetest's row
        /pagescope report processes --input /tmp/s.snap --pid "$pid" --format csv 2>/dev/null |
            awk -F, -v c="$1" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i } NR == 2 { print $k }'
    }
    rss=$(col rss_pages)
    pss=$(col pss_pages)
    spss=$(col smaps_pss_pages)
    krss=$(awk -v k=$pkb '/^Rss:/ { print $2 / k }' /proc/$pid/smaps_rollup)
    kpss=$(awk -v k=$pkb '/^Pss:/ { print $2 / k }' /proc/$pid/smaps_rollup)
    detail="rss=$rss/$krss pss=$pss/$spss (smaps_rollup after: $kpss)"
    if within 1 "$rss" "$krss" && within 1 "$pss" "$spss"; then
        check snapshot pass "$detail"
    else
        check snapshot fail "$detail"
    fi
    user=$(/pagescope report total --input /tmp/s.snap --format csv 2>/dev/null | awk -F, '$1 == "user_pages" { print $2 }')
    if [ -n "$user" ] && [ "$user" -ge $p64 ]; then
        check total pass "user_pages=$user"
    else
        check total fail "user_pages=$user"
    fi
else
    check snapshot fail "pagescope snapshot exited $?"
    check total fail "no snapshot"
fi

# physmap: every frame classed; the free frames against the zones' count.
if /pagescope report physmap --format csv > /tmp/pm.csv 2>/tmp/pm.err; then
    free=$(/pagescope report physmap --format json 2>/dev/null | field free_pages)
    kfree=$(awk '/nr_free_pages / { s += $2 } END { print s }' /proc/zoneinfo)
    if within 5 "$free" "$kfree"; then
        check physmap pass "free=$free/$kfree"
    else
        check physmap fail "free=$free/$kfree"
    fi
    # numa: the blocks' nodes in the physical map are sysfs's nodes.
    sysnodes=$(ls -d /sys/devices/system/node/node* 2>/dev/null | wc -l)
    ournodes=$(awk -F, 'NR > 1 && $2 != "" { print $2 }' /tmp/pm.csv | sort -u | wc -l)
    if [ "$sysnodes" -ge 1 ] && [ "$ournodes" -eq "$sysnodes" ]; then
        check numa pass "nodes=$ournodes/$sysnodes"
    else
        check numa fail "nodes=$ournodes/$sysnodes"
    fi
else
    check physmap fail "$(head -1 /tmp/pm.err)"
fi

# record: the memref paper's data verification. pagetest writes (or
# reads) its buffer 10 times, 2 s apart (1 s on the host; under TCG a
# loaded machine can stretch a boundary past 1 s and merge two spikes),
# recorded at 100 ms: from its first
# iteration on, the intervals with references to the buffer form 10
# spikes, each summing to the buffer's pages within 2%, with at most a few
# pages between them; written pages (where known) are the buffer in a
# write run, none in a read run. Transparent huge pages are set to
# madvise, as on the host and as in the paper: a huge page is referenced
# 512 pages at a time, so an iteration that straddles a boundary would
# count the huge page it was in twice.
# spikes OP PAGES FIRST TOL [WTOL]: temporal CSV rows on stdin; FIRST is the
# first iteration's start in recording time; each spike within TOL percent,
# its written pages within WTOL percent (default TOL). Prints a verdict,
# with the largest errors. One quiet interval inside a spike does not end
# it (under TCG an iteration now and then stalls for an interval, or DAMON
# misses it for one); iterations are 2 s (20 intervals) apart.
spikes() {
    awk -F, -v op="$1" -v pages="$2" -v first="$3" -v tol="$4" -v wtol="${5:-$4}" '
        BEGIN { gap = 2 }
        NR == 1 || $3 <= first { next }
        {
            user = $4; written = $7
            # Inside a spike: more than 1/1024 of the buffer (64 pages of 256 MiB).
            if (user > pages / 1024) {
                if (gap > 1) { n++; u[n] = 0; w[n] = 0 }
                u[n] += user; if (written != "") { w[n] += written; known = 1 }
                gap = 0
            } else gap++
        }
        END {
            if (n != 10) { print "fail spikes=" n; exit }
            for (i = 1; i <= n; i++) {
                d = u[i] - pages; if (d < 0) d = -d
                if (d * 100 / pages > maxe) maxe = d * 100 / pages
                if (known && op == "write" && (pages - w[i]) * 100 / pages > maxw) maxw = (pages - w[i]) * 100 / pages
                if (d > pages * tol / 100) { print "fail spike" i "=" u[i] "/" pages; exit }
                if (known && op == "write" && w[i] < pages * (100 - wtol) / 100) { print "fail written" i "=" w[i]; exit }
                if (known && op == "read" && w[i] > pages / 1024) { print "fail written" i "=" w[i]; exit }
            }
            printf "pass spikes=10 pages=%d maxerr=%.2f%%%s\n", pages, maxe, (known ? (op == "write" ? sprintf(" with-writes maxwritemiss=%.2f%%", maxw) : " with-writes") : " no-writes")
        }'
}
# record_check NAME BACKEND TOL[/WTOL] [OPS [PAGETEST-ARGS [ARGS...]]]: the
# write and the read run (or OPS) with BACKEND and record ARGS, each spike
# within TOL percent (its written pages within WTOL); the buffer is
# $ptsize (256M if unset). With $attempts (default 1), a failed check is
# run again up to that many times in all, and the earlier verdicts are
# printed with the last. With $measure set, the verdict is a measurement:
# it is printed as "PAGESCOPE-MEASURE NAME VERDICT", and is not a check.
record_check() {
    name=$1 backend=$2 tol=${3%/*} wtol=${3#*/} ops=${4:-"write read"} ptargs=$5
    shift 3; [ $# -gt 0 ] && shift; [ $# -gt 0 ] && shift
    tries=${attempts:-1} earlier=""
    while :; do
    verdict=""
    for op in $ops; do
        if ! /pagescope record -q --backend "$backend" --interval 100ms "$@" -o /tmp/r.rec -- \
            /pagetest --size "${ptsize:-256M}" --mode malloc --op $op --iterations 10 --sleep 2s --delay 2s $ptargs \
            > /tmp/rpt.out 2> /tmp/r.err; then
            verdict="fail record-exited:$(head -c 200 /tmp/r.err | tr '\n' ' ')"
            break
        fi
        start=$(field start < /tmp/rpt.out)
        end=$(field end < /tmp/rpt.out)
        pages=$(field pages < /tmp/rpt.out)
        t0=$(/pagescope analyze /tmp/r.rec temporal --format json 2>/dev/null | field start_monotonic_ns)
        it0=$(sed -n 's/.*"index":0,"start_ns":\([0-9]*\).*/\1/p' /tmp/rpt.out | head -1)
        first=$(awk -v a="$it0" -v b="$t0" 'BEGIN { printf "%.0f", a - b }')
        v=$(/pagescope analyze /tmp/r.rec temporal --range "$start-$end" --format csv 2>/dev/null | spikes $op "$pages" "$first" "$tol" "$wtol")
        if [ "$backend" = idle ] && [ "${v%% *}" = pass ]; then
            # The working set over 30 intervals (3 s or more, so some
            # window holds a whole iteration) is the buffer.
            wss=$(/pagescope analyze /tmp/r.rec wss --window 30 --range "$start-$end" --format json 2>/dev/null | field max_window_pages)
            if within 2 "${wss:-0}" "$pages"; then v="$v wss=$wss"; else v="fail wss=${wss:-none}/$pages"; fi
        fi
        case "$v" in
            pass*) verdict="$verdict $op:${v#pass }" ;;
            *)
                verdict="fail $op:$v"
                echo "first iteration at $first ns; the buffer's intervals:"
                /pagescope analyze /tmp/r.rec temporal --range "$start-$end" --format csv 2>&1 | head -150
                break ;;
        esac
    done
    case "$verdict" in fail*) ;; *) break ;; esac
    tries=$((tries - 1))
    [ "$tries" -gt 0 ] || break
    earlier="$earlier (an earlier run: ${verdict#fail })"
    done
    if [ -n "$measure" ]; then
        echo "PAGESCOPE-MEASURE $name ${verdict# }"
        return
    fi
    case "$verdict" in
        fail*) check "$name" fail "${verdict#fail }$earlier" ;;
        *) check "$name" pass "$verdict$earlier" ;;
    esac
}
# The machine's workload for --system: a 64 MiB file in tmpfs read over
# and over with cat (page cache no process maps) while pagetest writes its
# 64 MiB buffer every 50 ms (user pages).
machine_start() {
    dd if=/dev/zero of=/tmp/cache.bin bs=1M count=64 2>/dev/null
    (while :; do cat /tmp/cache.bin > /dev/null; sleep 0.05; done) &
    catpid=$!
    /pagetest --size 64M --mode anon --op write --iterations 100000 --sleep 50ms > /tmp/sp.out &
    sppid=$!
    while ! grep -q '"iteration"' /tmp/sp.out 2>/dev/null; do sleep 0.1; done
}
machine_stop() {
    kill $sppid $catpid
    rm -f /tmp/cache.bin
}
# refused NAME BACKEND OPTION: the backend must refuse, naming OPTION.
refused() {
    if /pagescope record -q --backend "$2" -o /tmp/x.rec --duration 200ms --pid "$sleeper" 2> /tmp/x.err; then
        check "$1" fail "recorded without the interface"
    elif grep -q "$3" /tmp/x.err; then
        check "$1" refused-as-expected "$(head -1 /tmp/x.err)"
    else
        check "$1" fail "$(head -1 /tmp/x.err)"
    fi
}
thp=/sys/kernel/mm/transparent_hugepage/enabled
[ -w $thp ] && echo madvise > $thp
sleep 600 &
sleeper=$!
if [ -e /sys/kernel/mm/page_idle/bitmap ]; then
    record_check idle idle 2
else
    refused idle idle CONFIG_IDLE_PAGE_TRACKING
fi
# numa and hugepages (idle): a pagetest writing its 256 MiB buffer every
# 50 ms, recorded for 9 s at 3 s (a pass takes up to 1.5 s under TCG on a
# busy host, so a 500 ms interval may hold no whole pass; any window
# longer than a pass and its pause sees every page). In each interval that
# referenced the whole buffer (pages of its huge-page regions >= the
# buffer's; the last one may be cut short by --duration), the pages per
# node against the buffer's numa_maps (2%), and all but two of the
# buffer's huge-page regions (126 of its 128 2 MiB ones) referenced in
# every page (the two at its ends may be shared with other mappings).
if [ -e /sys/kernel/mm/page_idle/bitmap ]; then
    /pagetest --size 256M --mode anon --op write --iterations 100000 --sleep 50ms > /tmp/np.out &
    nppid=$!
    while ! grep -q '"iteration"' /tmp/np.out 2>/dev/null; do sleep 0.1; done
    npid=$(field pid < /tmp/np.out)
    nstart=$(field start < /tmp/np.out)
    npages=$(field pages < /tmp/np.out)
    # The huge page's size in KiB (2048 with 4 KiB pages).
    hpkb=$(($(cat /sys/kernel/mm/transparent_hugepage/hpage_pmd_size 2>/dev/null || echo 2097152) / 1024))
    /pagescope record -q --backend idle --interval 3s --duration 9s -o /tmp/n.rec --pid "$npid"
    line=$(grep "^$(printf '%x' "$nstart") " /proc/$npid/numa_maps)
    kill $nppid
    /pagescope analyze /tmp/n.rec hugepages --format csv > /tmp/h.csv 2>/dev/null
    whole=$(awk -F, -v p="$npages" 'NR > 1 && $4 >= p { printf "%s ", $1 }' /tmp/h.csv)
    /pagescope analyze /tmp/n.rec numa --format csv > /tmp/nm.csv 2>/dev/null
    verdict=pass
    detail="whole intervals: ${whole:-none};"
    [ -n "$whole" ] || verdict=fail
    for seq in $whole; do
        for node in $(ls -d /sys/devices/system/node/node* | sed 's/.*node//'); do
            want=$(echo "$line" | tr ' ' '\n' | sed -n "s/^N$node=//p")
            got=$(awk -F, -v s="$seq" -v k="$node" '$1 == s && $2 == k { print $3 }' /tmp/nm.csv)
            within 2 "${got:-0}" "${want:-0}" || { verdict=fail; detail="$detail $seq:N$node=${got:-0}/${want:-0}"; }
        done
    done
    check numa-record $verdict "$detail numa_maps: $(echo "$line" | tr ' ' '\n' | grep '^N' | tr '\n' ' ')"
    full=$(awk -F, -v ws=" $whole" 'NR > 1 && index(ws, " " $1 " ") { printf "%s ", $3 }' /tmp/h.csv)
    bad=$(awk -F, -v ws=" $whole" -v m=$((npages * pkb / hpkb - 2)) 'NR > 1 && index(ws, " " $1 " ") && $3 < m { print $1 }' /tmp/h.csv)
    if [ -n "$whole" ] && [ -z "$bad" ]; then
        check hugepages pass "full regions in whole intervals: $full"
    else
        check hugepages fail "full regions in whole intervals: ${full:-none}"
    fi
fi

# idle with transparent huge pages (THP always): the bitmap tracks a huge
# page by its head, so its 512 pages go by the head's bit. A buffer
# written once and then held must show no references; one written every
# 50 ms, its whole size in an interval (2%; 1 s intervals, so that one
# holds whole passes even on a loaded machine under TCG).
if [ -e /sys/kernel/mm/page_idle/bitmap ] && [ -w $thp ]; then
    echo always > $thp
    /pagetest --size 64M --mode anon --op write --hold > /tmp/th.out &
    thpid=$!
    while ! grep -q '"done"' /tmp/th.out 2>/dev/null; do sleep 0.1; done
    tpid=$(field pid < /tmp/th.out)
    tstart=$(field start < /tmp/th.out)
    tend=$(field end < /tmp/th.out)
    huge=$(awk -v k=$pkb '/^AnonHugePages:/ { s += $2 } END { print s / k }' /proc/$tpid/smaps)
    /pagescope record -q --backend idle --interval 300ms --duration 1500ms -o /tmp/th.rec --pid "$tpid"
    kill $thpid
    quiet=$(/pagescope analyze /tmp/th.rec temporal --range "$tstart-$tend" --format csv 2>/dev/null | awk -F, 'NR > 1 && $4 > m { m = $4 } END { print m + 0 }')
    /pagetest --size 64M --mode anon --op write --iterations 100000 --sleep 50ms > /tmp/tb.out &
    tbpid=$!
    while ! grep -q '"iteration"' /tmp/tb.out 2>/dev/null; do sleep 0.1; done
    bpid=$(field pid < /tmp/tb.out)
    bstart=$(field start < /tmp/tb.out)
    bend=$(field end < /tmp/tb.out)
    /pagescope record -q --backend idle --interval 1s --duration 5s -o /tmp/tb.rec --pid "$bpid"
    kill $tbpid
    busy=$(/pagescope analyze /tmp/tb.rec temporal --range "$bstart-$bend" --format csv 2>/dev/null | awk -F, 'NR > 1 && $4 > m { m = $4 } END { print m + 0 }')
    echo madvise > $thp
    detail="huge=$huge held-max=$quiet busy-max=$busy/$p64"
    if [ "$huge" -gt 0 ] && [ "$quiet" -le 64 ] && within 2 "$busy" $p64; then
        check idle-thp pass "$detail"
    else
        check idle-thp fail "$detail"
    fi
fi

# The machine (idle --system): a 64 MiB file in tmpfs read over and over
# with cat (page cache no process maps) while pagetest writes its 64 MiB
# buffer (user pages): in the intervals in between the first and the last,
# page-cache pages referenced are the file's pages (2%, plus what the
# system itself touches: at most 4 MiB, 1024 pages of 4 KiB), and user
# pages at least the buffer's. Under TCG a sweep of every frame takes
# about a second, so the intervals are 2 s.
if [ -e /sys/kernel/mm/page_idle/bitmap ]; then
    machine_start
    /pagescope record -q --system --backend idle --interval 2s --duration 10s -o /tmp/sys.rec
    machine_stop
    v=$(/pagescope analyze /tmp/sys.rec temporal --format csv 2>/dev/null | awk -F, -v p=$p64 -v s=$p4 '
        NR > 1 { n++; u[n] = $4; c[n] = $5 }
        END {
            if (n < 3) { print "fail intervals=" n; exit }
            for (i = 2; i < n; i++) {
                if (c[i] < p * 0.98 || c[i] > p * 1.02 + s) { print "fail cache" i "=" c[i]; exit }
                if (u[i] < p) { print "fail user" i "=" u[i]; exit }
                d = d " " c[i] "/" u[i]
            }
            print "pass cache/user:" d
        }')
    check idle-system "${v%% *}" "${v#* }"
    # Per process: pagetest's own rows (the referenced frames it maps) are
    # its buffer in every interval in between, and so is its working set
    # over two intervals.
    spstart=$(field start < /tmp/sp.out)
    spend=$(field end < /tmp/sp.out)
    v=$(/pagescope analyze /tmp/sys.rec temporal --pid "$sppid" --range "$spstart-$spend" --format csv 2>/dev/null | awk -F, -v p=$p64 '
        NR > 1 { n++; u[n] = $4 }
        END {
            if (n < 3) { print "fail intervals=" n; exit }
            for (i = 2; i < n; i++) {
                if (u[i] < p * 0.98 || u[i] > p * 1.02) { print "fail pagetest" i "=" u[i]; exit }
                d = d " " u[i]
            }
            print "pass pagetest:" d
        }')
    wss=$(/pagescope analyze /tmp/sys.rec wss --window 2 --pid "$sppid" --range "$spstart-$spend" --format json 2>/dev/null | field max_window_pages)
    case "$v" in pass*) within 2 "${wss:-0}" $p64 || v="fail wss=${wss:-none}/$p64" ;; esac
    check idle-system-per-process "${v%% *}" "${v#* } wss=${wss:-none}"
fi

# damon (vaddr), at pagescope's default settings, held to 10%: DAMON
# checks one page per region every 5 ms and counts a region seen accessed
# in all its resident pages, so it is held where that sampling can see:
# a 64 MiB buffer written over and over (a pass, then 5 ms of sleep),
# recorded at 1 s for 6 s, is the buffer's pages within 10% in every
# interval but the last (cut short by --duration); the same buffer written
# once and then held is at most 1% of it in every interval. Written pages
# (soft-dirty, in the regions seen accessed) are printed.
#
# The memref verification run (10 single passes over a 256 MiB buffer,
# pre-faulted, 2 s apart, recorded at 100 ms) is measured and printed,
# not held: each page is touched once per pass, for an instant, and a
# region is seen only if its sampled page happens to be touched between
# DAMON's clearing and checking its accessed bit. Under TCG on 2026-11-23
# the spikes came out 72% to 86% of the buffer in 4 of 4 runs with
# 100-1000 regions, and with transparent huge pages (a pass in under
# 100 ms) whole iterations were missed in 2 of 4; earlier boots passed
# within 10% now and then (docs/performance.md, "DAMON's error"). With
# pagescope.damon_sweep=MIN-MAX,MIN-MAX... on the kernel's command line
# (PAGESCOPE_DAMON_SWEEP for tests/kernels/run), the write run is
# measured again for each region setting.
#
# On Debian's 6.12 arm64 kernel with 16 KiB pages (arm64-16k) the vaddr
# and paddr runs are measured, not held (damon_held): there, on
# 2026-11-26, one interval of six saw none of the hot buffer (hot2=0, the
# rest exact), and paddr's page cache fell from the file's 4096 pages to
# about 300 after 6 s, in both of two runs; not yet explained. They are
# held on `full` (6.1).
damon=/sys/kernel/mm/damon/admin/kdamonds
# damon_held NAME VERDICT DETAIL: a check, or on arm64-16k a measurement.
damon_held() {
    if [ "$kernel" = arm64-16k ]; then
        echo "PAGESCOPE-MEASURE $1 $2 $3"
    else
        check "$1" "$2" "$3"
    fi
}
if [ -d $damon ]; then
    # damon_run PAGETEST-ARGS: records pagetest (started with
    # PAGETEST-ARGS) with DAMON at 1 s for 6 s, once it has begun; prints
    # "user/written" per interval of its buffer, and the buffer's pages.
    damon_run() {
        # The last run's output goes first: the redirection below happens
        # in the background, and the wait must not find the old lines.
        rm -f /tmp/dh.out
        /pagetest --size 64M --mode anon --op write "$@" > /tmp/dh.out &
        dhpid=$!
        while ! grep -q '"iteration"' /tmp/dh.out 2>/dev/null; do sleep 0.1; done
        dpid=$(field pid < /tmp/dh.out)
        dstart=$(field start < /tmp/dh.out)
        dend=$(field end < /tmp/dh.out)
        /pagescope record -q --backend damon --interval 1s --duration 6s --pid "$dpid" -o /tmp/dh.rec 2> /tmp/dh.err
        kill $dhpid
        echo "$(field pages < /tmp/dh.out) $(/pagescope analyze /tmp/dh.rec temporal --range "$dstart-$dend" --format csv 2>/dev/null |
            awk -F, 'NR > 1 && $1 ~ /^[0-9]+$/ { printf "%s/%s ", $4, $7 }')"
    }
    hot=$(damon_run --iterations 100000000 --sleep 5ms --prefault)
    held=$(damon_run --hold)
    # "PAGES HOT... | PAGES HELD..."
    v=$(echo "$hot" "|" "$held" | awk '{
        pages = $1; n = 0; bad = ""
        for (i = 2; i <= NF && $i != "|"; i++) { split($i, a, "/"); u[++n] = a[1] }
        if (n < 4) bad = " hot-intervals=" n
        for (k = 1; k < n; k++) { d = u[k] - pages; if (d < 0) d = -d; if (d > pages / 10) bad = bad " hot" k "=" u[k] }
        h = 0
        for (i += 2; i <= NF; i++) { split($i, a, "/"); h++; if (a[1] > pages / 100) bad = bad " held" h "=" a[1] }
        if (h < 4) bad = bad " held-intervals=" h
        print (bad == "" ? "pass" : "fail" bad)
    }')
    detail="pages user/written per interval: hot ${hot#* }, held ${held#* } $(head -c 200 /tmp/dh.err | tr '\n' ' ')"
    case "$v" in
        pass) damon_held damon pass "$detail" ;;
        *) damon_held damon fail "${v#fail }; $detail" ;;
    esac
    measure=1
    record_check damon-memref damon 10/100 "write read" --prefault
    for regions in $(sed -n 's/.*pagescope.damon_sweep=\([0-9,-]*\).*/\1/p' /proc/cmdline | tr , ' '); do
        record_check damon-memref-regions-$regions damon 10 write --prefault --damon-regions "$regions"
    done
    measure=
    # The machine (paddr): the idle-system workload for 14 s at 1 s. DAMON
    # adapts its physical regions over the first seconds, and a region
    # holding the hot file pages and cold ones counts whole, so the
    # intervals from 4 s on (but the last) are held by their median:
    # page cache within 10% of the file's pages (plus 4 MiB for what the
    # system itself touches), user pages at least 90% of the buffer's.
    machine_start
    /pagescope record -q --system --backend damon --interval 1s --duration 14s -o /tmp/ds.rec 2> /tmp/ds.err
    machine_stop
    /pagescope analyze /tmp/ds.rec temporal --format csv 2>/dev/null > /tmp/ds.csv
    n=$(awk -F, 'NR > 1 && $2 >= 4000000000 { n++ } END { print n + 0 }' /tmp/ds.csv)
    median() { awk -F, -v k="$1" 'NR > 1 && $2 >= 4000000000 { print $k }' /tmp/ds.csv | sed '$d' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] + 0 }'; }
    cache=$(median 5)
    user=$(median 4)
    all=$(awk -F, 'NR > 1 { printf "%s/%s ", $5, $4 }' /tmp/ds.csv)
    if [ -s /tmp/ds.err ]; then
        damon_held damon-paddr fail "$(head -c 200 /tmp/ds.err | tr '\n' ' ')"
    elif [ "$n" -ge 5 ] && [ "$cache" -ge $((p64 * 9 / 10)) ] && [ "$cache" -le $((p64 * 11 / 10 + p4)) ] && [ "$user" -ge $((p64 * 9 / 10)) ]; then
        damon_held damon-paddr pass "median cache=$cache user=$user; cache/user per interval: $all"
    else
        damon_held damon-paddr fail "median cache=$cache user=$user over $n; cache/user per interval: $all"
    fi
    # Per process: pagetest's pages on the frames of the regions seen
    # accessed, over its buffer, held as the machine's user pages are.
    spstart=$(field start < /tmp/sp.out)
    spend=$(field end < /tmp/sp.out)
    /pagescope analyze /tmp/ds.rec temporal --pid "$sppid" --range "$spstart-$spend" --format csv 2>/dev/null > /tmp/ds.csv
    mine=$(median 4)
    all=$(awk -F, 'NR > 1 { printf "%s ", $4 }' /tmp/ds.csv)
    if [ "$mine" -ge $((p64 * 9 / 10)) ] && [ "$mine" -le $p64 ]; then
        check damon-paddr-per-process pass "median pagetest=$mine; per interval: $all"
    else
        check damon-paddr-per-process fail "median pagetest=$mine; per interval: $all"
    fi
    # A kdamond that pagescope did not create: refused, and left exactly
    # as it was (state, pid, count).
    echo 1 > $damon/nr_kdamonds
    echo 1 > $damon/0/contexts/nr_contexts
    echo vaddr > $damon/0/contexts/0/operations
    echo 1 > $damon/0/contexts/0/targets/nr_targets
    echo "$sleeper" > $damon/0/contexts/0/targets/0/pid_target
    echo on > $damon/0/state
    before="$(cat $damon/nr_kdamonds) $(cat $damon/0/state) $(cat $damon/0/pid)"
    v=refused-as-expected
    for what in "--pid $sleeper" --system; do
        if /pagescope record -q --backend damon --duration 300ms -o /tmp/f.rec $what 2> /tmp/f.err; then
            v=fail
        elif ! grep -q "did not create" /tmp/f.err; then
            v=fail
        fi
    done
    after="$(cat $damon/nr_kdamonds) $(cat $damon/0/state) $(cat $damon/0/pid)"
    [ "$before" = "$after" ] || v=fail
    check damon-foreign $v "before=[$before] after=[$after] $(head -1 /tmp/f.err)"
    echo off > $damon/0/state
    echo 0 > $damon/nr_kdamonds
else
    refused damon damon CONFIG_DAMON_SYSFS
fi

# trace and fault (userfaultfd) are x86_64 only in pagescope.
if [ "$arch" != x86_64 ]; then
    for c in trace trace-move trace-shm trace-attach trace-programs fault; do
        check $c skip "pagescope trace and --backend fault are x86_64 only ($arch)"
    done
else
    # trace and fault: userfaultfd. Kernels before 6.8 (both guests) have no
    # UFFDIO_MOVE, so pages are evicted by copying.
    # trace: pagetest writes its 16 MiB buffer once, then reads it 3 times
    # through a 2 MiB pool: the buffer gets exactly 4 x 4096 references, the
    # first 4096 writes; the reads' checksum (3 x 4096) shows every page came
    # back with its data.
    # With MODE shm the buffer is a memfd: its pages leave by being unmapped
    # and come back on minor faults (UFFDIO_CONTINUE; before 6.4 mapped, then
    # write-protected).
    trace_check() { # NAME EVICT MODE
        if timeout 300 /pagescope trace --evict "$2" --pool 2M -o /tmp/t.trace -- /pagetest --size 16M --mode "$3" --op read --iterations 3 --sleep 0 > /tmp/tr.out 2> /tmp/tr.err; then
            start=$(field start < /tmp/tr.out)
            end=$(field end < /tmp/tr.out)
            pages=$(field pages < /tmp/tr.out)
            sum=$(field checksum < /tmp/tr.out)
            /pagescope analyze /tmp/t.trace refs --range "$start-$end" --format json > /tmp/tr.json 2>&1
            refs=$(field references < /tmp/tr.json)
            writes=$(field writes < /tmp/tr.json)
            distinct=$(field distinct_pages < /tmp/tr.json)
            detail="references=$refs writes=$writes distinct=$distinct checksum=$sum pages=$pages"
            grep -q "no UFFDIO_MOVE" /tmp/tr.err && detail="$detail copying"
            if [ -n "$pages" ] && [ "$refs" = $((4 * pages)) ] && [ "$writes" = "$pages" ] \
                && [ "$distinct" = "$pages" ] && [ "$sum" = $((3 * pages)) ]; then
                check "$1" pass "$detail"
            elif [ "$3" = shm ] && grep -q "nor shared memory on this kernel" /tmp/tr.err \
                && [ "$sum" = $((3 * pages)) ]; then
                check "$1" refused-as-expected "$(grep 'nor shared memory' /tmp/tr.err | head -c 200)"
            else
                check "$1" fail "$detail"
            fi
        elif [ "$2" = move ] && grep -q "feature MOVE" /tmp/tr.err && [ ! -s /tmp/tr.out ]; then
            check "$1" refused-as-expected "$(head -1 /tmp/tr.err)"
        else
            check "$1" fail "$(grep -v '^note:' /tmp/tr.err | tail -2 | tr '\n' ' ' | head -c 400)"
        fi
    }
    trace_check trace auto anon
    trace_check trace-move move anon
    trace_check trace-shm auto shm
    # trace --pid: pagetest fills 4 MiB and waits for a line on a fifo (a
    # blocked read, which must be restarted after the attach); once the
    # tracer is in place, its 3 read passes are logged exactly.
    rm -f /tmp/go && mkfifo /tmp/go
    /pagetest --size 4M --mode anon --op read --iterations 3 --wait-stdin < /tmp/go > /tmp/ap.out &
    appid=$!
    exec 3> /tmp/go
    while ! grep -q ready /tmp/ap.out; do sleep 0.1; done
    timeout 300 /pagescope trace --pool 2M -o /tmp/ap.trace --pid "$appid" 2> /tmp/ap.err &
    trpid=$!
    while ! grep -q "^tracing process" /tmp/ap.err && kill -0 $trpid 2>/dev/null; do sleep 0.1; done
    echo go >&3
    exec 3>&-
    wait $appid
    wait $trpid
    start=$(field start < /tmp/ap.out)
    end=$(field end < /tmp/ap.out)
    pages=$(field pages < /tmp/ap.out)
    sum=$(field checksum < /tmp/ap.out)
    refs=$(/pagescope analyze /tmp/ap.trace refs --range "$start-$end" --format json 2>/dev/null | field references)
    detail="references=$refs checksum=$sum pages=$pages"
    if [ -n "$pages" ] && [ "$refs" = $((3 * pages)) ] && [ "$sum" = $((3 * pages)) ]; then
        check trace-attach pass "$detail"
    else
        check trace-attach fail "$detail $(grep -v '^note:' /tmp/ap.err | tail -2 | tr '\n' ' ' | head -c 300)"
    fi
    # A static shell (busybox) that forks a child per command substitution and
    # pipeline (running sort and md5sum in forked children, without exec),
    # through a pool of 32 pages: the same output traced. Forked children are
    # traced as exactly as their parent, so a sort whose heap is larger than
    # the pool faults on every pass; 3000 lines keep that to a few thousand
    # faults (about 5000 evictions).
    awk 'BEGIN { srand(7); for (i = 0; i < 3000; i++) printf "%08x %d\n", int(rand() * 4294967295), i }' > /tmp/data
    script='for i in 1 2 3 4 5 6 7 8; do x=$(sort /tmp/data | md5sum); echo "$i $x"; done'
    /bin/sh -c "$script" > /tmp/plain.out
    if timeout 300 /pagescope trace -q --pool 128K -o /tmp/sh.trace -- /bin/sh -c "$script" > /tmp/traced.out 2> /tmp/sh.err \
        && cmp -s /tmp/plain.out /tmp/traced.out; then
        check trace-programs pass "busybox sh, sort, md5sum: same output; $(/pagescope analyze /tmp/sh.trace refs --format json 2>/dev/null | field references) references"
    else
        check trace-programs fail "$(head -1 /tmp/sh.err) $(head -c 100 /tmp/traced.out)"
    fi
    # fault: the verification write run, 16 MiB (every boundary copies the
    # buffer out under TCG); the host tests run the read run too.
    ptsize=16M
    record_check fault fault 2 write
    ptsize=
fi

# refs with soft-dirty writes (both x86_64 guest kernels have soft-dirty);
# on arm64, which has no soft-dirty, references alone (writes unknown):
# `arm64 record`.
if [ "$arch" = x86_64 ]; then
    record_check soft-dirty refs 2
else
    record_check record refs 2
fi
# auto: idle where the kernel has it, refs elsewhere.
want=refs; [ -e /sys/kernel/mm/page_idle/bitmap ] && want=idle
/pagescope record --duration 300ms -o /tmp/a.rec --pid "$sleeper" > /dev/null 2> /tmp/auto.err
got=$(sed -n 's/.* with the \([a-z]*\) backend.*/\1/p' /tmp/auto.err)
if [ "$got" = "$want" ]; then check auto pass "$want"; else check auto fail "chose '$got', expected $want: $(grep -v '^note:' /tmp/auto.err | head -2 | tr '\n' ' ' | head -c 300)"; fi
kill $sleeper

kcore_check
case "$kernel" in full* | stock | arm64*) vmcore_check ;; esac

# The interfaces this kernel offers; the host compares them with what the
# kernel's configuration promises.
iface() { if [ -e "$2" ]; then echo "PAGESCOPE-IFACE $1 present"; else echo "PAGESCOPE-IFACE $1 absent"; fi; }
iface idle /sys/kernel/mm/page_idle/bitmap
iface damon /sys/kernel/mm/damon/admin
iface userfaultfd /proc/sys/vm/unprivileged_userfaultfd

kill $ptpid 2>/dev/null
