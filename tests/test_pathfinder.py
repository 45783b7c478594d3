"""Pathfinder / Path-X: seeded generator (geometry checked independently of labels) and official reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from repro.tasks import DataError, DataMissing
from repro.tasks import pathfinder as pf
from repro.tasks.pathfinder import render

SPEC32 = render.lra_spec(32, "hard")
SPEC128 = render.lra_spec(128, "hard")


# ---------------------------------------------------------------- generator


def skeleton_components(sample: render.Sample, spec: render.PathSpec, scale: int) -> np.ndarray:
    """Connected components of the dashes drawn from their kept geometry, thickened to bridge gaps.

    Each dash centre line becomes a capsule of radius margin + 5 thickness / 16: wide enough
    to close the gap between consecutive dashes of a contour (2 * margin, or on the lattice
    at most DashField.max_gap = 2 * margin + thickness / 2), too narrow to reach a dash of
    another contour, 2 * margin + thickness away (the generator keeps contours apart by
    their dilated masks).
    Components come from an 8-connected flood fill (scipy.ndimage.label) on a grid ``scale``
    times finer than the image. Labels and contour ids are not used.
    """
    radius = sample.margin + 5 * spec.paddle_thickness / 16
    n = spec.size * scale
    mask = np.zeros((n, n), dtype=bool)
    for y0, x0, y1, x1 in sample.segments * scale:
        r = radius * scale
        top, bottom = int(max(0, np.floor(min(y0, y1) - r))), int(min(n, np.ceil(max(y0, y1) + r) + 1))
        left, right = int(max(0, np.floor(min(x0, x1) - r))), int(min(n, np.ceil(max(x0, x1) + r) + 1))
        py, px = np.mgrid[top:bottom, left:right] + 0.5
        dy, dx = y1 - y0, x1 - x0
        t = np.clip(((py - y0) * dy + (px - x0) * dx) / (dy * dy + dx * dx), 0, 1)
        mask[top:bottom, left:right] |= np.hypot(y0 + t * dy - py, x0 + t * dx - px) <= r
    components, _ = ndimage.label(mask, structure=np.ones((3, 3), dtype=int))
    return components


def marker_components(sample, spec, scale) -> tuple[int, int]:
    components = skeleton_components(sample, spec, scale)
    (ay, ax), (by, bx) = (np.floor(sample.markers * scale)).astype(int)
    return components[ay, ax], components[by, bx]


@pytest.mark.parametrize(
    "spec,scale,n",
    [
        (SPEC32, 10, 40),
        (SPEC128, 4, 6),
        (render.lra_spec(32, "hard", lattice=True), 10, 40),
        (render.lra_spec(128, "hard", lattice=True), 4, 4),
    ],
    ids=["32", "128", "32-lattice", "128-lattice"],
)
def test_markers_connected_iff_positive(spec, scale, n):
    samples = render.chunk_samples(3, "hard", 0, n, spec)
    assert {s.label for s in samples} == {0, 1}
    for s in samples:
        a, b = marker_components(s, spec, scale)
        assert a > 0 and b > 0, "each marker sits on a dash end"
        assert (a == b) == (s.label == 1), f"label {s.label} but markers {'joined' if a == b else 'apart'}"
        assert np.hypot(*(s.markers[0] - s.markers[1])) > 2 * spec.marker_radius, "marker discs touch"


def test_contours_have_the_difficulty_length_and_turn_within_continuity():
    for difficulty, spec in (("easy", render.lra_spec(32, "easy")), ("hard", SPEC32)):
        for s in render.chunk_samples(5, difficulty, 0, 10, spec):
            for target in (0, 1):
                dashes = s.segments[s.contour_ids == target]
                assert len(dashes) == render.CONTOUR_LENGTH[difficulty]
                angles = np.arctan2(dashes[:, 2] - dashes[:, 0], dashes[:, 3] - dashes[:, 1])
                turns = np.abs((np.diff(angles) + np.pi) % (2 * np.pi) - np.pi)
                assert turns.max() < np.pi / (2 * spec.continuity) + 1e-9
            assert np.all(s.segments >= spec.padding) and np.all(s.segments <= spec.size - spec.padding)


@pytest.mark.parametrize("resolution", [32, 128])
def test_lattice_geometry_is_the_release_pixel_grid(resolution):
    """lattice=True: markers and every grown dash's far end on pixel centres, headings from
    the finite set of lattice_offsets (seeds: whole degrees), gaps at most DashField.max_gap."""
    spec = render.lra_spec(resolution, "easy", lattice=True)
    for s in render.chunk_samples(2, "easy", 0, 6, spec):
        headings = np.array([h for h, _, _ in render.lattice_offsets(spec.paddle_length + s.margin)])
        max_gap = render.DashField(spec, s.margin).max_gap
        assert np.allclose(s.markers % 1.0, 0.5)
        for c in np.unique(s.contour_ids):
            dashes = s.segments[s.contour_ids == c]
            angles = np.arctan2(dashes[:, 2] - dashes[:, 0], dashes[:, 3] - dashes[:, 1])
            assert np.allclose(dashes[0, :2] % 1.0, 0.5), "a seed starts on a pixel centre"
            assert abs(np.degrees(angles[0]) - round(np.degrees(angles[0]))) < 1e-6, "seed heading: whole degrees"
            assert np.allclose(dashes[1:, 2:] % 1.0, 0.5), "grown dashes end on pixel centres"
            assert np.abs(angles[1:, None] - headings[None, :]).min(axis=1).max() < 1e-9
            gaps = np.hypot(dashes[1:, 0] - dashes[:-1, 2], dashes[1:, 1] - dashes[:-1, 3])
            assert gaps.max() <= max_gap + 1e-9
    assert render.lra_spec(resolution, "easy") != spec, "the lattice is a setting of its own (and of the cache key)"


@pytest.mark.parametrize("uniform", [False, True], ids=["release", "uniform"])
def test_target_contours_are_drawn_at_the_paddle_contrast(uniform):
    """The same dash drawn as a target (contour 0) and as a distractor (contour 2), whole pixels
    apart: the release's rule gives the target 0.75 of the distractor's ink (paddle_contrast,
    within one grey level of rounding); render version 2's uniform rule gives equal ink."""
    spec = render.lra_spec(32, "hard", uniform_contrast=uniform)
    dash = np.array([3.3, 4.1, 4.6, 5.8])
    segments = np.stack([dash, dash + [0, 12, 0, 12]])
    markers = np.array([[20.5, 6.5], [20.5, 26.5]])
    image = render.render(spec, segments, markers, np.array([0, 2])).astype(float)
    target, distractor = image[1:8, 1:9], image[1:8, 13:21]
    assert distractor.max() > 100 and image[17:24, 3:10].max() > 100
    ratio = 1.0 if uniform else spec.paddle_contrast
    assert np.abs(target - ratio * distractor).max() <= 1.0


