"""lattice's CUDA kernels (cuda/*.cu over kernels/*.inc) against the CPU routes.

Every test builds its CPU reference on a separate tensor (its own coordinate manager),
so no relation built on one device is reused by the other. Skipped where MLX has no
CUDA device. Tolerances: float32 2e-3 relative (the tensor-core convolution and weight
gradient multiply in TF32 unless MLX_ENABLE_TF32=0), float16 3e-2, bfloat16 6e-2; the
weight-gradient kernels against a float64 sum: 1e-3 (TF32) or 3e-5 (float32 FMAs) of
sum |x| |dy|; integer results (maps, coordinate sets, argmax rows) exactly.
"""

from __future__ import annotations

import re

import mlx.core as mx
import numpy as np
import pytest
from reference import conv as rconv

import lattice
from lattice.backends import kernels
from lattice.backends.cuda import conv as cuda_conv
from lattice.backends.cuda import coords as cuda_coords
from lattice.backends.cuda import launch as cuda_launch
from lattice.backends.cuda import pool as cuda_pool
from lattice.backends.cuda import relations as cuda_relations
from lattice.core.kernel import KernelSpec
from lattice.ops import conv3d, conv_transpose3d, generative_conv_transpose3d, subm_conv3d

HAS_CUDA = hasattr(mx, "cuda") and mx.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device in this process")

TOL = {mx.float32: 2e-3, mx.float16: 3e-2, mx.bfloat16: 6e-2}


def _coords(seed=0, n=400, span=7, batches=(0, 2)):
    rng = np.random.default_rng(seed)
    xyz = np.unique(rng.integers(-span, span, (n, 3)), axis=0)
    b = rng.choice(batches, len(xyz))  # batch 1 empty
    return np.concatenate([b[:, None], xyz], axis=1).astype(np.int32)


def _pair(coords, c=8, dtype=mx.float32, seed=1):
    f = np.random.default_rng(seed).normal(size=(len(coords), c)).astype(np.float32)
    make = lambda: lattice.SparseTensor(coords, mx.array(f).astype(dtype))  # noqa: E731
    return make(), make()


def _edge_set(rel):
    e = rel.edges
    k = np.repeat(np.arange(rel.n_kernels), np.asarray(e.counts))
    return set(zip(k.tolist(), np.asarray(e.in_rows).tolist(), np.asarray(e.out_rows).tolist(), strict=True))


def test_every_entry_file_parses_and_names_its_shared_bodies():
    root = kernels.source_root()
    for dialect, ext in (("cuda", ".cu"), ("metal", ".metal")):
        stems = sorted(p.stem for p in (root / dialect).glob(f"*{ext}") if p.stem != "dialect")
        assert stems == ["conv", "coords", "points", "pool", "relations"], (dialect, stems)
        for stem in stems:
            for e in kernels.entries(dialect, stem).values():
                assert e.inputs and e.outputs and e.source.strip()
                for use in e.uses:
                    assert (root / "kernels" / f"{use}.inc").is_file()
    # both dialects declare the same kernels with the same arguments
    for stem in ("conv", "coords", "points", "pool", "relations"):
        a, b = kernels.entries("cuda", stem), kernels.entries("metal", stem)
        cuda_side = {k: (v.inputs, v.outputs) for k, v in a.items() if k not in kernels.CUDA_ONLY}
        assert cuda_side == {k: (v.inputs, v.outputs) for k, v in b.items()}


def _call_args(text: str, start: int) -> list[str]:
    """The top-level comma-separated arguments of the call whose "(" is at ``start``."""
    depth, args, cur = 0, [], ""
    for ch in text[start:]:
        if ch == "(":
            depth += 1
            if depth == 1:
                continue
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return [*args, cur.strip()]
        if ch == "," and depth == 1:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    raise AssertionError("unbalanced call")


def test_metal_entries_pass_outputs_as_their_bodies_take_them():
    """mx.fast.metal_kernel makes every output of a kernel atomic or none
    (``kernels._METAL_ATOMIC``): an output a shared body takes as an ``lt_atomic_*`` pointer
    needs its kernel in that set, and there an output the body takes as a plain pointer is
    cast back (``reinterpret_cast``) in the entry. Read from the sources (Metal entries are
    never compiled here)."""
    root = kernels.source_root()
    bodies = "\n".join(p.read_text() for p in (root / "kernels").glob("*.inc"))
    params = {}
    for m in re.finditer(r"LT_FN\s+[\w ]+?\s+(lt_\w+)\(([^)]*)\)\s*\{", bodies):
        params[m.group(1)] = [" ".join(a.split()) for a in m.group(2).split(",")]
    checked = 0
    for stem in ("conv", "coords", "points", "pool", "relations"):
        for name, e in kernels.entries("metal", stem).items():
            atomic = name in kernels._METAL_ATOMIC
            for call in re.finditer(r"\b(lt_\w+)\(", e.source):
                if call.group(1) not in params:
                    continue
                args = _call_args(e.source, call.end() - 1)
                assert len(args) == len(params[call.group(1)]), (name, call.group(1))
                for arg, param in zip(args, params[call.group(1)], strict=True):
                    cast = re.fullmatch(r"reinterpret_cast<.*>\((\w+)\)", arg)
                    out = cast.group(1) if cast else arg
                    if out not in e.outputs:
                        continue
                    takes_atomic = "lt_atomic_" in param
                    if cast:
                        assert atomic and not takes_atomic, (name, arg, param)
                    else:
                        assert takes_atomic == atomic, (name, arg, param)
                    checked += 1
    assert checked >= 18  # outputs that reach a shared body today: fewer means the parse missed some


def test_entry_parser_rejects_malformed_blocks():
    with pytest.raises(ValueError, match="no //@outputs"):
        kernels.parse_entries("//@kernel a\n//@inputs x\n//@uses coords\nbody;\n", "t.cu")
    with pytest.raises(ValueError, match="unknown tag"):
        kernels.parse_entries("//@kernel a\n//@bogus x\n", "t.cu")


@needs_cuda
@pytest.mark.parametrize("seed", [0, 1])
def test_gpu_dedup_and_downsample_match_the_cpu_order(seed):
    c = _coords(seed)
    dup = np.concatenate([c, c[::3], c[5:40]])
    out, inv, _ = cuda_coords.unique_rows(mx.array(dup))
    _, first = np.unique(dup, axis=0, return_index=True)
    ref = dup[np.sort(first)]
    np.testing.assert_array_equal(np.array(out), ref)
    np.testing.assert_array_equal(np.array(out)[np.array(inv)], dup)
    for stride in [(2, 2, 2), (3, 1, 2)]:
        x_gpu, x_cpu = _pair(c)
        kg = cuda_coords.downsample_set(x_gpu.coord_manager, x_gpu.coord_key, stride)
        kc = x_cpu.coord_manager.downsample(x_cpu.coord_key, stride)
        np.testing.assert_array_equal(
            np.array(x_gpu.coord_manager.coords(kg)), np.array(x_cpu.coord_manager.coords(kc))
        )


