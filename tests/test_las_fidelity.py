"""LAS/LAZ -> LAS/LAZ keeps the header, the records and the coordinates' integer records.

Every aerial file of ../shared/data is read with ``read_points`` and written with
``write_points``; laspy (not lattice) reads both files and the records are compared with a
field-by-field reader (``tests/io_helpers.py``).
"""

from __future__ import annotations

import json
import warnings

import laspy
import numpy as np
import pytest
from io_helpers import DATA, las_records_reference

import lattice
from lattice.io import PointCloud, PointCloudError, read_points, read_sparse, write_points, write_sparse
from lattice.io.las import LasFallbackWarning
from lattice.io.las_records import REGENERATED

AERIAL = sorted(p.relative_to(DATA).as_posix() for p in (DATA / "aerial_lidar").rglob("*.la[sz]"))
if not AERIAL:  # the shared data is absent: one test that skips
    AERIAL = ["aerial_lidar/simple.las"]


def _src(rel: str):
    path = DATA / rel
    if not path.exists():
        pytest.skip(f"shared test data not present: {rel}")
    return path


def _kept(path) -> list[tuple[str, int, bytes]]:
    return [r for r in las_records_reference(path) if (r[0], r[1]) not in REGENERATED]


def assert_same_las(src, out, *, software: bool = True) -> None:
    """``out`` holds ``src``'s header, records, integer coordinates and every dimension."""
    a, b = laspy.read(src), laspy.read(out)
    ha, hb = a.header, b.header
    assert (hb.point_format.id, str(hb.version)) == (ha.point_format.id, str(ha.version))
    np.testing.assert_array_equal(hb.scales, ha.scales)
    np.testing.assert_array_equal(hb.offsets, ha.offsets)
    for field in ("system_identifier", "creation_date", "file_source_id", "uuid"):
        assert getattr(hb, field) == getattr(ha, field), field
    assert hb.global_encoding.value == ha.global_encoding.value
    if software:
        assert hb.generating_software == f"lattice {lattice.__version__}"
    for d in ("X", "Y", "Z"):
        np.testing.assert_array_equal(np.asarray(b[d]), np.asarray(a[d]), err_msg=d)
    assert list(b.point_format.dimension_names) == list(a.point_format.dimension_names)
    for d in a.point_format.extra_dimensions:
        assert b.point_format.dimension_by_name(d.name).description == d.description
    for d in a.point_format.dimension_names:
        np.testing.assert_array_equal(np.asarray(b[d]), np.asarray(a[d]), err_msg=d)
    assert _kept(out) == _kept(src)  # every record but ExtraBytes / LAZ, byte for byte


@pytest.mark.parametrize("ext", [".las", ".laz"])
@pytest.mark.parametrize("rel", AERIAL, ids=[r.split("/")[-1][:28] for r in AERIAL])
def test_aerial_round_trip(tmp_path, rel, ext):
    src = _src(rel)
    cloud = read_points(src)
    json.dumps(cloud.metadata)  # JSON values only (a sparse NPZ's source record stores them)
    out = tmp_path / f"out{ext}"
    with warnings.catch_warnings():
        warnings.simplefilter("error", LasFallbackWarning)
        write_points(out, cloud)
    assert laspy.read(out).header.are_points_compressed == (ext == ".laz")
    assert_same_las(src, out)
    back = read_points(out)
    np.testing.assert_array_equal(back.points, cloud.points)  # on the scale grid: exact
    assert back.metadata["crs"] == cloud.metadata["crs"]


def test_crs_records_are_kept_byte_for_byte():
    """The GeoKey directory is re-serialised by laspy when parsed; lattice writes the stored bytes."""
    src = _src("aerial_lidar/autzen_trim.las")
    records = {(u, r): d for u, r, d in _kept(src)}
    assert {(u, r) for u, r in records} == {
        ("LASF_Projection", 34735), ("LASF_Projection", 34736), ("LASF_Projection", 34737),
        ("LASF_Projection", 2112), ("liblas", 2112),
    }  # fmt: skip
    vlr = {v["record_id"]: v for v in read_points(src).metadata["vlrs"] if v["user_id"] == "LASF_Projection"}
    assert len(vlr[34735]["data"]) == 248 and vlr[34735]["description"] == "GeoTiff GeoKeyDirectoryTag"


