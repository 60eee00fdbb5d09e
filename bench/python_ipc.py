#!/usr/bin/env python3
"""bench/python_ipc.py - two Python processes passing messages: the shmbox package
against multiprocessing.Queue, multiprocessing.Pipe and pyzmq, in one run (issue 31, item 7).

    python3 bench/python_ipc.py [--quick] [--reps R] [--pkg DIR] [--build DIR]

Rows (bench/rows.hpp) on stdout for bench/table.cpp, a readable log on stderr.
--pkg DIR is put first on sys.path: the package as built (-Dpython=enabled),
by default DIR/python of --build.

METHOD. Every measurement runs between two separate processes, each one
started by fork+exec of this interpreter: bench/python_ipc_ends.py (shmbox,
pyzmq), or a multiprocessing 'spawn' Process running its spawned_child (a Queue
or a Pipe cannot be handed to a process started any other way). Handshakes are
lines on a pipe (a Connection for the spawned ones), never sleeps; every wait for a child has a
deadline, after which the children are killed and the run fails. Repetitions
are interleaved: each one runs every configuration, the order reversed on odd
repetitions; rows give the median (min-max) over repetitions, and every ratio
is taken within one repetition. Counts: N = 400 000 (64 B) / 100 000 (4 KiB),
M = 10 000, K = 200 000, 5 repetitions (about 3 minutes on 2 cores); --quick:
2 000 / 1 000, 200, 5 000, 2 repetitions (about 10 s).

  throughput     groups py-tput-64, py-tput-4k: N messages of 64 B / 4 KiB,
                 producer process -> consumer process. The consumer is ready and
                 has received one warm-up message before the go; the time runs
                 from the go (written to the producer) to the consumer's last
                 message (CLOCK_MONOTONIC, the same clock in both processes);
                 the consumer checks the count and the last message's size.
    shmbox-post     Producer.post / Owner.receive(10 s), one message per call
    shmbox-batch    Producer.post_batch(list of 64) / Owner.receive_batch(256, 10 s)
    mp-queue        multiprocessing.Queue() put / get(timeout=10)
    mp-pipe         multiprocessing.Pipe(duplex=False) send_bytes / recv_bytes
    zmq             pyzmq PUSH -> PULL over ipc://, send / recv (HWM 4096 both sides)
    zmq-multipart   the same sockets, send_multipart(64 frames) / recv_multipart:
                    the batch a pyzmq user would write (one call, 64 messages;
                    zmq already batches single sends in its I/O thread)
                 Boxes: capacity 4096, slot_size the message size, overflow 'block' (nothing
                 dropped; a post that times out is posted again).
  round trip     groups py-rtt-64, py-rtt-4k: ping-pong, M timed round trips after
                 M/20 untimed; p50 and p99 in us of one repetition's samples.
    shmbox          two boxes, each side Owner.receive(10 s) on its own, posts to the other
    mp-queue        two Queues;  mp-pipe: two one-way Pipes;  zmq: one PAIR socket pair
  single process group py-api-64: Producer.post of one 64 B message, then
                 Owner.receive(0) of it, K times, in this process (box of 256
                 slots of 64 B, as bench/api.cpp): ns per pair. The C layer's
                 cost is api-64/c, measured by shmbox-bench-api in the same
                 bench/run.sh run (post 256, then receive 256): the table
                 divides the two medians.
Ratio rows (unit x, median over repetitions of each repetition's ratio):
py-tput-*: ratio-post-zmq, ratio-post-mp-queue, ratio-batch-zmq,
ratio-batch-zmq-multipart, ratio-batch-mp-queue (shmbox rate / theirs);
py-rtt-*: ratio-zmq, ratio-mp-pipe, ratio-mp-queue (shmbox p50 / theirs, metric ratio-p50).
A mechanism that cannot run here (pyzmq or shmbox not importable) is a skip row.
What would make a number wrong: other load on the machine (2 cores: both
processes need one each), CPU frequency scaling.
"""
import argparse
import json
import multiprocessing
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from python_ipc_ends import now_ns, spawned_child

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CAPACITY = SLOT = 4096   # the boxes of the two-process rows
TPUT_MECHS = ["shmbox-post", "shmbox-batch", "mp-queue", "mp-pipe", "zmq", "zmq-multipart"]
RTT_MECHS = ["shmbox", "mp-queue", "mp-pipe", "zmq"]
SIZES = [(64, "64"), (4096, "4k")]


