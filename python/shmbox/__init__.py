"""shmbox: bounded mailboxes in POSIX shared memory, from Python.

The message path (post, post_batch, receive, try_receive, receive_batch,
read, receive_into, receive_in_place, stash) is a compiled module,
shmbox._core (the CPython C API), with the library linked into it; the rest
of the API calls the C API of that same copy of the library through
:mod:`ctypes`. A Python process posts into, owns or inherits the same boxes
as C and C++ programs. docs/python.md has the guide; :mod:`shmbox.aio` the
asyncio API.

    import shmbox

    with shmbox.Box.create("jobs", capacity=1024, slot_size=256, overflow="drop-oldest"):
        pass                                     # the box stays; the handle is closed

    with shmbox.Producer.attach("jobs") as p:    # in any number of processes
        p.post(b"hello")                         # -> PostStatus.STORED ('stored')

    with shmbox.Owner.acquire("jobs") as owner:  # in one process
        for msg in owner:                        # blocks; msg.data, msg.lane, msg.redelivered, msg.id
            print(msg.data)

Timeouts are in seconds (int or float); ``None`` (or ``math.inf``) waits for
ever, ``0`` does not wait. Errors raise subclasses of :class:`Error`
(:mod:`shmbox.errors`) with the library's code and message. Outcomes that
are not errors (a full box, a receive that timed out) are return values, as
in the C++ API. A handle is used by one thread at a time.
"""

import ctypes
import dataclasses
import enum
import math
import numbers
import os
import time
from ctypes import byref, c_int, c_size_t, c_uint32, c_uint64, c_void_p
from typing import List, NamedTuple, Optional

from . import _core  # the compiled message path, and the library itself (_core.cpp)
from . import _capi
from .errors import *  # noqa: F401,F403 (the exception classes are part of this module's API)
from .errors import Error, NotOwner, TooLarge, error_class
from . import errors as _errors

__all__ = [
    "Box", "Producer", "Owner", "NotifyGroup", "Heir", "Loan", "Requester", "ReplyStatus", "Message", "MessageId", "Event", "Pool", "Lease", "PoolMember", "PeekedMessage",
    "CollectedBox", "gc", "BatchResult", "Transfer",
    "Policy", "PostStatus", "OwnerMode", "EventKind", "TransferReason", "BOX_DEFAULT", "version",
    "library_path",
] + _errors.__all__

__version__ = "0.1.0"

_lib = _capi.load()

# Blocking calls wait in slices of this many seconds, so that a signal (Ctrl-C)
# is handled within that time: ctypes runs the C call without the GIL and
# Python handles signals only between calls. Every call that blocks does:
# receive, receive_batch, read, wait, Heir.await_transfer, post, post_batch,
# give_away, give_away_to_heir, Box.request_give_away(_to_heir).
_SLICE = 0.25


def version():
    """The C library's version, "MAJOR.MINOR.PATCH"."""
    return _lib.shmbox_version().decode()


def library_path():
    """The path or name the C library was loaded from."""
    return _capi.library_path()


# ---- enums ------------------------------------------------------------------


class _StrEnum(str, enum.Enum):
    """An enum whose members are also their names as strings: ``PostStatus.FULL == 'full'``,
    also as dict keys (the hash is the string's)."""

    __hash__ = str.__hash__

    def __str__(self):
        return self.value


class Policy(_StrEnum):
    """What a post does when the box (its lane) is full."""
    REJECT = "reject"            # nothing is stored; post returns 'full'
    DROP_NEWEST = "drop-newest"  # the new message is discarded; post returns 'dropped'
    DROP_OLDEST = "drop-oldest"  # the oldest is evicted; post returns 'stored-evicted'
    LIFO = "lifo"                # newest first; the top is replaced; post returns 'stored-evicted'
    BLOCK = "block"              # the post waits for room up to its timeout, then returns 'timeout'


_POLICIES = list(Policy)  # in the order of enum shmbox_policy


class PostStatus(_StrEnum):
    """What one post did (enum shmbox_post_status)."""
    STORED = "stored"
    STORED_EVICTED = "stored-evicted"
    DROPPED = "dropped"
    FULL = "full"
    TIMEOUT = "timeout"
    TOO_LARGE = "too-large"
    ERROR = "error"
    OVER_QUOTA = "over-quota"  # the producer has its lane's quota of messages waiting (Box.create(quota=))

    @property
    def stored(self):
        """True for 'stored' and 'stored-evicted'."""
        return self in (PostStatus.STORED, PostStatus.STORED_EVICTED)


_POST_STATUSES = list(PostStatus)


class ReplyStatus(_StrEnum):
    """What Owner.reply did (enum shmbox_reply_status; the other values are raised)."""
    OK = "ok"                            # the reply is in the requester's reply box
    ALREADY_REPLIED = "already-replied"  # an owner that died had answered it: nothing sent
    REQUESTER_GONE = "requester-gone"    # the requester died (or its reply box is gone): counted lost
    FULL = "full"                        # the requester's reply box is full: counted lost


_REPLY_STATUSES = {_capi.REPLY_OK: ReplyStatus.OK, _capi.REPLY_ALREADY_REPLIED: ReplyStatus.ALREADY_REPLIED,
                   _capi.REPLY_REQUESTER_GONE: ReplyStatus.REQUESTER_GONE, _capi.REPLY_FULL: ReplyStatus.FULL}


class OwnerMode(_StrEnum):
    """pobox's owner states (enum shmbox_owner_mode)."""
    PASSIVE = "passive"
    NOTIFY = "notify"
    ACTIVE = "active"


_OWNER_MODES = list(OwnerMode)


class EventKind(_StrEnum):
    """What :meth:`Owner.wait` saw."""
    NONE = "none"            # the timeout passed
    NOTIFIED = "notified"    # notify fired: data is there
    DELIVERED = "delivered"  # active fired: Event.messages holds the delivery


class TransferReason(_StrEnum):
    """Why a box changed owner (enum shmbox_transfer_reason)."""
    NONE = "none"
    OWNER_DIED = "owner-died"
    GIVE_AWAY = "give-away"
    LEASE_EXPIRED = "lease-expired"


_REASONS = list(TransferReason)


def _enum_name(values, i):
    return values[i] if 0 <= i < len(values) else int(i)


def _policy_code(p):
    if isinstance(p, int) and not isinstance(p, bool):
        return p
    try:
        return _POLICIES.index(Policy(str(p).replace("_", "-").lower()))
    except ValueError:
        raise _errors.InvalidArgument(
            f"unknown overflow policy {p!r}: one of " + ", ".join(x.value for x in Policy), 2) from None


# ---- results ----------------------------------------------------------------


class MessageId(NamedTuple):
    """A message's identity (shmbox::message_id): the box's incarnation (Box id), the lane and
    the lane position its post claimed. Stable while the message is in its box, also when it is
    redelivered to the next owner: a deduplication key and a trace handle. ``str(id)`` is the
    library's form, "BOXID-LANE-POSITION" (16 hex digits, then decimals), as ``shmbox peek``
    and the NATS bridge's Nats-Msg-Id show it; :meth:`parse` reads it back."""
    box: int
    lane: int
    position: int

    def __str__(self):
        return f"{self.box:016x}-{self.lane}-{self.position}"

    @classmethod
    def parse(cls, text):
        """Reads str(MessageId)'s form back; ValueError for anything else."""
        parts = text.split("-") if isinstance(text, str) else []
        if (len(parts) != 3 or len(parts[0]) != 16 or not all(c in "0123456789abcdefABCDEF" for c in parts[0])
                or not parts[1].isdigit() or not parts[2].isdigit() or int(parts[1]) >= _capi.MAX_LANES):
            raise ValueError(f"not a message id: {text!r} (the form is BOXID-LANE-POSITION, "
                             "e.g. 9f3c0a1b2c3d4e5f-1-42)")
        return cls(int(parts[0], 16), int(parts[1]), int(parts[2]))


#: One received message (a struct sequence made by the compiled module):
#: ``(data, lane, redelivered)`` as a tuple, plus ``position``, ``box_id`` and
#: :attr:`id` (a :class:`MessageId`, None for a message without a position:
#: one the owner stashed). ``data`` is bytes (``receive_into``: a memoryview of
#: the caller's buffer). Made by hand as a struct sequence is:
#: ``Message((data, lane, redelivered[, position, box_id]))``.
Message = _core.Message


def _message_id(m):
    return None if m.position is None or m.box_id is None else MessageId(m.box_id, m.lane, m.position)


Message.id = property(_message_id, doc="The message's MessageId (str(msg.id): \"BOXID-LANE-POSITION\"), or None.")


class Event(NamedTuple):
    """What :meth:`Owner.wait` (or :meth:`Owner.deliver`) saw."""
    kind: EventKind
    messages: List[Message] = []  # the delivery (active mode, deliver())
    dropped: int = 0              # drops since the last delivery plus the filter's


class BatchResult(NamedTuple):
    """What :meth:`Producer.post_batch` did: the first ``stored`` messages were stored;
    ``status`` is the outcome of the first one that was not (or of the last one)."""
    stored: int
    status: PostStatus


