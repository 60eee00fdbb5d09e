"""Every example program of docs/python.md (a ```python block after an <!-- example: NAME -->
marker) runs: the owner and producer examples as two processes on one box, the others alone;
so does README.md's producer and owner (<!-- hello-python -->).
Each example cleans up its own boxes and pools; the fixtures remove the shared one."""
import os
import re
import sys

import pytest

from conftest import SOURCE_ROOT, readme_hello, run_hello_pair

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


def test_readme_hello(box_name, children, tmp_path):
    """README.md's Python producer and owner (the ```python block after <!-- hello-python -->), run as the
    README says: `python3 hello.py own BOX` in one process, `python3 hello.py produce BOX` in another once
    the owner says ready (the package as built here; test_install.py runs it with a venv's pip install)."""
    hello = tmp_path / "hello.py"
    hello.write_text(readme_hello(), encoding="utf-8")
    run_hello_pair(children, [sys.executable, str(hello)], box_name())
