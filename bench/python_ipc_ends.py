#!/usr/bin/env python3
"""bench/python_ipc_ends.py - the child processes of bench/python_ipc.py: one end
(producer, consumer, echo or ping) of one mechanism (shmbox, multiprocessing.Queue,
multiprocessing.Pipe, pyzmq), with the handshake lines its parent waits for.

    python3 bench/python_ipc_ends.py JSON     # started by python_ipc.py (shmbox, pyzmq)

The multiprocessing ends run in 'spawn' children (spawned_child), as a Queue or
a Pipe can only be handed to those. Every receive has a timeout where the
mechanism has one (10 s); the parent's deadline kills what hangs anyway.
A child says, in order: 'ready' (set up; a producer has also sent its warm-up
message), 'warm' (a consumer got it), then 'done ...' (a consumer: count,
CLOCK_MONOTONIC ns of its last message, size of the last message; a ping:
round trips, p50 us, p99 us). A producer or a ping waits for 'go' after 'ready'.
"""
import json
import sys
import time

RECV_TIMEOUT = 10.0       # seconds a consumer waits for one message before it fails
BATCH = 64                # messages per post_batch / send_multipart
RECV_BATCH = 256          # receive_batch's max
CAPACITY = 4096           # the boxes' capacity; zmq's high-water marks


def now_ns():
    """CLOCK_MONOTONIC: one clock for every process of the machine."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _shmbox_post(p):
    """post(m) that insists: a 'block' box's post times out after its block_timeout (1 s)."""
    import shmbox
    post, stored = p.post, shmbox.PostStatus.STORED

    def retry(m, st):
        for _ in range(30):
            if st == "stored":
                return
            st = post(m)
        raise RuntimeError(f"post: '{st}' for 30 tries")

    def send(m):
        st = post(m)
        if st is not stored:
            retry(m, st)
    return send


def _shmbox_post_batch(p):
    post_batch = p.post_batch

    def send_batch(ms):
        r = post_batch(ms)
        tries = 0
        while r.stored < len(ms):
            tries += 1
            if tries > 30:
                raise RuntimeError(f"post_batch: '{r.status}' for 30 tries")
            ms = ms[r.stored:]
            r = post_batch(ms)
    return send_batch


def producer_loop(mech, res, msg, n):
    """Returns produce(k): sends k copies of msg, in the mechanism's way."""
    if mech in ("shmbox-post", "shmbox-batch"):
        import shmbox
        p = shmbox.Producer.attach(res["box"])
        if mech == "shmbox-post":
            send = _shmbox_post(p)

            def produce(k):
                for _ in range(k):
                    send(msg)
        else:
            send_batch = _shmbox_post_batch(p)
            chunk = [msg] * BATCH

            def produce(k):
                while k >= BATCH:
                    send_batch(chunk)
                    k -= BATCH
                if k:
                    send_batch([msg] * k)
        return produce, p.close
    if mech in ("zmq", "zmq-multipart"):
        import zmq
        ctx = zmq.Context()
        s = ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.SNDHWM, CAPACITY)
        s.connect(res["endpoint"])
        if mech == "zmq":
            send = s.send

            def produce(k):
                for _ in range(k):
                    send(msg)
        else:
            send_multipart, chunk = s.send_multipart, [msg] * BATCH

            def produce(k):
                while k >= BATCH:
                    send_multipart(chunk)
                    k -= BATCH
                if k:
                    send_multipart([msg] * k)
        return produce, lambda: (s.close(linger=10_000), ctx.term())
    if mech == "mp-queue":
        put = res["queue"].put

        def produce(k):
            for _ in range(k):
                put(msg)
        return produce, lambda: (res["queue"].close(), res["queue"].join_thread())
    if mech == "mp-pipe":
        send_bytes = res["conn"].send_bytes

        def produce(k):
            for _ in range(k):
                send_bytes(msg)
        return produce, res["conn"].close
    raise ValueError(mech)


def consumer_loop(mech, res):
    """Returns consume(k) -> (received, size of the last message), and close."""
    if mech in ("shmbox-post", "shmbox-batch"):
        import shmbox
        o = shmbox.Owner.acquire(res["box"])
        if mech == "shmbox-post":
            receive = o.receive

            def consume(k):
                got, m = 0, None
                while got < k:
                    m = receive(RECV_TIMEOUT)
                    if m is None:
                        raise TimeoutError(f"receive: nothing for {RECV_TIMEOUT} s after {got} messages")
                    got += 1
                return got, len(m.data)
        else:
            receive_batch = o.receive_batch

            def consume(k):
                got, b = 0, None
                while got < k:
                    b = receive_batch(RECV_BATCH, RECV_TIMEOUT)
                    if not b:
                        raise TimeoutError(f"receive_batch: nothing for {RECV_TIMEOUT} s after {got} messages")
                    got += len(b)
                return got, len(b[-1].data)
        return consume, o.close
    if mech in ("zmq", "zmq-multipart"):
        import zmq
        ctx = zmq.Context()
        s = ctx.socket(zmq.PULL)
        s.setsockopt(zmq.RCVHWM, CAPACITY)
        s.setsockopt(zmq.RCVTIMEO, int(RECV_TIMEOUT * 1000))  # zmq.Again after that
        s.bind(res["endpoint"])
        if mech == "zmq":
            recv = s.recv

            def consume(k):
                got, m = 0, b""
                while got < k:
                    m = recv()
                    got += 1
                return got, len(m)
        else:
            recv_multipart = s.recv_multipart

            def consume(k):
                got, frames = 0, [b""]
                while got < k:
                    frames = recv_multipart()
                    got += len(frames)
                return got, len(frames[-1])
        return consume, lambda: (s.close(linger=0), ctx.term())
    if mech == "mp-queue":
        get = res["queue"].get

        def consume(k):
            got, m = 0, b""
            while got < k:
                m = get(True, RECV_TIMEOUT)  # queue.Empty after that
                got += 1
            return got, len(m)
        return consume, lambda: None
    if mech == "mp-pipe":
        recv_bytes = res["conn"].recv_bytes  # no timeout of its own: the parent's deadline kills it

        def consume(k):
            got, m = 0, b""
            while got < k:
                m = recv_bytes()
                got += 1
            return got, len(m)
        return consume, res["conn"].close
    raise ValueError(mech)


