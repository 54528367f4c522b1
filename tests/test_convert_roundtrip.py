"""Property-based round trips through ``convert_file`` for every format pair it supports, with
every attribute kind, asserting values per kind (issue 16).

A random cloud is written in format A (``write_points``), converted to format B
(``lattice.pipeline.convert.convert_file``, what ``lattice convert`` runs) and read back; each
attribute of the original is compared with what B holds, by its kind:

- coordinates: exact (float64, or float32 for the float32 scan formats), within half of
  LAS's 0.001 scale when A or B is LAS/LAZ;
- categorical ids: the same integers; continuous, normal and time values: the same floats
  (float32 stays float32 exactly, float64 times exactly);
- colour: the same colour, i.e. value / full scale (8-bit PLY/PCD/text channels against LAS's
  16-bit ones);
- KITTI's fractional float intensity, which LAS cannot hold in its uint16 field, comes back
  as ``remission`` from LAS/LAZ, with the same values.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lattice.io import PointCloud, read_points, write_points
from lattice.io.kinds import colour_scale
from lattice.pipeline.convert import convert_file
from lattice.pipeline.export import extension_of, fit_for

FULL = ("ply", "npz", "pcd", "las", "laz", "text", "npy")  # hold every kind, named
SCANS = ("ply", "npz", "pcd", "text", "npy")  # hold a KITTI / nuScenes scan's attributes too
LAS = ("las", "laz")

FULL_PAIRS = list(itertools.product(FULL, FULL))
KITTI_PAIRS = [(a, b) for a in (*SCANS, "kitti") for b in (*SCANS, *LAS, "kitti")]
NUSCENES_PAIRS = [(a, b) for a in (*SCANS, "nuscenes") for b in (*SCANS, *LAS, "nuscenes")]


def _unit_normals(draw, n):
    v = np.array(draw(st.lists(st.floats(-1, 1, width=32), min_size=3 * n, max_size=3 * n)), np.float64)
    v = v.reshape(n, 3) + np.array([0.0, 0.0, 2.0])  # never the zero vector
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


@st.composite
def full_clouds(draw):
    """Every kind: categorical label, colour channels, normals, a continuous value, a time."""
    n = draw(st.integers(1, 25))
    ints = st.lists(st.integers(-1_000_000, 1_000_000), min_size=3 * n, max_size=3 * n)
    points = np.array(draw(ints), np.float64).reshape(n, 3) / 1024  # exact in every float64 format
    byte = st.lists(st.integers(0, 255), min_size=n, max_size=n)
    attrs = {
        "label": np.array(draw(st.lists(st.integers(0, 300), min_size=n, max_size=n)), np.uint16),
        "red": np.array(draw(byte), np.uint8),
        "green": np.array(draw(byte), np.uint8),
        "blue": np.array(draw(byte), np.uint8),
        "confidence": np.array(
            draw(st.lists(st.floats(-1e3, 1e3, width=32), min_size=n, max_size=n)), np.float32
        ),
        "gps_time": np.array(draw(st.lists(st.floats(1e5, 5e5), min_size=n, max_size=n)), np.float64),
    }
    normals = _unit_normals(draw, n)
    attrs.update(nx=normals[:, 0], ny=normals[:, 1], nz=normals[:, 2])
    return PointCloud(points, attrs)


@st.composite
def scan_clouds(draw, ring: bool):
    """A KITTI (x, y, z, intensity) or nuScenes (+ ring) scan: float32 everything."""
    n = draw(st.integers(1, 25))
    # no subnormal coordinates: the raw .bin check refuses magnitudes below 1e-30 as misread bytes
    coord = st.floats(-80, 80, width=32, allow_subnormal=False).map(lambda v: 0.0 if abs(v) < 1e-30 else v)
    pts = np.array(draw(st.lists(coord, min_size=3 * n, max_size=3 * n)), np.float32)
    attrs = {
        "intensity": np.array(draw(st.lists(st.floats(0, 1, width=32), min_size=n, max_size=n)), np.float32)
    }
    if ring:
        attrs["ring"] = np.array(draw(st.lists(st.integers(0, 31), min_size=n, max_size=n)), np.float32)
    return PointCloud(pts.reshape(n, 3), attrs)


def _columns(path, fmt: str, names) -> dict:
    """``columns=`` for reading ``path``: a .npy needs its names (x, y, z, then the attributes)."""
    return {"columns": ("x", "y", "z", *names)} if fmt == "npy" else {}


def _round_trip(tmp_path, cloud: PointCloud, a: str, b: str) -> tuple[PointCloud, PointCloud]:
    """(what A holds as read back, what B holds after ``convert_file(A, B)``)."""
    src = tmp_path / f"a{extension_of(a)}"
    dst = tmp_path / f"b{extension_of(b)}"
    for p in (src, dst):
        if p.exists():
            os.remove(p)
    written, _ = fit_for(cloud, a)
    write_points(src, written, format=a)
    cols = _columns(src, a, written.attributes)
    held = read_points(src, format=a, **cols)
    convert_file(src, dst, format=a, output_format=b, **cols)
    out = read_points(dst, format=b, **_columns(dst, b, held.attributes))
    return held, out


def _same_points(got: np.ndarray, want: np.ndarray, a: str, b: str) -> None:
    if a in LAS or b in LAS:
        # half of LAS's 1 mm scale, plus the original's own rounding where it is float32: a text
        # file writes the shortest decimal of the float32 (10.3195 for 10.31949997...), which
        # lands on the half-millimetre and rounds away from the float32 value by 0.5 mm + 3e-8
        rel = 2.0**-23 if want.dtype == np.float32 else 0.0
        np.testing.assert_allclose(got, want, rtol=rel, atol=0.0005 + 1e-9)
    elif want.dtype == np.float32 or got.dtype == np.float32:
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    else:
        np.testing.assert_array_equal(got, want)


def _check(original: PointCloud, out: PointCloud, a: str, b: str) -> None:
    assert len(out) == len(original)
    _same_points(out.points, original.points, a, b)
    for name, want in original.attributes.items():
        key = name
        fractional = want.dtype.kind == "f" and np.any(want != np.round(want))
        if name == "intensity" and fractional and (a in LAS or b in LAS):
            key = "remission"  # LAS's uint16 intensity cannot hold it (whole numbers it can)
        assert key in out.attributes, (name, a, b, list(out.attributes))
        got = out.attributes[key]
        kind = original.attribute_info()[name].kind
        if kind == "colour":
            np.testing.assert_array_equal(
                got.astype(np.float64) / colour_scale(got) if got.max(initial=0) else got,
                want.astype(np.float64) / 255.0 if want.max(initial=0) else want,
                err_msg=f"{name}: {a} -> {b}",
            )
        elif kind == "categorical":
            np.testing.assert_array_equal(
                got.astype(np.int64), want.astype(np.int64), err_msg=f"{name}: {a} -> {b}"
            )
        else:  # continuous, normal, time: the same float values
            np.testing.assert_array_equal(got.astype(want.dtype), want, err_msg=f"{name}: {a} -> {b}")
            if kind == "time":
                assert got.dtype == np.float64


SETTINGS = settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.parametrize(("a", "b"), FULL_PAIRS, ids=[f"{a}-{b}" for a, b in FULL_PAIRS])
@SETTINGS
@given(cloud=full_clouds())
def test_every_kind_survives_a_conversion(tmp_path, a, b, cloud):
    _, out = _round_trip(tmp_path, cloud, a, b)
    _check(cloud, out, a, b)


@pytest.mark.parametrize(("a", "b"), KITTI_PAIRS, ids=[f"{a}-{b}" for a, b in KITTI_PAIRS])
@SETTINGS
@given(cloud=scan_clouds(ring=False))
def test_kitti_scans_convert(tmp_path, a, b, cloud):
    _, out = _round_trip(tmp_path, cloud, a, b)
    _check(cloud, out, a, b)


@pytest.mark.parametrize(("a", "b"), NUSCENES_PAIRS, ids=[f"{a}-{b}" for a, b in NUSCENES_PAIRS])
@SETTINGS
@given(cloud=scan_clouds(ring=True))
def test_nuscenes_scans_convert(tmp_path, a, b, cloud):
    _, out = _round_trip(tmp_path, cloud, a, b)
    _check(cloud, out, a, b)


def test_pairs_cover_every_writable_format():
    from lattice.io import FORMATS

    covered = {f for pair in FULL_PAIRS + KITTI_PAIRS + NUSCENES_PAIRS for f in pair}
    assert covered == set(FORMATS)
