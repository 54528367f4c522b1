"""A network's coarse levels made ahead (``lattice.routing.coords.queue_downsamples``).

On the GPU a downsample's size is a host read, and a read waits for everything queued before
it. The networks queue their encoder's whole chain of downsamples first (each level of the
one before, as lazily counted buffers); the first level a strided convolution asks for reads
every size at once and registers every level. The oracle is the chain made one level at a
time (``downsample_set``, one read each): the same rows, in the same order, the same inverse
maps. The routing and the manager's protocol run everywhere; the GPU builder where MLX has a
CUDA device.
"""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest

import lattice
from lattice.core.coordinates import CoordinateManager
from lattice.core.rows import host_reads
from lattice.models import minkunet, sparse_resnet
from lattice.routing import Capability, Tier
from lattice.routing.coords import LevelsRequest, queue_downsamples, route_coarse_sets

HAS_CUDA = hasattr(mx, "cuda") and mx.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device in this process")

CPU = Capability((Tier.CPU,), ("cpu",))
CUDA = Capability((Tier.CPU, Tier.GPU_CUDA), ("cpu",), "cuda")
METAL_ON = Capability((Tier.CPU, Tier.GPU_METAL), ("cpu",), "metal", metal_kernels=True)
METAL_OFF = replace(METAL_ON, metal_kernels=False)


def scene(seed=0, n=3000, span=40, batches=(0, 2)) -> np.ndarray:
    """Unique (b, x, y, z) rows, shuffled, batch 1 empty (a member with no rows)."""
    rng = np.random.default_rng(seed)
    xyz = np.unique(rng.integers(-span, span, (n, 3)), axis=0)
    rng.shuffle(xyz)
    b = rng.choice(batches, len(xyz))
    return np.concatenate([b[:, None], xyz], axis=1).astype(np.int32)


# ---- routing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cap", "device", "name"),
    [
        (CUDA, "gpu", "cuda.queued_chain"),
        (CUDA, "cpu", "cpu.on_demand"),
        (CPU, "gpu", "cpu.on_demand"),
        (METAL_ON, "gpu", "metal.queued_chain"),
        (METAL_OFF, "gpu", "cpu.on_demand"),
    ],
)
def test_levels_are_queued_where_the_strided_relations_use_the_gpu_kernels(cap, device, name):
    route = route_coarse_sets(LevelsRequest("queue_downsamples", 1000, 4, device), cap)
    assert route.name == name and route.id.implementation is not None
    assert route.facts == {"n": 1000, "levels": 4, "device": device}
    if name == "cpu.on_demand" and device == "gpu":
        assert route.rejected, "the GPU route's rejection is recorded"
    if name.endswith("queued_chain"):  # the strided relations' own route decides
        assert f"{name.split('.')[0]}.cell_map" in route.reason


# ---- the manager's protocol (any device) -----------------------------------------------------


def test_a_queued_downsample_is_registered_once_when_first_asked_for():
    m = CoordinateManager()
    fine = m.insert(mx.array(scene(n=400)))
    coarse = m.insert(mx.array(scene(seed=1, n=100)), stride=2)  # stands in for the GPU-made set
    settled = []

    def settle():  # what the GPU builder's settle does: register the downsample
        settled.append(m.store_downsample(fine, (2, 2, 2), coarse, mx.zeros((0,), dtype=mx.int32)))

    m.queue_downsample(fine, (2, 2, 2), settle)
    assert settled == []  # nothing registered until asked
    hit = m.cached_downsample(fine, (2, 2, 2))
    assert hit is settled[0] and hit.out_key == coarse
    assert m.cached_downsample(fine, (2, 2, 2)) is hit and len(settled) == 1  # settled once
    # the manager's own downsample (the native path) settles a queued one and keeps it
    other = m.insert(mx.array(scene(seed=2, n=200)))
    m.queue_downsample(other, (2, 2, 2), lambda: m.store_downsample(other, (2, 2, 2), coarse, mx.zeros((0,))))
    assert m.downsample(other, 2) == coarse


def test_on_the_cpu_nothing_is_made_ahead_and_the_networks_run(cpu_device):
    coords = scene(n=800, span=12)
    x = lattice.SparseTensor(
        coords, np.random.default_rng(0).normal(size=(len(coords), 4)).astype(np.float32)
    )
    m = x.coord_manager
    sets = len(m.keys)
    route = queue_downsamples(m, x.coord_key, (2, 2, 2), 4)
    assert route.name == "cpu.on_demand" and len(m.keys) == sets
    mx.random.seed(1)
    unet = minkunet(14, 4, 3, width=8)
    unet.eval()
    y = unet(x)
    assert y.feats.shape == (x.active_count, 3) and bool(mx.all(mx.isfinite(y.feats)))
    assert len(m.keys) == sets + 4  # the four levels, each built when its convolution asked
    net = sparse_resnet(14, 4, 5, width=8)
    net.eval()
    assert net(x, batch_size=3).shape == (3, 5)


