#!/usr/bin/env python3
"""Compares `snapshot --vmcore` of a guest's dump with what the
guest printed from its live snapshot (tests/kernels/guest.sh, vmcore).

    vmcore_compare.py CONSOLE PAGESCOPE DUMP-SNAPSHOT

Prints one line, `pass DETAIL` or `fail DETAIL`: the dump's user
processes are the guest's; for each held process RSS and swap equal
the live snapshot's, PSS and USS the live ones with pagescope's own
mappings taken out (PSS to the 4 decimals reports print); the first
pagetest's buffer maps the same frames (count and digest of the sorted
list) with the same pagemap flags, kpageflags and kpagecount (a
digest of every page's); and a held process has pages in swap (so that
swap is compared), at the same swap types and offsets; `report total`
gives user pages, and meminfo's figures from the dump's vm_stat counters
as the guest's /proc/meminfo, printed just before the dump, gives them
(MemTotal equal, the others within 1% of it); `report physmap` (both
snapshots taken with --physmap) classes as many frames, and each class
within 1% of them of the live snapshot's count (the dump is taken a few
seconds after the live snapshot, whose own pagescope has exited since).
"""
import hashlib
import json
import subprocess
import sys


def main():
    console, pagescope, snap = sys.argv[1:4]
    live, pfns, pids, swapdev, swapped_entries = {}, None, None, None, None
    physmap, meminfo = None, None
    for line in open(console, errors="replace"):
        w = line.split()
        if not w:
            continue
        if w[0] == "PAGESCOPE-VMCORE-LIVE":
            live[int(w[1])] = (int(w[2]), float(w[3]), int(w[4]), int(w[5]))
        elif w[0] == "PAGESCOPE-VMCORE-PFNS":
            pfns = (int(w[1]), int(w[2]), int(w[3]), int(w[4]), w[5], w[6])
        elif w[0] == "PAGESCOPE-VMCORE-PIDS":
            pids = sorted(int(p) for p in w[1:])
        elif w[0] == "PAGESCOPE-VMCORE-SWAPPED":
            swapped_entries = (int(w[1]), int(w[2]), w[3])
        elif w[0] == "PAGESCOPE-VMCORE-PHYSMAP":
            physmap = {k: int(v) for k, v in (x.split("=") for x in w[1:])}
        elif w[0] == "PAGESCOPE-VMCORE-MEMINFO":
            meminfo = {k: int(v) for k, v in (x.split("=") for x in w[1:])}
        elif w[0] == "PAGESCOPE-VMCORE-SWAP":
            swapdev = w[1]
        elif w[0] == "PAGESCOPE-VMCORE-LIVE-FAILED":
            print("fail the live snapshot failed: " + " ".join(w[1:]))
            return
    if not live or pfns is None or pids is None:
        print("fail the guest printed no live figures")
        return
    rep = json.loads(subprocess.run(
        [pagescope, "report", "processes", "--input", snap, "--format", "json"],
        check=True, capture_output=True, text=True).stdout)
    rows = {p["pid"]: p for p in rep["processes"]}
    bad = []
    users = sorted(p for p, r in rows.items() if not r["kernel_thread"])
    if users != pids:
        bad.append("processes: dump %s, guest %s" % (users, pids))
    detail = []
    for pid, (rss, pss, uss, swap) in sorted(live.items()):
        r = rows.get(pid)
        if r is None:
            bad.append("pid %d missing" % pid)
            continue
        got = (r["rss_pages"], r["pss_pages"], r["uss_pages"], r["swap_pages"])
        detail.append("%d:%s/%s/%s/%s" % (pid, got[0], round(got[1], 3), got[2], got[3]))
        if (got[0], got[2], got[3]) != (rss, uss, swap) or abs(got[1] - pss) > 1e-4:
            bad.append("pid %d rss/pss/uss/swap dump %s live %s" % (pid, got, (rss, pss, uss, swap)))
    # Swap must be there to be compared.
    swapped = max((l[3] for l in live.values()), default=0)
    if swapdev in (None, "none"):
        bad.append("the guest could not switch swap on")
    elif swapped == 0:
        bad.append("no held process has pages in swap")
    apid, start, end, count, digest, rows_digest = pfns
    out = subprocess.run(
        [pagescope, "report", "pages", "--input", snap, "--pid", str(apid), "--format", "csv"],
        check=True, capture_output=True, text=True).stdout.splitlines()
    head = out[0].split(",")
    iv, ip = head.index("vaddr"), head.index("pfn")
    im, ik, ic = head.index("pagemap"), head.index("kpageflags"), head.index("count")
    cells = [c for c in (l.split(",") for l in out[1:])
             if start <= int(c[iv]) < end and c[ip] != ""]
    frames = sorted(int(c[ip]) for c in cells)
    mine = hashlib.md5("".join("%d\n" % f for f in frames).encode()).hexdigest()
    if (len(frames), mine) != (count, digest):
        bad.append("buffer frames: dump %d %s, live %d %s" % (len(frames), mine, count, digest))
    rows = sorted("%s,%s,%s,%s" % (c[ip], c[im], c[ik], c[ic]) for c in cells)
    mine_rows = hashlib.md5("".join(r + "\n" for r in rows).encode()).hexdigest()
    if mine_rows != rows_digest:
        bad.append("buffer pages' pagemap flags, kpageflags or kpagecount differ (%s: %s)" % (
            mine_rows, " ".join(rows[:3])))
    if swapped_entries is None:
        bad.append("the guest printed no swap entries")
    else:
        dpid, n, digest = swapped_entries
        out = subprocess.run(
            [pagescope, "report", "pages", "--input", snap, "--pid", str(dpid), "--format", "csv"],
            check=True, capture_output=True, text=True).stdout.splitlines()
        head = out[0].split(",")
        iv, it, io = head.index("vaddr"), head.index("swap_type"), head.index("swap_offset")
        entries = sorted("%s,%s,%s" % (c[iv], c[it], c[io])
                         for c in (l.split(",") for l in out[1:]) if c[it] != "")
        mine = hashlib.md5("".join(e + "\n" for e in entries).encode()).hexdigest()
        if (len(entries), mine) != (n, digest):
            bad.append("swap entries of pid %d: dump %d %s, live %d %s" % (dpid, len(entries), mine, n, digest))
    # The total view: user pages from the pages; meminfo's figures from
    # the dump's vm_stat counters against the guest's /proc/meminfo,
    # printed just before the dump.
    total = json.loads(subprocess.run(
        [pagescope, "report", "total", "--input", snap, "--format", "json"],
        check=True, capture_output=True, text=True).stdout)
    if total["user_pages"] is None:
        bad.append("total: no user_pages")
    mem = compare_meminfo(total, meminfo, bad)
    phys = compare_physmap(pagescope, snap, physmap, bad)
    summary = "processes=%d held rss/pss/uss/swap %s; buffer frames=%d; %s; %s" % (
        len(users), " ".join(detail), len(frames), mem, phys)
    print(("fail " + "; ".join(bad) + " | " if bad else "pass ") + summary)


