"""The exceptions of the shmbox package.

Every error the C library reports becomes an instance of a subclass of
:class:`Error`, chosen by the library's error code (``enum shmbox_error``).
The exception carries the code (``.code``), the general meaning of the code
(``.meaning``, shmbox_strerror) and, as its text (``.message``, ``str(e)``),
the library's own sentence about this failure (shmbox_last_error_message):
it names the box and says what to do.

Some classes also derive from the built-in exception that a Python programmer
would catch for the same thing: :class:`InvalidName` and
:class:`InvalidArgument` are ``ValueError``\\ s, :class:`NotFound` is a
``FileNotFoundError``-like ``LookupError``, :class:`TimedOut` a
``TimeoutError``, :class:`PermissionDenied` a ``PermissionError``.
"""

__all__ = [
    "Error", "InvalidName", "InvalidArgument", "Exists", "NotFound", "PermissionDenied", "NoSpace", "TooLarge",
    "BadSegment", "NotABox", "VersionMismatch", "Truncated", "Corrupt", "Incomplete", "NotOwner", "AlreadyOwner",
    "ProducerTableFull", "HeirTableFull", "TimedOut", "SystemFailure", "Refused", "NoMembers", "PoolRemoved",
    "PoolClientsFull", "StashFull", "BufferUnknown", "BufferBroken", "InheritedHandle",
    "error_class",
]


class Error(Exception):
    """An error the shmbox library reported.

    Attributes:
        code: the library's error code (an int of ``enum shmbox_error``).
        message: the library's sentence about this failure (also ``str(e)``).
        meaning: what the code means in general ("no box of that name").
    """

    code = 0

    def __init__(self, message, code=None, meaning=""):
        if code is not None:
            self.code = code
        self.message = message
        self.meaning = meaning
        Exception.__init__(self, message)

    def __str__(self):
        return self.message

    def __repr__(self):
        return f"{type(self).__name__}(code={self.code}, message={self.message!r})"


class InvalidName(Error, ValueError):
    """A box name that is empty, too long, or has characters other than [A-Za-z0-9._-]."""
    code = 1


class InvalidArgument(Error, ValueError):
    """An argument or option out of its documented range."""
    code = 2


class Exists(Error):
    """A box of that name exists already."""
    code = 3


class NotFound(Error, LookupError):
    """No box of that name."""
    code = 4


class PermissionDenied(Error, PermissionError):
    """The segment's mode or owner does not let this process in."""
    code = 5


class NoSpace(Error):
    """/dev/shm has no room for the segment."""
    code = 6


class TooLarge(Error, ValueError):
    """Beyond the documented size limits (or a message larger than the box's slot size)."""
    code = 7


class BadSegment(Error):
    """The segment cannot be used: not a box, another layout version, truncated, corrupt or incomplete."""


class NotABox(BadSegment):
    code = 8


class VersionMismatch(BadSegment):
    code = 9


class Truncated(BadSegment):
    code = 10


class Corrupt(BadSegment):
    code = 11


class Incomplete(BadSegment):
    code = 12


class NotOwner(Error):
    """Another live process owns the box, or this handle lost it."""
    code = 13


class AlreadyOwner(Error):
    """This process holds an owner handle for the box already."""
    code = 14


class ProducerTableFull(Error):
    code = 15


class HeirTableFull(Error):
    code = 16


class TimedOut(Error, TimeoutError):
    """The wait ended before the thing happened."""
    code = 17


class SystemFailure(Error, OSError):
    """An unexpected errno from the kernel, or out of memory."""
    code = 18


class Refused(Error):
    """The owner does not do what was asked."""
    code = 19


class NoMembers(Error):
    """Pools: no free member (one is starting, the pool is at capacity, or the queue is full)."""


class PoolRemoved(Error):
    code = 23


class PoolClientsFull(Error):
    code = 24


class StashFull(Error):
    code = 25


class BufferUnknown(Error):
    """The box uses a custom buffer, which only C++ programs can use."""
    code = 26


class BufferBroken(Error):
    code = 27


class InheritedHandle(Error):
    """The handle was made by another process: a fork child inherits its parent's handles,
    not its roles (owner, heir, producer entry); it opens handles of its own."""
    code = 28


_BY_CODE = {cls.code: cls for cls in (
    InvalidName, InvalidArgument, Exists, NotFound, PermissionDenied, NoSpace, TooLarge, NotABox, VersionMismatch,
    Truncated, Corrupt, Incomplete, NotOwner, AlreadyOwner, ProducerTableFull, HeirTableFull, TimedOut,
    SystemFailure, Refused, PoolRemoved, PoolClientsFull, StashFull, BufferUnknown, BufferBroken,
    InheritedHandle)}
for _code in (20, 21, 22):
    _BY_CODE[_code] = NoMembers


def error_class(code):
    """The exception class for a library error code (:class:`Error` for a code this package does not know)."""
    return _BY_CODE.get(code, Error)
