"""Routing layer: routes are pure values, ops run the route explain reports."""

from __future__ import annotations

import json
from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest
from conftest import cpu_conv_route
from typer.testing import CliRunner

import lattice
from lattice.backends import kernels
from lattice.backends.cuda import conv as cuda_conv
from lattice.ops import conv3d, conv_transpose3d, subm_conv3d
from lattice.routing import Capability, ConvRequest, LinearRequest, Tier, route_conv, route_linear
from lattice.routing.conv import CONV
from lattice_cli.main import app


def _tensor(n=200, c=4, seed=0):
    rng = np.random.default_rng(seed)
    xyz = np.unique(rng.integers(0, 12, (n, 3)), axis=0)
    coords = np.concatenate([np.zeros((len(xyz), 1), np.int64), xyz], axis=1)
    return lattice.SparseTensor(coords, mx.array(rng.normal(size=(len(xyz), c)).astype(np.float32)))


def _req(**kw):
    base = dict(
        op="conv3d",
        kind="forward",
        dtype="float32",
        c_in=8,
        c_out=8,
        kernel_volume=27,
        identity_relation=False,
        n_in=10,
        n_out=10,
        edges=30,
    )
    return ConvRequest(**(base | kw))


BLAS_CPU = Capability((Tier.CPU,), ("cpu",))  # cpu_gemm "blas": no lattice GEMM kernel
AVX2_CPU = Capability((Tier.CPU,), ("cpu",), cpu_gemm="avx2", cpu_gemm_reason="the CPU runs avx2")


def test_route_is_a_pure_value():
    a, b = route_conv(_req(), BLAS_CPU), route_conv(_req(), BLAS_CPU)
    assert a == b and a.name == "cpu.gather_gemm_scatter"
    assert [r.algorithm for r in a.rejected] == ["pointwise_gemm", "tiled_gemm"]
    assert route_conv(_req()) == route_conv(_req()) and route_conv(_req()).name == cpu_conv_route()


def test_cpu_relation_conv_takes_lattices_gemm_kernel_where_the_cpu_runs_one():
    route = route_conv(_req(), AVX2_CPU)
    assert route.name == "cpu.tiled_gemm" and route.facts["cpu_gemm"] == "avx2"
    assert [r.algorithm for r in route.rejected] == ["pointwise_gemm", "gather_gemm_scatter"]
    assert "avx2" in route.reason and "the CPU runs avx2" in route.rejected[1].predicate
    assert route_conv(_req(kernel_volume=1, identity_relation=True), AVX2_CPU).name == "cpu.pointwise_gemm"
    packed = _req(weight_layout="packed", packing="int8, group 32, float16 scales")
    assert route_conv(packed, AVX2_CPU).name == "cpu.dequant_tiled_gemm"
    assert route_conv(packed, BLAS_CPU).name == "cpu.dequant_gather_gemm_scatter"


def test_rounding_cpu_kernel_is_named_in_the_route_and_never_chosen_by_auto(monkeypatch):
    """``LATTICE_CPU_GEMM=avx512_bf16`` takes the same route with a fact saying the products
    round; ``auto`` takes a float32 kernel even where the CPU runs the rounding one."""
    from lattice import _ext
    from lattice.routing.device import ROUNDING_KERNELS, cpu_gemm_kernel

    bf16 = Capability(
        (Tier.CPU,), ("cpu",), cpu_gemm="avx512_bf16", cpu_gemm_reason="LATTICE_CPU_GEMM=avx512_bf16"
    )
    route = route_conv(_req(), bf16)
    assert route.name == "cpu.tiled_gemm" and route.facts["cpu_gemm"] == "avx512_bf16"
    assert (
        route.facts["products"] == ROUNDING_KERNELS["avx512_bf16"] and "every product rounds" in route.reason
    )
    assert "products" not in route_conv(_req(), AVX2_CPU).facts
    pointwise = _req(kernel_volume=1, identity_relation=True)
    assert route_conv(pointwise, bf16).name == "cpu.pointwise_tiled"
    assert route_conv(pointwise, AVX2_CPU).name == "cpu.pointwise_gemm"
    monkeypatch.delenv("LATTICE_CPU_GEMM", raising=False)
    assert cpu_gemm_kernel()[0] not in ROUNDING_KERNELS
    for rounder in ("avx512_bf16", "amx_bf16"):
        assert rounder in ROUNDING_KERNELS
        if rounder in _ext.conv_kernels():
            monkeypatch.setenv("LATTICE_CPU_GEMM", rounder)
            assert cpu_gemm_kernel() == (rounder, f"LATTICE_CPU_GEMM={rounder}")


