"""pyfork.py BOX HEIR_BOX MODE: the fork reproduction of test_fork.py, in a process of its own
(a fork child of the pytest process itself would go on running pytest).

Owns BOX, attaches a producer to it and enlists as heir of HEIR_BOX (owned by another
process), then forks. The child checks that its copies refuse to act (exit code 10+ when
one does not) and leaves: MODE 'close' closes the copies and calls os._exit; MODE 'exit'
raises SystemExit, so that the interpreter's exit collects them (__del__ closes them).
The parent prints:
  child CODE                        the child's exit code
  owner SAME_PID ALIVE DATA          what info() says of the owner, and a message received after
  heir PID ALIVE DATA                its heir entry in HEIR_BOX
then waits for a line on stdin (the test kills HEIR_BOX's owner first) and prints
  took REASON DATA                   the transfer record of the box it inherited
"""
import os
import sys

import shmbox

name, heir_box, mode = sys.argv[1:4]
o = shmbox.Owner.acquire(name)
p = shmbox.Producer.attach(name)
h = shmbox.Heir.enlist(heir_box, b"py-fork")

if os.fork() == 0:
    code = 0
    try:
        o.receive(0)
        code = 10
    except shmbox.NotOwner as e:
        if "fork child" not in str(e):
            code = 11
    try:
        p.post(b"from-the-child")
        code = code or 12
    except shmbox.InheritedHandle:
        pass
    try:
        h.await_transfer(0)
        code = code or 13
    except shmbox.InheritedHandle:
        pass
    if mode == "close":
        o.close()
        p.close()
        h.close()
        os._exit(code)
    raise SystemExit(code)  # the child: `if os.fork() == 0: raise SystemExit(0)`

_, status = os.waitpid(-1, 0)
print("child", os.waitstatus_to_exitcode(status), flush=True)
p.post(b"after")
m = o.receive(5)
info = o.info()
owner = info["owner"] or {}
print("owner", owner.get("pid") == os.getpid(), owner.get("alive"), m.data.decode() if m else None, flush=True)
with shmbox.Box.inspect(heir_box) as b:
    heirs = b.info()["heirs"]
e = heirs[0] if heirs else {"pid": 0, "alive": False, "data": b""}
print("heir", e["pid"] == os.getpid(), e["alive"], e["data"].decode(), flush=True)
sys.stdin.readline()
new = h.await_transfer(10)
t = new.transfer() if new else None
print("took", t.reason if t else None, t.data.decode() if t else None, flush=True)
