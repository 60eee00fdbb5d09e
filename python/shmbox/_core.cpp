// python/shmbox/_core.cpp - the compiled part of the Python package: the
// message path (post, post_batch, receive, try_receive, receive_batch,
// receive_into) in the CPython C API, and the library itself.
//
// Why the C API and not pybind11 or ctypes: what a message costs in Python
// is the call, not the copy. ctypes made one foreign call per message plus a
// bytes and a tuple object (receive about 7 us); pybind11's dispatcher adds a
// few hundred ns per call (argument casting through its type registry). A
// METH_FASTCALL method reads its arguments from the stack, so a post is the
// library's post plus about 100 ns, and a receive builds one bytes object
// and one Message (a struct sequence: no __dict__, no Python-level __new__).
//
// The extension links the library's objects (python/shmbox/meson.build), so
// a wheel needs no libshmbox.so beside it; the rest of the package reaches
// the same copy of the library through ctypes on this very file
// (shmbox/_capi.py loads _core's path: the C API's functions are exported
// from it). The handles are the C API's (include/shmbox/shmbox.h): the
// Python classes Producer and Owner derive from ProducerCore and OwnerCore
// and bind the C handle they made (_bind(address)); the methods here reach
// the C++ handle inside it (lib/c/c_common.hpp).
//
// Blocking: a call that has to wait releases the GIL and waits in slices of
// 0.25 s, running Python's signal handlers between them, so Ctrl-C raises
// KeyboardInterrupt within a slice. A post that waits for room posts again
// after each slice with quiet_timeout (a slice's timeout is not counted);
// the last slice counts a real timeout once.
//
// Threads: a handle is used by one thread at a time. A second thread calling
// it while a first waits with the GIL released gets RuntimeError (the flag
// `busy`, read and written under the GIL), and close() refuses while it is
// busy, instead of freeing a handle another thread is inside.
//
// Nothing received is lost to a Python error: a message is copied out of
// the box first (into a reused buffer), and if building its Python objects
// fails (MemoryError), it stays pending and is the next one returned.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <atomic>
#include <new>
#include <thread>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "c/c_common.hpp"
#include "shmbox/shmbox.h"
#include "shmbox/shmbox.hpp"

namespace sb = shmbox;

#if PY_VERSION_HEX < 0x030A0000  // Python 3.9
static inline PyObject* Py_NewRef(PyObject* o) {
  Py_INCREF(o);
  return o;
}
#endif

namespace {

constexpr double kSlice = 0.25;  // seconds: the longest wait without running signal handlers

// What the package gives the module at import (shmbox/__init__.py: _setup).
struct Globals {
  PyObject* statuses = nullptr;      // PostStatus members, indexed by shmbox_post_status
  PyObject* box_default = nullptr;   // shmbox.BOX_DEFAULT
  PyObject* seconds = nullptr;       // shmbox._seconds: checks other number types (and raises for bad ones)
  PyObject* batch_result = nullptr;  // shmbox.BatchResult
  PyObject* error_of = nullptr;      // shmbox._error: the exception for a library error code
  PyTypeObject* message = nullptr;   // shmbox.Message (made here)
} g;

double now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// ---- Arguments -------------------------------------------------------------

// A timeout in seconds: None (or inf) -> -1 (for ever); NaN and negative
// numbers raise ValueError; ints and floats are read here, other numbers
// (Fraction, numpy's) go through shmbox._seconds, which also raises
// TypeError for what is not a number.
int parse_timeout(PyObject* t, double* out) {
  double v;
  if (t == Py_None) {
    *out = -1;
    return 0;
  }
  if (PyFloat_CheckExact(t)) {
    v = PyFloat_AS_DOUBLE(t);
  } else if (PyLong_CheckExact(t)) {
    v = PyLong_AsDouble(t);
    if (v == -1.0 && PyErr_Occurred()) return -1;
  } else {
    PyObject* r = PyObject_CallFunctionObjArgs(g.seconds, t, nullptr);
    if (r == nullptr) return -1;
    if (r == Py_None) {
      Py_DECREF(r);
      *out = -1;
      return 0;
    }
    v = PyFloat_AsDouble(r);
    Py_DECREF(r);
    if (v == -1.0 && PyErr_Occurred()) return -1;
  }
  if (std::isnan(v)) {
    PyErr_SetString(PyExc_ValueError, "timeout is NaN: give a number of seconds >= 0, or None to wait for ever");
    return -1;
  }
  if (v < 0) {
    PyErr_Format(PyExc_ValueError, "timeout must be >= 0 seconds or None (for ever), not %R", t);
    return -1;
  }
  *out = std::isinf(v) ? -1 : v;
  return 0;
}

// The bytes of a message: bytes, str (UTF-8) or any contiguous buffer
// (bytearray, memoryview, array.array, a numpy array), read in place.
struct Data {
  Py_buffer view{};
  bool has_view = false;
  const char* p = nullptr;
  Py_ssize_t n = 0;
  Data() = default;
  Data(const Data&) = delete;
  Data& operator=(const Data&) = delete;
  Data(Data&& o) noexcept : view(o.view), has_view(o.has_view), p(o.p), n(o.n) { o.has_view = false; }
  ~Data() {
    if (has_view) PyBuffer_Release(&view);
  }
};

int get_data(PyObject* o, Data& d) {
  if (PyBytes_CheckExact(o)) {
    d.p = PyBytes_AS_STRING(o);
    d.n = PyBytes_GET_SIZE(o);
    return 0;
  }
  if (PyUnicode_Check(o)) {
    d.p = PyUnicode_AsUTF8AndSize(o, &d.n);
    return d.p != nullptr ? 0 : -1;
  }
  if (PyObject_CheckBuffer(o)) {
    if (PyObject_GetBuffer(o, &d.view, PyBUF_ANY_CONTIGUOUS) < 0) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "a message must be one contiguous buffer; this %s is not (copy it first, e.g. "
                   "numpy.ascontiguousarray or bytes(...))",
                   Py_TYPE(o)->tp_name);
      return -1;
    }
    d.has_view = true;
    d.p = static_cast<const char*>(d.view.buf);
    d.n = d.view.len;
    return 0;
  }
  PyErr_Format(PyExc_TypeError,
               "a message is bytes (or str, bytearray, memoryview, any contiguous buffer), not %s",
               Py_TYPE(o)->tp_name);
  return -1;
}

// Keyword-or-positional arguments of a METH_FASTCALL | METH_KEYWORDS
// method into `out` (nullptr when not given): names[i] is argument i.
int parse_args(const char* fn, const char* const* names, int count, int required, PyObject* const* args,
               Py_ssize_t nargs, PyObject* kwnames, PyObject** out) {
  for (int i = 0; i < count; ++i) out[i] = nullptr;
  if (nargs > count) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fn, count, nargs);
    return -1;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) out[i] = args[i];
  if (kwnames != nullptr) {
    const Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nk; ++k) {
      PyObject* key = PyTuple_GET_ITEM(kwnames, k);
      int i = 0;
      while (i < count && PyUnicode_CompareWithASCIIString(key, names[i]) != 0) ++i;
      if (i == count) {
        PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fn, key);
        return -1;
      }
      if (out[i] != nullptr) {
        PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn, names[i]);
        return -1;
      }
      out[i] = args[nargs + k];
    }
  }
  for (int i = 0; i < required; ++i) {
    if (out[i] == nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, names[i]);
      return -1;
    }
  }
  return 0;
}

// ---- Waiting in slices ---------------------------------------------------------

// Calls step(ns, last) with the GIL released, in slices of at most kSlice
// seconds, until it returns something other than `idle` or the timeout
// (seconds; < 0: for ever) has passed; runs signal handlers between slices.
// Returns step's last result, or -1 with an exception set (a signal handler
// raised: KeyboardInterrupt).
// The slices of one wait of `timeout` seconds (< 0: for ever): next() is the
// next slice's length, and says whether it is the last one.
struct Slices {
  double timeout, deadline;
  explicit Slices(double t) : timeout(t), deadline(t < 0 ? 0 : now() + t) {}
  std::chrono::nanoseconds next(bool& last) const {
    double wait = kSlice;
    last = false;
    if (timeout >= 0) {
      const double left = deadline - now();
      if (left <= kSlice) {
        wait = left > 0 ? left : 0;
        last = true;
      }
    }
    return std::chrono::nanoseconds(static_cast<std::int64_t>(wait * 1e9));
  }
};

template <class Step>
int sliced(double timeout, int idle, Step&& step) {
  const Slices slices(timeout);
  for (;;) {
    bool last;
    const auto ns = slices.next(last);
    int r;
    Py_BEGIN_ALLOW_THREADS
    r = step(ns, last);
    Py_END_ALLOW_THREADS
    if (r != idle || last) return r;
    if (PyErr_CheckSignals() < 0) return -1;
  }
}

// The busy flag of a handle (see the header comment).
struct Busy {
  int& flag;
  explicit Busy(int& f) : flag(f) { flag = 1; }
  ~Busy() { flag = 0; }
};

