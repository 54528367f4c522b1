"""lattice's register-tiled CPU GEMM kernels (``csrc/backend/cpu/gemm*.cpp``: ``avx2``,
``avx512``) against a float64 NumPy oracle and the BLAS route, called through the native
entry points the convolution routes use: the forward / input-gradient convolution
(``sparse_conv``, W as is and transposed) and the weight gradient
(``sparse_conv_weight_grad``), over channel counts that leave partial register tiles and
panels, offsets with no edges, row counts that leave partial row tiles, repeated output rows
(the serial scatter), and results that do not depend on the thread count. The routes'
choice and the convolution ops on every kernel are covered by ``test_conv.py`` /
``test_conv_grad.py`` (every test there runs once per kernel)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import mlx.core as mx
import numpy as np
import pytest
from reference.conv import round_bf16

from lattice import _ext

KERNELS = [k for k in ("avx2", "avx512") if k in _ext.conv_kernels()]
pytestmark = pytest.mark.skipif(not KERNELS, reason="this CPU runs none of lattice's GEMM kernels")
BF16 = "avx512_bf16"
AMX = "amx_bf16"
needs_bf16 = pytest.mark.skipif(BF16 not in _ext.conv_kernels(), reason="this CPU has no AVX-512 BF16")
needs_amx = pytest.mark.skipif(
    AMX not in _ext.conv_kernels(), reason="this CPU (or its Linux) gives lattice no AMX-BF16 tiles"
)
# the kernels that round: each test of the rounded products runs once per kernel this CPU has
ROUNDERS = [pytest.param(BF16, marks=needs_bf16), pytest.param(AMX, marks=needs_amx)]


@pytest.fixture(autouse=True)
def _cpu_stream():
    """The kernels are CPU ops: they run on the CPU stream under a GPU default device
    (``LATTICE_TEST_DEVICE=gpu``) too."""
    with mx.stream(mx.cpu):
        yield


# (C_in, C_out): partial tiles and panels of every AVX-512 tile shape (32, 48 and 64 columns wide)
SHAPES = [(1, 1), (3, 5), (4, 32), (12, 33), (17, 16), (33, 70), (64, 64), (96, 128), (130, 47)]
SHAPES += [(7, 80), (48, 96), (70, 192), (128, 144)]


def _relation(rng, n_in: int, n_out: int, per_offset: list[int], distinct: bool = True):
    ins, outs, bounds = [], [], [0]
    for m in per_offset:
        o = rng.choice(n_out, size=m, replace=False) if distinct else rng.integers(0, n_out, size=m)
        ins.append(rng.integers(0, n_in, size=m))
        outs.append(o)
        bounds.append(bounds[-1] + m)
    cat = lambda a: np.concatenate(a).astype(np.int32) if a else np.zeros(0, np.int32)  # noqa: E731
    return cat(ins), cat(outs), bounds


def _oracle_conv(x, w, ir, orr, bounds, n_out, transpose):
    y = np.zeros((n_out, w.shape[1] if transpose else w.shape[2]))
    for k in range(len(bounds) - 1):
        s = slice(bounds[k], bounds[k + 1])
        wk = w[k].T if transpose else w[k]
        np.add.at(y, orr[s], x[ir[s]].astype(np.float64) @ wk.astype(np.float64))
    return y


def _conv_case(seed: int, c_in: int, c_out: int, transpose: bool):
    """A relation of 700 -> 650 rows over offsets of 0, 37, 1, 600, 13, 0 and 250 edges, random
    X and W, and sparse_conv's positional arguments for them."""
    rng = np.random.default_rng(seed)
    n_in, n_out = 700, 650
    ir, orr, bounds = _relation(rng, n_in, n_out, [0, 37, 1, 600, 13, 0, 250])
    x = rng.normal(size=(n_in, c_in)).astype(np.float32)
    w = rng.normal(size=(len(bounds) - 1, *((c_out, c_in) if transpose else (c_in, c_out)))).astype(
        np.float32
    )
    args = (mx.array(x), mx.array(w), mx.array(ir), mx.array(orr), bounds, n_out, transpose, -1, True)
    return x, w, ir, orr, bounds, n_out, args


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("c_in,c_out", SHAPES)
@pytest.mark.parametrize("transpose", [False, True])
def test_conv_matches_the_oracle_and_the_blas(kernel, c_in, c_out, transpose):
    x, w, ir, orr, bounds, n_out, args = _conv_case(c_in * 131 + c_out, c_in, c_out, transpose)
    got = np.asarray(_ext.sparse_conv(*args, kernel=kernel))
    want = _oracle_conv(x, w, ir, orr, bounds, n_out, transpose)
    scale = np.abs(want).max() + 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)
    blas = np.asarray(_ext.sparse_conv(*args, kernel="blas"))
    np.testing.assert_allclose(got, blas, rtol=1e-5, atol=1e-5 * scale)


