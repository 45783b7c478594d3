"""Pathfinder statistics (repro/tasks/pathfinder/stats.py, ``experiments/pathfinder.py stats``) on hand-made images."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from repro.tasks.pathfinder import release_draw as draw
from repro.tasks.pathfinder import stats as st

ROOT = Path(__file__).resolve().parents[1]


def hand_image() -> np.ndarray:
    """8x8: a bright diagonal pair (one 8-connected piece), a faint 2x2 block touching the border,
    and a lone mid-grey pixel. Known answers below."""
    image = np.zeros((8, 8), dtype=np.uint8)
    image[2, 2], image[3, 3] = 200, 255  # diagonal neighbours: one 8-connected component
    image[0:2, 6:8] = 10  # faint, on the border (4 border pixels)
    image[6, 1] = 64  # exactly at the strong threshold
    return image


def test_image_stats_known_answers():
    s = st.image_stats(hand_image())
    assert s["nonzero_frac"] == 7 / 64
    assert s["distinct_values"] == 5  # 0, 10, 64, 200, 255
    assert s["components8_nonzero"] == 3
    assert s["components8_ge64"] == 2  # the diagonal pair and the 64 pixel
    assert s["border_nonzero_frac"] == 3 / 28  # (0,6), (0,7), (1,7) of the 28 border pixels
    assert s["n_255"] == 1
    assert s["peak_profile"] == [255, 200, 64, 10, 10, 10, 10, 0]
    assert s["mean_intensity"] == pytest.approx((200 + 255 + 40 + 64) / 64)


def test_image_stats_rejects_what_is_not_a_grey_image():
    with pytest.raises(ValueError, match="2-D uint8"):
        st.image_stats(np.zeros((4, 4), dtype=np.float32))


def test_separability_known_answers():
    targets = np.zeros(256, dtype=int)
    distractors = np.zeros(256, dtype=int)
    targets[100], distractors[100] = 3, 1  # shared level: Bayes picks target, 1 error
    targets[150] = 2  # target only
    distractors[200] = 4  # distractor only
    out = st.separability(targets, distractors)
    assert out["bayes_accuracy"] == pytest.approx(9 / 10)
    assert out["base_rate"] == pytest.approx(5 / 10)
    assert out["pure_level_frac"] == pytest.approx(6 / 10)


def fake_sample(target_at, distractor_at, marker_at=(0, 0)) -> SimpleNamespace:
    """A 10x10 generated-like sample: one target pixel, one distractor pixel, one marker pixel."""
    layers = {k: np.zeros((10, 10)) for k in ("targets", "distractors", "markers")}
    layers["targets"][target_at] = 1.0
    layers["distractors"][distractor_at] = 0.5
    layers["markers"][marker_at] = 0.8
    final = np.maximum(np.maximum(layers["targets"], layers["distractors"]), layers["markers"])
    scale = draw.byte_scale(final, "floor")
    return SimpleNamespace(
        layers=layers, image=draw.grey_levels(final, scale), label=1, distractors=1, extra={"byte_scale": scale}
    )


def test_layer_stats_touching_and_owner_levels():
    touching = st.layer_stats(fake_sample((4, 4), (5, 5)))  # 8-adjacent (diagonal)
    apart = st.layer_stats(fake_sample((4, 4), (4, 6)))  # one pixel between them
    assert touching["touching"] is True and apart["touching"] is False
    assert touching["target_levels"][255] == 1 and touching["target_levels"].sum() == 1
    assert touching["distractor_levels"][127] == 1 and touching["distractor_levels"].sum() == 1
    summary = st.summarise(
        [st.image_stats(fake_sample((4, 4), (5, 5)).image)] * 2,
        [fake_sample((4, 4), (5, 5)).image] * 2,
        [touching, apart],
    )
    assert summary["touching_frac"] == 0.5 and summary["separability"]["bayes_accuracy"] == 1.0


def test_summarise_and_compare_follow_the_reference_layout():
    images = [hand_image(), np.flipud(hand_image()) // 2]
    summary = st.summarise([st.image_stats(i) for i in images], images)
    assert summary["n"] == 2
    assert summary["distinct_values_dataset"] == 9  # {0,5,10,32,64,100,127,200,255}
    assert summary["distinct_values_per_img"] == [5.0, 5, 5]
    assert summary["frac_nonzero_px"][0] == pytest.approx(7 / 64)
    assert summary["components8_ge64"] == [1.5, 0.5, 1.0, 2.0]  # the halved image keeps only 127 >= 64
    rows = {r[0]: r for r in st.compare(summary, {"components8_ge64": [3.0, 0, 0, 0]})}
    assert rows["8-connected components, >= 64"][3] == pytest.approx(-0.5)
    assert rows["share of non-zero pixels"][2] is None
    assert "distractors placed" not in rows  # generated-only rows are left out for folders


def test_bracket_says_which_values_fall_inside():
    generated = [
        {"nonzero_frac": v / 100, "components8_nonzero": v, "components8_ge64": v, "peak_profile": [255] * st.PROFILE}
        for v in range(100)
    ]
    inside = {"nonzero_frac": 0.5, "components8_nonzero": 50, "components8_ge64": 2, "peak_profile": [255] * st.PROFILE}
    row = st.bracket([inside], generated)[0]
    assert row["nonzero_frac"][3] and row["components8_nonzero"][3] and row["peak_1"][3]
    assert not row["components8_ge64"][3]  # 2 is below the 5th percentile (4.95)
    assert row["components8_ge64"][1] == pytest.approx(4.95)


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "pathfinder.py"), "stats", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def test_cli_on_a_folder_writes_json_and_names_bad_files(tmp_path):
    folder = tmp_path / "pngs"
    folder.mkdir()
    for k in range(3):
        Image.fromarray(np.roll(hand_image(), k, axis=1), mode="L").save(folder / f"img{k}.png")
    done = run_cli("--folder", str(folder), "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stderr
    assert "share of non-zero pixels" in done.stdout
    written = json.loads((tmp_path / "out.json").read_text())
    assert written["n"] == 3 and len(written["per_image"]) == 3
    assert written["frac_nonzero_px"][0] == pytest.approx(7 / 64)
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8), mode="RGB").save(folder / "rgb.png")
    failed = run_cli("--folder", str(folder))
    assert failed.returncode != 0 and "rgb.png" in failed.stderr and "'RGB'" in failed.stderr


def test_cli_generates_compares_and_brackets(tmp_path):
    folder = tmp_path / "official"
    folder.mkdir()
    Image.fromarray(hand_image(), mode="L").save(folder / "a.png")
    reference = tmp_path / "ref.json"
    reference.write_text(json.dumps({"B": {"components8_ge64": [20.0, 1, 1, 1]}}))
    done = run_cli(
        "--generate",
        "4",
        "--size",
        "32",
        "--against",
        str(reference),
        "--against-key",
        "B",
        "--bracket",
        str(folder),
        "--set",
        "rounding=half",
    )
    assert done.returncode == 0, done.stderr
    assert "distractors placed" in done.stdout and "a.png:" in done.stdout
    assert "8-connected components, >= 64" in done.stdout
    missing = run_cli("--generate", "4", "--against", str(reference), "--against-key", "C")
    assert missing.returncode != 0 and "no entry 'C'" in missing.stderr and "B" in missing.stderr
