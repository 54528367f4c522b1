"""lattice.pipeline without the CLI: chunked sources, the streaming voxelizer against
lattice.ops.voxelize, feature selection, pool/upsample on sparse files, describe, demo."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from plyfile import PlyData, PlyElement

from lattice.data import ROOM_CLASSES, synthetic_room
from lattice.io import PointCloud, PointCloudError, read_points, read_sparse, write_points
from lattice.ops import pool3d, trilinear_upsample3d, voxelize
from lattice.pipeline import (
    VoxelizeOptions,
    describe_file,
    feature_columns,
    open_source,
    pool_sparse,
    run_demo,
    to_tensor,
    upsample_sparse,
    voxelize_cloud,
    voxelize_file,
    voxelize_source,
)

ROOM = synthetic_room(6000, seed=3)
NAMES = ["intensity", "red", "green", "blue", "label"]


def _feats(cloud: PointCloud, names=NAMES) -> np.ndarray:
    return np.stack([cloud.attributes[k].astype(np.float32) for k in names], axis=1)


def test_synthetic_room_is_deterministic_and_labelled():
    a, b = synthetic_room(), synthetic_room()
    assert len(a) == 50_000
    np.testing.assert_array_equal(a.points, b.points)
    assert set(a.attributes) == set(NAMES)
    assert a.attributes["label"].max() == len(ROOM_CLASSES) - 1
    assert not np.array_equal(synthetic_room(1000, seed=1).points, synthetic_room(1000, seed=2).points)
    with pytest.raises(ValueError, match="at least 100"):
        synthetic_room(10)


@pytest.mark.parametrize("reduction", ["mean", "sum", "max", "first", "count"])
@pytest.mark.parametrize("chunk", [37, 997, 10**7])
def test_streaming_equals_ops_voxelize(reduction, chunk):
    sf, summary = voxelize_cloud(ROOM, 0.25, reduction=reduction, chunk_points=chunk)
    ref = voxelize(ROOM.points, None if reduction == "count" else _feats(ROOM), 0.25, reduction=reduction)
    np.testing.assert_array_equal(sf.coords, np.asarray(ref.coords))  # same voxels, same order
    np.testing.assert_allclose(sf.feats, np.asarray(ref.feats), rtol=1e-5, atol=1e-5)
    assert summary["voxels"] == ref.active_count and summary["points"] == len(ROOM)
    assert list(sf.feature_names) == (["count"] if reduction == "count" else NAMES)


def test_voxel_set_matches_numpy_floor_unique():
    rng = np.random.default_rng(0)
    pts = rng.normal(scale=3.0, size=(5000, 3))
    sf, _ = voxelize_cloud(PointCloud(pts), (0.3, 0.5, 0.7), origin=(0.1, -0.2, 0.3), chunk_points=600)
    ref = np.unique(np.floor((pts - [0.1, -0.2, 0.3]) / [0.3, 0.5, 0.7]).astype(np.int32), axis=0)
    got = np.unique(sf.coords[:, 1:], axis=0)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(sf.feats[:, 0].sum(), 5000)  # no attributes -> count


@settings(max_examples=40, deadline=None)
@given(
    pts=arrays(np.float64, st.tuples(st.integers(1, 300), st.just(3)), elements=st.floats(-50, 50, width=32)),
    size=st.floats(0.05, 5.0),
    chunk=st.integers(1, 400),
)
def test_streaming_voxel_set_property(pts, size, chunk):
    """Any points, voxel size and chunking: exactly NumPy's floor + unique, first-occurrence order."""
    sf, _ = voxelize_cloud(PointCloud(pts), size, chunk_points=chunk)
    keys = np.floor(pts / size).astype(np.int64)
    _, first = np.unique(keys, axis=0, return_index=True)
    np.testing.assert_array_equal(sf.coords[:, 1:], keys[np.sort(first)])
    assert sf.feats.sum() == len(pts)


