// A pybind11 binding of the same calls as shmbox._core's post and try_receive, to compare
// the per-call cost of the two binding styles (not part of the project).
#include <pybind11/pybind11.h>
#include "shmbox/shmbox.h"
namespace py = pybind11;
struct P { shmbox_producer* h; };
struct O { shmbox_owner* h; std::string buf; };
PYBIND11_MODULE(pbpost, m) {
  py::class_<P>(m, "P").def(py::init([](std::uintptr_t a) { return P{reinterpret_cast<shmbox_producer*>(a)}; }))
      .def("post", [](P& self, py::buffer b) {
        py::buffer_info i = b.request();
        return shmbox_post(self.h, i.ptr, static_cast<size_t>(i.size * i.itemsize));
      });
  py::class_<O>(m, "O").def(py::init([](std::uintptr_t a) { O o{reinterpret_cast<shmbox_owner*>(a), {}}; o.buf.resize(4096); return o; }))
      .def("try_receive", [](O& self) -> py::object {
        size_t n = 0; shmbox_msg_info info{};
        int st = shmbox_try_receive(self.h, self.buf.data(), self.buf.size(), &n, &info);
        if (st != 0) return py::none();
        return py::make_tuple(py::bytes(self.buf.data(), n), info.lane, info.redelivered != 0);
      });
}