@needs_cuda
def test_tensors_made_on_the_gpu_are_checked_there_and_keep_the_cpu_errors():
    c = _coords(12)
    with mx.stream(mx.gpu):
        x = lattice.SparseTensor(mx.array(c), mx.ones((len(c), 2)))
    if mx.default_device() == mx.gpu:
        assert x.coord_key.id in x.coord_manager._gpu_tables  # hashed on the GPU, no CPU table yet
    np.testing.assert_array_equal(np.array(x.coord_manager.table(x.coord_key).coords), c)
    dup = np.concatenate([c, c[3:4]])
    with pytest.raises(ValueError, match="duplicate active coordinates: rows 3 and"):
        lattice.SparseTensor(dup, mx.ones((len(dup), 2)))
    neg = c.copy()
    neg[5, 0] = -1
    with pytest.raises(ValueError, match="batch indices must be non-negative"):
        lattice.SparseTensor(neg, mx.ones((len(neg), 2)))
    t, ok = cuda_coords.build_checked_table(mx.array(dup))
    assert not ok and t.size == len(dup)


@needs_cuda
@pytest.mark.parametrize("n", [1, 255, 256, 257, 5000])
@pytest.mark.parametrize("layout", ["random", "extremes", "duplicate_last", "duplicate_first"])
def test_checked_insert_kernel_against_numpy(n, layout):
    """The table insert with the set's numbers (duplicate flag, per-column min and max)
    against NumPy, on partial and whole groups, negative and int32-extreme values, a repeat
    in the first and in the last group; its table finds every row as build_table's does."""
    rng = np.random.default_rng(n)
    c = np.unique(rng.integers(-50, 50, size=(n + 64, 4)).astype(np.int32), axis=0)[:n]
    c[:, 0] = np.abs(c[:, 0]) % 3
    if layout == "extremes":
        c[0, 1:] = np.iinfo(np.int32).min
        c[-1, 1:] = np.iinfo(np.int32).max
        c[len(c) // 2, 0] = -7
        c = np.unique(c, axis=0)
    if layout.startswith("duplicate") and len(c) > 1:
        src = 0 if layout == "duplicate_first" else len(c) - 2
        c = (
            np.concatenate([c, c[src : src + 1]])
            if layout == "duplicate_last"
            else np.concatenate([c[:1], c])
        )
    t, dup, lo, hi = cuda_coords.table_with_stats(mx.array(c))
    assert dup == (len(np.unique(c, axis=0)) < len(c))
    assert lo == c.min(axis=0).tolist() and hi == c.max(axis=0).tolist()
    plain = cuda_coords.build_table(mx.array(c))
    assert t.mask == plain.mask
    np.testing.assert_array_equal(np.array(cuda_coords._owners(t)), np.array(cuda_coords._owners(plain)))


@needs_cuda
def test_gpu_table_on_empty_and_single_sets():
    out, inv, _ = cuda_coords.unique_rows(mx.zeros((0, 4), dtype=mx.int32))
    assert out.shape == (0, 4) and inv.shape == (0,)
    t = cuda_coords.build_table(mx.array([[0, 5, -3, 7]], dtype=mx.int32))
    m = cuda_relations.submanifold_map(t, KernelSpec(3, op="t").offsets())
    expect = -np.ones((1, 27), np.int32)
    expect[0, 13] = 0
    np.testing.assert_array_equal(np.array(m), expect)


RELATIONS = [
    ("submanifold k3", "submanifold", dict(kernel_size=3)),
    ("submanifold k3 d2", "submanifold", dict(kernel_size=3, dilation=2)),
    ("submanifold k5", "submanifold", dict(kernel_size=5)),
    ("forward k2 s2", "forward", dict(kernel_size=2, stride=2)),
    ("forward k3 s2 p1", "forward", dict(kernel_size=3, stride=2, padding=1)),
    ("forward k3 s1", "forward", dict(kernel_size=3, stride=1, padding=1)),
    ("transposed k2 s2", "transposed", dict(kernel_size=2, stride=2)),
    ("transposed k3 s2 p1", "transposed", dict(kernel_size=3, stride=2, padding=1)),
    ("generative k2 s2", "generative", dict(kernel_size=2, stride=2)),
]


@needs_cuda
@pytest.mark.parametrize("name, kind, kw", RELATIONS)
@pytest.mark.parametrize("seed", [0, 3])
def test_gpu_relations_equal_the_cpu_relations(name, kind, kw, seed):
    c = _coords(seed)
    if kind in ("transposed", "generative"):
        c = c.copy()
        c[:, 1:] = c[:, 1:] // 2  # a coarse level to go up from
        c = np.unique(c, axis=0)
    x_gpu, x_cpu = _pair(c)
    spec = KernelSpec(
        kw.get("kernel_size"), kw.get("stride", 1), kw.get("padding", 0), kw.get("dilation", 1), op=name
    )
    level = (2, 2, 2) if kind in ("transposed", "generative") else (1, 1, 1)
    rels = []
    for x, dev in ((x_gpu, "gpu"), (x_cpu, "cpu")):
        m = x.coord_manager
        key = m.insert(np.array(x.coords), level) if level != (1, 1, 1) else x.coord_key
        rels.append(m.relation(kind, key, spec, device=dev))
    g, r = rels
    assert g.route.backend == "cuda" and r.route.backend == "cpu"
    np.testing.assert_array_equal(np.array(g.out_coords), np.array(r.out_coords))
    assert _edge_set(g) == _edge_set(r)
    assert g.edge_count == r.edge_count
    # the map derived from CPU edges equals the map the GPU built
    np.testing.assert_array_equal(np.array(g.neighbor_map), np.array(r.neighbor_map))
    inv = np.array(cuda_relations.in_major_map(g))
    nm = np.array(g.neighbor_map)
    for o, k in zip(*np.nonzero(nm >= 0), strict=True):
        assert inv[nm[o, k], k] == o


@needs_cuda
def test_gpu_relation_onto_an_explicit_target():
    c = _coords(5)
    x_gpu, x_cpu = _pair(c)
    target = np.unique(np.concatenate([c[::2, :1], c[::2, 1:] // 2], axis=1), axis=0)[::-1].copy()
    spec = KernelSpec(3, 2, 1, op="t")
    rels = []
    for x, dev in ((x_gpu, "gpu"), (x_cpu, "cpu")):
        m = x.coord_manager
        tk = m.insert(target, (2, 2, 2))
        rels.append(m.relation("target", x.coord_key, spec, tk, device=dev))
    assert _edge_set(rels[0]) == _edge_set(rels[1])


@needs_cuda
@pytest.mark.parametrize("stride", [(2, 2, 2), (2, 1, 4), (4, 4, 4)])
@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("n", [0, 2000])
def test_cell_maps_equal_the_probed_maps_both_ways(stride, lazy, n):
    """Kernel == stride between a set and its downsample: the map from the downsample's
    inverse (cuda.cell_map) equals the map probing the table (probe_map), forward onto the
    downsample and back onto the set (transposed and generative); exact and lazily counted
    sets (spare rows stay -1), a batch with an empty member, an empty set."""
    from lattice.core.coordinates import CoordinateManager

    c = _coords(7, n=n, span=12) if n else np.zeros((0, 4), np.int32)
    m = CoordinateManager(lazy_rows=lazy)
    key = m.insert(mx.array(c))
    spec = KernelSpec(stride, stride, 0, 1, op="cell_map")
    down = m.relation("forward", key, spec, device="gpu")
    up = m.relation("transposed", down.out_key, spec, key, device="gpu")
    gen = m.relation("generative", down.out_key, spec, key, device="gpu")
    assert down.route.name == up.route.name == gen.route.name == "cuda.cell_map"
    assert (m.row_count(down.out_key) is not None) == (lazy and n > 0 or lazy)
    fine, coarse = cuda_coords.gpu_table(m, key), cuda_coords.gpu_table(m, down.out_key)
    offsets, pad = spec.offsets(), (0, 0, 0)
    probe_down = cuda_relations.probe_map(
        fine, m.coords(down.out_key), offsets, stride, pad, transposed=False
    )
    probe_up = cuda_relations.probe_map(coarse, m.coords(key), offsets, stride, pad, transposed=True)
    np.testing.assert_array_equal(np.asarray(down.neighbor_map), np.asarray(probe_down))
    np.testing.assert_array_equal(np.asarray(up.neighbor_map), np.asarray(probe_up))
    np.testing.assert_array_equal(np.asarray(gen.neighbor_map), np.asarray(probe_up))
    if n:
        assert int(mx.sum(down.neighbor_map >= 0)) == len(c)  # every fine row in one cell
        assert int(mx.sum(up.neighbor_map >= 0)) == len(c)


CONVS = {
    "subm": lambda x, w, d: subm_conv3d(x, w["k3"], device=d),
    "subm c_out 40": lambda x, w, d: subm_conv3d(x, w["k3_40"], device=d),
    "forward s2": lambda x, w, d: conv3d(x, w["k3"], kernel_size=3, stride=2, device=d),
    "forward k2 s2": lambda x, w, d: conv3d(x, w["k2"], kernel_size=2, stride=2, device=d),
    "transposed onto skip": lambda x, w, d: conv_transpose3d(
        conv3d(x, w["k2"], kernel_size=2, stride=2, device=d), w["k2t"], coordinates=x, device=d
    ),
    "generative": lambda x, w, d: generative_conv_transpose3d(
        conv3d(x, w["k2"], kernel_size=2, stride=2, device=d), w["k2t"], device=d
    ),
}


def _weights(cin=8, seed=2):
    rng = np.random.default_rng(seed)

    def w(k, ci, co):
        return mx.array(rng.normal(size=(co, k, k, k, ci)).astype(np.float32) * 0.3)

    return {"k3": w(3, cin, 6), "k3_40": w(3, cin, 40), "k2": w(2, cin, 6), "k2t": w(2, 6, cin)}


@needs_cuda
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
@pytest.mark.parametrize("name", list(CONVS))
def test_cuda_conv_matches_the_cpu_route(name, dtype, monkeypatch):
    monkeypatch.setenv("MLX_ENABLE_TF32", "1")  # the tensor-core paths, float32 in TF32
    c = _coords(4)
    x_gpu, x_cpu = _pair(c, c=8, dtype=dtype)
    w = _weights()
    got, ref = CONVS[name](x_gpu, w, "gpu"), CONVS[name](x_cpu, w, "cpu")
    assert lattice.explain(subm_conv3d, x_gpu, w["k3"], device="gpu").name == "cuda.implicit_gemm"
    np.testing.assert_array_equal(np.array(got.coords), np.array(ref.coords))
    a, b = np.array(got.feats.astype(mx.float32)), np.array(ref.feats.astype(mx.float32))
    tol = TOL[dtype]
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, np.abs(b).max()))


@needs_cuda
@pytest.mark.parametrize("tf32", ["1", "0"])
@pytest.mark.parametrize("c_in, c_out", [(8, 6), (40, 70), (3, 32), (32, 48), (36, 68)])
def test_cuda_conv_gradients_match_the_cpu_route(c_in, c_out, tf32, monkeypatch):
    """(32, 48) and (36, 68) take the tensor-core weight gradient under TF32 (TT 32 with a
    second column tile; TT 64 with tail tiles both ways), the others the FMA kernel."""
    monkeypatch.setenv("MLX_ENABLE_TF32", tf32)
    from lattice.backends.cuda.conv import uses_tensor_cores

    assert uses_tensor_cores(mx.float32, 8) == (tf32 == "1")
    mma = tf32 == "1" and c_in % 4 == 0 and c_out % 4 == 0
    assert cuda_conv._weight_grad_kernel(mx.float32, c_in, c_out) == (
        "conv_weight_grad_mma" if mma else "conv_weight_grad"
    )
    c = _coords(6, n=600)
    x_gpu, x_cpu = _pair(c, c=c_in)
    w = mx.array(np.random.default_rng(7).normal(size=(c_out, 3, 3, 3, c_in)).astype(np.float32) * 0.2)
    wd = mx.array(np.random.default_rng(8).normal(size=(c_out, 2, 2, 2, c_in)).astype(np.float32) * 0.2)

    def loss(x, f, W, Wd, d):
        y = subm_conv3d(x.replace(feats=f), W, device=d).feats
        z = conv3d(x.replace(feats=f), Wd, kernel_size=2, stride=2, device=d).feats
        return (y**2).sum() + (z**3).sum()

    g = mx.grad(lambda f, W, Wd: loss(x_gpu, f, W, Wd, "gpu"), argnums=(0, 1, 2))(x_gpu.feats, w, wd)
    r = mx.grad(lambda f, W, Wd: loss(x_cpu, f, W, Wd, "cpu"), argnums=(0, 1, 2))(x_cpu.feats, w, wd)
    for a, b in zip(g, r, strict=True):
        b = np.array(b)
        np.testing.assert_allclose(np.array(a), b, rtol=2e-3, atol=2e-3 * max(1.0, float(np.abs(b).max())))


@needs_cuda
@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
@pytest.mark.parametrize("c_in, c_out", [(16, 24), (8, 70), (5, 8)])
def test_cuda_conv_gradients_in_half_precision(dtype, c_in, c_out):
    """16-bit features with C_in % 8 == 0 run on tensor cores (forward and input gradient)."""
    from lattice.backends.cuda.conv import uses_tensor_cores

    assert uses_tensor_cores(dtype, c_in) == (c_in % 8 == 0)
    assert not uses_tensor_cores(mx.float32, 6)
    c = _coords(10, n=600)
    x_gpu, x_cpu = _pair(c, c=c_in, dtype=dtype)
    w = mx.array(np.random.default_rng(11).normal(size=(c_out, 3, 3, 3, c_in)).astype(np.float32) * 0.2)

    def loss(x, f, W, d):
        return (subm_conv3d(x.replace(feats=f), W, device=d).feats.astype(mx.float32) ** 2).sum()

    g = mx.grad(lambda f, W: loss(x_gpu, f, W, "gpu"), argnums=(0, 1))(x_gpu.feats, w)
    r = mx.grad(lambda f, W: loss(x_cpu, f, W, "cpu"), argnums=(0, 1))(x_cpu.feats, w)
    tol = TOL[dtype]
    for a, b in zip(g, r, strict=True):
        b = np.array(b.astype(mx.float32))
        np.testing.assert_allclose(
            np.array(a.astype(mx.float32)), b, rtol=tol, atol=tol * max(1.0, float(np.abs(b).max()))
        )


@needs_cuda
def test_cuda_conv_second_derivatives_match_the_cpu_route(monkeypatch):
    monkeypatch.setenv("MLX_ENABLE_TF32", "0")
    c = _coords(13, n=300)
    x_gpu, x_cpu = _pair(c, c=4)
    w = mx.array(np.random.default_rng(14).normal(size=(3, 3, 3, 3, 4)).astype(np.float32) * 0.3)

    def inner(x, f, W, d):
        return (subm_conv3d(x.replace(feats=f), W, device=d).feats ** 2).sum()

    def outer(x, f, W, d):  # a gradient penalty: d/dW of |d inner / d f|^2
        g = mx.grad(lambda f_: inner(x, f_, W, d))(f)
        return (g**2).sum()

    g = mx.grad(lambda W: outer(x_gpu, x_gpu.feats, W, "gpu"))(w)
    r = mx.grad(lambda W: outer(x_cpu, x_cpu.feats, W, "cpu"))(w)
    b = np.array(r)
    np.testing.assert_allclose(np.array(g), b, rtol=1e-3, atol=1e-3 * float(np.abs(b).max()))


@needs_cuda
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16])
def test_cuda_tensor_core_conv_over_many_offsets_and_tiles_no_input_reaches(dtype, monkeypatch):
    """The tensor-core kernel lists each tile's used offsets (k=5: 125 offsets, four bit
    words) and pipelines 32-channel steps (C_in 40: a zero-filled tail chunk; C_out 70: two
    column tiles); a target whose far half no input reaches has whole tiles with no step
    (zeros written); above 1024 offsets (k=11) the FMA kernel takes over."""
    monkeypatch.setenv("MLX_ENABLE_TF32", "1")
    assert cuda_conv.uses_tensor_cores(dtype, 40)
    c = _coords(21, n=900, span=9)
    x_gpu, x_cpu = _pair(c, c=40, dtype=dtype)
    rng = np.random.default_rng(22)
    far = c.copy()
    far[:, 1:] += 100
    target = np.concatenate([c, far])
    tol = TOL[dtype]

    def check(got, ref):
        np.testing.assert_array_equal(np.array(got.coords), np.array(ref.coords))
        a, b = np.array(got.feats.astype(mx.float32)), np.array(ref.feats.astype(mx.float32))
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, np.abs(b).max()))
        return a

    for k in (5, 11):
        w = mx.array(rng.normal(size=(70, k, k, k, 40)).astype(np.float32) * 0.1)
        check(
            subm_conv3d(x_gpu, w, kernel_size=k, device="gpu"),
            subm_conv3d(x_cpu, w, kernel_size=k, device="cpu"),
        )
    w = mx.array(rng.normal(size=(70, 3, 3, 3, 40)).astype(np.float32) * 0.1)
    onto = [lattice.SparseTensor(target, mx.zeros((len(target), 1))) for _ in range(2)]
    a = check(
        conv3d(x_gpu, w, kernel_size=3, coordinates=onto[0], device="gpu"),
        conv3d(x_cpu, w, kernel_size=3, coordinates=onto[1], device="cpu"),
    )
    assert not a[len(c) :].any() and a[: len(c)].any()


