"""What a bounded receptive field can see of a Pathfinder image, flattened row-major.

A stack of ``depth`` 'same' convolutions of kernel ``K`` (seed 003 section 8, Table 1)
gives each output position the ``2 * depth * (K // 2) + 1`` tokens around it; mean
pooling then adds up what each such window computed. The label of a Pathfinder
image is a global property: the two markers lie on one contour or on two. One
window can *decide* it only when it holds everything that settles it:

* a positive: the marked contour (every dash of it) and both markers;
* a negative: both marked contours and both markers (then it sees them apart).

``decidable_share`` counts the images where one window of the model's width can do
so, from the geometry the generator keeps with each sample (``Sample.segments``,
``contour_ids``, ``markers``). ``0.5 + share / 2`` is then the accuracy of a model
that decides those images and guesses the rest. It is not a proof of a ceiling: an
additive pooling of windows may also pick up statistical cues the generator left in
(ours is built to leave none: the drawing does not depend on the label, only the
second marker's place does).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .pathfinder_render import Sample


def receptive_reach(kernel_size: int, depth: int) -> int:
    """Tokens to each side one output position sees after ``depth`` layers of kernel ``kernel_size``."""
    if kernel_size < 1 or kernel_size % 2 == 0 or depth < 1:
        raise ValueError(f"kernel_size must be odd and positive and depth positive, got kernel_size={kernel_size}, depth={depth}")
    return depth * (kernel_size // 2)


def flat_index(points: np.ndarray, size: int) -> np.ndarray:
    """Row-major token index of each (y, x) point [n, 2] in pixel units (pixel (r, c) covers [r, r+1) x [c, c+1))."""
    rows = np.clip(np.floor(points[:, 0]), 0, size - 1).astype(np.int64)
    cols = np.clip(np.floor(points[:, 1]), 0, size - 1).astype(np.int64)
    return rows * size + cols


def dash_points(segments: np.ndarray, per_dash: int = 9) -> np.ndarray:
    """``per_dash`` points evenly spaced along each dash (y0, x0, y1, x1), ends included: [n * per_dash, 2]."""
    t = np.linspace(0.0, 1.0, per_dash)[None, :, None]
    starts, ends = segments[:, None, 0:2], segments[:, None, 2:4]
    return (starts + t * (ends - starts)).reshape(-1, 2)


def marked_contours(sample: Sample) -> tuple[int, ...]:
    """The contour ids that carry a marker: one for a positive, two for a negative."""
    first, other = sample.extra["marked_contours"]
    return (first,) if first == other else (first, other)


def deciding_span(sample: Sample, size: int) -> int:
    """Tokens from the first to the last of the marked contours' pixels and the markers, minus one."""
    keep = np.isin(sample.contour_ids, marked_contours(sample))
    tokens = np.concatenate([flat_index(dash_points(sample.segments[keep]), size), flat_index(sample.markers, size)])
    return int(tokens.max() - tokens.min())


def marker_gap(sample: Sample, size: int) -> int:
    """Tokens between the two markers' centres."""
    a, b = flat_index(sample.markers, size)
    return int(abs(a - b))


@dataclass(frozen=True)
class ReachRow:
    kernel_size: int
    depth: int
    reach: int  # tokens to each side
    decidable_positives: float  # share of positives one window decides
    decidable_negatives: float
    markers_in_one_window: float  # share of all images whose two markers fit one window

    @property
    def decidable_share(self) -> float:
        return 0.5 * (self.decidable_positives + self.decidable_negatives)

    @property
    def window_accuracy(self) -> float:
        """Decide what one window can, guess the rest."""
        return 0.5 + 0.5 * self.decidable_share


def reach_rows(samples: list[Sample], size: int, kernels: list[int], depth: int) -> list[ReachRow]:
    """One row per kernel size for models of ``depth`` layers, over ``samples`` (both labels present)."""
    labels = np.array([s.label for s in samples])
    if not (labels == 1).any() or not (labels == 0).any():
        raise ValueError("reach_rows needs positives and negatives among the samples")
    spans = np.array([deciding_span(s, size) for s in samples])
    gaps = np.array([marker_gap(s, size) for s in samples])
    rows = []
    for kernel in kernels:
        reach = receptive_reach(kernel, depth)
        fits = spans <= 2 * reach
        rows.append(ReachRow(kernel, depth, reach, float(fits[labels == 1].mean()), float(fits[labels == 0].mean()),
                             float((gaps <= 2 * reach).mean())))
    return rows
