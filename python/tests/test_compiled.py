"""The compiled message path (shmbox._core): every kind of buffer posted without a copy of
its own, message ids, receive_into (numpy too), receive_batch and read in one call, the
thread rule (a second thread is refused while one waits; close() refuses too), and Python
producers into a C++ owner with ids that C++ and the CLI agree on."""
import array
import threading
import time

import pytest

import shmbox


def _pair(name, **kw):
    shmbox.Box.create(name, **kw).close()
    return shmbox.Producer.attach(name), shmbox.Owner.acquire(name)


def test_every_buffer_kind_is_posted_as_its_bytes(box_name):
    p, o = _pair(box_name(), capacity=16, slot_size=64)
    with p, o:
        sources = [b"bytes", bytearray(b"bytearray"), memoryview(b"xxmemoryviewxx")[2:-2], "str-\u00e9",
                   array.array("i", [1, 2, 3])]
        for s in sources:
            assert p.post(s) == "stored"
        got = [m.data for m in o.receive_batch(16, 0)]
        assert got == [b"bytes", b"bytearray", b"memoryview", "str-\u00e9".encode(), array.array("i", [1, 2, 3]).tobytes()]
        with pytest.raises(TypeError, match="contiguous"):
            p.post(memoryview(b"abcdef")[::2])
        with pytest.raises(TypeError, match="not int"):
            p.post(42)
        with pytest.raises(shmbox.TooLarge):
            p.post(bytearray(65))
        assert o.receive(0) is None  # nothing was stored by the refusals


def test_numpy_arrays_in_and_out_without_copies_of_their_own(box_name):
    np = pytest.importorskip("numpy")
    p, o = _pair(box_name(), capacity=4, slot_size=4096)
    with p, o:
        a = np.arange(1024, dtype=np.float32)  # 4 KiB
        assert p.post(a) == "stored"
        assert p.post(np.asfortranarray(np.ones((32, 32), dtype=np.float32))) == "stored"  # contiguous either way
        with pytest.raises(TypeError, match="contiguous"):
            p.post(a[::2])
        buf = np.empty(4096, dtype=np.uint8)
        m = o.receive_into(buf, 1)
        assert len(m.data) == 4096 and np.array_equal(buf.view(np.float32), a)
        assert isinstance(m.data, memoryview) and m.id is not None
        with pytest.raises(ValueError, match="smaller than the box's slot size"):
            o.receive_into(bytearray(100), 0)
        assert o.receive_into(buf, 0).data.nbytes == 4096  # the refused call took nothing
        assert o.receive_into(buf, 0) is None


def test_ids_are_stable_and_in_the_library_form(box_name):
    name = box_name()
    p, o = _pair(name, capacity=8, lanes=2)
    with p, o:
        for i in range(3):
            p.post(b"m%d" % i)
        p.post(b"ctl", lane=0)
        msgs = o.read(8, 0)
        assert [m.data for m in msgs] == [b"ctl", b"m0", b"m1", b"m2"]
        ids = [m.id for m in msgs]
        assert len(set(ids)) == 4 and all(i.box == ids[0].box for i in ids)
        assert [i.lane for i in ids] == [0, 1, 1, 1]
        assert [i.position for i in ids[1:]] == sorted(i.position for i in ids[1:])
        assert shmbox.MessageId.parse(str(ids[1])) == ids[1]
        assert len(str(ids[1]).split("-")[0]) == 16
        with pytest.raises(ValueError):
            shmbox.MessageId.parse("nope")
        data, lane, redelivered = msgs[1]  # still a tuple of three
        assert (data, lane, redelivered) == (b"m0", 1, False)
        o.commit()


def test_read_then_die_redelivers_with_the_same_ids(box_name, children):
    import sys
    name = box_name()
    shmbox.Box.create(name, capacity=8).close()
    with shmbox.Producer.attach(name) as p:
        for i in range(3):
            p.post(b"r%d" % i)
    script = ("import shmbox, sys, time\n"
              "o = shmbox.Owner.acquire(sys.argv[1])\n"
              "print(' '.join(str(m.id) for m in o.read(8, 5)), flush=True)\n"
              "time.sleep(600)\n")
    c = children([sys.executable, "-c", script, name])
    first = c.line().split()
    c.proc.kill()
    c.proc.wait(10)
    with shmbox.Owner.acquire(name) as o:
        again = o.receive_batch(8, 5)
        assert [str(m.id) for m in again] == first
        assert all(m.redelivered for m in again)