def test_origin_min_makes_indices_non_negative():
    sf, s = voxelize_cloud(ROOM, 0.2, origin="min")
    assert sf.coords[:, 1:].min() == 0
    np.testing.assert_allclose(s["origin"], ROOM.points.min(axis=0), rtol=1e-6)


def test_feature_selection_and_2d_attributes():
    cloud = PointCloud(
        ROOM.points, {"rgb": np.stack([ROOM.attributes[c] for c in ("red", "green", "blue")], 1)}
    )
    cols = feature_columns({k: (v.dtype, v.shape[1:]) for k, v in cloud.attributes.items()}, None)
    assert [c[2] for c in cols] == ["rgb_0", "rgb_1", "rgb_2"]
    sf, _ = voxelize_cloud(cloud, 0.3, features=("rgb_2",))
    assert sf.feature_names == ("rgb_2",)
    sf, _ = voxelize_cloud(ROOM, 0.3, features=("label", "intensity"), reduction="first")
    assert sf.feature_names == ("label", "intensity")
    sf, s = voxelize_cloud(ROOM, 0.3, features=())
    assert sf.feature_names == ("count",) and s["reduction"] == "count"
    with pytest.raises(ValueError, match="unknown feature 'colour'; the input has: intensity"):
        voxelize_cloud(ROOM, 0.3, features=("colour",))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"voxel_size": 0}, "voxel size must be one or three positive"),
        ({"voxel_size": (1, -1, 1)}, "voxel size must be one or three positive"),
        ({"voxel_size": float("nan")}, "voxel size"),
        ({"origin": (0, 0)}, "origin must be one or three"),
        ({"reduction": "median"}, "reduction must be one of mean, sum, min, max, mode, first, count"),
        ({"reductions": {"label": "avg"}}, "reduction for 'label' must be one of mean, sum, min"),
        ({"chunk_points": 0}, "chunk_points must be positive"),
    ],
)
def test_options_are_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        VoxelizeOptions(**({"voxel_size": 1.0} | kwargs))


def test_nonfinite_points_dropped_or_refused():
    pts = ROOM.points.copy()
    pts[[5, 17, 4000]] = [np.nan, 0, 0]
    pts[99, 2] = np.inf
    cloud = PointCloud(pts, ROOM.attributes)
    sf, s = voxelize_cloud(cloud, 0.25, chunk_points=1000)
    assert s["nonfinite_dropped"] == 4
    ref, _ = voxelize_cloud(cloud.drop_nan(), 0.25)
    np.testing.assert_array_equal(sf.coords, ref.coords)
    with pytest.raises(PointCloudError, match=r"point 5 has a non-finite coordinate .*strict"):
        voxelize_cloud(cloud, 0.25, strict=True)


def test_index_overflow_and_packing_errors_are_one_line():
    with pytest.raises(PointCloudError, match="voxel indices overflow int32"):
        voxelize_cloud(PointCloud(np.array([[0, 0, 0], [3e9, 0, 0]])), 1.0)
    wide = PointCloud(np.array([[-1e9, -1e9, -1e9], [1e9, 1e9, 1e9]]))
    with pytest.raises(PointCloudError, match="too large to pack into a 64-bit key"):
        voxelize_cloud(wide, 1.0)
    with pytest.raises(PointCloudError, match="too large to pack"):  # across two chunks: the union
        voxelize_cloud(wide, 1.0, chunk_points=1)


def _ply(path, cloud: PointCloud, byte_order: str = "<"):
    fields = [("x", "f4"), ("y", "f4"), ("z", "f4")] + [
        (k, v.dtype.str[1:]) for k, v in cloud.attributes.items()
    ]
    v = np.empty(len(cloud), dtype=[(n, byte_order + t) for n, t in fields])
    for i, a in enumerate("xyz"):
        v[a] = cloud.points[:, i]
    for k, a in cloud.attributes.items():
        v[k] = a
    face = np.array([([0, 1, 2],)], dtype=[("vertex_indices", "i4", (3,))])
    els = [PlyElement.describe(v, "vertex"), PlyElement.describe(face, "face")]
    PlyData(els, byte_order=byte_order).write(str(path))


