"""Make the pictures of docs/cli.md and the README from the bundled demo sample.

    python tools/make_pictures.py [--out docs/images]

Everything comes from ``lattice.data.synthetic_room`` (what ``lattice demo`` runs on), so the
pictures need no downloaded data and change only when the renderer or the sample does:

- ``render_room_labels.png``: ``lattice render`` of the room coloured by class (the class
  table given as ``class ID NAME R G B`` comments, as ``model-run`` writes it), without
  its ceiling so the top view sees the floor and the furniture;
- ``render_room_voxels.png``: the 0.1 m voxels of ``lattice demo`` coloured by their mean
  intensity (``--color feature:intensity``), also without the ceiling;
- ``view_room.png``: ``lattice view``'s page of the same cloud in headless Chromium (skipped,
  saying so, where no Chromium is installed).

Each PNG is written with an adaptive palette when that keeps it under 200 kB.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

from lattice.data import ROOM_CLASSES, synthetic_room
from lattice.io import PointCloud, write_points
from lattice.render import About, read_for_render, render_picture
from lattice.render.palettes import QUALITATIVE

LIMIT = 200_000


def labelled_room() -> PointCloud:
    """The demo room without its ceiling, with its class table as model-run writes it to PLY."""
    room = synthetic_room(50_000, 0)
    keep = room.attributes["label"] != ROOM_CLASSES.index("ceiling")
    rows = [f"class {i} {name} {' '.join(map(str, QUALITATIVE[i]))}" for i, name in enumerate(ROOM_CLASSES)]
    cut = room.select(keep)
    return PointCloud(cut.points, cut.attributes, format="ply", metadata={"comments": rows})


def save_small(image, path: Path) -> int:
    """Write ``image`` as PNG, palette-quantised when the full-colour file is over ``LIMIT`` bytes."""
    image.save(path, optimize=True)
    if path.stat().st_size > LIMIT:
        image.quantize(colors=128, method=2).save(path, optimize=True)
    return path.stat().st_size


def screenshot(page: Path, png: Path) -> bool:
    exe = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    if exe is None:
        print("no Chromium installed: view_room.png not made")
        return False
    args = [exe, "--headless", "--no-sandbox", "--enable-unsafe-swiftshader", "--use-angle=swiftshader",
            "--proxy-server=127.0.0.1:9", "--window-size=1100,560", "--virtual-time-budget=15000",
            f"--screenshot={png}", page.resolve().as_uri()]  # fmt: skip
    subprocess.run(args, capture_output=True, timeout=120, check=True)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "images")
    out = ap.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    room = labelled_room()
    pic = render_picture(
        room, width=1100, height=480, point_size=2, about=About("demo room (no ceiling)", unit="m")
    )
    print(
        "render_room_labels.png",
        save_small(pic.image, out / "render_room_labels.png"),
        "bytes;",
        pic.title[1],
    )
    with tempfile.TemporaryDirectory() as tmp:
        from lattice.pipeline import run_demo
        from lattice.viewer import write_view

        run_demo(output_dir=tmp)
        cloud, about = read_for_render(Path(tmp) / "voxels.npz")
        about = About("lattice demo voxels.npz", about.kind, about.voxel, "m")
        keep = cloud.points[:, 2] < 2.9  # the ceiling's voxels would hide the floor from above
        pic = render_picture(cloud.select(keep), color="feature:intensity", width=1100,
                             height=420, about=about)  # fmt: skip
        print(
            "render_room_voxels.png",
            save_small(pic.image, out / "render_room_voxels.png"),
            "bytes;",
            pic.title[1],
        )
        page = Path(tmp) / "room.html"
        write_points(Path(tmp) / "room_labels.ply", room)
        write_view(Path(tmp) / "room_labels.ply", page)
        if screenshot(page, Path(tmp) / "view.png"):
            from PIL import Image

            with Image.open(Path(tmp) / "view.png") as im:
                print("view_room.png", save_small(im.convert("RGB"), out / "view_room.png"), "bytes")


if __name__ == "__main__":
    main()
