"""The training-domain record (``model.json``'s ``domain``) and the check ``model-run`` makes.

``domain_stats`` is compared with a direct NumPy computation over the concatenated scans
(and ``np.unique`` rows for points per voxel); ``check_domain``'s three rules on clouds
moved out of a known domain; the shipped bundle's record against its training scans; and
the command on real files: aerial LiDAR warns (and fails with --strict-domain), every
SemanticKITTI ``.bin`` of ../shared/data is in domain.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from cli_helpers import data_file, lattice
from io_helpers import DATA

from lattice.io import PointCloud, read_points
from lattice.models import (
    BundleError,
    ClassInfo,
    Domain,
    FeatureSpec,
    Outputs,
    Preprocessing,
    check_domain,
    domain_stats,
    load_model,
    minkunet,
    save_model,
)
from lattice.models.domain import points_per_voxel

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "examples" / "models" / "minkunet14-semantickitti"
PRE = Preprocessing(
    0.5,
    (FeatureSpec("ones"), FeatureSpec("z"), FeatureSpec("intensity", aliases=("remission",))),
    (0.1, 0, 0),
)
TRAIN = ["kitti_01_points_000000", "kitti_01_points_000001", "kitti_01_points_000002"]
TRAIN += ["demo_points_000700", "demo_points_000750"]


def scans(k: int = 3) -> list[PointCloud]:
    """Street-like scans of different sizes with an intensity, a few NaN points and NaN intensities."""
    out = []
    for i in range(k):
        rng = np.random.default_rng(i)
        n = 2000 + 700 * i
        pts = np.column_stack(
            [rng.uniform(-40, 40, n), rng.uniform(-30, 30 + 5 * i, n), rng.normal(-1.5 + 0.2 * i, 0.8, n)]
        )
        pts[:3] = np.nan
        intensity = rng.uniform(0, 1, n).astype(np.float32)
        intensity[5] = np.nan
        out.append(PointCloud(pts, {"remission" if i == 1 else "intensity": intensity}))
    return out


def reference_ppv(points: np.ndarray, voxel: float, origin) -> float:
    pts = points[np.isfinite(points).all(axis=1)]
    cells = np.floor((pts - np.asarray(origin)) / voxel)
    return len(pts) / len(np.unique(cells, axis=0))


def test_domain_stats_match_a_direct_numpy_computation():
    clouds = scans()
    d = domain_stats(clouds, PRE)
    finite = [c.points[c.finite_mask()] for c in clouds]
    every = np.concatenate(finite)
    assert d.scans == 3 and d.voxel_size == (0.5, 0.5, 0.5)
    assert [v.name for v in d.values] == ["x", "y", "z", "intensity"]
    for i, axis in enumerate("xyz"):
        v = d.value(axis)
        col = every[:, i]
        np.testing.assert_allclose(
            [v.mean, v.std, v.min, v.max], [col.mean(), col.std(), col.min(), col.max()]
        )
        ext = np.array([p[:, i].max() - p[:, i].min() for p in finite])
        e = d.extent[i]
        np.testing.assert_allclose(
            [e.mean, e.std, e.min, e.max], [ext.mean(), ext.std(), ext.min(), ext.max()]
        )
    inten = np.concatenate(
        [np.asarray(next(iter(c.attributes.values())), np.float64)[c.finite_mask()] for c in clouds]
    )
    inten = inten[np.isfinite(inten)]
    v = d.value("intensity")
    np.testing.assert_allclose(
        [v.mean, v.std, v.min, v.max], [inten.mean(), inten.std(), inten.min(), inten.max()]
    )
    ppv = np.array([reference_ppv(c.points, 0.5, PRE.origin) for c in clouds])
    p = d.points_per_voxel
    np.testing.assert_allclose([p.mean, p.std, p.min, p.max], [ppv.mean(), ppv.std(), ppv.min(), ppv.max()])


@pytest.mark.parametrize("voxel", [0.05, 0.3, 2.0])
def test_points_per_voxel_against_unique_rows(voxel):
    rng = np.random.default_rng(3)
    pts = np.concatenate([rng.normal(size=(3000, 3)) * 5, np.repeat(rng.normal(size=(50, 3)), 20, axis=0)])
    assert points_per_voxel(pts, (voxel,) * 3, (0.2, -0.1, 0)) == pytest.approx(
        reference_ppv(pts, voxel, (0.2, -0.1, 0))
    )
    far = pts * 1e7  # a span too large for one packed key: the row-sort path
    assert points_per_voxel(far, (voxel,) * 3) == pytest.approx(reference_ppv(far, voxel, (0, 0, 0)))
    assert points_per_voxel(np.zeros((0, 3)), (voxel,) * 3) == 0.0


def test_domain_stats_refuses_no_scans_and_a_missing_attribute():
    with pytest.raises(ValueError, match="at least one training scan"):
        domain_stats([], PRE)
    with pytest.raises(ValueError, match="needs the point attribute 'intensity' or 'remission'"):
        domain_stats([PointCloud(np.zeros((4, 3)))], PRE)


def test_domain_json_round_trip_and_errors():
    d = domain_stats(scans(), PRE)
    back = Domain.from_json(json.loads(json.dumps(d.to_json())))
    assert back.scans == d.scans and back.voxel_size == d.voxel_size
    for a, b in zip(
        (*back.values, *back.extent, back.points_per_voxel),
        (*d.values, *d.extent, d.points_per_voxel),
        strict=True,
    ):
        assert a.name == b.name
        np.testing.assert_allclose([a.mean, a.std, a.min, a.max], [b.mean, b.std, b.min, b.max], rtol=1e-5)
    doc = d.to_json()
    with pytest.raises(BundleError, match="domain must have exactly the keys"):
        Domain.from_json({k: v for k, v in doc.items() if k != "extent"})
    bad = json.loads(json.dumps(doc))
    bad["values"]["z"]["std"] = -1
    with pytest.raises(BundleError, match="domain z: needs std >= 0"):
        Domain.from_json(bad)
    bad["values"]["z"] = {"mean": 0}
    with pytest.raises(BundleError, match="domain.values.z must have exactly the keys"):
        Domain.from_json(bad)
    assert Domain.from_json(None) is None


def test_a_saved_bundle_keeps_its_domain(tmp_path):
    mx.random.seed(0)
    d = domain_stats(scans(), PRE)
    out = Outputs((ClassInfo(1, "a", asprs=2), ClassInfo(2, "b")))
    save_model(minkunet(14, 3, 2, width=4), tmp_path / "m", preprocessing=PRE, outputs=out, domain=d)
    bundle = load_model(tmp_path / "m")
    assert bundle.domain is not None and bundle.domain.to_json() == d.to_json()
    assert bundle.outputs.asprs_map == {1: 2, 2: 1, -1: 1}
    save_model(minkunet(14, 3, 2, width=4), tmp_path / "n", preprocessing=PRE, outputs=out)
    assert load_model(tmp_path / "n").domain is None
    assert "domain" not in json.loads((tmp_path / "n" / "model.json").read_text())


def test_check_domain_rules():
    clouds = scans()
    d = domain_stats(clouds, PRE)
    assert check_domain(clouds[1], d, PRE) == ()
    assert check_domain(clouds[1], None, PRE) == ()
    assert check_domain(PointCloud(np.full((3, 3), np.nan), {"intensity": np.zeros(3)}), d, PRE) == ()
    c = clouds[0]
    lifted = PointCloud(c.points + [0, 0, 100], c.attributes)
    (w,) = check_domain(lifted, d, PRE)
    z = d.value("z")
    sigmas = (c.points[c.finite_mask(), 2].mean() + 100 - z.mean) / z.std
    assert w.startswith("z mean 98.") and f"is {sigmas:.0f} standard deviations from the training data's" in w
    assert f"the training data's {z.mean:.2f} m (std {z.std:.3g} m, range {z.min:.2f}..{z.max:.2f} m)" in w
    bright = PointCloud(c.points, {"intensity": c.attributes["intensity"] * 255})
    (w,) = check_domain(bright, d, PRE)
    assert w.startswith("intensity mean 127 is ") and w.endswith("..1)")  # no unit for attributes
    big = PointCloud(c.points * [10, 1, 1], c.attributes)
    (w,) = check_domain(big, d, PRE)  # the mean of x stays near 0: only the extent is off
    assert w.startswith("x extent 799 m is 10.0 times the largest training scan's 79.9")
    small = PointCloud(c.points * 0.01, c.attributes)
    warns = check_domain(small, d, PRE)
    assert warns[0] == "x extent 0.799 m is 0.01 times the smallest training scan's 79.93 m"
    assert [w.split()[0] for w in warns] == ["x", "y", "z", "points"]  # and 100x the points per voxel
    dense = PointCloud(np.repeat(c.points, 8, axis=0), {"intensity": np.repeat(c.attributes["intensity"], 8)})
    (w,) = check_domain(dense, d, PRE)
    assert w.startswith("points per voxel ") and "times the training scans' mean" in w
    no_attr = PointCloud(c.points)  # prediction names the missing attribute; the check skips it
    assert check_domain(no_attr, d, PRE) == ()


@pytest.fixture(scope="module")
def shipped():
    if not SHIPPED.is_dir():
        pytest.skip("shipped model absent")
    return load_model(SHIPPED)


def _training_cloud(name: str) -> PointCloud:
    """A training scan as the trainer reads it: ``NAME.bin`` (with remission) or the
    ``PREFIX_points_N.npy`` of an xyz-only scan."""
    if (DATA / "semantickitti" / f"{name}.bin").exists():
        return read_points(data_file(f"semantickitti/{name}.bin"))
    prefix, number = name.rsplit("_", 1)
    return PointCloud(np.load(data_file(f"semantickitti/{prefix}_points_{number}.npy"), allow_pickle=False))


def test_the_shipped_record_is_the_training_scans_statistics(shipped):
    names = shipped.metadata["training"]["train_scans"]
    assert "seq00_000000" not in names and shipped.metadata["training"]["held_out"] == "seq00_000000"
    want = domain_stats([_training_cloud(n) for n in names], shipped.preprocessing).to_json()
    assert shipped.domain.to_json() == want
    assert shipped.domain.scans == len(names) >= 5


def test_every_semantickitti_bin_is_in_domain(shipped):
    bins = sorted((DATA / "semantickitti").glob("*.bin"))
    if not bins:
        pytest.skip("shared SemanticKITTI scans absent")
    names = {b.name for b in bins}
    assert {"seq00_000000.bin", "sqsv3_seq00_000000.bin"} <= names
    for b in bins:
        assert check_domain(read_points(b), shipped.domain, shipped.preprocessing) == (), b.name


def test_model_run_warns_on_aerial_lidar_and_strict_domain_fails(tmp_path):
    autzen = data_file("aerial_lidar/autzen_trim.las")
    r = lattice("model-run", SHIPPED, autzen, "-o", tmp_path / "out.las", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["domain_checked"] is True and s["domain_warnings"]
    z = [w for w in s["domain_warnings"] if w.startswith("z mean")]
    z_mean = load_model(SHIPPED).domain.to_json()["values"]["z"]["mean"]
    assert len(z) == 1 and f"standard deviations from the training data's {z_mean:.3g} m" in z[0], z
    lines = r.stderr.splitlines()
    assert f"lattice: warning: {autzen}: {z[0]}" in lines
    assert len([ln for ln in lines if ln.startswith("lattice: warning:")]) == len(s["domain_warnings"])
    r = lattice("model-run", SHIPPED, autzen, "-o", tmp_path / "strict.las", "--strict-domain", cwd=tmp_path)
    assert r.returncode == 1 and not (tmp_path / "strict.las").exists()
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("lattice: error:")]
    assert len(err) == 1 and "outside the model's training domain" in err[0] and "nothing written" in err[0]


def test_model_run_on_the_held_out_scan_has_no_domain_warning(tmp_path):
    scan = data_file("semantickitti/seq00_000000.bin")
    r = lattice(
        "model-run", SHIPPED, scan, "-o", tmp_path / "out.npz", "--json", "--strict-domain", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["domain_checked"] is True and s["domain_warnings"] == [] and "warning" not in r.stderr
