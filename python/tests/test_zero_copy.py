"""Loans (zero-copy posts into a writable memoryview, committed or aborted by a with block),
receive_in_place (read-only views released after the callback), the stash, pump and the
priority function, from Python."""
import pytest

import shmbox


def _pair(name, **kw):
    shmbox.Box.create(name, **kw).close()
    return shmbox.Producer.attach(name), shmbox.Owner.acquire(name)


def test_a_loan_commits_what_was_written_and_aborts_on_an_exception(box_name):
    p, o = _pair(box_name(), capacity=2, slot_size=64, overflow="reject")
    with p, o:
        with p.loan() as loan:
            assert loan and len(loan.data) == 64 and not loan.data.readonly
            loan.data[:5] = b"hello"
            loan.size = 5
        assert o.receive(0).data == b"hello"
        with pytest.raises(RuntimeError):
            with p.loan() as loan:
                loan.data[:3] = b"bad"
                raise RuntimeError("changed my mind")
        assert o.receive(0) is None and o.counters()["aborted"] == 1
        with p.loan() as loan:
            pass  # the whole slot
        assert len(o.receive(0).data) == 64
        with p.loan() as loan:
            view = loan.data
            view[:8] = (7).to_bytes(4, "little") + (9).to_bytes(4, "little")
            assert loan.commit(8) == "stored"
            with pytest.raises(ValueError):
                view[0] = 1  # released at the commit: the slot is no longer this producer's
        assert o.receive(0).data == (7).to_bytes(4, "little") + (9).to_bytes(4, "little")
        np = pytest.importorskip("numpy")
        with p.loan() as loan:
            np.frombuffer(loan.data, dtype=np.uint32)[:4] = [1, 2, 3, 4]  # written in place, not kept
            loan.size = 16
        assert np.frombuffer(o.receive(0).data, dtype=np.uint32).tolist() == [1, 2, 3, 4]
        p.post(b"1")
        p.post(b"2")
        full = p.loan()
        assert not full and full.status == "full" and full.data is None
        with full:
            pass


def test_receive_in_place_views_are_released_after_the_callback(box_name):
    p, o = _pair(box_name(), capacity=8, slot_size=64)
    with p, o:
        for i in range(5):
            p.post(b"m%d" % i)
        kept, seen = [], []

        def fn(msg):
            assert isinstance(msg.data, memoryview) and msg.data.readonly
            seen.append(bytes(msg.data))
            kept.append(msg.data)

        assert o.receive_in_place(fn, max=3, timeout=0) == 3
        assert seen == [b"m0", b"m1", b"m2"]
        with pytest.raises(ValueError):
            bytes(kept[0])  # released: refused after the commit

        def boom(msg):
            raise KeyError(bytes(msg.data))

        with pytest.raises(KeyError):
            o.receive_in_place(boom, max=8, timeout=0)
        # The one that raised was taken (fn saw it); the next one was not.
        assert o.receive(0).data == b"m4"
        assert o.receive_in_place(fn, max=8, timeout=0.05) == 0


def test_stash_and_unstash_all(box_name):
    p, o = _pair(box_name(), capacity=8, stash=4)
    with p, o:
        for m in (b"later", b"now"):
            p.post(m)
        first = o.receive(0)
        o.stash(first)
        assert o.stashed == 1
        assert o.receive(0).data == b"now"
        assert o.receive(0) is None
        assert o.unstash_all() == 1
        assert o.receive(0).data == b"later"
    p, o = _pair(box_name("nostash"), capacity=8)
    with p, o:
        with pytest.raises(shmbox.Error):
            o.stash(b"x", lane=0)


def test_priority_function_and_pump(box_name):
    p, o = _pair(box_name(), capacity=8, priority=True)
    with p, o:
        p.set_priority_function(lambda d: int(d.split(b":")[0]))
        for m in (b"5:e", b"1:a", b"3:c"):
            p.post(m)
        p.post(b"0:first", priority=0)
        assert o.pump() >= 0
        assert [m.data for m in o.receive_batch(8, 0)] == [b"0:first", b"1:a", b"3:c", b"5:e"]
        p.set_priority_function(lambda d: 1 // 0)
        p.post(b"x")
        assert isinstance(p.priority_error, ZeroDivisionError)
        p.set_priority_function(None)
        assert o.receive(0).data == b"x"
