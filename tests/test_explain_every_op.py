"""Every public op answers ``lattice explain OP --json``.

The public ops are the functions of ``lattice.ops`` and the coordinate-set and occupancy
functions of ``lattice.core``; each must be an explainable op (declared once, its plan's route the
route it runs), and the command must describe it from a synthetic input: a route that is
declared in a route table and has an implementation there. A new public op that cannot
be explained fails here.
"""

from __future__ import annotations

import inspect
import json

import mlx.core as mx
import numpy as np
import pytest
from typer.testing import CliRunner

import lattice
from lattice import ops
from lattice.core import coordsets, occupancy
from lattice.core.relation import EdgeCounter
from lattice.routing.explain import explainable_ops, plan_of
from lattice.routing.registry import route_tables
from lattice_cli.main import app

# Public functions that are not ops on data: nothing to route.
NOT_OPS = {"kernel_offsets": "the offset table of a kernel geometry (KernelSpec metadata): no data"}

CORE_SET_FUNCTIONS = [
    "contains_coords",
    "downsample_coords",
    "intersection_coords",
    "inverse_map",
    "lookup_coords",
    "morton_codes",
    "morton_order",
    "morton_sort_coords",
    "union_coords",
]
CORE_OCCUPANCY_FUNCTIONS = ["occupancy_downsample"]  # expand / child coords: MLX arithmetic, no route


def public_ops() -> list[str]:
    names = [n for n in ops.__all__ if inspect.isfunction(getattr(ops, n)) and n not in NOT_OPS]
    return sorted(names + CORE_SET_FUNCTIONS + CORE_OCCUPANCY_FUNCTIONS)


def test_the_public_ops_are_the_ones_enumerated():
    assert len(public_ops()) >= 60
    assert set(CORE_SET_FUNCTIONS) <= set(coordsets.__dict__)
    assert all(getattr(lattice.core, n) is getattr(coordsets, n) for n in CORE_SET_FUNCTIONS)
    assert all(getattr(lattice.core, n) is getattr(occupancy, n) for n in CORE_OCCUPANCY_FUNCTIONS)
    for name in NOT_OPS:
        assert name in ops.__all__  # an exclusion names a real public function


def test_every_public_op_is_explainable():
    missing = sorted(set(public_ops()) - set(explainable_ops()))
    assert not missing, f"public ops that lattice.explain cannot describe: {missing}"


DECLARED = {row.route: row.implementation for row in route_tables()}


@pytest.mark.parametrize("op", public_ops())
def test_lattice_explain_answers_for(op):
    result = CliRunner().invoke(app, ["explain", op, "--json", "--rows", "3000"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["op"] == op
    assert d["route"] in DECLARED, f"{op}: route {d['route']} is not declared in any route table"
    assert d["implementation"] == DECLARED[d["route"]] and d["implementation"] is not None
    assert d["reason"]


def test_an_explained_op_runs_the_route_it_reports():
    """The plan explain stops at is the plan the op runs: same route, same result."""
    rng = np.random.default_rng(0)
    coords = np.unique(rng.integers(-6, 6, (400, 4)), axis=0)
    coords[:, 0] = np.abs(coords[:, 0]) % 2
    coords = np.unique(coords, axis=0).astype(np.int32)
    x = lattice.SparseTensor(coords, rng.normal(size=(len(coords), 3)).astype(np.float32))
    other = lattice.SparseTensor(coords[::3], np.ones((len(coords[::3]), 3), np.float32))
    for fn, args in (
        (ops.relu, (x,)),
        (ops.sparse_add, (x, other)),
        (ops.cat, ([x, other],)),
        (ops.prune, (x, mx.arange(0, 10, dtype=mx.int32))),
        (ops.kernel_relation, (x,)),
        (lattice.core.union_coords, (x, other)),
    ):
        plan = plan_of(fn, *args)
        assert lattice.explain(fn, *args).name == plan.route.name
        out, expected = plan.run(), fn(*args)
        if isinstance(out, lattice.SparseTensor):
            np.testing.assert_array_equal(np.asarray(out.coords), np.asarray(expected.coords))
            np.testing.assert_array_equal(np.asarray(out.feats), np.asarray(expected.feats))
    same = lattice.SparseTensor(coords, np.zeros((len(coords), 3), np.float32))
    assert lattice.explain(ops.sparse_add, x, same).name == "cpu.same_support"
    assert lattice.explain(ops.sparse_add, x, other).name == "cpu.hash_join"


def test_edge_counter_counts_only_what_is_not_known():
    rng = np.random.default_rng(1)
    coords = np.unique(np.concatenate([np.zeros((300, 1)), rng.integers(0, 8, (300, 3))], axis=1), axis=0)
    x = lattice.SparseTensor(coords.astype(np.int32), np.ones((len(coords), 2), np.float32))
    rel = ops.submanifold_kernel_relation(x)
    reads = 0 if rel.known_edge_count is not None else 1  # an edge list, or a GPU map
    counter = EdgeCounter()
    assert counter(rel) == rel.edge_count == rel.known_edge_count
    assert counter.counted == reads
    assert counter(rel) == rel.edge_count and counter.counted == reads  # counted once, then kept
    w = mx.zeros((2, 3, 3, 3, 2))
    route = lattice.explain(ops.subm_conv3d, x, w, kernel_size=3, edge_counter=counter)
    assert route.facts["edges"] == rel.edge_count and counter.counted == reads
