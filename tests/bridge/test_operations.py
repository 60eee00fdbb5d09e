"""The bridge an operator can leave running (issue 32): recovery from server failures without a
silent wedge, the state and the errors by cause where an operator looks, configuration that a
restart may change, one import per box and per durable, server lists, and the ways to authenticate
(secrets from files or the environment, TLS, NKeys). Each test names the finding it covers.

Every process is a separate program (nats-server, bridges, producers, owners); every wait is
bounded; the Harness removes everything, also when a test fails.
"""

import base64
import os
import signal
import subprocess
import time

import pytest

from conftest import CLI, nkey_pair, stat, wait_until
from test_bridge import compare, counters_of, dead_url, drain, post, posted, report, wait_counter


def bridge_of(box, role):
    st = stat(box)
    return next((b for b in st.get("bridges", []) if b["role"] == role), None)


def wait_state(box, role, state, timeout=20.0):
    def check():
        b = bridge_of(box, role)
        return b if b is not None and b["state"] == state else None
    try:
        return wait_until(f"the {role} bridge of {box} in state {state}", check, timeout, 0.05)
    except pytest.fail.Exception:
        pytest.fail(f"the {role} bridge of {box} not in state {state} within {timeout} s: {bridge_of(box, role)}")


def lines_with(proc, text):
    return [line for line in proc.stderr().splitlines() if text in line]


# ---------------------------------------------------------------------------
# Finding 1: a memory-storage server restarts; the stream and the durable are gone


def test_memory_server_restart_stream_and_durable_made_again_flow_resumes(h):
    server = h.server()
    a = h.box("A", capacity=256, slot_size=128)
    b = h.box("B", capacity=4096, slot_size=128)
    stream, subject = h.stream_name(), h.subject()
    exp = h.export(a, server, stream, subject, "--create-stream", "--storage", "memory")
    imp = h.import_(b, server, stream, "dm")
    producer = h.producer(a, "m")
    post(producer, 200)
    assert posted(producer) == (200, 0)
    wait_counter(b, "import", lambda c: c["imported"] == 200, "the first 200 imported")
    server.stop(signal.SIGKILL)  # memory storage: the stream and the durable die with it
    server.start()
    assert server.stream_info(stream) is None, "a memory stream does not survive its server"
    # Before the export published anything new the stream stays missing; a post makes it look.
    post(producer, 300)  # A fills while the export finds the stream gone: the producer retries
    assert posted(producer)[0] == 300
    wait_counter(a, "export", lambda c: c["stream_recreated"] == 1, "the export made the stream again")
    wait_counter(b, "import", lambda c: c["durable_recreated"] == 1, "the import made the durable again", timeout=30)
    stored = report(producer)["stored"]
    receiver = h.receiver(b, 500, timeout=40)
    got = [m[0] for m in drain(receiver)["messages"]]
    compare(stored, got, "owner of B across a memory server's restart (nothing was in the stream when it died)")
    assert exp.alive() and imp.alive(), f"{exp.describe()} / {imp.describe()}"
    for box, role, proc, what in ((a, "export", exp, "stream"), (b, "import", imp, "durable")):
        wait_state(box, role, "connected")
        said = lines_with(proc, "had disappeared")
        assert len(said) == 1 and what in said[0], f"{role}: one line saying the {what} was made again: {proc.stderr()!r}"
        assert bridge_of(box, role)["last_error"], "an error is on record"
    assert len(lines_with(exp, "disconnected from NATS")) == 1, exp.stderr()
    assert len(lines_with(exp, "reconnected to NATS")) == 1, exp.stderr()
    assert counters_of(a, "export")["reconnects"] == 1 and counters_of(b, "import")["reconnects"] == 1


