#!/usr/bin/env python3
"""run_hello.py [--box NAME | --tag TAG] COMMAND...

Runs a producer/owner example of the documentation as the docs say: the
README's C++ program (README.md, <!-- hello-example -->, compiled by
tests/meson.build as readme-hello) or docs/c-api.md's C program (c-hello),
here and against a staged install (tests/package/package_test.sh):
`COMMAND own BOX` in one process; once it prints "ready", `COMMAND produce
BOX` in another. COMMAND is the program, or a prefix of words (`env
LD_LIBRARY_PATH=... ./hello`, `python3 hello.py`). The owner must print
"hello 0", "hello 1", "hello 2" and exit 0, the producer exit 0, and the
box be gone at the end. Every wait is bounded;
children that outlive the test are killed and the box is removed however
it ends. The box is named as the tests name theirs (t-<SHMBOX_TEST_RUN>-...,
scripts/shm_names.sh): t-<run>-TAG-<pid> (TAG readme-hello unless --tag
says) unless --box names it whole."""
import os
import selectors
import subprocess
import sys
import time

args = sys.argv[1:]
run = os.environ.get("SHMBOX_TEST_RUN", "")
tag = "readme-hello"
box = None
while args[:1] in (["--box"], ["--tag"]) and len(args) > 1:
    if args[0] == "--box":
        box = args[1]
    else:
        tag = args[1]
    args = args[2:]
if not args:
    sys.exit("usage: run_hello.py [--box NAME | --tag TAG] COMMAND...")
if box is None:
    box = f"t-{run + '-' if run else ''}{tag}-{os.getpid()}"
command = args
segment = "/dev/shm/shmbox." + box
children = []


def fail(why):
    print("FAIL: " + why, file=sys.stderr)
    sys.exit(1)


def line(proc, timeout):
    """The owner's next line of stdout, or a failure after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                fail(f"no line from the owner within {timeout} s (so far: {buf!r})")
            chunk = os.read(proc.stdout.fileno(), 1)
            if not chunk:
                fail(f"the owner closed its output (exit {proc.poll()}; so far: {buf!r})")
            buf += chunk
    return buf.decode().rstrip("\n")


try:
    owner = subprocess.Popen(command + ["own", box], stdout=subprocess.PIPE)
    children.append(owner)
    if line(owner, 20) != "ready":
        fail("the owner did not say ready first")
    producer = subprocess.Popen(command + ["produce", box])
    children.append(producer)
    if producer.wait(timeout=20) != 0:
        fail(f"the producer exited {producer.returncode}")
    got = [line(owner, 20) for _ in range(3)]
    if got != ["hello 0", "hello 1", "hello 2"]:
        fail(f"the owner received {got}")
    if owner.wait(timeout=20) != 0:
        fail(f"the owner exited {owner.returncode}")
    if os.path.exists(segment):
        fail(f"the example left its box {segment}")
    print(f"ok: owner and producer in two processes, box {box}: {got}")
except subprocess.TimeoutExpired as e:
    fail(f"{e.cmd} did not exit within {e.timeout} s")
finally:
    for c in children:
        if c.poll() is None:
            c.kill()
            c.wait()
    if os.path.exists(segment):
        os.unlink(segment)
