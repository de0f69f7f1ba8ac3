#!/usr/bin/env python3
"""Dumps a guest's memory through QMP, then lets the guest go on.

    qmp.py QMP-SOCKET DUMP-FILE CONTROL-SOCKET CONSOLE

Runs `dump-guest-memory` (ELF, paging off: physical memory, with the
guest's VMCOREINFO note when qemu has `-device vmcoreinfo`); qemu stops
the guest while it writes. Then writes "go" to the guest's second serial
port (CONTROL-SOCKET), where tests/kernels/guest.sh waits for it, once a
second until the guest's CONSOLE says it went on (a line the guest's
serial port gets before it reads is lost), for at most two minutes.
"""
import json
import socket
import sys
import time


def main():
    qmp, out, ctl, console = sys.argv[1:5]
    s = socket.socket(socket.AF_UNIX)
    s.connect(qmp)
    f = s.makefile("rw")
    json.loads(f.readline())  # the greeting

    def cmd(name, args=None):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        f.write(json.dumps(msg) + "\n")
        f.flush()
        while True:
            r = json.loads(f.readline())
            if "return" in r or "error" in r:
                return r

    cmd("qmp_capabilities")
    r = cmd("dump-guest-memory", {"paging": False, "protocol": "file:" + out})
    c = socket.socket(socket.AF_UNIX)
    c.connect(ctl)
    for _ in range(120):
        c.sendall(b"go\n")
        time.sleep(1)
        with open(console, "rb") as f:
            if b"PAGESCOPE-VMCORE-RESUMED" in f.read():
                break
    c.close()
    if "error" in r:
        print("dump-guest-memory: %s" % r["error"].get("desc"), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
