"""The bridge's status segment and THE TRUST RULE (lib/base/shm_file.hpp T3; issue 53 item 3).

/dev/shm/shmbox-bridge.BOX.ROLE is at a name any local user may take first. A second user (uid
65534, a forked child of this root test) plants one before root's bridge starts: with a posted_seq
of 2^62 it made root's import ack every message and post none; with published = 10^12 the export
adopted its counters. A bridge now adopts a status segment only when it is its own uid's and nobody
else may write it, else it refuses to start, saying what the file is, whose, and what to do; and a
record of its own from an earlier run is bounded by what JetStream (the import's stream sequences)
and the box (the export's ordinals) prove before it is used.

Every process is a separate program (nats-server, bridges, producers, owners); every wait is
bounded; the Harness removes everything, also when a test fails.
"""

import contextlib
import fcntl
import os
import signal
import struct
import subprocess

import pytest

from conftest import stat, wait_until
from test_bridge import compare, counters_of, drain, post, posted, report, wait_counter

# bridge/status_layout.hpp
STATUS_SIZE = 3896
MAGIC = 0x0145474449524253  # "SBRIDGE\x01"
VERSION = 3
ROLE = {"export": 1, "import": 2}
COUNTERS = 800  # counters[32], bridge_counter order: published is 0
STATE = 1056
IMPORT_RECORD = 1336
LAST_STREAM_SEQ = IMPORT_RECORD + 72
STREAM_KEY = IMPORT_RECORD + 80  # stream_created_ns: the stream, durable and subject the sequences belong to
POSTED_SEQ = IMPORT_RECORD + 96
EXPORT_SENT = 3640  # sent[8]: per lane, the ordinal of its next message

OTHER_UID = 65534


def need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root: the second user (uid 65534) is a forked child that drops to it")


def image(role, fields=()):
    """The bytes of a status segment of `role` a working bridge could have left, with `fields`
    ((offset, u64 value), ...) written over it."""
    b = bytearray(STATUS_SIZE)
    struct.pack_into("<QII", b, 0, MAGIC, VERSION, ROLE[role])
    struct.pack_into("<Q", b, 16, 4242)   # pid
    struct.pack_into("<I", b, STATE, 1)   # connected
    for off, v in fields:
        struct.pack_into("<Q", b, off, v)
    return bytes(b)


def plant_as_other_user(path, data, mode=0o644):
    """uid 65534 makes `path` (O_EXCL: nothing may be there) with `mode` and `data`."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            os.fchmod(fd, mode)
            os.pwrite(fd, data, 0)
            os.close(fd)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"uid {OTHER_UID} could not plant {path}"
    st = os.stat(path)
    assert st.st_uid == OTHER_UID


@contextlib.contextmanager
def read_locked_by_other_user(path):
    """uid 65534, who may read `path` (0644), holds a read lock on its byte 0 (the byte a working
    bridge write-locks) until the block ends: what any reader of a status segment can do."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(ready_r)
            os.close(done_w)
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            fd = os.open(path, os.O_RDONLY)
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_RDLCK, os.SEEK_SET, 0, 1, 0))
            os.write(ready_w, b"r")
            os.read(done_r, 1)  # until the parent closes its end
            code = 0
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(done_r)
    try:
        assert os.read(ready_r, 1) == b"r", f"uid {OTHER_UID} could not read-lock {path}"
        yield
    finally:
        os.close(ready_r)
        os.close(done_w)
        os.waitpid(pid, 0)


def forge(path, fields):
    """Writes u64 `fields` ((offset, value), ...) into a status segment (as root, its owner)."""
    with open(path, "r+b") as f:
        for off, v in fields:
            f.seek(off)
            f.write(struct.pack("<Q", v))


def read_u64(path, off):
    with open(path, "rb") as f:
        f.seek(off)
        return struct.unpack("<Q", f.read(8))[0]


def exit_code(proc, timeout):
    """The bridge's exit code, or None while it still runs after `timeout` s."""
    try:
        return proc.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def assert_refusal(proc, path, role):
    err = proc.stderr()
    for said in (path, f"uid {OTHER_UID}", "mode 0644", f"rm {path}"):
        assert said in err, f"the {role}'s refusal does not say {said!r}: {err!r}"
    assert f"ready {role}" not in "\n".join(proc.lines)


# ---------------------------------------------------------------------------
# (a) the import: a planted status with posted_seq = 2^62