def test_voxel_export_keeps_the_source_header(tmp_path):
    """A LAS input's metadata in a sparse NPZ's source record, given back to the writer (no format)."""
    src = _src("aerial_lidar/autzen_trim.las")
    cloud = read_points(src)
    meta = cloud.metadata
    voxel = 5.0
    keys, first = np.unique(np.floor(cloud.points / voxel).astype(np.int32), axis=0, return_index=True)
    feats = np.stack([cloud.attributes["classification"][first].astype(np.float32)], axis=1)
    coords = np.concatenate([np.zeros((len(keys), 1), np.int32), keys], axis=1)
    write_sparse(
        tmp_path / "v.npz", coords, feats, voxel_size=voxel, feature_names=["classification"],
        source={"format": cloud.format, "metadata": meta},
    )  # fmt: skip
    sf = read_sparse(tmp_path / "v.npz")
    centres = np.round((sf.coords[:, 1:] + 0.5) * voxel, 2)
    export = PointCloud(centres, {"classification": sf.feats[:, 0]}, metadata=sf.source["metadata"])
    write_points(tmp_path / "v.las", export)
    out = laspy.read(tmp_path / "v.las")
    assert (out.header.point_format.id, str(out.header.version)) == (3, "1.2")
    np.testing.assert_array_equal(out.header.scales, [0.01, 0.01, 0.01])
    assert out.header.system_identifier == "PDAL" and out.header.creation_date.isoformat() == "2015-09-10"
    assert _kept(tmp_path / "v.las") == _kept(src)
    assert out.classification.dtype == np.uint8  # the float mode went into the uint8 field
    np.testing.assert_array_equal(np.asarray(out.classification), sf.feats[:, 0].astype(np.uint8))
    np.testing.assert_array_equal(read_points(tmp_path / "v.las").points, centres)
    assert read_points(tmp_path / "v.las").metadata["crs"] == meta["crs"]


def test_float_classification_with_integral_values_fits_and_fractions_are_refused(tmp_path):
    pts = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    write_points(tmp_path / "c.las", PointCloud(pts, {"classification": np.array([2.0, 6.0], np.float32)}))
    out = laspy.read(tmp_path / "c.las")
    assert out.header.point_format.id == 0 and np.asarray(out.classification).tolist() == [2, 6]
    with pytest.raises(PointCloudError, match="'classification' has fractional values"):
        write_points(tmp_path / "f.las", PointCloud(pts, {"classification": np.array([2.5, 6.0])}))


def test_cloud_without_las_metadata(tmp_path):
    pts = np.array([[10.25, -3.5, 0.001], [12.0, 4.75, 2.5]])
    write_points(
        tmp_path / "p.las", PointCloud(pts, {"intensity": np.array([1, 2], np.uint16)}, format="ply")
    )
    h = laspy.read(tmp_path / "p.las").header
    np.testing.assert_array_equal(h.scales, [0.001] * 3)
    np.testing.assert_array_equal(h.offsets, [10.0, -4.0, 0.0])
    assert (h.point_format.id, str(h.version), h.system_identifier) == (0, "1.2", "OTHER")
    assert h.generating_software == f"lattice {lattice.__version__}" and not h.vlrs
    np.testing.assert_allclose(read_points(tmp_path / "p.las").points, pts, atol=5e-4)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (np.array([0, 1, 128, 255], np.uint8), [0, 257, 128 * 257, 65535]),  # 8-bit: x 257
        (np.array([0, 1, 255, 40000], np.uint16), [0, 1, 255, 40000]),  # uint16: as it is
        (np.array([0, 1, 200, 255], np.uint16), [0, 1, 200, 255]),  # 8-bit values in 16 bits: as they are
        (np.array([0.0, 0.5, 1.0, 0.25], np.float32), [0, 32768, 65535, 16384]),  # unit floats
        (np.array([0.0, 127.5, 255.0, 1.5]), [0, 32768, 65535, 386]),  # floats at scale 255 (a voxel mean)
    ],
)
def test_colour_channels(tmp_path, values, expected):
    pts = np.arange(12, dtype=np.float64).reshape(4, 3)
    attrs = {c: values for c in ("red", "green", "blue")} | {"alpha": np.array([0, 1, 2, 255], np.uint8)}
    write_points(tmp_path / "c.las", PointCloud(pts, attrs))
    out = laspy.read(tmp_path / "c.las")
    assert out.header.point_format.id == 2 and out.red.dtype == np.uint16
    for c in ("red", "green", "blue"):
        assert np.asarray(out[c]).tolist() == expected, c
    assert "alpha" in out.point_format.extra_dimension_names and np.asarray(out["alpha"]).tolist() == [
        0,
        1,
        2,
        255,
    ]


