"""Every example program of docs/python.md (a ```python block after an <!-- example: NAME -->
marker) runs: the owner and producer examples as two processes on one box, the others alone;
so does README.md's producer and owner (<!-- hello-python -->).
Each example cleans up its own boxes and pools; the fixtures remove the shared one."""
import os
import re
import sys

import pytest

from conftest import SOURCE_ROOT

DOC = os.path.join(SOURCE_ROOT, "docs", "python.md")


def _examples():
    text = open(DOC, encoding="utf-8").read()
    found = dict(re.findall(r"<!-- example: (\w+) -->\s*```python\n(.*?)```", text, re.S))
    return found


def test_every_example_is_found():
    assert set(_examples()) == {"owner", "producer", "asyncio", "numpy", "pool"}


def test_owner_and_producer(box_name, children):
    ex = _examples()
    name = box_name()
    owner = children([sys.executable, "-c", ex["owner"], name])
    owner.expect("ready")
    producer = children([sys.executable, "-c", ex["producer"], name])
    assert producer.wait(60)[0] == 0
    lines = [owner.line(30) for _ in range(3)]
    assert [line.split()[:3] for line in lines] == [["job", str(i), "0"] for i in range(3)]
    assert all(re.fullmatch(r"[0-9a-f]{16}-0-\d+", line.split()[3]) for line in lines), lines
    assert owner.wait(30)[0] == 0


@pytest.mark.parametrize("example,expect", [("asyncio", "received from 10 boxes"),
                                            ("numpy", "numpy round trip ok"),
                                            ("pool", "b'HELLO'")])
def test_standalone_example(children, example, expect):
    if example == "numpy":
        pytest.importorskip("numpy")
    c = children([sys.executable, "-c", _examples()[example]])
    code, out, err = c.wait(120)
    assert code == 0, err
    assert expect in out, out + err


README = os.path.join(SOURCE_ROOT, "README.md")


def test_readme_hello(box_name, children):
    """README.md's Python producer and owner (the ```python block after <!-- hello-python -->), run as the
    README says: `own BOX` in one process, `produce BOX` in another once the owner says ready."""
    text = open(README, encoding="utf-8").read()
    m = re.search(r"<!-- hello-python -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README.md has no ```python block after <!-- hello-python -->"
    name = box_name()
    owner = children([sys.executable, "-c", m.group(1), "own", name])
    owner.expect("ready")
    producer = children([sys.executable, "-c", m.group(1), "produce", name])
    assert producer.wait(60)[0] == 0
    assert [owner.line(30) for _ in range(3)] == ["hello 0", "hello 1", "hello 2"]
    assert owner.wait(30)[0] == 0
    assert not os.path.exists("/dev/shm/shmbox." + name)