def _weight_views(w: np.ndarray) -> dict[str, mx.array]:
    """Views of the mapped weight ``w`` (K, P, Q) as MLX hands them over without a copy: the
    transposed view of a dense (Q, K, P) layer weight (what ``mapped_weight`` makes), the
    offsets reversed (negative offset stride), one offset broadcast over K, and a view whose
    inner strides suit no BLAS call (copied by the native side)."""
    K, P, Q = w.shape
    dense = mx.array(np.ascontiguousarray(w.transpose(2, 0, 1)))  # (Q, K, P)
    wide = mx.array(np.repeat(w[:, :, :, None], 2, axis=3))  # (K, P, Q, 2): [..., 0] strides (., 2Q, 2)
    return {
        "dense layer's view": dense.transpose(1, 2, 0),
        "offsets reversed": mx.array(np.ascontiguousarray(w[::-1]))[::-1],
        "one offset broadcast": mx.broadcast_to(mx.array(w[:1]), (K, P, Q)),
        "no BLAS layout": wide[..., 0],
    }


@pytest.mark.parametrize("kernel", ["blas", *KERNELS])
@pytest.mark.parametrize("transpose", [False, True])
def test_conv_reads_weight_views_in_place(kernel, transpose):
    """A weight that is a view (strided, reversed, broadcast) gives what its contiguous copy
    gives, through the kernels, the BLAS route and the identity offset's GEMM."""
    rng = np.random.default_rng(11)
    n = 300
    ir, orr, bounds = _relation(rng, n, n, [40, 0, 120, 7])  # offset 1: no edges
    ident = np.arange(n, dtype=np.int32)  # offset 4: the identity, as a submanifold centre
    ir, orr, bounds = np.concatenate([ir, ident]), np.concatenate([orr, ident]), [*bounds, bounds[-1] + n]
    c_in, c_out = 24, 40
    x = rng.normal(size=(n, c_in)).astype(np.float32)
    shape = (len(bounds) - 1, *((c_out, c_in) if transpose else (c_in, c_out)))
    w = rng.normal(size=shape).astype(np.float32)
    for name, view in _weight_views(w).items():
        want_w = np.ascontiguousarray(np.asarray(view))  # the view's values, contiguous
        for identity_k in (-1, len(bounds) - 2):
            args = (mx.array(x), None, mx.array(ir), mx.array(orr), bounds, n, transpose, identity_k, True)
            got = _ext.sparse_conv(args[0], view, *args[2:], kernel=kernel)
            want = _ext.sparse_conv(args[0], mx.array(want_w), *args[2:], kernel=kernel)
            oracle = _oracle_conv(x, want_w, ir, orr, bounds, n, transpose)
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-5, err_msg=name)
            np.testing.assert_allclose(np.asarray(got), oracle, rtol=1e-5, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16])
