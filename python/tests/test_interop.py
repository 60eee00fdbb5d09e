"""Python and C++ processes on the same boxes: (a) Python producers into a C++
owner, (b) a Python owner fed by C++ producers, (c) a Python heir taking over
from a SIGKILLed C++ owner with the messages intact."""
import os
import signal
import sys

import shmbox
from conftest import TESTS_DIR, identity, parse_pattern, pattern_message

PRODUCER = os.path.join(TESTS_DIR, "pyproducer.py")


def test_python_producers_into_cpp_owner(box_name, children, helper):
    """4 Python producer processes x 2000 messages into a 64-slot reject box that
    the helper's consumer (C++) drains, checking every payload and per-producer order."""
    name = box_name()
    producers, count = 4, 2000
    shmbox.Box.create(name, capacity=64, slot_size=64).close()
    owner = children([helper, "consume", name, producers * count, 5000])
    owner.expect("owned 1")
    procs = [children([sys.executable, PRODUCER, name, i + 1, count]) for i in range(producers)]
    for p in procs:
        p.expect("ready")
    for p in procs:
        p.send()
    fulls = 0
    for p in procs:
        line = p.expect(f"done stored={count}", timeout=120)
        fulls += int(line.split("full=")[1])
        assert p.wait()[0] == 0
    code, out, err = owner.wait(60)
    assert code == 0, err
    fields = dict(kv.split("=") for kv in out.split()[1:])
    assert fields["got"] == str(producers * count), out
    for key in ("order_errors", "redelivered", "short", "torn", "dups"):
        assert fields[key] == "0", out
    for i in range(producers):
        assert fields[f"p{i + 1}"] == str(count), out
    with shmbox.Box.open(name) as box:
        c = box.counters()
        assert c["delivered"] == producers * count
        assert c["rejected"] == fulls
        assert c["posted"] == producers * count + fulls
        assert c["posted"] == identity(c, box.depth)


def test_python_producers_into_cli_recv(box_name, children, cli):
    """Text messages from 3 Python producers, received by `shmbox recv --max` (the C++ CLI)."""
    name = box_name()
    producers, count = 3, 300
    shmbox.Box.create(name, capacity=1024, slot_size=32).close()
    procs = [children([sys.executable, PRODUCER, name, i, count, "--text", "--no-wait"]) for i in range(producers)]
    for p in procs:
        p.expect("ready")
        p.expect(f"done stored={count} full=0", timeout=60)
        assert p.wait()[0] == 0
    recv = children([cli, "recv", name, "--max", producers * count, "--timeout", 5000])
    code, out, err = recv.wait(60)
    assert code == 0, err
    got = out.split()
    assert sorted(got) == sorted(f"{i}:{s}" for i in range(producers) for s in range(count))
    for i in range(producers):  # per-producer order
        mine = [int(x.split(":")[1]) for x in got if x.startswith(f"{i}:")]
        assert mine == list(range(count))


def test_python_owner_from_cpp_producers(box_name, children, helper):
    """A Python owner receives 3 x 3000 messages from the helper's producers (C++),
    posting with --retry into a 32-slot box: exact counts, intact payloads, order."""
    name = box_name()
    producers, count = 3, 3000
    shmbox.Box.create(name, capacity=32, slot_size=128).close()
    with shmbox.Owner.acquire(name) as owner:
        procs = [children([helper, "produce", name, i + 1, count, "--retry", "--size", 100]) for i in range(producers)]
        for p in procs:
            p.expect("ready")
        for p in procs:
            p.send()
        next_seq = {i + 1: 0 for i in range(producers)}
        got = 0
        while got < producers * count:
            batch = owner.receive_batch(64, timeout=10)
            assert batch, f"nothing within 10 s after {got} messages"
            for m in batch:
                pid_id, seq, intact = parse_pattern(m.data)
                assert intact and len(m.data) == 100 and not m.redelivered
                assert seq == next_seq[pid_id], (pid_id, seq)
                next_seq[pid_id] = seq + 1
                got += 1
        assert owner.receive(timeout=0.05) is None
        for p in procs:
            line = p.expect("done", timeout=60)
            assert f"stored={count}" in line
        c = owner.counters()
        assert c["delivered"] == producers * count
        assert c["posted"] == identity(c, 0)