def _meta(**changes) -> dict:
    meta = read_points(_src("aerial_lidar/simple.las")).metadata
    return json.loads(json.dumps(meta)) | changes


def test_point_format_and_version_when_the_attributes_do_not_fit(tmp_path):
    pts = np.zeros((2, 3))
    rgb = {c: np.array([1, 2], np.uint16) for c in ("red", "green", "blue")}
    write_points(tmp_path / "a.las", PointCloud(pts, rgb, metadata=_meta(point_format=1, version="1.2")))
    h = laspy.read(tmp_path / "a.las").header
    assert (h.point_format.id, str(h.version)) == (
        2,
        "1.2",
    )  # format 1 has no colour; 2 is the first that has
    nir = rgb | {"nir": np.array([5, 6], np.uint16)}
    write_points(tmp_path / "b.las", PointCloud(pts, nir, metadata=_meta(point_format=3, version="1.2")))
    h = laspy.read(tmp_path / "b.las").header
    assert (h.point_format.id, str(h.version)) == (8, "1.4")  # nir needs format 8, which needs 1.4
    write_points(tmp_path / "c.las", PointCloud(pts, rgb, metadata=_meta(point_format=3, version="1.3")))
    assert str(laspy.read(tmp_path / "c.las").header.version) == "1.3"  # never older than the source


def test_offsets_that_cannot_hold_the_coordinates_fall_back_keeping_the_scale(tmp_path):
    pts = np.array([[3.0e7, 5.0e7, 10.0], [3.0e7 + 100.25, 5.0e7 + 7.5, 12.0]])
    meta = _meta(scales=[0.01, 0.01, 0.01], offsets=[0.0, 0.0, 0.0])
    with pytest.warns(
        LasFallbackWarning, match=r"kept the scale, wrote offsets \[30000000.0, 50000000.0, 0.0\]"
    ):
        write_points(tmp_path / "o.las", PointCloud(pts, metadata=meta))
    h = laspy.read(tmp_path / "o.las").header
    np.testing.assert_array_equal(h.scales, [0.01] * 3)
    np.testing.assert_allclose(read_points(tmp_path / "o.las").points, pts, atol=1e-9)
    wide = np.array([[0.0, 0.0, 0.0], [5.0e7, 1.0, 1.0]])  # a 50,000 km span: not at 0.01 in int32
    with pytest.warns(LasFallbackWarning, match=r"wrote scales \[0.1, 0.1, 0.1\]"):
        write_points(tmp_path / "w.las", PointCloud(wide, metadata=meta))
    np.testing.assert_array_equal(laspy.read(tmp_path / "w.las").header.scales, [0.1] * 3)


def test_evlrs_and_extra_dim_names_are_written(tmp_path):
    pts = np.zeros((3, 3))
    meta = _meta(point_format=6, version="1.4")
    meta["evlrs"] = [{"user_id": "lattice", "record_id": 7, "description": "big", "data": "AAEC"}]
    meta["extra_dims"] = [{"name": "Deviation", "attribute": "deviation", "description": "pulse shape"}]
    cloud = PointCloud(pts, {"deviation": np.array([1, 2, 3], np.uint16)}, metadata=meta)
    write_points(tmp_path / "e.las", cloud)
    assert ("lattice", 7, b"\x00\x01\x02") in las_records_reference(tmp_path / "e.las")
    out = laspy.read(tmp_path / "e.las")
    assert out.point_format.dimension_by_name("Deviation").description == "pulse shape"
    assert read_points(tmp_path / "e.las").metadata["evlrs"][0]["data"] == "AAEC"
    meta["vlrs"] = [{"user_id": "x"}]
    with pytest.raises(PointCloudError, match="malformed LAS record entry"):
        write_points(tmp_path / "bad.las", PointCloud(pts, metadata=meta))