@needs_cuda
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16])
@pytest.mark.parametrize("k", [3, 5])
def test_conv_row_order_sorts_by_offset_mask_and_leaves_results_bit_equal(k, dtype, monkeypatch):
    """row_order sorts rows by their offset mask (NumPy reference: one bit per offset up to
    32, buckets k * 32 // K beyond); the kernels give the same bits in any row order."""
    monkeypatch.setenv("MLX_ENABLE_TF32", "1")
    c = _coords(31, n=1500, span=8)
    x_gpu, _ = _pair(c, c=16, dtype=dtype)
    spec = KernelSpec(k, op="test")
    rel = x_gpu.coord_manager.relation("submanifold", x_gpu.coord_key, spec, device="gpu")
    nmap = rel.neighbor_map
    m = np.array(nmap) >= 0
    kv = m.shape[1]
    masks = np.zeros(len(m), np.uint64)
    for j in range(kv):
        masks |= m[:, j].astype(np.uint64) << np.uint64(j * 32 // kv)
    order = np.array(cuda_relations.row_order(nmap))
    assert sorted(order.tolist()) == list(range(len(m)))
    assert np.all(np.diff(masks[order].astype(np.int64)) >= 0)
    w = mx.array(np.random.default_rng(32).normal(size=(kv, 16, 24)).astype(np.float32) * 0.2).astype(dtype)
    shuffled = mx.array(np.random.default_rng(33).permutation(len(m)).astype(np.int32))
    ys = [cuda_conv._conv_kernel(x_gpu.feats, w, nmap, o) for o in (mx.array(order), shuffled)]
    np.testing.assert_array_equal(np.array(ys[0].astype(mx.float32)), np.array(ys[1].astype(mx.float32)))
    # the weight gradient skips the rows that do not read an offset (32-row chunks on the FMA
    # kernel, each row on the tensor-core one): any order, the same sums (float32 atomics: to
    # rounding), and the NumPy sum — float32 here takes the tensor-core kernel (TF32
    # products: within 1e-3 of sum |x| |dy|), float16 the FMA kernel
    dy = ys[0]
    dws = [np.array(cuda_conv._weight_grad(x_gpu.feats, dy, nmap, o)) for o in (mx.array(order), shuffled)]
    xf, dyf, nm = np.array(x_gpu.feats.astype(mx.float32)), np.array(dy.astype(mx.float32)), np.array(nmap)
    ref = rconv.map_weight_grad(xf, dyf, nm)
    tf32 = cuda_conv._weight_grad_kernel(dtype, 16, 24) == "conv_weight_grad_mma"
    assert tf32 == (dtype == mx.float32)
    scale = rconv.map_weight_grad(xf, dyf, nm, absolute=True)
    for dw in dws:
        if tf32:
            assert (np.abs(dw - ref) <= 1e-3 * scale).all()
        else:
            np.testing.assert_allclose(dw, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    # the op: rows as they are on the first convolution over the relation, sorted from the second
    dense = w.transpose(2, 0, 1).reshape(24, k, k, k, 16)
    first = subm_conv3d(x_gpu, dense, kernel_size=k, device="gpu").feats
    assert "order" not in rel.cached("row_order", dict)
    second = subm_conv3d(x_gpu, dense, kernel_size=k, device="gpu").feats
    assert "order" in rel.cached("row_order", dict)
    np.testing.assert_array_equal(np.array(first.astype(mx.float32)), np.array(second.astype(mx.float32)))
    np.testing.assert_array_equal(np.array(first.astype(mx.float32)), np.array(ys[0].astype(mx.float32)))


@needs_cuda
@pytest.mark.parametrize(
    "dtype, c_in",
    [(mx.float32, 4), (mx.float32, 8), (mx.float32, 16), (mx.float16, 8), (mx.bfloat16, 16)],
)
@pytest.mark.parametrize("k", [3, 5])
def test_tensor_core_conv_packs_narrow_inputs_offsets_into_one_step(k, c_in, dtype, monkeypatch):
    """C_in a divisor of 32 below it: the tensor-core kernel puts 32 / C_in offsets side by
    side in one 32-wide step (fixed groups; a k=5 stem's 4 channels: 8 offsets a step, the
    last group of 125 offsets short). Against the CPU route, and the same bits in any row
    order (the groups do not depend on which rows share a tile)."""
    monkeypatch.setenv("MLX_ENABLE_TF32", "1")
    assert cuda_conv.uses_tensor_cores(dtype, c_in)
    c = _coords(41, n=1200, span=8)
    x_gpu, x_cpu = _pair(c, c=c_in, dtype=dtype)
    w = mx.array(np.random.default_rng(42).normal(size=(32, k, k, k, c_in)).astype(np.float32) * 0.2)
    got = subm_conv3d(x_gpu, w.astype(dtype), kernel_size=k, device="gpu").feats
    ref = subm_conv3d(x_cpu, w.astype(dtype), kernel_size=k, device="cpu").feats
    a, b = np.array(got.astype(mx.float32)), np.array(ref.astype(mx.float32))
    tol = TOL[dtype]
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, np.abs(b).max()))
    rel = x_gpu.coord_manager.relation("submanifold", x_gpu.coord_key, KernelSpec(k), device="gpu")
    nmap = rel.neighbor_map
    wm = w.astype(dtype).reshape(32, k**3, c_in).transpose(1, 2, 0)
    orders = [cuda_relations.row_order(nmap)]
    orders.append(mx.array(np.random.default_rng(43).permutation(int(nmap.shape[0])).astype(np.int32)))
    orders.append(mx.arange(int(nmap.shape[0]), dtype=mx.int32))
    ys = [np.array(cuda_conv._conv_kernel(x_gpu.feats, wm, nmap, o).astype(mx.float32)) for o in orders]
    for y in ys[1:]:
        np.testing.assert_array_equal(y, ys[0])
    np.testing.assert_array_equal(ys[0], a)