@pytest.mark.parametrize("kind", ["kitti", "ply_le", "ply_be", "npz", "npz_deflated", "ply_ascii", "pcd"])
def test_every_source_matches_read_points(tmp_path, kind):
    cloud = ROOM
    if kind == "kitti":
        cloud = PointCloud(ROOM.points, {"intensity": ROOM.attributes["intensity"]})
        path = tmp_path / "a.bin"
        write_points(path, cloud)
    elif kind.startswith("ply_") and kind != "ply_ascii":
        path = tmp_path / "a.ply"
        _ply(path, cloud, "<" if kind == "ply_le" else ">")
    elif kind.startswith("npz"):
        path = tmp_path / "a.npz"
        cloud = PointCloud(ROOM.points.astype(np.float64), {**ROOM.attributes, "n": np.ones((len(ROOM), 3))})
        write_points(path, cloud, compress=kind == "npz_deflated")
    else:
        path = tmp_path / ("a.ply" if kind == "ply_ascii" else "a.pcd")
        write_points(path, cloud, binary=False)
    src = open_source(path)
    assert src.streamed == (kind not in ("ply_ascii", "pcd"))
    ref = read_points(path)
    got_pts, got_attrs = zip(*src.chunks(1234), strict=True)
    np.testing.assert_array_equal(np.concatenate(got_pts), ref.points)
    assert np.concatenate(got_pts).dtype == ref.points.dtype
    for k, v in ref.attributes.items():
        np.testing.assert_array_equal(np.concatenate([a[k] for a in got_attrs]), v, err_msg=k)
    a, _ = voxelize_source(src, VoxelizeOptions(0.3, chunk_points=777))
    b, _ = voxelize_cloud(ref, 0.3)
    np.testing.assert_array_equal(a.coords, b.coords)
    np.testing.assert_allclose(a.feats, b.feats, rtol=1e-6)


