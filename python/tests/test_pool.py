"""Pools from Python: Pool.create, a supervisor in a Python process (Pool.supervise, stopped
by SIGINT), Python workers (PoolMember.from_env, answer_ping), takes with Lease as a context
manager (given back ok, or failed on an exception: the member is replaced), take_group and
Pool.remove. Every process is a separate program; the pool is removed also on failure."""
import json
import os
import signal
import subprocess
import sys

import pytest

import shmbox

WORKER = r"""
import shmbox, sys
m = shmbox.PoolMember.from_env()
while not m.stopped:
    msg = m.owner.receive(0.1)
    if msg is None:
        continue
    if msg.lane == 0 and m.answer_ping(msg):
        continue
    reply, _, payload = msg.data.partition(b":")
    with shmbox.Producer.attach(reply.decode()) as p:
        p.post(payload)
"""

SUPERVISOR = r"""
import shmbox, sys
p = shmbox.Pool.open(sys.argv[1])
print("supervising", flush=True)
try:
    p.supervise(log=lambda line: print("log", line, flush=True))
    print("returned", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.fixture
def pool_name(box_name):
    names = []

    def new(tag=""):
        n = box_name(tag or "pool")
        names.append(n)
        return n

    yield new
    for n in names:
        try:
            shmbox.Pool.remove(n, immediate=True, timeout=10)
        except shmbox.NotFound:
            pass


def test_python_supervisor_workers_and_takers(tmp_path, pool_name, box_name, children):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    name = pool_name()
    init_log = tmp_path / "init.log"
    shmbox.Pool.create(name, f"{sys.executable} {worker}", init_count=1, max_count=2, group=name + "-g",
                       health_interval=0.2, health_timeout=2.0, capacity=16, slot_size=128,
                       init_command=f'echo "$SHMBOX_BOX" >> {init_log}')
    with pytest.raises(shmbox.InvalidArgument):
        shmbox.Pool.create(name + "-long", "true", init_command="x" * 128)
    with pytest.raises(shmbox.Exists):
        shmbox.Pool.create(name, "true")
    assert name in shmbox.Pool.list()
    sup = children([sys.executable, "-c", SUPERVISOR, name])
    sup.expect("supervising")
    reply = box_name("reply")
    shmbox.Box.create(reply, capacity=16, slot_size=128).close()
    with shmbox.Owner.acquire(reply) as answers, shmbox.Pool.open(name) as pool:
        with pool.take(20) as lease:
            assert lease.box and lease.worker_pid > 0
            assert lease.box in init_log.read_text().split()  # its init command ran before it was handed out
            assert lease.post(reply.encode() + b":hello") == "stored"
            m = answers.receive(20)
            assert m is not None and m.data.startswith(b"hello")
            first_pid = lease.worker_pid
        with pytest.raises(ZeroDivisionError):
            with pool.take(20) as lease:
                assert lease.worker_pid == first_pid  # the member given back ok is taken again
                1 / 0
        # Given back failed: replaced by a new worker.
        with pool.take(20) as lease:
            assert lease.worker_pid != first_pid
            assert lease.give_back() == "ok"
            assert lease.give_back() == "double-return"
        lease = shmbox.Pool.take_group(name + "-g", 20)
        with lease:
            lease.post(reply.encode() + b":group")
            assert answers.receive(20).data.startswith(b"group")
        with pytest.raises(ValueError):
            pool.take(float("nan"))
        # cull: two members free (max_count 2), init_count 1: one goes, the longest idle.
        with pool.take(20) as a, pool.take(20) as b:
            a.give_back()  # a idles longer than b: culled first
            b.give_back()
            kept = b.worker_pid
        assert pool.cull(idle=3600) == 0
        assert pool.cull() == 1
        with pool.take(20) as lease:
            assert lease.worker_pid == kept
        with pytest.raises(ValueError):
            pool.cull(idle=float("inf"))
        # reconfigure (pooler's): max_count 1 with the one member free, applied by the supervisor;
        # then a second take finds the pool at capacity instead of starting a member.
        with pytest.raises(shmbox.InvalidArgument):
            pool.reconfigure(max_count=3)  # above the table (max_count 2 at creation)
        with pytest.raises(ValueError):
            pool.reconfigure(queue_max=-1)
        pool.reconfigure(max_count=1, cull_after=60, auto_grow_threshold=None, timeout=20)
        with pool.take(20) as lease:
            with pytest.raises(shmbox.NoMembers):
                pool.take(0)
            i = shmbox.Pool.info(name)
            assert i["max_count"] == 1 and i["in_use"] == 1 and i["supervisor"]["alive"]
            [m] = [m for m in i["members"] if m["state"] == "in-use"]  # (a culled member may still be stopping)
            assert (m["box"], m["worker_pid"]) == (lease.box, lease.worker_pid)
            assert i["init_command"].startswith("echo") and i["counters"]["killed_free_culled"] == 1
    sup.proc.send_signal(signal.SIGINT)
    lines = []
    while not lines or not lines[-1].startswith("interrupted"):
        lines.append(sup.line(10))  # its log lines, then "interrupted" (fails after 10 s without)
    assert any("started member" in line for line in lines), lines  # the log callback ran
    assert shmbox.Pool.remove_group(name + "-none") == []
    assert shmbox.Pool.remove_group(name + "-g", immediate=True, timeout=20) == [name]
    assert name not in shmbox.Pool.list()
    with pytest.raises(shmbox.NotFound):
        shmbox.Pool.take_group(name + "-g", 0)


def test_create_with_max_lifetime_and_auto_grow(pool_name):
    name = pool_name()
    with pytest.raises(shmbox.InvalidArgument):  # the jitter must be below the lifetime
        shmbox.Pool.create(name, "true", max_lifetime=1, max_lifetime_jitter=1)
    with pytest.raises(ValueError):
        shmbox.Pool.create(name, "true", auto_grow_threshold=-1)
    with pytest.raises(shmbox.InvalidArgument):  # more than max_count
        shmbox.Pool.create(name, "true", max_count=2, auto_grow_threshold=3)
    shmbox.Pool.create(name, "true", max_count=4, max_lifetime=60, max_lifetime_jitter=5.5, auto_grow_threshold=1)
    i = shmbox.Pool.info(name)
    assert (i["max_lifetime"], i["max_lifetime_jitter"], i["auto_grow_threshold"]) == (60.0, 5.5, 1)
    cli = os.environ.get("SHMBOX_CLI")
    if not cli:
        pytest.skip("SHMBOX_CLI is not set (meson test sets it): the CLI's reading is compared")
    j = json.loads(subprocess.run([cli, "pool", "stat", name, "--json"], capture_output=True, text=True, check=True,
                                  timeout=30).stdout)
    assert (j["max_lifetime_ms"], j["max_lifetime_jitter_ms"], j["auto_grow_threshold"]) == (60000, 5500, 1)


def test_reconfigure_without_a_supervisor_sets_the_values(pool_name):
    name = pool_name()
    shmbox.Pool.create(name, "sleep 60", init_count=0, max_count=1, table_size=3)
    with shmbox.Pool.open(name) as pool:
        pool.reconfigure(max_count=3, init_count=2, queue_max=2, auto_grow_threshold=1)
        with pytest.raises(shmbox.InvalidArgument):
            pool.reconfigure(max_count=4)
        with pytest.raises(shmbox.InvalidArgument):
            pool.reconfigure(init_count=4)
    i = shmbox.Pool.info(name)
    assert (i["init_count"], i["max_count"], i["table_size"], i["queue_max"], i["auto_grow_threshold"],
            i["reconfigurations"]) == (2, 3, 3, 2, 1, 1)
    assert i["supervisor"]["alive"] is False and i["members"] == [] and i["counters"]["takes"] == 0
    assert i["init_command"] is None and i["group"] is None and i["removing"] is None
    with pytest.raises(shmbox.NotFound):
        shmbox.Pool.info(name + "-none")


def test_take_from_a_pool_without_members_times_out(pool_name):
    name = pool_name()
    shmbox.Pool.create(name, "sleep 60", init_count=0, max_count=1, queue_max=4)
    with shmbox.Pool.open(name) as pool:
        with pytest.raises((shmbox.TimedOut, shmbox.NoMembers)):
            pool.take(0.3)
    with pytest.raises(shmbox.NotFound):
        shmbox.Pool.open(name + "-missing")


def test_await_take(tmp_path, pool_name, children):
    import asyncio
    from shmbox import aio
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    name = pool_name()
    shmbox.Pool.create(name, f"{sys.executable} {worker}", init_count=1, max_count=1)
    sup = children([sys.executable, "-c", SUPERVISOR, name])
    sup.expect("supervising")

    async def main():
        async with aio.Pool.open(name) as pool:
            lease = await pool.take(20)
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            t = asyncio.ensure_future(ticker())
            second = asyncio.ensure_future(pool.take(20))  # waits for the one member, off the loop
            await asyncio.sleep(0.3)
            assert not second.done() and ticks >= 10
            assert lease.give_back() == "ok"
            lease.close()
            again = await asyncio.wait_for(second, 20)
            again.give_back()
            again.close()
            t.cancel()

    asyncio.run(main())
    sup.proc.send_signal(signal.SIGINT)