def test_python_owner_from_cli_post(box_name, cli):
    """`shmbox post` (C++) into a box a Python owner receives, one receive() at a time."""
    import subprocess
    name = box_name()
    shmbox.Box.create(name, capacity=8).close()
    with shmbox.Owner.acquire(name) as owner:
        subprocess.run([cli, "post", name, "alpha", "beta", "gamma"], check=True, timeout=30)
        assert [owner.receive(5).data for _ in range(3)] == [b"alpha", b"beta", b"gamma"]
        assert owner.receive(0) is None


def test_python_heir_takes_over_from_killed_cpp_owner(box_name, children, helper):
    """A C++ owner (helper `serve --hold`) holds 500 messages; a Python heir enlists, the
    owner is SIGKILLed, the heir gets the box (reason owner-died, its data) and every message."""
    name = box_name()
    count = 500
    shmbox.Box.create(name, capacity=512, slot_size=64).close()
    with shmbox.Producer.attach(name) as p:
        for seq in range(count):
            assert p.post(pattern_message(7, seq)) == "stored"
    owner = children([helper, "serve", name, "--hold"])
    line = owner.expect("owner epoch=1 reason=none")
    with shmbox.Heir.enlist(name, b"py-heir\x00x") as heir:
        assert heir.position == 0
        assert heir.await_transfer(0) is None  # the owner is alive
        with shmbox.Box.inspect(name) as box:
            info = box.info()
            assert info["owner"]["pid"] == owner.pid and info["owner"]["alive"]
            assert [h["pid"] for h in info["heirs"]] == [os.getpid()]
        owner.kill(signal.SIGKILL)
        new = heir.await_transfer(10)
        assert new is not None, "the heir was not given the box within 10 s"
        with new:
            t = new.transfer()
            assert t.reason == shmbox.TransferReason.OWNER_DIED == "owner-died"
            assert t.from_pid == owner.pid and t.to_pid == os.getpid()
            assert t.data == b"py-heir\x00x"  # heir data may hold NULs
            assert t.epoch == new.epoch == 2
            got = [m.data for m in new.receive_batch(count + 1, timeout=5)]
            assert got == [pattern_message(7, s) for s in range(count)]
            info = new.info()
            assert info["last_transfer"]["reason"] == "owner-died"
            assert info["last_transfer"]["from_pid"] == owner.pid
            assert info["owner"]["pid"] == os.getpid()
            assert info["counters"]["delivered"] == count
    del line


def test_cpp_heir_gets_python_reads_redelivered(box_name, children, helper):
    """A Python owner process reads 5 messages (two-phase, not committed) and is SIGKILLed;
    the C++ heir (helper `serve --heir`) receives all 10, the 5 read ones flagged redelivered."""
    name = box_name()
    shmbox.Box.create(name, capacity=16, slot_size=64).close()
    with shmbox.Producer.attach(name) as p:
        for seq in range(10):
            p.post(pattern_message(3, seq))
    script = ("import shmbox, sys, time\n"
              "o = shmbox.Owner.acquire(sys.argv[1])\n"
              "print('read', len(o.read(5, timeout=5)), flush=True)\n"
              "time.sleep(600)\n")
    reader = children([sys.executable, "-c", script, name])
    reader.expect("read 5")
    heir = children([helper, "serve", name, "--heir", "--data", "cpp", "--max", 10, "--idle-ms", 5000])
    heir.expect("enlisted 0")
    reader.kill(signal.SIGKILL)
    heir.expect("owner epoch=2 reason=owner-died")
    lines = [heir.line() for _ in range(10)]
    assert lines == [f"m 3 {s} {1 if s < 5 else 0}" for s in range(10)]
    heir.expect("done 10")
    with shmbox.Box.inspect(name) as box:
        c = box.counters()
        assert c["redelivered"] == 5 and c["delivered"] == 10