def test_pointwise_route_only_on_identity_relations():
    assert route_conv(_req(kernel_volume=1, identity_relation=True)).name == "cpu.pointwise_gemm"
    assert (
        route_conv(_req(kernel_volume=1, identity_relation=False), BLAS_CPU).name == "cpu.gather_gemm_scatter"
    )


def test_gpu_request_takes_the_cuda_kernel_or_the_mlx_gpu_route_or_falls_back_with_reason():
    cuda = Capability((Tier.CPU, Tier.GPU_CUDA), ("cpu",), "cuda")
    route = route_conv(_req(device="gpu"), cuda)
    assert route.name == "cuda.implicit_gemm" and route.facts["tier"] == "gpu-cuda"
    assert route_conv(_req(device="gpu", kernel_volume=1, identity_relation=True), cuda).name == (
        "gpu.pointwise_matmul"
    )
    metal = Capability((Tier.CPU, Tier.GPU_METAL), ("cpu",), "metal")
    on_metal = route_conv(_req(device="gpu"), metal)
    assert on_metal.name == "gpu.gather_matmul_scatter"
    assert any(r.backend == "metal" and "never run" in r.predicate for r in on_metal.rejected)
    fallback = route_conv(_req(device="gpu"), BLAS_CPU)
    assert fallback.name == "cpu.gather_gemm_scatter"
    assert "no GPU device" in fallback.rejected[0].predicate


def test_linear_never_routes_to_mlx_matmul_on_cpu():
    route = route_linear(LinearRequest("linear", "float32", 100, 8, 8))
    assert route.name == "cpu.blas_gemm"
    assert any(r.algorithm == "mlx_matmul" for r in route.rejected)
    gpu = Capability((Tier.CPU, Tier.GPU_CUDA), ("cpu",), "cuda")
    assert (
        route_linear(LinearRequest("linear", "float32", 100, 8, 8, device="gpu"), gpu).name
        == "gpu.mlx_matmul"
    )


def test_bad_dtype_is_a_validation_error():
    with pytest.raises(ValueError, match=r"\[conv3d\] features must be one of"):
        route_conv(_req(dtype="int32"))


@pytest.mark.parametrize(
    "op, kwargs, ksize",
    [
        (subm_conv3d, {}, 3),
        (conv3d, {"kernel_size": 2, "stride": 2}, 2),
        (conv3d, {"kernel_size": 1}, 1),
    ],
)
def test_explain_reports_the_route_the_op_dispatches(monkeypatch, op, kwargs, ksize):
    x = _tensor()
    w = mx.array(np.random.default_rng(1).normal(size=(5, ksize, ksize, ksize, 4)).astype(np.float32))
    route = lattice.explain(op, x, w, **kwargs)
    called = []
    for rid, fn in list(CONV.impls.items()):
        monkeypatch.setitem(CONV.impls, rid, lambda *a, _n=rid.name, _f=fn: called.append(_n) or _f(*a))
    op(x, w, **kwargs)
    assert called == [route.name]
    assert route.facts["n_in"] == x.active_count and route.facts["edges"] > 0


@pytest.mark.usefixtures("cpu_device")
def test_explain_by_name_and_unknown_op():
    x = _tensor()
    w = mx.zeros((3, 3, 3, 3, 4))
    assert lattice.explain("subm_conv3d", x, w).name == cpu_conv_route()
    with pytest.raises(ValueError, match="unknown op"):
        lattice.explain("nope", x, w)
    with pytest.raises(ValueError, match="not an explainable"):
        lattice.explain(print, x)


def test_explain_transposed_reports_generated_support():
    x = _tensor()
    coarse = conv3d(x, mx.zeros((4, 2, 2, 2, 4)), kernel_size=2, stride=2)
    route = lattice.explain(conv_transpose3d, coarse, mx.zeros((4, 2, 2, 2, 4)), kernel_size=2, stride=2)
    assert route.facts["kind"] == "transposed"
    assert route.facts["n_out"] == 8 * coarse.active_count  # every offset generates a distinct row