def rtt_end(mech, res, role):
    """One end of a ping-pong: (send(m), recv() -> bytes, close)."""
    if mech == "shmbox":
        import shmbox
        o = shmbox.Owner.acquire(res["boxes"][0 if role == "echo" else 1])
        p = shmbox.Producer.attach(res["boxes"][1 if role == "echo" else 0])
        receive = o.receive

        def recv():
            m = receive(RECV_TIMEOUT)
            if m is None:
                raise TimeoutError(f"receive: nothing for {RECV_TIMEOUT} s")
            return m.data
        return _shmbox_post(p), recv, lambda: (p.close(), o.close())
    if mech == "zmq":
        import zmq
        ctx = zmq.Context()
        s = ctx.socket(zmq.PAIR)
        s.setsockopt(zmq.RCVTIMEO, int(RECV_TIMEOUT * 1000))
        (s.bind if role == "echo" else s.connect)(res["endpoint"])
        return s.send, s.recv, lambda: (s.close(linger=1000), ctx.term())
    if mech == "mp-queue":
        inq, outq = (res["queues"][0], res["queues"][1]) if role == "echo" else (res["queues"][1], res["queues"][0])
        return outq.put, lambda: inq.get(True, RECV_TIMEOUT), lambda: (outq.close(), outq.join_thread())
    if mech == "mp-pipe":
        r, w = res["echo"] if role == "echo" else res["ping"]
        return w.send_bytes, r.recv_bytes, lambda: (r.close(), w.close())
    raise ValueError(mech)


def child_main(link, spec, res):
    """A child's whole life: set up, say 'ready', work, say 'done ...'. `link` talks to the parent."""
    role, mech, size = spec["role"], spec["mech"], spec["size"]
    msg = b"m" * size
    if role == "producer":
        produce, close = producer_loop(mech, res, msg, spec["n"])
        produce(1)  # the warm-up message (connects, faults pages in)
        link.say("ready")
        if link.hear() != "go":
            raise RuntimeError("no go")
        produce(spec["n"])
        close()
        link.say("done")
    elif role == "consumer":
        consume, close = consumer_loop(mech, res)
        link.say("ready")
        consume(1)
        link.say("warm")
        got, last = consume(spec["n"])
        t1 = now_ns()
        close()
        link.say(f"done {got} {t1} {last}")
    elif role == "echo":
        send, recv, close = rtt_end(mech, res, role)
        link.say("ready")
        for _ in range(spec["n"] + spec["warm"]):
            send(recv())
        close()
        link.say("done")
    elif role == "ping":
        send, recv, close = rtt_end(mech, res, role)
        link.say("ready")
        if link.hear() != "go":
            raise RuntimeError("no go")
        clock = time.perf_counter_ns
        samples = []
        for i in range(spec["n"] + spec["warm"]):
            t0 = clock()
            send(msg)
            m = recv()
            t = clock() - t0
            if len(m) != size:
                raise RuntimeError(f"round trip {i}: {len(m)} bytes came back, not {size}")
            if i >= spec["warm"]:
                samples.append(t)
        close()
        samples.sort()
        q = lambda f: samples[min(len(samples) - 1, int(f * len(samples)))] / 1000  # nearest rank, us
        link.say(f"done {len(samples)} {q(0.50)} {q(0.99)}")
    else:
        raise ValueError(role)


class _LineLink:
    """A --child's link: lines on stdout (to the parent), stdin (from it)."""

    def say(self, line):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def hear(self):
        return sys.stdin.readline().strip()


class _ConnLink:
    """A spawned child's link: strings over a multiprocessing Connection."""

    def __init__(self, conn):
        self.conn = conn

    def say(self, line):
        self.conn.send(line)

    def hear(self):
        return self.conn.recv()


def spawned_child(spec, conn, res):
    """The target of a multiprocessing 'spawn' Process (mp-queue, mp-pipe)."""
    try:
        child_main(_ConnLink(conn), spec, res)
    except BaseException as e:
        print(f"python_ipc child {spec['role']} {spec['mech']}: {type(e).__name__}: {e}", file=sys.stderr)
        try:
            conn.send(f"failed {type(e).__name__}: {e}")
        except Exception:
            pass
        sys.exit(1)


def main():
    c = json.loads(sys.argv[1])
    sys.path.insert(0, c["pkg"])
    try:
        child_main(_LineLink(), c["spec"], c["res"])
    except BaseException as e:
        print(f"python_ipc child {c['spec']['role']} {c['spec']['mech']}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
