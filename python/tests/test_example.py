"""examples/python/producer.py does what its docstring says."""
import os
import subprocess
import sys

import shmbox
from conftest import SOURCE_ROOT

EXAMPLE = os.path.join(SOURCE_ROOT, "examples", "python", "producer.py")


def run(*args, stdin=None):
    return subprocess.run([sys.executable, EXAMPLE, *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_example_producer(box_name):
    name = box_name()
    r = run(name, "--create", "one", "two")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("stored=2 stored-evicted=0 dropped=0 full=0"), r.stdout
    r = run(name, stdin="three\nfour\n")
    assert r.returncode == 0 and "stored=2" in r.stdout, (r.stdout, r.stderr)
    with shmbox.Owner.acquire(name) as o:
        assert [m.data for m in o.receive_batch(10, timeout=1)] == [b"one", b"two", b"three", b"four"]


def test_example_producer_full_and_missing(box_name):
    name = box_name()
    shmbox.Box.create(name, capacity=2, slot_size=8).close()
    r = run(name, "a", "b", "c", "much-too-long")
    assert r.returncode == 3
    assert "stored=2" in r.stdout and "full=1" in r.stdout and "too-large=1" in r.stdout, r.stdout
    assert "slot" in r.stderr or "large" in r.stderr, r.stderr
    missing = box_name()
    r = run(missing, "x")
    assert r.returncode == 1 and missing in r.stderr, r.stderr
