"""The NATS JetStream bridge (docs/bridge.md), end to end: nats-server on loopback, export and import
bridges, producers posting into box A, an owner receiving from box B, each its own process.

Where a test checks "exactly once" it checks three things: the owner on B received the set of
messages the producers stored in A, each once (a multiset compare, payloads are distinct); the
stream stored each once (its last sequence, which also counts messages a limit removed since, equals
the number stored in A); and the bridges' counters agree.
"""

import collections
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import (BRIDGE_STATES, EXPORT_COUNTERS, IMPORT_COUNTERS, CLI, MSG_ID, bridge_entry, free_port, parse_payload, stat, wait_until)


def drain(receiver, expect=None):
    """The receiver's result (it exits when it has its messages or at its timeout)."""
    if expect is not None:
        receiver.send(f"expect {expect}")
    code, out = receiver.wait(receiver.timeout + 15)
    assert code == 0, f"receiver exit {code}: {receiver.describe()}"
    return json.loads(out.strip().splitlines()[-1])


def compare(expected, received, what):
    """Fails with a readable summary unless `received` is exactly `expected` (each once)."""
    want = collections.Counter(expected)
    got = collections.Counter(received)
    missing = want - got
    dups = {m: n for m, n in got.items() if n > 1}
    unknown = sorted(set(got) - set(want))
    if missing or dups or unknown:
        pytest.fail(f"{what}: expected {len(expected)} messages, received {len(received)}: "
                    f"{sum(missing.values())} missing (e.g. {sorted(missing)[:5]}), "
                    f"{len(dups)} duplicated (e.g. {sorted(dups.items())[:5]}), "
                    f"{len(unknown)} never posted (e.g. {unknown[:5]})")


def counters_of(box, role):
    return bridge_entry(stat(box), role)


def wait_counter(box, role, pred, what, timeout=15.0):
    """Polls `shmbox stat BOX --json` until the bridge of `role` has counters satisfying pred."""
    def check():
        b = counters_of(box, role)
        return b if b is not None and pred(b) else None
    try:
        return wait_until(what, check, timeout, 0.05)
    except pytest.fail.Exception:
        pytest.fail(f"{what} not within {timeout} s: {role} bridge of {box}: {counters_of(box, role)}")


def post(producer, count, lane=-1, retry=True, pace_us=0, retry_s=60):
    producer.send(f"post {count} {lane} {1 if retry else 0} {pace_us} {retry_s}")


def posted(producer, timeout=60.0):
    """(stored, full) of a producer's post command."""
    line = producer.expect("posted ", timeout)
    kv = dict(x.split("=") for x in line.split()[1:])
    return int(kv["stored"]), int(kv["full"])


def report(producer):
    producer.send("report")
    return json.loads(producer.line(30))


# ---------------------------------------------------------------------------
# 1 and 7: box A (3 lanes) -> export -> stream -> import -> box B (3 lanes)

N_PER_PRODUCER = 1000
PRODUCERS = ("p1", "p2")
N = N_PER_PRODUCER * len(PRODUCERS)


