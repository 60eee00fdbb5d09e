"""ctypes declarations of the C API (include/shmbox/shmbox.h).

Private: the public classes are in shmbox/__init__.py. Every struct here
mirrors its C counterpart field for field, in order (tests/test_layout.py
compares sizes and offsets with a C compiler's when one is there), and every
function the package calls has its argtypes and restype declared, so ctypes
never guesses an int.

The library is the package's own compiled module, shmbox._core (_core.cpp):
it links the library's objects and exports the C API, so ctypes calls the
very copy of the library the module's message path uses (one process-wide
state: the handles ctypes makes are the ones _core posts and receives
through). No libshmbox.so is looked for.
"""

import ctypes
import os

from ctypes import (POINTER, Structure, c_char, c_char_p, c_int, c_int32, c_int64, c_size_t, c_uint32, c_uint64,
                    c_void_p, CFUNCTYPE)

# ---- constants (shmbox.h) ------------------------------------------------

FOREVER = -1   # SHMBOX_FOREVER
BOX_TIMEOUT = -(2 ** 63)  # SHMBOX_BOX_TIMEOUT (INT64_MIN): the box's block_timeout
DEFAULT = -1   # SHMBOX_DEFAULT
MAX_LANES = 8  # SHMBOX_MAX_LANES
MAX_NAME = 128  # SHMBOX_MAX_NAME

# enum shmbox_post_status
STORED, STORED_EVICTED, DROPPED, FULL, TIMEOUT, POST_TOO_LARGE, POST_ERROR, OVER_QUOTA = range(8)
# enum shmbox_reply_status
(REPLY_OK, REPLY_TIMEOUT, REPLY_ALREADY_REPLIED, REPLY_NOT_A_REQUEST, REPLY_REQUESTER_GONE, REPLY_FULL, REPLY_TOO_LARGE,
 REPLY_NOT_OWNER, REPLY_ERROR) = range(9)
# enum shmbox_recv_status
RECV_OK, RECV_EMPTY, RECV_TIMEOUT, RECV_NOT_OWNER, RECV_ERROR = range(5)
# enum shmbox_event
EVENT_NONE, EVENT_NOTIFIED, EVENT_DELIVERED, EVENT_NOT_OWNER, EVENT_ERROR = range(5)
# enum shmbox_verdict
VERDICT_DELIVER, VERDICT_DROP, VERDICT_SKIP = range(3)
# error codes used by the package itself
E_INVALID_NAME = 1
E_INVALID_ARGUMENT = 2
E_NOT_OWNER = 13
E_TOO_LARGE = 7
E_TIMED_OUT = 17
E_REFUSED = 19
E_INHERITED_HANDLE = 28

# ---- structs ---------------------------------------------------------------


class LaneOptions(Structure):
    """struct shmbox_lane_options"""
    _fields_ = [
        ("capacity", c_uint32),
        ("overflow", c_int32),
        ("max_capacity", c_uint32),
    ]


class Options(Structure):
    """struct shmbox_options"""
    _fields_ = [
        ("struct_size", c_uint32),
        ("capacity", c_uint32),
        ("max_capacity", c_uint32),
        ("slot_size", c_uint32),
        ("overflow", c_int32),
        ("mode", c_uint32),
        ("max_producers", c_uint32),
        ("block_timeout_ms", c_int64),
        ("lease_ms", c_int64),
        ("lane_count", c_uint32),
        ("lanes", POINTER(LaneOptions)),
        ("default_lane", c_int32),
        ("dead_letters", c_char_p),
        ("dead_letter_refused", c_int32),
        ("spin_ns", c_int64),
        ("stash", c_uint32),
        ("priority", c_int32),
        ("quota", c_uint32),
    ]


COUNTER_FIELDS = ("posted", "stored", "delivered", "rejected", "too_large", "timeouts", "dropped_newest",
                  "dropped_oldest", "shrunk", "filtered", "buffer_dropped", "abandoned", "aborted", "redelivered",
                  "dead_lettered", "dead_letter_failed", "stashed", "unstashed", "quota_refused")