class _Relation:
    """The part of KernelRelation that _tile_order uses: values kept by name."""

    def __init__(self):
        self.kept = {}

    def cached(self, name, make):
        if name not in self.kept:
            self.kept[name] = make()
        return self.kept[name]


def test_tile_order_sorts_a_wide_map_on_its_first_convolution(monkeypatch):
    """C_in * C_out >= 64 * 32: the rows are sorted on the first convolution over a map;
    narrower: as they are on the first, sorted from the second (kept with the relation)."""
    sorts = []

    def fake_row_order(nmap):
        sorts.append(int(nmap.shape[0]))
        return mx.array([2, 0, 1], dtype=mx.int32)

    monkeypatch.setattr(cuda_conv, "row_order", fake_row_order)
    nmap = mx.zeros((3, 27), dtype=mx.int32)
    assert cuda_conv._SORT_FIRST_WORK == 64 * 32
    for c_in, c_out in ((64, 32), (32, 64), (128, 16), (96, 96)):
        rel = _Relation()
        assert cuda_conv._tile_order(rel, "row_order", nmap, c_in, c_out).tolist() == [2, 0, 1]
        assert "order" in rel.kept["row_order"]
    assert len(sorts) == 4
    for c_in, c_out in ((63, 32), (16, 24), (1, 2047)):
        rel, before = _Relation(), len(sorts)
        assert cuda_conv._tile_order(rel, "row_order", nmap, c_in, c_out).tolist() == [0, 1, 2]
        assert "order" not in rel.kept["row_order"] and len(sorts) == before
        assert cuda_conv._tile_order(rel, "row_order", nmap, c_in, c_out).tolist() == [2, 0, 1]
        assert cuda_conv._tile_order(rel, "row_order", nmap, c_in, c_out).tolist() == [2, 0, 1]
    assert len(sorts) == 7  # once per relation