int refuse_busy(const char* what) {
  PyErr_Format(PyExc_RuntimeError,
               "this %s is in use by another thread (a handle is used by one thread at a time: give each thread "
               "its own handle, or a lock)",
               what);
  return -1;
}

PyObject* closed_error(const char* what) {
  PyErr_Format(PyExc_ValueError, "operation on a closed %s", what);
  return nullptr;
}

// The C handle at `address` (an int from the package's ctypes half), or nullptr with
// ValueError when it is not an open handle of its kind.
template <class H>
H* handle_at(PyObject* address, const char* what) {
  auto* h = static_cast<H*>(PyLong_AsVoidPtr(address));
  if (h == nullptr || !shmbox::detail::capi::live(h)) {
    if (!PyErr_Occurred()) closed_error(what);
    return nullptr;
  }
  return h;
}

// True when a ProducerCore or OwnerCore may be called: bound to an open handle, not busy.
template <class Core>
bool usable(Core* self, const char* what) {
  if (self->h == nullptr || !shmbox::detail::capi::live(self->h)) {
    closed_error(what);
    return false;
  }
  if (self->busy) {
    refuse_busy(what);
    return false;
  }
  return true;
}

// _bind's address: an int, or None (nullptr). -1 with an exception set.
int address_arg(PyObject* a, void** out) {
  *out = a == Py_None ? nullptr : PyLong_AsVoidPtr(a);
  return *out == nullptr && PyErr_Occurred() ? -1 : 0;
}

// ---- Message ------------------------------------------------------------------

PyStructSequence_Field message_fields[] = {
    {"data", "the bytes, exactly as posted (receive_into: a memoryview of the caller's buffer)"},
    {"lane", "the lane it was posted into (0: the control lane)"},
    {"redelivered", "True when a previous owner read it and died before committing it"},
    {"position", "its lane position (the claim order across all producers); None for a message without one"},
    {"box_id", "the box's incarnation (Box.id): with lane and position, the message's id"},
    {"reply_to", "a request's reply address (opaque bytes; None: not a request): Owner.reply answers it"},
    {"answered", "True for a request delivered again that an owner which died had answered (Owner.reply sends nothing)"},
    {nullptr, nullptr},
};

PyStructSequence_Desc message_desc = {
    "shmbox.Message",
    "One received message: (data, lane, redelivered), and its id (msg.id).\n\n"
    "A tuple of three, so `data, lane, redelivered = msg` works; msg.id is a MessageId, whose str() is\n"
    "the library's form \"BOXID-LANE-POSITION\" (stable across a redelivery to the next owner).",
    message_fields,
    3,
};

// A new Message (nullptr with an exception set).
PyObject* make_message(PyObject* data, std::uint32_t lane, bool redelivered, std::uint64_t position, PyObject* box,
                       std::string_view reply_to = {}, bool answered = false) {
  if (data == nullptr) return nullptr;
  PyObject* m = PyStructSequence_New(g.message);
  if (m == nullptr) {
    Py_DECREF(data);
    return nullptr;
  }
  PyObject* l = PyLong_FromUnsignedLong(lane);
  PyObject* pos = position == sb::kNoPosition ? Py_NewRef(Py_None) : PyLong_FromUnsignedLongLong(position);
  PyStructSequence_SET_ITEM(m, 0, data);
  PyStructSequence_SET_ITEM(m, 1, l);
  PyStructSequence_SET_ITEM(m, 2, Py_NewRef(redelivered ? Py_True : Py_False));
  PyStructSequence_SET_ITEM(m, 3, pos);
  PyStructSequence_SET_ITEM(m, 4, Py_NewRef(box));
  PyObject* rt = reply_to.empty() ? Py_NewRef(Py_None)
                                  : PyBytes_FromStringAndSize(reply_to.data(), static_cast<Py_ssize_t>(reply_to.size()));
  PyStructSequence_SET_ITEM(m, 5, rt);
  PyStructSequence_SET_ITEM(m, 6, Py_NewRef(answered ? Py_True : Py_False));
  if (l == nullptr || pos == nullptr || rt == nullptr) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}

// ---- ProducerCore ------------------------------------------------------------------

struct ProducerCore {
  PyObject_HEAD
  shmbox_producer* h;
  double block_timeout;  // seconds; < 0: for ever (the box's block_timeout)
  int busy;
};

sb::Producer* producer_of(ProducerCore* self) { return usable(self, "Producer") ? self->h->p : nullptr; }

PyObject* Producer_bind(ProducerCore* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "_bind(address, block_timeout)");
    return nullptr;
  }
  if (self->busy) {
    refuse_busy("Producer");
    return nullptr;
  }
  void* p;
  if (address_arg(args[0], &p) < 0) return nullptr;
  double bt = -1;
  if (parse_timeout(args[1], &bt) < 0) return nullptr;
  self->h = static_cast<shmbox_producer*>(p);
  self->block_timeout = bt;
  Py_RETURN_NONE;
}

// post_options from (lane, priority); -1 with an exception set.
int post_options_of(PyObject* lane, PyObject* priority, sb::post_options& o) {
  if (lane != nullptr && lane != Py_None) {
    const unsigned long v = PyLong_AsUnsignedLong(lane);
    if (v == static_cast<unsigned long>(-1) && PyErr_Occurred()) return -1;
    if (v > UINT32_MAX) {
      PyErr_Format(PyExc_ValueError, "lane %R is not a lane of any box", lane);
      return -1;
    }
    o.lane = static_cast<std::uint32_t>(v);
  }
  if (priority != nullptr && priority != Py_None) {
    const long long v = PyLong_AsLongLong(priority);
    if (v == -1 && PyErr_Occurred()) return -1;
    o.priority = v;
  }
  return 0;
}

// The wait of a post: the box's block_timeout (BOX_DEFAULT), or the argument.
int post_wait(ProducerCore* self, PyObject* timeout, double* out) {
  if (timeout == nullptr || timeout == g.box_default) {
    *out = self->block_timeout;
    return 0;
  }
  return parse_timeout(timeout, out);
}

// Status -> PostStatus, or the package's exception for too_large and error.
PyObject* post_outcome(ProducerCore* self, sb::post_status st, Py_ssize_t size) {
  const int i = static_cast<int>(st);
  if (st != sb::post_status::too_large && st != sb::post_status::error) {
    return Py_NewRef(PyTuple_GET_ITEM(g.statuses, i));
  }
  if (st == sb::post_status::error) shmbox::detail::capi::record(self->h->p->last_error());
  // Python raises it, with the library's words (shmbox/__init__.py: Producer._post_failed).
  PyObject* r = PyObject_CallMethod(reinterpret_cast<PyObject*>(self), "_post_failed", "in", i, size);
  Py_XDECREF(r);
  if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "shmbox: _post_failed returned");
  return nullptr;
}

PyObject* Producer_post(ProducerCore* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"data", "lane", "timeout", "priority"};
  PyObject* a[4];
  if (parse_args("post", names, 4, 1, args, nargs, kwnames, a) < 0) return nullptr;
  sb::Producer* p = producer_of(self);
  if (p == nullptr) return nullptr;
  Data d;
  if (get_data(a[0], d) < 0) return nullptr;
  sb::post_options o;
  if (post_options_of(a[1], a[3], o) < 0) return nullptr;
  double wait = 0;
  if (post_wait(self, a[2], &wait) < 0) return nullptr;  // NaN, negative: nothing is posted
  // The first try never waits, and a "timeout" of it is not counted.
  o.timeout = std::chrono::nanoseconds(0);
  o.quiet_timeout = wait != 0;
  sb::post_status st = p->post(d.p, static_cast<std::size_t>(d.n), o);
  if (st == sb::post_status::timeout && wait != 0) {
    // No room now: wait for it in slices, each but the last one quiet.
    Busy busy(self->busy);
    const int r = sliced(wait, static_cast<int>(sb::post_status::timeout),
                         [&](std::chrono::nanoseconds ns, bool last) {
                           o.timeout = ns;
                           o.quiet_timeout = !last;
                           return static_cast<int>(p->post(d.p, static_cast<std::size_t>(d.n), o));
                         });
    if (r < 0) return nullptr;
    st = static_cast<sb::post_status>(r);
  }
  return post_outcome(self, st, d.n);
}

