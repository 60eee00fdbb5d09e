"""asyncio for shmbox: awaitable receives and posts, ``async for`` over an owner.

    import asyncio, shmbox
    from shmbox import aio

    async def consume(name):
        async with aio.Owner.acquire(name) as owner:     # an ordinary Owner inside (owner.sync)
            async for msg in owner:                      # no thread, no polling
                print(msg.data)

    async def produce(name):
        async with aio.Producer.attach(name) as p:
            await p.post(b"hello")                       # a full 'block' box waits without blocking the loop

How: a receive that finds the box empty arms pobox's notify state and waits
for the owner's ``notify_fd`` to turn readable in the event loop
(``loop.add_reader``), then takes what is there. One descriptor per owner,
nothing per message, no thread: a loop can serve any number of boxes. A post
into a full 'block' box has no descriptor to wait on (the library's
producers wait on a futex), so that wait, and only it, runs in the loop's
default executor; every other post returns at once. A pool's take waits
in the executor too (a taker waits on the pool's futex).

The wrappers hold an ordinary handle (``.sync``) and pass every other
attribute to it (``owner.counters()``, ``owner.give_away(...)``, ...). A
handle is used by one task at a time: concurrent receives on one
:class:`Owner` are served one after the other.
"""

import asyncio
import functools

import shmbox as _shmbox
from shmbox import BOX_DEFAULT, _seconds

__all__ = ["Owner", "Producer", "Pool", "Requester", "NotifyGroup"]