def test_weight_gradient_kernel_choice_follows_the_forward_tf32_rule(monkeypatch):
    """The tensor-core weight gradient for float32 rows of whole 16-byte pieces (C_in and
    C_out multiples of 4) while TF32 is allowed, on CUDA; everything else the FMA kernel."""
    monkeypatch.setattr(kernels, "dialect", lambda: "cuda")
    mma, fma = "conv_weight_grad_mma", "conv_weight_grad"
    monkeypatch.setenv("MLX_ENABLE_TF32", "1")
    for c_in, c_out in ((4, 36), (36, 68), (64, 64), (32, 96), (4, 4)):
        assert cuda_conv._weight_grad_kernel(mx.float32, c_in, c_out) == mma
    for c_in, c_out in ((6, 40), (36, 70), (3, 32), (32, 2)):
        assert cuda_conv._weight_grad_kernel(mx.float32, c_in, c_out) == fma
    for dtype in (mx.float16, mx.bfloat16):
        assert cuda_conv._weight_grad_kernel(dtype, 32, 32) == fma
    monkeypatch.setenv("MLX_ENABLE_TF32", "0")
    assert cuda_conv._weight_grad_kernel(mx.float32, 32, 32) == fma
    monkeypatch.setenv("MLX_ENABLE_TF32", "1")
    monkeypatch.setattr(kernels, "dialect", lambda: "metal")
    assert cuda_conv._weight_grad_kernel(mx.float32, 32, 32) == fma


def test_forward_tile_width_avoids_padded_columns():
    """32 output channels a tile up to 32, else 64 — and on the tensor-core kernel 96 or 128
    where that pads no more columns than tiles of 64, the widest of those (the rows are
    gathered once per column tile)."""
    assert [cuda_conv.tile_n(c, True) for c in (1, 32, 33, 64, 65, 70, 96, 97, 128, 160, 192, 256)] == [
        32,
        32,
        64,
        64,
        96,
        96,
        96,
        128,
        128,
        96,
        96,
        128,
    ]
    assert {cuda_conv.tile_n(c, False) for c in (33, 70, 96, 192)} == {64}