PyObject* Producer_post_batch(ProducerCore* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"messages", "lane", "timeout", "priority"};
  PyObject* a[4];
  if (parse_args("post_batch", names, 4, 1, args, nargs, kwnames, a) < 0) return nullptr;
  sb::Producer* p = producer_of(self);
  if (p == nullptr) return nullptr;
  PyObject* seq = PySequence_Fast(a[0], "post_batch() takes an iterable of messages");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  std::vector<Data> data;
  std::vector<std::string_view> views;
  try {
    data.resize(static_cast<std::size_t>(n));
    views.resize(static_cast<std::size_t>(n));
  } catch (const std::bad_alloc&) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  PyObject** items = PySequence_Fast_ITEMS(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (get_data(items[i], data[i]) < 0) {
      Py_DECREF(seq);
      return nullptr;
    }
    views[i] = std::string_view(data[i].p, static_cast<std::size_t>(data[i].n));
  }
  sb::post_options o;
  double wait = 0;
  if (post_options_of(a[1], a[3], o) < 0 || post_wait(self, a[2], &wait) < 0) {
    Py_DECREF(seq);
    return nullptr;
  }
  std::size_t done = 0;
  sb::post_status last = sb::post_status::stored;
  if (n > 0) {
    // The first try does not wait; the rest waits for room in slices.
    o.timeout = std::chrono::nanoseconds(0);
    o.quiet_timeout = wait != 0;
    done = p->post_batch(views, o, &last);
    if (last == sb::post_status::timeout && wait != 0 && done < views.size()) {
      Busy busy(self->busy);
      const int r = sliced(wait, static_cast<int>(sb::post_status::timeout),
                           [&](std::chrono::nanoseconds ns, bool final) {
                             o.timeout = ns;
                             o.quiet_timeout = !final;
                             done += p->post_batch(std::span(views).subspan(done), o, &last);
                             return done == views.size() ? static_cast<int>(sb::post_status::stored)
                                                         : static_cast<int>(last);
                           });
      if (r < 0) {
        Py_DECREF(seq);
        return nullptr;
      }
    }
  }
  data.clear();  // releases the buffers (with the GIL held)
  Py_DECREF(seq);
  if (last == sb::post_status::error) {
    shmbox::detail::capi::record(self->h->p->last_error());
    PyObject* r = PyObject_CallMethod(reinterpret_cast<PyObject*>(self), "_post_failed", "in",
                                      static_cast<int>(last), static_cast<Py_ssize_t>(0));
    Py_XDECREF(r);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "shmbox: _post_failed returned");
    return nullptr;
  }
  return PyObject_CallFunction(g.batch_result, "nO", static_cast<Py_ssize_t>(done),
                               PyTuple_GET_ITEM(g.statuses, static_cast<int>(last)));
}

PyObject* Producer_busy(ProducerCore* self, void*) { return PyBool_FromLong(self->busy); }

PyMethodDef producer_methods[] = {
    {"_bind", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Producer_bind)), METH_FASTCALL,
     "_bind(address, block_timeout): the C handle (an int address; None: closed) and the box's block timeout."},
    {"post", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Producer_post)),
     METH_FASTCALL | METH_KEYWORDS,
     "post(data, lane=None, timeout=BOX_DEFAULT, priority=None) -> PostStatus\n\n"
     "Posts one message: bytes, str (posted UTF-8 encoded) or any contiguous buffer (bytearray,\n"
     "memoryview, a numpy array: read in place, copied once, into the slot).\n"
     "lane: None: the box's default lane; 0: the control lane.\n"
     "timeout: seconds a post into a full 'block' box waits (None: for ever; default: the box's\n"
     "block_timeout); the wait releases the GIL and Ctrl-C interrupts it.\n"
     "priority: this message's priority (priority boxes: lowest first).\n"
     "Returns 'stored', 'stored-evicted' (drop-oldest, lifo), 'dropped' (drop-newest), 'full'\n"
     "(reject) or 'timeout' (block): a full box is an outcome, not an error.\n"
     "Raises TooLarge (larger than the slot; counted as too_large) and Error (the box cannot be used)."},
    {"post_batch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Producer_post_batch)),
     METH_FASTCALL | METH_KEYWORDS,
     "post_batch(messages, lane=None, timeout=BOX_DEFAULT, priority=None) -> BatchResult\n\n"
     "Posts messages in order until one is not stored, claiming each run of free slots at once.\n"
     "Returns BatchResult(stored, status): the first `stored` messages are in the box; `status`\n"
     "is the outcome of the first one that was not (it may be 'too-large': a batch reports\n"
     "outcomes and does not raise for them), or of the last one when all were stored."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef producer_getset[] = {
    {"_busy", reinterpret_cast<getter>(Producer_busy), nullptr, "True while a thread waits in a call of this handle",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// Filled in by PyInit__core (designated initializers of a C struct this long are no clearer).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
PyTypeObject ProducerCoreType = {PyVarObject_HEAD_INIT(nullptr, 0)};
#pragma GCC diagnostic pop

// ---- OwnerCore -----------------------------------------------------------------------

// What an owner reuses from call to call, and what it has taken out of the
// box but not yet handed to Python (after a MemoryError).
struct OwnerScratch {
  sb::message msg;        // one message
  bool msg_pending = false;
  sb::batch batch;        // a batch
  std::size_t batch_next = 0;  // batch[batch_next..] not yet returned
};

struct OwnerCore {
  PyObject_HEAD
  shmbox_owner* h;
  PyObject* box_id;  // int: Box.id of the owned box
  OwnerScratch* s;
  int busy;
};

sb::Owner* owner_of(OwnerCore* self) {
  if (!usable(self, "Owner")) return nullptr;
  self->h->last = SHMBOX_OK;  // the C API's own error of an earlier call (shmbox_owner_last_error)
  return self->h->o;
}

PyObject* Owner_bind(OwnerCore* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "_bind(address)");
    return nullptr;
  }
  if (self->busy) {
    refuse_busy("Owner");
    return nullptr;
  }
  void* p;
  if (address_arg(args[0], &p) < 0) return nullptr;
  if (p != nullptr && self->s == nullptr) {
    self->s = new (std::nothrow) OwnerScratch;
    if (self->s == nullptr) return PyErr_NoMemory();
  }
  auto* h = static_cast<shmbox_owner*>(p);
  PyObject* id = PyLong_FromUnsignedLongLong(h == nullptr ? 0 : h->o->id_of(0, 0).box);
  if (id == nullptr) return nullptr;
  Py_XSETREF(self->box_id, id);
  self->h = h;
  Py_RETURN_NONE;
}

// A not_owner or error status: Python raises it (Owner._receive_failed).
PyObject* receive_failed(OwnerCore* self, sb::recv_status st) {
  if (st == sb::recv_status::error) shmbox::detail::capi::record(self->h->o->last_error());
  PyObject* r = PyObject_CallMethod(reinterpret_cast<PyObject*>(self), "_receive_failed", "i", static_cast<int>(st));
  Py_XDECREF(r);
  if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "shmbox: _receive_failed returned");
  return nullptr;
}

PyObject* batch_message(OwnerCore* self, std::size_t i) {
  const sb::batch& b = self->s->batch;
  const std::string_view v = b[i];
  return make_message(PyBytes_FromStringAndSize(v.data(), static_cast<Py_ssize_t>(v.size())), b.lane(i),
                      b.redelivered(i), b.position(i), self->box_id, b.reply_to(i), b.answered(i));
}

// The pending message, if any (after a MemoryError), else nullptr without an exception.
PyObject* take_pending(OwnerCore* self) {
  OwnerScratch& s = *self->s;
  if (s.batch_next < s.batch.size()) {
    PyObject* m = batch_message(self, s.batch_next);
    if (m != nullptr && ++s.batch_next == s.batch.size()) {
      s.batch.clear();
      s.batch_next = 0;
    }
    return m;
  }
  if (s.msg_pending) {
    PyObject* m = make_message(PyBytes_FromStringAndSize(s.msg.data.data(), static_cast<Py_ssize_t>(s.msg.data.size())),
                               s.msg.lane, s.msg.redelivered, s.msg.position, self->box_id, s.msg.reply_to,
                               s.msg.answered);
    if (m != nullptr) s.msg_pending = false;
    return m;
  }
  return nullptr;
}

bool has_pending(const OwnerCore* self) {
  return self->s->msg_pending || self->s->batch_next < self->s->batch.size();
}

// receive(timeout) and try_receive(): one message, or None.
PyObject* receive_one(OwnerCore* self, double timeout) {
  sb::Owner* o = owner_of(self);
  if (o == nullptr) return nullptr;
  if (has_pending(self)) return take_pending(self);
  OwnerScratch& s = *self->s;
  sb::recv_status st = o->receive(s.msg, {.max = 1, .timeout = std::chrono::nanoseconds(0)});
  if (st == sb::recv_status::timeout && timeout != 0) {
    Busy busy(self->busy);
    const int r = sliced(timeout, static_cast<int>(sb::recv_status::timeout), [&](std::chrono::nanoseconds ns, bool) {
      return static_cast<int>(o->receive(s.msg, {.max = 1, .timeout = ns}));
    });
    if (r < 0) return nullptr;
    st = static_cast<sb::recv_status>(r);
  }
  if (st == sb::recv_status::ok) {
    s.msg_pending = true;
    return take_pending(self);
  }
  if (st == sb::recv_status::timeout || st == sb::recv_status::empty) Py_RETURN_NONE;
  return receive_failed(self, st);
}

