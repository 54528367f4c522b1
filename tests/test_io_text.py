"""Text tables (.xyz/.txt/.csv/.pts/.asc): reader and writer against a slow csv-module reference,
streamed chunks against whole-file reading, errors with line numbers, round trips."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lattice.io import PointCloud, PointCloudError, read_points, write_points
from lattice.pipeline import open_source


def reference_rows(text: str, delimiter: str | None, skip_lines: int) -> np.ndarray:
    """Slow, obvious parse: drop ``skip_lines`` lines, blank and #/// comment lines, float() each field."""
    lines = text.splitlines()[skip_lines:]
    kept = [ln.split("#")[0] for ln in lines if ln.strip() and not ln.strip().startswith(("#", "//"))]
    if delimiter is None:
        rows = [ln.split() for ln in kept]
    else:
        rows = list(csv.reader(kept, delimiter=delimiter))
    return np.array([[float(v) for v in row] for row in rows], dtype=np.float64)


def _table(n: int = 25, width: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = rng.normal(scale=50, size=(n, width))
    if width >= 6:
        t[:, -3:] = rng.integers(0, 256, (n, 3))  # colours
    return t


def _text(table: np.ndarray, sep: str, header: list[str] | None = None, newline: str = "\n") -> str:
    lines = [sep.join(header)] if header else []
    lines += [sep.join(repr(float(v)) for v in row) for row in table]
    return newline.join(lines) + newline


def _write(tmp_path, name: str, text: str):
    p = tmp_path / name
    p.write_bytes(text.encode())
    return p


def _error(match: str, fn, *args, **kwargs) -> PointCloudError:
    with pytest.raises(PointCloudError, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)
    return info.value


DELIMITERS = {"comma": ",", "semicolon": ";", "tab": "\t", "space": " ", "spaces": "   "}


@pytest.mark.parametrize("delim", DELIMITERS, ids=list(DELIMITERS))
@pytest.mark.parametrize("header", [False, True])
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_layouts_match_the_csv_reference(tmp_path, delim, header, newline):
    sep = DELIMITERS[delim]
    table = _table(30, 4, seed=len(delim))
    names = ["X", "Y", "Z", "Intensity"] if header else None
    text = _text(table, sep, names, newline)
    cloud = read_points(_write(tmp_path, "a.txt", text))
    ref = reference_rows(text.replace("\r\n", "\n"), None if sep.strip() == "" else sep, int(header))
    np.testing.assert_array_equal(cloud.points, ref[:, :3])
    np.testing.assert_array_equal(cloud.attributes["intensity"], ref[:, 3])
    assert (
        cloud.format == "text"
        and cloud.points.dtype == np.float64
        and list(cloud.attributes) == ["intensity"]
    )


@pytest.mark.parametrize(
    ("width", "names"),
    [
        (3, []),
        (4, ["intensity"]),
        (6, ["red", "green", "blue"]),
        (7, ["intensity", "red", "green", "blue"]),
    ],
)
def test_default_columns_by_width(tmp_path, width, names):
    table = _table(20, width)
    if width == 7:
        table[:, 4:] = np.random.default_rng(1).integers(0, 256, (20, 3))
    cloud = read_points(_write(tmp_path, "a.xyz", _text(table, " ")))
    assert list(cloud.attributes) == names
    for i, name in enumerate(names, 3):
        np.testing.assert_array_equal(cloud.attributes[name], table[:, i])
    for c in ("red", "green", "blue"):
        if c in cloud.attributes:  # whole numbers in 0..255: stored as 8-bit colour
            assert cloud.attributes[c].dtype == np.uint8 and cloud.attribute_info()[c].scale == 255


def test_header_names_are_normalised_and_typed(tmp_path):
    text = "X,Y,Z,Intensity,r,g,b,Classification,Label\n1.5,2,3,0.25,255,0,10,2,7\n4,5,6.5,1,1,2,3,6,-1\n"
    cloud = read_points(_write(tmp_path, "a.csv", text))
    assert list(cloud.attributes) == ["intensity", "red", "green", "blue", "classification", "label"]
    assert cloud.attributes["red"].dtype == np.uint8 and cloud.attributes["label"].dtype == np.int32
    assert cloud.attributes["classification"].tolist() == [2, 6]
    assert cloud.attributes["intensity"].dtype == np.float64  # continuous stays float even when whole
    info = cloud.attribute_info()
    assert info["label"].kind == "categorical" and info["label"].reduction == "mode"
    assert info["red"].kind == "colour"


def test_fractional_colours_and_ids_stay_float(tmp_path):
    text = "x y z red green blue label\n0 0 0 0.5 0.25 1 1.5\n1 1 1 0 1 0.75 2\n"
    cloud = read_points(_write(tmp_path, "a.txt", text))
    assert all(cloud.attributes[c].dtype == np.float64 for c in ("red", "green", "blue", "label"))
    assert cloud.attribute_info()["red"].scale == 1.0


def test_pts_count_line_and_cloudcompare_header(tmp_path):
    table = _table(12, 7)
    table[:, 3] = np.round(table[:, 3])  # PTS intensity -2048..2047
    pts = read_points(_write(tmp_path, "scan.pts", "12\n" + _text(table, " ")))
    np.testing.assert_array_equal(pts.points, table[:, :3])
    assert list(pts.attributes) == ["intensity", "red", "green", "blue"]
    _error(r"scan2.pts: line 1 declares 13 points but 12 data rows follow", read_points,
           _write(tmp_path, "scan2.pts", "13\n" + _text(table, " ")))  # fmt: skip
    cc = "//X,Y,Z,R,G,B,Scalar_field\n" + _text(np.c_[_table(5, 6), np.arange(5.0)], ",")
    cloud = read_points(_write(tmp_path, "cc.asc", cc))
    assert list(cloud.attributes) == ["red", "green", "blue", "scalar_field"]


def test_comments_blank_lines_and_inline_comments(tmp_path):
    text = "# exported\n// by a tool\n\n1 2 3\n  \n# middle\n4 5 6 # note\n7 8 9\n"
    cloud = read_points(_write(tmp_path, "a.xyz", text))
    np.testing.assert_array_equal(cloud.points, reference_rows(text, None, 0))
    assert len(cloud) == 3


def test_columns_option_names_and_skips(tmp_path):
    text = _text(_table(10, 5), ",")
    p = _write(tmp_path, "a.csv", text)
    ref = reference_rows(text, ",", 0)
    cloud = read_points(p, columns="label_id,X,Y,Z,_")
    np.testing.assert_array_equal(cloud.points, ref[:, 1:4])
    assert list(cloud.attributes) == ["label_id"]
    header = "a,b,c,d,e\n" + text  # columns= wins over a header row, which is still skipped
    cloud = read_points(_write(tmp_path, "h.csv", header), columns=["x", "y", "z", "i", "j"])
    np.testing.assert_array_equal(cloud.points, ref[:, :3])


UTM = [[5403547.123456, 512700.887654321, 295.25], [5403850.0, 512834.75, 404.0800000000001]]


def test_float64_precision_round_trip(tmp_path):
    cloud = PointCloud(
        np.array(UTM), {"t": np.array([1.0e9 + 0.123456789, 2.5]), "i": np.array([0.1, 3], np.float32)}
    )
    for name in ("a.csv", "a.xyz"):
        write_points(tmp_path / name, cloud)
        back = read_points(tmp_path / name)
        np.testing.assert_array_equal(back.points, cloud.points)
        np.testing.assert_array_equal(back.attributes["t"], cloud.attributes["t"])
        np.testing.assert_array_equal(back.attributes["i"].astype(np.float32), cloud.attributes["i"])
    assert (
        (tmp_path / "a.csv").read_text().splitlines()[1].startswith("5403547.123456,512700.887654321,295.25,")
    )


def test_writer_layout(tmp_path):
    cloud = PointCloud(
        np.zeros((2, 3), np.float32),
        {
            "red": np.array([0, 65535], np.uint16),
            "green": np.array([0, 65535], np.uint16),
            "blue": np.array([0, 65535], np.uint16),
            "label": np.array([3, -1], np.int64),
            "n": np.ones((2, 2), np.float32),
            "ok": np.array([True, False]),
        },
    )
    write_points(tmp_path / "a.csv", cloud)
    write_points(tmp_path / "a.txt", cloud)
    lines = (tmp_path / "a.csv").read_text().splitlines()
    assert lines == [
        "x,y,z,red,green,blue,label,n_0,n_1,ok",
        "0,0,0,0,0,0,3,1,1,1",
        "0,0,0,255,255,255,-1,1,1,0",
    ]
    assert (tmp_path / "a.txt").read_text().splitlines()[0] == "x y z red green blue label n_0 n_1 ok"
    buf = io.BytesIO()
    write_points(buf, cloud, format="csv")
    assert buf.getvalue().decode().splitlines() == lines
    bad = PointCloud(np.zeros((1, 3)), {"a b": np.zeros(1)})
    _error("'a b' cannot be a text column name", write_points, tmp_path / "b.csv", bad)
    assert not (tmp_path / "b.csv").exists()


BAD = [
    ("ragged.txt", "1 2 3\n4 5 6\n7 8\n", "ragged.txt: line 3 has 2 values, expected 3"),
    ("word.csv", "x,y,z\n1,2,3\n4,abc,6\n", r"word.csv: line 3, column 2: 'abc' is not a number"),
    ("first.txt", "1 2 abc\n", r"first.txt: line 1, column 3: 'abc' is not a number"),
    ("empty.xyz", "\n\n", "empty.xyz: no data rows in 2 lines"),
    ("comments.xyz", "# a\n// b\n", "comments.xyz: no data rows in 2 lines"),
    ("count.pts", "5\n", r"count.pts: only a point-count line \(line 1\)"),
    ("two.txt", "1 2\n3 4\n", "two.txt: line 1 holds 2 values per row"),
    ("labels.txt", "3\n5\n7\n", "labels.txt: line 2 holds 1 value per row"),
    ("five.txt", "1 2 3 4 5\n", "five.txt: rows have 5 values and no header row names them"),
    (
        "noxyz.csv",
        "lon,lat,alt\n1,2,3\n",
        r"noxyz.csv: the header \(line 1: lon,lat,alt\) has no x, y, z column",
    ),
    ("dup.csv", "x,y,z,x\n1,2,3,4\n", "dup.csv: the header .* names x more than once"),
    (
        "width.csv",
        "x,y,z,i\n1,2,3\n",
        r"width.csv: the header \(line 1\) names 4 columns but the rows have 3",
    ),
    ("binary.txt", b"1 2 3\n\xff\xfe\x00\n", "binary.txt: line 2 is not UTF-8 text"),
]


@pytest.mark.parametrize(("name", "data", "match"), BAD, ids=[b[0] for b in BAD])
def test_bad_text_is_one_line_with_the_line_number(tmp_path, name, data, match):
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    _error(match, read_points, p)
    _error(match, lambda: list(open_source(p).chunks(2)))  # the streamed path says the same


def test_a_bad_line_deep_in_a_big_file(tmp_path):
    lines = [f"{i} {i + 0.5} {i * 2}" for i in range(300_000)]
    lines[299_990] = "1 2 three"
    p = _write(tmp_path, "big.xyz", "x y z\n" + "\n".join(lines) + "\n")
    _error(r"big.xyz: line 299992, column 3: 'three' is not a number", read_points, p)


def test_library_and_cli_renderings(tmp_path):
    p = _write(tmp_path, "five.txt", "1 2 3 4 5\n")
    err = _error("five.txt", read_points, p)
    assert "columns='x,y,z,red,green,blue'" in str(err)
    assert "--columns x,y,z,red,green,blue" in err.cli_message and "columns=" not in err.cli_message
    _error("names 4 columns .x,y,z,i. but the rows have 5 values", read_points, p, columns="x,y,z,i")
    err = _error("has no z column", read_points, p, columns="x,y,q,r,s")
    assert "columns=" in str(err) and "--columns" in err.cli_message


@pytest.mark.parametrize("chunk", [1, 7, 10**6])
def test_streamed_chunks_equal_whole_file_reading(tmp_path, chunk):
    table = np.c_[_table(53, 6), np.arange(53) % 5]
    text = "# head\nx,y,z,red,green,blue,label\n" + "\n# c\n".join(_text(table, ",").splitlines()) + "\n"
    p = _write(tmp_path, "a.csv", text)
    ref = read_points(p)
    src = open_source(p)
    assert src.streamed and src.format == "text" and src.num_points == 53
    assert {k: v[0] for k, v in src.attributes.items()} == {k: v.dtype for k, v in ref.attributes.items()}
    parts = list(src.chunks(chunk))
    assert all(len(pts) <= chunk for pts, _ in parts)
    np.testing.assert_array_equal(np.concatenate([pts for pts, _ in parts]), ref.points)
    for k, v in ref.attributes.items():
        got = np.concatenate([a[k] for _, a in parts])
        assert got.dtype == v.dtype
        np.testing.assert_array_equal(got, v)


finite = st.floats(-1e7, 1e7, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.tuples(finite, finite, finite, finite, st.integers(0, 255), st.integers(-5, 40)),
        min_size=1,
        max_size=40,
    ),
    wide=st.booleans(),
    name=st.sampled_from(["a.csv", "a.txt", "a.xyz", "a.pts", "a.asc"]),
)
def test_round_trip_property(tmp_path_factory, rows, wide, name):
    t = np.array(rows, dtype=np.float64)
    dt = np.float64 if wide else np.float32
    cloud = PointCloud(
        t[:, :3].astype(dt),
        {"intensity": t[:, 3].astype(dt), "red": t[:, 4].astype(np.uint8), "green": t[:, 4].astype(np.uint8),
         "blue": t[:, 4].astype(np.uint8), "label": t[:, 5].astype(np.int32)},
    )  # fmt: skip
    path = tmp_path_factory.mktemp("rt") / name
    write_points(path, cloud)
    back = read_points(path)
    np.testing.assert_array_equal(back.points.astype(dt), cloud.points)
    np.testing.assert_array_equal(back.attributes["intensity"].astype(dt), cloud.attributes["intensity"])
    for k in ("red", "green", "blue", "label"):
        assert back.attributes[k].dtype == cloud.attributes[k].dtype
        np.testing.assert_array_equal(back.attributes[k], cloud.attributes[k])