def test_tensor_core_weight_gradient_sizes_match_the_kernel_source():
    """The run length and chunk the launch assumes are the kernel's, and its stages fit
    the 48 KiB of static shared memory (a TT + 8 float row pad, the row list of (o, i)
    pairs, the per-warp counts)."""
    src = (kernels.source_root() / "kernels" / "conv.inc").read_text()
    assert f"#define LT_WGRAD_RUN {cuda_conv._WGRAD_RUN} " in src
    assert f"#define LT_WGRAD_CHUNK {cuda_conv._WGRAD_CHUNK} " in src
    assert f"static constexpr int S = TT + {cuda_conv._WGRAD_PAD};" in src
    assert [cuda_conv._wgrad_mma_stages(tt) for tt in (32, 64)] == [3, 2]
    run, chunk, pad = cuda_conv._WGRAD_RUN, cuda_conv._WGRAD_CHUNK, cuda_conv._WGRAD_PAD
    for tt in (32, 64):
        stages = cuda_conv._wgrad_mma_stages(tt) * 2 * chunk * (tt + pad) * 4
        assert stages + 2 * run * 4 + (run // 32 + 1) * 4 <= 48 * 1024


def test_weight_gradient_of_empty_inputs_is_zeros():
    for n_in, n_out in ((0, 5), (7, 0), (0, 0)):
        x, dy = mx.zeros((n_in, 8)), mx.ones((n_out, 36))
        nmap = mx.full((n_out, 27), -1, dtype=mx.int32)
        dw = cuda_conv._weight_grad(x, dy, nmap, mx.zeros((n_out,), dtype=mx.int32))
        assert dw.shape == (27, 8, 36) and dw.dtype == mx.float32
        assert not np.array(dw).any()


@needs_cuda
@pytest.mark.parametrize("tf32", ["1", "0"])
@pytest.mark.parametrize("c_in, c_out", [(4, 36), (36, 68), (64, 64), (32, 96), (6, 40)])
@pytest.mark.parametrize("k", [3, 5])
def test_weight_gradient_kernels_match_a_float64_sum(k, c_in, c_out, tf32, monkeypatch):
    """Both weight-gradient kernels against dW[k] = sum_o x[map[o, k]]^T dy[o] in float64,
    over a submanifold map (rows with no input at an offset) plus 1100 rows with no input at
    all (sorted: the whole first run of 1024 positions reads no offset), in sorted and
    shuffled row order; channel pairs with tail tiles (TT 32 and 64). Tolerance by kernel:
    TF32 products 1e-3 of sum |x| |dy|, full float32 3e-5 of it."""
    monkeypatch.setenv("MLX_ENABLE_TF32", tf32)
    mma = tf32 == "1" and c_in % 4 == 0 and c_out % 4 == 0
    name = cuda_conv._weight_grad_kernel(mx.float32, c_in, c_out)
    assert name == ("conv_weight_grad_mma" if mma else "conv_weight_grad")
    c = _coords(40 + k, n=2600, span=9)
    x_gpu, _ = _pair(c, c=c_in, seed=41)
    rel = x_gpu.coord_manager.relation("submanifold", x_gpu.coord_key, KernelSpec(k, op="test"), device="gpu")
    sub = np.array(rel.neighbor_map)
    nm = np.concatenate([sub, np.full((1100, sub.shape[1]), -1, np.int32)])
    rng = np.random.default_rng(42)
    dyf = rng.normal(size=(len(nm), c_out)).astype(np.float32)
    nmap, dy = mx.array(nm), mx.array(dyf)
    sorted_rows = cuda_relations.row_order(nmap)
    assert not (nm[np.array(sorted_rows)[:1024]] >= 0).any()  # the first run lists no row
    shuffled = mx.array(rng.permutation(len(nm)).astype(np.int32))
    xf = np.array(x_gpu.feats)
    ref = rconv.map_weight_grad(xf, dyf, nm)
    scale = rconv.map_weight_grad(xf, dyf, nm, absolute=True)
    tol = 1e-3 if mma else 3e-5
    for order in (sorted_rows, shuffled):
        dw = cuda_conv._weight_grad(x_gpu.feats, dy, nmap, order)
        assert dw.shape == ref.shape and dw.dtype == mx.float32
        err = np.abs(np.array(dw).astype(np.float64) - ref)
        worst = np.unravel_index(np.argmax(err - tol * scale), err.shape)
        assert (err <= tol * scale + 1e-30).all(), (name, worst, err[worst], scale[worst])


@needs_cuda
def test_a_wide_first_convolution_sorts_its_rows_and_gives_the_unsorted_bits(monkeypatch):
    """A fresh relation's first convolution sorts its rows when C_in * C_out >= 64 * 32
    (its state holds the order after one call), a narrower one does not; both give the
    bits of the kernel over the rows as they are."""
    monkeypatch.setenv("MLX_ENABLE_TF32", "1")
    c = _coords(36, n=1500, span=8)
    rng = np.random.default_rng(37)
    for c_in, c_out, wide in ((64, 32, True), (32, 96, True), (16, 24, False), (60, 32, False)):
        x_gpu, _ = _pair(c, c=c_in, seed=38)  # its own manager: a fresh relation
        spec = KernelSpec(3, op="test")
        rel = x_gpu.coord_manager.relation("submanifold", x_gpu.coord_key, spec, device="gpu")
        w = mx.array(rng.normal(size=(27, c_in, c_out)).astype(np.float32) * 0.2)
        dense = w.transpose(2, 0, 1).reshape(c_out, 3, 3, 3, c_in)
        y = subm_conv3d(x_gpu, dense, kernel_size=3, device="gpu").feats
        state = rel.cached("row_order", dict)
        assert ("order" in state) == wide, (c_in, c_out)
        assert bool(state.get("used")) == (not wide)
        n = int(rel.neighbor_map.shape[0])
        plain = cuda_conv._conv_kernel(x_gpu.feats, w, rel.neighbor_map, mx.arange(n, dtype=mx.int32))
        np.testing.assert_array_equal(np.array(y), np.array(plain))


# (TM, TN, P) of the tensor-core forward kernel: both row tiles, every column tile, 2 to 4 stages
_MMA_SHAPES = [
    (64, 32, 2),
    (64, 64, 3),
    (64, 96, 4),
    (64, 128, 2),
    (128, 32, 4),
    (128, 64, 3),
    (128, 96, 2),
    (128, 128, 3),
]


@needs_cuda
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
@pytest.mark.parametrize("k, c_in, c_out", [(5, 8, 24), (3, 40, 70), (3, 64, 130)])
def test_tensor_core_tile_shapes_give_the_same_bits(k, c_in, c_out, dtype, monkeypatch):
    """The tensor-core forward kernel with tiles of 64 or 128 rows (128: two m16 tiles a warp),
    32 to 128 columns and 2 to 4 stages in dynamic shared memory gives the bits of the
    default shape (each row sums the same steps in order whatever tile it lands in) and the
    float64 sum within TF32 / bfloat16 rounding, with and (float32) without the fused
    epilogue; rows in several tiles of 128 and a partial one, a batch with an empty member,
    a k=5 map of 8 channels (grouped offsets), a tail channel chunk, three column tiles."""
    monkeypatch.setenv("MLX_ENABLE_TF32", "1")
    assert cuda_conv.uses_tensor_cores(dtype, c_in)
    c = _coords(51, n=1700, span=9)
    x_gpu, _ = _pair(c, c=c_in, dtype=dtype, seed=52)
    rel = x_gpu.coord_manager.relation("submanifold", x_gpu.coord_key, KernelSpec(k), device="gpu")
    nmap = rel.neighbor_map
    n, kv = int(nmap.shape[0]), int(nmap.shape[1])
    assert n > 3 * 128 and n % 128
    rng = np.random.default_rng(53)
    w = mx.array(rng.normal(size=(kv, c_in, c_out)).astype(np.float32) * 0.2).astype(dtype)
    order = cuda_relations.row_order(nmap)
    scale = mx.array(rng.normal(size=c_out).astype(np.float32))
    shift = mx.array(rng.normal(size=c_out).astype(np.float32))
    residual = mx.array(rng.normal(size=(n, c_out)).astype(np.float32))
    concat = mx.array(rng.normal(size=(n, 12)).astype(np.float32))
    epilogue = (scale, shift, residual, True, concat)

    def run(shape):
        if shape is not None:
            monkeypatch.setattr(cuda_conv, "_mma_config", lambda *_: shape)
        y = np.array(cuda_conv._conv_kernel(x_gpu.feats, w, nmap, order).astype(mx.float32))
        if dtype != mx.float32:
            return y, None
        return y, np.array(cuda_conv._conv_kernel(x_gpu.feats, w, nmap, order, epilogue))

    base, fused = run(None)
    xf, wf, nm = np.array(x_gpu.feats.astype(mx.float32)), np.array(w.astype(mx.float32)), np.array(nmap)
    ref, size = rconv.map_conv(xf, wf, nm), rconv.map_conv(np.abs(xf), np.abs(wf), nm)
    rel_tol = 1e-3 if dtype == mx.float32 else 8e-3  # TF32 products, or a bfloat16 output
    assert (np.abs(base - ref) <= rel_tol * size + 1e-6).all()
    if fused is not None:
        act = np.maximum(ref * np.array(scale) + np.array(shift) + np.array(residual), 0)
        assert (np.abs(fused[:, :c_out] - act) <= 1e-3 * size * np.abs(np.array(scale)) + 1e-5).all()
        np.testing.assert_array_equal(fused[:, c_out:], np.array(concat))
    for shape in _MMA_SHAPES:
        y, f = run(shape)
        np.testing.assert_array_equal(y, base, err_msg=str(shape))
        if f is not None:
            np.testing.assert_array_equal(f, fused, err_msg=str(shape))


def test_tensor_core_tile_shape_by_rows_and_its_shared_memory():
    """float32: 128-row tiles from _MMA_WIDE_ROWS output rows, except for grouped narrow inputs
    (C_in a divisor of 32 below it); 16-bit features: 64 rows; stages: 2 for float32, else
    as many as fit _MMA_SMEM, 2 to 4; every shape the kernel is built for fits sm_90's 227 KiB
    a group beside the static arrays."""
    for c_in in (4, 8, 16):
        assert cuda_conv._mma_config(4, c_in, 32, 10**6)[0] == 64
    for itemsize in (2, 4):
        for c_out in (16, 32, 64, 96, 128, 256):
            small = cuda_conv._mma_config(itemsize, 32, c_out, cuda_conv._MMA_WIDE_ROWS - 1)
            wide = cuda_conv._mma_config(itemsize, 40, c_out, cuda_conv._MMA_WIDE_ROWS)
            assert small[0] == 64 and wide[0] == (128 if itemsize == 4 else 64)
            for tm, tn, stages in (small, wide):
                assert tn == cuda_conv.tile_n(c_out, True) and 2 <= stages <= 4
                assert itemsize == 2 or stages == 2
                assert cuda_conv.mma_shared_bytes(itemsize, tm, tn, stages) <= max(
                    cuda_conv._MMA_SMEM, cuda_conv.mma_shared_bytes(itemsize, tm, tn, 2)
                )
    for tm, tn, stages in _MMA_SHAPES:
        static = 4 * tm + 2 * 1024 + 4 * 33
        assert cuda_conv.mma_shared_bytes(4, tm, tn, stages) + static <= 227 * 1024
    assert cuda_conv.mma_shared_bytes(4, 128, 96, 3) == 3 * (128 + 96) * 36 * 4


@needs_cuda
def test_cuda_conv_on_empty_inputs_and_a_batch_with_an_empty_member():
    w = _weights()
    empty = lattice.SparseTensor(np.zeros((0, 4), np.int32), mx.zeros((0, 8)))
    assert subm_conv3d(empty, w["k3"], device="gpu").feats.shape == (0, 6)
    assert conv3d(empty, w["k2"], kernel_size=2, stride=2, device="gpu").feats.shape == (0, 6)
    one = lattice.SparseTensor(np.array([[1, 3, 3, 3]], np.int32), mx.ones((1, 8)))
    y = subm_conv3d(one, w["k3"], device="gpu")
    ref = np.ones((1, 8), np.float32) @ np.array(w["k3"])[:, 1, 1, 1, :].T
    np.testing.assert_allclose(np.array(y.feats), ref, rtol=2e-3, atol=2e-3)  # TF32


@needs_cuda
@pytest.mark.parametrize("mode", ["sum", "max", "avg"])
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16])
def test_cuda_pool_kernel_matches_the_cpu_pooling(mode, dtype):
    c = _coords(9, n=700)
    x_gpu, x_cpu = _pair(c, c=5, dtype=dtype)
    f = np.array(x_cpu.feats.astype(mx.float32))
    f[::7] = np.round(f[::7])  # ties for max
    x_gpu, x_cpu = (
        x_gpu.replace(feats=mx.array(f).astype(dtype)),
        x_cpu.replace(feats=mx.array(f).astype(dtype)),
    )
    spec = KernelSpec(3, 2, 0, op="pool")
    rel = x_gpu.coord_manager.relation("forward", x_gpu.coord_key, spec, device="gpu")
    y, arg = cuda_pool.pool(x_gpu.feats, rel.neighbor_map, mode)
    ref = getattr(lattice.ops, f"{mode}_pool3d")(x_cpu, kernel_size=3, stride=2, device="cpu")
    np.testing.assert_array_equal(np.array(rel.out_coords), np.array(ref.coords))
    tol = TOL[dtype]
    np.testing.assert_allclose(
        np.array(y.astype(mx.float32)), np.array(ref.feats.astype(mx.float32)), rtol=tol, atol=tol
    )
    if mode == "max":
        nm = np.array(rel.neighbor_map)
        a = np.array(arg)
        xf = np.array(x_gpu.feats.astype(mx.float32))
        for o in range(0, nm.shape[0], 17):
            rows = nm[o][nm[o] >= 0]
            for ch in range(5):
                v = xf[rows, ch]
                assert a[o, ch] == rows[v == v.max()].min()