def test_import_refuses_a_status_another_user_planted_nothing_posted_or_acked(h):
    need_root()
    server = h.server()
    b = h.box("B", capacity=256, slot_size=64)
    scratch = h.box("C", capacity=8, slot_size=64, mode=0o644)
    stream, subject, durable = h.stream_name(), h.subject(), "dp"
    with server.client() as nc:
        nc.stream_create(stream, [subject])
    # What the planter can learn from any readable import status of this stream, durable and
    # subject: the key its sequences belong to (so that the import does not start them afresh).
    scratch_import = h.import_(scratch, server, stream, durable)
    scratch_import.signal(signal.SIGTERM)
    assert scratch_import.wait(20)[0] == 0
    key = read_u64(f"/dev/shm/shmbox-bridge.{scratch}.import", STREAM_KEY)
    path = f"/dev/shm/shmbox-bridge.{b}.import"
    plant_as_other_user(path, image("import", [(STREAM_KEY, key), (POSTED_SEQ, 2**62), (LAST_STREAM_SEQ, 2**62)]))
    with server.client() as nc:
        for k in range(100):
            nc.publish(subject, f"m{k:03d}")

    imp = h.import_(b, server, stream, durable, expect=None)
    code = exit_code(imp, 15)
    if code is None:
        c = wait_counter(b, "import", lambda c: c["imported"] + c["duplicates"] >= 100, "the 100 handled", 20)
        pytest.fail(f"root's import adopted the status uid {OTHER_UID} planted: box B holds {stat(b)['depth']} of 100, "
                    f"imported {c['imported']}, duplicates {c['duplicates']}")
    assert code == 1, imp.describe()
    assert_refusal(imp, path, "import")
    # Nothing was posted, nothing acked: the stream still has all 100 for the durable.
    assert stat(b)["depth"] == 0
    with server.client() as nc:
        ci = nc.consumer_info(stream, durable)
    assert ci["ack_floor"]["stream_seq"] == 0 and ci["num_ack_pending"] == 0 and ci["num_pending"] == 100, ci
    assert os.stat(path).st_uid == OTHER_UID, "the planted file is left where it was"

    os.unlink(path)  # what the refusal says to do
    h.import_(b, server, stream, durable)
    wait_counter(b, "import", lambda c: c["imported"] == 100, "the 100 imported", 20)
    got = [m[0] for m in drain(h.receiver(b, 100, timeout=20))["messages"]]
    assert got == [f"m{k:03d}" for k in range(100)]
    c = counters_of(b, "import")
    assert c["duplicates"] == 0 and c["remote_drops"] == 0, c
    st = os.stat(path)
    assert st.st_uid == 0 and st.st_mode & 0o022 == 0, oct(st.st_mode)


def test_import_bounds_its_own_record_by_the_stream_posted_seq_beyond_it_is_refused_and_said(h):
    """Its own status (root's, 0600) whose posted_seq and last sequence say 2^62, beyond the stream's
    last sequence: a record no import of this stream can have written. The import says so, starts
    the record again at the durable's ack floor, and posts everything once."""
    server = h.server()
    b = h.box("B", capacity=256, slot_size=64)
    stream, subject, durable = h.stream_name(), h.subject(), "db"
    with server.client() as nc:
        nc.stream_create(stream, [subject])
        for k in range(10):
            nc.publish(subject, f"a{k:03d}")
    imp = h.import_(b, server, stream, durable)
    wait_counter(b, "import", lambda c: c["imported"] == 10, "the first 10")
    imp.signal(signal.SIGTERM)
    assert imp.wait(20)[0] == 0
    path = f"/dev/shm/shmbox-bridge.{b}.import"
    assert read_u64(path, POSTED_SEQ) == 10
    forge(path, [(POSTED_SEQ, 2**62), (LAST_STREAM_SEQ, 2**62)])
    with server.client() as nc:
        for k in range(100):
            nc.publish(subject, f"m{k:03d}")
    imp = h.import_(b, server, stream, durable)
    try:
        wait_counter(b, "import", lambda c: c["imported"] == 110, "the 100 more imported", 20)
    except pytest.fail.Exception:
        pytest.fail(f"the import took posted_seq 2^62 from its record: {counters_of(b, 'import')}, box B holds {stat(b)['depth']}")
    got = [m[0] for m in drain(h.receiver(b, 110, timeout=20))["messages"]]
    assert got == [f"a{k:03d}" for k in range(10)] + [f"m{k:03d}" for k in range(100)]
    c = counters_of(b, "import")
    assert c["duplicates"] == 0 and c["remote_drops"] == 0, c
    err = imp.stderr()
    assert "beyond" in err and "stream sequence" in err and path in err, err
    assert read_u64(path, POSTED_SEQ) == 110


# ---------------------------------------------------------------------------
# (b) the export: a planted status with published = 10^12


