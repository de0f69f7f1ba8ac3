#!/usr/bin/env python3
"""Compares `snapshot --vmcore` of the full guest's dump with what the
guest printed from its live snapshot (tests/kernels/guest.sh, vmcore).

    vmcore_compare.py CONSOLE PAGESCOPE DUMP-SNAPSHOT

Prints one line, `pass DETAIL` or `fail DETAIL`: the dump's user
processes are the guest's; for each held process RSS and swap equal
the live snapshot's, PSS and USS the live ones with pagescope's own
mappings taken out (PSS to the 4 decimals reports print); the first
pagetest's buffer maps the same frames (count and digest of the sorted
list).
"""
import hashlib
import json
import subprocess
import sys


def main():
    console, pagescope, snap = sys.argv[1:4]
    live, pfns, pids = {}, None, None
    for line in open(console, errors="replace"):
        w = line.split()
        if not w:
            continue
        if w[0] == "PAGESCOPE-VMCORE-LIVE":
            live[int(w[1])] = (int(w[2]), float(w[3]), int(w[4]), int(w[5]))
        elif w[0] == "PAGESCOPE-VMCORE-PFNS":
            pfns = (int(w[1]), int(w[2]), int(w[3]), int(w[4]), w[5])
        elif w[0] == "PAGESCOPE-VMCORE-PIDS":
            pids = sorted(int(p) for p in w[1:])
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
    apid, start, end, count, digest = pfns
    out = subprocess.run(
        [pagescope, "report", "pages", "--input", snap, "--pid", str(apid), "--format", "csv"],
        check=True, capture_output=True, text=True).stdout.splitlines()
    head = out[0].split(",")
    iv, ip = head.index("vaddr"), head.index("pfn")
    frames = sorted(int(c[ip]) for c in (l.split(",") for l in out[1:])
                    if start <= int(c[iv]) < end and c[ip] != "")
    mine = hashlib.md5("".join("%d\n" % f for f in frames).encode()).hexdigest()
    if (len(frames), mine) != (count, digest):
        bad.append("buffer frames: dump %d %s, live %d %s" % (len(frames), mine, count, digest))
    summary = "processes=%d held rss/pss/uss/swap %s; buffer frames=%d" % (
        len(users), " ".join(detail), len(frames))
    print(("fail " + "; ".join(bad) + " | " if bad else "pass ") + summary)


if __name__ == "__main__":
    main()
