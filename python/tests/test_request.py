"""Request/reply from Python (docs/request-reply.md): shmbox.Requester, Owner.reply, aio.Requester.
The service is another Python process; it is killed between its reply and its commit."""
import asyncio
import sys

import pytest

import shmbox
from shmbox import aio

SERVICE = r"""
import sys, shmbox
o = shmbox.Owner.acquire(sys.argv[1])
print("owned", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == "serve":          # receive and answer N requests
        n, k = int(cmd[1]), 0
        while k < n:
            m = o.receive(timeout=10)
            if m is None:
                break
            if m.reply_to is not None:
                o.reply(m, b"re:" + m.data)
                k += 1
        print("served", k, flush=True)
    elif cmd[0] == "read-reply":   # read one, answer it, do not commit
        ms = o.read(max=1, timeout=10)
        print("replied", o.reply(ms[0], b"re:" + ms[0].data), flush=True)
"""


def _service(children, name):
    s = children([sys.executable, "-c", SERVICE, name])
    s.expect("owned")
    return s


def test_call_wait_and_await(box_name, children):
    name = box_name()
    shmbox.Box.create(name, capacity=16, slot_size=128).close()
    service = _service(children, name)
    with shmbox.Requester.attach(name) as r:
        assert r.max_request_size == 128 - 40
        service.send("serve 3")
        assert r.call(b"a", timeout=10) == b"re:a"
        t = r.ask(b"b")
        assert r.wait(t, timeout=10) == b"re:b"

        async def main():
            async with aio.Requester.attach(name) as ar:
                return await ar.call(b"c", timeout=10)

        assert asyncio.run(main()) == b"re:c"
        service.expect("served 3")
        st = r.stats()
        assert st["asked"] == 2 and st["replied"] == 2 and st["duplicates"] == 0


def test_an_owner_killed_after_its_reply_and_before_its_commit(box_name, children):
    name = box_name()
    shmbox.Box.create(name, capacity=16, slot_size=128).close()
    service = _service(children, name)
    with shmbox.Requester.attach(name) as r:
        t = r.ask(b"q")
        service.send("read-reply")
        service.expect("replied ok")
        service.kill()
        assert r.wait(t, timeout=10) == b"re:q"
        with shmbox.Owner.acquire(name) as heir:
            (m,) = heir.read(max=4, timeout=5)
            assert m.data == b"q" and m.redelivered and m.answered
            assert heir.reply(m, b"again") == shmbox.ReplyStatus.ALREADY_REPLIED
            heir.commit()
        assert r.stats()["duplicates"] == 0
        # The box's reply counters, every owner so far: the killed one's reply, the heir's skipped one.
        with shmbox.Box.open(name) as b:
            info = b.info()
        assert info["replies"] == {"sent": 1, "lost": 0, "skipped": 1}
        assert not info["reply_box"]
        mine = [n for n in shmbox.Box.list() if n.startswith(name + ".r")]
        assert len(mine) == 1
        with shmbox.Box.open(mine[0], any_owner=True) as rb:
            assert rb.info()["reply_box"]


def test_peek_shows_a_request_as_its_owner_receives_it(box_name):
    name = box_name()
    with shmbox.Box.create(name, capacity=16, slot_size=128) as b, shmbox.Requester.attach(name) as r:
        r.ask(b"hello")
        with shmbox.Producer.attach(name) as p:
            p.post(b"plain")
        seen = b.peek()
        assert [(m.data, m.envelope) for m in seen] == [(b"hello", "request"), (b"plain", "")]


def test_timeout_then_late_reply_is_counted_not_delivered(box_name):
    name = box_name()
    with shmbox.Box.create(name, capacity=16, slot_size=128), shmbox.Requester.attach(name) as r:
        t1 = r.ask(b"slow")
        assert r.wait(t1, timeout=0.02) is None
        with shmbox.Owner.acquire(name) as o:
            m = o.receive(timeout=0)
            assert m.reply_to is not None and not m.answered
            assert o.reply(m, b"late") == "ok"
            t2 = r.ask(b"next")
            assert o.reply(o.receive(timeout=0), b"re:next") == "ok"
            assert r.wait(t2, timeout=10) == b"re:next"
            assert r.stats()["late"] == 1
            p = shmbox.Producer.attach(name)
            p.post(b"plain")
            plain = o.receive(timeout=0)
            assert plain.reply_to is None
            with pytest.raises(shmbox.InvalidArgument):
                o.reply(plain, b"x")
            p.close()