class PoolChanges(Structure):
    """struct shmbox_pool_changes"""
    _fields_ = [
        ("struct_size", c_uint32),
        ("set", c_uint32),
        ("init_count", c_uint32),
        ("max_count", c_uint32),
        ("queue_max", c_uint32),
        ("auto_grow_threshold", c_uint32),
        ("cull_after_ms", c_int64),
    ]


POOL_SET_INIT_COUNT, POOL_SET_MAX_COUNT, POOL_SET_CULL_AFTER, POOL_SET_QUEUE_MAX, POOL_SET_AUTO_GROW = 1, 2, 4, 8, 16
NO_AUTO_GROW = 0xFFFFFFFF


class Counters(Structure):
    """struct shmbox_counters"""
    _fields_ = ([("struct_size", c_uint32), ("reserved_", c_uint32)] + [(f, c_uint64) for f in COUNTER_FIELDS] +
                [("reserved2_", c_uint64)])


class ResizeReport(Structure):
    """struct shmbox_resize_report"""
    _fields_ = [
        ("struct_size", c_uint32),
        ("lane", c_uint32),
        ("before", c_uint32),
        ("after", c_uint32),
        ("max_capacity", c_uint32),
        ("dropped", c_uint64),
    ]


class LaneInfo(Structure):
    """struct shmbox_lane_info"""
    _fields_ = [
        ("struct_size", c_uint32),
        ("capacity", c_uint32),
        ("max_capacity", c_uint32),
        ("overflow", c_int32),
        ("depth", c_uint64),
        ("parked", c_uint64),
        ("count", Counters),
        ("quota", c_uint32),
    ]


class HeirInfo(Structure):
    """struct shmbox_heir_info"""
    _fields_ = [
        ("struct_size", c_uint32),
        ("entry", c_uint32),
        ("pid", c_uint32),
        ("same_namespace", c_int32),
        ("alive", c_int32),
        ("listener", c_int32),
        ("data_size", c_uint32),
        ("pid_ns", c_uint64),
        ("data", c_char * 65),
    ]


class Transfer(Structure):
    """struct shmbox_transfer"""
    _fields_ = [
        ("struct_size", c_uint32),
        ("reason", c_int32),
        ("from_pid", c_uint32),
        ("to_pid", c_uint32),
        ("from_pid_ns", c_uint64),
        ("to_pid_ns", c_uint64),
        ("epoch", c_uint64),
        ("data_size", c_uint32),
        ("data", c_char * 65),
    ]


class Info(Structure):
    """struct shmbox_info"""
    _fields_ = [
        ("struct_size", c_uint32),
        ("capacity", c_uint32),
        ("slot_size", c_uint32),
        ("max_producers", c_uint32),
        ("producers_attached", c_uint32),
        ("overflow", c_int32),
        ("mode", c_uint32),
        ("uid", c_uint32),
        ("depth", c_uint64),
        ("segment_bytes", c_uint64),
        ("block_timeout_ms", c_int64),
        ("lease_ms", c_int64),
        ("spin_ns", c_int64),
        ("owner_pid", c_uint32),
        ("owner_alive", c_int32),
        ("owner_expired", c_int32),
        ("owner_same_namespace", c_int32),
        ("owner_pid_ns", c_uint64),
        ("epoch", c_uint64),
        ("owner_mode", c_int32),
        ("accepts_requests", c_int32),
        ("orphaned", c_int32),
        ("lane_count", c_uint32),
        ("heir_count", c_uint32),
        ("default_lane", c_uint32),
        ("stash", c_uint32),
        ("parked", c_uint64),
        ("priority", c_int32),
        ("buffer", c_char * 49),
        ("dead_letters", c_char * 129),
        ("last_transfer", Transfer),
        ("count", Counters),
        ("replies_sent", c_uint64),
        ("replies_lost", c_uint64),
        ("replies_skipped", c_uint64),
        ("reply_box", c_int32),
        ("reserved3_", c_uint32),
    ]