@dataclasses.dataclass(frozen=True)
class Transfer:
    """How an owner got its box (struct shmbox_transfer)."""
    reason: TransferReason
    from_pid: int
    to_pid: int
    from_pid_ns: int
    to_pid_ns: int
    epoch: int
    data: bytes  # the heir's registered data or the give-away data

    def as_dict(self):
        """A plain dict (reason as a string)."""
        d = dataclasses.asdict(self)
        d["reason"] = str(self.reason)
        return d


class PeekedMessage(NamedTuple):
    """A message seen by :meth:`Box.peek`, not taken."""
    data: bytes
    lane: int
    position: int  # FIFO position, lifo stamp, or stash order
    stash: str     # "" in its lane; "parked", "unstashed", "reading", "sorted", "buffered" (inspect.hpp)
    envelope: str = ""  # "request": data is a request's body (its reply address left out); "reply": a reply's body


class CollectedBox(NamedTuple):
    """What :func:`gc` did with one box."""
    name: str
    depth: int     # messages it held
    why: str       # why it was (or, skipped, was not) removed
    skipped: bool  # not removed: not ours to remove, or not a box


def gc(dry_run=False, include_nonempty=False, prefix=""):
    """Removes boxes nobody uses (no live owner, heir, listener, producer or process mapping them;
    empty unless include_nonempty), as ``shmbox gc`` does; never a box a live process is attached
    to. Returns a list of :class:`CollectedBox` (with dry_run: what it would remove)."""
    return [CollectedBox(*t) for t in _core.box_gc(bool(dry_run), bool(include_nonempty), str(prefix))]


class _BoxDefault:
    def __repr__(self):
        return "shmbox.BOX_DEFAULT"


#: The default timeout of :meth:`Producer.post`: the box's own block timeout
#: (``block_timeout`` at creation). ``None`` there waits for ever, as everywhere.
BOX_DEFAULT = _BoxDefault()


# ---- helpers ------------------------------------------------------------------


def _seconds(value, what="timeout"):
    """A timeout in seconds, checked: None (or math.inf) -> None (for ever), a number >= 0 -> float.
    NaN and negative numbers raise ValueError (as C values they would mean "do not wait" or "for ever")."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} is a number of seconds, or None (for ever), not {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{what} is NaN: give a number of seconds >= 0, or None to wait for ever")
    if value < 0:
        raise ValueError(f"{what} must be >= 0 seconds or None (for ever), not {value!r}")
    return None if value == math.inf else value


_UNCHANGED = object()  # Pool.reconfigure: a parameter not given


def _finite(value, what):
    """An option in seconds (block_timeout, lease, spin): a finite number >= 0; NaN, negative and
    infinite values raise ValueError."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and not (value >= 0 and value != math.inf):
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {value!r}")
    return _seconds(value, what)


def _ns(timeout):
    """Seconds (None or inf: for ever) to the C API's nanoseconds."""
    t = _seconds(timeout)
    return _capi.FOREVER if t is None else int(t * 1e9)


class _Slices:
    """The slices of one blocking call: ``for ns, last in _Slices(timeout)`` yields the
    nanoseconds each C call may wait (at most _SLICE seconds, so that Python runs its
    signal handlers between them: Ctrl-C raises KeyboardInterrupt within a slice) and
    whether it is the last one (the timeout ends with it; never, when waiting for ever)."""

    def __init__(self, timeout):
        self.timeout = _seconds(timeout)

    def __iter__(self):
        t = self.timeout
        if t is not None and t <= _SLICE:
            yield int(t * 1e9), True
            return
        deadline = None if t is None else time.monotonic() + t
        while True:
            if deadline is None:
                yield int(_SLICE * 1e9), False
                continue
            left = max(0.0, deadline - time.monotonic())
            if left <= _SLICE:
                yield int(left * 1e9), True
                return
            yield int(_SLICE * 1e9), False


def _sliced(call, timeout, idle):
    """Calls call(ns) in slices of _SLICE seconds until it returns something
    other than `idle` or the timeout passed (None: for ever)."""
    for ns, last in _Slices(timeout):
        r = call(ns)
        if r != idle or last:
            return r


def _bytes(data, what="message"):
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"a {what} is bytes (or str, bytearray, memoryview), not {type(data).__name__}")


def _name(name, what="box name"):
    """A name for the C API (NUL-terminated there): a str or bytes without NUL characters."""
    if isinstance(name, Box):
        name = name.name
    if isinstance(name, str):
        raw = name.encode()
    elif isinstance(name, bytes):
        raw = name
    else:
        raise TypeError(f"a {what} is a str, not {type(name).__name__}")
    if b"\0" in raw:
        # C would read the name only up to the NUL: "name\0evil" would be "name".
        raise _errors.InvalidName(f"invalid {what} {name!r}: it contains a NUL character", _capi.E_INVALID_NAME)
    return raw


def _error(code):
    """The exception for error `code`, with the library's sentence when it is about this code."""
    code = int(code)
    meaning = _lib.shmbox_strerror(code).decode(errors="replace")
    message = ""
    if _lib.shmbox_last_error() == code:
        message = _lib.shmbox_last_error_message().decode(errors="replace")
    return error_class(code)(message or meaning, code, meaning)


def _check(code):
    if code != 0:
        raise _error(code)


def _counters_dict(c):
    return {f: getattr(c, f) for f in _capi.COUNTER_FIELDS}


def _transfer(t):
    data = ctypes.string_at(ctypes.addressof(t) + _capi.Transfer.data.offset, min(t.data_size, 64))
    return Transfer(_enum_name(_REASONS, t.reason), t.from_pid, t.to_pid, t.from_pid_ns, t.to_pid_ns, t.epoch, data)


# The compiled message path reads these (post statuses by number, the default timeout, checks
# of other number types, the batch result).
_core._setup(tuple(_POST_STATUSES), BOX_DEFAULT, _seconds, BatchResult, lambda code: _error(code))


