#!/usr/bin/env python3
"""drgn's side of bench/vmcore.sh: the work `pagescope snapshot --vmcore`
does on a dump, as directly as drgn's API allows.

    vmcore_drgn.py DUMP VMLINUX

Every process (thread group leaders; threads share its mm), every VMA of
its mm (range, flags), and every present page of every VMA: its frame
(a page-table walk, in drgn's C code) and its struct page's flags word
(read at vmemmap + pfn * sizeof(struct page)). Prints the processes,
VMAs and present pages counted, and a digest of the (pid, address, pfn,
flags) of every present page, then the seconds spent opening the dump
and walking it.
"""
import hashlib
import struct
import sys
import time

import drgn
from drgn import FaultError
from drgn.helpers.linux.mm import for_each_vma, pfn_to_page
from drgn.helpers.linux.pid import for_each_task

try:
    # The C helper behind drgn.helpers.linux.mm.follow_phys, without the
    # Object it wraps each result in.
    from _drgn import _linux_helper_follow_phys
except ImportError:
    _linux_helper_follow_phys = None


def translator(prog, mm):
    """addr -> physical address in mm, raising FaultError if not present."""
    if _linux_helper_follow_phys is not None:
        pgd = mm.pgd
        return lambda addr: _linux_helper_follow_phys(prog, pgd, addr)
    from drgn.helpers.linux.mm import follow_phys
    return lambda addr: follow_phys(mm, addr).value_()


def main():
    dump, vmlinux = sys.argv[1:3]
    t0 = time.monotonic()
    prog = drgn.Program()
    prog.set_core_dump(dump)
    prog.load_debug_info([vmlinux])
    page_type = prog.type("struct page")
    page_size = drgn.sizeof(page_type)
    flags_off = drgn.offsetof(page_type, "flags")
    vmemmap = pfn_to_page(prog, 0).value_()
    t1 = time.monotonic()
    procs = vmas = pages = 0
    digest = hashlib.md5()
    read_u64 = prog.read_u64
    for task in for_each_task(prog):
        if task.pid.value_() != task.tgid.value_():
            continue
        procs += 1
        mm = task.mm
        if not mm:
            continue
        pid = task.pid.value_()
        follow_phys = translator(prog, mm)
        for vma in for_each_vma(mm):
            vmas += 1
            start, end = vma.vm_start.value_(), vma.vm_end.value_()
            _flags = vma.vm_flags.value_()
            for addr in range(start, end, 4096):
                try:
                    phys = follow_phys(addr)
                except FaultError:
                    continue
                pfn = phys >> 12
                try:
                    flags = read_u64(vmemmap + pfn * page_size + flags_off)
                except FaultError:
                    flags = 0
                pages += 1
                digest.update(struct.pack("<IQQQ", pid, addr, pfn, flags))
    t2 = time.monotonic()
    print("processes %d vmas %d present_pages %d digest %s" % (procs, vmas, pages, digest.hexdigest()[:16]))
    print("open_s %.3f walk_s %.3f" % (t1 - t0, t2 - t1))


if __name__ == "__main__":
    main()