class PostOptions(Structure):
    """struct shmbox_post_options"""
    _fields_ = [
        ("struct_size", c_uint32),
        ("lane", c_int32),
        ("timeout_ns", c_int64),
        ("spin_ns", c_int64),
        ("has_priority", c_int32),
        ("reserved_", c_int32),
        ("priority", c_int64),
        ("quiet_timeout", c_int32),
        ("reserved2_", c_int32),
    ]


class MsgInfo(Structure):
    """struct shmbox_msg_info"""
    _fields_ = [("lane", c_uint32), ("redelivered", c_int32)]


# (The message path, post ... receive_batch and read, is shmbox._core's: its C functions are
# not declared here.)

# Every struct the package mirrors, by its C name (tests/test_layout.py).
STRUCTS = {
    "shmbox_lane_options": LaneOptions,
    "shmbox_options": Options,
    "shmbox_counters": Counters,
    "shmbox_resize_report": ResizeReport,
    "shmbox_lane_info": LaneInfo,
    "shmbox_heir_info": HeirInfo,
    "shmbox_transfer": Transfer,
    "shmbox_info": Info,
    "shmbox_post_options": PostOptions,
    "shmbox_msg_info": MsgInfo,
}

# Callback types.
NAME_FN = CFUNCTYPE(None, c_void_p, c_char_p)                 # shmbox_box_list
PROBLEM_FN = CFUNCTYPE(None, c_void_p, c_char_p)              # shmbox_verify
FILTER_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, POINTER(c_size_t), c_size_t)  # shmbox_filter_fn

box_p = c_void_p
#: int64_t (*)(void* ctx, const void* data, size_t size): shmbox_producer_set_priority_function
PRIORITY_FN = CFUNCTYPE(c_int64, c_void_p, c_void_p, c_size_t)
class RequesterOptions(Structure):
    """struct shmbox_requester_options"""
    _fields_ = [
        ("struct_size", c_uint32),
        ("max_outstanding", c_uint32),
        ("max_reply_size", c_uint32),
        ("any_owner", c_int32),
    ]


class RequesterStats(Structure):
    """struct shmbox_requester_stats"""
    _fields_ = [("struct_size", c_uint32), ("reserved", c_uint32)] + [
        (f, c_uint64) for f in ("asked", "replied", "timed_out", "duplicates", "late", "stray")]


producer_p = c_void_p
owner_p = c_void_p
heir_p = c_void_p