def test_labels_balanced_over_2000():
    x, y = pf.generate(2000, 0, "easy", render.lra_spec(32, "easy"), workers=1)
    assert abs(y.mean() - 0.5) <= 0.02
    assert x.shape == (2000, 1024) and x.dtype == np.uint8
    assert (x.max(axis=1) == 255).all(), "min-max scaled like the release's PNGs"


@pytest.mark.parametrize("spec", [render.lra_spec(32, "hard"), render.lra_spec(128, "easy")], ids=["32", "128"])
def test_shapes_dtype_and_seeding(spec):
    x, y = render.generate_chunk(7, "hard" if spec.size == 32 else "easy", 0, 4, spec)
    assert x.shape == (4, spec.size * spec.size) and x.dtype == np.uint8
    assert y.dtype == np.int64 and set(y.tolist()) <= {0, 1}
    difficulty = "hard" if spec.size == 32 else "easy"
    again, _ = render.generate_chunk(7, difficulty, 0, 4, spec)
    other, _ = render.generate_chunk(8, difficulty, 0, 4, spec)
    assert np.array_equal(x, again)
    assert not np.array_equal(x, other)
    # row-major flattening: the image of the sample is the reshaped row
    samples = render.chunk_samples(7, difficulty, 0, 4, spec)
    assert np.array_equal(np.stack([s.image.reshape(-1) for s in samples]), x)
    assert [s.label for s in samples] == y.tolist()


