"""Every blocking call answers SIGINT (KeyboardInterrupt) within 0.5 s: post into a full
'block' box (with a timeout, or the box's own), post_batch, give_away, receive,
receive_batch, read, receive_into; a post's
slices that time out are not counted. A NaN or negative timeout is a ValueError in every
call that takes one."""
import math
import os
import signal
import sys
import time

import pytest

import shmbox


BLOCKED = r"""
import sys, time
import shmbox
name, what = sys.argv[1], sys.argv[2]
p = shmbox.Producer.attach(name)
assert p.post(b"fill") == "stored"  # a box of capacity 1: full now
o = None
if what in ("give-away", "receive", "receive-batch", "read", "receive-into"):
    o = shmbox.Owner.acquire(name)
if what.startswith("re"):
    o.receive(0)  # empty again
print("ready", flush=True)
sys.stdin.readline()
try:
    if what == "post":
        p.post(b"x", timeout=None)
    elif what == "post-box-default":
        p.post(b"x")  # the box's block_timeout: 60 s
    elif what == "post-batch":
        p.post_batch([b"x", b"y"], timeout=None)
    elif what == "give-away":
        o.give_away(int(sys.argv[3]), timeout=None)  # the test listens and never takes it
    elif what == "receive":
        o.receive(None)
    elif what == "receive-batch":
        o.receive_batch(16, None)
    elif what == "read":
        o.read(16, None)
    elif what == "receive-into":
        o.receive_into(bytearray(o.box.slot_size), None)
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
    sys.exit(0)
print("returned", flush=True)
"""


def _waiting_on_futex(pid, limit=5.0):
    """True once process `pid` sleeps on a futex (/proc/PID/wchan; a kernel that hides it: 'S'):
    the blocking call is waiting, not on its way to it. Bounded by `limit` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/wchan") as f:
                wchan = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if "futex" in wchan or (wchan in ("", "0") and state == "S"):
            return True
        time.sleep(0.002)
    return False


@pytest.mark.parametrize("what", ["post", "post-box-default", "post-batch", "give-away", "receive", "receive-batch",
                                  "read", "receive-into"])
def test_ctrl_c_interrupts_a_blocking_call(box_name, children, what):
    name = box_name()
    shmbox.Box.create(name, capacity=1, overflow="block", block_timeout=60).close()
    listener = shmbox.Heir.listen(name) if what == "give-away" else None
    try:
        c = children([sys.executable, "-c", BLOCKED, name, what, str(os.getpid())])
        c.expect("ready")
        c.send("go")
        assert _waiting_on_futex(c.pid), f"{what}: the child never blocked"
        sent = time.monotonic()
        c.proc.send_signal(signal.SIGINT)
        line = c.line(5.0)  # a generous deadline; the bound is checked below
        assert line.startswith("interrupted"), line
        caught = float(line.split()[1])  # CLOCK_MONOTONIC, the same clock in both processes
        assert caught - sent < 0.5, f"{what}: KeyboardInterrupt {caught - sent:.3f} s after SIGINT"
        code, _, err = c.wait(10)
        assert code == 0, err
    finally:
        if listener is not None:
            listener.close()
    with shmbox.Box.inspect(name) as b:
        c = b.counters()
    assert c["timeouts"] == 0  # the slices' timeouts are not counted: the interrupted post never ended
    assert c["posted"] == c["stored"]


def test_a_sliced_post_that_times_out_counts_once(box_name):
    name = box_name()
    shmbox.Box.create(name, capacity=1, overflow="block").close()
    with shmbox.Producer.attach(name) as p:
        assert p.post(b"fill") == "stored"
        t0 = time.monotonic()
        assert p.post(b"x", timeout=0.6) == "timeout"  # three slices
        assert time.monotonic() - t0 >= 0.55
        assert p.post_batch([b"y", b"z"], timeout=0.3) == (0, "timeout")
    with shmbox.Box.inspect(name) as b:
        c = b.counters()
    assert c["timeouts"] == 2 and c["posted"] == 3, c


# ---- timeouts that mean nothing ----------------------------------------------------------


def _calls(name, owner, producer, heir):
    """Every call that takes a timeout, as (label, fn(timeout))."""
    return [
        ("receive", lambda t: owner.receive(t)),
        ("receive_batch", lambda t: owner.receive_batch(timeout=t)),
        ("read", lambda t: owner.read(timeout=t)),
        ("wait", lambda t: owner.wait(t)),
        ("give_away", lambda t: owner.give_away(1, timeout=t)),
        ("give_away_to_heir", lambda t: owner.give_away_to_heir(0, timeout=t)),
        ("post", lambda t: producer.post(b"x", timeout=t)),
        ("post_batch", lambda t: producer.post_batch([b"x"], timeout=t)),
        ("await_transfer", lambda t: heir.await_transfer(t)),
        ("request_give_away", lambda t: owner.box.request_give_away(1, timeout=t)),
        ("request_give_away_to_heir", lambda t: owner.box.request_give_away_to_heir(0, timeout=t)),
        ("create block_timeout", lambda t: shmbox.Box.create(name + "-x", block_timeout=t)),
        ("create lease", lambda t: shmbox.Box.create(name + "-x", lease=t)),
        ("create spin", lambda t: shmbox.Box.create(name + "-x", spin=t)),
    ]


@pytest.mark.parametrize("bad", [math.nan, -1, -0.001, float("-inf")])
def test_nan_and_negative_timeouts_are_value_errors(box_name, bad):
    name = box_name()
    shmbox.Box.create(name, capacity=1, overflow="block").close()
    with shmbox.Owner.acquire(name) as o, shmbox.Producer.attach(name) as p, shmbox.Heir.listen(name) as h:
        assert p.post(b"fill") == "stored"  # full: a post that did not refuse would wait or time out
        for label, call in _calls(name, o, p, h):
            t0 = time.monotonic()
            with pytest.raises(ValueError) as e:
                call(bad)
            assert time.monotonic() - t0 < 0.2, label
            assert "timeout" in str(e.value) or label.startswith("create"), (label, str(e.value))
        assert o.receive(0).data == b"fill"  # nothing else was posted
        assert o.receive(0) is None
    with shmbox.Box.inspect(name) as b:
        assert b.counters()["timeouts"] == 0
    assert not os.path.exists(f"/dev/shm/shmbox.{name}-x")