def test_truncated_streamed_files_raise(tmp_path):
    _ply(tmp_path / "t.ply", ROOM)
    data = (tmp_path / "t.ply").read_bytes()
    (tmp_path / "t.ply").write_bytes(data[: len(data) // 2])
    with pytest.raises(PointCloudError, match="truncated PLY: header declares 6000 vertex rows but only"):
        open_source(tmp_path / "t.ply")
    (tmp_path / "t.bin").write_bytes(b"\0" * 17)
    with pytest.raises(PointCloudError, match="17 bytes is not a whole number of kitti points"):
        open_source(tmp_path / "t.bin")


def test_voxelize_file_writes_the_sparse_format(tmp_path):
    write_points(tmp_path / "room.ply", ROOM)
    s = voxelize_file(tmp_path / "room.ply", tmp_path / "v.npz", VoxelizeOptions(0.2))
    sf = read_sparse(tmp_path / "v.npz")
    assert s["output"] == str(tmp_path / "v.npz") and s["streamed"]
    assert sf.feature_names == tuple(NAMES) and sf.stride.tolist() == [1, 1, 1]
    np.testing.assert_allclose(sf.voxel_size, 0.2)
    assert sf.num_rows == s["voxels"] and sf.coords.dtype == np.int32


def _mode_over(rows_out, values, m):
    """The mode per output row, point by point (ties to the smallest value)."""
    from lattice.core.modes import mode_reference

    return mode_reference(np.asarray(rows_out), np.asarray(values), m)


def test_pool_and_upsample_match_the_ops():
    from lattice.ops import kernel_relation

    sf, _ = voxelize_cloud(ROOM, 0.1)
    label = sf.feature_names.index("label")  # categorical: pooled by its mode, never averaged
    cont = [j for j in range(sf.num_channels) if j != label]
    for mode in ("sum", "max", "avg"):
        out, s = pool_sparse(sf, mode, 3, 2)
        ref = pool3d(to_tensor(sf), mode=mode, kernel_size=3, stride=2)
        np.testing.assert_array_equal(out.coords, np.asarray(ref.coords))
        np.testing.assert_allclose(out.feats[:, cont], np.asarray(ref.feats)[:, cont], rtol=1e-6)
        edges = kernel_relation(to_tensor(sf), kernel_size=3, stride=2).edges
        want = _mode_over(edges.out_rows, sf.feats[np.asarray(edges.in_rows), label], out.num_rows)
        np.testing.assert_array_equal(out.feats[:, label], want)
        assert out.stride.tolist() == [2, 2, 2] and s["rows_out"] == ref.active_count
        assert out.feature_names == sf.feature_names and s["mode_channels"] == ["label"]
    pooled, _ = pool_sparse(sf, "avg", 2, 2)
    up, s = upsample_sparse(pooled, 2, target=sf)
    ref = trilinear_upsample3d(to_tensor(pooled), to_tensor(sf), stride=2)
    np.testing.assert_array_equal(up.coords, sf.coords)  # target rows and order kept
    np.testing.assert_allclose(up.feats[:, cont], np.asarray(ref.feats)[:, cont], rtol=1e-6)
    parent = {tuple(c): pooled.feats[i, label] for i, c in enumerate(pooled.coords.tolist())}
    want = [parent[(c[0], c[1] // 2, c[2] // 2, c[3] // 2)] for c in sf.coords.tolist()]
    np.testing.assert_array_equal(up.feats[:, label], want)  # each fine voxel: its parent's class
    gen, _ = upsample_sparse(pooled, 2, method="transpose", kernel_size=2)
    assert gen.stride.tolist() == [1, 1, 1] and gen.num_rows >= pooled.num_rows


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda sf: pool_sparse(sf, "median"), "pool mode must be one of sum, max, avg"),
        (lambda sf: pool_sparse(sf, "max", 0, 2), "kernel size must be one or three positive integers"),
        (lambda sf: upsample_sparse(sf, 2), "not divisible by stride"),
        (lambda sf: upsample_sparse(sf, 1, method="nearest"), "upsample method must be one of"),
        (lambda sf: upsample_sparse(sf, 1, kernel_size=2), "transpose method only"),
    ],
)
def test_sparse_op_errors(call, match):
    sf, _ = voxelize_cloud(ROOM, 0.2)
    with pytest.raises(ValueError, match=match):
        call(sf)


def test_upsample_target_must_share_the_grid():
    sf, _ = voxelize_cloud(ROOM, 0.2)
    other, _ = voxelize_cloud(ROOM, 0.1)
    pooled, _ = pool_sparse(sf, "max", 2, 2)
    with pytest.raises(ValueError, match="target voxel size"):
        upsample_sparse(pooled, 2, target=other)


def test_describe_points_and_sparse(tmp_path):
    write_points(tmp_path / "room.ply", ROOM)
    d = describe_file(tmp_path / "room.ply")
    assert d["kind"] == "points" and d["points"] == 6000 and d["format"] == "ply"
    assert [a["name"] for a in d["attributes"]] == NAMES and d["has_colors"]
    np.testing.assert_allclose(d["bounds"]["min"], ROOM.points.min(axis=0), rtol=1e-6)
    voxelize_file(tmp_path / "room.ply", tmp_path / "v.npz", VoxelizeOptions(0.5))
    d = describe_file(tmp_path / "v.npz")
    assert d["kind"] == "sparse" and d["feature_names"] == NAMES and d["stride"] == [1, 1, 1]
    assert d["batches"] == 1 and d["rows_per_batch"] == [d["rows"]]
    with open(tmp_path / "v.npz", "rb") as f:
        assert describe_file(f)["rows"] == d["rows"]


def test_run_demo(tmp_path):
    r = run_demo(points=5000, output_dir=tmp_path)
    assert r["points"] == 5000 and r["voxels"] == r["upsampled"] > r["pooled"] > 0
    assert r["stride"] == {"voxels": [1, 1, 1], "pooled": [2, 2, 2], "upsampled": [1, 1, 1]}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "pooled.npz",
        "room.ply",
        "upsampled.npz",
        "voxels.npz",
    ]
    assert read_sparse(tmp_path / "pooled.npz").num_rows == r["pooled"]
