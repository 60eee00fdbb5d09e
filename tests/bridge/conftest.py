"""Fixtures of the NATS JetStream bridge's integration tests (docs/bridge.md).

Environment (set by the meson test 'bridge'; defaults for a run from the
source tree after `bash scripts/setup.sh`):
  SHMBOX_BRIDGE   the bridge (default build/bridge/shmbox-bridge)
  SHMBOX_CLI      the shmbox CLI (default build/tools/shmbox)
  SHMBOX_PY_DIR   the built Python package's directory (default build/python)
  SHMBOX_HELPER   the tests' helper (unused so far; accepted for symmetry with the 'python' suite)
  SHMBOX_NATS_SERVER  nats-server (default: the one on PATH)

Every process a test starts is a separate program (nats-server, the bridges,
producers and owners: Python programs over the shmbox package, started with
this interpreter), every wait is bounded, and the Harness removes everything
(processes, boxes and the bridges' status segments, nats-server store
directories) also when a test fails.
"""

import base64
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.environ.get("SHMBOX_SOURCE_ROOT") or os.path.dirname(os.path.dirname(TESTS_DIR))
BUILD = os.path.join(SOURCE_ROOT, "build")
# The Python package as built (-Dpython=enabled): build/python/shmbox.
PYTHON_DIR = os.environ.get("SHMBOX_PY_DIR") or os.path.join(BUILD, "python")

CLI = os.environ.get("SHMBOX_CLI") or os.path.join(BUILD, "tools", "shmbox")
BRIDGE = os.environ.get("SHMBOX_BRIDGE") or os.path.join(BUILD, "bridge", "shmbox-bridge")
HELPER = os.environ.get("SHMBOX_HELPER") or os.path.join(BUILD, "tests", "shmbox-test-helper")
NATS_SERVER = os.environ.get("SHMBOX_NATS_SERVER") or shutil.which("nats-server") or "/usr/sbin/nats-server"

sys.path.insert(0, PYTHON_DIR)
os.environ["PYTHONPATH"] = PYTHON_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")

import shmbox  # noqa: E402  (after sys.path is set)

# Every name this run creates carries it: two runs at once do not meet.
RUN = f"{os.getpid()}"
TEST_PREFIX = f"t-{os.environ['SHMBOX_TEST_RUN']}-" if os.environ.get("SHMBOX_TEST_RUN") else "t-"


def need(path, what):
    if not os.access(path, os.X_OK):
        pytest.skip(f"{what} not built or not installed: {path}")
    return path