def test_a_second_thread_is_refused_while_one_waits(box_name):
    p, o = _pair(box_name(), capacity=4)
    with p:
        got = []
        t = threading.Thread(target=lambda: got.append(o.receive(10)))
        t.start()
        deadline = time.monotonic() + 5
        while not o._busy and time.monotonic() < deadline:
            time.sleep(0.001)
        assert o._busy
        with pytest.raises(RuntimeError, match="another thread"):
            o.try_receive()
        with pytest.raises(RuntimeError, match="another thread"):
            o.close()
        assert o.counters()["delivered"] == 0  # through its own Box handle: allowed
        p.post(b"wake")
        t.join(10)
        assert not t.is_alive() and got[0].data == b"wake"
        o.close()
        with pytest.raises(ValueError, match="closed"):
            o.receive(0)


def test_post_statuses_of_every_policy_from_the_compiled_path(box_name):
    for policy, second in (("reject", "full"), ("drop-newest", "dropped"), ("drop-oldest", "stored-evicted"),
                           ("lifo", "stored-evicted")):
        p, o = _pair(box_name(policy), capacity=1, overflow=policy)
        with p, o:
            assert p.post(b"a") == "stored"
            st = p.post(b"b")
            assert st == second and isinstance(st, shmbox.PostStatus)
            r = p.post_batch([b"c", b"d"])
            assert isinstance(r, shmbox.BatchResult)
    p, o = _pair(box_name("block"), capacity=1, overflow="block")
    with p, o:
        assert p.post(b"a") == "stored"
        t = time.monotonic()
        assert p.post(b"b", timeout=0.3) == "timeout"
        assert time.monotonic() - t >= 0.29
        assert p.post(b"b", timeout=0) == "timeout"
        assert o.counters()["timeouts"] == 2  # each post counted once, not once per slice



def test_peek_does_not_take_and_gc_removes_only_unused_boxes(box_name):
    name = box_name()
    p, o = _pair(name, capacity=8)
    with p:
        for m in (b"a", b"b", b"c"):
            p.post(m)
        with shmbox.Box.inspect(name) as b:
            seen = b.peek(2)
            assert [m.data for m in seen] == [b"a", b"b"] and all(m.stash == "" for m in seen)
        assert [m.data for m in o.receive_batch(8, 0)] == [b"a", b"b", b"c"]  # nothing was taken
    prefix = box_name("gc")
    shmbox.Box.create(prefix, capacity=4).close()  # nobody uses it
    dry = shmbox.gc(dry_run=True, prefix=prefix)
    assert [c.name for c in dry] == [prefix]
    assert shmbox.Box.open(prefix).close() is None  # a dry run removed nothing
    done = shmbox.gc(prefix=prefix)
    assert [c.name for c in done] == [prefix] and not done[0].skipped
    with pytest.raises(shmbox.NotFound):
        shmbox.Box.open(prefix)
    assert shmbox.gc(prefix=name) == []  # the owned box stays
    o.close()


def test_deliveries_carry_ids(box_name):
    p, o = _pair(box_name(), capacity=8)
    with p, o:
        p.post(b"one")
        p.post(b"two")
        o.active()
        ev = o.wait(5)
        assert ev.kind == "delivered" and [m.data for m in ev.messages] == [b"one", b"two"]
        ids = [m.id for m in ev.messages]
        assert all(i is not None for i in ids) and ids[0].position < ids[1].position


def test_bad_arguments_of_the_compiled_calls_are_clear_errors(box_name):
    p, o = _pair(box_name(), capacity=4, stash=2)
    with p, o:
        p.post(b"kept")
        with pytest.raises(ValueError, match="max must be >= 1"):
            o.receive_batch(0)
        with pytest.raises(ValueError, match="max must be >= 1"):
            o.read(-1)
        with pytest.raises(TypeError, match="give the lane"):
            o.stash(b"no lane")
        with pytest.raises(TypeError, match="unexpected keyword"):
            p.post(b"x", lanes=1)
        with pytest.raises(TypeError, match="missing required argument 'data'"):
            p.post()
        with pytest.raises(TypeError, match="must be callable"):
            o.receive_in_place(42)
        with pytest.raises(TypeError, match="writable"):
            o.receive_into(b"read-only bytes" * 100)
        assert o.receive(0).data == b"kept"  # none of them took or posted anything
        assert o.receive(0) is None