@pytest.fixture(scope="module")
def transfer(h_module):
    """Two producer processes post N distinct messages into A (70% on the default lane 1, 30% on
    lane 2); export A -> stream (created by --create-stream) -> import into B; an owner process on B
    receives. Collects everything the tests look at (it asserts nothing itself)."""
    h = h_module
    server = h.server()
    a = h.box("A", capacity=1024, slot_size=128, lanes=3)  # 3072 slots in all: the stream's max_msgs
    b = h.box("B", capacity=256, slot_size=128, lanes=3)
    stream, subject, durable = h.stream_name(), h.subject(), "d1"
    exp = h.export(a, server, stream, subject, "--create-stream")
    imp = h.import_(b, server, stream, durable)
    receiver = h.receiver(b, N, timeout=40)
    producers = [h.producer(a, tag) for tag in PRODUCERS]
    for p in producers:
        for _ in range(N_PER_PRODUCER // 100):
            post(p, 70, -1)
            post(p, 30, 2)
    stored = []
    for p in producers:
        for _ in range(N_PER_PRODUCER // 100 * 2):
            posted(p)
        stored += report(p)["stored"]
    result = drain(receiver)
    # The counters settle after the last message arrived (an ack is counted after the post).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ea, eb = counters_of(a, "export"), counters_of(b, "import")
        if ea and eb and ea.get("acked", 0) >= N and eb.get("imported", 0) >= N:
            break
        time.sleep(0.05)
    stat_a, stat_b = stat(a), stat(b)
    prom = subprocess.run([CLI, "stat", a, "--prometheus"], capture_output=True, text=True, timeout=20)
    prom_b = subprocess.run([CLI, "stat", b, "--prometheus"], capture_output=True, text=True, timeout=20)
    with server.client() as nc:
        info = nc.stream_info(stream)
        consumer = nc.consumer_info(stream, durable)
    # SIGTERM: both stop cleanly (exit 0, a 'stopped' line).
    stops = {}
    for name, p in (("export", exp), ("import", imp)):
        p.signal(signal.SIGTERM)
        stops[name] = p.wait(20) + (p.describe(),)
    return dict(a=a, b=b, stream=stream, subject=subject, durable=durable, stored=stored, result=result,
                stat_a=stat_a, stat_b=stat_b, prom=prom, prom_b=prom_b, info=info, consumer=consumer, stops=stops, export=exp, imp=imp)


def test_transfer_exactly_once_in_order_with_lanes(transfer):
    t = transfer
    assert len(t["stored"]) == N, "the producers stored every message (they retry on full)"
    got = t["result"]["messages"]
    compare(t["stored"], [m[0] for m in got], "owner of B")
    # Lanes restored: each message on the lane it was posted on (the payload names it).
    wrong = [(m[0], m[1]) for m in got if parse_payload(m[0])[1] != m[1]]
    assert not wrong, f"{len(wrong)} messages on the wrong lane at B (payload lane:seq, lane): {wrong[:5]}"
    lanes = collections.Counter(m[1] for m in got)
    assert lanes[2] == N * 3 // 10 and lanes[1] == N * 7 // 10, lanes
    # Per producer and lane, the order it posted in (a lane is FIFO; lane 1 is read before lane 2).
    last = {}
    for data, lane, _ in got:
        tag, _, seq = parse_payload(data)
        assert seq > last.get((tag, lane), -1), f"order broken at B: {data} after seq {last[(tag, lane)]}"
        last[(tag, lane)] = seq
    assert not any(m[2] for m in got), "nothing was redelivered (no owner died)"


def test_stream_stored_each_message_once_and_all_acked(transfer):
    t = transfer
    assert t["info"] is not None, f"stream {t['stream']} does not exist"
    state = t["info"]["state"]
    assert state["last_seq"] == N, f"the stream stored {state['last_seq']} messages for {N}: {state}"
    assert t["info"]["config"]["subjects"] == [t["subject"]]
    c = t["consumer"]
    assert c is not None, f"no durable {t['durable']} on {t['stream']}"
    assert c["delivered"]["stream_seq"] == N and c["ack_floor"]["stream_seq"] == N, f"consumer {c}"
    assert c["num_pending"] == 0 and c["num_ack_pending"] == 0 and c["num_redelivered"] == 0, f"consumer {c}"


def test_exported_headers_and_lane_mapping(h):
    """What the export bridge stores (headers, order) and how the import bridge maps lanes into a box
    with fewer lanes (a lane the box does not have: its default lane)."""
    server = h.server()
    a = h.box("A", capacity=64, slot_size=128, lanes=3)
    stream, subject = h.stream_name(), h.subject()
    h.export(a, server, stream, subject, "--create-stream")
    producer = h.producer(a, "h")
    for lane, count in ((-1, 30), (2, 30), (0, 10), (-1, 30)):
        post(producer, count, lane)
        posted(producer)
    stored = report(producer)["stored"]
    wait_until("100 messages in the stream", lambda: server.stream_info(stream)["state"]["messages"] >= 100, 20)
    with server.client() as nc:
        info = nc.stream_info(stream)
        assert info["state"]["messages"] == 100 and info["state"]["last_seq"] == 100, info["state"]
        msgs = [nc.stream_msg(stream, seq) for seq in range(1, 101)]
    assert None not in msgs
    compare(stored, [d.decode() for _, d in msgs], "stream contents")
    ids, last = set(), {}
    for seq, (headers, data) in enumerate(msgs, 1):
        msg_id = headers.get("Nats-Msg-Id", "")
        assert MSG_ID.match(msg_id), f"seq {seq}: Nats-Msg-Id {msg_id!r} is not BOXID-LANE-POSITION ({headers})"
        ids.add(msg_id)
        _, lane, pseq = parse_payload(data.decode())
        # A's default lane is 1: its messages go without a lane (the far box's default lane takes them).
        assert headers.get("Shmbox-Lane") == (None if lane == 1 else str(lane)), f"seq {seq} {data!r}: headers {headers}"
        assert msg_id.split("-")[1] == str(lane), f"seq {seq}: id {msg_id} names another lane than {lane}"
        assert headers.get("Shmbox-Box") == a, f"seq {seq}: headers {headers}"
        assert pseq > last.get(lane, -1), f"seq {seq}: {data!r} after seq {last[lane]} of its lane"
        last[lane] = pseq
    assert_ordinals([h for h, _ in msgs], "stream contents")
    assert len(ids) == 100, f"{100 - len(ids)} message ids used twice"
    assert len({i.split("-")[0] for i in ids}) == 1, "one box id for every message of A"
    # Into a box of 2 lanes (0 and 1, default 1): lane 0 stays 0, lane 1 stays 1, lane 2 -> 1.
    c = h.box("C", capacity=128, slot_size=128, lanes=2)
    h.import_(c, server, stream, "dh")
    result = drain(h.receiver(c, 100, timeout=20))
    got = result["messages"]
    compare(stored, [m[0] for m in got], "owner of C")
    wrong = [(m[0], m[1]) for m in got if m[1] != min(parse_payload(m[0])[1], 1)]
    assert not wrong, f"lane mapping into a 2-lane box: {wrong[:5]}"


def assert_ordinals(headers, what):
    """Each lane's Shmbox-Ordinal headers, in stream order and once per message id, are 0, 1, 2, ...:
    the count of the lane's messages the box delivered before it (what the import counts losses by)."""
    expect, seen = {}, set()
    for k, hd in enumerate(headers):
        msg_id = hd.get("Nats-Msg-Id", "")
        if msg_id in seen:
            continue
        seen.add(msg_id)
        lane = msg_id.split("-")[1]
        assert hd.get("Shmbox-Ordinal") == str(expect.get(lane, 0)), \
            f"{what}: message {k} ({msg_id}) of lane {lane} has ordinal {hd.get('Shmbox-Ordinal')!r}, expected {expect.get(lane, 0)}"
        expect[lane] = expect.get(lane, 0) + 1


def test_bridges_stop_cleanly_on_sigterm(transfer):
    for role, (code, out, desc) in transfer["stops"].items():
        assert code == 0, f"{role} bridge: exit {code} after SIGTERM: {desc}"
        assert any(line.startswith("stopped") for line in out.splitlines()), f"{role}: no 'stopped' line: {desc}"
    assert transfer["export"].ready_line.startswith(f"ready export {transfer['a']} stream={transfer['stream']} "
                                                    f"subject={transfer['subject']} epoch=")
    assert transfer["imp"].ready_line == f"ready import {transfer['b']} stream={transfer['stream']} " \
                                         f"durable={transfer['durable']}"


def test_counters_in_stat(transfer):
    t = transfer
    e = bridge_entry(t["stat_a"], "export")
    i = bridge_entry(t["stat_b"], "import")
    assert e is not None, f"no export bridge in `shmbox stat {t['a']} --json`: {t['stat_a'].get('bridges')!r}"
    assert i is not None, f"no import bridge in `shmbox stat {t['b']} --json`: {t['stat_b'].get('bridges')!r}"
    # Each role shows its own counters, and only those (finding 8: no always-zero half).
    assert set(e["counters"]) == set(EXPORT_COUNTERS), f"export counters {sorted(e['counters'])}"
    assert set(i["counters"]) == set(IMPORT_COUNTERS), f"import counters {sorted(i['counters'])}"
    assert e["state"] == "connected" and i["state"] == "connected", (e["state"], i["state"])
    assert e["last_error"] is None and i["last_error"] is None, (e["last_error"], i["last_error"])
    assert (e["published"], e["acked"]) == (N, N), f"export counters {e}"
    assert e["dedupe_hits"] == 0 and e["redeliveries"] == 0, f"export counters {e}"
    assert i["imported"] == N, f"import counters {i}"
    assert i["remote_drops"] == 0 and i["local_drops"] == 0, f"import counters {i}"
    # A redelivery only follows a nak: B (256 per lane, policy reject) may be full for a moment when
    # its receiver falls behind (a loaded machine: CI runs suites in parallel); nothing else redelivers.
    assert i["redeliveries"] == i["naks"], f"import counters {i}"
    assert bridge_entry(t["stat_a"], "import") is None and bridge_entry(t["stat_b"], "export") is None
    # The box's own counters agree: A delivered N (to the bridge), B stored N and delivered them.
    assert t["stat_a"]["counters"]["delivered"] == N, t["stat_a"]["counters"]
    assert t["stat_b"]["counters"]["stored"] == N and t["stat_b"]["counters"]["delivered"] == N, t["stat_b"]["counters"]
    assert t["prom"].returncode == 0, t["prom"].stderr
    prom = t["prom"].stdout + t["prom_b"].stdout
    assert f"shmbox_bridge_published_total" in prom and f"shmbox_bridge_acked_total" in prom, prom[-2000:]
    samples = [line for line in prom.splitlines() if line.startswith("shmbox_bridge_")]
    assert not any(line.startswith("shmbox_bridge_published_total") and 'role="import"' in line for line in samples), \
        "an import has no published counter"
    assert not any(line.startswith("shmbox_bridge_imported_total") and 'role="export"' in line for line in samples), \
        "an export has no imported counter"
    for role in ("export", "import"):
        states = {line.split('state="')[1].split('"')[0]: line.rsplit(" ", 1)[1] for line in samples
                  if line.startswith("shmbox_bridge_state{") and f'role="{role}"' in line}
        assert set(states) == set(BRIDGE_STATES) and states["connected"] == "1" and \
            sum(v == "1" for v in states.values()) == 1, f"{role}: {states}"


# ---------------------------------------------------------------------------
# 2: SIGKILL of the active export bridge, a standby takes over


def test_standby_takes_over_after_sigkill_no_loss_no_duplicate(h):
    n = 2000
    server = h.server()
    a = h.box("A", capacity=512, slot_size=128)
    b = h.box("B", capacity=4096, slot_size=128)
    stream, subject = h.stream_name(), h.subject()
    with server.client() as nc:
        nc.stream_create(stream, [subject])
    e1 = h.export(a, server, stream, subject)
    e2 = h.export(a, server, stream, subject, expect="standby export")
    assert e2.ready_line == f"standby export {a} heir", e2.ready_line
    h.import_(b, server, stream, "d2")
    receiver = h.receiver(b, n, timeout=40)
    producer = h.producer(a, "k")
    post(producer, n // 2, pace_us=300)  # ~0.5 s or more: the bridge works while it posts
    wait_until("the stream has some messages", lambda: server.stored(stream) >= 100, 20)
    # Stop the server so that what E1 publishes now stays unacknowledged: it holds read, uncommitted
    # messages when it is killed (the standby gets them flagged redelivered and publishes them again).
    server.pause()
    deadline = time.monotonic() + 5
    inflight = False
    while time.monotonic() < deadline and not inflight:
        e = counters_of(a, "export")
        inflight = e is not None and e.get("published", 0) > e.get("acked", 0)
        time.sleep(0.02)
    e1.signal(signal.SIGKILL)
    e1.proc.wait(10)
    server.resume()
    at_kill = server.stored(stream)
    assert at_kill < n, "the kill landed mid-stream"
    e2.expect("ready export", 20)
    posted(producer)
    post(producer, n - n // 2, pace_us=0)
    posted(producer)
    stored = report(producer)["stored"]
    assert len(stored) == n
    result = drain(receiver)
    compare(stored, [m[0] for m in result["messages"]], f"owner of B (E1 killed with the stream at {at_kill})")
    info = server.stream_info(stream)
    assert info["state"]["last_seq"] == n and info["state"]["messages"] == n, \
        f"the stream stored {info['state']['last_seq']} messages for {n} posted (duplicates: Nats-Msg-Id dedupe)"
    e = wait_counter(a, "export", lambda c: c.get("acked", 0) >= n, "export acked all")
    time.sleep(0.2)  # an over-count (finding 6: what the killed bridge had acknowledged, counted twice) would show by now
    e = counters_of(a, "export")
    assert e["acked"] == n, f"acked counts what was acknowledged, then committed: {e['acked']} for {n} ({e})"
    assert e.get("dedupe_hits", -1) >= 0, f"no dedupe_hits counter: {e}"
    if inflight:
        assert stat(a)["counters"]["redelivered"] >= 1, "E1 held uncommitted messages: the standby got them again"
        assert e["redeliveries"] >= 1, f"export counters {e}"
    print(f"kill at stream {at_kill}/{n}, in flight {inflight}, export counters {e}")


def in_order(received, what):
    """Fails unless each producer's messages of each lane arrived in the order it posted them."""
    last = {}
    for data in received:
        tag, lane, seq = parse_payload(data)
        if seq <= last.get((tag, lane), -1):
            pytest.fail(f"{what}: order broken: {data} after seq {last[(tag, lane)]} of {tag} lane {lane}")
        last[(tag, lane)] = seq


def import_kill_scenario(h, kill, ack_wait="30000", retention="workqueue"):
    """A stream of n messages from two producers on two lanes flows A -> export -> import -> B while
    `kill(h, b, start_import)` kills the import (from outside, or at a crash point) and restarts it.
    B's owner must get every message exactly once, each producer's lane in order."""
    n, batch = 1200, 64
    server = h.server()
    a = h.box("A", capacity=512, slot_size=128, lanes=3)
    b = h.box("B", capacity=4096, slot_size=128, lanes=3)
    stream, subject = h.stream_name(), h.subject()
    if retention == "workqueue":  # as the export makes it (acked messages leave; a durable delivers all)
        h.export(a, server, stream, subject, "--create-stream")
    else:
        with server.client() as nc:
            nc.stream_create(stream, [subject], retention=retention)
        h.export(a, server, stream, subject)
    args = ("--ack-wait", ack_wait, "--max-batch", str(batch))

    def start_import(env=None, expect="ready import"):
        return h.import_(b, server, stream, "dk", *args, env=env, expect=expect)
    producers = [h.producer(a, tag) for tag in ("k", "q")]
    for p in producers:
        post(p, n // 4, -1, pace_us=200)
        post(p, n // 4, 2, pace_us=200)
    kill(h, b, start_import)
    stored = []
    for p in producers:
        posted(p)
        posted(p)
        stored += report(p)["stored"]
    assert len(stored) == n
    receiver = h.receiver(b, n, timeout=60)
    got = [m[0] for m in drain(receiver)["messages"]]
    compare(stored, got, "owner of B after the import was killed")
    in_order(got, "owner of B after the import was killed")
    i = counters_of(b, "import")
    assert i["imported"] == n, f"import counters {i}"
    assert i["uncertain_posts"] == 0, f"import counters {i}"
    assert i["remote_drops"] == 0, f"nothing was lost, nothing counted lost: import counters {i}"
    return i


def test_import_sigkilled_three_times_exactly_once_in_order(h):
    """Finding 2: three SIGKILLs of the import mid-stream, restarted each time with the default
    ack wait (30 s): nothing lost, nothing twice, no lane reordered, and no 30 s wait."""
    def kill(h, b, start_import):
        imp = start_import()
        for k in range(3):
            target = 150 * (k + 1)
            wait_until(f"B has {target}", lambda: stat(b)["counters"]["stored"] >= target, 30)
            imp.signal(signal.SIGKILL)
            imp.proc.wait(10)
            imp = start_import()
    start = time.monotonic()
    i = import_kill_scenario(h, kill)
    assert time.monotonic() - start < 25, "the restarts did not wait out the ack wait"
    print(f"import counters after 3 kills: {i}")


@pytest.mark.parametrize("retention", ["workqueue", "limits"])
@pytest.mark.parametrize("point", ["import.after_fetch", "import.after_intent", "import.after_post", "import.before_ack"])
def test_import_killed_at_each_crash_point_exactly_once_in_order(h, point, retention):
    """The import killed at each point between fetch, post and ack (SHMBOX_BRIDGE_CRASH), twice, then
    restarted: exactly once and in order. Killed after its post and before its ack, the message comes
    back and is recognised as posted (duplicates)."""
    def kill(h, b, start_import):
        for at in ((4, 8) if point == "import.after_fetch" else (40, 90)):  # after_fetch: once per fetch
            env = dict(os.environ, SHMBOX_BRIDGE_CRASH=f"{point}:{at}")
            imp = start_import(env=env, expect=None)
            imp.expect("ready import", 20)
            code, _ = imp.wait(60)
            assert code == -signal.SIGKILL, f"killed at {point}: {imp.describe()}"
        start_import()
    i = import_kill_scenario(h, kill, retention=retention)
    if point in ("import.after_post", "import.before_ack"):
        assert i["duplicates"] >= 1, f"the posted, unacked message came back and was recognised: {i}"
    print(f"{point}: import counters {i}")


@pytest.mark.parametrize("point", ["export.before_commit", "export.after_commit"])
def test_export_killed_around_its_commit_ordinals_stay_exact(h, point):
    """The export killed (SHMBOX_BRIDGE_CRASH) between JetStream's acknowledgement and the box's commit,
    and right after the commit, twice, then restarted: the box's messages reach B exactly once and in
    order, each lane's ordinals in the stream stay 0, 1, 2, ... (a republish keeps its ordinal, a
    commit the dead export made is not counted twice), so the import counts no loss."""
    n = 600
    server = h.server()
    a = h.box("A", capacity=256, slot_size=128, lanes=3)
    b = h.box("B", capacity=4096, slot_size=128, lanes=3)
    stream, subject = h.stream_name(), h.subject()
    with server.client() as nc:
        nc.stream_create(stream, [subject])  # limits retention: the stream keeps every message to look at
    h.import_(b, server, stream, "dx")
    producer = h.producer(a, "x")
    post(producer, n // 2, -1, pace_us=300)
    post(producer, n // 2, 0, pace_us=300)
    for at in (2, 4):
        e = h.export(a, server, stream, subject, env=dict(os.environ, SHMBOX_BRIDGE_CRASH=f"{point}:{at}"))
        code, _ = e.wait(60)
        assert code == -signal.SIGKILL, f"killed at {point}: {e.describe()}"
    h.export(a, server, stream, subject)
    posted(producer)
    posted(producer)
    stored = report(producer)["stored"]
    assert len(stored) == n
    got = [m[0] for m in drain(h.receiver(b, n, timeout=40))["messages"]]
    compare(stored, got, f"owner of B after the export was killed at {point}")
    in_order(got, f"owner of B after the export was killed at {point}")
    i = counters_of(b, "import")
    assert i["imported"] == n and i["remote_drops"] == 0, f"import counters {i}"
    with server.client() as nc:
        last = nc.stream_info(stream)["state"]["last_seq"]
        msgs = [nc.stream_msg(stream, seq) for seq in range(1, last + 1)]
    assert None not in msgs and last == n, f"the stream holds {last} messages for {n} (Nats-Msg-Id dedupe)"
    assert_ordinals([hd for hd, _ in msgs], f"stream after the export was killed at {point}")


# ---------------------------------------------------------------------------
# 3: the server stopped (SIGSTOP): the small reject box fills, refuses, counts; SIGCONT: it flows again


def test_sigstop_server_box_fills_rejects_counted_then_resumes(h):
    server = h.server()
    a = h.box("A", capacity=16, slot_size=128, overflow="reject")
    b = h.box("B", capacity=1024, slot_size=128)
    stream, subject = h.stream_name(), h.subject()
    with server.client() as nc:
        nc.stream_create(stream, [subject])
    h.export(a, server, stream, subject, "--ack-timeout", "500")
    h.import_(b, server, stream, "d3")
    receiver = h.receiver(b, -1, timeout=40)
    producer = h.producer(a, "s")
    post(producer, 100, retry=True)
    assert posted(producer)[0] == 100
    wait_counter(a, "export", lambda c: c.get("acked", 0) >= 100, "the first 100 acked")
    server.pause()
    post(producer, 200, retry=False)
    stored2, full2 = posted(producer)
    assert full2 > 0, "A filled while the server was stopped"
    assert stored2 <= 16, f"A took {stored2} messages with the server stopped: the bridge committed unacknowledged ones"
    time.sleep(1.5)  # the outage lasts past --ack-timeout: the bridge publishes again (publish_errors)
    assert stat(a)["depth"] == stored2, "nothing left A while the server was stopped"
    server.resume()
    post(producer, 100, retry=True)
    assert posted(producer)[0] == 100, "traffic resumed: every post of the last 100 was stored"
    rep = report(producer)
    stored = rep["stored"]
    result = drain(receiver, len(stored))
    compare(stored, [m[0] for m in result["messages"]], "owner of B")
    wait_until("A empty (the last acks committed)", lambda: stat(a)["depth"] == 0, 10)
    sa, sb = stat(a), stat(b)
    assert sa["counters"]["rejected"] == rep["full"], f"A's rejected {sa['counters']} vs refused posts {rep['full']}"
    assert sa["counters"]["stored"] == len(stored) and sb["counters"]["delivered"] == len(stored), \
        f"delivered at B {sb['counters']['delivered']} == stored at A {sa['counters']['stored']} == {len(stored)}"
    assert sb["depth"] == 0
    assert server.stored(stream) == len(stored), "each message stored once in the stream (republishes deduplicated)"
    e = counters_of(a, "export")
    assert e["publish_errors"] >= 1, f"a publish not acknowledged within --ack-timeout is counted: {e}"


# ---------------------------------------------------------------------------
# 4: the server restarted (SIGTERM, same port and store): both bridges reconnect, exactly once


def test_server_restart_bridges_reconnect_exactly_once(h):
    server = h.server()
    a = h.box("A", capacity=1024, slot_size=128)
    b = h.box("B", capacity=32, slot_size=128)  # fills: most of the stream waits in JetStream
    stream, subject = h.stream_name(), h.subject()
    with server.client() as nc:
        nc.stream_create(stream, [subject], storage="file")
    exp = h.export(a, server, stream, subject)
    imp = h.import_(b, server, stream, "d4", "--nak-delay", "200")
    producer = h.producer(a, "r")
    post(producer, 300)
    posted(producer)
    wait_until("300 messages in the stream", lambda: server.stored(stream) >= 300, 20)
    wait_until("B full", lambda: stat(b)["depth"] == 32, 20)
    server.stop(signal.SIGTERM)
    post(producer, 200)  # into A while the server is down
    assert posted(producer) == (200, 0)
    server.start()
    assert server.stored(stream) >= 300, "file storage kept the stream"
    receiver = h.receiver(b, 500, timeout=40)
    stored = report(producer)["stored"]
    result = drain(receiver)
    assert exp.alive() and imp.alive(), f"a bridge exited on the restart: {exp.describe()} / {imp.describe()}"
    compare(stored, [m[0] for m in result["messages"]], "owner of B across the restart")
    info = server.stream_info(stream)
    assert info["state"]["last_seq"] == 500, f"stream stored {info['state']['last_seq']} for 500 (duplicates)"
    wait_counter(a, "export", lambda c: c["acked"] == 500, "export acked 500")
    wait_counter(b, "import", lambda c: c["imported"] == 500, "import imported 500")


# ---------------------------------------------------------------------------
# 5: clear errors, bounded


def dead_url():
    """A URL where nothing listens, and its host:port."""
    port = free_port()
    return f"nats://127.0.0.1:{port}", f"127.0.0.1:{port}"


@pytest.mark.parametrize("role", ["export", "import"])
def test_bad_url_exits_1_naming_it(h, role):
    a = h.box("A", capacity=16)
    url, hostport = dead_url()
    if role == "export":
        args = ["export", a, "--nats", url, "--stream", "S", "--subject", "s.x"]
    else:
        args = ["import", "--nats", url, "--stream", "S", "--durable", "d", "--into", a]
    code, out, err, secs = h.run_bridge(args, timeout=30)
    assert code == 1, f"exit {code}, stdout {out!r}, stderr {err!r}"
    assert hostport in err, f"the error names the URL {url}: {err!r}"
    assert "ready" not in out, out
    assert secs < 20, f"took {secs:.1f} s"


def test_auth_failure_exits_1_saying_authorization(h):
    server = h.server("auth", user="alice", password="secret")
    a = h.box("A", capacity=16)
    stream, subject = h.stream_name(), h.subject()
    base = ["export", a, "--nats", server.url, "--stream", stream, "--subject", subject, "--create-stream"]
    code, out, err, secs = h.run_bridge(base + ["--user", "alice", "--password", "wrong"], timeout=30)
    assert code == 1, f"exit {code}, stdout {out!r}, stderr {err!r}"
    assert "authoriz" in err.lower(), f"the error says authorization: {err!r}"
    assert "wrong" not in err, f"the password is not printed: {err!r}"
    assert secs < 20, f"took {secs:.1f} s"
    # The right password works (and the credentials are not shown in stat).
    ok = h.export(a, server, stream, subject, "--create-stream", "--user", "alice", "--password", "secret")
    e = counters_of(a, "export")
    assert e is not None and "secret" not in json.dumps(e), e
    ok.signal(signal.SIGTERM)
    assert ok.wait(20)[0] == 0


def test_missing_stream_exits_1_naming_it_and_create_stream(h):
    server = h.server()
    a = h.box("A", capacity=16)
    stream, subject = h.stream_name(), h.subject()
    code, out, err, _ = h.run_bridge(["export", a, "--nats", server.url, "--stream", stream, "--subject", subject])
    assert code == 1, f"exit {code}, stdout {out!r}, stderr {err!r}"
    assert stream in err and "--create-stream" in err, err
    assert server.stream_info(stream) is None, "nothing created"
    code, out, err, _ = h.run_bridge(["import", "--nats", server.url, "--stream", stream, "--durable", "d",
                                      "--into", a])
    assert code == 1, f"import: exit {code}, stdout {out!r}, stderr {err!r}"
    assert stream in err, err


def test_missing_box_exits_1(h):
    server = h.server()
    stream, subject = h.stream_name(), h.subject()
    with server.client() as nc:
        nc.stream_create(stream, [subject], storage="memory")
    missing = h.box_name("missing")
    code, out, err, _ = h.run_bridge(["export", missing, "--nats", server.url, "--stream", stream,
                                      "--subject", subject])
    assert code == 1, f"export: exit {code}, stdout {out!r}, stderr {err!r}"
    assert missing in err, err
    code, out, err, _ = h.run_bridge(["import", "--nats", server.url, "--stream", stream, "--durable", "d",
                                      "--into", missing])
    assert code == 1, f"import: exit {code}, stdout {out!r}, stderr {err!r}"
    assert missing in err, err


@pytest.mark.parametrize("kind", ["lifo-box", "lifo-lane", "stash", "slot-over-max-payload"])
def test_unmappable_box_exits_1_saying_why(h, kind):
    server = h.server()
    stream, subject = h.stream_name(), h.subject()
    if kind == "lifo-box":
        a = h.box("A", capacity=16, overflow="lifo")
        extra, word = ["--create-stream"], "lifo"
    elif kind == "lifo-lane":
        a = h.box("A", capacity=16, lanes=[None, None, {"overflow": "lifo"}])
        with server.client() as nc:
            nc.stream_create(stream, [subject], storage="memory")
        extra, word = [], "lifo"
    elif kind == "stash":
        a = h.box("A", capacity=16, stash=4)
        extra, word = ["--create-stream"], "stash"
    else:  # nats-server takes 1 MiB per message (with headers) by default: a full 1 MiB slot does not fit
        a = h.box("A", capacity=2, slot_size=1 << 20)
        extra, word = ["--create-stream"], "max_payload"
    code, out, err, _ = h.run_bridge(["export", a, "--nats", server.url, "--stream", stream, "--subject", subject,
                                      *extra])
    assert code == 1, f"exit {code}, stdout {out!r}, stderr {err!r}"
    assert word in err.lower(), f"the error says {word}: {err!r}"
    if kind in ("lifo-box", "stash"):
        assert server.stream_info(stream) is None, "no stream created for a box that cannot be exported"
    assert not (stat(a).get("owner") or {}).get("alive"), "the box is not left owned"


BAD_ARGS = {
    "nothing": [],
    "unknown-command": ["frobnicate"],
    "export-no-box": ["export"],
    "export-no-stream": ["export", "BOX", "--nats", "URL", "--subject", "s"],
    "export-no-subject": ["export", "BOX", "--nats", "URL", "--stream", "S"],
    "import-no-durable": ["import", "--nats", "URL", "--stream", "S", "--into", "BOX"],
    "import-no-into": ["import", "--nats", "URL", "--stream", "S", "--durable", "d"],
    "unknown-option": ["export", "BOX", "--nats", "URL", "--stream", "S", "--subject", "s", "--frob"],
    "max-inflight-not-a-number": ["export", "BOX", "--nats", "URL", "--stream", "S", "--subject", "s",
                                  "--max-inflight", "many"],
    "storage-unknown": ["export", "BOX", "--nats", "URL", "--stream", "S", "--subject", "s", "--create-stream",
                        "--storage", "tape"],
    "user-without-password": ["export", "BOX", "--nats", "URL", "--stream", "S", "--subject", "s", "--user", "u"],
    "user-and-token": ["export", "BOX", "--nats", "URL", "--stream", "S", "--subject", "s",
                       "--user", "u", "--password", "p", "--token", "t"],
    "max-batch-negative": ["import", "--nats", "URL", "--stream", "S", "--durable", "d", "--into", "BOX",
                           "--max-batch", "-1"],
}


@pytest.mark.parametrize("case", sorted(BAD_ARGS))
def test_bad_arguments_exit_2(h, case):
    box = h.box("A", capacity=16)
    url, _ = dead_url()
    args = [box if a == "BOX" else url if a == "URL" else a for a in BAD_ARGS[case]]
    code, out, err, _ = h.run_bridge(args, timeout=20)
    assert code == 2, f"{args}: exit {code}, stdout {out!r}, stderr {err!r}"
    assert err.strip(), "says what is wrong on stderr"


def test_cli_bridge_subcommand_runs_the_bridge(h):
    box = h.box("A", capacity=16)
    url, hostport = dead_url()
    r = subprocess.run([CLI, "bridge", "export", box, "--nats", url, "--stream", "S", "--subject", "s", "--frob"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 2, f"shmbox bridge (bad args): exit {r.returncode}: {r.stderr}"
    r = subprocess.run([CLI, "bridge", "export", box, "--nats", url, "--stream", "S", "--subject", "s"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and hostport in r.stderr, f"shmbox bridge (dead URL): exit {r.returncode}: {r.stderr}"


# ---------------------------------------------------------------------------
# 6: --create-stream maps the box's policy


@pytest.mark.parametrize("policy,discard", [("reject", "new"), ("drop-newest", "new"), ("block", "new"),
                                            ("drop-oldest", "old")])
def test_create_stream_maps_policy(h, policy, discard):
    server = h.server()
    cap = 50
    a = h.box("A", capacity=cap, slot_size=64, overflow=policy)
    stream, subject = h.stream_name(), h.subject()
    e = h.export(a, server, stream, subject, "--create-stream")
    info = server.stream_info(stream)
    assert info is not None, f"--create-stream created no stream {stream}"
    cfg = info["config"]
    assert cfg["discard"] == discard and cfg["max_msgs"] == cap, \
        f"{policy} box of capacity {cap}: stream discard={cfg['discard']} max_msgs={cfg['max_msgs']} " \
        f"(retention {cfg.get('retention')})"
    assert cfg["subjects"] == [subject] and cfg["storage"] == "file", cfg
    assert cfg["duplicate_window"] == 120 * 10**9, cfg
    e.signal(signal.SIGTERM)
    code, out = e.wait(20)
    assert code == 0 and "stopped" in out, f"exit {code}, {out!r}: {e.describe()}"


def test_create_stream_storage_and_dedupe_window(h):
    server = h.server()
    a = h.box("A", capacity=8, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    h.export(a, server, stream, subject, "--create-stream", "--storage", "memory", "--dedupe-window", "7")
    cfg = server.stream_info(stream)["config"]
    assert cfg["storage"] == "memory" and cfg["duplicate_window"] == 7 * 10**9, cfg


def test_created_stream_flows_past_box_capacity_in_order(h):
    """A reject box's stream holds at most its capacity (discard new, max_msgs C), but more than C
    messages must get through over time (what was consumed does not count against the limit), and a
    stream that is full for a moment (B is small: the stream backs up) must not reorder them: one
    producer, one lane, FIFO end to end."""
    server = h.server()
    a = h.box("A", capacity=16, slot_size=64, overflow="reject")
    b = h.box("B", capacity=4, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    h.export(a, server, stream, subject, "--create-stream", "--ack-timeout", "500")
    h.import_(b, server, stream, "d6", "--nak-delay", "50")
    producer = h.producer(a, "c")
    post(producer, 1000, retry_s=20)  # stuck for 20 s: the producer exits 3 (the test fails, saying why)
    # B, the stream and A fill up (the producer retries), then the owner of B drains it all.
    wait_until("A full", lambda: stat(a)["depth"] == 16, 15)
    receiver = h.receiver(b, 1000, timeout=30)
    posted(producer, 30)
    stored = report(producer)["stored"]
    result = drain(receiver)
    info = server.stream_info(stream)
    got = [m[0] for m in result["messages"]]
    compare(stored, got,
            f"1000 messages through a stream created for a reject box of 16 (stream config "
            f"retention={info['config'].get('retention')} discard={info['config']['discard']} "
            f"max_msgs={info['config']['max_msgs']}, state {info['state']}; export {counters_of(a, 'export')})")
    moved = [(k, got[k], stored[k]) for k in range(len(got)) if got[k] != stored[k]]
    assert not moved, f"order broken at B ({len(moved)} positions; position, received, posted): {moved[:4]}; " \
                      f"export counters {counters_of(a, 'export')}"


# ---------------------------------------------------------------------------
# The import side alone: a stream fed by this test's own publishes (no export bridge)


def feed(server, stream, subject, messages, storage="memory"):
    """Creates `stream` and publishes `messages` ([(data, headers or None)]) into it, each acked."""
    with server.client() as nc:
        nc.stream_create(stream, [subject], storage=storage)
        for data, headers in messages:
            ack = nc.publish(subject, data, headers)
            assert "error" not in ack, ack


@pytest.mark.parametrize("policy", ["drop-newest", "drop-oldest", "reject", "block"])
def test_import_waits_for_room_in_a_full_box(h, policy):
    """docs/bridge.md: the import fetches at most the box's free slots: a full box (whatever its
    policy) holds the stream back, nothing dropped; an owner that comes later gets every message,
    in order, once."""
    server = h.server()
    stream, subject = h.stream_name(), h.subject()
    msgs = [f"m:{i:03d}" for i in range(50)]
    feed(server, stream, subject, [(m, None) for m in msgs])
    b = h.box("B", capacity=8, slot_size=64, overflow=policy, block_timeout=0.05)
    h.import_(b, server, stream, "dp", "--nak-delay", "100")
    wait_counter(b, "import", lambda c: c["imported"] >= 8, "B filled")
    with server.client() as nc:
        wait_until("the rest waiting in the stream",
                   lambda: nc.consumer_info(stream, "dp")["num_pending"] == 42, 10)
    i = counters_of(b, "import")
    st = stat(b)
    assert i["imported"] == 8 and i["local_drops"] == 0 and st["depth"] == 8, f"import {i}, B {st['counters']}"
    dropped = {k: st["counters"][k] for k in ("rejected", "dropped_newest", "dropped_oldest", "timeouts")}
    assert not any(dropped.values()), f"B dropped or refused nothing: {dropped}"
    result = drain(h.receiver(b, 50, timeout=20))
    assert [m[0] for m in result["messages"]] == msgs, "every message, once, in stream order"
    with server.client() as nc:
        c = nc.consumer_info(stream, "dp")
    assert c["num_pending"] == 0 and c["num_ack_pending"] == 0, f"everything acked: {c}"


def test_import_full_lane_keeps_order_of_every_lane(h):
    """A lane of B that is full (lane 2, capacity 2) refuses its messages (nak'ed, delivered again
    later); the messages of lane 1, and of lane 2, still reach B once each, each lane in stream order."""
    server = h.server()
    stream, subject = h.stream_name(), h.subject()
    msgs = [(f"L{1 + i % 2}:{i:03d}", {"Shmbox-Lane": str(1 + i % 2)}) for i in range(60)]
    feed(server, stream, subject, msgs)
    b = h.box("B", capacity=64, slot_size=64, lanes=[16, 64, 2])
    # Small fetches and a long nak delay: the fetch after the one lane 2 refused comes before the
    # refused messages are delivered again.
    h.import_(b, server, stream, "dn", "--max-batch", "4", "--nak-delay", "1000")
    wait_counter(b, "import", lambda c: c["naks"] >= 1, "a nak (lane 2 full)")
    # 40 s: more than JetStream's default AckWait (30 s), the worst case of a redelivery.
    result = drain(h.receiver(b, 60, timeout=40))
    got = result["messages"]
    compare([m for m, _ in msgs], [m[0] for m in got], "owner of B")
    for lane in (1, 2):
        seq = [m[0] for m in got if m[1] == lane]
        want = [m for m, _ in msgs if m.startswith(f"L{lane}:")]
        assert seq == want, f"lane {lane} out of stream order at B: {seq}"


def test_import_lane_header_mapping_and_too_large(h):
    """Shmbox-Lane picks the lane; a lane the box does not have (or no header, or garbage): the box's
    default lane. A message larger than the box's slot does not stall the import."""
    server = h.server()
    stream, subject = h.stream_name(), h.subject()
    cases = [("none", None, 1), ("zero", "0", 0), ("one", "1", 1), ("two", "2", 2), ("seven", "7", 1),
             ("junk", "x", 1)]
    big = "big:" + "x" * 100
    feed(server, stream, subject, [(f"{name}:{i}", {"Shmbox-Lane": lane} if lane is not None else None)
                                   for i, (name, lane, _) in enumerate(cases)] + [(big, None), ("after:big", None)])
    b = h.box("B", capacity=16, slot_size=32, lanes=3)  # lanes 0, 1, 2; default 1
    h.import_(b, server, stream, "dl")
    result = drain(h.receiver(b, len(cases) + 1, timeout=20))
    got = {m[0]: m[1] for m in result["messages"]}
    want = {f"{name}:{i}": lane for i, (name, _, lane) in enumerate(cases)}
    want["after:big"] = 1
    assert got == want, f"lane by message: got {got}, want {want}"
    assert stat(b)["counters"]["too_large"] == 1, stat(b)["counters"]
    with server.client() as nc:
        c = nc.consumer_info(stream, "dl")
    assert c["num_pending"] == 0 and c["num_ack_pending"] == 0, f"nothing left pending (the big one too): {c}"