def test_blas_gemm_reads_transposed_views(dtype):
    """``blas_gemm`` on transposed views (column-contiguous: read as the transpose) and on a
    strided slice (copied), each flag combination, against NumPy."""
    rng = np.random.default_rng(2)
    a = rng.normal(size=(50, 30)).astype(np.float32)
    b = rng.normal(size=(30, 20)).astype(np.float32)
    tol = 1e-5 if dtype == mx.float32 else 3e-2
    operands_a = {
        "as is": (mx.array(a).astype(dtype), False),
        "transposed view": (mx.array(np.ascontiguousarray(a.T)).astype(dtype).T, False),
        "view, trans flag": (mx.array(a).astype(dtype).T, True),
        "strided slice": (mx.array(np.repeat(a, 2, axis=1)).astype(dtype)[:, ::2], False),
    }
    operands_b = {
        "as is": (mx.array(b).astype(dtype), False),
        "transposed view": (mx.array(np.ascontiguousarray(b.T)).astype(dtype).T, False),
        "view, trans flag": (mx.array(b).astype(dtype).T, True),
    }
    want = a.astype(np.float64) @ b.astype(np.float64)
    for name_a, (va, ta) in operands_a.items():
        for name_b, (vb, tb) in operands_b.items():
            got = _ext.blas_gemm(va, vb, ta, tb, stream=mx.cpu)
            np.testing.assert_allclose(
                np.asarray(got.astype(mx.float32)),
                want,
                rtol=tol,
                atol=tol * 10,
                err_msg=f"{name_a} / {name_b}",
            )