# name: (restype, argtypes)
SIGNATURES = {
    "shmbox_version": (c_char_p, []),
    "shmbox_strerror": (c_char_p, [c_int]),
    "shmbox_last_error_message": (c_char_p, []),
    "shmbox_last_error": (c_int, []),
    # boxes
    "shmbox_options_init": (None, [POINTER(Options)]),
    "shmbox_box_create": (c_int, [c_char_p, POINTER(Options), POINTER(box_p)]),
    "shmbox_box_open": (c_int, [c_char_p, c_int, POINTER(box_p)]),
    "shmbox_box_inspect": (c_int, [c_char_p, POINTER(box_p)]),
    "shmbox_box_close": (None, [box_p]),
    "shmbox_box_remove": (c_int, [c_char_p]),
    "shmbox_validate_name": (c_int, [c_char_p]),
    "shmbox_box_list": (c_int, [NAME_FN, c_void_p]),
    "shmbox_box_name": (c_char_p, [box_p]),
    "shmbox_box_capacity": (c_uint32, [box_p]),
    "shmbox_box_slot_size": (c_uint32, [box_p]),
    "shmbox_box_lane_count": (c_uint32, [box_p]),
    "shmbox_box_default_lane": (c_uint32, [box_p]),
    "shmbox_box_overflow": (c_int, [box_p]),
    "shmbox_box_depth": (c_uint64, [box_p]),
    "shmbox_box_counters": (c_int, [box_p, POINTER(Counters)]),
    "shmbox_box_resize": (c_int, [box_p, c_uint32, c_int32, POINTER(ResizeReport)]),
    "shmbox_box_request_give_away": (c_int, [box_p, c_uint32, c_int64]),
    "shmbox_box_request_give_away_to_heir": (c_int, [box_p, c_uint32, c_int64]),
    "shmbox_box_info": (c_int, [box_p, POINTER(Info), POINTER(LaneInfo), c_size_t, POINTER(HeirInfo), c_size_t]),
    "shmbox_verify": (c_int, [c_char_p, PROBLEM_FN, c_void_p, POINTER(c_int)]),
    # producers
    "shmbox_post_options_init": (None, [POINTER(PostOptions)]),
    "shmbox_producer_attach": (c_int, [c_char_p, POINTER(producer_p)]),
    "shmbox_producer_attach_box": (c_int, [box_p, POINTER(producer_p)]),
    "shmbox_producer_close": (None, [producer_p]),
    "shmbox_post": (c_int, [producer_p, c_void_p, c_size_t]),
    "shmbox_loan": (c_int, [producer_p, POINTER(PostOptions), POINTER(c_void_p), POINTER(c_uint32)]),
    "shmbox_loan_commit": (c_int, [producer_p, c_size_t]),
    "shmbox_loan_abort": (None, [producer_p]),
    "shmbox_producer_set_priority_function": (None, [producer_p, c_void_p, c_void_p]),
    "shmbox_producer_max_message_size": (c_uint32, [producer_p]),
    "shmbox_producer_last_error": (c_int, [producer_p]),
    "shmbox_producer_last_evicted": (c_uint32, [producer_p]),
    "shmbox_producer_entry": (c_uint32, [producer_p]),
    # owners
    "shmbox_owner_acquire": (c_int, [c_char_p, POINTER(owner_p)]),
    "shmbox_owner_acquire_box": (c_int, [box_p, POINTER(owner_p)]),
    "shmbox_owner_close": (None, [owner_p]),
    "shmbox_unstash_all": (c_size_t, [owner_p]),
    "shmbox_stashed": (c_size_t, [owner_p]),
    "shmbox_pump": (c_size_t, [owner_p]),
    "shmbox_batch_size": (c_size_t, [owner_p]),
    "shmbox_commit": (c_int, [owner_p, POINTER(c_size_t)]),
    "shmbox_owner_mode": (c_int, [owner_p]),
    "shmbox_owner_passive": (None, [owner_p]),
    "shmbox_owner_notify": (None, [owner_p]),
    "shmbox_owner_active": (None, [owner_p, FILTER_FN, c_void_p, c_size_t]),
    "shmbox_owner_wait": (c_int, [owner_p, c_int64, POINTER(c_uint64)]),
    "shmbox_owner_deliver": (c_int, [owner_p, c_size_t, FILTER_FN, c_void_p, POINTER(c_uint64)]),
    "shmbox_owner_notify_fd": (c_int, [owner_p]),
    "shmbox_owner_join": (c_int, [owner_p, c_void_p, c_uint64]),
    "shmbox_owner_leave_group": (None, [owner_p]),
    "shmbox_notify_group_create": (c_int, [POINTER(c_void_p)]),
    "shmbox_notify_group_close": (None, [c_void_p]),
    "shmbox_notify_group_fd": (c_int, [c_void_p]),
    "shmbox_notify_group_ready": (c_size_t, [c_void_p, POINTER(c_uint64), c_size_t]),
    "shmbox_owner_give_away": (c_int, [owner_p, c_uint32, c_void_p, c_size_t, c_int64]),
    "shmbox_owner_give_away_to_heir": (c_int, [owner_p, c_uint32, c_void_p, c_size_t, c_int64]),
    "shmbox_owner_accept_give_away_requests": (None, [owner_p, c_int]),
    "shmbox_owner_renew": (None, [owner_p]),
    "shmbox_owner_transfer": (c_int, [owner_p, POINTER(Transfer)]),
    "shmbox_owner_epoch": (c_uint64, [owner_p]),
    "shmbox_owner_last_error": (c_int, [owner_p]),
    # pools (create, remove, list, take_group and supervise are in _core)
    "shmbox_pool_open": (c_int, [c_char_p, c_int, POINTER(c_void_p)]),
    "shmbox_pool_close": (None, [c_void_p]),
    "shmbox_pool_take": (c_int, [c_void_p, c_int64, POINTER(c_void_p)]),
    "shmbox_pool_cull": (c_int, [c_void_p, c_int64, c_int64, POINTER(c_uint32)]),
    "shmbox_pool_reconfigure": (c_int, [c_void_p, POINTER(PoolChanges), c_int64]),
    "shmbox_lease_box": (c_char_p, [c_void_p]),
    "shmbox_lease_producer": (c_void_p, [c_void_p]),
    "shmbox_lease_worker_pid": (c_uint32, [c_void_p]),
    "shmbox_lease_give_back": (c_int, [c_void_p, c_int]),
    "shmbox_lease_close": (None, [c_void_p]),
    "shmbox_member_from_env": (c_int, [POINTER(c_void_p)]),
    "shmbox_member_owner": (c_void_p, [c_void_p]),
    "shmbox_member_answer_ping": (c_int, [c_void_p, c_void_p, c_size_t]),
    "shmbox_member_stopped": (c_int, [c_void_p]),
    "shmbox_member_close": (None, [c_void_p]),
    # request/reply (the owner's reply is in _core)
    "shmbox_requester_options_init": (None, [POINTER(RequesterOptions)]),
    "shmbox_requester_attach": (c_int, [c_char_p, POINTER(RequesterOptions), POINTER(c_void_p)]),
    "shmbox_requester_close": (None, [c_void_p]),
    "shmbox_ask": (c_int, [c_void_p, c_void_p, c_size_t, c_int64, POINTER(c_uint64)]),
    "shmbox_ask_wait": (c_int, [c_void_p, c_uint64, c_void_p, c_size_t, POINTER(c_size_t), c_int64, c_int]),
    "shmbox_ask_forget": (None, [c_void_p, c_uint64]),
    "shmbox_requester_notify_fd": (c_int, [c_void_p]),
    "shmbox_requester_max_reply": (c_size_t, [c_void_p]),
    "shmbox_requester_max_request": (c_size_t, [c_void_p]),
    "shmbox_requester_stats_get": (c_int, [c_void_p, POINTER(RequesterStats)]),
    # heirs
    "shmbox_heir_enlist": (c_int, [c_char_p, c_void_p, c_size_t, POINTER(heir_p)]),
    "shmbox_heir_listen": (c_int, [c_char_p, POINTER(heir_p)]),
    "shmbox_heir_close": (None, [heir_p]),
    "shmbox_heir_await": (c_int, [heir_p, c_int64, POINTER(owner_p)]),
    "shmbox_heir_fd": (c_int, [heir_p]),
    "shmbox_heir_position": (c_uint32, [heir_p]),
}


def library_path():
    """Where the library is: the compiled module shmbox._core, which contains it."""
    from . import _core
    return _core.__file__


_lib = None


def load():
    """Loads the library once and declares every function of SIGNATURES on it."""
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"shmbox: cannot load the compiled module '{path}' as a library ({e})") from e
    missing = []
    for name, (restype, argtypes) in SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if missing:
        raise ImportError(f"shmbox: the library '{path}' lacks the C API functions {', '.join(missing)} "
                          "(a release older than this package?)")
    _lib = lib
    return lib