@needs_cuda
@pytest.mark.parametrize("mode", ["sum", "max", "avg"])
@pytest.mark.parametrize("k, s", [(2, 2), (3, 2)])
def test_cuda_map_pool_and_its_gradient_match_the_cpu_pooling(mode, k, s):
    c = _coords(15, n=700)
    x_gpu, x_cpu = _pair(c, c=6)
    f = np.array(x_cpu.feats)
    f[::5] = np.round(f[::5])  # ties for max
    x_gpu, x_cpu = x_gpu.replace(feats=mx.array(f)), x_cpu.replace(feats=mx.array(f))
    spec = KernelSpec(k, s, 0, op="pool")
    rel = x_gpu.coord_manager.relation("forward", x_gpu.coord_key, spec, device="gpu")
    op = getattr(lattice.ops, f"{mode}_pool3d")
    ref = op(x_cpu, kernel_size=k, stride=s, device="cpu")
    y = cuda_pool.map_pool(x_gpu.feats, rel, mode)
    np.testing.assert_allclose(np.array(y), np.array(ref.feats), rtol=1e-5, atol=1e-5)
    wt = mx.array(np.random.default_rng(16).normal(size=(rel.out_count, 6)).astype(np.float32))
    g = mx.grad(lambda v: (cuda_pool.map_pool(v, rel, mode) * wt).sum())(x_gpu.feats)
    r = mx.grad(
        lambda v: (op(x_cpu.replace(feats=v), kernel_size=k, stride=s, device="cpu").feats * wt).sum()
    )(x_cpu.feats)
    np.testing.assert_allclose(np.array(g), np.array(r), rtol=1e-5, atol=1e-5)


def test_kernel_index_range_is_checked_before_launch():
    cuda_launch.check_index_range("implicit_gemm", features=2**31 - 1, output=10)
    with pytest.raises(
        ValueError, match=r"\[implicit_gemm\] output has 2,147,483,648 elements; .* below 2\^31"
    ):
        cuda_launch.check_index_range("implicit_gemm", features=10, output=2**31)


