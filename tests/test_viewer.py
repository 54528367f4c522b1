"""lattice view (issue 19): one self-contained HTML page that a real headless Chromium opens with
the network off, drawing the cloud (non-blank canvas) without JavaScript errors."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from browser_helpers import chromium, console_errors, dump_dom, screenshot
from cli_helpers import data_file, lattice
from PIL import Image

from lattice.io import PointCloud
from lattice.viewer import build_page, write_view

needs_chromium = pytest.mark.skipif(
    chromium() is None, reason="no Chromium installed (apt-get install chromium; .ci/run installs it)"
)


def _page_data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def _cloud(n=4000, seed=0) -> PointCloud:
    rng = np.random.default_rng(seed)
    pts = rng.normal(size=(n, 3)) * [10, 6, 1]
    attrs = {
        "classification": rng.integers(1, 4, n).astype(np.uint8),
        "intensity": rng.random(n).astype(np.float32),
    }
    return PointCloud(pts, attrs, format="las")


def test_page_is_self_contained():
    html, summary = build_page(_cloud())
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)\s*=", html, re.I)  # everything inline
    assert not re.search(r"https?://", html)  # and nothing fetched from anywhere
    data = _page_data(html)
    assert data["n"] == 4000 and summary["colourings"] == ["classification", "height", "intensity"]
    assert data["attributes"][data["default"]]["label"] == "classification"
    names = [c["name"] for c in data["attributes"][0]["classes"]]
    assert names == ["unclassified", "ground", "low vegetation"]


def test_subsample_note_and_nan_points():
    cloud = _cloud(3000)
    pts = cloud.points.copy()
    pts[:10] = np.nan
    html, summary = build_page(PointCloud(pts, cloud.attributes, format="las"), max_points=1000)
    data = _page_data(html)
    assert (data["n"], data["total"], summary["shown"]) == (1000, 3000, 1000)
    assert (
        "even subsample of 1,000 of 2,990 points" in data["note"]
        and "10 points with non-finite" in data["note"]
    )


def test_cli_view(tmp_path):
    src = data_file("aerial_lidar/simple.las")
    r = lattice("view", src, "-o", tmp_path / "v.html", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert (s["shown"], s["up"], s["default"]) == (1065, "z", "classification")
    assert lattice("view", src, "-o", tmp_path / "v.png").returncode == 2
    assert lattice("view", src, "-o", tmp_path / "w.html", "--up", "q").returncode == 2
    assert not (tmp_path / "w.html").exists()


def _non_blank(png, canvas_width: int) -> tuple[float, int]:
    with Image.open(png) as im:
        a = np.asarray(im.convert("RGB"))[:, :canvas_width]
    ink = (a < 245).any(axis=2)
    return float(ink.mean()), len(np.unique(a[ink].reshape(-1, 3), axis=0))


@needs_chromium
def test_autzen_page_draws_offline_in_chromium(tmp_path):
    page = tmp_path / "autzen.html"
    write_view(data_file("aerial_lidar/autzen_trim.las"), page)
    dom = dump_dom(page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout).group(0)
    assert 'data-drawn="110000"' in body and 'data-errors=""' in body, body
    assert console_errors(dom.stderr) == []
    shot = screenshot(page, tmp_path / "autzen.png", size=(1000, 700))
    assert shot.returncode == 0, shot.stderr[-2000:]
    covered, colours = _non_blank(tmp_path / "autzen.png", 1000 - 300)  # the canvas, left of the panel
    assert covered > 0.05 and colours > 2, (covered, colours)


@needs_chromium
def test_voxel_page_draws_in_chromium(tmp_path):
    from lattice.pipeline import VoxelizeOptions, voxelize_file

    vox = tmp_path / "v.npz"
    voxelize_file(data_file("stanford_bunny/bun_zipper.ply"), vox, VoxelizeOptions(voxel_size=0.004))
    page = tmp_path / "v.html"
    s = write_view(vox, page)
    assert s["kind"] == "voxels" and s["up"] == "y"
    dom = dump_dom(page)
    body = re.search(r"<body[^>]*>", dom.stdout).group(0)
    assert f'data-drawn="{s["shown"]}"' in body and 'data-errors=""' in body, body


def test_open_opens_the_page_in_the_browser(tmp_path, monkeypatch):
    import webbrowser

    from typer.testing import CliRunner

    from lattice_cli.main import app

    opened = []
    monkeypatch.setattr(webbrowser, "open", opened.append)
    src = tmp_path / "c.npz"
    from lattice.io import write_points

    write_points(src, _cloud(500))
    res = CliRunner().invoke(app, ["view", str(src), "-o", str(tmp_path / "c.html"), "--open"])
    assert res.exit_code == 0, res.output
    assert opened == [(tmp_path / "c.html").resolve().as_uri()]
