"""The native entry points (``lattice._ext``) check what they are given.

Every ``_ext`` function that takes row indices, edge lists, edge offsets or counts
raises ``ValueError`` naming the op and the values when they are wrong, instead of
reading or writing out of bounds. Each hostile call runs in a child interpreter (one
per test module, restarted after a crash), so a regression to a crash fails its test
instead of killing pytest.

The no-atomics scatter of one kernel offset relies on the offset's edges never sharing
a row. lattice's own relations vouch for that (``distinct=True``); a raw call does not,
and the kernels then check it and scatter serially where it fails: those cases are
compared with a NumPy oracle here, in process (their indices are in range).

The native primitives evaluate on the CPU (the public wrappers pass ``stream=mx.cpu``):
these raw calls run on the CPU stream whatever MLX's default device (a GPU run of the
suite makes it the GPU), in process and in the child.
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import mlx.core as mx
import numpy as np
import pytest
from cli_helpers import PYTHON

import lattice
from lattice import _ext
from lattice.core import KernelSpec, RelationKind, SparseTensor

# ---- a child interpreter that runs one snippet at a time ------------------------------------

_PRELUDE = """
import json, sys, traceback
import mlx.core as mx, numpy as np
from lattice import _ext as E
mx.set_default_device(mx.cpu)
c = mx.array([[0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [1, 5, 5, 5]], dtype=mx.int32)
T = E.build_table(c)
x = mx.ones((4, 8)); w = mx.ones((1, 8, 8)); dy = mx.ones((1, 8))
r = lambda *v: mx.array(list(v), dtype=mx.int32)
def ev(v):
    if isinstance(v, (tuple, list)):
        for a in v: ev(a)
    elif isinstance(v, mx.array): mx.eval(v)
for line in sys.stdin:
    try:
        ev(eval(json.loads(line), globals()))
        out = {"kind": "ok", "message": ""}
    except Exception as e:
        out = {"kind": type(e).__name__, "message": str(e)}
    print(json.dumps(out), flush=True)
"""


class Child:
    """A Python child running ``_PRELUDE``: ``call(expr)`` evaluates one expression there."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [*PYTHON, "-c", _PRELUDE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        return self.proc

    def call(self, expr: str) -> dict:
        proc = self._start()
        proc.stdin.write(json.dumps(textwrap.dedent(expr).strip()) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:  # the child died: the call crashed it
            rc = proc.wait(timeout=30)
            self.proc = None
            return {"kind": "crash", "message": f"child exited with {rc}"}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture(autouse=True)
def _on_the_cpu_stream():
    with mx.stream(mx.cpu):
        yield


@pytest.fixture(scope="module")
def child():
    c = Child()
    yield c
    c.close()


# (expression, exception type, text the message must contain)
BAD_CALLS = {
    # sparse_conv: the reproducer of issue 22 and its siblings
    "conv in_rows huge (issue 22)": (
        "E.sparse_conv(x, w, r(100000000), r(0), [0, 1], 1, False, -1)",
        "ValueError",
        "[sparse_conv] in_rows must lie in [0, 4) (the rows of the features), got values in "
        "[100000000, 100000000]",
    ),
    "conv in_rows negative": (
        "E.sparse_conv(x, w, r(0, -3), r(0, 0), [0, 2], 1)",
        "ValueError",
        "[sparse_conv] in_rows must lie in [0, 4)",
    ),
    "conv in_rows int32 max": (
        "E.sparse_conv(x, w, r(2**31 - 1), r(0), [0, 1], 1)",
        "ValueError",
        "got values in [2147483647, 2147483647]",
    ),
    "conv out_rows negative": (
        "E.sparse_conv(x, w, r(0), r(-1), [0, 1], 1)",
        "ValueError",
        "[sparse_conv] out_rows must lie in [0, 1) (the rows of the output)",
    ),
    "conv out_rows past n_out": (
        "E.sparse_conv(x, w, r(0, 1), r(0, 2), [0, 2], 2)",
        "ValueError",
        "[sparse_conv] out_rows must lie in [0, 2)",
    ),
    "conv rows not computed yet": (
        "E.sparse_conv(x, w, r(100000000) + 0, r(0), [0, 1], 1)",
        "RuntimeError",
        "[sparse_conv] in_rows must lie in [0, 4)",
    ),
    "conv rows strided": (
        "E.sparse_conv(x, w, r(99, 0, 99, 1)[::2], r(0, 0), [0, 2], 1)",
        "RuntimeError",
        "[sparse_conv] in_rows must lie in [0, 4)",
    ),
    "conv offsets decrease": (
        "E.sparse_conv(x, mx.ones((2, 8, 8)), r(0, 1), r(0, 0), [0, 2, 1], 1)",
        "ValueError",
        "[sparse_conv] relation offsets must never decrease, got 2 then 1",
    ),
    "conv offsets start": (
        "E.sparse_conv(x, w, r(0), r(0), [1, 1], 1)",
        "ValueError",
        "[sparse_conv] relation offsets must start at 0, got 1",
    ),
    "conv offsets past edges": (
        "E.sparse_conv(x, w, r(0), r(0), [0, 1000], 1)",
        "ValueError",
        "relation offsets end at 1000 but the edge arrays hold 1 edges",
    ),
    "conv offsets vs K": (
        "E.sparse_conv(x, mx.ones((3, 8, 8)), r(0), r(0), [0, 1], 1)",
        "ValueError",
        "relation offsets must have K + 1 = 4 entries for the K = 3",
    ),
    "conv edge arrays differ": (
        "E.sparse_conv(x, w, r(0, 1), r(0), [0, 1], 1)",
        "ValueError",
        "[sparse_conv] in_rows and out_rows must have one entry per edge, got 2 and 1",
    ),
    "conv C_in vs weight": (
        "E.sparse_conv(mx.ones((4, 3)), w, r(0), r(0), [0, 1], 1)",
        "ValueError",
        "[sparse_conv] features have 3 channels, weight expects 8",
    ),
    "conv C_in vs transposed weight": (
        "E.sparse_conv(x, mx.ones((1, 8, 3)), r(0), r(0), [0, 1], 1, True)",
        "ValueError",
        "weight expects 3",
    ),
    "conv n_out negative": (
        "E.sparse_conv(x, w, r(0), r(0), [0, 1], -1)",
        "ValueError",
        "[sparse_conv] n_out must be in [0, 2^31), got -1",
    ),
    "conv identity_k": (
        "E.sparse_conv(x, w, r(0), r(0), [0, 1], 1, False, 5)",
        "ValueError",
        "[sparse_conv] identity_k must be -1 or a kernel offset in [0, 1), got 5",
    ),
    "conv rows int64": (
        "E.sparse_conv(x, w, mx.array([2**32]), r(0), [0, 1], 1)",
        "ValueError",
        "[sparse_conv] in_rows must be int32 (or a narrower integer type), got int64",
    ),
    "conv rows float": ("E.sparse_conv(x, w, mx.array([0.5]), r(0), [0, 1], 1)", "ValueError", "got float32"),
    "conv rows 2-D": (
        "E.sparse_conv(x, w, mx.zeros((1, 1), dtype=mx.int32), r(0), [0, 1], 1)",
        "ValueError",
        "[sparse_conv] in_rows must be 1-D, got ndim 2",
    ),
    "conv weight 2-D": (
        "E.sparse_conv(x, mx.ones((8, 8)), r(0), r(0), [0, 1], 1)",
        "ValueError",
        "[sparse_conv] weight must be (K, C_in, C_out), got ndim 2",
    ),
    # sparse_conv_weight_grad
    "wgrad rows_a negative": (
        "E.sparse_conv_weight_grad(x, x, r(-1), r(0), [0, 1])",
        "ValueError",
        "[sparse_conv_weight_grad] rows_a must lie in [0, 4) (the rows of a), got values in [-1, -1]",
    ),
    "wgrad rows_b huge": (
        "E.sparse_conv_weight_grad(x, x, r(0), r(10**9), [0, 1])",
        "ValueError",
        "[sparse_conv_weight_grad] rows_b must lie in [0, 4)",
    ),
    "wgrad offsets": (
        "E.sparse_conv_weight_grad(x, x, r(0), r(0), [0, 5])",
        "ValueError",
        "[sparse_conv_weight_grad] relation offsets end at 5",
    ),
    "wgrad no offsets": (
        "E.sparse_conv_weight_grad(x, x, r(0), r(0), [])",
        "ValueError",
        "relation offsets must have at least one entry",
    ),
    # sparse_pool / sparse_pool_grad
    "pool in_rows huge": (
        "E.sparse_pool(x, r(10**8), r(0), [0, 1], 1, 'sum')",
        "ValueError",
        "[sparse_pool] in_rows must lie in [0, 4)",
    ),
    "pool out_rows negative": (
        "E.sparse_pool(x, r(0), r(-1), [0, 1], 1, 'max')",
        "ValueError",
        "[sparse_pool] out_rows must lie in [0, 1)",
    ),
    "pool n_out negative": (
        "E.sparse_pool(x, r(0), r(0), [0, 1], -3, 'avg')",
        "ValueError",
        "[sparse_pool] n_out must be in [0, 2^31), got -3",
    ),
    "pool offsets decrease": (
        "E.sparse_pool(x, r(0, 1), r(0, 0), [0, 2, 1, 2], 1, 'sum')",
        "ValueError",
        "[sparse_pool] relation offsets must never decrease",
    ),
    "pool offsets past edges": (
        "E.sparse_pool(x, r(0), r(0), [0, 7], 1, 'sum')",
        "ValueError",
        "[sparse_pool] relation offsets end at 7 but the edge arrays hold 1",
    ),
    "pool weights vs offsets": (
        "E.sparse_pool(x, r(0), r(0), [0, 1], 1, 'sum', 'scatter_general', [1.0, 2.0])",
        "ValueError",
        "[sparse_pool] 2 offset weights for 1 offsets",
    ),
    "pool select values": (
        "E.sparse_pool(x, r(0), r(0), [0, 1], 1, 'select', values=mx.ones((4, 2)))",
        "ValueError",
        "[sparse_pool] select values must have the features' shape (4, 8)",
    ),
    "pool rows not computed yet": (
        "E.sparse_pool(x, r(0) - 9, r(0), [0, 1], 1, 'sum')",
        "RuntimeError",
        "[sparse_pool] in_rows must lie in [0, 4)",
    ),
    "pool grad in_rows huge": (
        "E.sparse_pool_grad(dy, r(10**8), r(0), [0, 1], 4, 'sum')",
        "ValueError",
        "[sparse_pool_grad] in_rows must lie in [0, 4) (the rows of the input)",
    ),
    "pool grad out_rows huge": (
        "E.sparse_pool_grad(dy, r(0), r(10**8), [0, 1], 4, 'avg')",
        "ValueError",
        "[sparse_pool_grad] out_rows must lie in [0, 1)",
    ),
    "pool grad exclusive": (
        "E.sparse_pool_grad(dy, r(-2), r(0), [0, 1], 4, 'sum', 'input_exclusive_gather')",
        "ValueError",
        "[sparse_pool_grad] in_rows must lie in [0, 4)",
    ),
    "pool grad n_in negative": (
        "E.sparse_pool_grad(dy, r(0), r(0), [0, 1], -4, 'sum')",
        "ValueError",
        "[sparse_pool_grad] n_in must be in [0, 2^31), got -4",
    ),
    "pool grad max features": (
        "E.sparse_pool_grad(dy, r(0), r(0), [0, 1], 4, 'max', x=mx.ones((4, 2)))",
        "ValueError",
        "[sparse_pool_grad] features must be (n_in, C) = (4, 8), got (4, 2)",
    ),
    # global_pool
    "global batch past size": (
        "E.global_pool(x, r(0, 0, 0, 10**8), 2, 'sum')",
        "ValueError",
        "[global_pool] batch indices must lie in [0, 2)",
    ),
    "global batch negative": (
        "E.global_pool(x, r(0, -1, 0, 0), 2, 'max')",
        "ValueError",
        "got values in [-1, 0]",
    ),
    "global batch shape": (
        "E.global_pool(x, r(0, 0), 2, 'sum')",
        "ValueError",
        "[global_pool] batch indices must be (N,) = (4,), got (2,)",
    ),
    "global batch_size negative": (
        "E.global_pool(x, r(0, 0, 0, 0), -2, 'avg')",
        "ValueError",
        "[global_pool] batch_size must be in [0, 2^31), got -2",
    ),
    "global batch strided": (
        "E.global_pool(x, mx.array([[0, 9], [0, 9], [1, 9], [1, 9]])[:, 1], 2, 'sum')",
        "RuntimeError",
        "[global_pool] batch indices must lie in [0, 2)",
    ),
    # relation builders and neighbours
    "exclusive inverse": (
        "E.relation_exclusive(T, r(-7, 10**9, 0, 0), [2, 2, 2])",
        "ValueError",
        "[kernel_relation] inverse must lie in [0, 4)",
    ),
    "exclusive stride 0": (
        "E.relation_exclusive(T, r(0, 0, 0, 0), [0, 1, 1])",
        "ValueError",
        "[kernel_relation] stride must be in 1..64 on every axis, got (0, 1, 1)",
    ),
    "exclusive stride huge": (
        "E.relation_exclusive(T, r(0, 0, 0, 0), [2**31 - 1, 2**31 - 1, 1])",
        "ValueError",
        "[kernel_relation] stride must be in 1..64",
    ),
    "forward stride 0": (
        "E.relation_forward(T, T, [2, 2, 2], [0, 1, 1], [0, 0, 0], [1, 1, 1])",
        "ValueError",
        "[kernel_relation] stride must be in 1..2147483647 on every axis",
    ),
    "transposed stride 0": (
        "E.relation_transposed(T, None, [2, 2, 2], [0, 1, 1], [0, 0, 0], [1, 1, 1])",
        "ValueError",
        "[transposed_kernel_relation] stride must be in 1..",
    ),
    "submanifold dilation 0": (
        "E.relation_submanifold(T, [3, 3, 3], [0, 1, 1])",
        "ValueError",
        "[submanifold_kernel_relation] dilation must be in 1..",
    ),
    "downsample stride 0": (
        "E.downsample(T, [0, 1, 1])",
        "ValueError",
        "[downsample_coords] stride must be in 1..",
    ),
    "knn k 0": (
        "E.knn_neighbors(x[:, :3], r(0, 0, 0, 0), x[:, :3], r(0, 0, 0, 0), 0)",
        "ValueError",
        "[knn_relation] k must be positive, got 0",
    ),
    "radius 0": (
        "E.radius_neighbors(x[:, :3], r(0, 0, 0, 0), x[:, :3], r(0, 0, 0, 0), 0.0, 5)",
        "ValueError",
        "[radius_relation] radius must be positive and finite, got 0",
    ),
    "radius nan": (
        "E.radius_neighbors(x[:, :3], r(0, 0, 0, 0), x[:, :3], r(0, 0, 0, 0), float('nan'), 5)",
        "ValueError",
        "[radius_relation] radius must be positive and finite, got nan",
    ),
}


# extreme but valid arguments: they run (or raise), they never crash (and, under
# tools/sanitize.sh, never read or write out of bounds)
EDGE_CALLS = {
    "lookup int32 extremes": "E.lookup(T, mx.array([[2**31 - 1, 2**31 - 1, -2**31, 0]], dtype=mx.int32))",
    "lookup lazy queries": "E.lookup(T, c + 1)",
    "downsample huge stride": "E.downsample(T, [2**31 - 1, 2**31 - 1, 2**31 - 1])",
    "downsample extreme coords": "E.downsample(E.build_table(mx.array([[0, 2**31 - 1, -2**31, 0]], "
    "dtype=mx.int32)), [3, 3, 3])",
    "empty table": "E.relation_submanifold(E.build_table(mx.zeros((0, 4), dtype=mx.int32)), [3, 3, 3], [1, 1, 1])",
    "submanifold huge dilation": "E.relation_submanifold(T, [3, 3, 3], [2**31 - 1, 2**31 - 1, 2**31 - 1])",
    "submanifold 63^3": "E.relation_submanifold(T, [63, 63, 63], [1, 1, 1])",
    "empty table, merged": "E.relation_submanifold(E.build_table(mx.zeros((0, 4), dtype=mx.int32)), [3, 3, 3], "
    "[1, 1, 1], merge=True)",
    "submanifold huge dilation, merged": "E.relation_submanifold(T, [3, 3, 3], [2**31 - 1, 2**31 - 1, 2**31 - 1], "
    "merge=True)",
    "submanifold 63^3, merged": "E.relation_submanifold(T, [63, 63, 63], [1, 1, 1], merge=True)",
    "forward huge padding": "E.relation_forward(T, T, [2, 2, 2], [1, 1, 1], [2**31 - 1, 0, 0], [1, 1, 1])",
    "forward 64^3": "E.relation_forward(T, T, [64, 64, 64], [1, 1, 1], [0, 0, 0], [1, 1, 1])",
    "transposed 64^3": "E.relation_transposed(T, None, [64, 64, 64], [1, 1, 1], [0, 0, 0], [1, 1, 1])",
    "transposed huge stride": "E.relation_transposed(T, None, [2, 2, 2], [2**31 - 1, 1, 1], [0, 0, 0], [1, 1, 1])",
    "kernel offsets huge dilation": "E.kernel_offsets([3, 3, 3], [2**31 - 1, 1, 1])",
    "exclusive stride 64": "E.relation_exclusive(T, r(0, 0, 0, 1), [64, 64, 64])",
    "knn k past the points": "E.knn_neighbors(x[:, :3], r(0, 0, 0, 0), x[:, :3], r(0, 0, 0, 0), 2**62)",
    "knn empty source": "E.knn_neighbors(mx.zeros((0, 3)), r(), x[:, :3], r(0, 0, 0, 0), 3)",
    "knn far apart": "E.knn_neighbors(mx.array([[0, 0, 0], [1e30, 1e30, 1e30]]), r(0, 0), mx.zeros((1, 3)), r(0), 2)",
    "knn batch extremes": "E.knn_neighbors(x[:, :3], r(-1, -5, 2**31 - 1, 0), x[:, :3], r(-1, 3, 0, 7), 2)",
    "radius huge": "E.radius_neighbors(mx.random.normal((50, 3)), mx.zeros(50, dtype=mx.int32), "
    "mx.random.normal((5, 3)), mx.zeros(5, dtype=mx.int32), 1e300, 5)",
    "radius tiny": "E.radius_neighbors(mx.random.normal((50, 3)) * 1e6, mx.zeros(50, dtype=mx.int32), "
    "mx.random.normal((5, 3)), mx.zeros(5, dtype=mx.int32), 1e-30, 5)",
    "radius batch extremes": "E.radius_neighbors(x[:, :3], r(0, 100000, 2000, 3), x[:, :3], r(0, 100000, 2000, 3), "
    "1.0, -7)",
    "quantize huge batch": "E.sparse_quantize(mx.ones((3, 3)), [1, 1, 1], [0, 0, 0], r(2**31 - 1, 0, 0))",
    "conv empty": "E.sparse_conv(mx.ones((0, 8)), w, r(), r(), [0, 0], 0)",
    "conv no offsets": "E.sparse_conv(x, mx.ones((0, 8, 8)), r(), r(), [0], 3)",
    "conv strided features": "E.sparse_conv(mx.ones((8, 16))[::2, ::2], w, r(3), r(0), [0, 1], 1)",
    "conv strided rows": "E.sparse_conv(x, w, r(0, 99, 1, 99)[::2], r(0, 0), [0, 2], 1)",
    "conv uint8 rows": "E.sparse_conv(x, w, mx.array([3], dtype=mx.uint8), r(0), [0, 1], 1)",
    "conv float16": "E.sparse_conv(x.astype(mx.float16), w, r(3, 2), r(0, 0), [0, 2], 1)",
    "conv grad": "mx.grad(lambda f: E.sparse_conv(f, w, r(0, 1), r(0, 0), [0, 2], 1).sum())(x)",
    "wgrad empty": "E.sparse_conv_weight_grad(x, x, r(), r(), [0, 0, 0])",
    "pool empty": "E.sparse_pool(mx.ones((0, 8)), r(), r(), [0], 0, 'max')",
    "pool select": "E.sparse_pool(x, r(3), r(0), [0, 1], 1, 'select', values=mx.ones((4, 8)))",
    "pool double grad": "mx.grad(lambda f: mx.grad(lambda g: (E.sparse_pool(g, r(0, 1), r(0, 0), [0, 2], 1, 'max')"
    " * f[:1]).sum())(f).sum())(x)",
    "global empty member": "E.global_pool(x, r(0, 0, 2, 2), 4, 'avg')",
    "global max grad": "mx.grad(lambda f: E.global_pool(f, r(0, 0, 1, 1), 2, 'max').sum())(x)",
    "global strided batch": "E.global_pool(x, mx.array([[0, 9], [0, 9], [1, 9], [1, 9]])[:, 0], 2, 'sum')",
}


@pytest.mark.parametrize("case", sorted(EDGE_CALLS))
def test_extreme_native_call_does_not_crash(child, case):
    got = child.call(EDGE_CALLS[case])
    assert got["kind"] != "crash", f"{case}: {EDGE_CALLS[case]} crashed the interpreter ({got['message']})"


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_native_call_raises_naming_the_op(child, case):
    expr, kind, text = BAD_CALLS[case]
    got = child.call(expr)
    assert got["kind"] != "crash", f"{case}: {expr} crashed the interpreter ({got['message']})"
    assert (got["kind"], text in got["message"]) == (kind, True), f"{case}: {got}"


def test_child_reports_a_crash_as_a_failure(child):
    """The harness itself: a call that kills its interpreter is reported, not fatal."""
    assert child.call("__import__('os').abort()")["kind"] == "crash"
    assert child.call("E.num_threads()")["kind"] == "ok"  # restarted


def test_valid_native_calls_still_run(child):
    assert child.call("E.sparse_conv(x, w, r(3, 0), r(0, 0), [0, 2], 1)")["kind"] == "ok"
    assert child.call("E.sparse_pool(x, r(3), r(0), [0, 1], 1, 'max')")["kind"] == "ok"
    assert child.call("E.global_pool(x, r(0, 0, 1, 1), 2, 'avg')")["kind"] == "ok"


def test_ext_is_private():
    assert "_ext" not in lattice.__all__
    ns: dict = {}
    exec("from lattice import *", ns)
    assert "_ext" not in ns
    ns = {}
    exec("from mlx_lattice import *", ns)
    assert "_ext" not in ns
    import mlx_lattice

    assert lattice._ext is _ext  # still importable by its private name
    assert not hasattr(mlx_lattice, "_ext")


# ---- the scatter invariant: relations nobody vouched for ---------------------------------------


def _conv_oracle(x, w, ins, outs, bounds, n_out):
    """Y[o] += X[i] @ W[k] over every edge, float64."""
    y = np.zeros((n_out, w.shape[2]))
    for k in range(len(bounds) - 1):
        for e in range(bounds[k], bounds[k + 1]):
            y[outs[e]] += x[ins[e]].astype(np.float64) @ w[k].astype(np.float64)
    return y


def _repeating_relation(seed: int, n_in: int, n_out: int, per_offset=(3000, 1, 0, 2500)):
    """Offsets whose edges repeat input rows and output rows (more edges than one conv tile
    or pool chunk), no (input, output) pair twice."""
    rng = np.random.default_rng(seed)
    flat = rng.choice(n_in * n_out, sum(per_offset), replace=False).astype(np.int64)
    bounds = [0, *np.cumsum(per_offset).tolist()]
    return (flat // n_out).astype(np.int32), (flat % n_out).astype(np.int32), bounds


def test_conv_with_repeated_rows_matches_oracle():
    rng = np.random.default_rng(0)
    n_in, n_out, c_in, c_out = 120, 80, 8, 6
    ins, outs, bounds = _repeating_relation(1, n_in, n_out)
    x = rng.standard_normal((n_in, c_in)).astype(np.float32)
    w = rng.standard_normal((len(bounds) - 1, c_in, c_out)).astype(np.float32)
    args = (mx.array(ins), mx.array(outs), bounds, n_out)
    y = _ext.sparse_conv(mx.array(x), mx.array(w), *args)
    np.testing.assert_allclose(
        np.asarray(y), _conv_oracle(x, w, ins, outs, bounds, n_out), rtol=1e-4, atol=1e-3
    )
    # the gradients scatter into the input rows (dX) and sum per offset (dW)
    g = rng.standard_normal((n_out, c_out)).astype(np.float32)
    dx, dw = mx.grad(lambda a, b: (_ext.sparse_conv(a, b, *args) * mx.array(g)).sum(), argnums=(0, 1))(
        mx.array(x), mx.array(w)
    )
    want_dx = np.zeros((n_in, c_in))
    want_dw = np.zeros(w.shape)
    for k in range(len(bounds) - 1):
        for e in range(bounds[k], bounds[k + 1]):
            want_dx[ins[e]] += g[outs[e]].astype(np.float64) @ w[k].T.astype(np.float64)
            want_dw[k] += np.outer(x[ins[e]], g[outs[e]])
    np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(np.asarray(dw), want_dw, rtol=1e-4, atol=1e-2)


def test_conv_repeated_rows_are_deterministic():
    rng = np.random.default_rng(2)
    ins, outs, bounds = _repeating_relation(3, 100, 60)
    x = mx.array(rng.standard_normal((100, 16)).astype(np.float32))
    w = mx.array(rng.standard_normal((4, 16, 16)).astype(np.float32))
    ys = [np.asarray(_ext.sparse_conv(x, w, mx.array(ins), mx.array(outs), bounds, 60)) for _ in range(5)]
    for y in ys[1:]:
        np.testing.assert_array_equal(y, ys[0])


def test_conv_identity_offset_is_checked_unless_vouched():
    """identity_k names an offset of edges (r, r); a raw call whose offset is not that is
    computed from its edges, not as the identity."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal((1, 8, 8)).astype(np.float32)
    ins, outs = np.array([3, 2, 1, 0], np.int32), np.array([0, 1, 2, 3], np.int32)
    y = _ext.sparse_conv(mx.array(x), mx.array(w), mx.array(ins), mx.array(outs), [0, 4], 4, False, 0)
    np.testing.assert_allclose(np.asarray(y), _conv_oracle(x, w, ins, outs, [0, 4], 4), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["sum", "avg", "max"])
@pytest.mark.parametrize("backward", ["scatter_general", "input_exclusive_gather"])
def test_pool_backward_with_repeated_rows_matches_oracle(mode, backward):
    rng = np.random.default_rng(5)
    n_in, n_out, c = 200, 100, 5
    ins, outs, bounds = _repeating_relation(6, n_in, n_out, per_offset=(5000, 3, 4000))
    x = rng.standard_normal((n_in, c)).astype(np.float32)
    g = rng.standard_normal((n_out, c)).astype(np.float32)
    args = (mx.array(ins), mx.array(outs), bounds, n_out, mode, backward)
    dx = mx.grad(lambda a: (_ext.sparse_pool(a, *args) * mx.array(g)).sum())(mx.array(x))
    # oracle: dX[i] += dY[o] * d(pool[o]) / dX[i] over the edges
    want = np.zeros((n_in, c))
    count = np.bincount(outs, minlength=n_out)
    for e in range(len(ins)):
        i, o = ins[e], outs[e]
        if mode == "sum":
            want[i] += g[o]
        elif mode == "avg":
            want[i] += g[o] / count[o]
    if mode == "max":  # each output row and channel routes to its smallest winning row
        for o in range(n_out):
            rows = ins[outs == o]
            if rows.size == 0:
                continue
            best = x[rows].max(axis=0)
            for ch in range(c):
                want[rows[np.flatnonzero(x[rows, ch] == best[ch])[0]], ch] += g[o, ch]
    np.testing.assert_allclose(np.asarray(dx), want, rtol=1e-4, atol=1e-4)


def _kitti_like(seed=7, n=3000):
    rng = np.random.default_rng(seed)
    xyz = np.unique(rng.integers(0, 30, (n, 3)), axis=0)
    coords = np.concatenate([np.zeros((len(xyz), 1), np.int64), xyz], axis=1).astype(np.int32)
    return SparseTensor(coords, mx.array(rng.standard_normal((len(coords), 16)).astype(np.float32)))


@pytest.mark.parametrize("kind", ["submanifold", "forward"])
def test_lattice_relation_checked_path_equals_vouched_path(kind):
    """On a relation lattice built, the checked (raw) and the vouched (distinct=True) calls
    give the same bits: the check finds the rows distinct and keeps the parallel scatter."""
    x = _kitti_like()
    m = x.coord_manager
    rel = (
        m.relation(RelationKind.SUBMANIFOLD, x.coord_key, KernelSpec(3))
        if kind == "submanifold"
        else m.relation(RelationKind.FORWARD, x.coord_key, KernelSpec(3, 2))
    )
    w = mx.array(np.random.default_rng(8).standard_normal((rel.n_kernels, 16, 16)).astype(np.float32))
    identity_k = rel.n_kernels // 2 if kind == "submanifold" else -1
    args = (
        rel.edges.in_rows,
        rel.edges.out_rows,
        list(rel.edge_offsets_host),
        rel.out_count,
        False,
        identity_k,
    )

    def run(distinct):
        f = lambda a, b: _ext.sparse_conv(a, b, *args, distinct=distinct)  # noqa: E731
        y = f(x.feats, w)
        grads = mx.grad(lambda a, b: (f(a, b) ** 2).sum(), argnums=(0, 1))(x.feats, w)
        pooled = mx.grad(lambda a: (_ext.sparse_pool(a, *args[:4], "avg", distinct=distinct) ** 2).sum())(
            x.feats
        )
        return [np.asarray(v) for v in (y, *grads, pooled)]

    for a, b in zip(run(False), run(True), strict=True):
        np.testing.assert_array_equal(a, b)
