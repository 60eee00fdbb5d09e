#!/usr/bin/env python3
"""bench/api_python.py NAME ROUNDS - the Python side of bench/api.cpp.

Posts 256 messages of 64 bytes into box NAME and receives them (one call
each, checking each sequence number), ROUNDS times, through the Python
package (python/shmbox, over the C API); prints ns per message (post +
receive). Exit 77 (skip) when the package cannot be imported here; the
package is the one built at $SHMBOX_PY_DIR (default build/python)."""
import os
import struct
import sys
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The package as built (-Dpython=enabled): $SHMBOX_PY_DIR, else build/python.
sys.path.insert(0, os.environ.get("SHMBOX_PY_DIR") or os.path.join(root, "build", "python"))
try:
    import shmbox  # noqa: E402
except Exception as e:  # the package or the library is missing: not measurable here
    print(f"python package not importable: {e}")
    sys.exit(77)

name, rounds = sys.argv[1], int(sys.argv[2])
batch, size = 256, 64
pad = b"p" * (size - 8)
with shmbox.Producer.attach(name) as p, shmbox.Owner.acquire(name) as o:
    msgs = [struct.pack("<Q", i) + pad for i in range(batch)]
    want = 0
    t0 = time.perf_counter_ns()
    for r in range(rounds):
        for m in msgs:
            p.post(m)
        for _ in range(batch):
            got = o.receive(timeout=0)
            if got is None or len(got.data) != size or struct.unpack_from("<Q", got.data)[0] != want % batch:
                print(f"message {want} lost or out of order: {got!r}")
                sys.exit(1)
            want += 1
    t = time.perf_counter_ns() - t0
print(t / (rounds * batch))