def free_port():
    """A TCP port nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, cond, timeout, interval=0.02):
    """Polls cond() until it returns a true value (returned), failing the test after `timeout` s.
    Only for states that announce themselves nowhere (a stream's count, a counter)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = cond()
        if last:
            return last
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------
# A tiny NATS client (plain TCP, the text protocol): enough for JetStream API
# requests ($JS.API.*), which is how the tests look at streams: there is no
# nats CLI in Debian.


class NatsError(Exception):
    pass


class Nats:
    def __init__(self, port, user=None, password=None, timeout=5.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.buf = b""
        self.inbox = f"_INBOX.t{RUN}{uuid.uuid4().hex[:8]}"
        self.n = 0
        info = self._line()
        if not info.startswith(b"INFO "):
            raise NatsError(f"expected INFO, got {info!r}")
        connect = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True,
                   "name": "shmbox-bridge-tests", "lang": "python", "version": "0"}
        if user is not None:
            connect.update(user=user, **{"pass": password})
        self.sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        while True:
            line = self._line()
            if line == b"PONG":
                break
            if line.startswith(b"-ERR"):
                raise NatsError(line.decode(errors="replace"))
        self.sock.sendall(f"SUB {self.inbox}.* 1\r\n".encode())

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise NatsError("connection closed by the server")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def request(self, subject, payload=b"", timeout=5.0):
        """(headers bytes or None, payload bytes) of the reply to a request."""
        if isinstance(payload, (dict, list)):
            payload = json.dumps(payload).encode()
        reply = self._next_reply()
        frame = f"PUB {subject} {reply} {len(payload)}\r\n".encode() + payload + b"\r\n"
        return self._send_and_wait(frame, reply, subject, timeout)

    def _next_reply(self):
        self.n += 1
        return f"{self.inbox}.{self.n}"

    def _reply(self, reply, subject):
        while True:
            line = self._line()
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            if line in (b"PONG", b"+OK") or line.startswith(b"INFO "):
                continue
            if line.startswith(b"-ERR"):
                raise NatsError(line.decode(errors="replace"))
            parts = line.split()
            if parts[0] == b"MSG":  # MSG subject sid [reply] size
                hdrs, body = None, self._exact(int(parts[-1]))
            elif parts[0] == b"HMSG":  # HMSG subject sid [reply] hdr-size total-size
                raw = self._exact(int(parts[-1]))
                hdrs, body = raw[:int(parts[-2])], raw[int(parts[-2]):]
            else:
                raise NatsError(f"unexpected line {line!r}")
            if parts[1].decode() != reply:
                continue  # a late reply to an earlier request
            if hdrs is not None and b" 503" in hdrs.split(b"\r\n", 1)[0]:
                raise NatsError(f"no responders for {subject} (JetStream not enabled?)")
            return hdrs, body

    def publish(self, subject, data, headers=None, timeout=5.0):
        """Publishes to JetStream (with headers: HPUB) and returns the PubAck as a dict."""
        if isinstance(data, str):
            data = data.encode()
        reply = self._next_reply()
        if headers:
            hdr = ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
            frame = f"HPUB {subject} {reply} {len(hdr)} {len(hdr) + len(data)}\r\n".encode() + hdr + data + b"\r\n"
        else:
            frame = f"PUB {subject} {reply} {len(data)}\r\n".encode() + data + b"\r\n"
        return json.loads(self._send_and_wait(frame, reply, subject, timeout)[1])

    def _send_and_wait(self, frame, reply, subject, timeout):
        self.sock.settimeout(timeout)
        self.sock.sendall(frame)
        return self._reply(reply, subject)

    def js(self, api, payload=b"", timeout=5.0):
        """A JetStream API call: $JS.API.<api>; the reply as a dict."""
        _, body = self.request("$JS.API." + api, payload, timeout)
        return json.loads(body)

    def stream_info(self, stream):
        """The stream's info (config, state), or None when it does not exist."""
        r = self.js(f"STREAM.INFO.{stream}")
        if "error" in r:
            if r["error"].get("err_code") == 10059 or r["error"].get("code") == 404:
                return None
            raise NatsError(f"STREAM.INFO {stream}: {r['error']}")
        return r

    def stream_create(self, stream, subjects, storage="file", **config):
        cfg = {"name": stream, "subjects": list(subjects), "storage": storage, "retention": "limits",
               "discard": "old", "max_msgs": -1, "duplicate_window": 120 * 10**9, "num_replicas": 1}
        cfg.update(config)
        r = self.js(f"STREAM.CREATE.{stream}", cfg)
        if "error" in r:
            raise NatsError(f"STREAM.CREATE {stream}: {r['error']}")
        return r

    def stream_msg(self, stream, seq):
        """(headers dict, data bytes) of the message at `seq`, or None when there is none."""
        r = self.js(f"STREAM.MSG.GET.{stream}", {"seq": seq})
        if "error" in r:
            return None
        m = r["message"]
        headers = {}
        if m.get("hdrs"):
            for h in base64.b64decode(m["hdrs"]).decode(errors="replace").split("\r\n")[1:]:
                if ":" in h:
                    k, v = h.split(":", 1)
                    headers[k.strip()] = v.strip()
        return headers, base64.b64decode(m.get("data") or "")

    def consumer_info(self, stream, durable):
        r = self.js(f"CONSUMER.INFO.{stream}.{durable}")
        return None if "error" in r else r


def stream_info(port, stream, **kw):
    with Nats(port, **kw) as nc:
        return nc.stream_info(stream)


def stream_stored(port, stream):
    """How many messages the stream ever stored (its last sequence: counts also messages a
    limit or a work queue removed since), 0 when it does not exist."""
    info = stream_info(port, stream)
    return 0 if info is None else info["state"]["last_seq"]


# --------------------------------------------------------------------------
# Processes


class Proc:
    """A child: stdin and stdout pipes (stdout read line by line, each read bounded), stderr to a file."""

    def __init__(self, args, name, tmp, env=None):
        self.args = [str(a) for a in args]
        self.name = name
        self.err_path = os.path.join(tmp, f"{name}.stderr")
        self._err = open(self.err_path, "wb")
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     env=env, bufsize=0)
        self.pid = self.proc.pid
        self._buf = b""
        self.lines = []
        self.stopped = False  # SIGSTOPped by the test

    def __repr__(self):
        return f"<{self.name} pid {self.pid}: {' '.join(self.args[:4])}...>"

    def stderr(self):
        try:
            with open(self.err_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def describe(self):
        tail = self.stderr()[-3000:]
        return f"{self.name} (pid {self.pid}, exit {self.proc.poll()}): stdout lines {self.lines[-10:]}; stderr: {tail!r}"

    def line(self, timeout=20.0):
        """The next stdout line (no newline); fails the test after `timeout` s or at EOF."""
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    pytest.fail(f"no line within {timeout} s from {self.describe()}")
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    try:
                        self.proc.wait(2)
                    except subprocess.TimeoutExpired:
                        pass
                    pytest.fail(f"stdout closed: {self.describe()}")
                self._buf += chunk
        finally:
            sel.close()
        line, self._buf = self._buf.split(b"\n", 1)
        text = line.decode(errors="replace")
        self.lines.append(text)
        return text

    def expect(self, prefix, timeout=20.0):
        text = self.line(timeout)
        if not text.startswith(prefix):
            pytest.fail(f"expected a line starting {prefix!r}, got {text!r}: {self.describe()}")
        return text

    def send(self, text):
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout=20.0):
        """Waits for the exit (failing the test after `timeout` s); returns (code, rest of stdout)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        deadline = time.monotonic() + timeout
        rest = self._buf
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    pytest.fail(f"still running after {timeout} s: {self.describe()}")
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                rest += chunk
        finally:
            sel.close()
        self._buf = b""
        try:
            code = self.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"closed stdout but did not exit within {timeout} s: {self.describe()}")
        text = rest.decode(errors="replace")
        self.lines.extend(text.splitlines())
        return code, text

    def cleanup(self):
        if self.proc.poll() is None:
            if self.stopped:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for f in (self.proc.stdin, self.proc.stdout, self._err):
            try:
                f.close()
            except OSError:
                pass


class NatsServer:
    """nats-server with JetStream on 127.0.0.1:port, file store in its own directory; start()
    again (after stop()) restarts it on the same port and directory."""

    def __init__(self, tmp, name, user=None, password=None, config=None, scheme="nats"):
        self.port = free_port()
        self.name = name
        self.user, self.password = user, password
        self.config, self.scheme = config, scheme  # nats-server configuration text (TLS, NKeys ...), the URL's scheme
        self.store = os.path.join(tmp, f"{name}-store")
        os.makedirs(self.store, exist_ok=True)
        self.log = os.path.join(tmp, f"{name}.log")
        self.proc = None
        self.stopped = False

    @property
    def url(self):
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def log_text(self, since=0):
        try:
            with open(self.log, "rb") as f:
                f.seek(since)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def start(self, timeout=15.0):
        need(NATS_SERVER, "nats-server")
        since = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        args = [NATS_SERVER, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", self.store]
        if self.user is not None:
            args += ["--user", self.user, "--pass", self.password]
        if self.config is not None:
            conf = os.path.join(os.path.dirname(self.store), f"{self.name}.conf")
            with open(conf, "w") as f:
                f.write(self.config)
            args += ["-c", conf]
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT)
        self.stopped = False
        deadline = time.monotonic() + timeout
        while "Server is ready" not in self.log_text(since):
            if self.proc.poll() is not None:
                pytest.fail(f"nats-server exited {self.proc.returncode}: {self.log_text(since)[-2000:]}")
            if time.monotonic() >= deadline:
                pytest.fail(f"nats-server not ready within {timeout} s: {self.log_text(since)[-2000:]}")
            time.sleep(0.01)
        return self

    def pause(self):
        """SIGSTOP, and returns once the kernel says it is stopped (state T): a signal is
        delivered asynchronously, and a loaded machine may let the server run on meanwhile."""
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped = True
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    return
            time.sleep(0.005)
        raise AssertionError(f"nats-server {self.proc.pid} did not stop within 10 s of SIGSTOP")

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)
        self.stopped = False

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Stops it (SIGTERM: a clean shutdown, the store flushed); SIGKILL after `timeout` s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.stopped:
            self.resume()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def client(self, **kw):
        if self.user is not None and "user" not in kw:
            kw.update(user=self.user, password=self.password)
        return Nats(self.port, **kw)

    def stream_info(self, stream):
        with self.client() as nc:
            return nc.stream_info(stream)

    def stored(self, stream):
        """Messages the stream ever stored (last_seq), 0 when it does not exist."""
        info = self.stream_info(stream)
        return 0 if info is None else info["state"]["last_seq"]


# --------------------------------------------------------------------------
# Producer and owner programs (Python over the shmbox package, each its own process)

# A producer process: attaches to BOX; reads commands on stdin:
#   post COUNT LANE RETRY PACE_US [RETRY_S]
#                                  posts COUNT messages, each distinct: "TAG:LANE:SEQ:pad" (LANE -1: a
#                                  plain post, the box's default lane, named in the payload); RETRY 1: a
#                                  full box is retried until stored (RETRY_S s at most, default 60, else
#                                  exit 3); PACE_US: a pause after each post. Answers "posted stored=S full=F".
#   report                         answers one JSON line: {"stored": [payloads], "full": F, "statuses": {..}}
PRODUCER = r"""
import json, sys, time
import shmbox
box, tag = sys.argv[1], sys.argv[2]
default_lane = shmbox.Box.open(box).default_lane
p = shmbox.Producer.attach(box)
seq, stored, full_total, statuses = 0, [], 0, {}
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "post":
        count, lane, retry, pace = int(cmd[1]), int(cmd[2]), cmd[3] == "1", int(cmd[4])
        retry_s = float(cmd[5]) if len(cmd) > 5 else 60.0
        s = f = 0
        for _ in range(count):
            real = default_lane if lane < 0 else lane
            data = f"{tag}:{real}:{seq:07d}:{(tag + str(seq)) * 4}".encode()[:80]
            seq += 1
            deadline = time.monotonic() + retry_s
            while True:
                st = p.post(data) if lane < 0 else p.post(data, lane=lane)
                statuses[str(st)] = statuses.get(str(st), 0) + 1
                if st.stored:
                    stored.append(data.decode())
                    s += 1
                    break
                f += 1
                full_total += 1
                if not retry:
                    break
                if time.monotonic() > deadline:
                    print(f"error: {tag} could not post {data!r} in {retry_s} s (last status {st})", file=sys.stderr)
                    sys.exit(3)
                time.sleep(0.0005)
            if pace:
                time.sleep(pace / 1e6)
        print(f"posted stored={s} full={f}", flush=True)
    elif cmd[0] == "report":
        print(json.dumps({"stored": stored, "full": full_total, "statuses": statuses}), flush=True)
    elif cmd[0] == "quit":
        break