PyObject* Owner_receive(OwnerCore* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"timeout"};
  PyObject* a[1];
  if (parse_args("receive", names, 1, 0, args, nargs, kwnames, a) < 0) return nullptr;
  double timeout = -1;
  if (a[0] != nullptr && parse_timeout(a[0], &timeout) < 0) return nullptr;
  return receive_one(self, timeout);
}

PyObject* Owner_try_receive(OwnerCore* self, PyObject*) { return receive_one(self, 0); }

// receive_batch and read (read: not committed until Owner.commit()).
PyObject* batch_call(OwnerCore* self, const char* fn, bool read, PyObject* const* args, Py_ssize_t nargs,
                     PyObject* kwnames) {
  static const char* const names[] = {"max", "timeout"};
  PyObject* a[2];
  if (parse_args(fn, names, 2, 0, args, nargs, kwnames, a) < 0) return nullptr;
  Py_ssize_t max = 64;
  if (a[0] != nullptr) {
    max = PyLong_AsSsize_t(a[0]);
    if (max == -1 && PyErr_Occurred()) return nullptr;
    if (max < 1) {
      PyErr_Format(PyExc_ValueError, "%s: max must be >= 1, not %zd", fn, max);
      return nullptr;
    }
  }
  double timeout = -1;
  if (a[1] != nullptr && parse_timeout(a[1], &timeout) < 0) return nullptr;
  sb::Owner* o = owner_of(self);
  if (o == nullptr) return nullptr;
  OwnerScratch& s = *self->s;
  if (!has_pending(self)) {
    s.batch.clear();
    s.batch_next = 0;
    const sb::receive_options first{.max = static_cast<std::size_t>(max), .timeout = std::chrono::nanoseconds(0)};
    auto take = [&](const sb::receive_options& ro) { return read ? o->read(s.batch, ro) : o->receive_batch(s.batch, ro); };
    sb::recv_status st = take(first);
    if (st == sb::recv_status::timeout && timeout != 0) {
      Busy busy(self->busy);
      const int r = sliced(timeout, static_cast<int>(sb::recv_status::timeout), [&](std::chrono::nanoseconds ns, bool) {
        return static_cast<int>(take({.max = static_cast<std::size_t>(max), .timeout = ns}));
      });
      if (r < 0) return nullptr;
      st = static_cast<sb::recv_status>(r);
    }
    if (st == sb::recv_status::timeout || st == sb::recv_status::empty) return PyList_New(0);
    if (st != sb::recv_status::ok) return receive_failed(self, st);
  } else if (s.msg_pending) {
    PyObject* m = take_pending(self);  // the single pending message first, alone
    if (m == nullptr) return nullptr;
    PyObject* l = PyList_New(1);
    if (l == nullptr) {
      Py_DECREF(m);  // lost only if the list cannot be made either
      return nullptr;
    }
    PyList_SET_ITEM(l, 0, m);
    return l;
  }
  const std::size_t from = s.batch_next;
  const std::size_t count = std::min(s.batch.size() - from, static_cast<std::size_t>(max));
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(count));
  if (list == nullptr) return nullptr;  // the batch stays pending
  for (std::size_t i = 0; i < count; ++i) {
    PyObject* m = batch_message(self, from + i);
    if (m == nullptr) {
      Py_DECREF(list);  // the batch stays pending from `from`
      return nullptr;
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), m);
  }
  s.batch_next = from + count;
  if (s.batch_next == s.batch.size()) {
    s.batch.clear();
    s.batch_next = 0;
  }
  return list;
}

PyObject* Owner_receive_batch(OwnerCore* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return batch_call(self, "receive_batch", false, args, nargs, kwnames);
}

PyObject* Owner_read(OwnerCore* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return batch_call(self, "read", true, args, nargs, kwnames);
}

PyObject* Owner_receive_into(OwnerCore* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"buffer", "timeout"};
  PyObject* a[2];
  if (parse_args("receive_into", names, 2, 1, args, nargs, kwnames, a) < 0) return nullptr;
  double timeout = -1;
  if (a[1] != nullptr && parse_timeout(a[1], &timeout) < 0) return nullptr;
  sb::Owner* o = owner_of(self);
  if (o == nullptr) return nullptr;
  if (has_pending(self)) {
    PyErr_SetString(PyExc_RuntimeError,
                    "receive_into: a message received earlier is still pending after a MemoryError: receive() it first");
    return nullptr;
  }
  Py_buffer view;
  if (PyObject_GetBuffer(a[0], &view, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS) < 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "receive_into needs a writable contiguous buffer (bytearray, memoryview, numpy array), not %s",
                 Py_TYPE(a[0])->tp_name);
    return nullptr;
  }
  const std::size_t slot = shmbox_owner_max_message_size(self->h);
  if (static_cast<std::size_t>(view.len) < slot) {
    PyBuffer_Release(&view);
    PyErr_Format(PyExc_ValueError,
                 "receive_into: a buffer of %zd bytes is smaller than the box's slot size (%zu bytes), so a message "
                 "might not fit; nothing was received",
                 view.len, slot);
    return nullptr;
  }
  std::size_t size = 0;
  sb::message_view got;
  std::string got_reply_to;  // the view's reply_to is in the box: valid only inside the call
  auto copy = [&](const sb::message_view& v) {
    std::memcpy(view.buf, v.data.data(), v.data.size());
    size = v.data.size();
    got = v;
    got_reply_to.assign(v.reply_to);
  };
  sb::recv_status st = o->receive_in_place(copy, {.max = 1, .timeout = std::chrono::nanoseconds(0)});
  if (st == sb::recv_status::timeout && timeout != 0) {
    Busy busy(self->busy);
    const int r = sliced(timeout, static_cast<int>(sb::recv_status::timeout), [&](std::chrono::nanoseconds ns, bool) {
      return static_cast<int>(o->receive_in_place(copy, {.max = 1, .timeout = ns}));
    });
    if (r < 0) {
      PyBuffer_Release(&view);
      return nullptr;
    }
    st = static_cast<sb::recv_status>(r);
  }
  if (st != sb::recv_status::ok) {
    PyBuffer_Release(&view);
    if (st == sb::recv_status::timeout || st == sb::recv_status::empty) Py_RETURN_NONE;
    return receive_failed(self, st);
  }
  // data: a memoryview of the first `size` bytes of the caller's buffer.
  PyObject* whole = PyMemoryView_FromObject(a[0]);
  PyBuffer_Release(&view);
  PyObject* data = nullptr;
  if (whole != nullptr) {
    PyObject* end = PyLong_FromSize_t(size);
    PyObject* slice = end != nullptr ? PySlice_New(nullptr, end, nullptr) : nullptr;
    Py_XDECREF(end);
    if (slice != nullptr) {
      data = PyObject_GetItem(whole, slice);
      Py_DECREF(slice);
    }
    Py_DECREF(whole);
  }
  return make_message(data, got.lane, got.redelivered, got.position, self->box_id, got_reply_to, got.answered);
}

