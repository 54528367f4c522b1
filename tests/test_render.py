"""lattice render: a non-empty picture of the right size, every colour mode, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from lattice.io import PointCloud, write_points
from lattice.render import label_info, render_cloud
from lattice_cli.main import app

runner = CliRunner()


def _cloud(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    pts = rng.normal(size=(n, 3)) * [10, 10, 1]
    labels = (pts[:, 2] > 0).astype(np.int32) + 1
    attrs = {
        "label": labels,
        "intensity": rng.random(n).astype(np.float32),
        "red": (labels * 100).astype(np.uint8),
        "green": np.zeros(n, np.uint8),
        "blue": np.zeros(n, np.uint8),
    }
    return PointCloud(
        pts, attrs, metadata={"comments": ["class 1 road 255 0 255", "class 2 car 100 150 245"]}
    )


@pytest.mark.parametrize("color", ["label", "height", "intensity", "rgb", "feature:1"])
def test_render_draws_points_in_every_mode(color):
    img = np.asarray(render_cloud(_cloud(), color=color, width=400, height=200))
    assert img.shape == (200, 400, 3)
    assert (img != 255).any(axis=2).mean() > 0.02  # points (and text) were drawn on the white canvas


def test_label_colours_and_names_come_from_the_ply_comments():
    info = label_info(_cloud())
    assert info.names == {1: "road", 2: "car"} and info.colors[1] == (255, 0, 255)
    img = np.asarray(render_cloud(_cloud(), color="label", width=400, height=200))
    assert ((img == [255, 0, 255]).all(axis=2)).any() and ((img == [100, 150, 245]).all(axis=2)).any()


def test_render_errors():
    with pytest.raises(ValueError, match="needs one of the attributes pred_label, label, classification"):
        render_cloud(PointCloud(np.zeros((3, 3)), {}), color="label")
    with pytest.raises(ValueError, match="--color must be one of"):
        render_cloud(_cloud(), color="rainbow")
    with pytest.raises(ValueError, match="no finite points"):
        render_cloud(PointCloud(np.full((2, 3), np.nan), {}), color="height")


def test_cli_render(tmp_path):
    src = tmp_path / "labels.ply"
    write_points(src, _cloud())
    out = tmp_path / "view.png"
    res = runner.invoke(app, ["render", str(src), "-o", str(out), "--width", "300", "--height", "150"])
    assert res.exit_code == 0, res.output
    with Image.open(out) as im:
        assert im.size == (300, 150)
    assert runner.invoke(app, ["render", str(src), "-o", str(tmp_path / "view.gif")]).exit_code == 2
    res = runner.invoke(app, ["render", str(src), "-o", str(tmp_path / "view.jpg"), "--size", "320x160"])
    assert res.exit_code == 0, res.output
    with Image.open(tmp_path / "view.jpg") as im:
        assert im.format == "JPEG" and im.size == (320, 160)
    res = runner.invoke(app, ["render", str(tmp_path / "missing.ply"), "-o", str(tmp_path / "x.png")])
    assert res.exit_code == 1 and not (tmp_path / "x.png").exists()