@pytest.mark.parametrize("kernel", [*KERNELS, *ROUNDERS])
@pytest.mark.parametrize("distinct", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_conv_in_output_row_blocks(kernel, distinct, transpose):
    """Y above 2 MiB whose offsets' edges come in ascending output row (as a coordinate
    manager's relations do) runs in blocks of output rows, all offsets per block: 9,000 x 70
    floats (blocks of 936 rows), an identity offset first (it stores), empty offsets, an
    offset of one edge, and (``distinct=False``) offsets that repeat output rows; W as is and
    transposed (the input gradient)."""
    rng = np.random.default_rng(41)
    n, c_in, c_out = 9000, 33, 70
    ir, orr, bounds = _relation(rng, n, n, [0, 3000, 1, n, 2500, 0, 7000], distinct=distinct)
    ident = 3
    ir[bounds[ident] : bounds[ident + 1]] = np.arange(n)
    orr[bounds[ident] : bounds[ident + 1]] = np.arange(n)
    for k in range(len(bounds) - 1):
        s = slice(bounds[k], bounds[k + 1])
        o = np.argsort(orr[s], kind="stable")
        ir[s], orr[s] = ir[s][o], orr[s][o]
    x = rng.normal(size=(n, c_in)).astype(np.float32)
    w = rng.normal(size=(len(bounds) - 1, *((c_out, c_in) if transpose else (c_in, c_out)))).astype(
        np.float32
    )
    args = (mx.array(x), mx.array(w), mx.array(ir), mx.array(orr), bounds, n, transpose, ident, distinct)
    got = np.asarray(_ext.sparse_conv(*args, kernel=kernel))
    if kernel in (BF16, AMX):
        x, w = round_bf16(x), round_bf16(w)
    want = _oracle_conv(x, w, ir, orr, bounds, n, transpose)
    scale = np.abs(want).max() + 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("kernel", KERNELS)
def test_conv_with_repeated_output_rows_scatters_serially(kernel):
    """A relation nobody vouched for (``distinct=False``) whose offsets repeat output rows."""
    rng = np.random.default_rng(3)
    ir, orr, bounds = _relation(rng, 300, 40, [500, 700], distinct=False)
    x = rng.normal(size=(300, 20)).astype(np.float32)
    w = rng.normal(size=(2, 20, 36)).astype(np.float32)
    got = _ext.sparse_conv(mx.array(x), mx.array(w), mx.array(ir), mx.array(orr), bounds, 40, kernel=kernel)
    want = _oracle_conv(x, w, ir, orr, bounds, 40, False)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("ca,cb", SHAPES)
def test_weight_gradient_matches_the_oracle_and_the_blas(kernel, ca, cb):
    rng = np.random.default_rng(ca * 7 + cb)
    ra, rb, bounds = _relation(rng, 500, 480, [0, 300, 1, 129, 0, 400])
    a = rng.normal(size=(500, ca)).astype(np.float32)
    b = rng.normal(size=(480, cb)).astype(np.float32)
    args = (mx.array(a), mx.array(b), mx.array(ra), mx.array(rb), bounds, True)
    got = np.asarray(_ext.sparse_conv_weight_grad(*args, kernel=kernel))
    want = np.stack(
        [
            a[ra[s]].astype(np.float64).T @ b[rb[s]].astype(np.float64)
            for s in (slice(bounds[k], bounds[k + 1]) for k in range(len(bounds) - 1))
        ]
    )
    scale = np.abs(want).max() + 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(
        got, np.asarray(_ext.sparse_conv_weight_grad(*args, kernel="blas")), atol=1e-4 * scale
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_weight_gradient_of_many_edges_sums_its_parts_in_order(kernel):
    """An offset longer than one part (16,384 edges): parts summed into G after."""
    rng = np.random.default_rng(5)
    ra, rb, bounds = _relation(rng, 60_000, 50_000, [40_000, 20_000])
    a = rng.normal(size=(60_000, 9)).astype(np.float32)
    b = rng.normal(size=(50_000, 19)).astype(np.float32)
    got = _ext.sparse_conv_weight_grad(
        mx.array(a), mx.array(b), mx.array(ra), mx.array(rb), bounds, True, kernel
    )
    for k in range(2):
        s = slice(bounds[k], bounds[k + 1])
        want = a[ra[s]].astype(np.float64).T @ b[rb[s]].astype(np.float64)
        np.testing.assert_allclose(np.asarray(got[k]), want, rtol=1e-4, atol=1e-3)


def test_kernel_names_are_checked():
    x, w = mx.ones((3, 2)), mx.ones((1, 2, 2))
    rows = mx.array([0, 1], dtype=mx.int32)
    with pytest.raises(
        ValueError, match="kernel must be 'blas', 'avx2', 'avx512', 'avx512_bf16' or 'amx_bf16', got 'sse'"
    ):
        _ext.sparse_conv(x, w, rows, rows, [0, 2], 3, kernel="sse")
    with pytest.raises(ValueError, match="kernel must be"):
        _ext.sparse_conv_weight_grad(x, x, rows, rows, [0, 2], kernel="avx1024")


_THREADS = textwrap.dedent(
    """
    import sys
    import mlx.core as mx
    import numpy as np
    from lattice import _ext
    mx.set_default_device(mx.cpu)
    rng = np.random.default_rng(0)
    n, k = 40_000, sys.argv[2]
    ir = np.concatenate([rng.permutation(n)[:30_000] for _ in range(5)]).astype(np.int32)
    orr = np.concatenate([rng.permutation(n)[:30_000] for _ in range(5)]).astype(np.int32)
    bounds = list(range(0, 150_001, 30_000))
    x = mx.array(rng.normal(size=(n, 40)).astype(np.float32))
    w = mx.array(rng.normal(size=(5, 40, 24)).astype(np.float32))
    y = _ext.sparse_conv(x, w, mx.array(ir), mx.array(orr), bounds, n, distinct=True, kernel=k)
    g = _ext.sparse_conv_weight_grad(x, y, mx.array(ir), mx.array(orr), bounds, True, k)
    # the same edges, each offset's in ascending output row: Y (3.8 MB) in output-row blocks
    for b, e in zip(bounds[:-1], bounds[1:]):
        o = np.argsort(orr[b:e])
        ir[b:e], orr[b:e] = ir[b:e][o], orr[b:e][o]
    yb = _ext.sparse_conv(x, w, mx.array(ir), mx.array(orr), bounds, n, distinct=True, kernel=k)
    np.savez(sys.argv[1], y=np.asarray(y), g=np.asarray(g), yb=np.asarray(yb))
    """
)


@pytest.mark.parametrize("kernel", [*KERNELS, *ROUNDERS])
def test_results_do_not_depend_on_the_thread_count(tmp_path, kernel):
    out = {}
    for threads in ("1", "2"):
        path = tmp_path / f"{threads}.npz"
        env = dict(os.environ, LATTICE_NUM_THREADS=threads)
        subprocess.run([sys.executable, "-P", "-c", _THREADS, str(path), kernel], env=env, check=True)
        out[threads] = np.load(path)
    for key in ("y", "g", "yb"):
        np.testing.assert_array_equal(out["1"][key], out["2"][key], err_msg=key)
    # output-row blocks give the bits of the offset-by-offset walk (each row sums its offsets in order)
    np.testing.assert_array_equal(out["1"]["yb"], out["1"]["y"])


# ---- avx512_bf16, amx_bf16: products of bfloat16-rounded operands, float32 sums ----------


@pytest.mark.parametrize("kernel", ROUNDERS)
@pytest.mark.parametrize("c_in,c_out", [*SHAPES, (600, 40), (1030, 20)])
@pytest.mark.parametrize("transpose", [False, True])
def test_bf16_conv_is_the_sum_of_rounded_products(kernel, c_in, c_out, transpose):
    """Against a float64 oracle of the rounded operands (the float32 sums' error only), and
    visibly apart from the exact products (it does round), within bfloat16's 2^-8. Rows of
    more than 512 input channels: the AMX kernel stages them in slabs of 256 pairs."""
    x, w, ir, orr, bounds, n_out, args = _conv_case(c_in * 17 + c_out, c_in, c_out, transpose)
    got = np.asarray(_ext.sparse_conv(*args, kernel=kernel))
    rounded = _oracle_conv(round_bf16(x), round_bf16(w), ir, orr, bounds, n_out, transpose)
    exact = _oracle_conv(x, w, ir, orr, bounds, n_out, transpose)
    scale = np.abs(exact).max() + 1
    np.testing.assert_allclose(got, rounded, rtol=1e-5, atol=1e-6 * scale)
    assert 1e-5 * scale < np.abs(got - exact).max() < 2e-2 * scale


@pytest.mark.parametrize("kernel", ROUNDERS)
@pytest.mark.parametrize("ca,cb", SHAPES)
def test_bf16_weight_gradient_is_the_sum_of_rounded_products(kernel, ca, cb):
    """Pairs of edges: offsets of 0, 1 and odd edge counts (the last edge pairs with zeros)."""
    rng = np.random.default_rng(ca * 5 + cb)
    ra, rb, bounds = _relation(rng, 500, 480, [0, 301, 1, 129, 0, 400])
    a = rng.normal(size=(500, ca)).astype(np.float32)
    b = rng.normal(size=(480, cb)).astype(np.float32)
    got = np.asarray(
        _ext.sparse_conv_weight_grad(
            mx.array(a), mx.array(b), mx.array(ra), mx.array(rb), bounds, True, kernel
        )
    )
    parts = [slice(bounds[k], bounds[k + 1]) for k in range(len(bounds) - 1)]
    rounded = np.stack([round_bf16(a[ra[s]]).T @ round_bf16(b[rb[s]]) for s in parts])
    exact = np.stack([a[ra[s]].astype(np.float64).T @ b[rb[s]].astype(np.float64) for s in parts])
    scale = np.abs(exact).max() + 1
    np.testing.assert_allclose(got, rounded, rtol=1e-5, atol=1e-6 * scale)
    assert 1e-5 * scale < np.abs(got - exact).max() < 2e-2 * scale


@pytest.mark.parametrize("kernel", ROUNDERS)
def test_bf16_rounds_to_nearest_ties_to_even_and_keeps_specials(kernel):
    """One input channel, weight 1: the output is the input as bfloat16 rounded it. 1 + 2^-8
    is half way between 1 and 1 + 2^-7 (goes to 1, the even one), 1 + 3 * 2^-8 between
    1 + 2^-7 and 1 + 2^-6 (goes up); a hair past a tie goes up; inf and NaN stay."""
    vals = np.array(
        [1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -(1 + 2**-8), np.inf, -np.inf, np.nan, 0.0]
    )
    want = np.array([1.0, 1 + 2**-6, 1 + 2**-7, -1.0, np.inf, -np.inf, np.nan, 0.0])
    n = len(vals)
    rows = mx.array(np.arange(n, dtype=np.int32))
    w = mx.ones((1, 1, 1))
    for transpose in (False, True):
        got = _ext.sparse_conv(mx.array(vals[:, None].astype(np.float32)), w, rows, rows, [0, n], n, transpose,
                               -1, True, kernel=kernel)  # fmt: skip
        np.testing.assert_array_equal(np.asarray(got)[:, 0], want.astype(np.float32))
    # and the weight side: W = vals, input 1
    got = _ext.sparse_conv(mx.ones((1, 1)), mx.array(vals.astype(np.float32))[:, None, None],
                           mx.zeros(n, mx.int32), rows, list(range(n + 1)), n, kernel=kernel)  # fmt: skip
    np.testing.assert_array_equal(np.asarray(got)[:, 0], want.astype(np.float32))


@pytest.mark.parametrize("kernel", ROUNDERS)
def test_bf16_rounds_the_submanifold_centre_too(kernel):
    """With a centre offset (identity_k) the float32 route takes it as one BLAS GEMM; the
    rounding kernel runs it first, storing its rounded products into the output (nothing
    zeroed first), then adds the other offsets': the whole sum is of rounded products, the
    same as without the centre named up to the order of the float32 additions. The centre
    offset here is first, last and in the middle; a centre that is not the identity (a
    row missing) takes the zeroed-output path."""
    rng = np.random.default_rng(8)
    n = 400
    ir, orr, bounds = _relation(rng, n, n, [120, 0, 90, 55])
    ident = np.arange(n, dtype=np.int32)
    x = rng.normal(size=(n, 40)).astype(np.float32)
    for at in (0, 2, 4):
        cut = bounds[at]
        ir2 = np.concatenate([ir[:cut], ident, ir[cut:]])
        or2 = np.concatenate([orr[:cut], ident, orr[cut:]])
        b2 = [*bounds[: at + 1], *(b + n for b in bounds[at:])]
        w = rng.normal(size=(len(b2) - 1, 40, 24)).astype(np.float32)
        args = (mx.array(x), mx.array(w), mx.array(ir2), mx.array(or2), b2, n, False)
        centre = np.asarray(_ext.sparse_conv(*args, at, True, kernel=kernel))
        plain = np.asarray(_ext.sparse_conv(*args, -1, True, kernel=kernel))
        rounded = _oracle_conv(round_bf16(x), round_bf16(w), ir2, or2, b2, n, False)
        exact_centre = rounded + _oracle_conv(
            x, w[at : at + 1] - round_bf16(w[at : at + 1]), ident, ident, [0, n], n, False
        )
        exact_centre += _oracle_conv(
            x - round_bf16(x), round_bf16(w[at : at + 1]), ident, ident, [0, n], n, False
        )
        np.testing.assert_allclose(centre, rounded, rtol=1e-5, atol=1e-4, err_msg=f"centre at {at}")
        np.testing.assert_allclose(plain, rounded, rtol=1e-5, atol=1e-4, err_msg=f"centre at {at}")
        assert np.abs(centre - rounded).max() * 10 < np.abs(exact_centre - rounded).max()
    # offset 1 of this relation has no edges: not the identity, so the output is zeroed and added into
    w = rng.normal(size=(len(bounds) - 1, 40, 24)).astype(np.float32)
    args = (mx.array(x), mx.array(w), mx.array(ir), mx.array(orr), bounds, n, False)
    got = np.asarray(_ext.sparse_conv(*args, 1, True, kernel=kernel))
    np.testing.assert_allclose(
        got, _oracle_conv(round_bf16(x), round_bf16(w), ir, orr, bounds, n, False), rtol=1e-5, atol=1e-4
    )


def _subm_edges(rows: int, batches: tuple[int, ...] = (0,)):
    """A manager's 3^3 submanifold relation of ``rows`` random voxels in each of ``batches``
    (the empty set where rows is 0): its edges, bounds, row count, and whether it is mirrored."""
    from lattice import SparseTensor
    from lattice.core.kernel import KernelSpec

    rng = np.random.default_rng(rows)
    parts = []
    for b in batches:
        v = np.unique(rng.integers(0, 9, size=(rows, 3)), axis=0).astype(np.int32)
        parts.append(np.concatenate([np.full((len(v), 1), b, np.int32), v], axis=1))
    c = np.concatenate(parts) if parts else np.zeros((0, 4), np.int32)
    x = SparseTensor(c, np.zeros((len(c), 1), np.float32))
    rel = x.coord_manager.relation("submanifold", x.coord_key, KernelSpec(3), device="cpu")
    e = rel.grouped_edges
    return np.asarray(e.in_rows), np.asarray(e.out_rows), list(rel.edge_offsets_host), len(c), rel.mirrored


@pytest.mark.parametrize("kernel", ["blas", *KERNELS, *ROUNDERS])
@pytest.mark.parametrize("rows,batches", [(0, (0,)), (1, (0,)), (300, (0,)), (200, (1, 3))])
def test_mirrored_input_gradient_is_the_swapped_one(kernel, rows, batches):
    """``mirrored=True`` (a manager's submanifold relation: offset K-1-k's edges are offset k's
    reversed) takes the input gradient over the relation's own edges with W's offsets reversed;
    it equals the gradient over the edges swapped and the float64 oracle's, with the fused
    epilogue too, on an empty set, one voxel, one batch and a batch whose first member is empty."""
    ir, orr, bounds, n, mirrored = _subm_edges(rows, batches)
    assert mirrored
    rng = np.random.default_rng(rows + 7)
    x = rng.normal(size=(n, 20)).astype(np.float32)
    w = rng.normal(size=(27, 20, 24)).astype(np.float32)
    dy = rng.normal(size=(n, 24)).astype(np.float32)
    args = (mx.array(ir), mx.array(orr), bounds, n, False, 13, True)

    def grads(flag, affine):
        def f(xa, wa):
            if affine:
                ones, zeros = mx.ones((24,)), mx.zeros((24,))
                return _ext.sparse_conv_affine(
                    xa, wa, *args, kernel=kernel, scale=ones, shift=zeros, mirrored=flag
                )
            return _ext.sparse_conv(xa, wa, *args, kernel=kernel, mirrored=flag)

        _, (gx, gw) = mx.vjp(f, [mx.array(x), mx.array(w)], [mx.array(dy)])
        return np.asarray(gx), np.asarray(gw)

    rounds = kernel in (BF16, AMX)
    xo, wo, dyo = (round_bf16(a) for a in (x, w, dy)) if rounds else (x, w, dy)
    want = _oracle_conv(dyo, wo, orr, ir, bounds, n, True)  # dX[in] += dY[out] W[k]^T
    scale = np.abs(want).max() + 1 if n else 1
    for affine in (False, True):
        gx, gw = grads(True, affine)
        gx0, gw0 = grads(False, affine)
        np.testing.assert_allclose(gx, want, rtol=1e-5, atol=1e-4 * scale)
        np.testing.assert_allclose(gx, gx0, rtol=1e-5, atol=1e-4 * scale)
        np.testing.assert_array_equal(gw, gw0)  # the weight gradient is not touched
