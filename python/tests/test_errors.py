"""(e) Errors raise shmbox.Error subclasses with the code and the library's sentence."""
import pytest

import shmbox
from shmbox import errors


def test_invalid_name():
    with pytest.raises(shmbox.InvalidName) as e:
        shmbox.Box.create("bad/name")
    assert e.value.code == 1 and isinstance(e.value, ValueError)
    assert "bad/name" in str(e.value), str(e.value)
    with pytest.raises(shmbox.InvalidName):
        shmbox.Box.validate_name("")
    with pytest.raises(shmbox.InvalidName):
        shmbox.Producer.attach("x" * 200)
    shmbox.Box.validate_name("ok.name-1")


def test_missing_box(box_name):
    name = box_name()
    for call in (shmbox.Box.open, shmbox.Box.inspect, shmbox.Producer.attach, shmbox.Owner.acquire,
                 shmbox.Box.remove):
        with pytest.raises(shmbox.NotFound) as e:
            call(name)
        assert e.value.code == 4
        assert name in str(e.value), (call, str(e.value))
        assert e.value.meaning  # shmbox_strerror
    shmbox.Box.remove(name, missing_ok=True)


def test_box_exists(box_name):
    name = box_name()
    shmbox.Box.create(name).close()
    with pytest.raises(shmbox.Exists) as e:
        shmbox.Box.create(name)
    assert e.value.code == 3 and name in str(e.value)


def test_oversize_message(box_name):
    name = box_name()
    shmbox.Box.create(name, slot_size=32).close()
    with shmbox.Producer.attach(name) as p:
        assert p.max_message_size == 32
        assert p.post(b"x" * 32) == "stored"
        with pytest.raises(shmbox.TooLarge) as e:
            p.post(b"x" * 33)
        assert e.value.code == 7
        assert "33" in str(e.value) and "32" in str(e.value), str(e.value)
        assert p.post_batch([b"a", b"y" * 40, b"b"]) == (1, "too-large")
    with shmbox.Box.open(name) as box:
        c = box.counters()
        assert c["too_large"] == 2 and c["posted"] == 4 and box.depth == 2


def test_second_owner_and_bad_arguments(box_name, children, helper):
    name = box_name()
    shmbox.Box.create(name).close()
    owner = children([helper, "own", name])
    owner.expect("owned")
    with pytest.raises(shmbox.NotOwner) as e:
        shmbox.Owner.acquire(name)
    assert e.value.code == 13 and str(owner.pid) in str(e.value), str(e.value)
    with pytest.raises(shmbox.InvalidArgument) as e:
        shmbox.Box.create(box_name(), capacity=0)
    assert e.value.code == 2 and str(e.value)
    with pytest.raises(shmbox.InvalidArgument):
        shmbox.Box.create(box_name(), overflow="sideways")
    with pytest.raises(ValueError):
        with shmbox.Box.open(name) as box:
            pass
        box.depth  # closed handle


def test_error_classes():
    assert errors.error_class(4) is shmbox.NotFound
    assert errors.error_class(21) is shmbox.NoMembers
    assert errors.error_class(999) is shmbox.Error
    assert issubclass(shmbox.TimedOut, TimeoutError) and issubclass(shmbox.Corrupt, shmbox.BadSegment)


def test_a_name_with_nul_is_refused(box_name):
    name = box_name()
    shmbox.Box.create(name).close()
    evil = name + "\0evil"
    calls = [
        lambda: shmbox.Box.create(evil),
        lambda: shmbox.Box.create(box_name("x") + "\0y"),
        lambda: shmbox.Box.create(box_name("dl"), dead_letters=evil),
        lambda: shmbox.Box.open(evil),
        lambda: shmbox.Box.inspect(evil),
        lambda: shmbox.Box.remove(evil),
        lambda: shmbox.Box.validate_name(evil),
        lambda: shmbox.Producer.attach(evil),
        lambda: shmbox.Owner.acquire(evil),
        lambda: shmbox.Heir.enlist(evil),
        lambda: shmbox.Heir.listen(evil),
        lambda: shmbox.Box.create(evil.encode()),
    ]
    for call in calls:
        with pytest.raises(ValueError) as e:
            call()
        assert isinstance(e.value, shmbox.InvalidName)
        assert "NUL" in str(e.value), str(e.value)
    # nothing reached C: the box is there, untouched, and no other box was made
    with shmbox.Box.inspect(name) as b:
        assert b.info()["owner"] is None and b.info()["heirs"] == []
    assert not any(n.startswith(name) and n != name for n in shmbox.Box.list())