# ---- the GPU builder -------------------------------------------------------------------------


def _one_at_a_time(coords: np.ndarray, levels: int):
    from lattice.backends.cuda.coords import downsample_set

    m = CoordinateManager()
    key = m.insert(mx.array(coords))
    out = []
    for _ in range(levels):
        reads = host_reads()
        coarse = downsample_set(m, key, (2, 2, 2))
        assert reads.count == 1
        hit = m.cached_downsample(key, (2, 2, 2))
        out.append((np.asarray(m.coords(coarse)), np.asarray(hit.inverse), coarse.stride))
        key = coarse
    return out


def _queued(m: CoordinateManager, key, levels: int):
    out = []
    for _ in range(levels):
        hit = m.cached_downsample(key, (2, 2, 2))
        n = m.size(hit.out_key)
        out.append((np.asarray(m.coords(hit.out_key)[:n]), np.asarray(hit.inverse), hit.out_key.stride))
        key = hit.out_key
    return out


@needs_cuda
@pytest.mark.parametrize("n", [0, 1, 3000])
def test_the_queued_chain_gives_the_sets_made_one_at_a_time_with_one_read(n):
    coords = scene(n=n) if n else np.zeros((0, 4), np.int32)
    oracle = _one_at_a_time(coords, 4)
    m = CoordinateManager()
    key = m.insert(mx.array(coords))
    reads = host_reads()
    route = queue_downsamples(m, key, (2, 2, 2), 4)
    assert route.name == "cuda.queued_chain" and reads.count == 0  # queued, nothing read
    got = _queued(m, key, 4)
    assert reads.count == 1  # every level's size in one read
    for (c, inv, stride), (c_o, inv_o, stride_o) in zip(got, oracle, strict=True):
        np.testing.assert_array_equal(c, c_o)
        np.testing.assert_array_equal(inv, inv_o)
        assert stride == stride_o
    assert [len(c) for c, _, _ in got] == [len(c) for c, _, _ in oracle]
    if n > 1:
        assert len(got[0][0]) < len(coords) and len(got[-1][0]) >= 1


@needs_cuda
def test_levels_held_already_are_kept_and_the_rest_queued_below_them():
    from lattice.backends.cuda.coords import downsample_set

    coords = scene(seed=3)
    oracle = _one_at_a_time(coords, 3)
    m = CoordinateManager()
    key = m.insert(mx.array(coords))
    first = downsample_set(m, key, (2, 2, 2))
    reads = host_reads()
    queue_downsamples(m, key, (2, 2, 2), 3)
    assert m.cached_downsample(key, (2, 2, 2)).out_key == first and reads.count == 0
    got = _queued(m, key, 3)
    assert reads.count == 1
    for (c, inv, _), (c_o, inv_o, _) in zip(got, oracle, strict=True):
        np.testing.assert_array_equal(c, c_o)
        np.testing.assert_array_equal(inv, inv_o)


@needs_cuda
def test_a_lazy_rows_manager_gets_the_chain_as_counted_buffers_without_a_read():
    coords = scene(seed=4)
    oracle = _one_at_a_time(coords, 4)
    m = CoordinateManager(lazy_rows=True)
    key = m.insert(mx.array(coords))
    reads = host_reads()
    queue_downsamples(m, key, (2, 2, 2), 4)
    hits, k = [], key
    for _ in range(4):
        hit = m.cached_downsample(k, (2, 2, 2))
        assert m.row_count(hit.out_key) is not None and m.capacity(hit.out_key) == len(coords)
        hits.append(hit)
        k = hit.out_key
    assert reads.count == 0
    for hit, (c_o, inv_o, _) in zip(hits, oracle, strict=True):
        n = m.size(hit.out_key)  # reads the count
        np.testing.assert_array_equal(np.asarray(m.coords(hit.out_key)[:n]), c_o)
        np.testing.assert_array_equal(np.asarray(hit.inverse[: len(inv_o)]), inv_o)


@needs_cuda
def test_a_unet_forward_reads_its_levels_once_and_gives_the_same_logits():
    from lattice.backends.cuda.coords import downsample_set

    coords = scene(seed=5, n=5000, span=30)
    feats = np.random.default_rng(6).normal(size=(len(coords), 4)).astype(np.float32)
    mx.random.seed(7)
    model = minkunet(14, 4, 3, width=8)
    model.eval()
    queued = lattice.SparseTensor(coords, feats)
    mx.eval(queued.coords)
    reads = host_reads()
    y_q = model(queued)
    mx.eval(y_q.feats)
    assert reads.count == 1, reads.count  # the four levels' sizes, once
    # the oracle: the same levels made one at a time (one read each) before the forward
    single = lattice.SparseTensor(coords, feats)
    key = single.coord_key
    for _ in range(4):
        key = downsample_set(single.coord_manager, key, (2, 2, 2))
    y_s = model(single)
    np.testing.assert_array_equal(np.asarray(y_q.feats), np.asarray(y_s.feats))
