"""What a bounded receptive field can see of a Pathfinder image, flattened row-major.

A stack of ``depth`` 'same' convolutions of kernel ``K`` (the follow-up study, section 8, Table 1)
gives each output position the ``2 * depth * (K // 2) + 1`` tokens around it; mean
pooling then adds up what each such window computed. The label is a global property:
the two markers lie on one target contour or on two. One window *settles* it when it
holds one whole target contour (every dash, so it sees both ends and can tell a
``contour_length``-dash target from a shorter distractor) with the markers on it:
two markers or none there mean a positive, one means a negative.

``decidable_share`` counts the images where one window of the model's width holds a
whole target contour, from the geometry the generator keeps with each sample
(``Sample.segments``, ``contour_ids``, ``markers``); ``0.5 + share / 2`` is the accuracy
of a model that settles those images and guesses the rest. It is an estimate, neither a
bound nor a promise: the spans use points along each dash's centre line and the marker
centres (antialiased ink reaches about half a pixel beyond a dash's centre line and a
marker disc about 1.75 pixels beyond its centre, so true spans are somewhat wider);
evidence split across windows and statistical cues can add to it. The generator draws the same contours for either label
(only the second marker's place depends on it), but one weak cue remains: the Euclidean
distance between the markers differs slightly by label (means 14.55 and 14.02 pixels for
positives and negatives over 10,000 hard images; a classifier on it alone scores 53.5%,
5-fold cross-validated).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .render import Sample

TARGET_CONTOURS = (0, 1)  # Sample.contour_ids of the two target contours; distractors are 2, 3, ...


def receptive_reach(kernel_size: int, depth: int) -> int:
    """Tokens to each side one output position sees after ``depth`` layers of kernel ``kernel_size``."""
    if kernel_size < 1 or kernel_size % 2 == 0 or depth < 1:
        raise ValueError(
            f"kernel_size must be odd and positive and depth positive, got kernel_size={kernel_size}, depth={depth}"
        )
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


def contour_markers(sample: Sample, contour: int) -> np.ndarray:
    """The markers on ``contour``: marker 0 starts the first marked contour, marker 1 ends the other one."""
    first, other = sample.extra["marked_contours"]
    return sample.markers[[i for i, owner in enumerate((first, other)) if owner == contour]]


def contour_span(sample: Sample, contour: int, size: int) -> int:
    """Tokens from the first to the last pixel of one contour's dashes and the markers on it, minus one."""
    points = np.concatenate(
        [dash_points(sample.segments[sample.contour_ids == contour]), contour_markers(sample, contour)]
    )
    tokens = flat_index(points, size)
    return int(tokens.max() - tokens.min())


def deciding_span(sample: Sample, size: int) -> int:
    """The narrowest window (in tokens, minus one) that holds a whole target contour and its markers."""
    return min(contour_span(sample, contour, size) for contour in TARGET_CONTOURS)


def marker_gap(sample: Sample, size: int) -> int:
    """Tokens between the two markers' centres."""
    a, b = flat_index(sample.markers, size)
    return int(abs(a - b))


@dataclass(frozen=True)
class ReachRow:
    kernel_size: int
    depth: int
    reach: int  # tokens to each side
    decidable_positives: float  # share of positives one window settles
    decidable_negatives: float
    markers_in_one_window: float  # share of all images whose two markers fit one window

    @property
    def decidable_share(self) -> float:
        return 0.5 * (self.decidable_positives + self.decidable_negatives)

    @property
    def window_accuracy(self) -> float:
        """Settle what one window can, guess the rest."""
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
        rows.append(
            ReachRow(
                kernel,
                depth,
                reach,
                float(fits[labels == 1].mean()),
                float(fits[labels == 0].mean()),
                float((gaps <= 2 * reach).mean()),
            )
        )
    return rows