# ---- the parent side ------------------------------------------------------------------


class ChildFailed(Exception):
    pass


def baseline_retry(mech, run):
    """run() once; a baseline's (not shmbox's) failed run once more, said on stderr and in
    the row's note (pyzmq's throughput consumer once waited 10 s for a message that never
    came, and a baseline's hiccup should not stop the suite). shmbox's own failures are
    never retried. Returns (what run() returned, the note's addition)."""
    try:
        return run(), ""
    except ChildFailed as e:
        if mech.startswith("shmbox"):
            raise
        print(f"python_ipc: {mech} failed ({e}); running it once more", file=sys.stderr, flush=True)
        return run(), f" (run twice: the first failed: {e})"


class _Popen:
    """A --child started by subprocess (fork+exec): line handshakes over its stdin/stdout."""

    def __init__(self, spec, res, pkg):
        arg = json.dumps({"spec": spec, "res": res, "pkg": pkg})
        self.what = f"{spec['role']} {spec['mech']}"
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "python_ipc_ends.py"), arg],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self.buf = b""

    def expect(self, word, deadline):
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                raise ChildFailed(f"{self.what}: no '{word}' before the deadline")
            chunk = os.read(self.p.stdout.fileno(), 4096)
            if not chunk:
                raise ChildFailed(f"{self.what}: exited (status {self.p.wait()}) before '{word}'")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        line = line.decode()
        if not line.startswith(word):
            raise ChildFailed(f"{self.what}: said '{line}', not '{word}'")
        return line.split()[1:]

    def send(self, word):
        self.p.stdin.write(word.encode() + b"\n")
        self.p.stdin.flush()

    def join(self, deadline):
        try:
            st = self.p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise ChildFailed(f"{self.what}: did not exit before the deadline")
        if st != 0:
            raise ChildFailed(f"{self.what}: exit status {st}")

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


class _Spawned:
    """A multiprocessing 'spawn' child (fork+exec of this interpreter): handshakes over a Connection."""

    def __init__(self, spec, res, ctx):
        self.what = f"{spec['role']} {spec['mech']}"
        self.conn, child_conn = ctx.Pipe()
        self.p = ctx.Process(target=spawned_child, args=(spec, child_conn, res), daemon=True)
        self.p.start()
        child_conn.close()

    def expect(self, word, deadline):
        if not self.conn.poll(max(0.0, deadline - time.monotonic())):
            raise ChildFailed(f"{self.what}: no '{word}' before the deadline")
        try:
            line = self.conn.recv()
        except EOFError:
            self.p.join(1)
            raise ChildFailed(f"{self.what}: exited (status {self.p.exitcode}) before '{word}'")
        if not line.startswith(word):
            raise ChildFailed(f"{self.what}: said '{line}', not '{word}'")
        return line.split()[1:]

    def send(self, word):
        self.conn.send(word)

    def join(self, deadline):
        self.p.join(max(0.1, deadline - time.monotonic()))
        if self.p.exitcode is None:
            raise ChildFailed(f"{self.what}: did not exit before the deadline")
        if self.p.exitcode != 0:
            raise ChildFailed(f"{self.what}: exit status {self.p.exitcode}")

    def kill(self):
        if self.p.is_alive():
            self.p.kill()
            self.p.join()


