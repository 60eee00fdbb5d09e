"""(f) info() and counters(): the dict, and the counting identity of docs/guarantees.md."""
import os

import shmbox
from conftest import identity


def test_counters_identity_every_policy(box_name):
    for policy, expect in (("reject", {"rejected": 4}), ("drop-newest", {"dropped_newest": 4}),
                           ("drop-oldest", {"dropped_oldest": 4}), ("lifo", {"dropped_newest": 4})):
        name = box_name(policy)
        with shmbox.Box.create(name, capacity=8, slot_size=16, overflow=policy) as box:
            assert box.overflow == policy
            with shmbox.Producer.attach(name) as p:
                statuses = [p.post(str(i)) for i in range(12)]
            with shmbox.Owner.acquire(name) as owner:
                got = [m.data for m in owner.receive_batch(3, timeout=1)]
            assert len(got) == 3
            c = box.counters()
            assert c["posted"] == 12 and c["delivered"] == 3 and box.depth == 5
            for k, v in expect.items():
                assert c[k] == v, (policy, c)
            assert c["posted"] == identity(c, box.depth), (policy, c)
            if policy == "reject":
                assert statuses == ["stored"] * 8 + ["full"] * 4
            if policy == "drop-oldest":
                assert statuses[8:] == ["stored-evicted"] * 4 and got == [b"4", b"5", b"6"]


def test_pobox_example(box_name):
    """DESIGN.md: capacity 3, posts a..e, one receive of everything."""
    for policy, want in (("drop-oldest", [b"c", b"d", b"e"]), ("drop-newest", [b"a", b"b", b"c"]),
                         ("lifo", [b"e", b"b", b"a"])):
        name = box_name(policy)
        shmbox.Box.create(name, capacity=3, overflow=policy).close()
        with shmbox.Producer.attach(name) as p:
            p.post_batch([b"a", b"b"])
            for m in (b"c", b"d", b"e"):
                p.post(m)
        with shmbox.Owner.acquire(name) as o:
            assert [m.data for m in o.receive_batch(10, timeout=1)] == want, policy


def test_info_dict(box_name):
    name = box_name()
    with shmbox.Box.create(name, capacity=64, slot_size=100, overflow="block", lanes=[4, {"capacity": 8}, None],
                           block_timeout=0.5, mode=0o640) as box:
        assert box.lane_count == 3 and box.default_lane == 1 and box.slot_size == 100
        info = box.info()
        assert info["name"] == name and info["slot_size"] == 100 and info["overflow"] == "block"
        assert info["mode"] == 0o640 and info["uid"] == os.getuid()
        assert info["block_timeout"] == 0.5 and info["lease"] == 0
        assert [lane["lane"] for lane in info["lanes"]] == [0, 1, 2]
        assert info["lanes"][1]["capacity"] == 8
        assert info["owner"] is None and info["heirs"] == [] and info["last_transfer"] is None
        with shmbox.Producer.attach(box) as p:
            assert p.post(b"ctl", lane=0) == "stored"
            assert p.post(b"one") == "stored"
            assert p.post(b"two", lane=2, timeout=0) == "stored"
            assert box.info()["producers_attached"] == 1
        with shmbox.Owner.acquire(name) as o, shmbox.Heir.enlist(name, b"h") as h:
            info = o.info()
            assert info["owner"]["pid"] == os.getpid() and info["owner"]["alive"]
            assert info["owner"]["mode"] == "passive" and info["epoch"] == 1
            assert info["heirs"] == [{"entry": info["heirs"][0]["entry"], "pid": os.getpid(), "alive": True,
                                      "listener": False, "same_namespace": True,
                                      "pid_ns": info["heirs"][0]["pid_ns"], "data": b"h"}]
            assert [lane["depth"] for lane in info["lanes"]] == [1, 1, 1]
            assert info["depth"] == 3
            assert o.transfer().reason == "none"
            msgs = o.receive_batch(10, timeout=1)
            assert [(m.data, m.lane) for m in msgs] == [(b"ctl", 0), (b"one", 1), (b"two", 2)]
            with shmbox.Producer.attach(name) as p:
                p.post(b"z", lane=2)
                p.post(b"y", lane=0)
            assert o.receive(1) == shmbox.Message((b"y", 0, False))  # the control lane first
            assert o.receive(1) == shmbox.Message((b"z", 2, False))
            info = o.info()
            assert info["counters"]["delivered"] == 5
            assert sum(lane["counters"]["delivered"] for lane in info["lanes"]) == 5
        assert name in shmbox.Box.list()
        ok, problems = shmbox.Box.verify(name)
        assert ok and problems == []


def test_give_away_in_process_threads(box_name):
    """give_away to a listener (another thread of this process cannot: the same pid) is refused."""
    name = box_name()
    shmbox.Box.create(name).close()
    with shmbox.Owner.acquire(name) as o:
        assert o.give_away(os.getpid(), b"me", timeout=0.1) is False
        assert o.epoch == 1


def test_empty_and_binary_messages(box_name):
    """An empty message and one of every byte value arrive as they were posted, by every receive form."""
    name = box_name()
    shmbox.Box.create(name, capacity=8, slot_size=256).close()
    every_byte = bytes(range(256))
    with shmbox.Producer.attach(name) as p, shmbox.Owner.acquire(name) as o:
        p.post_batch([b"", every_byte, bytearray(b"\x00\x01"), "text"])
        assert o.receive(1).data == b""
        assert [m.data for m in o.receive_batch(2, timeout=1)] == [every_byte, b"\x00\x01"]
        p.post(b"")
        assert [m.data for m in o.read(5, timeout=1)] == [b"text", b""]
        o.commit()
        assert o.receive(0) is None


def test_quota_per_producer(box_name):
    """Box.create(quota=): each producer's own share of a lane; over it, PostStatus.OVER_QUOTA (counted)."""
    name = box_name()
    with shmbox.Box.create(name, capacity=8, slot_size=16, quota=2) as box:
        assert box.info()["lanes"][0]["quota"] == 2
        with shmbox.Producer.attach(name) as a, shmbox.Producer.attach(name) as b:
            assert [a.post(b"a%d" % i) for i in range(3)] == ["stored", "stored", "over-quota"]
            assert a.post(b"a3") == shmbox.PostStatus.OVER_QUOTA
            assert [b.post(b"b%d" % i) for i in range(3)] == ["stored", "stored", "over-quota"]
            c = box.counters()
            assert c["quota_refused"] == 3 and c["rejected"] == 3
            assert c["posted"] == identity(c, box.depth)
            with shmbox.Owner.acquire(name) as o:
                assert o.receive(timeout=0).data == b"a0"
                assert a.post(b"a4") == "stored"  # room again for a, one of its own was taken
    for policy in ("drop-oldest", "lifo"):
        try:
            shmbox.Box.create(box_name(policy), capacity=8, overflow=policy, quota=2).close()
            raise AssertionError("created a quota box with policy " + policy)
        except shmbox.InvalidArgument as e:
            assert policy.replace("-", "_") in str(e)