// receive_in_place(fn, max=64, timeout=None): fn(view, lane, redelivered, position) for each
// message, `view` a read-only memoryview of the message in the box, released when fn returns
// (the message is committed then, also when fn raises: fn has seen it).
PyObject* Owner_receive_in_place(OwnerCore* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"fn", "max", "timeout"};
  PyObject* a[3];
  if (parse_args("receive_in_place", names, 3, 1, args, nargs, kwnames, a) < 0) return nullptr;
  if (!PyCallable_Check(a[0])) {
    PyErr_SetString(PyExc_TypeError, "receive_in_place(fn, ...): fn must be callable: fn(msg) with msg.data a memoryview");
    return nullptr;
  }
  Py_ssize_t max = 64;
  if (a[1] != nullptr && a[1] != Py_None) {
    max = PyLong_AsSsize_t(a[1]);
    if (max == -1 && PyErr_Occurred()) return nullptr;
    if (max < 1) {
      PyErr_Format(PyExc_ValueError, "receive_in_place: max must be >= 1, not %zd", max);
      return nullptr;
    }
  }
  double timeout = -1;
  if (a[2] != nullptr && parse_timeout(a[2], &timeout) < 0) return nullptr;
  sb::Owner* o = owner_of(self);
  if (o == nullptr) return nullptr;
  if (has_pending(self)) {
    PyErr_SetString(PyExc_RuntimeError,
                    "receive_in_place: a message received earlier is still pending after a MemoryError: receive() it first");
    return nullptr;
  }
  bool failed = false;  // fn raised (or a view could not be made): no more calls
  PyThreadState* released = nullptr;  // set while waiting without the GIL
  Py_ssize_t count = 0;
  auto call = [&](const sb::message_view& v) {
    if (released != nullptr) PyEval_RestoreThread(released);
    ++count;
    if (!failed) {
      PyObject* view = PyMemoryView_FromMemory(const_cast<char*>(v.data.data()), static_cast<Py_ssize_t>(v.data.size()),
                                               PyBUF_READ);
      PyObject* msg = make_message(view, v.lane, v.redelivered, v.position, self->box_id, v.reply_to, v.answered);
      PyObject* r = msg != nullptr ? PyObject_CallOneArg(a[0], msg) : nullptr;
      if (r == nullptr) failed = true;
      Py_XDECREF(r);
      if (msg != nullptr) {
        // The view dies with the message: one fn kept refers to released memory, refused from now on.
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);  // fn's exception, if any, survives the call below
        PyObject* rel = PyObject_CallMethod(PyStructSequence_GET_ITEM(msg, 0), "release", nullptr);
        if (rel == nullptr && et == nullptr) {
          // fn kept an export of the view (a ctypes from_buffer, an mmap slice ...): say so.
          failed = true;
          PyErr_Clear();
          PyErr_SetString(PyExc_BufferError, "receive_in_place: fn kept a buffer of msg.data: copy it instead");
        } else if (rel == nullptr) {
          PyErr_Clear();
          PyErr_Restore(et, ev, tb);
        } else {
          PyErr_Restore(et, ev, tb);
        }
        Py_XDECREF(rel);
        Py_DECREF(msg);
      }
    }
    if (released != nullptr) released = PyEval_SaveThread();
  };
  // One message per call of the library, so that a raising fn stops before the next message
  // is taken (a batch would commit the rest unseen).
  auto take_one = [&](std::chrono::nanoseconds t) { return o->receive_in_place(call, {.max = 1, .timeout = t}); };
  sb::recv_status st = take_one(std::chrono::nanoseconds(0));
  if (st == sb::recv_status::timeout && timeout != 0 && !failed) {
    Busy busy(self->busy);
    const Slices slices(timeout);  // as sliced(), with the GIL taken back inside fn's calls
    for (;;) {
      bool last;
      const auto ns = slices.next(last);
      released = PyEval_SaveThread();
      st = take_one(ns);
      PyEval_RestoreThread(released);
      released = nullptr;
      if (st != sb::recv_status::timeout || last) break;
      if (PyErr_CheckSignals() < 0) return nullptr;
    }
  }
  while (st == sb::recv_status::ok && !failed && count < max) {
    const sb::recv_status more = take_one(std::chrono::nanoseconds(0));
    if (more != sb::recv_status::ok) break;  // empty now; a loss of the box shows in the next call
  }
  if (failed) return nullptr;
  if (st == sb::recv_status::ok || st == sb::recv_status::timeout || st == sb::recv_status::empty) {
    return PyLong_FromSsize_t(count);
  }
  return receive_failed(self, st);
}

// stash(data, lane=None, priority=None): parks a copy (a Message: its data and lane).
PyObject* Owner_stash(OwnerCore* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"message", "lane", "priority"};
  PyObject* a[3];
  if (parse_args("stash", names, 3, 1, args, nargs, kwnames, a) < 0) return nullptr;
  sb::Owner* o = owner_of(self);
  if (o == nullptr) return nullptr;
  PyObject* data = a[0];
  std::uint32_t lane = 0;
  bool lane_given = false;
  if (Py_TYPE(data) == g.message) {
    lane = static_cast<std::uint32_t>(PyLong_AsUnsignedLong(PyStructSequence_GET_ITEM(data, 1)));
    lane_given = true;
    data = PyStructSequence_GET_ITEM(data, 0);
  }
  if (a[1] != nullptr && a[1] != Py_None) {
    const unsigned long v = PyLong_AsUnsignedLong(a[1]);
    if (v == static_cast<unsigned long>(-1) && PyErr_Occurred()) return nullptr;
    lane = static_cast<std::uint32_t>(std::min<unsigned long>(v, UINT32_MAX));
    lane_given = true;
  }
  if (!lane_given) {
    PyErr_SetString(PyExc_TypeError, "stash(data, lane=...): give the lane, or stash a received Message");
    return nullptr;
  }
  std::int64_t priority = 0;
  if (a[2] != nullptr && a[2] != Py_None) {
    priority = PyLong_AsLongLong(a[2]);
    if (priority == -1 && PyErr_Occurred()) return nullptr;
  }
  Data d;
  if (get_data(data, d) < 0) return nullptr;
  std::string whole;  // a request stays one: its reply address is parked after its bytes
  std::string_view parked(d.p, static_cast<std::size_t>(d.n));
  if (Py_TYPE(a[0]) == g.message && PyBytes_Check(PyStructSequence_GET_ITEM(a[0], 5))) {
    PyObject* rt = PyStructSequence_GET_ITEM(a[0], 5);
    whole.assign(parked).append(PyBytes_AS_STRING(rt), static_cast<std::size_t>(PyBytes_GET_SIZE(rt)));
    parked = whole;
  }
  const sb::recv_status st = o->stash(parked, lane, priority);
  if (st == sb::recv_status::ok) Py_RETURN_NONE;
  return receive_failed(self, st);
}

// reply(message, data) -> int: Owner::reply to a received Message (a request); the
// reply_status as a number (Owner.reply in __init__.py names it or raises).
PyObject* Owner_reply(OwnerCore* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* const names[] = {"message", "data"};
  PyObject* a[2];
  if (parse_args("reply", names, 2, 2, args, nargs, kwnames, a) < 0) return nullptr;
  sb::Owner* o = owner_of(self);
  if (o == nullptr) return nullptr;
  if (Py_TYPE(a[0]) != g.message) {
    PyErr_SetString(PyExc_TypeError, "reply(message, data): message must be a received shmbox.Message");
    return nullptr;
  }
  PyObject* reply_to = PyStructSequence_GET_ITEM(a[0], 5);
  if (reply_to == Py_None) return PyLong_FromLong(static_cast<long>(sb::reply_status::not_a_request));
  if (!PyBytes_Check(reply_to)) {
    PyErr_SetString(PyExc_TypeError, "reply(message, data): message.reply_to must be bytes");
    return nullptr;
  }
  Data body, d;
  if (get_data(PyStructSequence_GET_ITEM(a[0], 0), body) < 0 || get_data(a[1], d) < 0) return nullptr;
  sb::message_view v;
  v.data = std::string_view(body.p, static_cast<std::size_t>(body.n));
  v.lane = static_cast<std::uint32_t>(PyLong_AsUnsignedLong(PyStructSequence_GET_ITEM(a[0], 1)));
  v.redelivered = PyStructSequence_GET_ITEM(a[0], 2) == Py_True;
  PyObject* pos = PyStructSequence_GET_ITEM(a[0], 3);
  v.position = pos == Py_None ? sb::kNoPosition : PyLong_AsUnsignedLongLong(pos);
  if (PyErr_Occurred()) return nullptr;
  v.reply_to = std::string_view(PyBytes_AS_STRING(reply_to), static_cast<std::size_t>(PyBytes_GET_SIZE(reply_to)));
  v.answered = PyStructSequence_GET_ITEM(a[0], 6) == Py_True;
  const sb::reply_status st = o->reply(v, std::string_view(d.p, static_cast<std::size_t>(d.n)));
  if (st == sb::reply_status::error || st == sb::reply_status::too_large || st == sb::reply_status::not_owner)
    shmbox::detail::capi::record(o->last_error());
  return PyLong_FromLong(static_cast<long>(st));
}

// _current(count): the messages of the C handle's current batch (what the C API's
// shmbox_batch_message reads: a delivery of wait/deliver), with their ids.
PyObject* Owner_current(OwnerCore* self, PyObject* arg) {
  if (self->h == nullptr || !shmbox::detail::capi::live(self->h)) return closed_error("Owner");
  const Py_ssize_t want = PyLong_AsSsize_t(arg);
  if (want == -1 && PyErr_Occurred()) return nullptr;
  const sb::batch& b = *self->h->current;
  const std::size_t n = std::min(b.size(), static_cast<std::size_t>(std::max<Py_ssize_t>(want, 0)));
  PyObject* l = PyList_New(static_cast<Py_ssize_t>(n));
  if (l == nullptr) return nullptr;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string_view v = b[i];
    PyObject* m = make_message(PyBytes_FromStringAndSize(v.data(), static_cast<Py_ssize_t>(v.size())), b.lane(i),
                               b.redelivered(i), b.position(i), self->box_id, b.reply_to(i), b.answered(i));
    if (m == nullptr) {
      Py_DECREF(l);
      return nullptr;
    }
    PyList_SET_ITEM(l, static_cast<Py_ssize_t>(i), m);
  }
  return l;
}

PyObject* Owner_busy(OwnerCore* self, void*) { return PyBool_FromLong(self->busy); }