UPSAMPLES = {  # id: (level of the coarse rows, op, arguments)
    "transpose": ((2, 2, 2), "pool_transpose3d", {"kernel_size": 3, "stride": 2}),
    "trilinear": ((2, 2, 2), "trilinear_upsample3d", {"stride": 2}),
    "trilinear_anisotropic": ((2, 3, 1), "trilinear_upsample3d", {"stride": (2, 3, 1)}),
}


@needs_cuda
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16])
@pytest.mark.parametrize("target", [False, True])
@pytest.mark.parametrize("name", list(UPSAMPLES))
def test_cuda_upsampling_and_its_gradient_match_the_cpu_route(name, target, dtype):
    """Coarse rows at stride ``level`` upsampled to stride 1: generated support or an explicit target."""
    level, op_name, kw = UPSAMPLES[name]

    def op(x, t, dev):
        return getattr(lattice.ops, op_name)(x, t, **kw, device=dev)

    coarse = _coords(21, n=500)
    f = np.random.default_rng(22).normal(size=(len(coarse), 6)).astype(np.float32)
    fine = _coords(23, n=1500, span=14)
    x_gpu, x_cpu = (lattice.SparseTensor(coarse, mx.array(f).astype(dtype), stride=level) for _ in "ab")
    t_gpu, t_cpu = (lattice.SparseTensor(fine, mx.zeros((len(fine), 1))) if target else None for _ in "ab")
    assert lattice.explain(op_name, x_gpu, **kw, device="gpu").name == "cuda.map_pool"
    y = op(x_gpu, t_gpu, "gpu")
    ref = op(x_cpu, t_cpu, "cpu")
    np.testing.assert_array_equal(np.array(y.coords), np.array(ref.coords))
    tol = TOL[dtype]
    np.testing.assert_allclose(
        np.array(y.feats.astype(mx.float32)), np.array(ref.feats.astype(mx.float32)), rtol=tol, atol=tol
    )
    wt = mx.array(np.random.default_rng(24).normal(size=tuple(ref.feats.shape)).astype(np.float32))

    def loss(v, x, t, dev):
        return (op(x.replace(feats=v), t, dev).feats.astype(mx.float32) * wt).sum()

    g = mx.grad(loss)(x_gpu.feats, x_gpu, t_gpu, "gpu")
    r = mx.grad(loss)(x_cpu.feats, x_cpu, t_cpu, "cpu")
    np.testing.assert_allclose(
        np.array(g.astype(mx.float32)), np.array(r.astype(mx.float32)), rtol=tol, atol=tol
    )


def _global_inputs(seed, n, c, grouped, members):
    rng = np.random.default_rng(seed)
    b = rng.choice(members, n)
    if grouped:
        b = np.sort(b)
    xyz = rng.permutation(np.arange(n * 3).reshape(n, 3))  # unique rows
    coords = np.concatenate([b[:, None], xyz], axis=1).astype(np.int32)
    f = rng.normal(size=(n, c)).astype(np.float32)
    f[::9] = np.round(f[::9])  # ties
    f[rng.integers(0, n, 3), 1] = f.max() + 1  # one channel tied at the maximum in several rows
    return coords, f


@needs_cuda
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
@pytest.mark.parametrize("mode", ["sum", "max", "avg"])
@pytest.mark.parametrize("grouped", [True, False])
def test_cuda_global_pooling_and_its_gradient_match_the_cpu_route(mode, dtype, grouped):
    # sum / avg: member 1 empty and two trailing empty members; max needs rows in each member
    coords, f = _global_inputs(30, 3000, 7, grouped, [0, 1, 2] if mode == "max" else [0, 2, 3])
    x_gpu, x_cpu = (lattice.SparseTensor(coords, mx.array(f).astype(dtype)) for _ in "ab")
    size = None if mode == "max" else 6
    assert lattice.explain("global_pool", x_gpu, mode=mode, device="gpu").name == "cuda.batch_atomic_reduce"
    y = lattice.ops.global_pool(x_gpu, mode=mode, batch_size=size, device="gpu")
    ref = lattice.ops.global_pool(x_cpu, mode=mode, batch_size=size, device="cpu")
    assert y.dtype == ref.dtype and y.shape == ref.shape
    tol = 0 if mode == "max" else TOL[dtype]
    np.testing.assert_allclose(
        np.array(y.astype(mx.float32)), np.array(ref.astype(mx.float32)), rtol=tol, atol=tol
    )
    wt = mx.array(np.random.default_rng(31).normal(size=tuple(ref.shape)).astype(np.float32))

    def loss(v, x, dev):
        out = lattice.ops.global_pool(x.replace(feats=v), mode=mode, batch_size=size, device=dev)
        return (out.astype(mx.float32) * wt).sum()

    g = mx.grad(loss)(x_gpu.feats, x_gpu, "gpu")
    r = mx.grad(loss)(x_cpu.feats, x_cpu, "cpu")
    np.testing.assert_allclose(
        np.array(g.astype(mx.float32)), np.array(r.astype(mx.float32)), rtol=TOL[dtype], atol=TOL[dtype]
    )


@needs_cuda
def test_cuda_global_max_takes_nan_as_largest_and_the_smallest_tied_row():
    coords = np.array([[0, i, 0, 0] for i in range(6)] + [[1, i, 1, 0] for i in range(4)], np.int32)
    f = np.array(
        [
            [1, -0.0],
            [3, 0.0],
            [3, np.nan],
            [2, np.nan],
            [-1, 5],
            [3, 1],
            [-np.inf, -2],
            [-np.inf, -2],
            [-5, -np.inf],
            [-np.inf, -3],
        ],
        np.float32,
    )
    x = lattice.SparseTensor(coords, mx.array(f))
    arg = np.array(cuda_pool._global_argmax(x.feats, x.batch_indices, 2))
    np.testing.assert_array_equal(arg, [[1, 2], [8, 6]])
    y = np.array(lattice.ops.global_max_pool(x, device="gpu"))
    ref = np.array(lattice.ops.global_max_pool(x, device="cpu"))
    np.testing.assert_array_equal(y, ref)


@needs_cuda
def test_cuda_global_and_upsampling_on_empty_inputs():
    e = lattice.SparseTensor(np.zeros((0, 4), np.int32), mx.zeros((0, 3)))
    assert lattice.ops.global_sum_pool(e, batch_size=2, device="gpu").tolist() == [[0.0] * 3] * 2
    assert lattice.ops.global_avg_pool(e, device="gpu").shape == (0, 3)
    up = lattice.ops.pool_transpose3d(
        lattice.SparseTensor(np.zeros((0, 4), np.int32), mx.zeros((0, 3)), stride=2), device="gpu"
    )
    assert up.feats.shape == (0, 3)


def test_checked_insert_group_matches_the_kernel_source():
    """table_insert_checked reduces over LT_CHECK_GROUP threads: the launch's group size."""
    from lattice.backends import kernels

    src = (kernels.source_root() / "kernels" / "coords.inc").read_text()
    assert f"#define LT_CHECK_GROUP {cuda_coords._CHECK_GROUP}\n" in src
    assert cuda_launch.THREADS == cuda_coords._CHECK_GROUP