@pytest.mark.usefixtures("cpu_device")
def test_relations_carry_their_route():
    x = _tensor()
    rel = lattice.ops.submanifold_kernel_relation(x)
    assert rel.route.name == "cpu.merge_relation_submanifold"
    rel = lattice.ops.submanifold_kernel_relation(_tensor(), kernel_size=(3, 3, 1))  # nothing cached
    assert rel.route.name == "cpu.hash_relation_symmetric"


def test_submanifold_merge_route_by_volume_and_z_dilation():
    """The merge builder from 27 offsets with a z dilation up to 4; the probes otherwise, the
    merge rejected with the predicate it failed."""
    from lattice.routing.relations import (
        MERGE_MAX_Z_DILATION,
        MERGE_MIN_VOLUME,
        RelationRequest,
        route_relation,
    )

    def route(volume, z_dilation=1):
        req = RelationRequest(
            "submanifold_kernel_relation", "submanifold", 100, volume, z_dilation=z_dilation
        )
        return route_relation(req, Capability((Tier.CPU,), ("cpu",)))

    assert (
        route(MERGE_MIN_VOLUME).name
        == route(125, MERGE_MAX_Z_DILATION).name
        == "cpu.merge_relation_submanifold"
    )
    for probed in (route(MERGE_MIN_VOLUME - 1), route(27, MERGE_MAX_Z_DILATION + 1)):
        assert probed.name == "cpu.hash_relation_symmetric"
        assert [r.algorithm for r in probed.rejected][-1] == "merge_relation_submanifold"
    assert route(27, 5).facts["z_dilation"] == 5


runner = CliRunner()