PyMethodDef owner_methods[] = {
    {"_bind", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Owner_bind)), METH_FASTCALL,
     "_bind(address): the C handle (an int address; None: closed)."},
    {"receive", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Owner_receive)),
     METH_FASTCALL | METH_KEYWORDS,
     "receive(timeout=None) -> Message | None\n\n"
     "Waits up to `timeout` seconds (None: for ever; 0: not at all) for one message and commits it.\n"
     "The wait releases the GIL and Ctrl-C interrupts it. Returns None when nothing arrived in time.\n"
     "Raises NotOwner once this handle lost the box (given away, a lease expired)."},
    {"try_receive", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Owner_try_receive)), METH_NOARGS,
     "try_receive() -> Message | None: one message if one is there now (never waits)."},
    {"receive_batch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Owner_receive_batch)),
     METH_FASTCALL | METH_KEYWORDS,
     "receive_batch(max=64, timeout=None) -> list[Message]\n\n"
     "Up to `max` messages, waiting up to `timeout` seconds for the first (then taking what is\n"
     "there), in one call; an empty list when nothing arrived in time."},
    {"read", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Owner_read)), METH_FASTCALL | METH_KEYWORDS,
     "read(max=64, timeout=None) -> list[Message]\n\n"
     "Two-phase receive: up to `max` messages, not committed. If this process dies before\n"
     "commit(), the next owner receives them again, flagged redelivered."},
    {"_reply", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Owner_reply)), METH_FASTCALL | METH_KEYWORDS,
     "_reply(message, data) -> int: Owner::reply (Owner.reply names the status)."},
    {"_current", reinterpret_cast<PyCFunction>(Owner_current), METH_O,
     "_current(count): the messages of the handle's current batch (a delivery), with ids."},
    {"receive_in_place", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Owner_receive_in_place)),
     METH_FASTCALL | METH_KEYWORDS,
     "receive_in_place(fn, max=64, timeout=None) -> int\n\n"
     "Zero-copy receive: calls fn(msg) for each of up to `max` messages (waiting up to `timeout`\n"
     "seconds for the first), msg.data a read-only memoryview of the message in the box's shared\n"
     "memory. Each message is committed when fn returns (or raises: the exception propagates, no\n"
     "further fn calls), and its view is released then: using it later raises ValueError, and fn\n"
     "must not keep buffers made from it (BufferError). Returns how many messages were taken."},
    {"stash", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Owner_stash)), METH_FASTCALL | METH_KEYWORDS,
     "stash(message, lane=None, priority=None)\n\n"
     "Parks a copy of a message (a received Message, or data with its lane) in the box's stash\n"
     "(boxes created with stash=N), to be received again after unstash_all(). Raises StashFull,\n"
     "TooLarge, InvalidArgument (no stash in this box)."},
    {"receive_into", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Owner_receive_into)),
     METH_FASTCALL | METH_KEYWORDS,
     "receive_into(buffer, timeout=None) -> Message | None\n\n"
     "Copies one message straight from the box into `buffer` (bytearray, memoryview, a numpy\n"
     "array: writable, contiguous, at least the box's slot size): no copy besides that one.\n"
     "msg.data is a memoryview of the message's bytes in `buffer`."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef owner_getset[] = {
    {"_busy", reinterpret_cast<getter>(Owner_busy), nullptr, "True while a thread waits in a call of this handle",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

void Owner_dealloc(OwnerCore* self) {
  Py_CLEAR(self->box_id);
  delete self->s;
  self->s = nullptr;
  Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

// Filled in by PyInit__core (designated initializers of a C struct this long are no clearer).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
PyTypeObject OwnerCoreType = {PyVarObject_HEAD_INIT(nullptr, 0)};
#pragma GCC diagnostic pop

// ---- Pools (the parts the C API does not have) -----------------------------------------

// Raises the package's exception for `ec` (recorded as this thread's last error, so that the
// exception carries the library's sentence). Returns nullptr.
PyObject* raise_ec(std::error_code ec) {
  const int code = shmbox::detail::capi::record(ec);
  PyObject* e = PyObject_CallFunction(g.error_of, "i", code);
  if (e != nullptr) {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e)), e);
    Py_DECREF(e);
  }
  return nullptr;
}

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(seconds * 1000.0)));
}

// pool_create(name, command, init_count, max_count, cull_after, queue_max, max_clients, group,
// dead_letters, start_timeout, stop_grace, health_interval, health_timeout, mode, capacity,
// slot_size, overflow, max_producers, block_timeout): shmbox.Pool.create checks and fills them.
PyObject* pool_create(PyObject*, PyObject* args) {
  const char *name, *command, *group, *dead;
  unsigned int init_count, max_count, queue_max, max_clients, mode, capacity, slot_size, max_producers;
  int overflow;
  double cull_after, start_timeout, stop_grace, health_interval, health_timeout, block_timeout, max_lifetime, jitter;
  long long auto_grow;  // < 0: none
  unsigned int table_size;
  const char* init_command;
  if (!PyArg_ParseTuple(args, "ssIIdIIssddddIIIiIdddLIs", &name, &command, &init_count, &max_count, &cull_after, &queue_max,
                        &max_clients, &group, &dead, &start_timeout, &stop_grace, &health_interval, &health_timeout,
                        &mode, &capacity, &slot_size, &overflow, &max_producers, &block_timeout, &max_lifetime, &jitter,
                        &auto_grow, &table_size, &init_command)) {
    return nullptr;
  }
  if (auto_grow > static_cast<long long>(UINT32_MAX)) {
    PyErr_Format(PyExc_ValueError, "auto_grow_threshold %lld is out of range", auto_grow);
    return nullptr;
  }
  if (overflow < 0 || overflow > static_cast<int>(sb::policy::block)) {
    PyErr_Format(PyExc_ValueError, "overflow %d is not a policy", overflow);
    return nullptr;
  }
  sb::pool_options o;
  o.command = command;
  o.init_count = init_count;
  o.max_count = max_count;
  o.cull_after = ms(cull_after);
  o.queue_max = queue_max;
  o.max_clients = max_clients;
  o.group = group;
  o.dead_letters = dead;
  o.start_timeout = ms(start_timeout);
  o.stop_grace = ms(stop_grace);
  o.health_interval = ms(health_interval);
  o.health_timeout = ms(health_timeout);
  o.mode = mode;
  o.member.capacity = capacity;
  o.member.slot_size = slot_size;
  o.member.overflow = static_cast<sb::policy>(overflow);
  o.member.max_producers = max_producers;
  o.member.block_timeout = ms(block_timeout);
  o.max_lifetime = ms(max_lifetime);
  o.max_lifetime_jitter = ms(jitter);
  if (auto_grow >= 0) o.auto_grow_threshold = static_cast<std::uint32_t>(auto_grow);
  o.table_size = table_size;
  o.init_command = init_command;
  sb::result<void> r;
  Py_BEGIN_ALLOW_THREADS
  r = sb::Pool::create(name, o);
  Py_END_ALLOW_THREADS
  if (!r) return raise_ec(r.error());
  Py_RETURN_NONE;
}

// pool_remove(name, immediate, timeout_seconds)
PyObject* pool_remove(PyObject*, PyObject* args) {
  const char* name;
  int immediate;
  double timeout;
  if (!PyArg_ParseTuple(args, "spd", &name, &immediate, &timeout)) return nullptr;
  sb::result<void> r;
  Py_BEGIN_ALLOW_THREADS
  r = sb::Pool::remove(name, immediate ? sb::removal::immediate : sb::removal::graceful,
                       std::chrono::nanoseconds(static_cast<std::int64_t>(timeout * 1e9)));
  Py_END_ALLOW_THREADS
  if (!r) return raise_ec(r.error());
  Py_RETURN_NONE;
}

// A Python list of the names (str, file system encoding).
PyObject* names_list(const std::vector<std::string>& names) {
  PyObject* l = PyList_New(0);
  if (l == nullptr) return nullptr;
  for (const auto& n : names) {
    PyObject* s = PyUnicode_DecodeFSDefaultAndSize(n.data(), static_cast<Py_ssize_t>(n.size()));
    if (s == nullptr || PyList_Append(l, s) < 0) {
      Py_XDECREF(s);
      Py_DECREF(l);
      return nullptr;
    }
    Py_DECREF(s);
  }
  return l;
}

// pool_list() -> list of names
PyObject* pool_list(PyObject*, PyObject*) {
  auto r = sb::Pool::list();
  if (!r) return raise_ec(r.error());
  return names_list(*r);
}

