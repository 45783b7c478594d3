"""Statistics that compare Pathfinder renders with each other and with the LRA release's images.

Per image (any uint8 grayscale image): share of non-zero pixels, distinct grey levels,
8-connected components of the non-zero pixels and of the pixels >= 64 (``scipy.ndimage.label``),
share of the 1-pixel border that is non-zero, pixels at 255, and the *peak profile*: the
``PROFILE`` brightest grey levels in descending order (at 64x64 and 128x128 the two marker discs
are the brightest strokes, so this is the markers' profile).

Generated images only (they need the render's per-layer images, ``ReleaseSample.layers``):
whether a target contour touches a distractor (8-adjacent or overlapping, each layer's own
pixels >= 64 on the image's grey scale), distractors placed, and grey-level separability: over
the pixels >= 32 owned by a contour layer (the layer attaining the pixel's maximum; marker-owned
pixels are left out), the Bayes accuracy of telling target from distractor by grey level alone,
the majority-class base rate, and the share of pixels at grey levels only one class uses.

The set summary uses the key names and shapes of the reference table the project compares
against (``frac_nonzero_px``: [mean, std, min, max], ``distinct_values_per_img``: [mean, min,
max], ...), so two summaries can be set side by side (``compare``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

from .release_draw import grey_levels

STRONG = 64  # "strong" pixels: components and touching
SEPARABLE_FROM = 32  # separability counts pixels at or above this grey level
PROFILE = 8  # brightest grey levels kept per image
EIGHT = np.ones((3, 3), dtype=bool)


def image_stats(image: np.ndarray) -> dict:
    """Statistics of one uint8 image ``[H, W]`` (module docstring)."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 2:
        raise ValueError(f"expected a 2-D uint8 image, got {image.dtype} of shape {image.shape}")
    border = np.concatenate([image[0], image[-1], image[1:-1, 0], image[1:-1, -1]])
    profile = np.sort(image.ravel())[::-1][:PROFILE]
    return {
        "nonzero_frac": float(np.count_nonzero(image) / image.size),
        "distinct_values": int(len(np.unique(image))),
        "components8_nonzero": int(ndimage.label(image > 0, structure=EIGHT)[1]),
        "components8_ge64": int(ndimage.label(image >= STRONG, structure=EIGHT)[1]),
        "border_nonzero_frac": float(np.count_nonzero(border) / border.size),
        "mean_intensity": float(image.mean()),
        "n_255": int(np.count_nonzero(image == 255)),
        "peak_profile": [int(v) for v in profile],
    }


def layer_stats(sample) -> dict:
    """Touching, distractors placed and per-grey-level owner counts of one generated sample."""
    layers = sample.layers
    scale = sample.extra["byte_scale"]
    targets = grey_levels(layers["targets"], scale) >= STRONG
    distractors = grey_levels(layers["distractors"], scale) >= STRONG
    touching = bool((ndimage.binary_dilation(targets, structure=EIGHT) & distractors).any())
    owner = np.argmax(np.stack([layers["targets"], layers["distractors"], layers["markers"]]), axis=0)
    image = sample.image
    counted = image >= SEPARABLE_FROM
    target_levels = np.bincount(image[counted & (owner == 0)], minlength=256)
    distractor_levels = np.bincount(image[counted & (owner == 1)], minlength=256)
    return {
        "touching": touching,
        "distractors_placed": int(sample.distractors),
        "label": int(sample.label),
        "target_levels": target_levels,
        "distractor_levels": distractor_levels,
    }


def separability(target_levels: np.ndarray, distractor_levels: np.ndarray) -> dict:
    """Bayes accuracy of target vs distractor from the grey level, base rate and class-pure share."""
    t, d = np.asarray(target_levels, dtype=np.int64), np.asarray(distractor_levels, dtype=np.int64)
    total = int(t.sum() + d.sum())
    if total == 0:
        return {"bayes_accuracy": float("nan"), "base_rate": float("nan"), "pure_level_frac": float("nan")}
    pure = (t == 0) | (d == 0)
    return {
        "bayes_accuracy": float(np.maximum(t, d).sum() / total),
        "base_rate": float(max(t.sum(), d.sum()) / total),
        "pure_level_frac": float((t + d)[pure].sum() / total),
    }


def _spread(values: list) -> list:
    """[mean, std, min, max] of ``values``."""
    a = np.asarray(values, dtype=np.float64)
    return [float(a.mean()), float(a.std()), float(a.min()), float(a.max())]