class Bench:
    def __init__(self, args, shmbox_mod):
        self.args = args
        self.shmbox = shmbox_mod
        self.ctx = multiprocessing.get_context("spawn")
        self.tmp = tempfile.mkdtemp(prefix="shmbox-pyipc-")
        self.tag = f"pyipc-{os.getpid()}"
        self.serial = 0
        self.boxes = set()

    def _box(self, capacity=CAPACITY, slot=SLOT):
        self.serial += 1
        name = f"bench-{self.tag}-{self.serial}"
        self.shmbox.Box.remove(name, missing_ok=True)
        self.boxes.add(name)
        self.shmbox.Box.create(name, capacity=capacity, slot_size=slot, overflow="block").close()
        return name

    def cleanup(self):
        for name in self.boxes:
            try:
                self.shmbox.Box.remove(name, missing_ok=True)
            except Exception as e:
                print(f"python_ipc: could not remove box {name}: {e}", file=sys.stderr)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _resources(self, mech, kind, size=SLOT):
        """What both ends share: made here, before the children start. A box's slots are the
        message size (as a user sizes them at creation; 4 KiB slots for 64 B messages would
        make a 16 MiB box whose first touches, not the messages, a short run measures)."""
        if mech.startswith("shmbox"):
            return ({"boxes": [self._box(slot=size), self._box(slot=size)]} if kind == "rtt"
                    else {"box": self._box(slot=size)})
        if mech.startswith("zmq"):
            self.serial += 1
            return {"endpoint": f"ipc://{self.tmp}/{self.serial}.sock"}
        if mech == "mp-queue":
            return {"queues": [self.ctx.Queue(), self.ctx.Queue()]} if kind == "rtt" else {"queue": self.ctx.Queue()}
        if mech == "mp-pipe":
            if kind == "rtt":
                r1, w1 = self.ctx.Pipe(duplex=False)  # ping -> echo
                r2, w2 = self.ctx.Pipe(duplex=False)  # echo -> ping
                return {"echo": (r1, w2), "ping": (r2, w1)}
            return {"pipe": self.ctx.Pipe(duplex=False)}
        raise ValueError(mech)

    def _start(self, spec, res):
        if spec["mech"].startswith("mp-"):
            if spec["mech"] == "mp-pipe" and "pipe" in res:  # each end gets its own Connection
                res = {"conn": res["pipe"][0 if spec["role"] == "consumer" else 1]}
            return _Spawned(spec, res, self.ctx)
        return _Popen(spec, res, self.args.pkg)

    def _release(self, res):
        for name in res.get("boxes", []) + ([res["box"]] if "box" in res else []):
            self.shmbox.Box.remove(name, missing_ok=True)
            self.boxes.discard(name)
        for c in res.get("pipe", ()) + res.get("echo", ()) + res.get("ping", ()):
            c.close()

    def _deadline(self, n, per_msg_us):
        return time.monotonic() + 30 + n * per_msg_us / 1e6

    def throughput(self, mech, size, n):
        """Messages per second, producer process -> consumer process."""
        res = self._resources(mech, "tput", size)
        kids = []
        try:
            deadline = self._deadline(n, 500)
            spec = {"mech": mech, "size": size, "n": n}
            consumer = self._start(dict(spec, role="consumer"), res)
            kids.append(consumer)
            consumer.expect("ready", deadline)
            producer = self._start(dict(spec, role="producer"), res)
            kids.append(producer)
            producer.expect("ready", deadline)
            consumer.expect("warm", deadline)
            t0 = now_ns()
            producer.send("go")
            got, t1, last = map(int, consumer.expect("done", deadline))
            producer.expect("done", deadline)
            producer.join(deadline)
            consumer.join(deadline)
            if got != n or last != size:
                raise ChildFailed(f"{mech} {size} B: received {got} of {n}, the last {last} B")
            return n / ((t1 - t0) / 1e9)
        finally:
            for k in kids:
                k.kill()
            self._release(res)

    def round_trip(self, mech, size, n):
        """(p50, p99) in us of n ping-pongs."""
        res = self._resources(mech, "rtt", size)
        kids = []
        try:
            deadline = self._deadline(n, 2000)
            spec = {"mech": mech, "size": size, "n": n, "warm": max(1, n // 20)}
            echo = self._start(dict(spec, role="echo"), res)
            kids.append(echo)
            echo.expect("ready", deadline)
            ping = self._start(dict(spec, role="ping"), res)
            kids.append(ping)
            ping.expect("ready", deadline)
            ping.send("go")
            got, p50, p99 = ping.expect("done", deadline)
            echo.expect("done", deadline)
            ping.join(deadline)
            echo.join(deadline)
            if int(got) != n:
                raise ChildFailed(f"{mech} {size} B: {got} of {n} round trips")
            return float(p50), float(p99)
        finally:
            for k in kids:
                k.kill()
            self._release(res)

    def post_receive(self, n):
        """ns per Producer.post + Owner.receive(0) of one 64 B message, in this process."""
        shmbox = self.shmbox
        name = self._box(capacity=256, slot=64)
        try:
            with shmbox.Producer.attach(name) as p, shmbox.Owner.acquire(name) as o:
                post, receive, stored = p.post, o.receive, shmbox.PostStatus.STORED
                msg = b"p" * 64
                t0 = time.perf_counter_ns()
                for i in range(n):
                    st = post(msg)
                    if st is not stored and st != "stored":
                        raise RuntimeError(f"post {i}: {st}")
                    if receive(0) is None:
                        raise RuntimeError(f"receive {i}: nothing")
                return (time.perf_counter_ns() - t0) / n
        finally:
            shmbox.Box.remove(name, missing_ok=True)
            self.boxes.discard(name)


class Rows:
    def __init__(self):
        self.values = {}  # (group, mech, metric) -> [values], unit, note
        self.skips = []

    def add(self, group, mech, metric, value, unit, note=""):
        self.values.setdefault((group, mech, metric), ([], unit, note))[0].append(value)

    def skip(self, group, mech, why):
        self.skips.append((group, mech, why.replace("\t", " ").replace("\n", " ")))

    def print(self):
        for (group, mech, metric), (v, unit, note) in self.values.items():
            print(f"row\t{group}\t{mech}\t{metric}\t{statistics.median(v):.10g}\t{min(v):.10g}\t{max(v):.10g}"
                  f"\t{unit}\t{note}")
        for group, mech, why in self.skips:
            print(f"skip\t{group}\t{mech}\t{why}")
        sys.stdout.flush()


NOTES = {
    "shmbox-post": "Producer.post / Owner.receive(10 s)",
    "shmbox-batch": "post_batch(64) / receive_batch(256)",
    "mp-queue": "multiprocessing.Queue put / get",
    "mp-pipe": "multiprocessing.Pipe send_bytes / recv_bytes",
    "zmq": "pyzmq PUSH/PULL ipc://, send / recv",
    "zmq-multipart": "pyzmq send_multipart(64) / recv_multipart",
}
RTT_NOTES = {
    "shmbox": "two boxes, post / Owner.receive(10 s) each side",
    "mp-queue": "two multiprocessing.Queues, put / get",
    "mp-pipe": "two multiprocessing.Pipe(duplex=False), send_bytes / recv_bytes",
    "zmq": "pyzmq PAIR ipc://, send / recv",
}
TPUT_RATIOS = [("ratio-post-zmq", "shmbox-post", "zmq"), ("ratio-post-mp-queue", "shmbox-post", "mp-queue"),
               ("ratio-batch-zmq", "shmbox-batch", "zmq"),
               ("ratio-batch-zmq-multipart", "shmbox-batch", "zmq-multipart"),
               ("ratio-batch-mp-queue", "shmbox-batch", "mp-queue")]
RTT_RATIOS = [("ratio-zmq", "zmq"), ("ratio-mp-pipe", "mp-pipe"), ("ratio-mp-queue", "mp-queue")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny counts: a smoke test (seconds)")
    ap.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default 5; --quick: 2)")
    ap.add_argument("--pkg", default=None, help="the directory holding shmbox/ (default: BUILD/python)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="the build directory")
    args = ap.parse_args()
    args.pkg = os.path.abspath(args.pkg or os.path.join(args.build, "python"))
    sys.path.insert(0, args.pkg)
    reps = args.reps or (2 if args.quick else 5)
    n_tput = {64: 2_000, 4096: 1_000} if args.quick else {64: 400_000, 4096: 100_000}
    n_rtt = 200 if args.quick else 10_000
    n_api = 5_000 if args.quick else 200_000

    rows = Rows()
    shmbox_mod, zmq_why, shmbox_why = None, "", ""
    try:
        import shmbox as shmbox_mod
        if not hasattr(shmbox_mod, "Box"):  # a folder shmbox/ without the package (a build under way)
            raise ImportError(f"{list(shmbox_mod.__path__)} holds no package")
    except Exception as e:
        shmbox_mod, shmbox_why = None, f"shmbox not importable from {args.pkg} ({type(e).__name__}: {e})"
    try:
        import zmq
        zmq_version = f"pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}"
    except Exception as e:
        zmq_why = f"pyzmq not importable in {sys.executable} ({type(e).__name__}: {e}; Debian: python3-zmq)"
        zmq_version = "pyzmq missing"
    why = {m: shmbox_why for m in TPUT_MECHS + RTT_MECHS if m.startswith("shmbox")}
    why.update({m: zmq_why for m in ("zmq", "zmq-multipart")})
    print(f"python_ipc: Python {sys.version.split()[0]} ({sys.executable}), shmbox from {args.pkg} "
          f"({getattr(shmbox_mod, '__file__', 'missing')}), {zmq_version}; {reps} repetitions, "
          f"{n_tput[64]} / {n_tput[4096]} messages, {n_rtt} round trips, {n_api} post+receive",
          file=sys.stderr, flush=True)

    configs = []
    for size, tag in SIZES:
        configs += [("tput", m, size, f"py-tput-{tag}") for m in TPUT_MECHS]
    for size, tag in SIZES:
        configs += [("rtt", m, size, f"py-rtt-{tag}") for m in RTT_MECHS]
    configs.append(("api", "shmbox", 64, "py-api-64"))
    for kind, mech, size, group in configs:
        if why.get(mech):
            rows.skip(group, mech, why[mech])

    bench = Bench(args, shmbox_mod)
    try:
        for rep in range(reps):
            order = configs if rep % 2 == 0 else list(reversed(configs))
            got = {}
            for kind, mech, size, group in order:
                if why.get(mech):
                    continue
                t = time.monotonic()
                if kind == "tput":
                    rate, retried = baseline_retry(mech, lambda: bench.throughput(mech, size, n_tput[size]))
                    got[(group, mech)] = rate
                    rows.add(group, mech, "rate", rate / 1000, "kmsg/s", NOTES[mech] + retried)
                    shown = f"{rate / 1000:9.1f} kmsg/s"
                elif kind == "rtt":
                    (p50, p99), retried = baseline_retry(mech, lambda: bench.round_trip(mech, size, n_rtt))
                    got[(group, mech)] = p50
                    rows.add(group, mech, "p50", p50, "us", RTT_NOTES[mech] + retried)
                    rows.add(group, mech, "p99", p99, "us", RTT_NOTES[mech] + retried)
                    shown = f"p50 {p50:7.1f} us, p99 {p99:7.1f} us"
                else:
                    ns = bench.post_receive(n_api)
                    rows.add(group, mech, "post-recv-ns", ns, "ns", "Producer.post + Owner.receive(0), one process")
                    shown = f"{ns:9.0f} ns per post + receive"
                print(f"  rep {rep + 1}/{reps} {group:10} {mech:14} {shown}   ({time.monotonic() - t:.1f} s)",
                      file=sys.stderr, flush=True)
            for _, tag in SIZES:
                g = f"py-tput-{tag}"
                for name, a, b in TPUT_RATIOS:
                    if (g, a) in got and (g, b) in got:
                        rows.add(g, name, "ratio", got[(g, a)] / got[(g, b)], "x", f"{a} rate / {b} rate")
                g = f"py-rtt-{tag}"
                for name, b in RTT_RATIOS:
                    if (g, "shmbox") in got and (g, b) in got:
                        rows.add(g, name, "ratio-p50", got[(g, "shmbox")] / got[(g, b)], "x", f"shmbox p50 / {b} p50")
    finally:
        if shmbox_mod is not None:
            bench.cleanup()
        else:
            shutil.rmtree(bench.tmp, ignore_errors=True)
    for _, tag in SIZES:
        for name, a, b in TPUT_RATIOS:
            if why.get(a) or why.get(b):
                rows.skip(f"py-tput-{tag}", name, why.get(a) or why.get(b))
        for name, b in RTT_RATIOS:
            if why.get("shmbox") or why.get(b):
                rows.skip(f"py-rtt-{tag}", name, why.get("shmbox") or why.get(b))
    rows.print()


if __name__ == "__main__":
    try:
        main()
    except ChildFailed as e:
        print(f"python_ipc: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