// pool_info(name) -> a dict of shmbox::inspect_pool's snapshot (shmbox.Pool.info documents the keys).
namespace pool_dict {

// Each setter steals `v`; false (with the Python error set) when v is null or the dict refuses it.
bool put(PyObject* d, const char* key, PyObject* v) {
  if (v == nullptr) return false;
  const int rc = PyDict_SetItemString(d, key, v);
  Py_DECREF(v);
  return rc == 0;
}
PyObject* str(std::string_view v) { return PyUnicode_DecodeUTF8(v.data(), static_cast<Py_ssize_t>(v.size()), "replace"); }
PyObject* str_or_none(const std::string& v) {
  if (!v.empty()) return str(v);
  Py_RETURN_NONE;
}
PyObject* u64(std::uint64_t v) { return PyLong_FromUnsignedLongLong(v); }
PyObject* secs(std::chrono::milliseconds v) { return PyFloat_FromDouble(static_cast<double>(v.count()) / 1000.0); }
PyObject* flag(bool v) { return PyBool_FromLong(v ? 1 : 0); }

PyObject* member(const sb::member_info& m) {
  PyObject* d = PyDict_New();
  if (d == nullptr) return nullptr;
  const bool ok = put(d, "index", u64(m.index)) && put(d, "state", str(sb::to_string(m.state))) && put(d, "box", str(m.box)) &&
                  put(d, "generation", u64(m.generation)) && put(d, "worker_pid", u64(m.worker_pid)) &&
                  put(d, "worker_pid_ns", u64(m.worker_pid_ns)) && put(d, "worker_alive", flag(m.worker_alive)) &&
                  put(d, "taker_pid", u64(m.taker_pid)) && put(d, "taker_pid_ns", u64(m.taker_pid_ns)) &&
                  put(d, "taker_alive", flag(m.taker_alive)) && put(d, "leases", u64(m.leases)) && put(d, "idle", secs(m.idle)) &&
                  put(d, "stopping_why", str_or_none(m.stopping_why)) && put(d, "depth", u64(m.depth));
  if (!ok) Py_CLEAR(d);
  return d;
}

PyObject* counters(const sb::pool_counters& c) {
  PyObject* d = PyDict_New();
  if (d == nullptr) return nullptr;
  const std::pair<const char*, std::uint64_t> all[] = {
      {"takes", c.takes}, {"returns_ok", c.returns_ok}, {"returns_fail", c.returns_fail},
      {"no_members_at_capacity", c.no_members_at_capacity}, {"no_members_queue_full", c.no_members_queue_full},
      {"no_members_starting", c.no_members_starting}, {"take_timeouts", c.take_timeouts}, {"queue_max_reached", c.queue_max_reached},
      {"granted", c.granted}, {"killed_free_culled", c.killed_free_culled}, {"killed_free_unhealthy", c.killed_free_unhealthy},
      {"killed_in_use", c.killed_in_use}, {"crashed", c.crashed}, {"start_failures", c.start_failures}, {"starts", c.starts},
      {"double_returns", c.double_returns}, {"stale_returns", c.stale_returns}, {"dead_lettered", c.dead_lettered},
      {"lost", c.lost}, {"revoked_in_use", c.revoked_in_use}, {"refused_signals", c.refused_signals},
      {"expired_free", c.expired_free}, {"expired_returned", c.expired_returned}, {"auto_grow_starts", c.auto_grow_starts}};
  for (const auto& [k, v] : all)
    if (!put(d, k, u64(v))) {
      Py_DECREF(d);
      return nullptr;
    }
  return d;
}

}  // namespace pool_dict

PyObject* pool_info(PyObject*, PyObject* args) {
  using namespace pool_dict;
  const char* name;
  if (!PyArg_ParseTuple(args, "s", &name)) return nullptr;
  std::optional<sb::result<sb::pool_info>> r;
  Py_BEGIN_ALLOW_THREADS
  r.emplace(sb::inspect_pool(name));
  Py_END_ALLOW_THREADS
  if (!*r) return raise_ec(r->error());
  const sb::pool_info& i = **r;
  PyObject* d = PyDict_New();
  PyObject* sup = PyDict_New();
  PyObject* members = PyList_New(0);
  bool ok = d != nullptr && sup != nullptr && members != nullptr;
  for (std::size_t k = 0; ok && k < i.members.size(); ++k) {
    PyObject* m = member(i.members[k]);
    ok = m != nullptr && PyList_Append(members, m) == 0;
    Py_XDECREF(m);
  }
  ok = ok && put(sup, "pid", u64(i.supervisor_pid)) && put(sup, "pid_ns", u64(i.supervisor_pid_ns)) &&
       put(sup, "alive", flag(i.supervisor_alive)) && put(sup, "epoch", u64(i.supervisor_epoch)) &&
       put(sup, "standbys", u64(i.standbys));
  ok = ok && put(d, "name", str(i.name)) && put(d, "group", str_or_none(i.group)) && put(d, "command", str(i.command)) &&
       put(d, "init_command", str_or_none(i.init_command)) && put(d, "dead_letters", str_or_none(i.dead_letters)) &&
       put(d, "init_count", u64(i.init_count)) && put(d, "max_count", u64(i.max_count)) && put(d, "table_size", u64(i.table_size)) &&
       put(d, "reconfigurations", u64(i.reconfigurations)) && put(d, "queue_max", u64(i.queue_max)) &&
       put(d, "max_clients", u64(i.max_clients)) && put(d, "cull_after", secs(i.cull_after)) &&
       put(d, "start_timeout", secs(i.start_timeout)) && put(d, "stop_grace", secs(i.stop_grace)) &&
       put(d, "health_interval", secs(i.health_interval)) && put(d, "health_timeout", secs(i.health_timeout)) &&
       put(d, "max_lifetime", secs(i.max_lifetime)) && put(d, "max_lifetime_jitter", secs(i.max_lifetime_jitter)) &&
       put(d, "auto_grow_threshold", i.auto_grow_threshold ? u64(*i.auto_grow_threshold) : Py_NewRef(Py_None)) && put(d, "member_capacity", u64(i.member_capacity)) &&
       put(d, "member_slot_size", u64(i.member_slot_size)) && put(d, "member_overflow", str(sb::to_string(i.member_overflow))) &&
       put(d, "free", u64(i.free)) && put(d, "in_use", u64(i.in_use)) && put(d, "starting", u64(i.starting)) &&
       put(d, "checking", u64(i.checking)) && put(d, "stopping", u64(i.stopping)) && put(d, "queued", u64(i.queued)) &&
       put(d, "clients", u64(i.clients)) && put(d, "removing", str_or_none(i.removing)) && put(d, "mode", u64(i.mode)) &&
       put(d, "uid", u64(i.uid)) && put(d, "segment_bytes", u64(i.segment_bytes)) && put(d, "counters", counters(i.count)) &&
       put(d, "ledger_gap", PyLong_FromLongLong(i.ledger_gap)) && put(d, "ledger_settled", flag(i.ledger_settled));
  if (ok) {
    ok = put(d, "supervisor", sup);  // (stolen, or freed by put)
    sup = nullptr;
  }
  if (ok) {
    ok = put(d, "members", members);
    members = nullptr;
  }
  Py_XDECREF(sup);
  Py_XDECREF(members);
  if (!ok) Py_CLEAR(d);
  return d;
}

// pool_remove_group(group, immediate, timeout_seconds) -> list of the pools removed
PyObject* pool_remove_group(PyObject*, PyObject* args) {
  const char* group;
  int immediate;
  double timeout;
  if (!PyArg_ParseTuple(args, "spd", &group, &immediate, &timeout)) return nullptr;
  std::optional<sb::result<std::vector<std::string>>> r;
  Py_BEGIN_ALLOW_THREADS
  r.emplace(sb::Pool::remove_group(group, immediate ? sb::removal::immediate : sb::removal::graceful,
                                   std::chrono::nanoseconds(static_cast<std::int64_t>(timeout * 1e9))));
  Py_END_ALLOW_THREADS
  if (!*r) return raise_ec(r->error());
  return names_list(**r);
}

// pool_take_group(group, timeout_seconds) -> the address of a new shmbox_lease (the C API's
// handle: shmbox.Lease uses it through ctypes and frees it with shmbox_lease_close).
PyObject* pool_take_group(PyObject*, PyObject* args) {
  const char* group;
  double timeout;
  if (!PyArg_ParseTuple(args, "sd", &group, &timeout)) return nullptr;
  std::optional<sb::result<sb::Lease>> r;
  Py_BEGIN_ALLOW_THREADS
  r.emplace(sb::Pool::take_group(group, timeout < 0 ? std::chrono::nanoseconds::max()
                                                    : std::chrono::nanoseconds(static_cast<std::int64_t>(timeout * 1e9))));
  Py_END_ALLOW_THREADS
  if (!*r) return raise_ec(r->error());
  auto* h = new (std::nothrow) shmbox_lease{std::move(**r)};
  if (h == nullptr) return PyErr_NoMemory();
  return PyLong_FromVoidPtr(h);
}

