"""bench/python_bindings/compare.py: post + try_receive of 64 B through shmbox._core (CPython C API) and
through pbpost (pybind11, the same C calls), interleaved in one process. Run by run.sh."""
import os, sys, time
import shmbox, pbpost
n = f"pyt-pb-{os.getpid()}"
shmbox.Box.create(n, capacity=4096, slot_size=256).close()
p = shmbox.Producer.attach(n); o = shmbox.Owner.acquire(n)
pp = pbpost.P(p._ptr); po = pbpost.O(o._ptr)
d = b"x" * 64
N = 100000
def run(post, recv):
    t = time.perf_counter()
    for _ in range(N):
        post(d); recv()
    return (time.perf_counter() - t) / N * 1e9
res = {"_core": [], "pybind11": []}
for rep in range(5):
    res["_core"].append(run(p.post, o.try_receive))
    res["pybind11"].append(run(pp.post, po.try_receive))
for k, v in res.items():
    print(f"{k:9s} post+try_receive ns: best {min(v):.0f} median {sorted(v)[2]:.0f}")
p.close(); o.close(); shmbox.Box.remove(n)