@pytest.mark.usefixtures("cpu_device")
def test_cli_explain_synthetic_json():
    res = runner.invoke(app, ["explain", "subm_conv3d", "--channels", "8,16", "--rows", "2000", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["route"] == cpu_conv_route()
    assert out["facts"]["channels"] == "8->16" and out["facts"]["n_in"] == 2000


def test_cli_explain_table_lists_rejected_routes():
    res = runner.invoke(app, ["explain", "conv3d", "-k", "1", "--rows", "500", "--device", "gpu"])
    if not lattice.backend_info().gpu:  # asking for a GPU that is not there is an error, not a CPU answer
        assert res.exit_code == 1 and "--device gpu: no GPU is available" in res.stderr, res.output
        res = runner.invoke(app, ["explain", "conv3d", "-k", "1", "--rows", "500"])
    assert res.exit_code == 0, res.output
    if lattice.backend_info().gpu:
        # with a GPU the 1x1x1 conv is one GPU matmul; the table names the tier
        assert "gpu.pointwise_matmul" in res.stdout and "tier=gpu-" in res.stdout
        res = runner.invoke(app, ["explain", "subm_conv3d", "--rows", "500", "--device", "gpu"])
        assert "cuda.implicit_gemm" in res.stdout or "gpu.gather_matmul_scatter" in res.stdout
    else:
        assert "cpu.pointwise_gemm" in res.stdout
    for line in res.stdout.splitlines():  # not a terminal: whole lines, nothing wrapped at 80 columns
        assert not line.startswith(" " * 20), res.stdout
    assert any(len(line) > 80 for line in res.stdout.splitlines()) or len(res.stdout) < 400


def test_cli_explain_errors():
    res = runner.invoke(app, ["explain", "nope"])
    assert res.exit_code == 1 and "unknown op" in res.stderr
    res = runner.invoke(app, ["explain", "conv3d", "--dtype", "int8"])
    assert res.exit_code == 2
    res = runner.invoke(app, ["explain", "conv3d", "--channels", "a,b"])
    assert res.exit_code == 2


def test_cli_explain_on_a_real_scan():
    from conftest import KITTI_SCAN

    if not KITTI_SCAN.is_file():
        pytest.skip("shared data not found")
    res = runner.invoke(app, ["explain", "subm_conv3d", str(KITTI_SCAN), "--voxel-size", "0.2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["facts"]["n_in"] > 10_000 and out["facts"]["average_neighbors"] > 1.0


@pytest.mark.usefixtures("cpu_device")
def test_cli_explain_packed_weight_route():
    res = runner.invoke(
        app,
        ["explain", "subm_conv3d", "--channels", "64,64", "--quantize", "int8", "--rows", "500", "--json"],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["route"] == cpu_conv_route(packed=True)
    assert runner.invoke(app, ["explain", "subm_conv3d", "--quantize", "int3"]).exit_code == 2


@pytest.mark.usefixtures("cpu_device")
def test_non_overlapping_forward_relation_takes_the_exclusive_route_and_equals_the_general_one():
    x = _tensor(n=400)
    fast = lattice.ops.kernel_relation(x, kernel_size=2, stride=2)
    assert fast.route.name == "cpu.hash_relation_exclusive"
    # the general input-driven builder on the same target gives the same edge set
    general = lattice.ops.target_kernel_relation(x, fast.out_coords, kernel_size=2, stride=2)
    assert general.route.name == "cpu.hash_relation_input_driven"

    def edges(rel):
        return sorted(
            zip(
                np.array(rel.edges.kernel_ids).tolist(),
                np.array(rel.edges.in_rows).tolist(),
                np.array(rel.edges.out_rows).tolist(),
                strict=True,
            )
        )

    assert edges(fast) == edges(general)
    assert (
        lattice.ops.kernel_relation(x, kernel_size=3, stride=3).route.name == "cpu.hash_relation_input_driven"
    )


@pytest.mark.usefixtures("cpu_device")
def test_transposed_back_onto_the_parent_set_reverses_the_forward_relation():
    x = _tensor(n=400)
    coarse_rel = lattice.ops.kernel_relation(x, kernel_size=2, stride=2)
    coarse = lattice.SparseTensor(
        coarse_rel.out_coords,
        mx.zeros((coarse_rel.out_count, 1)),
        2,
        coord_key=coarse_rel.out_key,
        coord_manager=x.coord_manager,
    )
    up = lattice.ops.transposed_kernel_relation(coarse, x, kernel_size=2, stride=2)
    assert up.route.name == "cpu.hash_relation_exclusive"
    # the general builder onto a copy of the same rows (another key) gives the same edges
    other = lattice.ops.transposed_kernel_relation(coarse, np.array(x.coords), kernel_size=2, stride=2)
    assert other.route.name == "cpu.hash_relation_scatter"

    def edges(rel):
        return sorted(
            zip(
                np.array(rel.edges.kernel_ids).tolist(),
                np.array(rel.edges.in_rows).tolist(),
                np.array(rel.edges.out_rows).tolist(),
                strict=True,
            )
        )

    assert edges(up) == edges(other)


def test_coordinate_functions_ask_the_routing_layer(monkeypatch):
    import lattice.core.coordsets as cs
    import lattice.routing.coords as rr

    seen = []
    real = rr.route_coordinates
    monkeypatch.setattr(cs, "route_coordinates", lambda req, cap=None: seen.append(req.op) or real(req, cap))
    x = _tensor()
    lattice.core.downsample_coords(x, 2)
    lattice.core.lookup_coords(x, np.array(x.coords))
    lattice.core.morton_order(x)
    assert {"downsample_coords", "lookup_coords", "morton_order"} <= set(seen)
    assert real(rr.CoordinateRequest("union_coords", 5)).name == "cpu.hash_set"


def test_new_coordinate_sets_are_hashed_where_the_routing_layer_says():
    from lattice.routing.coords import CoordinateRequest, route_coordinates

    cuda_cap = Capability((Tier.CPU, Tier.GPU_CUDA), ("cpu",), "cuda")
    cpu_cap = Capability((Tier.CPU,), ("cpu",))
    assert route_coordinates(CoordinateRequest("insert", 10, "gpu"), cuda_cap).name == "cuda.hash_set_checked"
    assert route_coordinates(CoordinateRequest("insert", 10, "cpu"), cuda_cap).name == "cpu.hash_set"
    fallback = route_coordinates(CoordinateRequest("insert", 10, "gpu"), cpu_cap)
    assert fallback.name == "cpu.hash_set" and fallback.rejected[0].backend == "gpu"
    # other coordinate functions stay on the CPU core
    assert route_coordinates(CoordinateRequest("union_coords", 10, "gpu"), cuda_cap).name == "cpu.hash_set"


def test_upsampling_and_global_pooling_take_the_cuda_routes_under_the_cuda_tier():
    from lattice.routing.pool import GlobalPoolRequest, UpsampleRequest, route_global_pool, route_upsample

    cuda_cap = Capability((Tier.CPU, Tier.GPU_CUDA), ("cpu",), "cuda")
    metal_cap = Capability((Tier.CPU, Tier.GPU_METAL), ("cpu",), "metal")
    for method in ("transpose", "trilinear"):
        req = UpsampleRequest("up", method, "float32", 8, 27, 10, 40, 100, False, device="gpu")
        r = route_upsample(req, cuda_cap)
        assert r.name == "cuda.map_pool" and r.facts["backward"] == "cuda.map_pool_grad"
        assert route_upsample(replace(req, device="cpu"), cuda_cap).name == "cpu.segment_reduce"
        m = route_upsample(req, metal_cap)
        assert m.name == "cpu.segment_reduce" and m.rejected[0].backend == "metal"
    for mode in ("sum", "max", "avg"):
        g = GlobalPoolRequest("global_pool", mode, "float16", 4, 100, 3, device="gpu")
        r = route_global_pool(g, cuda_cap)
        assert r.name == "cuda.batch_atomic_reduce" and r.facts["backward"] == "cuda.batch_gather"
        assert ("exact" in r.reason) == (mode == "max")
        c = route_global_pool(replace(g, device="cpu"), cuda_cap)
        assert c.name == "cpu.batch_segment_reduce" and c.facts["backward"] == "cpu.input_exclusive_gather"
        assert route_global_pool(g, metal_cap).rejected[0].backend == "metal"


def test_metal_kernels_are_routed_only_when_opted_in(monkeypatch):
    """Under the Metal tier lattice's kernels (never run on Apple hardware) take every GPU route
    the CUDA tier takes, by the same names on the metal backend, only with LATTICE_METAL_KERNELS=1."""
    from lattice.routing.coords import CoordinateRequest, route_coordinates
    from lattice.routing.points import PointsRequest, route_points
    from lattice.routing.pool import GlobalPoolRequest, PoolRequest, route_global_pool, route_pool
    from lattice.routing.relations import RelationRequest, route_relation

    off = Capability((Tier.CPU, Tier.GPU_METAL), ("cpu",), "metal")
    on = replace(off, metal_kernels=True)
    cuda_cap = Capability((Tier.CPU, Tier.GPU_CUDA), ("cpu",), "cuda", metal_kernels=True)
    assert (off.kernel_backend, on.kernel_backend, cuda_cap.kernel_backend) == (None, "metal", "cuda")
    conv = ConvRequest(
        op="subm_conv3d",
        kind="submanifold",
        dtype="float16",
        c_in=16,
        c_out=16,
        kernel_volume=27,
        n_in=100,
        n_out=100,
        edges=900,
        identity_relation=True,
        device="gpu",
    )
    requests = [
        (lambda c: route_conv(conv, c), "implicit_gemm"),
        (
            lambda c: route_relation(RelationRequest("subm_conv3d", "submanifold", 100, 27, device="gpu"), c),
            "hash_map_submanifold",
        ),
        (lambda c: route_coordinates(CoordinateRequest("insert", 100, "gpu"), c), "hash_set_checked"),
        (
            lambda c: route_pool(
                PoolRequest(
                    "max_pool3d", "max", "float32", 4, (2, 2, 2), (2, 2, 2), (1, 1, 1), 100, device="gpu"
                ),
                c,
            ),
            "map_pool",
        ),
        (
            lambda c: route_global_pool(
                GlobalPoolRequest("global_pool", "sum", "float32", 4, 100, 2, "gpu"), c
            ),
            "batch_atomic_reduce",
        ),
        (lambda c: route_points(PointsRequest("voxelize", 100, 4, device="gpu"), c), "hash_quantize"),
    ]
    for route, algorithm in requests:
        assert route(on).name == f"metal.{algorithm}"
        assert route(cuda_cap).name == f"cuda.{algorithm}"
        fallback = route(off)
        assert fallback.backend in ("cpu", "gpu")  # the CPU core, or MLX's own kernels for conv
        rejected = [r for r in fallback.rejected if r.backend == "metal"]
        assert rejected and "LATTICE_METAL_KERNELS=1" in rejected[0].predicate
    # the kernels are then built in the Metal dialect, without the CUDA-only tensor cores
    monkeypatch.setattr(kernels, "capability", lambda: on)
    assert kernels.dialect() == "metal" and not cuda_conv.uses_tensor_cores(mx.float16, 16)
    monkeypatch.setattr(kernels, "capability", lambda: cuda_cap)
    assert kernels.dialect() == "cuda" and cuda_conv.uses_tensor_cores(mx.float16, 16)