// pool_supervise(pool_address, command, dead_letters, log): runs the supervisor (Pool::supervise)
// in a thread of its own while this one waits without the GIL, in slices that run signal
// handlers: Ctrl-C (or any exception from a handler) stops it, and it is raised once the
// supervisor has returned. `log` (None or a callable) gets each of its lines.
PyObject* pool_supervise(PyObject*, PyObject* args) {
  PyObject *addr, *command, *dead, *log, *init = Py_None;
  if (!PyArg_ParseTuple(args, "OOOO|O", &addr, &command, &dead, &log, &init)) return nullptr;
  auto* h = handle_at<shmbox_pool>(addr, "Pool");
  if (h == nullptr) return nullptr;
  sb::supervise_options o;
  std::atomic<bool> stop{false};
  o.stop = &stop;
  if (command != Py_None) {
    const char* c = PyUnicode_AsUTF8(command);
    if (c == nullptr) return nullptr;
    o.command = std::string(c);
  }
  if (dead != Py_None) {
    const char* d = PyUnicode_AsUTF8(dead);
    if (d == nullptr) return nullptr;
    o.dead_letters = std::string(d);
  }
  if (init != Py_None) {
    const char* i = PyUnicode_AsUTF8(init);
    if (i == nullptr) return nullptr;
    o.init_command = std::string(i);
  }
  if (log != Py_None) {
    o.log = [log](std::string_view line) {
      PyGILState_STATE st = PyGILState_Ensure();
      PyObject* r = PyObject_CallFunction(log, "s#", line.data(), static_cast<Py_ssize_t>(line.size()));
      if (r == nullptr) PyErr_WriteUnraisable(log);  // a logger's failure does not stop the supervisor
      Py_XDECREF(r);
      PyGILState_Release(st);
    };
  }
  sb::result<void> r;
  std::atomic<bool> done{false};
  std::thread t;
  try {
    t = std::thread([&] {
      r = h->pool.supervise(o);
      done = true;
    });
  } catch (const std::system_error& e) {
    PyErr_Format(PyExc_OSError, "cannot start the supervisor's thread: %s", e.what());
    return nullptr;
  }
  bool interrupted = false;
  while (!done) {
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < 25 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    Py_END_ALLOW_THREADS
    if (!done && !interrupted && PyErr_CheckSignals() < 0) {
      interrupted = true;  // the exception stays set; the supervisor stops within 50 ms
      stop = true;
    }
  }
  Py_BEGIN_ALLOW_THREADS
  t.join();
  Py_END_ALLOW_THREADS
  if (interrupted) return nullptr;
  if (!r) return raise_ec(r.error());
  Py_RETURN_NONE;
}

// ---- Looking at boxes ------------------------------------------------------------------

// box_peek(box_address, max) -> [(data, lane, position, stash, envelope)], in delivery order, not taken.
PyObject* box_peek(PyObject*, PyObject* args) {
  PyObject* addr;
  Py_ssize_t max;
  if (!PyArg_ParseTuple(args, "On", &addr, &max)) return nullptr;
  auto* h = handle_at<shmbox_box>(addr, "Box");
  if (h == nullptr) return nullptr;
  if (max < 0) {
    PyErr_SetString(PyExc_ValueError, "peek: max must be >= 0");
    return nullptr;
  }
  std::vector<sb::peeked_message> v;
  try {
    v = sb::peek(h->box, static_cast<std::size_t>(max));
  } catch (const std::bad_alloc&) {
    return PyErr_NoMemory();
  }
  PyObject* l = PyList_New(static_cast<Py_ssize_t>(v.size()));
  if (l == nullptr) return nullptr;
  for (std::size_t i = 0; i < v.size(); ++i) {
    PyObject* t = Py_BuildValue("(y#IKs#s#)", v[i].data.data(), static_cast<Py_ssize_t>(v[i].data.size()), v[i].lane,
                                static_cast<unsigned long long>(v[i].position), v[i].stash.data(),
                                static_cast<Py_ssize_t>(v[i].stash.size()), v[i].envelope.data(),
                                static_cast<Py_ssize_t>(v[i].envelope.size()));
    if (t == nullptr) {
      Py_DECREF(l);
      return nullptr;
    }
    PyList_SET_ITEM(l, static_cast<Py_ssize_t>(i), t);
  }
  return l;
}

// gc(dry_run, include_nonempty, prefix) -> [(name, depth, why, skipped)]
PyObject* box_gc(PyObject*, PyObject* args) {
  int dry_run, nonempty;
  const char* prefix;
  if (!PyArg_ParseTuple(args, "pps", &dry_run, &nonempty, &prefix)) return nullptr;
  sb::collect_options o;
  o.dry_run = dry_run != 0;
  o.include_nonempty = nonempty != 0;
  o.prefix = prefix;
  std::optional<sb::result<std::vector<sb::collected_box>>> r;
  Py_BEGIN_ALLOW_THREADS
  r.emplace(sb::collect(o));
  Py_END_ALLOW_THREADS
  if (!*r) return raise_ec(r->error());
  PyObject* l = PyList_New(0);
  if (l == nullptr) return nullptr;
  for (const auto& c : **r) {
    PyObject* t = Py_BuildValue("(s#Ks#O)", c.name.data(), static_cast<Py_ssize_t>(c.name.size()),
                                static_cast<unsigned long long>(c.depth), c.why.data(),
                                static_cast<Py_ssize_t>(c.why.size()), c.skipped ? Py_True : Py_False);
    if (t == nullptr || PyList_Append(l, t) < 0) {
      Py_XDECREF(t);
      Py_DECREF(l);
      return nullptr;
    }
    Py_DECREF(t);
  }
  return l;
}

// ---- The module ---------------------------------------------------------------------

PyObject* setup(PyObject*, PyObject* args) {
  PyObject *statuses, *box_default, *seconds, *batch_result, *error_of;
  if (!PyArg_ParseTuple(args, "O!OOOO", &PyTuple_Type, &statuses, &box_default, &seconds, &batch_result, &error_of)) {
    return nullptr;
  }
  if (PyTuple_GET_SIZE(statuses) != 8) {
    PyErr_SetString(PyExc_ValueError, "_setup: eight post statuses");
    return nullptr;
  }
  Py_XSETREF(g.statuses, Py_NewRef(statuses));
  Py_XSETREF(g.box_default, Py_NewRef(box_default));
  Py_XSETREF(g.seconds, Py_NewRef(seconds));
  Py_XSETREF(g.batch_result, Py_NewRef(batch_result));
  Py_XSETREF(g.error_of, Py_NewRef(error_of));
  Py_RETURN_NONE;
}

PyMethodDef module_methods[] = {
    {"_setup", setup, METH_VARARGS, "_setup(post_statuses, BOX_DEFAULT, _seconds, BatchResult, _error): at import."},
    {"box_peek", box_peek, METH_VARARGS, "box_peek(box address, max) (shmbox.Box.peek)."},
    {"box_gc", box_gc, METH_VARARGS, "box_gc(dry_run, include_nonempty, prefix) (shmbox.gc)."},
    {"pool_create", pool_create, METH_VARARGS, "Pool.create's library call (shmbox.Pool.create)."},
    {"pool_remove", pool_remove, METH_VARARGS, "pool_remove(name, immediate, timeout) (shmbox.Pool.remove)."},
    {"pool_list", pool_list, METH_NOARGS, "pool_list() -> names (shmbox.Pool.list)."},
    {"pool_take_group", pool_take_group, METH_VARARGS, "pool_take_group(group, timeout) -> lease address."},
    {"pool_remove_group", pool_remove_group, METH_VARARGS, "pool_remove_group(group, immediate, timeout) -> names removed."},
    {"pool_info", pool_info, METH_VARARGS, "pool_info(name) -> a dict of the pool's snapshot (shmbox.Pool.info)."},
    {"pool_supervise", pool_supervise, METH_VARARGS, "pool_supervise(pool address, command, dead_letters, log)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "shmbox._core",
    "The compiled message path of the shmbox package (post, receive, batches) and libshmbox itself.", -1,
    module_methods, nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__core(void) {
  ProducerCoreType.tp_name = "shmbox._core.ProducerCore";
  ProducerCoreType.tp_basicsize = sizeof(ProducerCore);
  ProducerCoreType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
  ProducerCoreType.tp_doc = "The compiled part of shmbox.Producer.";
  ProducerCoreType.tp_methods = producer_methods;
  ProducerCoreType.tp_getset = producer_getset;
  ProducerCoreType.tp_new = PyType_GenericNew;
  OwnerCoreType.tp_name = "shmbox._core.OwnerCore";
  OwnerCoreType.tp_basicsize = sizeof(OwnerCore);
  OwnerCoreType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
  OwnerCoreType.tp_doc = "The compiled part of shmbox.Owner.";
  OwnerCoreType.tp_methods = owner_methods;
  OwnerCoreType.tp_getset = owner_getset;
  OwnerCoreType.tp_new = PyType_GenericNew;
  OwnerCoreType.tp_dealloc = reinterpret_cast<destructor>(Owner_dealloc);
  if (PyType_Ready(&ProducerCoreType) < 0 || PyType_Ready(&OwnerCoreType) < 0) return nullptr;
  g.message = PyStructSequence_NewType(&message_desc);
  if (g.message == nullptr) return nullptr;
  PyObject* m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  Py_INCREF(&ProducerCoreType);
  Py_INCREF(&OwnerCoreType);
  if (PyModule_AddObject(m, "ProducerCore", reinterpret_cast<PyObject*>(&ProducerCoreType)) < 0 ||
      PyModule_AddObject(m, "OwnerCore", reinterpret_cast<PyObject*>(&OwnerCoreType)) < 0 ||
      PyModule_AddObject(m, "Message", Py_NewRef(reinterpret_cast<PyObject*>(g.message))) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