async def _readable(loop, fd, deadline):
    """Waits until `fd` is readable in `loop`, or until `deadline` (loop.time(); None: no limit)."""
    ready = loop.create_future()
    loop.add_reader(fd, lambda f=ready: f.done() or f.set_result(None))
    try:
        if deadline is None:
            await ready
        else:
            try:
                await asyncio.wait_for(ready, max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                pass
    finally:
        loop.remove_reader(fd)


class _Wrapper:
    """What the three wrappers share: the handle they drive (``.sync``), every other attribute
    passed to it, close(), and ``with`` / ``async with`` closing it."""

    def __init__(self, handle):
        self.sync = handle  #: the ordinary shmbox handle it drives
        self._lock = None  # made in the running loop (Python 3.9 binds a Lock to a loop at creation)

    def _serial(self):
        """The lock that serializes this handle's waits (one task at a time)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def _until(self, take, fd, timeout, arm=None, after=None):
        """take() until it returns something other than None/[], up to `timeout` seconds (None:
        for ever), waiting in the loop for descriptor fd() to turn readable between tries:
        arm() before each wait, after() after it. What take() last returned."""
        got = take()
        if got:
            return got
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        async with self._serial():
            d = fd()
            while True:
                got = take()
                if got or (deadline is not None and loop.time() >= deadline):
                    return got
                if arm is not None:
                    arm()
                await _readable(loop, d, deadline)
                if after is not None:
                    after()

    def __getattr__(self, attr):
        return getattr(self.sync, attr)

    def close(self):
        """Closes the handle (an owner releases the box to its first live heir, if any)."""
        self.sync.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Owner(_Wrapper):
    """An asyncio owner: ``await receive()``, ``await receive_batch()``, ``async for``."""

    @classmethod
    def acquire(cls, name):
        """Takes ownership of box `name` (as :meth:`shmbox.Owner.acquire`; it does not wait)."""
        return cls(_shmbox.Owner.acquire(name))

    async def _take(self, take, timeout):
        """take() until it returns something other than None/[], waking on notify_fd: armed
        before each wait (if data is there already the notification comes at once), the
        notification read after it (which also serves a give-away request: NotOwner once given)."""
        o = self.sync
        return await self._until(take, o.notify_fd, timeout, o.notify, lambda: o.wait(0))

    async def receive(self, timeout=None):
        """The next message, waiting up to `timeout` seconds (None: for ever) without blocking the
        loop; None when nothing arrived in time. Raises NotOwner once the box is lost."""
        t = _seconds(timeout)
        return await self._take(self.sync.try_receive, t)

    async def receive_batch(self, max=64, timeout=None):
        """Up to `max` messages once at least one is there (waiting up to `timeout`); [] on timeout."""
        t = _seconds(timeout)
        return await self._take(lambda: self.sync.receive_batch(max, 0), t)

    def __aiter__(self):
        return self._messages()

    async def _messages(self):
        while True:
            m = await self.receive(None)
            if m is not None:
                yield m



class NotifyGroup(_Wrapper):
    """An asyncio notify group (docs/owner-states.md, "Many boxes, one descriptor"): any number
    of owners wait through the group's one descriptor in the loop, no thread, no polling::

        group = aio.NotifyGroup()
        owners = [shmbox.Owner.acquire(n) for n in names]
        for tag, o in enumerate(owners):
            group.join(o, tag)                       # joined and armed
        while True:
            for tag in await group.ready():          # the members that fired, each once
                o = owners[tag]
                o.wait(0)                            # reads its notification
                for m in o.receive_batch(64, 0):
                    ...
                o.notify()                           # one-shot: arm it again

    (An :class:`Owner` of this module waits on a notify_fd of its own; a member of a group has
    none: use ordinary owners, or an aio Owner's ``.sync``, with a group.)"""

    def __init__(self, group=None):
        super().__init__(group if group is not None else _shmbox.NotifyGroup())

    def join(self, owner, tag):
        """`owner` (a :class:`shmbox.Owner`) joins this group with `tag` and is armed (notify())."""
        o = getattr(owner, "sync", owner)
        o.join(self.sync, tag)
        o.notify()

    async def ready(self, timeout=None):
        """The tags of the members that fired since the last call (each once), waiting up to
        `timeout` seconds (None: for ever) without blocking the loop; [] when none did in time."""
        t = _seconds(timeout)
        return await self._until(self.sync.ready, self.sync.fd, t)


class Requester(_Wrapper):
    """An asyncio requester (docs/request-reply.md): ``await call(request)``, ``await
    wait(ticket)``. The wait is the requester's notify_fd in the loop: no thread, no polling;
    any number of requests (of one requester, or of many) wait in one loop."""

    @classmethod
    def attach(cls, service, **options):
        """As :meth:`shmbox.Requester.attach` (it does not wait)."""
        return cls(_shmbox.Requester.attach(service, **options))

    def ask(self, data, timeout=BOX_DEFAULT):
        """Posts a request (as :meth:`shmbox.Requester.ask`); returns its ticket."""
        return self.sync.ask(data, timeout)

    async def wait(self, ticket, timeout=None):
        """The reply to `ticket` (bytes), or None when none came within `timeout` seconds (the
        request is over then: a later reply is counted late)."""
        t = _seconds(timeout)
        r = self.sync
        loop = asyncio.get_running_loop()
        deadline = None if t is None else loop.time() + t
        fd = r.notify_fd
        try:
            while True:
                got = r.wait(ticket, 0, keep=True)  # re-arms the descriptor when nothing is there
                if got is not None:
                    return got
                if deadline is not None and loop.time() >= deadline:
                    r.forget(ticket)
                    return None
                await _readable(loop, fd, deadline)
        except asyncio.CancelledError:
            r.forget(ticket)
            raise

    async def call(self, data, timeout=None):
        """ask() then wait(): the reply, or None in time."""
        return await self.wait(self.sync.ask(data, BOX_DEFAULT if timeout is None else timeout), timeout)


class Producer(_Wrapper):
    """An asyncio producer: ``await post()``, ``await post_batch()``."""

    def __init__(self, producer, blocks):
        super().__init__(producer)
        self._blocks = blocks  # a 'block' box: a full box makes a post wait

    @classmethod
    def attach(cls, box):
        """Takes a producer entry in `box` (a name or an open :class:`shmbox.Box`)."""
        if not isinstance(box, _shmbox.Box):
            with _shmbox.Box.open(box) as b:
                return cls.attach(b)
        overflow = box.info()["overflow"]
        return cls(_shmbox.Producer.attach(box), str(overflow) == "block" or
                   any(str(lane.get("overflow")) == "block" for lane in box.info().get("lanes", [])))

    async def post(self, data, lane=None, timeout=BOX_DEFAULT, priority=None):
        """:meth:`shmbox.Producer.post` without blocking the loop: in a 'block' box the wait for room
        runs in the loop's default executor; in other boxes the post is made at once."""
        if not self._blocks:
            return self.sync.post(data, lane, timeout, priority)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self.sync.post, data, lane, timeout, priority))

    async def post_batch(self, messages, lane=None, timeout=BOX_DEFAULT, priority=None):
        """:meth:`shmbox.Producer.post_batch`, as :meth:`post`."""
        if not self._blocks:
            return self.sync.post_batch(messages, lane, timeout, priority)
        loop = asyncio.get_running_loop()
        msgs = list(messages)
        return await loop.run_in_executor(None, functools.partial(self.sync.post_batch, msgs, lane, timeout, priority))



class Pool(_Wrapper):
    """An asyncio pool handle: ``lease = await pool.take(timeout)`` (then ``with lease: ...``)."""

    @classmethod
    def open(cls, name, any_owner=False):
        """Opens pool `name` (as :meth:`shmbox.Pool.open`)."""
        return cls(_shmbox.Pool.open(name, any_owner))

    async def take(self, timeout=None):
        """:meth:`shmbox.Pool.take` without blocking the loop (the wait runs in the default executor)."""
        _seconds(timeout)
        loop = asyncio.get_running_loop()
        async with self._serial():  # a Pool handle takes in one thread at a time: takes queue here
            return await loop.run_in_executor(None, self.sync.take, timeout)

