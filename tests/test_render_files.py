"""lattice render with no flags on every file of ../shared/data and on voxelize / pool outputs
(issue 19): the right size, more than a trivial number of colours, the colouring stated in the
title, the legend or colour bar beside the data (computed boxes), the up axis detected."""

from __future__ import annotations

import numpy as np
import pytest
from cli_helpers import data_file
from io_helpers import DATA
from PIL import Image

from lattice.io import PointCloud
from lattice.render import read_for_render, render_picture
from lattice.render.palettes import class_colours

SIZE = (480, 240)
SKIP = {".md", ".txt", ".conf", ".label"}
# Files read_points cannot read without flags, and why (SOURCES.md): per-point label arrays
# with no coordinates, and ScanNet's raw float32 x,y,z,r,g,b (needs --columns).
UNREADABLE = {
    "indoor/scannet_scene0000_00_xyzrgb.bin": "columns=",
    "semantickitti/demo_labels_000700.npy": "not points",
    "semantickitti/demo_labels_000750.npy": "not points",
    "semantickitti/kitti_01_labels_000000.npy": "not points",
    "semantickitti/kitti_01_labels_000001.npy": "not points",
    "semantickitti/kitti_01_labels_000002.npy": "not points",
}


def _files() -> list[str]:
    if not DATA.is_dir():
        return []
    return sorted(
        p.relative_to(DATA).as_posix()
        for p in DATA.rglob("*")
        if p.is_file() and p.suffix not in SKIP and p.name != "SHA256SUMS"
    )


