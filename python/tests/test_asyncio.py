"""(d) An asyncio loop wakes on the owner's notify_fd when a producer (C++ or Python) posts."""
import asyncio
import select
import subprocess

import pytest

import shmbox


def test_add_reader_wakes_on_post(box_name, cli):
    """loop.add_reader(owner.notify_fd(), ...) runs when the CLI (C++) posts, then when a Python producer does."""
    name = box_name()
    shmbox.Box.create(name, capacity=16).close()

    async def main():
        loop = asyncio.get_running_loop()
        got = []
        arrived = asyncio.Event()
        with shmbox.Owner.acquire(name) as owner:
            fd = owner.notify_fd()

            def on_readable():
                if owner.wait(0).kind != "notified":
                    return
                while (m := owner.receive(0)) is not None:
                    got.append(m.data)
                arrived.set()
                owner.notify()  # one-shot: arm again

            owner.notify()
            assert owner.mode == "notify"
            loop.add_reader(fd, on_readable)
            try:
                assert select.select([fd], [], [], 0)[0] == []  # nothing posted yet: not readable
                proc = await asyncio.create_subprocess_exec(cli, "post", name, "from-cli")
                assert await asyncio.wait_for(proc.wait(), 30) == 0
                await asyncio.wait_for(arrived.wait(), 10)  # woken by the CLI's post alone
                assert got == [b"from-cli"]
                arrived.clear()
                with shmbox.Producer.attach(name) as p:
                    assert p.post(b"py-1") == "stored"
                while len(got) < 2:
                    await asyncio.wait_for(arrived.wait(), 10)
                    arrived.clear()
            finally:
                loop.remove_reader(fd)
        return got

    assert asyncio.run(main()) == [b"from-cli", b"py-1"]


def test_wait_notified_and_active_with_filter(box_name):
    """notify/active/passive in one process: wait() reports notified, then a filtered delivery."""
    name = box_name()
    shmbox.Box.create(name, capacity=16).close()
    with shmbox.Owner.acquire(name) as owner, shmbox.Producer.attach(name) as p:
        owner.notify()
        assert owner.wait(0.05).kind == "none"
        p.post(b"a")
        ev = owner.wait(5)
        assert ev.kind == shmbox.EventKind.NOTIFIED
        assert owner.mode == "passive"  # one-shot
        assert owner.receive(0).data == b"a"
        for m in (b"keep-1", b"drop-me", b"KEEP-2", b"rewrite"):
            p.post(m)
        owner.active(filter=lambda d: b"new" if d == b"rewrite" else not d.startswith(b"drop"))
        ev = owner.wait(5)
        assert ev.kind == "delivered"
        assert [m.data for m in ev.messages] == [b"keep-1", b"KEEP-2", b"new"]
        assert ev.dropped == 1
        assert owner.counters()["filtered"] == 1
        owner.passive()
        p.post(b"x")
        assert owner.wait(0.05).kind == "none"
        ev = owner.deliver()
        assert ev.kind == "delivered" and [m.data for m in ev.messages] == [b"x"]
        assert owner.deliver().kind == "none"


def test_blocking_receive_in_a_thread_wakes(box_name, cli):
    """receive(None) in a thread (ctypes releases the GIL) returns when the CLI posts."""
    import threading
    name = box_name()
    shmbox.Box.create(name, capacity=4).close()
    out = []
    with shmbox.Owner.acquire(name) as owner:
        t = threading.Thread(target=lambda: out.append(owner.receive(timeout=20)))
        t.start()
        subprocess.run([cli, "post", name, "wake"], check=True, timeout=30)
        t.join(30)
        assert not t.is_alive()
    assert out[0].data == b"wake"


def test_notify_group_names_the_boxes_woken(box_name, cli):
    """One NotifyGroup for several owners: the group's fd wakes when the CLI (another process)
    posts, and ready() names exactly the boxes posted to, each once."""
    names = [box_name() for _ in range(6)]
    for n in names:
        shmbox.Box.create(n, capacity=8).close()
    with shmbox.NotifyGroup() as group:
        owners = [shmbox.Owner.acquire(n) for n in names]
        try:
            for tag, o in enumerate(owners):
                o.join(group, tag)
                o.notify()
            with pytest.raises(shmbox.InvalidArgument):
                owners[0].notify_fd()  # a member has none
            fd = group.fd()
            assert select.select([fd], [], [], 0)[0] == []
            for i in (1, 4, 4):
                assert subprocess.run([cli, "post", names[i], f"m{i}"], timeout=30).returncode == 0
            tags = set()
            for _ in range(100):
                if select.select([fd], [], [], 0.1)[0]:
                    tags.update(group.ready())
                if tags == {1, 4}:
                    break
            assert tags == {1, 4}
            assert group.ready() == []
            for i in (1, 4):
                assert owners[i].wait(0).kind == "notified"
                assert owners[i].receive(0).data == f"m{i}".encode()
            owners[2].leave_group()
            assert owners[2].notify_fd() >= 0
        finally:
            for o in owners:
                o.close()
