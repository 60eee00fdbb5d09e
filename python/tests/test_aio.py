"""shmbox.aio: 100 boxes served by one event loop without a thread or polling (a producer
process posts into all of them), await receive with a timeout, async for, and await post
into a full 'block' box that an owner process drains."""
import asyncio
import os
import sys
import threading
import time

import pytest

import shmbox
from shmbox import aio

FEED = r"""
import sys, shmbox
names = sys.argv[2:]
per = int(sys.argv[1])
ps = [shmbox.Producer.attach(n) for n in names]
print("ready", flush=True)
sys.stdin.readline()
for i in range(per):
    for n, p in zip(names, ps):
        assert p.post(b"%s:%d" % (n.encode(), i), timeout=30) == "stored"
print("done", flush=True)
"""


def _cpu_seconds():
    t = os.times()
    return t.user + t.system


def test_one_loop_serves_100_boxes_fed_by_another_process(box_name, children):
    names = [box_name(f"b{i}") for i in range(100)]
    per = 20
    for n in names:
        shmbox.Box.create(n, capacity=8, overflow="block", block_timeout=30).close()
    threads_before = threading.active_count()

    async def main():
        owners = [aio.Owner.acquire(n) for n in names]
        got = {n: [] for n in names}

        async def consume(name, owner):
            async for msg in owner:
                got[name].append(msg.data)
                if len(got[name]) == per:
                    return

        try:
            feeder = children([sys.executable, "-c", FEED, per, *names])
            feeder.expect("ready")
            tasks = [asyncio.ensure_future(consume(n, o)) for n, o in zip(names, owners)]
            await asyncio.sleep(0.2)  # every task is parked on its notify_fd now
            idle_from = _cpu_seconds()
            await asyncio.sleep(0.5)
            idle_cpu = _cpu_seconds() - idle_from  # nothing posted yet: nothing may spin
            assert threading.active_count() == threads_before  # no thread per box
            feeder.send("go")
            await asyncio.wait_for(asyncio.gather(*tasks), 120)
            feeder.expect("done")
        finally:
            for o in owners:
                o.close()
        return got, idle_cpu

    got, idle_cpu = asyncio.run(main())
    for n in names:
        assert got[n] == [b"%s:%d" % (n.encode(), i) for i in range(per)], n
    assert idle_cpu < 0.2, f"100 idle owners used {idle_cpu:.3f} s of CPU in 0.5 s"


def test_one_notify_group_serves_20_boxes_fed_by_another_process(box_name, children):
    """aio.NotifyGroup: 20 owners behind one descriptor, awaited in the loop; every message of a
    producer process arrives, in order per box; ready() with a timeout returns [] in time."""
    names = [box_name(f"g{i}") for i in range(20)]
    per = 30
    for n in names:
        shmbox.Box.create(n, capacity=8, overflow="block", block_timeout=30).close()

    async def main():
        owners = [shmbox.Owner.acquire(n) for n in names]
        got = {n: [] for n in names}
        try:
            with aio.NotifyGroup() as group:
                for tag, o in enumerate(owners):
                    group.join(o, tag)
                with pytest.raises(shmbox.InvalidArgument):
                    owners[0].notify_fd()  # a member has none
                t = time.monotonic()
                assert await group.ready(0.2) == []  # nothing posted: nothing fired
                assert time.monotonic() - t >= 0.19
                feeder = children([sys.executable, "-c", FEED, per, *names])
                feeder.expect("ready")
                feeder.send("go")
                deadline = time.monotonic() + 120
                while any(len(v) < per for v in got.values()):
                    assert time.monotonic() < deadline, {n: len(v) for n, v in got.items()}
                    for tag in await group.ready(10):
                        o = owners[tag]
                        o.wait(0)
                        got[names[tag]] += [m.data for m in o.receive_batch(64, 0)]
                        o.notify()
                feeder.expect("done")
        finally:
            for o in owners:
                o.close()
        return got

    got = asyncio.run(main())
    for n in names:
        assert got[n] == [b"%s:%d" % (n.encode(), i) for i in range(per)], n


def test_await_receive_times_out_then_wakes(box_name):
    name = box_name()
    shmbox.Box.create(name, capacity=4).close()

    async def main():
        with aio.Owner.acquire(name) as o, shmbox.Producer.attach(name) as p:
            t = time.monotonic()
            assert await o.receive(0.2) is None
            assert time.monotonic() - t >= 0.19
            loop = asyncio.get_running_loop()
            loop.call_later(0.1, p.post, b"late")
            m = await o.receive(10)
            assert m.data == b"late"
            p.post(b"a")
            p.post(b"b")
            assert [m.data for m in await o.receive_batch(8, 1)] == [b"a", b"b"]
            with pytest.raises(ValueError):
                await o.receive(-1)

    asyncio.run(main())


def test_await_post_into_a_full_block_box(box_name, children):
    name = box_name()
    shmbox.Box.create(name, capacity=2, overflow="block", block_timeout=30).close()
    drain = ("import shmbox, sys\n"
             "o = shmbox.Owner.acquire(sys.argv[1])\n"
             "print('owned', flush=True)\n"
             "sys.stdin.readline()\n"
             "print(' '.join(o.receive(30).data.decode() for _ in range(6)), flush=True)\n")
    c = children([sys.executable, "-c", drain, name])
    c.expect("owned")

    async def main():
        async with aio.Producer.attach(name) as p:
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            tick = asyncio.ensure_future(ticker())
            for i in range(2):
                assert await p.post(str(i).encode()) == "stored"
            post = asyncio.ensure_future(p.post(b"2"))
            await asyncio.sleep(0.3)
            assert not post.done() and ticks >= 10  # the loop runs while the post waits for room
            c.send("go")
            assert await asyncio.wait_for(post, 30) == "stored"
            r = await p.post_batch([b"3", b"4", b"5"])
            assert r.stored == 3
            tick.cancel()

    asyncio.run(main())
    assert c.line(30) == "0 1 2 3 4 5"
