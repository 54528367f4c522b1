"""`lattice info` at `pdal info` depth: full-precision bounds, the LAS header and CRS, attribute
kinds, class histograms with ASPRS names; through the installed command and the library."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest
from cli_helpers import data_file, lattice

from lattice.io import ASPRS_CLASSES, PointCloud, asprs_class_name, read_points, write_points, write_sparse
from lattice.io.kinds import info_for
from lattice.pipeline import describe_cloud, describe_file
from lattice.pipeline.describe import HISTOGRAM_VALUES, exact, histogram, scale_decimals
from lattice_cli.commands.info import points_text, sparse_text, table

AUTZEN = "aerial_lidar/autzen_trim.las"


# ---- through the installed command -----------------------------------------------------


def test_info_autzen_text():
    r = lattice("info", data_file(AUTZEN))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert re.search(r"min\s+636001\.76\s+848935\.2\s+406\.26\n", out)  # full precision, not 6.36002e+05
    assert re.search(r"max\s+637179\.22\s+849497\.9\s+520\.51\n", out)
    for line in (
        "version       1.2",
        "point format  3",
        "point count   110000",
        "scale         0.01 0.01 0.01",
    ):
        assert f"    {line}\n" in out, line
    assert "    system id     PDAL\n" in out and "    software      PDAL 1.0.0 (9e8465)\n" in out
    assert "    created       2015-09-10\n" in out
    assert re.search(r"LASF_Projection\s+34735\s+GeoTiff GeoKeyDirectoryTag\s+184 bytes", out)
    assert "  CRS           NAD_1983_HARN_Lambert_Conformal_Conic\n" in out
    assert "    EPSG        not stated\n" in out and "    units       foot\n" in out
    assert re.search(r"\n    1  unclassified  83,893\n    2  ground        26,107\n", out)
    assert re.search(r"\n    classification\s+categorical\s+uint8\s+mode\s+1\s+2\s", out)
    assert re.search(r"\n    red\s+colour \(255\)\s+uint16\s+mean\s+40\s+236\s", out)


def test_info_autzen_json():
    r = lattice("info", data_file(AUTZEN), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["bounds"] == {"min": [636001.76, 848935.2, 406.26], "max": [637179.22, 849497.9, 520.51]}
    las = d["las"]
    assert (las["version"], las["point_format"], las["points"], las["scales"]) == (
        "1.2",
        3,
        110000,
        [0.01] * 3,
    )
    assert (las["system_identifier"], las["creation_date"]) == ("PDAL", "2015-09-10")
    assert [(v["user_id"], v["record_id"], v["bytes"]) for v in las["vlrs"]][:2] == [
        ("LASF_Projection", 34735, 184),
        ("LASF_Projection", 34736, 72),
    ]
    assert d["crs"]["name"] == "NAD_1983_HARN_Lambert_Conformal_Conic" and d["crs"]["epsg"] is None
    attrs = {a["name"]: a for a in d["attributes"]}
    cls = attrs["classification"]
    assert (cls["kind"], cls["reduction"]) == ("categorical", "mode")
    assert cls["histogram"]["bins"] == [
        {"value": 1, "count": 83893, "name": "unclassified"},
        {"value": 2, "count": 26107, "name": "ground"},
    ]
    assert (attrs["red"]["kind"], attrs["red"]["scale"]) == ("colour", 255.0)
    assert (attrs["gps_time"]["kind"], attrs["intensity"]["kind"]) == ("time", "continuous")
    assert attrs["gps_time"]["min"] == float(read_points(data_file(AUTZEN)).attributes["gps_time"].min())
    assert "histogram" not in attrs["intensity"]


def test_info_utm_northing_in_full():
    path = data_file("isprs_terrain/samp11-utm.pcd")
    r = lattice("info", path)
    assert r.returncode == 0 and re.search(r"min\s+512700\.88\s+5403547\.5\s+295\.25\n", r.stdout)
    d = describe_file(path)
    assert d["bounds"]["min"] == [512700.88, 5403547.5, 295.25] and "las" not in d


def test_info_crs_by_geokeys_and_an_unparsed_record():
    r = lattice("info", data_file("aerial_lidar/pdal_extra/mvk-thin.las"))
    assert "    EPSG        26995\n" in r.stdout and "    base EPSG   4269\n" in r.stdout
    assert re.search(r"\n    12  reserved / overlap\s+3,702\n", r.stdout)
    r = lattice("info", data_file("aerial_lidar/pdal_extra/warsaw_small.las"), "--json")
    d = json.loads(r.stdout)
    assert d["crs"] is None and d["crs_error"].startswith("WKT record (LASF_Projection 2112)")


@pytest.mark.parametrize("ext", ["ply", "npz", "las"])
def test_info_empty_cloud(tmp_path, ext):
    cloud = PointCloud(np.zeros((0, 3)), {"classification": np.zeros(0, np.uint8)})
    write_points(tmp_path / f"e.{ext}", cloud)
    r = lattice("info", tmp_path / f"e.{ext}")
    assert r.returncode == 0, r.stderr
    assert "  points      0 " in r.stdout and "bounds" not in r.stdout
    d = describe_file(tmp_path / f"e.{ext}")
    json.dumps(d)
    assert d["points"] == 0 and d["bounds"] is None
    cls = next(a for a in d["attributes"] if a["name"] == "classification")
    assert cls["min"] is None and cls["histogram"]["bins"] == []


def test_info_empty_sparse(tmp_path):
    write_sparse(tmp_path / "s.npz", np.zeros((0, 4), np.int32), np.zeros((0, 2), np.float32))
    r = lattice("info", tmp_path / "s.npz")
    assert r.returncode == 0 and "rows        0 in 0 batch(es)" in r.stdout


def test_info_lines_are_not_wrapped(tmp_path):
    deep = tmp_path / ("d" * 120) / ("e" * 120)
    deep.mkdir(parents=True)
    write_points(deep / "c.ply", PointCloud(np.ones((2, 3)), {"label": np.array([1, 2])}))
    r = lattice("info", deep / "c.ply")
    assert r.stdout.splitlines()[0] == f"{deep / 'c.ply'}: point cloud (ply)"


# ---- the library -----------------------------------------------------------------------


def _reference_histogram(values) -> tuple[dict, int, int]:
    """Value -> count of every value (slow), and the most-frequent cut as ``histogram`` makes it."""
    counts = Counter(v for v in np.asarray(values).tolist() if v == v)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = dict(sorted(ranked[:HISTOGRAM_VALUES]))
    return shown, len(counts) - len(shown), sum(counts.values()) - sum(shown.values())


@pytest.mark.parametrize(
    "values",
    [
        np.random.default_rng(0).integers(0, 20, 5000).astype(np.uint8),
        np.random.default_rng(1).integers(-40, 300, 20000).astype(np.int32),  # > 64 distinct
        np.random.default_rng(2).zipf(1.5, 3000).astype(np.uint16),
        np.where(np.arange(200) % 7 == 0, np.nan, np.arange(200) % 5).astype(np.float32),
        np.arange(10) % 3 == 0,
        np.zeros(0, np.uint8),
    ],
    ids=["uint8", "int32-many", "uint16-zipf", "float-nan", "bool", "empty"],
)
def test_histogram_against_a_counter(values):
    h = histogram(values)
    shown, other_values, other_count = _reference_histogram(values)
    assert {b["value"]: b["count"] for b in h["bins"]} == {
        float(k) if values.dtype.kind == "f" else int(k): c for k, c in shown.items()
    }
    assert [b["value"] for b in h["bins"]] == sorted(b["value"] for b in h["bins"])
    assert (h["other_values"], h["other_count"]) == (other_values, other_count)
    assert h["nan"] == int(np.isnan(values).sum() if values.dtype.kind == "f" else 0)
    assert h["distinct"] == len(shown) + other_values


def test_histogram_names_and_asprs_table():
    assert (
        ASPRS_CLASSES[2] == "ground" and ASPRS_CLASSES[7] == "low point (noise)" and len(ASPRS_CLASSES) == 19
    )
    assert [asprs_class_name(c) for c in (0, 18, 19, 63, 64, 255, 256, -1, 2.5, np.uint8(9))] == [
        "never classified", "high noise", "reserved", "reserved", "user definable", "user definable",
        None, None, None, "water",
    ]  # fmt: skip
    h = histogram(np.array([2.0, 2.0, 6.0], np.float32), asprs_class_name)  # a voxel mode: float ids
    assert h["bins"] == [
        {"value": 2.0, "count": 2, "name": "ground"},
        {"value": 6.0, "count": 1, "name": "building"},
    ]


def test_exact_numbers_and_scale_decimals():
    assert exact(np.float32(5403547.5), np.float32) == 5403547.5
    assert exact(np.array([0.1, 1e-7], np.float32), np.float32) == [0.1, 1e-07]
    assert exact(np.array([3, -2], np.int16), np.int16) == [3, -2] and exact(np.True_, bool) == 1
    assert exact(np.float64(0.1) + 0.2, np.float64) == 0.30000000000000004
    assert [scale_decimals(s) for s in (0.01, 0.001, 1e-5, 0.025, 1.0, 10.0, 0.5)] == [2, 3, 5, 3, 0, 0, 1]


def test_describe_cloud_rounds_las_bounds_to_the_scale():
    pts = np.array([[636001.76, 848935.2, 406.26], [637179.22, 849497.9, 520.51]])
    meta = {"point_format": 3, "scales": [0.01, 0.01, 0.01], "offsets": [0.0, 0.0, 0.0]}
    noisy = PointCloud(pts + 1e-9, metadata=meta)  # what X * 0.01 gives in float64
    d = describe_cloud(noisy)
    assert d["bounds"]["min"] == [636001.76, 848935.2, 406.26] and d["las"]["points"] == 2
    assert describe_cloud(PointCloud(pts + 1e-9))["bounds"]["min"] == (pts.min(0) + 1e-9).tolist()


def test_describe_sparse_kinds_provenance_and_source(tmp_path):
    cloud = read_points(data_file(AUTZEN))
    feats = np.stack([cloud.attributes["classification"][:50], cloud.attributes["intensity"][:50]], 1)
    coords = np.concatenate([np.zeros((50, 1), np.int32), np.arange(150, dtype=np.int32).reshape(50, 3)], 1)
    schema = [
        info_for("classification", cloud.attributes["classification"]),
        info_for("intensity", feats[:, 1]),
    ]
    provenance = {"command": "voxelize", "parameters": {"voxel_size": 1.0}, "lattice": "0.1.0"}
    write_sparse(
        tmp_path / "v.npz", coords, feats.astype(np.float32), feature_names=["classification", "intensity"],
        schema=schema, provenance=provenance, source={"format": "las", "metadata": cloud.metadata},
    )  # fmt: skip
    d = describe_file(tmp_path / "v.npz")
    cls, inten = d["channel_stats"]
    assert (cls["kind"], cls["source_dtype"], inten["kind"]) == ("categorical", "uint8", "continuous")
    expected = Counter(cloud.attributes["classification"][:50].tolist())
    assert {b["value"]: (b["count"], b["name"]) for b in cls["histogram"]["bins"]} == {
        float(k): (c, ASPRS_CLASSES[k]) for k, c in expected.items()
    }
    assert d["provenance"] == provenance and d["source_format"] == "las"
    assert d["crs"]["name"] == "NAD_1983_HARN_Lambert_Conformal_Conic"
    text = "\n".join(sparse_text(d | {"file": "v.npz"}))
    assert (
        "  source      las\n" in text
        and '"command": "voxelize"' in text
        and "  CRS           NAD_1983" in text
    )


def test_text_columns_are_aligned():
    assert table([["a", "1"], ["long", "22"]], indent=2, right=(1,)) == ["  a      1", "  long  22"]
    cloud = read_points(data_file("aerial_lidar/simple.las"))
    lines = points_text(describe_cloud(cloud) | {"file": "simple.las"})
    start = lines.index("  attributes") + 1
    rows = lines[start : start + len(cloud.attributes) + 1]
    kind_col = rows[0].index("kind")
    assert all(r[kind_col - 2 : kind_col] == "  " and r[kind_col] != " " for r in rows)