def summarise(per_image: list[dict], images: Iterable[np.ndarray], layers: list[dict] | None = None) -> dict:
    """Set statistics from ``image_stats`` of each image (and ``layer_stats`` for generated sets)."""
    if not per_image:
        raise ValueError("no images to summarise")
    seen = np.zeros(256, dtype=bool)
    for image in images:
        seen[np.unique(image)] = True
    distinct = [s["distinct_values"] for s in per_image]
    out = {
        "n": len(per_image),
        "frac_nonzero_px": _spread([s["nonzero_frac"] for s in per_image]),
        "distinct_values_per_img": [float(np.mean(distinct)), int(min(distinct)), int(max(distinct))],
        "distinct_values_dataset": int(seen.sum()),
        "components8_nonzero": _spread([s["components8_nonzero"] for s in per_image]),
        "components8_ge64": _spread([s["components8_ge64"] for s in per_image]),
        "border_nonzero_frac": float(np.mean([s["border_nonzero_frac"] for s in per_image])),
        "mean_intensity": float(np.mean([s["mean_intensity"] for s in per_image])),
        "n_255_px_per_img": float(np.mean([s["n_255"] for s in per_image])),
    }
    if layers:
        out["pos_frac"] = float(np.mean([s["label"] for s in layers]))
        out["touching_frac"] = float(np.mean([s["touching"] for s in layers]))
        out["distractors_placed"] = float(np.mean([s["distractors_placed"] for s in layers]))
        out["separability"] = separability(
            sum(s["target_levels"] for s in layers), sum(s["distractor_levels"] for s in layers)
        )
    return out


def read_folder(folder: Path) -> tuple[list[Path], list[np.ndarray]]:
    """Every ``*.png`` under ``folder`` (sorted paths) as 2-D uint8 arrays."""
    paths = sorted(Path(folder).rglob("*.png"))
    if not paths:
        raise FileNotFoundError(f"{folder}: no .png files (give a folder of grayscale PNG images)")
    images = []
    for path in paths:
        with Image.open(path) as img:
            if img.mode != "L":
                raise ValueError(f"{path}: image mode {img.mode!r}, expected 8-bit grayscale 'L'")
            images.append(np.asarray(img).copy())
    return paths, images


# Rows of the comparison table: (label, key path, index into a list value or None).
TABLE = (
    ("share of non-zero pixels", "frac_nonzero_px", 0),
    ("distinct grey levels per image", "distinct_values_per_img", 0),
    ("distinct grey levels over the set", "distinct_values_dataset", None),
    ("8-connected components, non-zero", "components8_nonzero", 0),
    ("8-connected components, >= 64", "components8_ge64", 0),
    ("share of border pixels non-zero", "border_nonzero_frac", None),
    ("pixels at 255 per image", "n_255_px_per_img", None),
    ("mean grey level", "mean_intensity", None),
    ("distractors placed", "distractors_placed", None),
    ("images with a target touching a distractor", "touching_frac", None),
    ("separability: Bayes accuracy (>= 32)", "separability.bayes_accuracy", None),
    ("separability: base rate", "separability.base_rate", None),
    ("separability: pixels at one-class levels", "separability.pure_level_frac", None),
)


def lookup(summary: dict, path: str, index: int | None):
    """The value at dotted ``path`` (``index`` into a list), or None where the summary lacks it."""
    value = summary
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value[index] if index is not None and isinstance(value, list) else value


def compare(summary: dict, other: dict | None = None) -> list[tuple]:
    """Rows ``(label, ours, theirs, relative difference)`` of ``TABLE`` present in ``summary``."""
    rows = []
    for label, path, index in TABLE:
        ours = lookup(summary, path, index)
        if ours is None:
            continue
        theirs = lookup(other, path, index) if other else None
        relative = (ours - theirs) / abs(theirs) if theirs not in (None, 0) else None
        rows.append((label, ours, theirs, relative))
    return rows


def format_rows(rows: list[tuple], names: tuple = ("this set", "reference")) -> str:
    """A plain-text table of ``compare`` rows."""

    def cell(value) -> str:
        if value is None:
            return "-"
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = [f"{'statistic':<46} {names[0]:>12} {names[1]:>12} {'rel. diff':>10}"]
    for label, ours, theirs, relative in rows:
        rel = "-" if relative is None else f"{100 * relative:+.1f}%"
        lines.append(f"{label:<46} {cell(ours):>12} {cell(theirs):>12} {rel:>10}")
    return "\n".join(lines)


def bracket(reference: list[dict], generated: list[dict], low: float = 5.0, high: float = 95.0) -> list[dict]:
    """For each reference image: its non-zero share, component counts and peak profile, each with
    the generated set's ``low``-``high`` percentile range and whether it falls inside."""
    keys = ["nonzero_frac", "components8_nonzero", "components8_ge64"] + [f"peak_{k + 1}" for k in range(PROFILE)]

    def flat(s: dict) -> dict:
        return {**{k: s[k] for k in keys[:3]}, **{f"peak_{k + 1}": v for k, v in enumerate(s["peak_profile"])}}

    ranges = {k: np.percentile([flat(s)[k] for s in generated], [low, high]) for k in keys}
    out = []
    for s in reference:
        values = flat(s)
        out.append(
            {
                k: (
                    values[k],
                    float(ranges[k][0]),
                    float(ranges[k][1]),
                    bool(ranges[k][0] <= values[k] <= ranges[k][1]),
                )
                for k in keys
            }
        )
    return out