class _Handle:
    """A C handle freed by `_close_fn` on close(), on leaving a `with` block, or when collected.

    In a fork child (os.fork) a handle made by the parent only frees the child's copy when it
    is closed or collected: the role it holds (owner, heir entry, producer entry) stays the
    parent's, and its calls fail (NotOwner, InheritedHandle). The child makes its own handles.
    """

    _close_fn = None

    def __init__(self, ptr):
        self._ptr = ptr
        self._maker = os.getpid()  # the process that made it (messages about inherited handles)

    @property
    def closed(self):
        """True once close() was called."""
        return self._ptr is None

    def _p(self):
        if self._ptr is None:
            raise ValueError(f"operation on a closed {type(self).__name__}")
        if getattr(self, "_busy", False):
            raise RuntimeError(f"this {type(self).__name__} is in use by another thread (a handle is used by one "
                               "thread at a time: give each thread its own handle, or a lock)")
        return self._ptr

    def close(self):
        """Frees the handle (idempotent)."""
        ptr, self._ptr = self._ptr, None
        if ptr is not None:
            getattr(_lib, self._close_fn)(ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass


# ---- Box ---------------------------------------------------------------------------


class Box(_Handle):
    """A handle on a box (a segment /dev/shm/shmbox.<name>): its geometry, info and counters.

    Closing the handle leaves the box as it is; :meth:`Box.remove` removes it.
    """

    _close_fn = "shmbox_box_close"

    @classmethod
    def create(cls, name, capacity=None, slot_size=None, overflow=None, *, lanes=None, max_capacity=None,
               mode=None, max_producers=None, block_timeout=None, lease=None, default_lane=None,
               dead_letters=None, dead_letter_refused=False, spin=None, stash=None, priority=False, quota=None):
        """Creates box `name`; raises :class:`Exists` if it is there already.

        Arguments left as None take the library's defaults.

        Args:
            name: 1..128 characters of [A-Za-z0-9._-], not starting with '.'.
            capacity: messages the box holds (default 1024).
            slot_size: the largest message, in bytes (default 256).
            overflow: what a post into a full box does: 'reject' (default),
                'drop-newest', 'drop-oldest', 'lifo' or 'block' (a :class:`Policy`).
            lanes: the box's lanes (lane 0 is the control lane, read first):
                an int N for N lanes of the box's capacity and overflow, or a
                list with one entry per lane, each an int (its capacity), a
                dict with any of 'capacity', 'overflow', 'max_capacity', or
                None (the box's). Default: one lane.
            max_capacity: resizable up to this many messages (:meth:`resize`).
            mode: file mode of the segment (default 0o600).
            max_producers: producer handles attached at once (default 64).
            block_timeout: seconds a post into a full 'block' box waits by default (default 1).
            lease: seconds of the owner's lease (an owner that neither receives
                nor renews for that long loses the box); default: none.
            default_lane: the lane of a plain post.
            dead_letters: the name of a box that receives what this one drops.
            dead_letter_refused: also refused posts go to `dead_letters`.
            spin: seconds a blocking call polls before it sleeps (default 50 us).
            stash: entries of the owner's stash (default 0: none).
            priority: a priority box (lowest priority value delivered first).
            quota: per-producer fairness: each producer may have at most this
                many messages waiting in each lane; a post beyond it gets the
                lane's policy for that producer alone ('reject', 'drop-newest':
                PostStatus.OVER_QUOTA; 'block': waits for one of its own to be
                taken). Not with 'drop-oldest' or 'lifo' lanes, max_capacity,
                stash or priority. Default: none.

        Returns:
            a :class:`Box` handle (use it in a ``with`` block, or close it).
        """
        o = _capi.Options()
        _lib.shmbox_options_init(byref(o))
        o.struct_size = ctypes.sizeof(o)
        if capacity is not None:
            o.capacity = capacity
        if slot_size is not None:
            o.slot_size = slot_size
        if overflow is not None:
            o.overflow = _policy_code(overflow)
        if max_capacity is not None:
            o.max_capacity = max_capacity
        if mode is not None:
            o.mode = mode
        if max_producers is not None:
            o.max_producers = max_producers
        if block_timeout is not None:
            o.block_timeout_ms = int(round(_finite(block_timeout, "block_timeout") * 1000))
        if lease is not None:
            o.lease_ms = int(round(_finite(lease, "lease") * 1000))
        if default_lane is not None:
            o.default_lane = default_lane
        if dead_letters is not None:
            o.dead_letters = _name(dead_letters)
        o.dead_letter_refused = 1 if dead_letter_refused else 0
        if spin is not None:
            o.spin_ns = int(_finite(spin, "spin") * 1e9)
        if stash is not None:
            o.stash = stash
        o.priority = 1 if priority else 0
        if quota is not None:
            o.quota = quota
        lane_array = None
        if lanes is not None:
            specs = [None] * lanes if isinstance(lanes, int) else list(lanes)
            lane_array = (_capi.LaneOptions * max(1, len(specs)))()
            for i, spec in enumerate(specs):
                lo = lane_array[i]
                lo.overflow = _capi.DEFAULT
                if isinstance(spec, int):
                    lo.capacity = spec
                elif isinstance(spec, dict):
                    unknown = set(spec) - {"capacity", "overflow", "max_capacity"}
                    if unknown:
                        raise TypeError(f"lane {i}: unknown keys {sorted(unknown)}")
                    lo.capacity = spec.get("capacity") or 0
                    if spec.get("overflow") is not None:
                        lo.overflow = _policy_code(spec["overflow"])
                    lo.max_capacity = spec.get("max_capacity") or 0
                elif spec is not None:
                    raise TypeError(f"lane {i}: an int (capacity), a dict or None, not {type(spec).__name__}")
            o.lane_count = len(specs)
            o.lanes = ctypes.cast(lane_array, ctypes.POINTER(_capi.LaneOptions))
        out = c_void_p()
        _check(_lib.shmbox_box_create(_name(name), byref(o), byref(out)))
        return cls(out.value)

    @classmethod
    def open(cls, name, any_owner=False):
        """Opens existing box `name` (:class:`NotFound` if there is none). A segment owned by
        another user is refused (:class:`PermissionDenied`) unless `any_owner` is true."""
        out = c_void_p()
        _check(_lib.shmbox_box_open(_name(name), 1 if any_owner else 0, byref(out)))
        return cls(out.value)

    @classmethod
    def inspect(cls, name):
        """Opens existing box `name` read-only, to look at it (info, counters)."""
        out = c_void_p()
        _check(_lib.shmbox_box_inspect(_name(name), byref(out)))
        return cls(out.value)

    @staticmethod
    def remove(name, missing_ok=False):
        """Removes box `name` (processes that have it mapped keep using it).
        Raises :class:`NotFound` if there is none, unless `missing_ok`."""
        code = _lib.shmbox_box_remove(_name(name))
        if code == _errors.NotFound.code and missing_ok:
            return
        _check(code)

    @staticmethod
    def list():
        """The names of every shmbox segment in /dev/shm (valid or not), sorted."""
        names = []

        def collect(_ctx, name):
            names.append(name.decode(errors="surrogateescape"))

        fn = _capi.NAME_FN(collect)
        _check(_lib.shmbox_box_list(fn, None))
        return sorted(names)

    @staticmethod
    def validate_name(name):
        """Raises :class:`InvalidName` if `name` is not a valid box name."""
        _check(_lib.shmbox_validate_name(_name(name)))

    @staticmethod
    def verify(name):
        """Checks box `name` against every invariant: (ok, [one sentence per problem])."""
        problems = []

        def collect(_ctx, problem):
            problems.append(problem.decode(errors="replace"))

        fn = _capi.PROBLEM_FN(collect)
        ok = c_int(0)
        _check(_lib.shmbox_verify(_name(name), fn, None, byref(ok)))
        return bool(ok.value), problems

    def peek(self, max=16):
        """Up to `max` messages in delivery order, copied out without taking them (the owner and
        producers are not disturbed): a list of :class:`PeekedMessage`. A snapshot of a moving box.
        A request shows its body as its owner receives it (``envelope`` "request")."""
        return [PeekedMessage(*t) for t in _core.box_peek(self._p(), int(max))]

    @property
    def name(self):
        """The box's name."""
        return _lib.shmbox_box_name(self._p()).decode()

    @property
    def capacity(self):
        """Messages all lanes hold together."""
        return _lib.shmbox_box_capacity(self._p())

    @property
    def slot_size(self):
        """The largest message, in bytes."""
        return _lib.shmbox_box_slot_size(self._p())

    @property
    def lane_count(self):
        """How many lanes the box has (lane 0 is the control lane)."""
        return _lib.shmbox_box_lane_count(self._p())

    @property
    def default_lane(self):
        """The lane of a plain post."""
        return _lib.shmbox_box_default_lane(self._p())

    @property
    def overflow(self):
        """The box's overflow :class:`Policy`."""
        return _enum_name(_POLICIES, _lib.shmbox_box_overflow(self._p()))

    @property
    def depth(self):
        """Messages in the box now (exact when idle)."""
        return _lib.shmbox_box_depth(self._p())

    def counters(self):
        """The box's counters (all lanes) as a dict: posted, stored, delivered, rejected, ...

        Every message posted ends in exactly one of them, or in the box::

            posted == delivered + rejected + too_large + timeouts + dropped_newest
                      + dropped_oldest + filtered + abandoned + aborted + depth
        """
        c = _capi.Counters()
        c.struct_size = ctypes.sizeof(c)
        _check(_lib.shmbox_box_counters(self._p(), byref(c)))
        return _counters_dict(c)

    def info(self):
        """A snapshot of the box, read without locks, as a dict.

        Keys: name, capacity, slot_size, overflow, mode, uid, depth,
        segment_bytes, max_producers, producers_attached, block_timeout,
        lease, spin (seconds), default_lane, stash, parked, priority, buffer,
        dead_letters, orphaned, accepts_requests, epoch, owner (a dict: pid,
        alive, expired, same_namespace, pid_ns, epoch, mode; None when the box
        has no owner), lanes (a list of dicts: lane, capacity, max_capacity,
        overflow, depth, parked, quota, counters), heirs (a list of dicts in
        registration order: entry, pid, alive, listener, same_namespace,
        pid_ns, data), last_transfer (a dict as :meth:`Transfer.as_dict`, or
        None when the box never changed owner), counters (all lanes), replies
        (request/reply: a dict of what the box's owners did with the requests
        they answered, every owner so far: sent, lost (the requester dead or
        gone, or its reply box full), skipped (answered already)) and
        reply_box (a requester's reply box, which gc removes with it).
        """
        b = self._p()
        lanes = (_capi.LaneInfo * _capi.MAX_LANES)()
        for li in lanes:
            li.struct_size = ctypes.sizeof(li)
            li.count.struct_size = ctypes.sizeof(li.count)
        heir_cap = 16
        while True:
            heirs = (_capi.HeirInfo * heir_cap)()
            for h in heirs:
                h.struct_size = ctypes.sizeof(h)
            i = _capi.Info()
            i.struct_size = ctypes.sizeof(i)
            i.last_transfer.struct_size = ctypes.sizeof(i.last_transfer)
            i.count.struct_size = ctypes.sizeof(i.count)
            _check(_lib.shmbox_box_info(b, byref(i), lanes, len(lanes), heirs, heir_cap))
            if i.heir_count <= heir_cap:
                break
            heir_cap = i.heir_count
        t = i.last_transfer
        return {
            "name": self.name,
            "capacity": i.capacity,
            "slot_size": i.slot_size,
            "overflow": _enum_name(_POLICIES, i.overflow),
            "mode": i.mode,
            "uid": i.uid,
            "depth": i.depth,
            "segment_bytes": i.segment_bytes,
            "max_producers": i.max_producers,
            "producers_attached": i.producers_attached,
            "block_timeout": i.block_timeout_ms / 1000,
            "lease": i.lease_ms / 1000,
            "spin": i.spin_ns / 1e9,
            "default_lane": i.default_lane,
            "stash": i.stash,
            "parked": i.parked,
            "priority": bool(i.priority),
            "buffer": i.buffer.decode(errors="replace"),
            "dead_letters": i.dead_letters.decode(errors="replace"),
            "orphaned": bool(i.orphaned),
            "accepts_requests": bool(i.accepts_requests),
            "epoch": i.epoch,
            "owner": None if i.owner_pid == 0 else {
                "pid": i.owner_pid,
                "alive": bool(i.owner_alive),
                "expired": bool(i.owner_expired),
                "same_namespace": bool(i.owner_same_namespace),
                "pid_ns": i.owner_pid_ns,
                "epoch": i.epoch,
                "mode": _enum_name(_OWNER_MODES, i.owner_mode),
            },
            "lanes": [{
                "lane": n,
                "capacity": li.capacity,
                "max_capacity": li.max_capacity,
                "overflow": _enum_name(_POLICIES, li.overflow),
                "depth": li.depth,
                "parked": li.parked,
                "quota": li.quota,
                "counters": _counters_dict(li.count),
            } for n, li in enumerate(lanes[:min(i.lane_count, len(lanes))])],
            "heirs": [{
                "entry": h.entry,
                "pid": h.pid,
                "alive": bool(h.alive),
                "listener": bool(h.listener),
                "same_namespace": bool(h.same_namespace),
                "pid_ns": h.pid_ns,
                "data": ctypes.string_at(ctypes.addressof(h) + _capi.HeirInfo.data.offset, min(h.data_size, 64)),
            } for h in heirs[:min(i.heir_count, heir_cap)]],
            "last_transfer": None if t.epoch == 0 else _transfer(t).as_dict(),
            "counters": _counters_dict(i.count),
            "replies": {"sent": i.replies_sent, "lost": i.replies_lost, "skipped": i.replies_skipped},
            "reply_box": bool(i.reply_box),
        }

    def resize(self, limit, lane=None):
        """Moves lane `lane`'s limit (None: the only lane) to `limit` messages, between 1 and its
        max_capacity, while producers and the owner run. Returns a dict: lane, before, after,
        max_capacity, dropped (messages a shrink dropped by the lane's policy)."""
        r = _capi.ResizeReport()
        r.struct_size = ctypes.sizeof(r)
        _check(_lib.shmbox_box_resize(self._p(), limit, _capi.DEFAULT if lane is None else lane, byref(r)))
        return {"lane": r.lane, "before": r.before, "after": r.after, "max_capacity": r.max_capacity,
                "dropped": r.dropped}

    def request_give_away(self, pid, timeout=10.0):
        """Asks the owner (if it accepts requests) to give the box to process `pid` of this pid
        namespace, which waits for it as heir or listener; returns once it did. Raises
        :class:`Refused`, :class:`NotOwner`, :class:`TimedOut`, ..."""
        self._request(_lib.shmbox_box_request_give_away, pid, timeout, lambda: pid)

    def request_give_away_to_heir(self, entry, timeout=10.0):
        """The same for heir-table entry `entry` (any pid namespace)."""
        def entry_pid():
            return next((h["pid"] for h in self.info()["heirs"] if h["entry"] == entry), None)
        self._request(_lib.shmbox_box_request_give_away_to_heir, entry, timeout, entry_pid)

    def _request(self, fn, dest, timeout, dest_pid):
        # In slices (Ctrl-C works): a request the owner did not serve within a slice is
        # withdrawn and made again. One that failed after an earlier slice may have been
        # served just then: it succeeded if the destination owns the box now.
        b = self._p()
        pid = None
        for i, (ns, last) in enumerate(_Slices(timeout)):
            if i == 1:
                pid = dest_pid()  # (before the second request: while the destination still waits)
            code = fn(b, dest, ns)
            if code == 0:
                return
            if i > 0 and pid is not None and (self.info()["owner"] or {}).get("pid") == pid:
                return
            if code != _capi.E_TIMED_OUT or last:
                _check(code)

    def __repr__(self):
        return f"<shmbox.Box {self.name!r}>" if not self.closed else "<shmbox.Box (closed)>"


# ---- Producer ------------------------------------------------------------------------


class Producer(_Handle, _core.ProducerCore):
    """A producer entry in a box: posts messages. Any number of processes (and handles) post at once.

    :meth:`post` and :meth:`post_batch` are compiled (shmbox._core.ProducerCore): their
    docstrings are there. A handle is used by one thread at a time (a second thread gets
    RuntimeError while the first waits for room)."""

    _close_fn = "shmbox_producer_close"

    @classmethod
    def attach(cls, box):
        """Takes a producer entry in `box` (a name or an open :class:`Box`).
        Raises :class:`NotFound`, :class:`ProducerTableFull`, ..."""
        if not isinstance(box, Box):
            with Box.open(box) as b:
                return cls.attach(b)
        out = c_void_p()
        _check(_lib.shmbox_producer_attach_box(box._p(), byref(out)))
        # The box's block_timeout: the wait of a post that gives none (in slices).
        return cls(out.value, box.name, box.info()["block_timeout"])

    def __init__(self, ptr, name=None, block_timeout=1.0):
        super().__init__(ptr)
        self.name = name  #: the box's name
        self._bind(ptr, block_timeout)

    def close(self):
        """Gives the entry back (idempotent). RuntimeError while another thread waits in a post."""
        if self._ptr is not None:
            self._bind(None, None)
        super().close()

    def _post_failed(self, st, size):
        """The compiled post's error path: raises TooLarge or the library's error."""
        if st == _capi.POST_TOO_LARGE:
            raise self._too_large(size)
        raise _error(_lib.shmbox_producer_last_error(self._ptr))

    def _too_large(self, size):
        if _lib.shmbox_last_error() == _capi.E_TOO_LARGE:
            return _error(_capi.E_TOO_LARGE)
        return TooLarge(f"message of {size} bytes is larger than the box's slot size "
                        f"({self.max_message_size} bytes); nothing was stored", _capi.E_TOO_LARGE)

    def loan(self, lane=None, timeout=BOX_DEFAULT, priority=None):
        """Zero-copy post: claims a slot and returns a :class:`Loan` whose ``data`` is a writable
        memoryview of it (``max_message_size`` bytes) to fill in place::

            with p.loan() as loan:
                if loan:                      # stored (a full box: loan.status says what happened)
                    n = fill(loan.data)       # e.g. numpy.frombuffer(loan.data, ...)[:] = ...
                    loan.size = n             # committed on leaving the block; aborted on an exception

        ``loan.data`` is released at commit or abort: its later use raises ValueError. Objects made
        from it (numpy.frombuffer, ctypes from_buffer) keep the address without holding the view:
        they must not be used after the commit (they would touch a slot that is no longer this
        producer's).

        The claim answers a full box as :meth:`post` does. Only one loan is open per handle. The wait
        for room (a 'block' box) is one call of the library: it is not interrupted by Ctrl-C before
        its timeout."""
        if timeout is not BOX_DEFAULT:
            _seconds(timeout)
        o = self._options_struct(lane, timeout, priority)
        data = c_void_p()
        cap = ctypes.c_uint32(0)
        st = _lib.shmbox_loan(self._p(), byref(o), byref(data), byref(cap))
        if st == _capi.POST_ERROR:
            raise _error(_lib.shmbox_producer_last_error(self._ptr))
        if st == _capi.POST_TOO_LARGE:
            raise self._too_large(0)
        return Loan(self, _POST_STATUSES[st], data.value, cap.value)

    def _options_struct(self, lane, timeout, priority):
        o = _capi.PostOptions()
        _lib.shmbox_post_options_init(byref(o))
        o.struct_size = ctypes.sizeof(o)
        if lane is not None:
            o.lane = lane
        if timeout is not BOX_DEFAULT:
            o.timeout_ns = _ns(timeout)
        if priority is not None:
            o.has_priority = 1
            o.priority = priority
        return o

    def set_priority_function(self, fn):
        """A priority box: ``fn(data: bytes) -> int`` gives the priority of each message this handle
        posts without ``priority=`` (actor-ts's priorityFor; lowest first). None removes it. An
        exception in fn (or a result that is not an int) makes that message's priority 0; the last
        such exception is kept in ``priority_error``."""
        p = self._p()
        if fn is None:
            _lib.shmbox_producer_set_priority_function(p, None, None)
            self._priority_fn = None
            return

        def call(_ctx, data, size):
            try:
                return int(fn(ctypes.string_at(data, size)))
            except BaseException as e:  # a C callback cannot raise: priority 0, kept
                self.priority_error = e
                return 0

        cb = _capi.PRIORITY_FN(call)
        _lib.shmbox_producer_set_priority_function(p, ctypes.cast(cb, c_void_p), None)
        self._priority_fn = cb  # kept alive as long as the library may call it

    @property
    def max_message_size(self):
        """The largest message the box takes, in bytes."""
        return _lib.shmbox_producer_max_message_size(self._p())

    @property
    def last_evicted(self):
        """Messages the most recent post evicted (drop-oldest) or replaced (lifo)."""
        return _lib.shmbox_producer_last_evicted(self._p())

    @property
    def entry(self):
        """This handle's entry in the box's producer table."""
        return _lib.shmbox_producer_entry(self._p())


class Loan:
    """An open zero-copy post (:meth:`Producer.loan`). True when the slot was claimed
    (``status`` 'stored' or 'stored-evicted'); then ``data`` is a writable memoryview of the slot
    until :meth:`commit` or :meth:`abort`, and leaving a ``with`` block commits ``size`` bytes
    (default: all of ``data``), or aborts on an exception (counted as aborted)."""

    def __init__(self, producer, status, address, capacity):
        self.status = status  #: the claim's PostStatus
        self._producer = producer
        self.data = None  #: a writable memoryview of the slot (None when nothing was claimed)
        self.size = capacity  #: bytes to commit on leaving the with block
        self._open = status.stored
        if self._open:
            self.data = memoryview((ctypes.c_char * capacity).from_address(address)).cast("B")

    def __bool__(self):
        return self._open

    def _release(self):
        if self.data is not None:
            try:
                self.data.release()
            except BufferError:
                raise BufferError("the loan's data is still exported (an array or view made from loan.data): "
                                  "delete it before commit() or abort(); the loan stays open") from None
            self.data = None

    def commit(self, size=None):
        """Publishes the first `size` bytes (default ``self.size``). Returns the PostStatus."""
        if not self._open:
            raise ValueError("commit() of a loan that is not open (not claimed, committed or aborted)")
        n = self.size if size is None else size
        if not 0 <= n <= len(self.data):
            raise ValueError(f"commit({n}): the slot holds 0 to {len(self.data)} bytes")
        self._release()
        self._open = False
        st = _lib.shmbox_loan_commit(self._producer._p(), n)
        if st == _capi.POST_ERROR:
            raise _error(_lib.shmbox_producer_last_error(self._producer._ptr))
        return _POST_STATUSES[st]

    def abort(self):
        """Gives the slot back without a message (counted aborted)."""
        if self._open:
            self._release()
            self._open = False
            _lib.shmbox_loan_abort(self._producer._p())

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if self._open:
            if exc_type is None:
                self.commit()
            else:
                self.abort()

    def __repr__(self):
        state = "open" if self._open else "closed"
        return f"<shmbox.Loan {self.status} {state}>"


# ---- Owner -----------------------------------------------------------------------------


class Owner(_Handle, _core.OwnerCore):
    """The owner of a box: the one process that receives its messages.

    Closing the handle (or leaving its ``with`` block) releases the box to its
    first live heir, if any; the messages stay. Iterating over an owner
    receives for ever (``for msg in owner: ...``).
    """

    _close_fn = "shmbox_owner_close"

    @classmethod
    def acquire(cls, name):
        """Takes ownership of box `name`. Raises :class:`NotOwner` when another live process owns
        it; a dead owner's box is taken over with its messages."""
        box = Box.open(name)
        try:
            out = c_void_p()
            _check(_lib.shmbox_owner_acquire_box(box._p(), byref(out)))
        except BaseException:
            box.close()
            raise
        return cls(out.value, box.name, box)

    def __init__(self, ptr, name, box=None):
        super().__init__(ptr)
        self.name = name  #: the box's name
        self._box = box
        self._filter = None  # the active filter's C callback, kept alive while armed
        self._filter_error = None
        self._bind(ptr)

    def close(self):
        """Releases the box (to its first live heir, if any) and frees the handle.
        RuntimeError while another thread waits in a receive of this handle."""
        if self._ptr is not None:
            self._bind(None)
        super().close()
        box, self._box = self._box, None
        if box is not None:
            box.close()

    @property
    def box(self):
        """A :class:`Box` handle on the owned box (for info(), counters(), slot_size)."""
        if self._box is None:
            self._p()
            self._box = Box.inspect(self.name)
        return self._box

    def info(self):
        """The box's :meth:`Box.info` dict."""
        return self.box.info()

    def counters(self):
        """The box's :meth:`Box.counters` dict."""
        return self.box.counters()

    def _not_owner(self):
        if self._maker != os.getpid():  # a fork child's copy: the library refuses it (it owns nothing)
            return _errors.NotOwner(
                f"box '{self.name}': this Owner handle was made by process {self._maker}; a fork child does not "
                "own the box (its parent does): acquire it, or enlist as its heir, in the child", _capi.E_NOT_OWNER)
        return _errors.NotOwner(f"box '{self.name}': this handle no longer owns the box", _capi.E_NOT_OWNER)

    def _receive_status(self, st):
        if st == _capi.RECV_NOT_OWNER:
            raise self._not_owner()
        raise _error(_lib.shmbox_owner_last_error(self._ptr))

    _receive_failed = _receive_status  # the compiled receives' error path

    # receive(timeout=None), try_receive(), receive_batch(max=64, timeout=None), read(max=64,
    # timeout=None) and receive_into(buffer, timeout=None) are compiled (shmbox._core.OwnerCore).

    def __iter__(self):
        """Receives for ever: ``for msg in owner:`` (stop with break; raises NotOwner once the box is lost)."""
        while True:
            m = self.receive(None)
            if m is not None:
                yield m

    def reply(self, message, data):
        """Answers a request (a received Message whose ``reply_to`` is set; docs/request-reply.md):
        the requester receives exactly one reply per request. Returns a :class:`ReplyStatus`: 'ok',
        'already-replied' (an owner that died before committing had answered it: ``message.answered``),
        'requester-gone' or 'full' (the reply is lost: counted, and dead-lettered). Never waits.
        Raises InvalidArgument for a message that is no request, TooLarge for a reply larger than
        the requester takes, NotOwner once the box is lost."""
        st = self._reply(message, _bytes(data, "reply"))
        if st in _REPLY_STATUSES:
            return _REPLY_STATUSES[st]
        if st == _capi.REPLY_NOT_A_REQUEST:
            raise _errors.InvalidArgument(f"box '{self.name}': the message is not a request (it has no reply address)",
                                  _capi.E_INVALID_ARGUMENT)
        if st == _capi.REPLY_NOT_OWNER:
            raise self._not_owner()
        raise _error(_lib.shmbox_last_error())

    def unstash_all(self):
        """Makes every stashed message the next ones received (in stash order); returns how many."""
        return _lib.shmbox_unstash_all(self._p())

    @property
    def stashed(self):
        """Messages parked in the stash now (not yet unstashed)."""
        return _lib.shmbox_stashed(self._p())

    def pump(self):
        """Priority and custom-buffer boxes: moves what the lanes hold into the box's ordered store
        without delivering (pobox's passive owner keeping its buffer in charge); returns how many."""
        return _lib.shmbox_pump(self._p())

    def _batch(self, count):
        """The C handle's current batch (a delivery of wait/deliver) as Messages, with ids."""
        return self._current(count)

    def commit(self):
        """Commits everything :meth:`read`. Raises :class:`NotOwner` if the box was taken
        meanwhile (``e.lost``: how many went back to the next owner)."""
        lost = c_size_t(0)
        st = _lib.shmbox_commit(self._p(), byref(lost))
        if st == _capi.RECV_OK:
            return
        if st == _capi.RECV_NOT_OWNER:
            e = NotOwner(f"box '{self.name}' was taken before the commit; {lost.value} messages went back "
                         "to the next owner", _capi.E_NOT_OWNER)
            e.lost = lost.value
            raise e
        self._receive_status(st)

    # -- pobox's owner states

    @property
    def mode(self):
        """The box's :class:`OwnerMode`: 'passive', 'notify' or 'active'."""
        return _enum_name(_OWNER_MODES, _lib.shmbox_owner_mode(self._p()))

    def passive(self):
        """Disarms: messages accumulate, nothing is signalled."""
        _lib.shmbox_owner_passive(self._p())

    def notify(self):
        """Arms notify (one-shot): :meth:`wait` returns kind 'notified' (and :meth:`notify_fd`
        becomes readable) once data is there."""
        _lib.shmbox_owner_notify(self._p())

    def _c_filter(self, fn):
        if fn is None:
            return _capi.FILTER_FN()

        def call(_ctx, data, size_p, cap):
            try:
                verdict = fn(ctypes.string_at(data, size_p[0]))
                if verdict is None or verdict is True or verdict == "deliver":
                    return _capi.VERDICT_DELIVER
                if verdict is False or verdict == "drop":
                    return _capi.VERDICT_DROP
                if verdict == "skip":
                    return _capi.VERDICT_SKIP
                new = _bytes(verdict, "filter result")
                if len(new) > cap:
                    raise TooLarge(f"the filter returned {len(new)} bytes; at most {cap} fit", _capi.E_TOO_LARGE)
                ctypes.memmove(data, new, len(new))
                size_p[0] = len(new)
                return _capi.VERDICT_DELIVER
            except BaseException as e:  # raised again by wait()/deliver(); this message stays
                self._filter_error = e
                return _capi.VERDICT_SKIP

        return _capi.FILTER_FN(call)

    def active(self, max=None, filter=None):
        """Arms active (one-shot): :meth:`wait` delivers up to `max` messages (None: all there)
        through `filter` as soon as data is there.

        `filter(data: bytes)` returns what to do with each message, in
        delivery order: True/None/'deliver', False/'drop' (counted as
        filtered), 'skip' (stop here; the rest stays), or bytes to deliver
        instead (rewritten in place, at most the slot size). An exception in
        the filter stops the delivery there and is raised by :meth:`wait`.
        """
        self._filter = self._c_filter(filter)
        _lib.shmbox_owner_active(self._p(), self._filter, None, ctypes.c_size_t(-1).value if max is None else max)

    def _event(self, ev, dropped):
        err, self._filter_error = self._filter_error, None
        if err is not None:
            raise err
        if ev == _capi.EVENT_NONE:
            return Event(EventKind.NONE, [], dropped)
        if ev == _capi.EVENT_NOTIFIED:
            return Event(EventKind.NOTIFIED, [], dropped)
        if ev == _capi.EVENT_DELIVERED:
            return Event(EventKind.DELIVERED, self._batch(_lib.shmbox_batch_size(self._ptr)), dropped)
        if ev == _capi.EVENT_NOT_OWNER:
            raise self._not_owner()
        raise _error(_lib.shmbox_owner_last_error(self._ptr))

    def wait(self, timeout=None):
        """Waits up to `timeout` seconds (None: for ever) for the armed state to fire; serves
        give-away requests meanwhile.

        Returns an :class:`Event` (kind, messages, dropped): kind 'none' (the
        timeout passed), 'notified' (notify fired: receive what is there) or
        'delivered' (active fired: `messages` is the delivery; `dropped`
        counts drops since the last delivery plus the filter's).
        """
        p = self._p()
        dropped = c_uint64(0)
        ev = _sliced(lambda ns: _lib.shmbox_owner_wait(p, ns, byref(dropped)), timeout, _capi.EVENT_NONE)
        return self._event(ev, dropped.value)

    def deliver(self, max=None, filter=None):
        """A delivery now, whatever the state, of up to `max` messages (None: all) through
        `filter` (see :meth:`active`). Returns an :class:`Event`: kind 'delivered' or 'none'
        (the box was empty)."""
        dropped = c_uint64(0)
        fn = self._c_filter(filter)
        st = _lib.shmbox_owner_deliver(self._p(), ctypes.c_size_t(-1).value if max is None else max, fn, None,
                                       byref(dropped))
        err, self._filter_error = self._filter_error, None
        if err is not None:
            raise err
        if st == _capi.RECV_OK:
            return Event(EventKind.DELIVERED, self._batch(_lib.shmbox_batch_size(self._ptr)), dropped.value)
        if st == _capi.RECV_EMPTY:
            return Event(EventKind.NONE, [], dropped.value)
        self._receive_status(st)

    def notify_fd(self):
        """A file descriptor for poll/select/asyncio (owned by this handle; do not close it):
        readable when an armed notify or active fired. Then call ``wait(0)``.

        Example with asyncio::

            owner.notify()
            loop.add_reader(owner.notify_fd(), on_ready)   # on_ready: owner.wait(0), receive, notify()
        """
        fd = _lib.shmbox_owner_notify_fd(self._p())
        if fd < 0:
            raise _error(_lib.shmbox_last_error() or _lib.shmbox_owner_last_error(self._ptr) or 18)
        return fd

    def join(self, group, tag):
        """Instead of a notify_fd of its own: this owner's notifications make `group`'s fd
        readable and its ready() return `tag` (an int, 0 .. 2**64-1). One or the other: refused
        (InvalidArgument) after notify_fd(). Join again to move; see :class:`NotifyGroup`."""
        _check(_lib.shmbox_owner_join(self._p(), group._p(), tag))

    def leave_group(self):
        """Leaves its NotifyGroup (nothing if in none); closing the Owner does too."""
        _lib.shmbox_owner_leave_group(self._p())

    # -- ownership

    def give_away(self, pid, data=b"", timeout=10.0):
        """Hands the box to process `pid` (of this pid namespace), which waits for it as heir or
        listener, with `data` (up to 64 bytes) in its transfer record. Returns True once it owns
        the box (this handle then no longer does), False with nothing changed."""
        return self._give_away(_lib.shmbox_owner_give_away, pid, data, timeout)

    def give_away_to_heir(self, entry, data=b"", timeout=10.0):
        """The same for heir-table entry `entry`, in any pid namespace."""
        return self._give_away(_lib.shmbox_owner_give_away_to_heir, entry, data, timeout)

    def _give_away(self, fn, dest, data, timeout):
        # In slices (Ctrl-C works): an offer not taken within a slice is withdrawn (nothing
        # changed) and made again in the next, until the timeout.
        data = _bytes(data, "give-away data")
        p = self._p()
        for ns, last in _Slices(timeout):
            r = fn(p, dest, data, len(data), ns)
            if r < 0:
                raise _error(-r)
            if r == 1 or last or _lib.shmbox_owner_last_error(p) != _capi.E_TIMED_OUT:
                return r == 1

    def accept_give_away_requests(self, accept=True):
        """Serve (or not) give-away requests (:meth:`Box.request_give_away`, ``shmbox give-away``)."""
        _lib.shmbox_owner_accept_give_away_requests(self._p(), 1 if accept else 0)

    def renew(self):
        """Renews the lease of a box created with one (receiving renews it too)."""
        _lib.shmbox_owner_renew(self._p())

    def transfer(self):
        """How this owner got the box: a :class:`Transfer` (reason 'none' for a plain acquire)."""
        t = _capi.Transfer()
        t.struct_size = ctypes.sizeof(t)
        _check(_lib.shmbox_owner_transfer(self._p(), byref(t)))
        return _transfer(t)

    @property
    def epoch(self):
        """The epoch this handle owns the box under (+1 on every change of owner)."""
        return _lib.shmbox_owner_epoch(self._p())

    def __repr__(self):
        return f"<shmbox.Owner {self.name!r}{' (closed)' if self.closed else ''}>"


# ---- Heir ------------------------------------------------------------------------------


class NotifyGroup(_Handle):
    """One file descriptor for many owners (docs/owner-states.md, "Many boxes, one descriptor")::

        group = shmbox.NotifyGroup()
        owners = [shmbox.Owner.acquire(n) for n in names]
        for tag, o in enumerate(owners):
            o.join(group, tag)
            o.notify()
        loop.add_reader(group.fd(), on_ready)   # on_ready: for tag in group.ready(): owners[tag].wait(0), ...

    A member owner has no descriptor of its own: 10,000 owned boxes fit in a descriptor limit
    of 20,000. A group and its members may be closed in any order.
    """

    _close_fn = "shmbox_notify_group_close"
    _BATCH = 256

    def __init__(self):
        out = c_void_p()
        _check(_lib.shmbox_notify_group_create(byref(out)))
        super().__init__(out.value)
        self._tags = (ctypes.c_uint64 * self._BATCH)()

    def fd(self):
        """Readable while some member's tag is ready (owned by the group; do not close it)."""
        return _lib.shmbox_notify_group_fd(self._p())

    def ready(self):
        """The tags ready since the last call (each once), as a list; the fd is quiet after."""
        out = []
        while True:
            k = _lib.shmbox_notify_group_ready(self._p(), self._tags, self._BATCH)
            out.extend(self._tags[:k])
            if k < self._BATCH:
                return out


class Requester(_Handle):
    """Asks a box's owner and waits for its reply (docs/request-reply.md)::

        with shmbox.Requester.attach("prices") as r:
            reply = r.call(b"EURUSD", timeout=1.0)     # bytes, or None when no reply came in time

    The requester has a reply box of its own ("<service>.r<16 hex digits>", removed on close).
    Each request gets exactly one reply; one that comes after its timeout is counted late and
    never handed to another request. Replies never cross between requesters.
    """

    _close_fn = "shmbox_requester_close"

    @classmethod
    def attach(cls, service, max_outstanding=64, max_reply_size=0, any_owner=False):
        """Attaches to box `service` and makes the reply box. `max_outstanding`: requests that may
        wait for their reply at once; `max_reply_size`: the largest reply (0: the service box's
        slot size)."""
        name = _name(service)
        o = _capi.RequesterOptions()
        _lib.shmbox_requester_options_init(byref(o))
        o.max_outstanding = max_outstanding
        o.max_reply_size = max_reply_size
        o.any_owner = 1 if any_owner else 0
        out = c_void_p()
        _check(_lib.shmbox_requester_attach(name, byref(o), byref(out)))
        return cls(out.value, name.decode())

    def __init__(self, ptr, name):
        super().__init__(ptr)
        self.name = name  #: the service box's name
        self._buf = ctypes.create_string_buffer(max(1, _lib.shmbox_requester_max_reply(ptr)))

    @property
    def max_request_size(self):
        """The largest request the service box takes (its slot size less 40 bytes)."""
        return _lib.shmbox_requester_max_request(self._p())

    def ask(self, data, timeout=BOX_DEFAULT):
        """Posts a request; returns its ticket (an int) for :meth:`wait`. `timeout`: how long a
        post into a full 'block' box may wait (default: the box's). Raises TooLarge, and Refused
        when it was not stored (the box full, over quota, max_outstanding requests waiting)."""
        b = _bytes(data, "request")
        ticket = c_uint64(0)
        ns = _capi.BOX_TIMEOUT if timeout is BOX_DEFAULT else _ns(timeout)
        st = _lib.shmbox_ask(self._p(), b, len(b), ns, byref(ticket))
        if st in (_capi.STORED, _capi.STORED_EVICTED):
            return ticket.value
        if st == _capi.POST_TOO_LARGE:
            raise TooLarge(f"box '{self.name}': a request of {len(b)} bytes is larger than the "
                           f"{self.max_request_size} bytes a request may have", _capi.E_TOO_LARGE)
        if st == _capi.POST_ERROR:
            raise _error(_lib.shmbox_last_error())
        raise _errors.Refused(f"box '{self.name}': the request was not stored ({_enum_name(_POST_STATUSES, st)})",
                      _capi.E_REFUSED)

    def wait(self, ticket, timeout=None, keep=False):
        """The reply to `ticket` (bytes), waiting up to `timeout` seconds (None: for ever), or None
        when none came in time: then the request is over (a later reply is counted late) unless
        `keep`. Ctrl-C interrupts the wait (the request stays waiting then)."""
        size = c_size_t(0)
        buf = self._buf
        for ns, last in _Slices(timeout):
            st = _lib.shmbox_ask_wait(self._p(), ticket, buf, len(buf), byref(size), ns, 1 if keep or not last else 0)
            if st == _capi.REPLY_OK:
                return buf.raw[:size.value]
            if st != _capi.REPLY_TIMEOUT:
                raise _error(_lib.shmbox_last_error())
            if last:
                return None
        return None

    def call(self, data, timeout=None):
        """ask() then wait(): the reply (bytes), or None when none came within `timeout` seconds."""
        return self.wait(self.ask(data, timeout=BOX_DEFAULT if timeout is None else timeout), timeout)

    def forget(self, ticket):
        """Gives up on a request: its reply, if it comes, is counted late."""
        _lib.shmbox_ask_forget(self._p(), ticket)

    @property
    def notify_fd(self):
        """Readable when a reply may have come: then ``wait(ticket, 0, keep=True)``."""
        fd = _lib.shmbox_requester_notify_fd(self._p())
        if fd < 0:
            raise _error(_lib.shmbox_last_error())
        return fd

    def stats(self):
        """What this requester saw: asked, replied, timed_out, duplicates, late, stray."""
        st = _capi.RequesterStats()
        st.struct_size = ctypes.sizeof(st)
        _check(_lib.shmbox_requester_stats_get(self._p(), byref(st)))
        return {f: getattr(st, f) for f, _ in _capi.RequesterStats._fields_[2:]}


class Heir(_Handle):
    """An entry in a box's heir table: waits to be given the box (owner died, give-away)."""

    _close_fn = "shmbox_heir_close"

    def __init__(self, ptr, name):
        super().__init__(ptr)
        self.name = name  #: the box's name

    @classmethod
    def enlist(cls, name, data=b""):
        """Registers this process as an heir of box `name`, with `data` (up to 64 bytes) handed
        over in the transfer record. Heirs take over in registration order."""
        data = _bytes(data, "heir data")
        out = c_void_p()
        _check(_lib.shmbox_heir_enlist(_name(name), data, len(data), byref(out)))
        return cls(out.value, _name(name).decode())

    @classmethod
    def listen(cls, name):
        """Waits only for give-away offers to this process (not for the owner's death)."""
        out = c_void_p()
        _check(_lib.shmbox_heir_listen(_name(name), byref(out)))
        return cls(out.value, _name(name).decode())

    def await_transfer(self, timeout=None):
        """Waits up to `timeout` seconds (None: for ever) to be given the box.

        Returns the new :class:`Owner` (its :meth:`Owner.transfer` says how),
        or None when the timeout passed.
        """
        h = self._p()
        out = c_void_p()
        code = _sliced(lambda ns: _lib.shmbox_heir_await(h, ns, byref(out)), timeout, _capi.E_TIMED_OUT)
        if code == 0:
            return Owner(out.value, self.name)
        if code == _capi.E_TIMED_OUT:
            return None
        raise _error(code)

    def fd(self):
        """A file descriptor for poll/select/asyncio: readable when ``await_transfer(0)`` may succeed."""
        fd = _lib.shmbox_heir_fd(self._p())
        if fd < 0:
            raise _error(_lib.shmbox_last_error() or 18)
        return fd

    @property
    def position(self):
        """0 when this process is next in line (listeners: always 0)."""
        return _lib.shmbox_heir_position(self._p())

    def __repr__(self):
        return f"<shmbox.Heir {self.name!r}{' (closed)' if self.closed else ''}>"


# ---- Pools ------------------------------------------------------------------------------


class _BorrowedProducer(Producer):
    """A lease's producer: closed with its lease."""

    def close(self):
        if self._ptr is not None:
            self._bind(None, None)
            self._ptr = None


class _BorrowedOwner(Owner):
    """A pool member's owner: closed with its member."""

    def close(self):
        if self._ptr is not None:
            self._bind(None)
            self._ptr = None
        box, self._box = self._box, None
        if box is not None:
            box.close()


_RETURN_STATUSES = ("ok", "double-return", "stale")


class Lease(_Handle):
    """Exclusive use of one pool member until :meth:`give_back` (or this process dies: the member
    is then replaced). ``with pool.take() as lease:`` gives it back ok on a normal exit and as
    failed (the member is stopped and replaced) on an exception."""

    _close_fn = "shmbox_lease_close"

    def __init__(self, ptr):
        super().__init__(ptr)
        self.box = _lib.shmbox_lease_box(ptr).decode()  #: the member's box
        self.worker_pid = _lib.shmbox_lease_worker_pid(ptr)  #: the member's worker (0: unknown)
        try:  # a post's default wait: the member box's block_timeout, as for any producer
            with Box.inspect(self.box) as b:
                block_timeout = b.info()["block_timeout"]
        except Error:
            block_timeout = 1.0
        self.producer = _BorrowedProducer(_lib.shmbox_lease_producer(ptr), self.box, block_timeout)  #: posts to it

    def post(self, data, *args, **kw):
        """``lease.producer.post(...)``."""
        return self.producer.post(data, *args, **kw)

    def give_back(self, ok=True):
        """Ends the lease: 'ok', 'double-return' (given back already) or 'stale' (the member was
        replaced meanwhile). ok=False: the member's state is unknown; it is stopped and replaced."""
        r = _lib.shmbox_lease_give_back(self._p(), 0 if ok else 1)
        if r >= len(_RETURN_STATUSES):
            raise _error(_lib.shmbox_last_error() or 18)
        return _RETURN_STATUSES[r]

    def close(self):
        """Frees the handle; a lease not given back is given back as failed."""
        if self._ptr is not None:
            self.producer.close()
        super().close()

    def __exit__(self, exc_type, *exc):
        if self._ptr is not None:
            self.give_back(exc_type is None)
        self.close()

    def __repr__(self):
        return f"<shmbox.Lease {self.box!r}>" if not self.closed else "<shmbox.Lease (closed)>"


class Pool(_Handle):
    """A pool of worker processes, each owning a member box (pooler's pools across processes).

    ``Pool.create(name, command, ...)`` makes it; a supervisor (``pool.supervise()`` here, or
    ``shmbox pool run NAME``) starts the members; takers ``Pool.open(name).take()`` a member and
    post to it through the lease. A handle is used by one thread at a time."""

    _close_fn = "shmbox_pool_close"

    @staticmethod
    def create(name, command, *, init_count=1, max_count=4, cull_after=0, queue_max=16, max_clients=64, group="",
               dead_letters="", start_timeout=5.0, stop_grace=1.0, health_interval=0, health_timeout=1.0,
               mode=0o600, capacity=1024, slot_size=256, overflow="reject", max_producers=64, block_timeout=1.0,
               max_lifetime=0, max_lifetime_jitter=0, auto_grow_threshold=None, table_size=0, init_command=""):
        """Creates pool `name` (raises Exists). `command` runs each member (``/bin/sh -c``, with
        SHMBOX_POOL, SHMBOX_BOX, SHMBOX_MEMBER in its environment: :meth:`PoolMember.from_env`).
        Times in seconds; capacity ... block_timeout are each member box's. `max_lifetime`
        (+/- `max_lifetime_jitter`, each member its own) retires members (pooler's); a take that
        leaves `auto_grow_threshold` free members or fewer starts more ahead of demand.
        `table_size` (0: max_count) fixes the member entries: how far :meth:`reconfigure` may
        raise max_count. `init_command` (under 128 bytes) runs once a new member owns its box,
        before it is first handed out; a member whose init command fails is stopped."""
        raw = _name(name, "pool name").decode()
        for what, v in (("cull_after", cull_after), ("start_timeout", start_timeout), ("stop_grace", stop_grace),
                        ("health_interval", health_interval), ("health_timeout", health_timeout),
                        ("block_timeout", block_timeout), ("max_lifetime", max_lifetime),
                        ("max_lifetime_jitter", max_lifetime_jitter)):
            _finite(v, what)
        if auto_grow_threshold is not None and (not isinstance(auto_grow_threshold, int) or auto_grow_threshold < 0):
            raise ValueError(f"auto_grow_threshold is a count of free members (an int >= 0) or None, "
                             f"not {auto_grow_threshold!r}")
        _core.pool_create(raw, str(command), init_count, max_count, float(cull_after), queue_max, max_clients,
                          str(group), str(dead_letters or ""), float(start_timeout), float(stop_grace),
                          float(health_interval), float(health_timeout), mode, capacity, slot_size,
                          _policy_code(overflow), max_producers, float(block_timeout), float(max_lifetime),
                          float(max_lifetime_jitter), -1 if auto_grow_threshold is None else auto_grow_threshold,
                          table_size, str(init_command or ""))

    @classmethod
    def open(cls, name, any_owner=False):
        """Opens pool `name` to take members or to supervise it."""
        out = c_void_p()
        _check(_lib.shmbox_pool_open(_name(name, "pool name"), 1 if any_owner else 0, byref(out)))
        p = cls(out.value)
        p.name = name if isinstance(name, str) else name.decode()
        return p

    @staticmethod
    def remove(name, immediate=False, timeout=10.0):
        """Removes pool `name`: graceful (no new takes; members in use stop when given back) or
        immediate. Raises TimedOut when members in use keep it past `timeout` seconds."""
        t = _finite(timeout, "timeout")
        _core.pool_remove(_name(name, "pool name").decode(), bool(immediate), t)

    @staticmethod
    def list():
        """Names of every pool in /dev/shm."""
        return _core.pool_list()

    @staticmethod
    def info(name):
        """A snapshot of pool `name` (shmbox::inspect_pool, as ``shmbox pool stat --json``), as a dict.

        Keys: name, group, command, init_command, dead_letters (None when unset), init_count,
        max_count, table_size, reconfigurations, queue_max, max_clients, cull_after,
        start_timeout, stop_grace, health_interval, health_timeout, max_lifetime,
        max_lifetime_jitter (seconds), auto_grow_threshold (None: none), member_capacity,
        member_slot_size, member_overflow, the gauges free, in_use, starting, checking, stopping,
        queued, clients, supervisor (a dict: pid, pid_ns, alive, epoch, standbys), removing (None,
        "graceful", "immediate"), mode, uid, segment_bytes, members (a list of dicts: index, state,
        box, generation, worker_pid, worker_pid_ns, worker_alive, taker_pid, taker_pid_ns,
        taker_alive, leases, idle (seconds), stopping_why, depth), counters (every pool counter),
        ledger_gap and ledger_settled. Raises NotFound, PermissionDenied, Corrupt, ..."""
        return _core.pool_info(_name(name, "pool name").decode())

    @staticmethod
    def take_group(group, timeout=None):
        """A lease on a member of the freest pool of `group` (waits up to `timeout` seconds; None: for
        ever). One call of the library: Ctrl-C is handled when it returns."""
        t = _seconds(timeout)
        return Lease(_core.pool_take_group(str(group), -1.0 if t is None else t))

    @staticmethod
    def remove_group(group, immediate=False, timeout=10.0):
        """Removes every pool of `group` (pooler's rm_group), each as :meth:`remove` does, within one
        `timeout` (seconds): the names of the pools removed ([] for a group no pool has). Raises
        TimedOut (naming each pool left and why) when some outlived it; the others are removed."""
        t = _finite(timeout, "timeout")
        return _core.pool_remove_group(str(group), bool(immediate), t)

    def cull(self, idle=0.0, timeout=10.0):
        """Culls now: the supervisor stops the free members idle at least `idle` seconds (0: every
        free one), longest idle first, down to init_count; members in use never. Returns how many it
        stopped. Raises Refused (no supervisor runs), TimedOut (its answer did not come within
        `timeout` seconds), PoolRemoved."""
        i = _finite(idle, "idle")
        t = _finite(timeout, "timeout")
        out = c_uint32()
        _check(_lib.shmbox_pool_cull(self._p(), int(i * 1000), int(t * 1e9), byref(out)))
        return out.value

    def reconfigure(self, *, init_count=None, max_count=None, cull_after=None, queue_max=None,
                    auto_grow_threshold=_UNCHANGED, timeout=10.0):
        """Changes the running pool's parameters given (pooler's pool_reconfigure); the others are
        kept. `auto_grow_threshold=None` turns growth ahead of demand off. A raised init_count
        starts members; a lowered max_count stops free ones down to it (raises Refused, changing
        nothing, when too few are free); a lowered cull_after (seconds) culls at once; a lowered
        queue_max refuses the newest waiters beyond it. With a supervisor running, waits up to
        `timeout` seconds until it applied them (TimedOut: set, not applied yet); with none, they
        are set and applied when one runs. InvalidArgument: a value out of range (max_count above
        the pool's table_size)."""
        c = _capi.PoolChanges()
        c.struct_size = ctypes.sizeof(c)
        for what, v, bit in (("init_count", init_count, _capi.POOL_SET_INIT_COUNT),
                             ("max_count", max_count, _capi.POOL_SET_MAX_COUNT),
                             ("queue_max", queue_max, _capi.POOL_SET_QUEUE_MAX)):
            if v is None:
                continue
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < _capi.NO_AUTO_GROW:
                raise ValueError(f"{what} is a count (an int >= 0), not {v!r}")
            setattr(c, what, v)
            c.set |= bit
        if cull_after is not None:
            c.cull_after_ms = int(_finite(cull_after, "cull_after") * 1000)
            c.set |= _capi.POOL_SET_CULL_AFTER
        if auto_grow_threshold is not _UNCHANGED:
            if auto_grow_threshold is None:
                c.auto_grow_threshold = _capi.NO_AUTO_GROW
            elif (not isinstance(auto_grow_threshold, int) or isinstance(auto_grow_threshold, bool)
                  or not 0 <= auto_grow_threshold < _capi.NO_AUTO_GROW):
                raise ValueError(f"auto_grow_threshold is a count of free members (an int >= 0) or None (off), "
                                 f"not {auto_grow_threshold!r}")
            else:
                c.auto_grow_threshold = auto_grow_threshold
            c.set |= _capi.POOL_SET_AUTO_GROW
        t = _finite(timeout, "timeout")
        _check(_lib.shmbox_pool_reconfigure(self._p(), byref(c), int(t * 1e9)))

    def take(self, timeout=None):
        """A lease on a free member, waiting up to `timeout` seconds (None: for ever) for one; raises
        TimedOut, NoMembers, PoolRemoved, ... The wait goes in slices of 0.25 s (Ctrl-C works); a
        taker queued for a returned member rejoins the queue's end at each slice."""
        p = self._p()
        out = c_void_p()
        code = _sliced(lambda ns: _lib.shmbox_pool_take(p, ns, byref(out)), timeout, _capi.E_TIMED_OUT)
        _check(code)
        return Lease(out.value)

    def supervise(self, command=None, dead_letters=None, log=None, init_command=None):
        """Runs the supervisor until Ctrl-C (KeyboardInterrupt, raised once it has stopped) or the
        pool is removed: a standby while another supervisor lives, then the supervisor. `log`: a
        callable given each event line. A pool others can write runs only the `command` (and
        `init_command`) given here."""
        _core.pool_supervise(self._p(), command, dead_letters, log, init_command)

    def __repr__(self):
        return f"<shmbox.Pool {getattr(self, 'name', '?')!r}>" if not self.closed else "<shmbox.Pool (closed)>"


class PoolMember(_Handle):
    """The worker side of a pool member: ``PoolMember.from_env()`` in the member command."""

    _close_fn = "shmbox_member_close"

    @classmethod
    def from_env(cls):
        """Takes the member's box named by the environment the supervisor gave (Refused when the
        member was replaced meanwhile)."""
        out = c_void_p()
        _check(_lib.shmbox_member_from_env(byref(out)))
        return cls(out.value)

    def __init__(self, ptr):
        super().__init__(ptr)
        box = os.environ.get("SHMBOX_BOX", "")
        self.owner = _BorrowedOwner(_lib.shmbox_member_owner(ptr), box)  #: receives what takers post

    @property
    def stopped(self):
        """True when this worker should end (its pool was removed, or it was replaced)."""
        return _lib.shmbox_member_stopped(self._p()) != 0

    def answer_ping(self, message):
        """True when `message` (a Message or bytes, from lane 0) is the supervisor's health ping;
        then it is answered."""
        data = message.data if isinstance(message, Message) else _bytes(message)
        return _lib.shmbox_member_answer_ping(self._p(), data, len(data)) != 0

    def close(self):
        if self._ptr is not None:
            self.owner.close()
        super().close()