p.close()
"""

# An owner process: acquires BOX, prints "ready", receives until it has EXPECT messages (-1: until told
# by "expect N" on stdin) or TIMEOUT s passed, keeps receiving LINGER s more (to see duplicates), then
# prints one JSON line {"messages": [[payload, lane, redelivered], ...], "timed_out": bool}.
RECEIVER = r"""
import json, os, selectors, sys, time
import shmbox
box, expect, timeout, linger = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
o = shmbox.Owner.acquire(box)
print("ready", flush=True)
sel = selectors.DefaultSelector()
sel.register(sys.stdin, selectors.EVENT_READ)
got = []
deadline = time.monotonic() + timeout
def take(t):
    for m in o.receive_batch(256, timeout=t):
        got.append([m.data.decode("latin-1"), m.lane, m.redelivered])
while time.monotonic() < deadline and (expect < 0 or len(got) < expect):
    for _ in sel.select(0):
        line = sys.stdin.readline()
        if line.startswith("expect "):
            expect = int(line.split()[1])
    take(0.05)
timed_out = expect < 0 or len(got) < expect
end = time.monotonic() + linger
while time.monotonic() < end:
    take(0.05)
o.close()
print(json.dumps({"messages": got, "timed_out": timed_out}), flush=True)
"""


def parse_payload(p):
    """(producer tag, lane, seq) of a producer's payload."""
    tag, lane, seq, _ = p.split(":", 3)
    return tag, int(lane), int(seq)


