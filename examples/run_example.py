#!/usr/bin/env python3
"""Runs one of the examples as its user would: separate processes, started
in order, with line handshakes instead of sleeps, and checks what they print.

    run_example.py SCENARIO --owner PATH [--producer PATH] [--heir PATH]
                   [--count N] [--producer-count M] [--wait S] [--mode MODE]

SCENARIO is producer-owner, heir, epoll or loans. The box is named
t-${SHMBOX_TEST_RUN}-ex-SCENARIO-PID (tests/support/support.hpp's test_prefix, so
CI's leftover check sees it). Every wait is bounded; children that are still
running at the end are killed, and the box's segment is unlinked whatever
happened. A passing example must have removed its box itself.

--producer-count posts fewer (or more) messages than the owner waits for,
and --expect-failure REGEX turns the check around: the scenario must fail
with a reason matching REGEX. The 'example-producer-owner-short' test uses
both to show that a lost message fails the scenario, for the right reason.
"""

import argparse
import ctypes
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

WAIT = 20.0  # seconds for any one handshake line or exit


class Failure(Exception):
    pass


def box_name(scenario):
    run = os.environ.get("SHMBOX_TEST_RUN", "")
    prefix = f"t-{run}-" if run else "t-"
    return f"{prefix}ex-{scenario}-{os.getpid()}"


def _die_with_parent():
    # The child gets SIGKILL if this driver dies (meson's timeout, a kill -9).
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Child:
    """A program whose stdout lines are collected (and echoed to the log)."""

    def __init__(self, label, argv):
        self.label = label
        print(f"[driver] start {label}: {' '.join(argv)}", flush=True)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=_die_with_parent)
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, False), daemon=True).start()

    def _pump(self, stream, is_stdout):
        for line in stream:
            line = line.rstrip("\n")
            print(f"[{self.label}{'' if is_stdout else ' stderr'}] {line}", flush=True)
            if is_stdout:
                self.lines.put(line)
            else:
                self.stderr.append(line)
        if is_stdout:
            self.lines.put(None)  # end of output

    @property
    def pid(self):
        return self.proc.pid

    def expect(self, pattern, timeout=WAIT):
        """The next line must match `pattern` (a full match); returns the match."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise Failure(f"{self.label}: no line matching /{pattern}/ within {timeout} s") from None
        if line is None:
            self.proc.wait(timeout=timeout)
            raise Failure(f"{self.label}: exited ({self._status()}) before printing /{pattern}/{self._last_words()}")
        m = re.fullmatch(pattern, line)
        if m is None:
            raise Failure(f"{self.label}: printed {line!r}, expected /{pattern}/")
        return m

    def finish(self, timeout=WAIT):
        """Waits for a zero exit status."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failure(f"{self.label}: still running after {timeout} s") from None
        if self.proc.returncode != 0:
            raise Failure(f"{self.label}: exited with {self._status()}{self._last_words()}")

    def _status(self):
        rc = self.proc.returncode
        return f"signal {-rc}" if rc is not None and rc < 0 else f"status {rc}"

    def _last_words(self):
        time.sleep(0.05)  # let the stderr reader catch up with a program that just exited
        return f"; its stderr: {self.stderr[-1]!r}" if self.stderr else ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def producer_owner(a, name, start):
    owner = start("owner", [a.owner, name, str(a.count), str(a.wait)])
    owner.expect("ready")
    producer = start("producer", [a.producer, name, str(a.producer_count)])
    producer.expect(f"posted {a.producer_count} messages")
    producer.finish()
    owner.expect(f"received {a.count} messages, sum {a.count * (a.count - 1) // 2}", timeout=a.wait + WAIT)
    owner.finish()


def heir(a, name, start):
    first = 4  # messages the first owner receives (and commits) before it dies
    owner = start("owner", [a.owner, name, str(first)])
    owner_pid = int(owner.expect(r"ready \(pid (\d+)\)").group(1))
    heir = start("heir", [a.heir, name, str(a.count), "standby-1"])
    heir.expect(r"enlisted \(position 0\)")
    producer = start("producer", [a.producer, name, str(a.producer_count)])
    producer.expect(f"posted {a.producer_count} messages")
    producer.finish()
    for i in range(first):
        owner.expect(f"received {i}")
    owner.expect(f"holding message {first}")  # read, not committed
    print(f"[driver] kill -9 owner (pid {owner_pid})", flush=True)
    os.kill(owner_pid, signal.SIGKILL)
    owner.proc.wait(timeout=WAIT)
    heir.expect(rf"took over '{re.escape(name)}': reason owner-died, from pid {owner_pid}, epoch \d+, "
                r"heir data 'standby-1'")
    heir.expect(f"received {a.count - first} messages \\(first {first}, 1 redelivered\\)")
    heir.finish()


def epoll(a, name, start):
    owner = start("owner", [a.owner, name, str(a.count), a.mode])
    owner.expect("ready")
    producer = start("producer", [a.producer, name, str(a.producer_count)])
    producer.expect(f"posted {a.producer_count} messages")
    producer.finish()
    owner.expect(rf"received {a.count} messages, sum {a.count * (a.count - 1) // 2}, \d+ wake-ups")
    owner.finish()


def loans(a, name, start):
    owner = start("owner", [a.owner, name, str(a.count)])
    owner.expect("ready")
    producer = start("producer", [a.producer, name, str(a.producer_count)])
    producer.expect(f"posted {a.producer_count} messages through loans")
    producer.finish()
    owner.expect(f"received {a.count} messages, sum of values {3 * a.count * (a.count - 1) // 2}")
    owner.finish()


SCENARIOS = {"producer-owner": producer_owner, "heir": heir, "epoll": epoll, "loans": loans}


def main():
    # meson's timeout sends SIGTERM: clean up as on any failure.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("run_example: terminated"))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--owner", required=True)
    p.add_argument("--producer")
    p.add_argument("--heir")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--producer-count", type=int)
    p.add_argument("--wait", type=int, default=10, help="the owner's wait for each message, seconds")
    p.add_argument("--mode", default="active")
    p.add_argument("--expect-failure", metavar="REGEX", help="pass only if the scenario fails with this reason")
    a = p.parse_args()
    if a.producer_count is None:
        a.producer_count = a.count

    name = box_name(a.scenario)
    segment = f"/dev/shm/shmbox.{name}"
    children = []

    def start(label, argv):
        children.append(Child(label, argv))
        return children[-1]

    t0 = time.monotonic()
    ok = False
    try:
        SCENARIOS[a.scenario](a, name, start)
        if os.path.exists(segment):
            raise Failure(f"the example left its box behind: {segment}")
        ok = True
    except Failure as e:
        print(f"[driver] FAIL: {e}", flush=True)
        if a.expect_failure is not None:
            ok = re.search(a.expect_failure, str(e)) is not None
            print(f"[driver] that failure was {'expected' if ok else 'NOT the expected /' + a.expect_failure + '/'}",
                  flush=True)
            a.expect_failure = None  # handled
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish cleaning up first
        for c in children:
            c.kill()
        try:
            os.unlink(segment)
            print(f"[driver] removed {segment}", flush=True)
        except FileNotFoundError:
            pass
    if a.expect_failure is not None and ok:
        print(f"[driver] the scenario passed, but it should have failed with /{a.expect_failure}/", flush=True)
        ok = False
    print(f"[driver] {a.scenario}: {'ok' if ok else 'FAILED'} in {time.monotonic() - t0:.2f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