def test_memory_server_restart_loss_of_what_the_stream_held_counted_exactly(h):
    """A memory-storage server dies holding messages the import had not fetched (it was stopped):
    they are lost with the stream. The import counts them exactly in remote_drops (the gap in the
    source lane's ordinals once messages flow again), so that the identity of docs/bridge.md holds:
    what A's export committed = what B got + remote_drops."""
    server = h.server()
    a = h.box("A", capacity=1024, slot_size=128)
    b = h.box("B", capacity=4096, slot_size=128)
    stream, subject = h.stream_name(), h.subject()
    h.export(a, server, stream, subject, "--create-stream", "--storage", "memory")
    imp = h.import_(b, server, stream, "dl")
    producer = h.producer(a, "l")
    post(producer, 200)
    posted(producer)
    wait_counter(b, "import", lambda c: c["imported"] == 200, "the first 200 imported")
    imp.signal(signal.SIGSTOP)
    post(producer, 300)
    posted(producer)
    wait_counter(a, "export", lambda c: c["acked"] == 500, "the next 300 in the stream")
    server.stop(signal.SIGKILL)  # the 300 die with the memory stream
    server.start()
    imp.signal(signal.SIGCONT)
    post(producer, 200)
    posted(producer)
    stored = report(producer)["stored"]
    assert len(stored) == 700
    wait_counter(a, "export", lambda c: c["acked"] == 700 and c["stream_recreated"] == 1, "the last 200 in the new stream", timeout=30)
    wait_counter(b, "import", lambda c: c["imported"] + c["remote_drops"] == 700, "the import caught up", timeout=40)
    got = [m[0] for m in drain(h.receiver(b, 400, timeout=20, linger=1.0))["messages"]]
    i = counters_of(b, "import")
    assert i["imported"] == len(got) and i["duplicates"] == 0, f"import counters {i} for {len(got)} received"
    lost = [m for m in stored if m not in set(got)]
    assert len(lost) >= 1, "the server died holding messages the import had not taken"
    assert i["remote_drops"] == len(lost), f"remote_drops {i['remote_drops']} for {len(lost)} lost ({i})"
    # What B got is what A sent, minus one run of the lost (the stream's unfetched tail), in order.
    compare([m for m in stored if m not in set(lost)], got, "owner of B across a memory server's restart")
    first = stored.index(lost[0])
    assert lost == stored[first:first + len(lost)], "the lost messages are one run of what A sent"
    print(f"lost with the memory stream: {len(lost)}; import counters {i}")