def _check(pic, size=SIZE) -> None:
    img = np.asarray(pic.image)
    assert img.shape == (size[1], size[0], 3)
    drawn = np.concatenate([img[b.y0 : b.y1, b.x0 : b.x1].reshape(-1, 3) for b in pic.layout.data.values()])
    assert (drawn != 255).any(axis=1).mean() > 0.01  # points cover part of the data areas
    assert len(np.unique(drawn, axis=0)) > 2  # more than white and one colour
    assert f"colour: {pic.colouring.shown}" in pic.title[1] and f"up: {pic.up.axis}" in pic.title[1]
    for side in (pic.legend, pic.colorbar):
        if side is not None:
            assert not any(side.intersects(b) for b in pic.layout.data.values())
            assert not any(side.intersects(b) for b in pic.layout.scalebars.values())
    boxes = list(pic.layout.data.values())
    assert not any(a.intersects(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


@pytest.mark.parametrize("rel", _files() or ["(no shared data)"])
def test_defaults_on_every_file(rel):
    path = data_file(rel)
    try:
        cloud, about = read_for_render(path)
    except ValueError as err:
        assert rel in UNREADABLE and UNREADABLE[rel] in str(err), f"{rel} became unreadable: {err}"
        pytest.skip(f"unreadable without flags ({UNREADABLE[rel]}): {rel}")
    assert rel not in UNREADABLE, f"{rel} is readable now: take it off UNREADABLE"
    _check(render_picture(cloud, about=about, width=SIZE[0], height=SIZE[1], max_points=60_000))


def test_default_colouring_follows_the_data():
    cases = {
        "aerial_lidar/autzen_trim.las": ("label (classification)", "ASPRS classes", "z"),
        "osd_labeled/learn0.pcd": ("label (label)", "ids", "-y"),
        "indoor/open3d_fragment.pcd": ("rgb (red/green/blue)", "", "z"),
        "semantickitti/seq00_000000.bin": ("intensity (intensity)", "", "z"),
        "scanned_objects/dragon_50k_vcg.ply": ("height (y)", "", "y"),
        "stanford_bunny/bun000.ply": ("height (y)", "", "y"),
    }
    for rel, (shown, source, up) in cases.items():
        cloud, about = read_for_render(data_file(rel))
        pic = render_picture(cloud, about=about, width=400, height=200, max_points=20_000)
        assert (pic.colouring.shown, pic.colouring.source, pic.up.axis) == (shown, source, up), rel


def test_legend_counts_only_drawn_points():
    cloud, about = read_for_render(data_file("osd_labeled/learn0.pcd"))  # 124,908 NaN points, label 0
    pic = render_picture(cloud, about=about, width=400, height=200)
    assert sum(e.count for e in pic.colouring.legend) == pic.drawn == 182_292
    assert 0 not in {e.id for e in pic.colouring.legend}
    assert "124,908 non-finite left out" in pic.title[0]


def test_neighbouring_ids_get_distinct_colours():
    for ids in ([-1, 0], [0, 1], [1, 20, 21, 30], list(range(24))):
        colours = np.array(list(class_colours(np.array(ids), {}).values()), float)
        d = np.linalg.norm(colours[:, None] - colours[None], axis=2)
        assert d[~np.eye(len(ids), dtype=bool)].min() > 55, ids  # every pair, not only neighbours


def test_color_override_and_missing_colouring():
    cloud, about = read_for_render(data_file("aerial_lidar/simple.las"))
    pic = render_picture(cloud, about=about, color="feature:intensity", width=400, height=200)
    assert pic.colouring.kind == "scalar" and pic.colorbar is not None and pic.legend is None
    bunny, _ = read_for_render(data_file("stanford_bunny/bun000.ply"))
    with pytest.raises(ValueError, match=r"--color rgb needs .*this file has: height"):
        render_picture(bunny, color="rgb")
    with pytest.raises(ValueError, match="feature:nope.*feature:NAME for NAME in"):
        render_picture(cloud, color="feature:nope")


def test_options_views_up_point_size_subsample():
    cloud, about = read_for_render(data_file("aerial_lidar/autzen_trim.las"))
    pic = render_picture(
        cloud, about=about, width=900, height=300, views=("top", "side", "front"), up="z", point_size=3,
        max_points=5000,
    )  # fmt: skip
    assert set(pic.layout.data) == {"top", "side", "front"} and pic.point_size == 3
    assert set(pic.layout.scalebars) == {"top", "side", "front"}
    assert pic.drawn == 5000 and "even subsample of 110,000" in pic.title[0] and "(given)" in pic.title[1]
    _check(pic, (900, 300))


def test_voxelize_and_pool_outputs_render(tmp_path):
    from lattice.pipeline import VoxelizeOptions, pool_file, voxelize_file

    src = data_file("aerial_lidar/autzen_trim.las")
    vox, pooled = tmp_path / "v.npz", tmp_path / "p.npz"
    voxelize_file(src, vox, VoxelizeOptions(voxel_size=4.0))
    pool_file(vox, pooled, mode="max", kernel_size=2, stride=2)
    for path in (vox, pooled):
        cloud, about = read_for_render(path)
        assert about.kind == "voxels" and about.voxel in (4.0, 8.0)
        pic = render_picture(cloud, about=about, width=480, height=240)
        assert pic.colouring.shown == "label (classification)" and "voxels drawn" in pic.title[0]
        _check(pic)
        pic = render_picture(cloud, about=about, color="feature:intensity", width=480, height=240)
        assert pic.colouring.shown == "feature:intensity"
        _check(pic)


def test_jpeg_and_size_through_the_cli(tmp_path):
    from cli_helpers import lattice

    out = tmp_path / "b.jpg"
    r = lattice("render", data_file("stanford_bunny/bun_zipper_res4.ply"), "-o", out, "--size", "500x300")
    assert r.returncode == 0, r.stderr
    assert "up y" in r.stdout and "colour intensity (intensity)" in r.stdout
    with Image.open(out) as im:
        assert (im.format, im.size) == ("JPEG", (500, 300))
    r = lattice("render", data_file("stanford_bunny/bun_zipper_res4.ply"), "-o", out, "--color", "label")
    assert r.returncode == 1 and "this file has: intensity (intensity); height" in r.stderr
    r = lattice("render", data_file("stanford_bunny/bun_zipper_res4.ply"), "-o", out, "--view", "under")
    assert r.returncode == 2 and "--view must be among" in r.stderr


def test_model_class_table_names_the_legend():
    rng = np.random.default_rng(0)
    cloud = PointCloud(
        rng.normal(size=(500, 3)) * [10, 10, 1],
        {"pred_label": rng.integers(0, 3, 500).astype(np.int32)},
        format="ply",
        metadata={"comments": ["lattice model-run labels: pred_label", "class 0 car 100 150 245",
                               "class 1 road 255 0 255", "class 2 building 255 200 0"]},
    )  # fmt: skip
    pic = render_picture(cloud, width=400, height=200)
    assert pic.colouring.source == "model classes"
    assert [(e.name, e.color) for e in pic.colouring.legend][:2] == [
        ("car", (100, 150, 245)),
        ("road", (255, 0, 255)),
    ]


def test_model_run_npz_class_table_names_the_legend(tmp_path):
    import json

    from lattice.io.npz import save_npz

    rng = np.random.default_rng(1)
    table = [
        {"id": 0, "name": "unlabeled", "color": [0, 0, 0]},
        {"id": 9, "name": "road", "color": [255, 0, 255]},
    ]
    path = tmp_path / "out.npz"
    with open(path, "wb") as f:
        save_npz(f, {"points": rng.normal(size=(300, 3)) * [5, 5, 0.5], "pred_label": rng.choice([0, 9], 300),
                     "classes": np.array(json.dumps(table))})  # fmt: skip
    cloud, about = read_for_render(path)
    pic = render_picture(cloud, about=about, width=400, height=200)
    assert pic.colouring.source == "model classes"
    assert [(e.name, e.color) for e in pic.colouring.legend] == [
        ("unlabeled", (0, 0, 0)),
        ("road", (255, 0, 255)),
    ]