def compare_meminfo(total, meminfo, bad):
    """The total view's meminfo figures, read from the dump's vm_stat
    counters, against the guest's /proc/meminfo: MemTotal equal, the rest
    within 1% of MemTotal (the guest's last commands ran between the two);
    returns a summary."""
    if not meminfo:
        bad.append("the guest printed no meminfo")
        return "no meminfo"
    kpp = total["page_size"] // 1024
    m = lambda *keys: sum(meminfo.get(k, 0) for k in keys) // kpp
    pairs = [
        ("mem_total_pages", m("MemTotal")),
        ("free_pages", m("MemFree")),
        ("page_cache_pages", m("Cached", "Buffers")),
        ("shmem_pages", m("Shmem")),
        ("kernel_slab_pages", m("SReclaimable", "SUnreclaim")),
        ("kernel_page_table_pages", m("PageTables", "SecPageTables")),
        ("kernel_stack_pages", m("KernelStack")),
    ]
    allowed = m("MemTotal") // 100
    out = []
    for key, live in pairs:
        dump = total.get(key)
        out.append("%s %s/%s" % (key.replace("_pages", ""), dump, live))
        if dump is None or abs(dump - live) > (0 if key == "mem_total_pages" else allowed):
            bad.append("meminfo %s: dump %s, live %s" % (key, dump, live))
    return "meminfo dump/live " + " ".join(out)


def compare_physmap(pagescope, snap, live, bad):
    """The dump's physmap classes against the live ones: the same frames,
    each class within 1% of them; returns a summary."""
    if not live or "frames" not in live:
        bad.append("the guest printed no physmap")
        return "physmap not compared"
    p = subprocess.run([pagescope, "report", "physmap", "--input", snap, "--format", "json"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        bad.append("physmap of the dump: " + p.stderr.strip()[:200])
        return "physmap not compared"
    dump = json.loads(p.stdout)
    frames = live["frames"]
    if dump["frames"] != frames:
        bad.append("physmap frames: dump %d, live %d" % (dump["frames"], frames))
    worst, moved, parts = (None, 0), 0, []
    for key in sorted(k for k in live if k.endswith("_pages")):
        d, l = dump.get(key), live[key]
        if d is None:
            bad.append("physmap of the dump has no %s" % key)
            continue
        diff = abs(d - l)
        moved += diff
        if diff > worst[1]:
            worst = (key[:-6], diff)
        if diff > frames / 100:
            bad.append("physmap %s: dump %d, live %d (more than 1%% of %d frames apart)" % (
                key[:-6], d, l, frames))
        if l or d:
            parts.append("%s %d/%d" % (key[:-6], d, l))
    return "physmap dump/live %s; frames classed apart at least %d (%.3f%%), most in %s (%d)" % (
        " ".join(parts), moved // 2, 100.0 * moved / 2 / max(frames, 1), worst[0], worst[1])


if __name__ == "__main__":
    main()