@pytest.mark.parametrize("point", ["import.after_fetch", "import.after_intent", "import.after_post", "import.before_ack"])
def test_loss_counted_once_when_the_import_dies_at_the_message_after_the_gap(h, point):
    """200 of a source lane's messages discarded by the stream (discard old) while no import ran; the
    next import dies at `point` handling the first message after the gap; the one after it counts the
    gap exactly once (the count rides in the post's intent: finished by whoever completes the post)."""
    server = h.server()
    a = h.box("A", capacity=512, slot_size=64)
    b = h.box("B", capacity=1024, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    with server.client() as nc:
        nc.stream_create(stream, [subject], max_msgs=100, discard="old")
    h.export(a, server, stream, subject)
    imp = h.import_(b, server, stream, "dg")
    producer = h.producer(a, "g")
    post(producer, 50)
    posted(producer)
    wait_counter(b, "import", lambda c: c["imported"] == 50, "the first 50 imported")
    imp.signal(signal.SIGTERM)
    assert imp.wait(20)[0] == 0
    post(producer, 300)
    posted(producer)
    wait_counter(a, "export", lambda c: c["acked"] == 350, "all 350 in the stream (it keeps the last 100)")
    imp = h.import_(b, server, stream, "dg", env=dict(os.environ, SHMBOX_BRIDGE_CRASH=f"{point}:1"), expect=None)
    imp.expect("ready import", 20)
    assert imp.wait(30)[0] == -signal.SIGKILL, f"killed at {point}: {imp.describe()}"
    h.import_(b, server, stream, "dg")
    i = wait_counter(b, "import", lambda c: c["imported"] == 150, "the 100 the stream kept imported")
    assert i["remote_drops"] == 200, f"the 200 discarded, counted once: {i}"
    got = [m[0] for m in drain(h.receiver(b, 150, timeout=20))["messages"]]
    stored = report(producer)["stored"]
    compare(stored[:50] + stored[250:], got, f"owner of B, the import killed at {point}")


def test_stream_deleted_export_without_create_stream_and_import_exit_1(h):
    server = h.server()
    a = h.box("A", capacity=64, slot_size=64)
    b = h.box("B", capacity=64, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    with server.client() as nc:
        nc.stream_create(stream, [subject])
    exp = h.export(a, server, stream, subject)
    imp = h.import_(b, server, stream, "dx", "--stream-grace", "1")
    with server.client() as nc:
        assert nc.js(f"STREAM.DELETE.{stream}").get("success"), "deleted"
    producer = h.producer(a, "x")
    post(producer, 5)
    posted(producer)
    code, _ = exp.wait(30)
    assert code == 1, exp.describe()
    err = exp.stderr()
    assert stream in err and "disappeared" in err and "--create-stream" in err, err
    code, _ = imp.wait(30)
    assert code == 1, imp.describe()
    assert stream in imp.stderr() and "--stream-grace" in imp.stderr(), imp.stderr()
    for box, role in ((a, "export"), (b, "import")):
        info = bridge_of(box, role)
        assert info["state"] == "stopped" and not info["alive"], info
    assert stat(a)["depth"] == 5, "the box keeps what the export could not publish"


# ---------------------------------------------------------------------------
# Finding 4: a restart with another --ack-wait / --max-batch


def test_import_restart_with_other_ack_wait_and_max_batch_updates_the_durable(h):
    server = h.server()
    b = h.box("B", capacity=64, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    with server.client() as nc:
        nc.stream_create(stream, [subject])
    i1 = h.import_(b, server, stream, "du", "--ack-wait", "2000", "--max-batch", "16")
    with server.client() as nc:
        c = nc.consumer_info(stream, "du")["config"]
    assert (c["ack_wait"], c["max_ack_pending"]) == (2 * 10**9, 64), c
    i1.signal(signal.SIGTERM)
    assert i1.wait(20)[0] == 0
    i2 = h.import_(b, server, stream, "du", "--ack-wait", "3000", "--max-batch", "32")
    with server.client() as nc:
        c = nc.consumer_info(stream, "du")["config"]
    assert (c["ack_wait"], c["max_ack_pending"]) == (3 * 10**9, 128), c
    assert "durable 'du' updated" in i2.stderr(), i2.stderr()
    with server.client() as nc:
        for k in range(10):
            nc.publish(subject, f"m{k}")
    wait_counter(b, "import", lambda c: c["imported"] == 10, "the restarted import works")


# ---------------------------------------------------------------------------
# Finding 5: comma-separated server lists


@pytest.mark.parametrize("order", ["dead-first", "live-first"])
def test_server_list_connects_past_a_dead_entry(h, order):
    server = h.server()
    dead = dead_url()[0]
    urls = f"{dead}, {server.url}" if order == "dead-first" else f"{server.url},{dead}"
    a = h.box("A", capacity=64, slot_size=64)
    b = h.box("B", capacity=64, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    e = h.bridge("export", a, "--nats", urls, "--stream", stream, "--subject", subject, "--create-stream", name="export")
    e.expect("ready export", 20)
    i = h.bridge("import", "--nats", urls, "--stream", stream, "--durable", "dl", "--into", b, name="import")
    i.expect("ready import", 20)
    producer = h.producer(a, "l")
    post(producer, 20)
    posted(producer)
    wait_counter(b, "import", lambda c: c["imported"] == 20, "20 through a server list")
    assert server.url in bridge_of(a, "export")["nats"] and dead in bridge_of(a, "export")["nats"]


# ---------------------------------------------------------------------------
# Finding 7: one import per box, one per durable


def test_second_import_refused_same_box_and_same_durable(h):
    server = h.server()
    b = h.box("B", capacity=64, slot_size=64)
    c = h.box("C", capacity=64, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    with server.client() as nc:
        nc.stream_create(stream, [subject])
    first = h.import_(b, server, stream, "d1")
    code, out, err, _ = h.run_bridge(["import", "--nats", server.url, "--stream", stream, "--durable", "d2", "--into", b])
    assert code == 1 and "already has a working import" in err and str(first.pid) in err, (code, out, err)
    code, out, err, _ = h.run_bridge(["import", "--nats", server.url, "--stream", stream, "--durable", "d1", "--into", c])
    assert code == 1 and "pulled by another import bridge" in err and f"pid {first.pid}" in err, (code, out, err)
    assert bridge_of(b, "import")["pid"] == first.pid and bridge_of(b, "import")["state"] == "connected"
    first.signal(signal.SIGTERM)
    assert first.wait(20)[0] == 0
    h.import_(c, server, stream, "d1")  # the durable is free again


# ---------------------------------------------------------------------------
# Finding 8: the state and the errors by cause while the server is away


def test_server_away_state_reconnecting_errors_by_cause_then_connected(h):
    server = h.server()
    a = h.box("A", capacity=256, slot_size=64)
    b = h.box("B", capacity=256, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    exp = h.export(a, server, stream, subject, "--create-stream", "--ack-timeout", "200")
    imp = h.import_(b, server, stream, "ds")
    server.stop(signal.SIGTERM)
    wait_state(a, "export", "reconnecting")
    wait_state(b, "import", "reconnecting")
    producer = h.producer(a, "s")
    post(producer, 50)
    posted(producer)
    wait_counter(a, "export", lambda c: c["publish_unsent"] + c["ack_timeouts"] > 0, "publishes failing while away")
    e = counters_of(a, "export")
    assert e["publish_errors"] == e["publish_unsent"] + e["publish_refused"] + e["ack_timeouts"], e
    server.start()
    wait_state(a, "export", "connected", 30)
    wait_state(b, "import", "connected", 30)
    wait_counter(b, "import", lambda c: c["imported"] == 50, "50 after the server came back", 30)
    for proc in (exp, imp):
        assert len(lines_with(proc, "disconnected from NATS")) == 1, proc.stderr()
        assert len(lines_with(proc, "reconnected to NATS")) == 1, proc.stderr()
    assert counters_of(a, "export")["reconnects"] == 1 and counters_of(b, "import")["reconnects"] == 1
    text = subprocess.run([CLI, "stat", a], capture_output=True, text=True, timeout=20).stdout
    assert "state connected" in text and "last error:" in text, text


# ---------------------------------------------------------------------------
# Finding 9: created streams' limits, secrets off the command line, TLS, NKeys


def test_created_stream_replicas_max_bytes_max_age(h):
    server = h.server()
    a = h.box("A", capacity=64, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    e = h.export(a, server, stream, subject, "--create-stream", "--max-bytes", "1048576", "--max-age", "90")
    cfg = server.stream_info(stream)["config"]
    assert (cfg["max_bytes"], cfg["max_age"], cfg["num_replicas"]) == (1048576, 90 * 10**9, 1), cfg
    e.signal(signal.SIGTERM)
    e.wait(20)
    other = h.box("A2", capacity=64, slot_size=64)
    code, out, err, _ = h.run_bridge(["export", other, "--nats", server.url, "--stream", h.stream_name(), "--subject",
                                      h.subject(), "--create-stream", "--replicas", "3"])
    assert code == 1 and "--replicas 3" in err and "cluster" in err, (code, out, err)


def test_password_from_file_and_environment_not_on_the_command_line(h):
    server = h.server("auth", user="alice", password="s3cret-pw")
    a = h.box("A", capacity=64, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    pw = os.path.join(h.tmp, "pw")
    with open(pw, "w") as f:
        f.write("s3cret-pw\n")
    e = h.bridge("export", a, "--nats", server.url, "--stream", stream, "--subject", subject, "--create-stream",
                 "--user", "alice", "--password-file", pw, name="export")
    e.expect("ready export", 20)
    with open(f"/proc/{e.pid}/cmdline", "rb") as f:
        assert b"s3cret" not in f.read()
    e.signal(signal.SIGTERM)
    assert e.wait(20)[0] == 0
    env = dict(os.environ, SHMBOX_NATS_USER="alice", SHMBOX_NATS_PASSWORD="s3cret-pw")
    p = h.proc([e.args[0], "export", a, "--nats", server.url, "--stream", stream, "--subject", subject], "export-env", env=env)
    p.expect("ready export", 20)
    p.signal(signal.SIGTERM)
    assert p.wait(20)[0] == 0
    empty = os.path.join(h.tmp, "empty")
    open(empty, "w").close()
    code, _, err, _ = h.run_bridge(["export", a, "--nats", server.url, "--stream", stream, "--subject", subject,
                                    "--user", "alice", "--password-file", empty])
    assert code == 2 and "empty" in err, (code, err)
    code, _, err, _ = h.run_bridge(["export", a, "--nats", server.url, "--stream", stream, "--subject", subject,
                                    "--user", "alice", "--password-file", os.path.join(h.tmp, "none")])
    assert code == 2 and "cannot read the password file" in err, (code, err)


def openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"openssl {' '.join(args)}: {r.stderr}"


def make_tls(tmp):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA."""
    if subprocess.run(["which", "openssl"], capture_output=True).returncode != 0:
        pytest.skip("openssl is not installed (apt-get install openssl)")
    d = os.path.join(tmp, "tls")
    os.makedirs(d)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=shmbox test CA", cwd=d)
    for who, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out", f"{who}.csr",
                "-subj", f"/CN=shmbox test {who}", cwd=d)
        with open(os.path.join(d, f"{who}.ext"), "w") as f:
            f.write(ext + "\n")
        openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{who}.pem", "-days", "2", "-extfile", f"{who}.ext", cwd=d)
    return {k: os.path.join(d, v) for k, v in (("ca", "ca.pem"), ("server_cert", "server.pem"), ("server_key", "server.key"),
                                                ("cert", "client.pem"), ("key", "client.key"))}


def test_tls_with_client_certificate(h):
    t = make_tls(h.tmp)
    config = (f'tls {{\n  cert_file: "{t["server_cert"]}"\n  key_file: "{t["server_key"]}"\n'
              f'  ca_file: "{t["ca"]}"\n  verify: true\n}}\n')
    server = h.server("tls", config=config, scheme="tls")
    a = h.box("A", capacity=64, slot_size=64)
    b = h.box("B", capacity=64, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    tls = ("--tls-ca", t["ca"], "--tls-cert", t["cert"], "--tls-key", t["key"])
    h.export(a, server, stream, subject, "--create-stream", *tls)
    h.import_(b, server, stream, "dt", *tls)
    producer = h.producer(a, "t")
    post(producer, 30)
    posted(producer)
    stored = report(producer)["stored"]
    compare(stored, [m[0] for m in drain(h.receiver(b, 30, timeout=30))["messages"]], "through TLS")
    # Without the client certificate the server refuses; without the CA the bridge does not trust it.
    for args, what in ((("--tls-ca", t["ca"]), "client certificate"), ((), "CA")):
        code, out, err, _ = h.run_bridge(["export", h.box("X", capacity=8), "--nats", server.url, "--stream", stream,
                                          "--subject", subject, *args])
        assert code == 1 and "cannot connect" in err, (what, code, out, err)
    code, _, err, _ = h.run_bridge(["export", a, "--nats", server.url, "--stream", stream, "--subject", subject,
                                    "--tls-cert", t["cert"]])
    assert code == 2 and "--tls-key" in err, err


def test_nkey_seed_file(h):
    seed, public, _ = nkey_pair("user")
    other_seed, _, _ = nkey_pair("user")
    config = f'authorization {{\n  users = [ {{ nkey: "{public}" }} ]\n}}\n'
    server = h.server("nkey", config=config)
    a = h.box("A", capacity=64, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    path = os.path.join(h.tmp, "user.nk")
    with open(path, "w") as f:
        f.write(seed + "\n")
    os.chmod(path, 0o600)
    e = h.export(a, server, stream, subject, "--create-stream", "--nkey", path)
    e.signal(signal.SIGTERM)
    assert e.wait(20)[0] == 0
    wrong = os.path.join(h.tmp, "other.nk")
    with open(wrong, "w") as f:
        f.write(other_seed + "\n")
    code, _, err, _ = h.run_bridge(["export", a, "--nats", server.url, "--stream", stream, "--subject", subject,
                                    "--nkey", wrong])
    assert code == 1 and "authoriz" in err.lower(), err
    assert other_seed not in err
    broken = os.path.join(h.tmp, "broken.nk")
    with open(broken, "w") as f:
        f.write(seed[:10] + ("A" if seed[10] != "A" else "B") + seed[11:] + "\n")  # a changed key byte: the checksum fails
    code, _, err, _ = h.run_bridge(["export", a, "--nats", server.url, "--stream", stream, "--subject", subject,
                                    "--nkey", broken])
    assert code == 1 and "damaged" in err, err


# ---------------------------------------------------------------------------
# Finding 3: every message the stream dropped is counted, before the first fetch and across restarts


def test_remote_drops_exact_before_first_fetch_and_across_import_restarts(h):
    server = h.server()
    b = h.box("B", capacity=1024, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    with server.client() as nc:
        nc.stream_create(stream, [subject], max_msgs=100, discard="old")
        for k in range(150):  # before any import: the stream keeps 51..150
            nc.publish(subject, f"a{k}")
    imp = h.import_(b, server, stream, "dd")
    wait_counter(b, "import", lambda c: c["imported"] == 100, "the 100 the stream kept")
    assert counters_of(b, "import")["remote_drops"] == 50
    imp.signal(signal.SIGKILL)
    imp.proc.wait(10)
    with server.client() as nc:
        for k in range(300):  # while no import runs: 151..450, the stream keeps 351..450
            nc.publish(subject, f"b{k}")
    h.import_(b, server, stream, "dd")
    wait_counter(b, "import", lambda c: c["imported"] == 200, "the 100 more the stream kept")
    i = counters_of(b, "import")
    assert i["remote_drops"] == 250 and i["duplicates"] == 0, i
    got = drain(h.receiver(b, 200, timeout=20))["messages"]
    assert len(got) == 200
    # The identity of docs/bridge.md: what the stream took = what B got + what the stream dropped.
    assert 450 == len(got) + i["remote_drops"]


# ---------------------------------------------------------------------------
# A JetStream cluster: three servers, a stream with three replicas, its leader killed and restarted


class ClusterURL:
    """Stands in for a server in Harness.export/import_: the whole cluster's URL list."""

    def __init__(self, servers):
        self.url = ",".join(s.url for s in servers)


def test_cluster_stream_leader_killed_and_restarted_exactly_once_in_order(h):
    servers = h.cluster(3)
    everyone = ClusterURL(servers)
    n = 2000
    a = h.box("A", capacity=512, slot_size=128, lanes=3)
    b = h.box("B", capacity=4096, slot_size=128, lanes=3)
    stream, subject = h.stream_name(), h.subject()
    exp = h.export(a, everyone, stream, subject, "--create-stream", "--replicas", "3")
    imp = h.import_(b, everyone, stream, "dc")

    def info():
        for s in servers:
            if s.proc is not None and s.proc.poll() is None:
                try:
                    return s.stream_info(stream)
                except OSError:
                    continue
        return None
    assert info()["config"]["num_replicas"] == 3
    producers = [h.producer(a, tag) for tag in ("c", "d")]
    for p in producers:
        post(p, n // 4, -1, pace_us=300)
        post(p, n // 4, 2, pace_us=300)
    wait_until("some messages through", lambda: stat(b)["counters"]["stored"] >= 300, 30)
    leader_name = info()["cluster"]["leader"]
    leader = next(s for s in servers if s.name == leader_name)
    leader.stop(signal.SIGKILL)
    at_kill = stat(b)["counters"]["stored"]
    wait_until("a new stream leader", lambda: (info() or {}).get("cluster", {}).get("leader") not in (None, leader_name), 30, 0.2)
    leader.start()
    stored = []
    for p in producers:
        posted(p, 120)
        posted(p, 120)
        stored += report(p)["stored"]
    got = [m[0] for m in drain(h.receiver(b, n, timeout=90))["messages"]]
    print(f"export {counters_of(a, 'export')}\nimport {counters_of(b, 'import')}\nstream {info()}")  # shown on failure
    print(exp.stderr(), imp.stderr())
    compare(stored, got, f"owner of B, the stream leader {leader_name} killed with B at {at_kill}")
    from test_bridge import in_order
    in_order(got, "owner of B across the leader's death")
    assert exp.alive() and imp.alive(), f"{exp.describe()} / {imp.describe()}"
    e, i = counters_of(a, "export"), counters_of(b, "import")
    assert e["acked"] == n and i["imported"] == n and i["remote_drops"] == 0, (e, i)
    print(f"leader {leader_name} killed at {at_kill}/{n}; export {e}; import {i}")


def _b64url(data):
    import base64 as b64
    return b64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(claims, issuer_key, issuer_pub):
    """A NATS JWT (nats-io/jwt v2): header.claims signed with the issuer's Ed25519 NKey."""
    import hashlib
    import json as js
    body = dict(claims, iat=int(time.time()), iss=issuer_pub)
    body["jti"] = base64.b32encode(hashlib.sha256(js.dumps(body, sort_keys=True).encode()).digest()).decode().rstrip("=")
    head = _b64url(js.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    payload = _b64url(js.dumps(body).encode())
    sig = issuer_key.sign(f"{head}.{payload}".encode())
    return f"{head}.{payload}.{_b64url(sig)}"


def test_creds_file_operator_mode(h):
    """--creds: a user JWT and its seed, on a server in operator mode (JWTs made here, signed with
    python3-cryptography's Ed25519) with JetStream enabled for the account."""
    op_seed, op_pub, op_key = nkey_pair("operator")
    acc_seed, acc_pub, acc_key = nkey_pair("account")
    sys_seed, sys_pub, sys_key = nkey_pair("account")
    user_seed, user_pub, _ = nkey_pair("user")
    limits = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True, "conn": -1,
              "leaf": -1, "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
    operator = _jwt({"sub": op_pub, "name": "shmbox-test", "nats": {"type": "operator", "version": 2}}, op_key, op_pub)
    account = _jwt({"sub": acc_pub, "name": "A", "nats": {"limits": limits, "default_permissions": {"pub": {}, "sub": {}},
                                                         "type": "account", "version": 2}}, op_key, op_pub)
    system = _jwt({"sub": sys_pub, "name": "SYS", "nats": {"limits": {k: v for k, v in limits.items()
                                                                     if k not in ("mem_storage", "disk_storage", "streams", "consumer")},
                                                          "type": "account", "version": 2}}, op_key, op_pub)
    user = _jwt({"sub": user_pub, "name": "bridge", "nats": {"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                                                            "type": "user", "version": 2}}, acc_key, acc_pub)
    config = (f'operator: "{operator}"\nsystem_account: {sys_pub}\nresolver: MEMORY\n'
              f'resolver_preload: {{\n  {acc_pub}: "{account}"\n  {sys_pub}: "{system}"\n}}\n')
    server = h.server("jwt", config=config)
    creds = os.path.join(h.tmp, "bridge.creds")
    with open(creds, "w") as f:
        f.write(f"-----BEGIN NATS USER JWT-----\n{user}\n------END NATS USER JWT------\n\n"
                f"-----BEGIN USER NKEY SEED-----\n{user_seed}\n------END USER NKEY SEED------\n")
    os.chmod(creds, 0o600)
    a = h.box("A", capacity=64, slot_size=64)
    b = h.box("B", capacity=64, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    h.export(a, server, stream, subject, "--create-stream", "--creds", creds)
    h.import_(b, server, stream, "dj", "--creds", creds)
    producer = h.producer(a, "j")
    post(producer, 20)
    posted(producer)
    wait_counter(b, "import", lambda c: c["imported"] == 20, "20 through a creds-authenticated pair")
    code, _, err, _ = h.run_bridge(["export", h.box("X", capacity=8), "--nats", server.url, "--stream", stream,
                                    "--subject", subject])
    assert code == 1 and "authoriz" in err.lower(), err
    code, _, err, _ = h.run_bridge(["export", a, "--nats", server.url, "--stream", stream, "--subject", subject,
                                    "--creds", os.path.join(h.tmp, "none.creds")])
    assert code == 2 and "cannot read the --creds file" in err, err


# ---------------------------------------------------------------------------
# A status segment written over by its owner (or root): since issue 53 nobody else may write one a
# bridge adopts (tests/bridge/test_trust.py); the import still reads its record and cursors as
# untrusted, bounded before use; they can cost the box's own messages, nothing else.


STATUS_SIZE = 3896  # bridge/status_layout.hpp


def test_import_with_forged_status_record_starts_and_stays_in_bounds(h):
    server = h.server()
    b = h.box("B", capacity=64, slot_size=64, mode=0o666)
    stream, subject = h.stream_name(), h.subject()
    with server.client() as nc:
        nc.stream_create(stream, [subject])
    imp = h.import_(b, server, stream, "df")
    imp.signal(signal.SIGTERM)
    assert imp.wait(20)[0] == 0
    path = f"/dev/shm/shmbox-bridge.{b}.import"
    rng = __import__("random").Random(32)
    with open(path, "r+b") as f:
        f.seek(1056)  # state, last error, the import record, the cursors (and the export record): random bytes
        f.write(bytes(rng.getrandbits(8) for _ in range(STATUS_SIZE - 1056)))
    st = stat(b)  # the CLI shows it, bounded (a state out of range, a last error without a NUL)
    entry = next(x for x in st["bridges"] if x["role"] == "import")
    assert entry["state"] in ("starting", "stopped") and len(entry["last_error"] or "") <= 255, entry
    imp = h.import_(b, server, stream, "df")  # a forged post in flight: adopt refuses a foreign entry
    with server.client() as nc:
        for k in range(10):
            nc.publish(subject, f"f{k}")
    wait_counter(b, "import", lambda c: c["imported"] + c["duplicates"] >= 10, "the 10 handled (posted, or skipped by a forged cursor)")
    assert imp.alive(), imp.describe()
    assert len(stat(b)["producers"]) <= 2, "no producer entry beyond its own taken on the forged record's word"


def test_export_with_forged_ordinals_still_delivers_everything(h):
    """The export record (each lane's ordinal and a commit in flight) overwritten with random bytes
    by its owner: the export starts, every message still reaches B exactly once and in order; what
    the forgery costs is the truth of the ordinals (bounded by what box A delivered)."""
    server = h.server()
    a = h.box("A", capacity=64, slot_size=64, mode=0o666, lanes=3)
    b = h.box("B", capacity=512, slot_size=64, lanes=3)
    stream, subject = h.stream_name(), h.subject()
    exp = h.export(a, server, stream, subject, "--create-stream")
    exp.signal(signal.SIGTERM)
    assert exp.wait(20)[0] == 0
    rng = __import__("random").Random(33)
    with open(f"/dev/shm/shmbox-bridge.{a}.export", "r+b") as f:
        f.seek(1056)
        f.write(bytes(rng.getrandbits(8) for _ in range(STATUS_SIZE - 1056)))
    exp = h.export(a, server, stream, subject, "--create-stream")
    h.import_(b, server, stream, "dg")
    producer = h.producer(a, "g")
    post(producer, 100, -1)
    post(producer, 100, 0)
    posted(producer)
    posted(producer)
    stored = report(producer)["stored"]
    got = [m[0] for m in drain(h.receiver(b, 200, timeout=30))["messages"]]
    compare(stored, got, "owner of B behind an export with a forged status segment")
    assert exp.alive(), exp.describe()
