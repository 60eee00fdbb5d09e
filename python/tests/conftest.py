"""Fixtures of the Python package's tests.

Environment (set by the meson test 'python'; defaults for a run from the
source tree after `bash scripts/setup.sh`):
  SHMBOX_PY_DIR   the package as built, with its compiled module (default build/python)
  SHMBOX_CLI      the shmbox CLI (default build/tools/shmbox)
  SHMBOX_HELPER   tests/support/helper.cpp's program (default build/tests/shmbox-test-helper)
  SHMBOX_TEST_RUN the run's tag: every box is named t-<run>-py-... (default 'py')
  SHMBOX_PY_INSTALLED  set: test the installed package instead of the built one

Every multi-process test bounds every wait (Child.line, Child.wait) and
kills its children and removes its boxes also when it fails.
"""

import os
import re
import selectors
import signal
import subprocess
import sys
import time
import uuid

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_ROOT = os.path.dirname(PYTHON_DIR)
BUILD = os.path.join(SOURCE_ROOT, "build")

PACKAGE_DIR = os.environ.get("SHMBOX_PY_DIR") or os.path.join(BUILD, "python")
if not os.environ.get("SHMBOX_PY_INSTALLED"):
    sys.path.insert(0, PACKAGE_DIR)
    os.environ["PYTHONPATH"] = PACKAGE_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")

CLI = os.environ.get("SHMBOX_CLI") or os.path.join(BUILD, "tools", "shmbox")
HELPER = os.environ.get("SHMBOX_HELPER") or os.path.join(BUILD, "tests", "shmbox-test-helper")
RUN = os.environ.get("SHMBOX_TEST_RUN") or "py"
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

import shmbox  # noqa: E402  (after sys.path is set)


class Child:
    """A child process with line-based stdin/stdout, every read bounded by a timeout."""

    def __init__(self, args, env=None):
        self.args = args
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, bufsize=0)
        self.pid = self.proc.pid
        self._buf = b""
        self.lines = []  # every line read so far (for failure messages)

    def line(self, timeout=30.0):
        """The next line of stdout (without the newline); fails the test after `timeout` s or at EOF."""
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    pytest.fail(f"{self.args[:3]}: no line within {timeout} s (read so far: {self.lines})")
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
                    pytest.fail(f"{self.args[:3]}: stdout closed (exit {self.proc.poll()}); lines {self.lines}; "
                                f"stderr: {err}")
                self._buf += chunk
        finally:
            sel.close()
        line, self._buf = self._buf.split(b"\n", 1)
        text = line.decode(errors="replace")
        self.lines.append(text)
        return text

    def expect(self, prefix, timeout=30.0):
        """The next line, which must start with `prefix`."""
        text = self.line(timeout)
        assert text.startswith(prefix), f"{self.args[:3]}: expected '{prefix}...', got {text!r}"
        return text

    def send(self, text="go"):
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def close_stdin(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def wait(self, timeout=30.0):
        """Waits for the exit (failing the test after `timeout` s); returns (code, rest of stdout, stderr)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.args[:3]}: still running after {timeout} s")
        rest = (self._buf + out).decode(errors="replace")
        self._buf = b""
        return self.proc.returncode, rest, err.decode(errors="replace")

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def children():
    """start(args) -> Child; every child still running at the end is killed."""
    started = []

    def start(args, env=None):
        c = Child([str(a) for a in args], env)
        started.append(c)
        return c

    yield start
    for c in started:
        c.kill()
        for f in (c.proc.stdin, c.proc.stdout, c.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


@pytest.fixture
def box_name(request):
    """new(tag='') -> a fresh box name t-<run>-py-<test>-<tag>-<random>; every such box is
    removed at the end, also when the test fails."""
    names = []

    def new(tag=""):
        test = request.node.name.replace("test_", "").replace("[", "-").replace("]", "")
        test = "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in test)[:40]
        name = f"t-{RUN}-py-{test}{'-' + tag if tag else ''}-{uuid.uuid4().hex[:8]}"
        names.append(name)
        return name

    yield new
    for name in names:
        shmbox.Box.remove(name, missing_ok=True)


def need(path, what):
    if not os.access(path, os.X_OK):
        pytest.skip(f"{what} not built: {path} (set SHMBOX_CLI / SHMBOX_HELPER or build in {BUILD})")
    return path


@pytest.fixture
def cli():
    return need(CLI, "the shmbox CLI")


@pytest.fixture
def helper():
    return need(HELPER, "the test helper")


def pattern_message(pid_id, seq, size=64):
    """A message in tests/support/helper.cpp's format: id and seq (u64 little-endian), then a pattern of both."""
    head = pid_id.to_bytes(8, "little") + seq.to_bytes(8, "little")
    return head + bytes(((pid_id * 131 + seq * 7 + i) & 0xFF) for i in range(16, size))


def parse_pattern(data):
    """(id, seq, intact) of a message in the helper's format."""
    pid_id = int.from_bytes(data[0:8], "little")
    seq = int.from_bytes(data[8:16], "little")
    return pid_id, seq, data == pattern_message(pid_id, seq, len(data))


def identity(c, depth):
    """posted == delivered + rejected + ... + depth (docs/guarantees.md)."""
    return c["delivered"] + c["rejected"] + c["too_large"] + c["timeouts"] + c["dropped_newest"] + \
        c["dropped_oldest"] + c["filtered"] + c["abandoned"] + c["aborted"] + depth


README = os.path.join(SOURCE_ROOT, "README.md")


def readme_hello():
    """README.md's Python producer and owner: the ```python block after <!-- hello-python -->."""
    text = open(README, encoding="utf-8").read()
    m = re.search(r"<!-- hello-python -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README.md has no ```python block after <!-- hello-python -->"
    return m.group(1)


def run_hello_pair(children, command, name, env=None):
    """Runs a hello program as the README says: `COMMAND own NAME` in one process, `COMMAND produce
    NAME` in another once the owner says ready (COMMAND: a list, such as [python, "hello.py"]). The
    owner prints hello 0..2, both exit 0 and the box is gone; every wait is bounded, and the
    children fixture kills what outlives the test."""
    owner = children(list(command) + ["own", name], env)
    owner.expect("ready")
    producer = children(list(command) + ["produce", name], env)
    code, _, err = producer.wait(60)
    assert code == 0, err
    assert [owner.line(30) for _ in range(3)] == ["hello 0", "hello 1", "hello 2"]
    code, _, err = owner.wait(30)
    assert code == 0, err
    assert not os.path.exists("/dev/shm/shmbox." + name)
