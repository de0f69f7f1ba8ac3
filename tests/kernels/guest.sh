#!/bin/sh
# Checks run inside a guest kernel. Each prints one line
#   PAGESCOPE-CHECK <check> <pass|fail|refused-as-expected|skip> <detail>
# which tests/kernels/run collects from the serial console.
kernel=$1
check() { echo "PAGESCOPE-CHECK $1 $2 $3"; }

# within PCT A B: A within PCT percent of B (or one page).
within() {
    awk -v a="$2" -v b="$3" -v p="$1" 'BEGIN { d = a - b; if (d < 0) d = -d; t = b * p / 100; if (t < 1) t = 1; exit !(d <= t) }'
}

# snapshot: a held pagetest buffer, snapshotted; its RSS and PSS in the
# processes report against the guest kernel's smaps_rollup.
/pagetest --size 64M --mode anon --op write --hold > /tmp/pt.out &
ptpid=$!
while ! grep -q '"done"' /tmp/pt.out 2>/dev/null; do sleep 0.1; done
pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' /tmp/pt.out | head -1)
if /pagescope snapshot -q -o /tmp/s.snap; then
    line=$(/pagescope report processes --input /tmp/s.snap --pid "$pid" --format csv 2>/dev/null | sed -n 2p)
    rss=$(echo "$line" | cut -d, -f3)
    pss=$(echo "$line" | cut -d, -f4)
    krss=$(awk '/^Rss:/ { print $2 / 4 }' /proc/$pid/smaps_rollup)
    kpss=$(awk '/^Pss:/ { print $2 / 4 }' /proc/$pid/smaps_rollup)
    if within 1 "$rss" "$krss" && within 1 "$pss" "$kpss"; then
        check snapshot pass "rss=$rss/$krss pss=$pss/$kpss"
    else
        check snapshot fail "rss=$rss/$krss pss=$pss/$kpss"
    fi
    user=$(/pagescope report total --input /tmp/s.snap --format csv 2>/dev/null | awk -F, '$1 == "user_pages" { print $2 }')
    if [ -n "$user" ] && [ "$user" -ge 16384 ]; then
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
    free=$(/pagescope report physmap --format json 2>/dev/null | sed -n 's/.*"free_pages": \([0-9]*\).*/\1/p' | head -1)
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

# The interfaces this kernel offers; the host compares them with what the
# kernel's configuration promises.
iface() { if [ -e "$2" ]; then echo "PAGESCOPE-IFACE $1 present"; else echo "PAGESCOPE-IFACE $1 absent"; fi; }
iface idle /sys/kernel/mm/page_idle/bitmap
iface damon /sys/kernel/mm/damon/admin
iface userfaultfd /proc/sys/vm/unprivileged_userfaultfd

kill $ptpid 2>/dev/null