def test_export_refuses_a_status_another_user_planted(h):
    need_root()
    server = h.server()
    a = h.box("A", capacity=256, slot_size=64)
    b = h.box("B", capacity=256, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    path = f"/dev/shm/shmbox-bridge.{a}.export"
    plant_as_other_user(path, image("export", [(COUNTERS, 10**12)] + [(EXPORT_SENT + 8 * lane, 10**12) for lane in range(8)]))

    exp = h.export(a, server, stream, subject, "--create-stream", expect=None)
    code = exit_code(exp, 15)
    if code is None:
        pytest.fail(f"root's export adopted the status uid {OTHER_UID} planted: {counters_of(a, 'export')}")
    assert code == 1, exp.describe()
    assert_refusal(exp, path, "export")
    assert stat(a)["owner"]["pid"] == 0, "the refused export never owned the box"

    os.unlink(path)
    h.export(a, server, stream, subject, "--create-stream")
    h.import_(b, server, stream, "de")
    producer = h.producer(a, "e")
    post(producer, 100)
    posted(producer)
    stored = report(producer)["stored"]
    got = [m[0] for m in drain(h.receiver(b, 100, timeout=30))["messages"]]
    compare(stored, got, "owner of B")
    e = wait_counter(a, "export", lambda c: c["acked"] == 100, "the 100 acked")
    assert e["published"] == 100, e
    i = wait_counter(b, "import", lambda c: c["imported"] == 100, "the 100 imported")
    assert i["duplicates"] == 0 and i["remote_drops"] == 0, i


def test_export_bounds_its_own_ordinals_by_what_the_box_delivered(h):
    """Its own status (root's) whose ordinals say 10^12 while box A delivered 10: the box proves no
    export can have numbered that many; the export says so and numbers the lane from 0 again (the
    import takes a lower ordinal for a count started over: nothing counted lost)."""
    server = h.server()
    a = h.box("A", capacity=256, slot_size=64)
    b = h.box("B", capacity=256, slot_size=64)
    stream, subject = h.stream_name(), h.subject()
    exp = h.export(a, server, stream, subject, "--create-stream")
    h.import_(b, server, stream, "do")
    producer = h.producer(a, "o")
    post(producer, 10)
    posted(producer)
    wait_counter(b, "import", lambda c: c["imported"] == 10, "the first 10")
    exp.signal(signal.SIGTERM)
    assert exp.wait(20)[0] == 0
    path = f"/dev/shm/shmbox-bridge.{a}.export"
    forge(path, [(EXPORT_SENT + 8 * lane, 10**12) for lane in range(8)])
    exp = h.export(a, server, stream, subject, "--create-stream")
    post(producer, 10)
    posted(producer)
    stored = report(producer)["stored"]
    i = wait_counter(b, "import", lambda c: c["imported"] == 20, "the 10 more")
    assert i["remote_drops"] == 0, f"the export took ordinal 10^12 from its record: {i}"
    got = [m[0] for m in drain(h.receiver(b, 20, timeout=30))["messages"]]
    compare(stored, got, "owner of B")
    err = exp.stderr()
    assert "ordinal" in err and "delivered" in err and path in err, err


# ---------------------------------------------------------------------------
# The lock on byte 0 (a working bridge's write lock: readers call it alive). A planted file no longer
# counts (refused above), but anyone who may read a status segment may take a READ lock on it.


def bridge_alive(box, role):
    e = counters_of(box, role)
    return e is not None and e["alive"]


def test_a_readers_read_lock_is_named_by_the_import_and_waited_out_by_the_export(h):
    need_root()
    server = h.server()
    a = h.box("A", capacity=64, slot_size=64, mode=0o644)  # its status: 0644, readable by uid 65534
    b = h.box("B", capacity=64, slot_size=64, mode=0o644)
    stream, subject = h.stream_name(), h.subject()
    exp = h.export(a, server, stream, subject, "--create-stream")
    imp = h.import_(b, server, stream, "dl")
    for p in (exp, imp):
        p.signal(signal.SIGTERM)
        assert p.wait(20)[0] == 0
    a_status, b_status = (f"/dev/shm/shmbox-bridge.{x}" for x in (f"{a}.export", f"{b}.import"))
    with read_locked_by_other_user(b_status):
        assert not bridge_alive(b, "import"), "a read lock is not a bridge"
        code, _, err, _ = h.run_bridge(["import", "--nats", server.url, "--stream", stream, "--durable", "dl", "--into", b], 20)
        assert code == 1 and "read lock" in err and b_status in err, err
    h.import_(b, server, stream, "dl")
    wait_until("the import alive", lambda: bridge_alive(b, "import"), 10)
    with read_locked_by_other_user(a_status):
        exp = h.export(a, server, stream, subject, "--create-stream")
        assert not bridge_alive(a, "export")
    # The reader let go: the export takes its lock within about a second; the box flows all along.
    wait_until("the export alive once the read lock is gone", lambda: bridge_alive(a, "export"), 10)
    assert "got the lock" in exp.stderr(), exp.stderr()
    producer = h.producer(a, "l")
    post(producer, 10)
    posted(producer)
    wait_counter(b, "import", lambda c: c["imported"] == 10, "the 10 through")
