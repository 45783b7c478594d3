"""Render ``release`` (repro/tasks/pathfinder/release.py): determinism, label geometry by flood fill,
the release's drawing rules, the fast paths against plain computations, settings and cache keys."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from scipy import ndimage

from repro.tasks import pathfinder as pf
from repro.tasks.pathfinder import release as rel
from repro.tasks.pathfinder import release_draw as draw

SPEC32 = rel.release_spec(32, "hard")
SPEC128 = rel.release_spec(128, "hard")


# ---------------------------------------------------------------- determinism


@pytest.mark.parametrize("spec", [SPEC32, rel.release_spec(128, "easy")], ids=["32", "128"])
def test_same_seed_same_images_other_seed_other_images(spec):
    difficulty = "hard" if spec.size == 32 else "easy"
    x, y = rel.generate_chunk(7, difficulty, 0, 3, spec)
    again, y_again = rel.generate_chunk(7, difficulty, 0, 3, spec)
    other, _ = rel.generate_chunk(8, difficulty, 0, 3, spec)
    assert x.shape == (3, spec.size * spec.size) and x.dtype == np.uint8 and y.dtype == np.int64
    assert np.array_equal(x, again) and np.array_equal(y, y_again)
    assert not np.array_equal(x, other)
    samples = rel.chunk_samples(7, difficulty, 0, 3, spec)
    assert np.array_equal(np.stack([s.image.reshape(-1) for s in samples]), x)
    assert [s.label for s in samples] == y.tolist()


def test_dataset_does_not_depend_on_workers(monkeypatch):
    monkeypatch.setattr(pf, "CHUNK", 6)
    spec = rel.release_spec(32, "easy")
    x1, y1 = pf.generate(12, 4, "easy", spec, workers=1)
    x2, y2 = pf.generate(12, 4, "easy", spec, workers=2)
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)


# ---------------------------------------------------------------- labels by flood fill


def chain_components(sample, spec, owners, scale: int) -> np.ndarray:
    """8-connected components (scipy.ndimage.label) of the dashes of ``owners`` drawn as capsules.

    The capsule radius is margin + 1: the release rounds pivots and heads up to whole pixels,
    so consecutive dashes of a contour lie up to 2 * margin + 2 apart (tests measure it).
    """
    segments = rel.dash_segments(sample, spec)[np.isin(sample.dashes[:, 3], owners)] * scale
    radius = (sample.margin + 1) * scale
    n = spec.size * scale
    py, px = np.mgrid[0:n, 0:n] + 0.5
    mask = np.zeros((n, n), dtype=bool)
    for y0, x0, y1, x1 in segments:
        dy, dx = y1 - y0, x1 - x0
        t = np.clip(((py - y0) * dy + (px - x0) * dx) / max(dy * dy + dx * dx, 1e-12), 0, 1)
        mask |= np.hypot(y0 + t * dy - py, x0 + t * dx - px) <= radius
    return ndimage.label(mask, structure=np.ones((3, 3), dtype=int))[0]


def at(components: np.ndarray, pixel, scale: int) -> int:
    return int(components[int((pixel[0] + 0.5) * scale), int((pixel[1] + 0.5) * scale)])


@pytest.mark.parametrize("spec,scale,n,separable", [(SPEC32, 4, 24, False), (SPEC128, 1, 4, True)], ids=["32", "128"])
def test_markers_on_one_contour_iff_positive(spec, scale, n, separable):
    """Each target contour is one chain (flood fill of its own dashes) running from its seed's tail
    to its last dash's head, and the markers sit on those ends: both on one chain for a positive,
    on two chains for a negative. The release lets contours overlap and at 32x32 packs them within
    a capsule's reach, so only at 128x128 does the flood fill of both chains keep a negative's
    markers apart (wherever the chains do not touch)."""
    samples = rel.chunk_samples(2, "hard", 0, n, spec)
    assert {s.label for s in samples} == {0, 1}
    apart = 0
    for s in samples:
        chains = [chain_components(s, spec, [c], scale) for c in (0, 1)]
        assert [c.max() for c in chains] == [1, 1], "a target contour is one connected chain"
        ends = [(s.dashes[s.dashes[:, 3] == c][[0, -1], :2]).astype(int).tolist() for c in (0, 1)]
        origin, terminal = s.extra["marked_contours"]
        assert (origin == terminal) == (s.label == 1)
        assert s.tips.tolist() == [ends[origin][0], ends[terminal][1]]
        assert at(chains[origin], s.tips[0], scale) == 1 and at(chains[terminal], s.tips[1], scale) == 1
        if s.label == 0 and separable:
            both = chain_components(s, spec, [0, 1], scale)
            if both.max() == 2:
                apart += 1
                assert at(both, s.tips[0], scale) != at(both, s.tips[1], scale)
    if separable:
        assert apart >= 1, "a negative whose chains do not touch"


def test_contours_have_the_difficulty_lengths():
    for difficulty in ("easy", "hard"):
        spec = rel.release_spec(32, difficulty)
        for s in rel.chunk_samples(1, difficulty, 0, 4, spec):
            owners = s.dashes[:, 3].astype(int)
            assert np.bincount(owners)[:2].tolist() == [spec.contour_length] * 2
            lengths = np.bincount(owners)[2:]
            assert len(lengths) == s.distractors <= spec.num_distractors
            assert (lengths == spec.distractor_length).all()


# ---------------------------------------------------------------- the release's drawing rules


def test_targets_are_drawn_at_paddle_contrast_of_distractors():
    """The same dash as a target (owner 0) and as a distractor (owner 2): ink in ratio paddle_contrast."""
    canvas = rel.Canvas(SPEC32, 1)
    heading = math.radians(37)
    canvas.paint((8, 8), heading, 0, SPEC32.snake_contrast * SPEC32.paddle_contrast)
    canvas.paint((8, 20), heading, 2, SPEC32.snake_contrast)
    targets, distractors = canvas.inner(canvas.ink)
    target, distractor = targets[2:15, 2:15], distractors[2:15, 14:27]
    assert distractor.max() > 0.5
    np.testing.assert_allclose(target, SPEC32.paddle_contrast * distractor, rtol=0, atol=1e-12)


def test_min_max_scaling_floor_and_half_unit():
    image = np.array([[0.2, 0.2 + 0.6 * 100.4 / 255], [0.2 + 0.6 * 100.6 / 255, 0.8]])
    assert draw.to_bytes(image, "floor").tolist() == [[0, 100], [100, 255]]
    assert draw.to_bytes(image, "half").tolist() == [[0, 100], [101, 255]]
    with pytest.raises(ValueError, match="rounding='nearest'"):
        draw.to_bytes(image, "nearest")


def test_image_is_the_maximum_of_its_layers_and_markers_peak_at_one():
    for s in rel.chunk_samples(0, "hard", 0, 3, SPEC32):
        layers = s.layers
        final = np.maximum(np.maximum(layers["targets"], layers["distractors"]), layers["markers"])
        assert np.array_equal(s.image, draw.grey_levels(final, s.extra["byte_scale"]))
        assert s.image.max() == 255 and s.image.min() == 0
        assert layers["markers"].max() == pytest.approx(SPEC32.marker_peak)
        for tip in s.tips:  # each marker disc centred on its tip pixel, drawn over whatever ink is there
            assert layers["markers"][tuple(tip)] > 0.5
            assert final[tuple(tip)] == max(layers[k][tuple(tip)] for k in layers)


def test_dash_patches_follow_the_generator_geometry():
    """A horizontal dash from the patch centre: ink on the centre row from the centre onwards,
    its mask wider by the margin; a float filter, so the ink overshoots below zero beside it."""
    ink, mask = draw.dash_patches(5, 1.5, 2, 2, 0.0)
    reach = draw.patch_reach(5, 1.5, 2)
    assert ink.shape == mask.shape == (2 * reach + 1, 2 * reach + 1)
    row = ink[reach]
    assert row[reach + 1 : reach + 5].min() > 0.9 and row[: reach - 1].max() < 0.05
    assert ink.min() < -0.01, "float Lanczos keeps its ringing"
    assert 0.0 <= mask.min() and mask.max() <= 1.0, "the mask is stored as 8 bits"
    assert (mask > 0.5).sum() > (ink > 0.5).sum()


def test_candidate_heads_are_whole_pixels_one_pixel_of_arc_apart():
    for radius in (3, 6, 8):
        offsets, headings = draw.candidate_offsets(radius)
        assert len(np.unique(offsets, axis=0)) == len(offsets)
        # each offset is a point of the circle floored: the circle crosses the unit square at the offset
        near = np.hypot(*np.clip(0, offsets, offsets + 1).T)
        far = np.hypot(*np.maximum(np.abs(offsets), np.abs(offsets + 1)).T)
        assert (near <= radius).all() and (far >= radius).all()
        np.testing.assert_allclose(headings, np.arctan2(offsets[:, 0], offsets[:, 1]))
        assert len(offsets) <= math.ceil(2 * math.pi * radius)


# ---------------------------------------------------------------- fast paths equal the plain ones


@pytest.mark.parametrize("spec", [SPEC32, SPEC128], ids=["32", "128"])
def test_grown_mask_and_candidates_equal_the_plain_dilation(spec):
    rng = random.Random(5)
    canvas, pair, _ = rel.grow_targets(rng, spec, spec.paddle_margins[-1])
    rel.add_distractors(rng, canvas)
    mask = canvas.inner(canvas.mask)
    plain = ndimage.grey_dilation(mask, footprint=draw.disc(canvas.margin), mode="constant", cval=-np.inf)
    assert np.array_equal(canvas.inner(canvas.grown), plain)
    for pivot in [(canvas.size // 2, canvas.size // 2), (1, 2), (canvas.size - 2, 5)]:
        found = canvas.candidates(pivot, 0.3)
        if found is None:
            continue
        heads, headings, cumulative = found
        continuity = draw.continuity_weights(canvas.radius, spec.continuity, 0.3)
        offsets, all_headings = draw.candidate_offsets(canvas.radius)
        keep = [i for i, o in enumerate(offsets) if canvas.inside(tuple(o + pivot))]
        weights = (1.0 - canvas.grown_at(heads)) * continuity[keep]
        np.testing.assert_allclose(cumulative, np.cumsum(weights / weights.sum()), rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(headings, all_headings[keep])


def test_free_pixel_test_equals_the_plain_enumeration():
    canvas = rel.Canvas(SPEC128, 3)
    rng = np.random.default_rng(0)
    blocked = np.zeros((canvas.side, canvas.side), dtype=bool)
    canvas.inner(blocked)[:] = rng.random((128, 128)) < 0.02
    for degrees in (-180, -37, 0, 90, 151):
        footprint = draw.seed_footprint(5, 1.5, 3, 2, degrees)
        free = set(canvas.free_pixels(blocked, footprint).tolist())
        flat = footprint[:, 0] * canvas.side + footprint[:, 1]
        fast = {r * 128 + c for r in range(128) for c in range(128) if canvas.is_free(blocked.ravel(), flat, (r, c))}
        assert fast == free and 0 < len(free) < 128 * 128


# ---------------------------------------------------------------- settings, config and cache


def test_lra_settings_and_documented_choices():
    assert (SPEC32.num_distractors, SPEC32.distractor_length, SPEC32.snake_contrast) == (5, 4, 2.0)
    assert rel.release_spec(32, "easy").num_distractors == 10
    assert (SPEC128.num_distractors, SPEC128.snake_contrast, SPEC128.paddle_margins) == (17, 0.73, (2, 3))
    assert rel.release_spec(128, "hard", distractor_budget=35).num_distractors == 8
    assert (rel.release_spec(64, "hard").num_distractors, rel.release_spec(64, "hard").paddle_margins) == (5, (0, 1))


@pytest.mark.parametrize(
    "settings,message",
    [
        ({}, r"task.generate.render=None: use release .* or contour_v3"),
        ({"render": "release", "lattice": True}, r"task.generate.lattice is a setting of render contour_v3"),
        ({"render": "release", "paddle_length": 2.5}, r"task.generate.paddle_length=2.5: .* whole number"),
        (
            {"render": "release", "paddle_lenght": 3},
            r"unknown setting\(s\) \['paddle_lenght'\] for task.generate.render=release",
        ),
        ({"render": "release", "rounding": "up"}, r"task.generate.rounding='up': use floor or half"),
        ({"render": "release", "padding": 0}, r"task.generate.padding=0: .* border"),
    ],
)
def test_bad_settings_name_the_key(settings, message):
    with pytest.raises(ValueError, match=message):
        pf.generator_spec({"n_per_difficulty": 4, **settings}, 32, "hard")


def test_null_settings_take_the_render_default():
    release = pf.generator_spec({"render": "release", "snake_contrast": None, "distractor_budget": None}, 128, "hard")
    v3 = pf.generator_spec({"render": "contour_v3", "snake_contrast": None, "distractor_budget": None}, 128, "hard")
    assert (release.snake_contrast, release.num_distractors) == (0.73, 17)
    assert (v3.snake_contrast, v3.num_distractors) == (0.9, 8)


def test_cache_key_holds_render_name_and_version(tmp_path):
    cfg = {"resolution": 32, "data_seed": 0, "generate": {"n_per_difficulty": 10, "render": "release"}}
    _, meta = pf.load_difficulty(cfg, "generated", "hard", tmp_path, tmp_path / "cache", workers=1)
    assert meta["render"] == "release"
    record = (tmp_path / "cache" / "pathfinder32").glob("*/meta.json")
    params = [json.loads(p.read_text())["params"] for p in record]
    assert params[0]["render"] == "release" and params[0]["render_version"] == rel.RENDER_VERSION
    v3 = {**cfg, "generate": {"n_per_difficulty": 10, "render": "contour_v3"}}
    _, meta_v3 = pf.load_difficulty(v3, "generated", "hard", tmp_path, tmp_path / "cache", workers=1)
    assert meta_v3["cache_entry"] != meta["cache_entry"] and meta_v3["render"] == "contour_v3"
    _, again = pf.load_difficulty(cfg, "generated", "hard", tmp_path, tmp_path / "cache", workers=1)
    assert again["cache_hit"] is True and again["cache_entry"] == meta["cache_entry"]
