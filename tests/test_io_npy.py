"""`.npy` points: reader and writer against ``np.load`` on several layouts, the real SemanticKITTI
arrays, streamed chunks against whole-file reading, errors, round trips."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from io_helpers import DATA

from lattice.io import PointCloud, PointCloudError, read_points, write_points
from lattice.pipeline import open_source

NPY_FILES = sorted((DATA / "semantickitti").glob("*.npy")) if DATA.exists() else []


def _save(tmp_path, name: str, a: np.ndarray):
    p = tmp_path / name
    np.save(p, a, allow_pickle=True)
    return p


def _error(match: str, fn, *args, **kwargs) -> PointCloudError:
    with pytest.raises(PointCloudError, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)
    return info.value


@pytest.mark.parametrize("path", NPY_FILES, ids=[p.name for p in NPY_FILES])
def test_real_semantickitti_arrays(path):
    ref = np.load(path, allow_pickle=False)
    if "_labels_" in path.name:
        err = _error(r"holds one column per row .*not points", read_points, path)
        assert (
            "int32 array of shape" in str(err) and "columns=" in str(err) and "--columns" in err.cli_message
        )
        return
    cloud = read_points(path)
    assert cloud.format == "npy" and cloud.points.dtype == np.float32 and not cloud.attributes
    np.testing.assert_array_equal(cloud.points, ref)


@pytest.mark.parametrize(
    ("width", "names"),
    [(3, []), (4, ["intensity"]), (6, ["red", "green", "blue"])],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_standard_widths(tmp_path, width, names, dtype):
    rng = np.random.default_rng(width)
    a = rng.normal(size=(40, width)).astype(dtype)
    if width == 6:
        a[:, 3:] = rng.integers(0, 256, (40, 3))
    cloud = read_points(_save(tmp_path, "a.npy", a))
    ref = np.load(tmp_path / "a.npy")
    np.testing.assert_array_equal(cloud.points, ref[:, :3])
    assert cloud.points.dtype == dtype and list(cloud.attributes) == names
    for i, n in enumerate(names, 3):
        assert cloud.attributes[n].dtype == dtype  # kept as stored
        np.testing.assert_array_equal(cloud.attributes[n], ref[:, i])
    if width == 6:
        info = cloud.attribute_info()
        assert info["red"].kind == "colour" and info["red"].scale == 255.0
        np.testing.assert_allclose(cloud.colors(), ref[:, 3:] / 255, rtol=1e-6)


def test_columns_names_any_width_and_order(tmp_path):
    a = np.arange(50, dtype=np.float64).reshape(10, 5)
    p = _save(tmp_path, "a.npy", a)
    err = _error(r"a.npy: NPY float64 array of shape \(10, 5\) has 5 columns", read_points, p)
    assert (
        "columns='x,y,z,red,green,blue'" in str(err) and "--columns x,y,z,red,green,blue" in err.cli_message
    )
    cloud = read_points(p, columns="label,Z,Y,X,_")
    np.testing.assert_array_equal(cloud.points, a[:, [3, 2, 1]])
    assert list(cloud.attributes) == ["label"] and cloud.attributes["label"].tolist() == a[:, 0].tolist()
    _error(
        "columns= names 3 columns .x,y,z. but the NPY array has 5", read_points, p, columns=["x", "y", "z"]
    )
    _error("columns= 'x,y,w,i,j' has no z column", read_points, p, columns="x,y,w,i,j")
    _error("names x more than once", read_points, p, columns="x,y,z,x,_")


def test_structured_arrays(tmp_path):
    dt = np.dtype(
        [("X", "<f8"), ("Y", "<f8"), ("Z", "<f8"), ("r", "u1"), ("g", "u1"), ("b", "u1"), ("n", "<f4", (3,))]
    )
    a = np.zeros(7, dt)
    a["X"], a["Y"], a["Z"] = np.arange(7), np.arange(7) * 2, 5403547.123456
    a["r"], a["n"] = 200, 1
    cloud = read_points(_save(tmp_path, "s.npy", a))
    assert cloud.points.dtype == np.float64 and cloud.points[0].tolist() == [0.0, 0.0, 5403547.123456]
    assert list(cloud.attributes) == ["red", "green", "blue", "n"] and cloud.attributes["n"].shape == (7, 3)
    assert cloud.attributes["red"].dtype == np.uint8
    big_endian = np.zeros(3, [("x", ">f4"), ("y", ">f4"), ("z", ">f4"), ("label", ">i4")])
    big_endian["label"] = [1, 2, 3]
    back = read_points(_save(tmp_path, "be.npy", big_endian))
    assert back.attributes["label"].tolist() == [1, 2, 3] and back.attributes["label"].dtype.isnative
    _error("has no x, y, z column", read_points, _save(tmp_path, "q.npy", np.zeros(3, [("a", "f4")])))
    _error("names its own fields", read_points, tmp_path / "s.npy", columns="x,y,z")


BAD = [
    ("labels.npy", np.arange(5, dtype=np.int32), r"int32 array of shape \(5,\) holds one column per row"),
    ("labels2.npy", np.zeros((5, 1), np.int32), r"shape \(5, 1\) holds one column per row"),
    ("cube.npy", np.zeros((2, 3, 3)), r"shape \(2, 3, 3\): expected an N x K table"),
    ("two.npy", np.zeros((4, 2)), "has 2 columns; without names"),
    ("text.npy", np.array([["a", "b", "c"]]), "is not numeric"),
    ("objects.npy", np.array([[1, 2, None]], dtype=object), "NPY holds Python objects, which are refused"),
]


@pytest.mark.parametrize(("name", "array", "match"), BAD, ids=[b[0] for b in BAD])
def test_bad_arrays(tmp_path, name, array, match):
    p = _save(tmp_path, name, array)
    _error(f"{name}: .*{match}", read_points, p)
    _error(match, open_source, p)


def test_not_npy_and_truncated(tmp_path):
    (tmp_path / "n.npy").write_bytes(b"PK\x03\x04 not an array")
    _error(r"n.npy: not a NumPy .npy file", read_points, tmp_path / "n.npy")
    data = _save(tmp_path, "t.npy", np.zeros((100, 3))).read_bytes()
    (tmp_path / "t.npy").write_bytes(data[:-8])
    _error("t.npy: truncated or malformed NPY", read_points, tmp_path / "t.npy")
    _error("t.npy: truncated or malformed NPY", lambda: list(open_source(tmp_path / "t.npy").chunks(10)))


def test_writer_columns_and_dtypes(tmp_path):
    n = 5
    pts32 = np.arange(15, dtype=np.float32).reshape(n, 3)
    attrs = {
        "intensity": np.full(n, 0.5, np.float32),
        "label": np.arange(n, dtype=np.int32),
        "rgb": np.ones((n, 3), np.uint8),
    }
    write_points(tmp_path / "a.npy", PointCloud(pts32, attrs))
    a = np.load(tmp_path / "a.npy")
    assert a.dtype == np.float32 and a.shape == (n, 8)  # x y z intensity label rgb_0 rgb_1 rgb_2
    np.testing.assert_array_equal(a[:, :3], pts32)
    np.testing.assert_array_equal(a[:, 4], attrs["label"])
    back = read_points(tmp_path / "a.npy", columns="x,y,z,intensity,label,rgb_0,rgb_1,rgb_2")
    np.testing.assert_array_equal(back.attributes["label"], attrs["label"])
    # float64 when the points, an attribute, or an integer beyond float32's exact range need it
    for extra in ({"t": np.zeros(n)}, {"id": np.full(n, 2**24 + 1, np.int64)}):
        write_points(tmp_path / "b.npy", PointCloud(pts32, extra))
        b = np.load(tmp_path / "b.npy")
        assert b.dtype == np.float64
        np.testing.assert_array_equal(b[:, 3], next(iter(extra.values())))
    clash = PointCloud(pts32, {"n": np.ones((n, 2)), "n_0": np.zeros(n)})
    _error("o.npy: NPY columns would repeat the names n_0", write_points, tmp_path / "o.npy", clash)
    assert not (tmp_path / "o.npy").exists()


def test_float64_utm_round_trip_and_streams(tmp_path):
    utm = np.array([[512700.887654321, 5403547.123456, 295.25], [512834.75, 5403850.0, 404.0800000000001]])
    cloud = PointCloud(utm, {"intensity": np.array([0.1, 0.2])})
    write_points(tmp_path / "u.npy", cloud)
    back = read_points(tmp_path / "u.npy")
    np.testing.assert_array_equal(back.points, utm)
    np.testing.assert_array_equal(back.attributes["intensity"], [0.1, 0.2])
    buf = io.BytesIO()
    write_points(buf, cloud, format="npy")
    np.testing.assert_array_equal(read_points(io.BytesIO(buf.getvalue())).points, utm)  # sniffed by magic


@pytest.mark.parametrize("chunk", [1, 7, 10**6])
@pytest.mark.parametrize("kind", ["plain", "columns", "structured", "fortran"])
def test_streamed_chunks_equal_whole_file_reading(tmp_path, chunk, kind):
    rng = np.random.default_rng(2)
    a = rng.normal(size=(23, 6)).astype(np.float32)
    columns = None
    if kind == "columns":
        a, columns = rng.normal(size=(23, 5)), "x,y,z,label,_"
    elif kind == "structured":
        a = np.zeros(23, [("x", "f4"), ("y", "f4"), ("z", "f4"), ("label", "i2"), ("n", "f8", (2,))])
        a["x"], a["label"], a["n"] = rng.normal(size=23), np.arange(23), 3.5
    elif kind == "fortran":
        a = np.asfortranarray(a)
    p = _save(tmp_path, "a.npy", a)
    ref = read_points(p, columns=columns)
    src = open_source(p, columns=columns)
    assert src.streamed and src.format == "npy" and src.num_points == 23
    parts = list(src.chunks(chunk))
    np.testing.assert_array_equal(np.concatenate([p for p, _ in parts]), ref.points)
    for k, v in ref.attributes.items():
        assert src.attributes[k] == (v.dtype, v.shape[1:])
        np.testing.assert_array_equal(np.concatenate([x[k] for _, x in parts]), v)


@settings(max_examples=40, deadline=None)
@given(
    table=arrays(
        st.sampled_from([np.float32, np.float64]),
        st.tuples(st.integers(0, 50), st.sampled_from([3, 4, 6])),
        elements=st.floats(-1e6, 1e6, width=32),
    )
)
def test_round_trip_property(tmp_path_factory, table):
    names = {3: [], 4: ["intensity"], 6: ["red", "green", "blue"]}[table.shape[1]]
    cloud = PointCloud(table[:, :3], {n: table[:, 3 + i] for i, n in enumerate(names)})
    path = tmp_path_factory.mktemp("npy") / "r.npy"
    write_points(path, cloud)
    back = read_points(path)
    assert back.points.dtype == table.dtype and list(back.attributes) == names
    np.testing.assert_array_equal(back.points, cloud.points)
    for n in names:
        np.testing.assert_array_equal(back.attributes[n], cloud.attributes[n])
    np.testing.assert_array_equal(np.load(path), table)
