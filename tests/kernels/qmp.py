#!/usr/bin/env python3
"""Dumps a guest's memory through QMP, then lets the guest go on.

    qmp.py QMP-SOCKET DUMP-FILE CONTROL-SOCKET

Runs `dump-guest-memory` (ELF, paging off: physical memory, with the
guest's VMCOREINFO note when qemu has `-device vmcoreinfo`); qemu stops
the guest while it writes. Then writes "go" to the guest's second serial
port (CONTROL-SOCKET), where tests/kernels/guest.sh waits for it.
"""
import json
import socket
import sys


def main():
    qmp, out, ctl = sys.argv[1:4]
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
    c.sendall(b"go\n")
    c.close()
    if "error" in r:
        print("dump-guest-memory: %s" % r["error"].get("desc"), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