def test_independent_of_workers(monkeypatch):
    monkeypatch.setattr(pf, "CHUNK", 40)
    spec = render.lra_spec(32, "easy")
    x1, y1 = pf.generate(200, 11, "easy", spec, workers=1)
    x2, y2 = pf.generate(200, 11, "easy", spec, workers=2)
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert y1[:40].sum() == 20, "each chunk is exactly half positive"


# ---------------------------------------------------------------- official reader


def write_fixture(
    root: Path, difficulty: str, n: int, empty: tuple = (), size: int = 32, files: int = 2
) -> list[tuple[str, int]]:
    """``n`` PNGs in the release layout; pixel 0 of image i is i + 1 (+ 100 per difficulty)."""
    folder = root / "pathfinder32" / pf.OFFICIAL_FOLDERS[difficulty]
    (folder / "metadata").mkdir(parents=True, exist_ok=True)
    entries, lines = [], {k: [] for k in range(files)}
    for i in range(n):
        k = i % files
        (folder / "imgs" / str(k)).mkdir(parents=True, exist_ok=True)
        pixels = np.zeros((size, size), dtype=np.uint8)
        if i not in empty:
            pixels[0, 0] = i + 1 + 100 * render.DIFFICULTY_CODE[difficulty]
            pixels[5, 7] = 255
        Image.fromarray(pixels, mode="L").save(folder / "imgs" / str(k) / f"sample_{i}.png")
        label = (i * 7) % 2
        lines[k].append(f"imgs/{k} sample_{i}.png {i} {label} 1.0 14 4 2 0.5 1 1")
        entries.append((f"imgs/{k}/sample_{i}.png", label))
    for k, rows in lines.items():
        (folder / "metadata" / f"{k}.npy").write_text("\n".join(rows) + "\n")
    return entries


def official_cfg(**over) -> dict:
    cfg = {
        "name": "pathfinder",
        "source": "official",
        "resolution": 32,
        "official_subdir": "pathfinder32",
        "difficulty": "hard",
        "data_seed": 0,
        "max_len": 1024,
        "generate": {"n_per_difficulty": 10, "render": "release"},
    }
    return {**cfg, **over}


def test_reader_returns_exact_ids_labels_and_splits(tmp_path):
    write_fixture(tmp_path, "hard", 20)
    folder = tmp_path / "pathfinder32" / "curv_contour_length_14"
    x, y, ids, empty = pf.read_official_difficulty(folder, 32)
    # metadata/0.npy (even i) then metadata/1.npy (odd i), lines in order
    order = list(range(0, 20, 2)) + list(range(1, 20, 2))
    assert ids == [f"imgs/{i % 2}/sample_{i}.png" for i in order]
    assert y.tolist() == [(i * 7) % 2 for i in order]
    assert x[:, 0].tolist() == [201 + i for i in order] and empty == 0
    x2, y2, ids2, _ = pf.read_official_difficulty(folder, 32, workers=2)
    assert np.array_equal(x, x2) and np.array_equal(y, y2) and ids == ids2

    task = pf.build(official_cfg(), tmp_path, tmp_path / "cache", workers=1)
    assert {s: len(v) for s, v in task.splits().items()} == {"train": 16, "val": 2, "test": 2}
    assert task.pad_id is None and task.vocab_size == 256 and task.max_len == 1024 and task.num_classes == 2
    seen = []
    for split in task.splits().values():
        index = np.asarray(split.inputs[:, 0], dtype=int) - 201
        assert split.labels.tolist() == [(i * 7) % 2 for i in index]
        seen += index.tolist()
    assert sorted(seen) == list(range(20))
    expected = pf.split_order(20, 0, "hard")
    assert task.val.inputs[:, 0].tolist() == [201 + order[i] for i in expected["val"]]
    assert task.info["source"] == "official" and task.info["generated"] is False
    again = pf.build(official_cfg(), tmp_path, tmp_path / "cache", workers=1)
    assert again.info["per_difficulty"]["hard"]["cache_hit"] is True
    assert np.array_equal(again.train.inputs, task.train.inputs)


def test_empty_images_dropped_and_counted(tmp_path):
    write_fixture(tmp_path, "hard", 20, empty=(3, 8))
    task = pf.build(official_cfg(), tmp_path, tmp_path / "cache", workers=1)
    assert sum(len(s) for s in task.splits().values()) == 18
    assert task.info["empty_dropped"] == {"hard": 2}
    assert all(s.inputs.any(axis=1).all() for s in task.splits().values())


