"""Kernel-level timings of the CUDA relation path on the spconv shape (no Python op layers):
table build, submanifold map, both, CoordinateManager.relation, inverse map. Medians, ms.

    python benchmarks/profile_cuda.py
"""
import time, statistics, sys
sys.path.insert(0, __import__("os").path.dirname(__file__))
import mlx.core as mx, numpy as np
import lattice
from lattice.backends import cuda
from lattice.core.kernel import KernelSpec
from bench_conv_gpu import shells
coords = mx.array(shells()); mx.eval(coords)
spec = KernelSpec(3, op="p"); offs = spec.offsets(); mx.eval(offs)
def med(fn, r=20):
    fn(); fn(); ts=[]
    for _ in range(r):
        t0=time.perf_counter(); fn(); ts.append((time.perf_counter()-t0)*1e3)
    return round(statistics.median(ts),3)
t = cuda.build_table(coords); mx.eval(t.slots)
print("build_table", med(lambda: mx.eval(cuda.build_table(coords).slots)))
print("subm_map", med(lambda: mx.eval(cuda.submanifold_map(t, offs))))
print("both", med(lambda: mx.eval(cuda.submanifold_map(cuda.build_table(coords), offs))))
def full():
    x = lattice.SparseTensor(coords, mx.zeros((coords.shape[0], 1)), coord_manager=None)
    return x
xs = [full() for _ in range(25)]
ts=[]
for x in xs:
    t0=time.perf_counter(); rel = x.coord_manager.relation("submanifold", x.coord_key, spec, device="gpu"); mx.eval(rel.neighbor_map); ts.append((time.perf_counter()-t0)*1e3)
print("manager.relation", round(statistics.median(ts[2:]),3))
m = cuda.submanifold_map(t, offs); mx.eval(m)
inv = cuda.invert_map(m, coords.shape[0]); mx.eval(inv)
print("invert_map", med(lambda: mx.eval(cuda.invert_map(m, coords.shape[0]))))
