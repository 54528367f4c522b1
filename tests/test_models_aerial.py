"""The shipped aerial ground / non-ground bundle (``examples/models/minkunet14-aerial-ground``).

Through the installed ``lattice`` command, as a PDAL user would run it: the IGN
Saint-Barthélemy tile and the IGN tile held out of the training set (never trained on) labelled with ``--to-classification``, read back
with laspy and scored against the file's own ASPRS classes (ground 2 against high
vegetation 5 and building 6; the tile's 114,784 unclassified points lie at ground height
and are not judged, as ``examples/train_aerial.py`` scores it; on the held-out tile every
ground / non-ground code is).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import data_file, lattice

from lattice.io import read_points
from lattice.models import load_model
from lattice.render import point_colors

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / "examples" / "models" / "minkunet14-aerial-ground"
ST_BARTH = "aerial_lidar/ign_lidarhd/St_Barth_RGAF09_UTM20N_IGN_1988_SB_subset_100m.laz"
HELD_OUT_TILE = "aerial_lidar/ign_lidarhd/test_data_77060_627760_LA93_IGN69.laz"


@pytest.fixture(scope="module")
def bundle():
    if not BUNDLE.is_dir():
        pytest.skip("shipped aerial model absent")
    return load_model(BUNDLE, require_checksum=True)


def test_bundle_records_what_it_never_trained_on(bundle):
    t = bundle.metadata["training"]
    assert HELD_OUT_TILE in t["held_out"] and ST_BARTH in t["held_out"]
    assert not set(t["held_out"]) & set(t["train_scans"])
    assert bundle.outputs.names[:2] == ("ground", "non-ground")
    assert (BUNDLE / "weights.safetensors").stat().st_size <= 10_000_000
    for f in ("README.md", "train.log"):
        assert (BUNDLE / f).stat().st_size > 0


NON_GROUND = (1, 3, 4, 5, 6, 14, 17, 64, 65, 66, 67)  # as train_aerial.py maps ASPRS / IGN codes


@pytest.mark.parametrize(
    "rel, judged",
    [(ST_BARTH, (2, 5, 6)), (HELD_OUT_TILE, (2, *NON_GROUND))],
    ids=["st-barth", "held-out-training-tile"],
)
def test_ground_on_an_unseen_tile_through_the_installed_command(bundle, tmp_path, rel, judged):
    laspy = pytest.importorskip("laspy")
    src = data_file(rel)
    out = tmp_path / "labelled.laz"
    r = lattice("model-run", BUNDLE, src, "-o", out, "--to-classification", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["written_fields"] == ["pred_label", "classification"]
    truth, pred = laspy.read(src), laspy.read(out)
    assert np.array_equal(np.asarray(truth.gps_time), np.asarray(pred.gps_time))  # same points, in order
    t, p = np.asarray(truth.classification), np.asarray(pred.classification)
    assert set(np.unique(p)) <= {1, 2}
    judged = np.isin(t, judged)
    accuracy = float(((p[judged] == 2) == (t[judged] == 2)).mean())
    recorded = bundle.metadata["held_out_scores"][Path(rel).name]["accuracy"]
    assert accuracy >= 0.95 and abs(accuracy - recorded) < 0.005, (accuracy, recorded)
    # the class names travel in the LAS file, so a picture names them
    _, legend = point_colors(read_points(out), "label")
    assert {name.split(" (")[0] for name, _ in legend} == {"ground", "non-ground"}
