#!/usr/bin/env python3
"""bench/python_rate.py - what a message costs from Python (the shmbox package as built: its compiled module)
next to the same work done by the C++ programs.

    python3 bench/python_rate.py [--count N] [--reps R] [--size B] [--build DIR]

METHOD. Every row moves --count messages of --size bytes (default 200 000 of
64 B) through a box of 4096 slots, policy reject (a refused post is retried),
and reports the best of --reps runs (default 3) in ns per message and
messages per second:

  ctypes floor          one trivial C call (shmbox_box_depth) through ctypes:
                        the toll of every call from Python
  py post               Producer.post, one process, nothing receiving
                        (the box is drained between runs, not timed)
  py post_batch(64)     Producer.post_batch of 64 messages
  py receive            Owner.receive(0) of a full box, one process
  py receive_batch(256) Owner.receive_batch(256, 0)
  py -> py              a Python producer process, a Python owner process at once:
                        wall time from the go to the owner's last message
  C++ -> py             the C++ helper's producer (shmbox-test-helper produce), Python owner
  py -> C++             a Python producer, the C++ helper's consumer
  C++ -> C++            the helper's producer and consumer: the baseline

The cross-process rows count process start-up only before the go (each side
prints "ready"/"owned" first); the Python producer makes its messages (in
the helper's format: id, seq, pattern, which the C++ consumer checks)
before the go too, as the C++ one makes each in a few ns. What would make a number wrong: a box too
small (the producer then spins on 'full' and the row measures the owner),
CPU frequency scaling, and other load on the 2 cores (run it on an idle
machine; the spread of the reps is printed).

Needs the package built at DIR/python (-Dpython=enabled) and SHMBOX_HELPER
(default DIR/tests/shmbox-test-helper); DIR is --build (default build/).
"""
import argparse
import os
import subprocess
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    helper = os.environ.get("SHMBOX_HELPER") or os.path.join(args.build, "tests", "shmbox-test-helper")
    pkg = os.path.join(args.build, "python")  # the package as built (-Dpython=enabled)
    sys.path.insert(0, pkg)
    os.environ["PYTHONPATH"] = pkg + os.pathsep + os.environ.get("PYTHONPATH", "")
    import shmbox

    n, size = args.count, args.size
    name = f"bench-py-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    msg = b"x" * size
    rows = []

    def row(label, fn):
        times = []
        for _ in range(args.reps):
            times.append(fn())
        best = min(times)
        rows.append((label, best / n * 1e9, n / best, (max(times) - best) / best * 100 if best else 0))
        print(f"  {label:24} {best / n * 1e9:10.0f} ns/msg", file=sys.stderr, flush=True)

    shmbox.Box.create(name, capacity=4096, slot_size=max(size, 16)).close()
    try:
        box = shmbox.Box.open(name)
        producer = shmbox.Producer.attach(name)
        owner = shmbox.Owner.acquire(name)

        def drain():
            while owner.receive_batch(4096, 0):
                pass

        def floor():
            t = time.perf_counter()
            for _ in range(n):
                box.depth
            return time.perf_counter() - t

        def post_only():
            # chunks of 4096 (the capacity), draining between chunks untimed
            total = 0.0
            left = n
            while left:
                k = min(left, 4096)
                t = time.perf_counter()
                post = producer.post
                for _ in range(k):
                    post(msg)
                total += time.perf_counter() - t
                drain()
                left -= k
            return total

        def post_batch():
            total = 0.0
            left = n
            chunk = [msg] * 64
            while left:
                k = min(left, 4096)
                t = time.perf_counter()
                for _ in range(k // 64):
                    producer.post_batch(chunk)
                total += time.perf_counter() - t
                drain()
                left -= k
            return total

        def fill(k):
            producer.post_batch([msg] * k)

        def receive_one():
            total = 0.0
            left = n
            while left:
                k = min(left, 4096)
                fill(k)
                t = time.perf_counter()
                recv = owner.receive
                for _ in range(k):
                    recv(0)
                total += time.perf_counter() - t
                left -= k
            return total

        def receive_batch():
            total = 0.0
            left = n
            while left:
                k = min(left, 4096)
                fill(k)
                t = time.perf_counter()
                got = 0
                while got < k:
                    got += len(owner.receive_batch(256, 0))
                total += time.perf_counter() - t
                left -= k
            return total

        row("ctypes floor (1 call)", floor)
        row("py post", post_only)
        row("py post_batch(64)", post_batch)
        row("py receive", receive_one)
        row("py receive_batch(256)", receive_batch)
        producer.close()
        owner.close()
        box.close()

        py_producer = ("import shmbox, sys\n"
                       "n, size = int(sys.argv[2]), int(sys.argv[3])\n"
                       "p = shmbox.Producer.attach(sys.argv[1]); post = p.post\n"
                       "pad = lambda i: bytes(((131 + i * 7 + k) & 0xFF) for k in range(16, size))\n"
                       "msgs = [(1).to_bytes(8, 'little') + i.to_bytes(8, 'little') + pad(i) for i in range(n)]\n"
                       "print('ready', flush=True); sys.stdin.readline()\n"
                       "for m in msgs:\n"
                       "    while not post(m).stored: pass\n"
                       "print('done', flush=True)\n")
        py_owner = ("import shmbox, sys, time\n"
                    "n = int(sys.argv[2])\n"
                    "o = shmbox.Owner.acquire(sys.argv[1])\n"
                    "print('owned', flush=True)\n"
                    "got = 0\n"
                    "while got < n:\n"
                    "    b = o.receive_batch(256, 10)\n"
                    "    if not b: sys.exit('timeout')\n"
                    "    got += len(b)\n"
                    "print('got', got, flush=True)\n")

        def cross(producer_cmd, owner_cmd):
            def run():
                o = subprocess.Popen(owner_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                assert o.stdout.readline().startswith("owned"), "owner did not start"
                p = subprocess.Popen(producer_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                assert p.stdout.readline().startswith("ready"), "producer did not start"
                t = time.perf_counter()
                p.stdin.write("go\n")
                p.stdin.flush()
                last = o.stdout.readline()
                took = time.perf_counter() - t
                assert last.startswith(("got", "done got=")), last
                p.communicate(timeout=60)
                o.communicate(timeout=60)
                return took
            return run

        py = [sys.executable, "-c"]
        cpp_producer = [helper, "produce", name, "1", str(n), "--retry", "--size", str(max(size, 16))]
        cpp_owner = [helper, "consume", name, str(n), "10000"]
        row("py -> py (processes)", cross(py + [py_producer, name, str(n), str(max(size, 16))],
                                          py + [py_owner, name, str(n)]))
        if os.access(helper, os.X_OK):
            row("C++ -> py", cross(cpp_producer, py + [py_owner, name, str(n)]))
            row("py -> C++", cross(py + [py_producer, name, str(n), str(max(size, 16))], cpp_owner))
            row("C++ -> C++ (baseline)", cross(cpp_producer, cpp_owner))
        else:
            print(f"  (no helper at {helper}: the C++ rows are skipped)", file=sys.stderr)
    finally:
        shmbox.Box.remove(name, missing_ok=True)

    print(f"\nshmbox from Python: {n} messages of {size} B, best of {args.reps} "
          f"(library {shmbox.version()}, Python {sys.version.split()[0]})")
    print(f"{'row':26}{'ns/msg':>10}{'msg/s':>14}{'spread':>9}")
    for label, ns, rate, spread in rows:
        print(f"{label:26}{ns:10.0f}{rate:14,.0f}{spread:8.0f}%")
    base = {label: ns for label, ns, _, _ in rows}
    if "C++ -> C++ (baseline)" in base:
        b = base["C++ -> C++ (baseline)"]
        print("ratios to C++ -> C++: " + ", ".join(
            f"{label} {ns / b:.1f}x" for label, ns, _, _ in rows if "->" in label and "baseline" not in label))


if __name__ == "__main__":
    main()