# --------------------------------------------------------------------------
# Reading `shmbox stat --json`


def stat(name):
    r = subprocess.run([CLI, "stat", name, "--json"], capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        pytest.fail(f"shmbox stat {name} --json: exit {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


def bridge_entry(st, role):
    """The bridge of `role` in a `stat --json` object, its counters merged in (whether "bridges" is a
    list of objects with "role" or an object keyed by role, counters flat or under "counters"); None."""
    bridges = st.get("bridges")
    entry = None
    if isinstance(bridges, dict):
        entry = bridges.get(role)
        if entry is not None:
            entry = dict(entry, role=role)
    elif isinstance(bridges, list):
        entry = next((b for b in bridges if b.get("role") == role), None)
    if entry is None:
        return None
    flat = dict(entry)
    if isinstance(entry.get("counters"), dict):
        flat.update(entry["counters"])
    return flat


# --------------------------------------------------------------------------
# NKeys (the encoding of nats-io/nkeys: base32 of prefix, key, CRC-16/XMODEM), with Ed25519 from
# python3-cryptography, independent of the bridge's own derivation of a public key from a seed.

_NKEY_PREFIX = {"seed": 18 << 3, "user": 20 << 3, "account": 0, "operator": 14 << 3}


def _crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def _nkey_encode(raw):
    return base64.b32encode(raw + _crc16(raw).to_bytes(2, "little")).decode().rstrip("=")


def nkey_pair(kind="user"):
    """(seed "S.", public key "U." / "A." / "O.", the cryptography private key) of a new NKey."""
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        pytest.skip("python3-cryptography is not installed (apt-get install python3-cryptography)")
    key = Ed25519PrivateKey.generate()
    raw_seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    raw_pub = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    p = _NKEY_PREFIX[kind]
    seed = _nkey_encode(bytes([_NKEY_PREFIX["seed"] | (p >> 5), (p & 31) << 3]) + raw_seed)
    return seed, _nkey_encode(bytes([p]) + raw_pub), key


# The counters of each role (docs/bridge.md); a role shows only its own.
EXPORT_COUNTERS = ("published", "acked", "publish_errors", "dedupe_hits", "redeliveries", "publish_unsent",
                   "publish_refused", "ack_timeouts", "reconnects", "stream_recreated")
IMPORT_COUNTERS = ("redeliveries", "remote_drops", "imported", "naks", "local_drops", "fetch_errors", "reconnects",
                   "durable_recreated", "duplicates", "uncertain_posts", "resyncs")
BRIDGE_STATES = ("starting", "connected", "reconnecting", "stream_missing", "consumer_missing", "stopped")


# --------------------------------------------------------------------------
# The harness: creates and tracks everything a test uses, removes it all.


class Harness:
    def __init__(self, label):
        self.label = "".join(ch if ch.isalnum() else "-" for ch in label)[:24].strip("-")
        self.tmp = tempfile.mkdtemp(prefix=f"shmbox-bridge-test-{RUN}-")
        self.procs = []
        self.servers = []
        self.boxes = []
        self.count = 0

    def _uniq(self):
        self.count += 1
        return f"{self.count}{uuid.uuid4().hex[:4]}"

    # names
    def box_name(self, tag="b"):
        # t-<run>-... like every test's boxes (tests/support/support.hpp test_prefix), so the
        # leftover check of scripts/test.sh and .ci/run sees them (and their bridge segments).
        name = f"{TEST_PREFIX}br{RUN}-{self.label}-{tag}-{self._uniq()}"
        self.boxes.append(name)
        return name

    def stream_name(self, tag="S"):
        return f"T{RUN}_{self.label.replace('-', '_')}_{tag}_{self._uniq()}"

    def subject(self, tag="s"):
        return f"shmbox.t{RUN}.{self.label}.{tag}{self._uniq()}"

    def box(self, tag="b", **options):
        """Creates a fresh box (shmbox.Box.create's options) and returns its name."""
        name = self.box_name(tag)
        shmbox.Box.create(name, **options).close()
        return name

    def cluster(self, size=3):
        """`size` nats-servers clustered on loopback (routes between all, each its own store), started,
        and JetStream answering (a meta leader elected); returns them."""
        servers = [NatsServer(self.tmp, f"c{len(self.servers) + k}") for k in range(size)]
        routes = [free_port() for _ in servers]
        for k, s in enumerate(servers):
            others = ", ".join(f"nats-route://127.0.0.1:{r}" for j, r in enumerate(routes) if j != k)
            s.config = (f"server_name: {s.name}\n"
                        f"cluster {{\n  name: shmbox-test\n  listen: 127.0.0.1:{routes[k]}\n  routes: [{others}]\n}}\n")
            self.servers.append(s)
        for s in servers:
            s.start()
        probe = f"probe{self._uniq()}"

        def js_ready():
            try:
                with servers[0].client() as nc:
                    r = nc.js(f"STREAM.CREATE.{probe}", {"name": probe, "subjects": [f"probe.{probe}"], "num_replicas": size,
                                                         "storage": "memory"}, timeout=2)
                    if "error" in r:
                        return False
                    nc.js(f"STREAM.DELETE.{probe}", timeout=2)
                    return True
            except (OSError, NatsError):
                return False
        wait_until("a JetStream cluster with a meta leader", js_ready, 60, 0.5)
        return servers

    def server(self, name="nats", **kw):
        s = NatsServer(self.tmp, f"{name}{len(self.servers)}", **kw)
        self.servers.append(s)
        return s.start()

    def proc(self, args, name, env=None):
        p = Proc(args, f"{name}{len(self.procs)}", self.tmp, env)
        self.procs.append(p)
        return p

    # the bridge
    def bridge(self, *args, name="bridge"):
        return self.proc([need(BRIDGE, "shmbox-bridge"), *args], name)

    def export(self, box, server, stream, subject, *extra, expect="ready export", timeout=20.0, env=None):
        p = self.proc([need(BRIDGE, "shmbox-bridge"), "export", box, "--nats", server.url, "--stream", stream,
                       "--subject", subject, *extra], "export", env)
        if expect:
            line = p.expect(expect, timeout)
            p.ready_line = line
        return p

    def import_(self, box, server, stream, durable, *extra, expect="ready import", timeout=20.0, env=None):
        p = self.proc([need(BRIDGE, "shmbox-bridge"), "import", "--nats", server.url, "--stream", stream,
                       "--durable", durable, "--into", box, *extra], "import", env)
        if expect:
            p.ready_line = p.expect(expect, timeout)
        return p

    def run_bridge(self, args, timeout=30.0):
        """Runs the bridge to its exit (bounded); (code, stdout, stderr, seconds)."""
        start = time.monotonic()
        try:
            r = subprocess.run([need(BRIDGE, "shmbox-bridge"), *map(str, args)], capture_output=True, text=True,
                               timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail(f"shmbox-bridge {' '.join(map(str, args))}: still running after {timeout} s")
        return r.returncode, r.stdout, r.stderr, time.monotonic() - start

    # producers and owners
    def producer(self, box, tag):
        p = self.proc([sys.executable, "-c", PRODUCER, box, tag], f"producer-{tag}-")
        p.expect("ready", 20)
        return p

    def receiver(self, box, expect, timeout=30.0, linger=0.3):
        p = self.proc([sys.executable, "-c", RECEIVER, box, expect, timeout, linger], "receiver")
        p.expect("ready", 20)
        p.timeout = timeout
        return p

    def cleanup(self):
        for p in reversed(self.procs):
            p.cleanup()
        for s in self.servers:
            if s.proc is not None and s.proc.poll() is None:
                if s.stopped:
                    s.proc.send_signal(signal.SIGCONT)
                s.proc.kill()
                try:
                    s.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        for name in self.boxes:
            if os.access(CLI, os.X_OK):
                subprocess.run([CLI, "rm", name], capture_output=True, timeout=20)
            shmbox.Box.remove(name, missing_ok=True)
            for role in ("export", "import"):
                try:
                    os.unlink(f"/dev/shm/shmbox-bridge.{name}.{role}")
                except OSError:
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def _harness(request, label):
    need(NATS_SERVER, "nats-server")
    need(CLI, "the shmbox CLI")
    h = Harness(label)
    request.addfinalizer(h.cleanup)
    return h


@pytest.fixture
def h(request):
    """A Harness for one test."""
    return _harness(request, request.node.name.replace("test_", ""))


@pytest.fixture(scope="module")
def h_module(request):
    """A Harness shared by a module's tests (a scenario some tests look at from different sides)."""
    return _harness(request, "mod")


MSG_ID = re.compile(r"^[0-9a-f]{16}-[0-9]+-[0-9]+$")
