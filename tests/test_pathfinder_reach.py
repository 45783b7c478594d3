"""The receptive-field geometry of Pathfinder images (repro/tasks/pathfinder/reach.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.models.model import SequenceClassifier
from repro.tasks.pathfinder import render
from repro.tasks.pathfinder.reach import (
    contour_markers,
    contour_span,
    deciding_span,
    flat_index,
    marker_gap,
    reach_rows,
    receptive_reach,
)


def hand_sample(label: int) -> render.Sample:
    """Target 0: three dashes along row 5 (x 2..20.5), span 18 tokens. Target 1: row 10 x 1..13 and row 11
    x 2..9, span 40 tokens. A distractor along row 30. Positive: both markers end target 0; negative:
    marker 0 starts target 0 and marker 1 ends target 1."""
    segments = np.array(
        [
            [5.5, 2.2, 5.5, 8.0],
            [5.5, 9.0, 5.5, 14.0],
            [5.5, 15.0, 5.5, 20.5],
            [10.5, 13.0, 10.5, 1.0],
            [11.5, 2.0, 11.5, 9.0],
            [30.5, 0.0, 30.5, 31.0],
        ]
    )
    contour_ids = np.array([0, 0, 0, 1, 1, 2])
    if label == 1:
        markers, marked = np.array([[5.5, 2.2], [5.5, 20.5]]), (0, 0)
    else:
        markers, marked = np.array([[5.5, 2.2], [11.5, 9.0]]), (0, 1)
    return render.Sample(
        image=np.zeros((32, 32), np.uint8),
        label=label,
        segments=segments,
        contour_ids=contour_ids,
        markers=markers,
        margin=1.0,
        extra={"marked_contours": marked},
    )


def test_reach_is_depth_times_half_kernel():
    assert receptive_reach(61, 6) == 180
    assert receptive_reach(5, 4) == 8
    assert receptive_reach(1, 3) == 0
    with pytest.raises(
        ValueError, match=r"kernel_size must be odd and positive and depth positive, got kernel_size=4, depth=6"
    ):
        receptive_reach(4, 6)


def test_flat_index_is_row_major_and_clipped():
    points = np.array([[0.0, 0.0], [0.99, 31.99], [1.0, 0.0], [31.5, 31.5], [-0.5, 40.0]])
    assert flat_index(points, 32).tolist() == [0, 31, 32, 1023, 31]


def test_spans_of_hand_made_images():
    positive, negative = hand_sample(1), hand_sample(0)
    assert contour_markers(positive, 0).tolist() == [[5.5, 2.2], [5.5, 20.5]]
    assert contour_markers(positive, 1).shape == (0, 2)
    assert contour_markers(negative, 1).tolist() == [[11.5, 9.0]]
    for sample in (positive, negative):
        assert contour_span(sample, 0, 32) == (5 * 32 + 20) - (5 * 32 + 2)
        assert contour_span(sample, 1, 32) == (11 * 32 + 9) - (10 * 32 + 1)
        # the narrower whole target settles the label; the distractor is never one
        assert deciding_span(sample, 32) == 18
    assert marker_gap(positive, 32) == 18
    assert marker_gap(negative, 32) == (11 * 32 + 9) - (5 * 32 + 2)


def test_marker_off_the_dashes_widens_its_contour():
    sample = hand_sample(0)
    sample.markers[0] = [3.5, 2.2]  # two rows above target 0's first dash
    assert contour_span(sample, 0, 32) == (5 * 32 + 20) - (3 * 32 + 2)
    assert deciding_span(sample, 32) == 40


def test_reach_rows_count_what_one_window_holds():
    samples = [hand_sample(1), hand_sample(0)]
    # both images are settled by a window of 18 tokens (reach 9); their marker gaps are 18 and 199 (reach 100)
    rows = {row.reach: row for row in reach_rows(samples, 32, kernels=[17, 19, 197, 201], depth=1)}
    assert (rows[8].decidable_positives, rows[8].decidable_negatives) == (0.0, 0.0)
    assert (rows[9].decidable_positives, rows[9].decidable_negatives) == (1.0, 1.0)
    assert rows[8].window_accuracy == 0.5 and rows[9].window_accuracy == 1.0
    assert rows[9].markers_in_one_window == 0.5
    assert rows[98].markers_in_one_window == 0.5 and rows[100].markers_in_one_window == 1.0


def test_reach_rows_need_both_labels():
    with pytest.raises(ValueError, match="reach_rows needs positives and negatives among the samples"):
        reach_rows([hand_sample(1)], 32, kernels=[5], depth=1)


def test_generated_images_invariants():
    spec = render.lra_spec(32, "easy")
    samples = render.chunk_samples(0, "easy", 0, 40, spec)
    for sample in samples:
        # the settling window holds a whole target contour and the markers on it
        spans = [contour_span(sample, contour, 32) for contour in (0, 1)]
        assert deciding_span(sample, 32) == min(spans)
        if sample.label == 1:  # a positive's marked target holds both markers
            first = sample.extra["marked_contours"][0]
            assert contour_span(sample, first, 32) >= marker_gap(sample, 32)
    rows = reach_rows(samples, 32, kernels=[5, 31, 61, 2047], depth=1)
    shares = [row.decidable_share for row in rows]
    assert shares == sorted(shares)
    assert rows[-1].decidable_share == 1.0 and rows[-1].window_accuracy == 1.0
    assert rows[0].decidable_share == 0.0


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_the_locality_model_sees_exactly_its_reach(norm):
    """The analysis's reach is the built model's: changing pixel 500 changes the (eval-mode) token
    states at positions 500 - R .. 500 + R and nowhere else, for K=61 and depth 6 (R = 180)."""
    torch.manual_seed(0)
    cfg = dict(backbone="conv", d_model=8, d_hidden=16, kernel_size=61, depth=6, groups=4, norm=norm, pooling="mean")
    model = (
        SequenceClassifier(cfg, vocab_size=256, max_len=1024, num_classes=2, pad_id=None, two_tower=False)
        .double()
        .eval()
    )
    ids = torch.randint(0, 256, (1, 1024))
    changed_ids = ids.clone()
    changed_ids[0, 500] = (ids[0, 500] + 128) % 256
    with torch.no_grad():
        diff = (model.forward_with_states(changed_ids)[1] - model.forward_with_states(ids)[1]).abs().sum(-1)[0]
    reach = receptive_reach(61, 6)
    assert (diff > 0).nonzero().flatten().tolist() == list(range(500 - reach, 500 + reach + 1))