def test_wrong_size_image_names_the_file(tmp_path):
    write_fixture(tmp_path, "hard", 6)
    bad = tmp_path / "pathfinder32" / "curv_contour_length_14" / "imgs" / "1" / "sample_3.png"
    Image.fromarray(np.full((31, 32), 9, dtype=np.uint8), mode="L").save(bad)
    with pytest.raises(DataError) as err:
        pf.build(official_cfg(), tmp_path, tmp_path / "cache")
    assert "sample_3.png" in str(err.value) and "32x31" in str(err.value) and "1.npy:2" in str(err.value)


def test_unreadable_image_names_the_file(tmp_path):
    write_fixture(tmp_path, "hard", 6)
    (tmp_path / "pathfinder32" / "curv_contour_length_14" / "imgs" / "0" / "sample_2.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match=r"sample_2\.png.*0\.npy:2.*cannot read"):
        pf.build(official_cfg(), tmp_path, tmp_path / "cache")


def test_bad_label_and_short_line_name_file_and_line(tmp_path):
    write_fixture(tmp_path, "hard", 6)
    meta = tmp_path / "pathfinder32" / "curv_contour_length_14" / "metadata" / "1.npy"
    rows = meta.read_text().splitlines()
    meta.write_text("\n".join([rows[0], rows[1].replace(" 3 1 ", " 3 2 "), rows[2]]) + "\n")
    with pytest.raises(DataError) as err:
        pf.build(official_cfg(), tmp_path, tmp_path / "cache")
    assert "1.npy:2" in str(err.value) and "label" in str(err.value) and "2" in str(err.value)

    meta.write_text("\n".join([rows[0], rows[1], "imgs/1 sample_5.png 5"]) + "\n")
    with pytest.raises(DataError) as err:
        pf.build(official_cfg(), tmp_path, tmp_path / "cache2")
    assert "1.npy:3" in str(err.value) and "found 3" in str(err.value)


def test_missing_official_says_where_and_what(tmp_path):
    with pytest.raises(DataMissing) as err:
        pf.build(official_cfg(), tmp_path, tmp_path / "cache")
    text = str(err.value)
    assert "curv_contour_length_14" in text and "lra_release/pathfinder32" in text and "task.source=generated" in text
    assert "metadata" in text and "sample_<i>.png" in text


def test_auto_falls_back_to_generated(tmp_path):
    task = pf.build(official_cfg(source="auto"), tmp_path, tmp_path / "cache", workers=1)
    assert task.info["source"] == "generated" and task.info["generated"] is True
    assert task.train.inputs.shape == (8, 1024) and task.train.inputs.dtype == np.uint8


def test_all_difficulties_train_in_equal_parts_eval_on_hard(tmp_path):
    for difficulty, n in (("easy", 30), ("intermediate", 25), ("hard", 20)):
        write_fixture(tmp_path, difficulty, n)
    task = pf.build(official_cfg(difficulty="all"), tmp_path, tmp_path / "cache", workers=1)
    source_of = lambda split: np.asarray(split.inputs[:, 0], dtype=int) // 100  # noqa: E731  (0 easy, 1 int, 2 hard)
    assert len(task.train) == 3 * 16
    assert np.bincount(source_of(task.train), minlength=3).tolist() == [16, 16, 16]
    assert set(source_of(task.val)) == {2} and set(source_of(task.test)) == {2}
    assert len(task.val) == 2 and len(task.test) == 2
    assert task.info["train_per_difficulty"] == {"easy": 16, "intermediate": 16, "hard": 16}
    assert task.info["train_is_3x_hard"] is True


def test_config_checks(tmp_path):
    with pytest.raises(ValueError, match="max_len"):
        pf.build(official_cfg(max_len=2048), tmp_path, tmp_path / "cache")
    with pytest.raises(ValueError, match="difficulty"):
        pf.build(official_cfg(difficulty="medium"), tmp_path, tmp_path / "cache")
    with pytest.raises(ValueError, match="unknown generator setting"):
        pf.generator_spec({"n_per_difficulty": 4, "render": "contour_v3", "paddle_lenght": 3}, 32, "hard")
