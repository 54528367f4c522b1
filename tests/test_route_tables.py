"""Route tables: every declared route has one implementation, ops dispatch through them,
``explain`` names what runs, and the generated tables in docs/backend.md match the code."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from test_routing import _req as conv_request

import lattice
from lattice.routing import (
    Backend,
    Capability,
    CoordinateRequest,
    GlobalPoolRequest,
    PoolRequest,
    RelationRequest,
    RouteTable,
    Tier,
    check_tables,
    registry,
    route_conv,
    route_coordinates,
    route_global_pool,
    route_pool,
    route_relation,
    route_tables,
)
from lattice.routing.points import PointsRequest, route_points
from lattice.routing.tables import generated_section, main, markdown, splice

REPO = Path(__file__).resolve().parent.parent
CPU = Capability((Tier.CPU,), ("cpu",))
CUDA = Capability((Tier.CPU, Tier.GPU_CUDA), ("cpu",), "cuda")
METAL_ON = Capability((Tier.CPU, Tier.GPU_METAL), ("cpu",), "metal", metal_kernels=True)
METAL_OFF = replace(METAL_ON, metal_kernels=False)


def test_every_declared_route_has_one_implementation():
    check_tables()  # what importing lattice.backends ran
    rows = route_tables()
    assert rows and all(r.implementation for r in rows), [r.route for r in rows if not r.implementation]
    for table in registry.tables():
        assert set(table.impls) == set(table.routes), table.family
    names = [(r.family, r.route) for r in rows]
    assert len(names) == len(set(names))


def test_the_metal_routes_run_the_cuda_glue():
    for table in registry.tables():
        for twin in table.twins:
            assert twin.cuda.backend == Backend.CUDA and twin.metal.backend == Backend.METAL
            assert table.impls[twin.metal] is table.impls[twin.cuda]


@pytest.fixture
def scratch_table(monkeypatch):
    monkeypatch.setattr(registry, "_TABLES", dict(registry._TABLES))
    return RouteTable("scratch", "impl(x) -> x")


def test_an_undeclared_route_cannot_be_registered_and_a_missing_one_fails_the_check(scratch_table):
    declared = scratch_table.route(Backend.CPU, "identity")
    other = RouteTable("scratch_other", "impl(x) -> x").route(Backend.CPU, "identity")
    with pytest.raises(LookupError, match=r"cpu\.identity is not a declared scratch route"):
        scratch_table.register(other, lambda x: x)
    with pytest.raises(RuntimeError, match=r"scratch: cpu\.identity"):
        check_tables()
    scratch_table.register(declared, lambda x: x)
    with pytest.raises(LookupError, match="two implementations"):
        scratch_table.register(declared, lambda x: x)
    with pytest.raises(ValueError, match="declared twice"):
        scratch_table.route(Backend.CPU, "identity")


@pytest.mark.parametrize(
    "cap", [CPU, CUDA, METAL_ON, METAL_OFF], ids=["cpu", "cuda", "metal-on", "metal-off"]
)
def test_route_functions_take_only_implemented_routes(cap):
    conv = conv_request(dtype="float16")
    routes = []
    for device in ("cpu", "gpu"):
        routes += [
            route_conv(replace(conv, device=device), cap),
            route_conv(replace(conv, device=device, kernel_volume=1, identity_relation=True), cap),
            route_relation(RelationRequest("r", "submanifold", 10, 27, device=device), cap),
            route_relation(RelationRequest("r", "forward", 10, 8, device=device, exclusive=True), cap),
            route_coordinates(CoordinateRequest("insert", 10, device), cap),
            route_coordinates(CoordinateRequest("morton_order", 10, device), cap),
            route_pool(
                PoolRequest(
                    "max_pool3d",
                    "max",
                    "float32",
                    4,
                    (2,) * 3,
                    (2,) * 3,
                    (1,) * 3,
                    10,
                    device=device,
                    windows=True,
                ),
                cap,
            ),
            route_global_pool(GlobalPoolRequest("global_pool", "sum", "float32", 4, 10, 2, device), cap),
            route_points(PointsRequest("voxelize", 10, 4, device=device), cap),
            route_points(PointsRequest("devoxelize", 10, 4, device=device), cap),
        ]
    for route in routes:
        assert route.id.implementation is not None, route.name


def test_explain_names_the_implementation_dispatch_runs(cpu_device):
    rng = np.random.default_rng(0)
    xyz = np.unique(rng.integers(0, 8, (80, 3)), axis=0)
    x = lattice.SparseTensor(
        np.concatenate([np.zeros((len(xyz), 1), np.int64), xyz], 1), mx.ones((len(xyz), 4))
    )
    route = lattice.explain(lattice.ops.subm_conv3d, x, mx.zeros((4, 3, 3, 3, 4)))
    impl = "tiled_gemm" if route.algorithm == "tiled_gemm" else "gather_gemm_scatter"
    assert route.as_dict()["implementation"] == f"lattice.backends.cpu.conv.{impl}"
    pool = lattice.explain("max_pool3d", x, kernel_size=2, stride=2)
    assert pool.name == "cpu.window_reduce" and pool.facts["windows"] is True and pool.facts["n_out"] > 0


def test_ops_sign_once_and_explain_reads_the_same_body():
    import inspect

    sig = inspect.signature(lattice.ops.conv3d)
    assert list(sig.parameters)[:3] == ["x", "weight", "bias"] and sig.return_annotation == "SparseTensor"
    assert inspect.signature(lattice.ops.global_pool).return_annotation == "mx.array"


def test_no_op_branches_on_the_route():
    pattern = re.compile(r"route\.backend in|route\.algorithm ==|route\.backend ==")
    hits = [
        f"{p.name}:{i}"
        for p in sorted((REPO / "lattice" / "ops").glob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert hits == []


def test_layers_stay_small():
    big = [
        f"{p.relative_to(REPO)}: {n}"
        for folder in ("ops", "routing", "backends", "core")
        for p in sorted((REPO / "lattice" / folder).rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > 500
    ]
    assert big == []


def test_markdown_lists_every_route_and_splices_between_the_markers(capsys):
    text = markdown()
    for row in route_tables():
        assert f"| `{row.route}` | `{row.implementation}` |" in text
    doc = f"intro\n{registry_markers()[0]}\nstale\n{registry_markers()[1]}\nafter\n"
    spliced = splice(doc, text)
    assert (
        generated_section(spliced) == text and spliced.startswith("intro\n") and spliced.endswith("after\n")
    )
    assert main(["--markdown"]) == 0 and capsys.readouterr().out == text


def registry_markers() -> tuple[str, str]:
    from lattice.routing.tables import BEGIN, END

    return BEGIN, END


def test_the_route_tables_in_docs_backend_md_match_the_code():
    doc = REPO / "docs" / "backend.md"
    section = generated_section(doc.read_text()) if doc.is_file() else None
    if section is None:
        pytest.skip("docs/backend.md has no route-tables markers")
    assert section == markdown(), "regenerate: python -m lattice.routing.tables --write docs/backend.md"


def test_the_tables_are_declared_in_one_order_whatever_is_imported_first():
    """docs/backend.md's section is one text on every machine: the families are declared
    when lattice.routing is imported, not in the order the first callers import them (a
    GPU default device imports the feature routes before the point routes)."""
    import subprocess
    import sys

    texts = set()
    for first in (
        "",
        "import lattice.routing.points",
        "import lattice.backends.gpu.features",
        "import lattice.ops.points",
    ):
        code = f"{first}\nfrom lattice.routing.tables import markdown\nprint(markdown())"
        # -P: the installed package, not a source tree on the working directory
        run = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        texts.add(run.stdout)
    assert len(texts) == 1
