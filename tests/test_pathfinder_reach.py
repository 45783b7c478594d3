"""The receptive-field geometry of Pathfinder images (repro/tasks/pathfinder_reach.py)."""
from __future__ import annotations

import numpy as np
import pytest

from repro.tasks import pathfinder_render as render
from repro.tasks.pathfinder_reach import (deciding_span, flat_index, marker_gap, marked_contours, reach_rows,
                                          receptive_reach)


def hand_sample(label: int) -> render.Sample:
    """Contour 0: three dashes along row 5 (x 2..20); contour 1: one dash along row 10 (x 4..8); a distractor far below."""
    segments = np.array([[5.5, 2.2, 5.5, 8.0], [5.5, 9.0, 5.5, 14.0], [5.5, 15.0, 5.5, 20.5],
                         [10.5, 4.0, 10.5, 8.9], [30.5, 0.0, 30.5, 31.0]])
    contour_ids = np.array([0, 0, 0, 1, 2])
    if label == 1:
        markers, marked = np.array([[5.5, 2.2], [5.5, 20.5]]), (0, 0)
    else:
        markers, marked = np.array([[5.5, 2.2], [10.5, 8.9]]), (0, 1)
    return render.Sample(image=np.zeros((32, 32), np.uint8), label=label, segments=segments, contour_ids=contour_ids,
                         markers=markers, margin=1.0, extra={"marked_contours": marked})


def test_reach_is_depth_times_half_kernel():
    assert receptive_reach(61, 6) == 180
    assert receptive_reach(5, 4) == 8
    assert receptive_reach(1, 3) == 0
    with pytest.raises(ValueError, match=r"kernel_size must be odd and positive and depth positive, got kernel_size=4, depth=6"):
        receptive_reach(4, 6)


def test_flat_index_is_row_major_and_clipped():
    points = np.array([[0.0, 0.0], [0.99, 31.99], [1.0, 0.0], [31.5, 31.5], [-0.5, 40.0]])
    assert flat_index(points, 32).tolist() == [0, 31, 32, 1023, 31]


def test_deciding_span_of_hand_made_images():
    positive, negative = hand_sample(1), hand_sample(0)
    assert marked_contours(positive) == (0,)
    assert marked_contours(negative) == (0, 1)
    # positive: row 5 from column 2 to column 20; the distractor and contour 1 do not count
    assert deciding_span(positive, 32) == (5 * 32 + 20) - (5 * 32 + 2)
    # negative: contour 0 (row 5, columns 2..20) and contour 1 (row 10, columns 4..8)
    assert deciding_span(negative, 32) == (10 * 32 + 8) - (5 * 32 + 2)
    assert marker_gap(positive, 32) == 18
    assert marker_gap(negative, 32) == (10 * 32 + 8) - (5 * 32 + 2)


def test_reach_rows_count_what_one_window_holds():
    samples = [hand_sample(1), hand_sample(0)]
    # spans: positive 18, negative 166. Reach r decides a span up to 2r: r=8 neither, r=9 and r=82 the positive, r=83 both
    rows = {row.reach: row for row in reach_rows(samples, 32, kernels=[17, 19, 165, 167], depth=1)}
    assert (rows[8].decidable_positives, rows[8].decidable_negatives) == (0.0, 0.0)
    assert (rows[9].decidable_positives, rows[9].decidable_negatives) == (1.0, 0.0)
    assert rows[9].window_accuracy == 0.75
    assert (rows[82].decidable_positives, rows[82].decidable_negatives) == (1.0, 0.0)
    assert (rows[83].decidable_positives, rows[83].decidable_negatives) == (1.0, 1.0)
    assert rows[83].markers_in_one_window == 1.0 and rows[8].markers_in_one_window == 0.0


def test_reach_rows_need_both_labels():
    with pytest.raises(ValueError, match="reach_rows needs positives and negatives among the samples"):
        reach_rows([hand_sample(1)], 32, kernels=[5], depth=1)


def test_generated_images_invariants():
    spec = render.lra_spec(32, "easy")
    samples = render.chunk_samples(0, "easy", 0, 40, spec)
    for sample in samples:
        # the window that decides holds both markers, so it is at least as wide as their gap
        assert deciding_span(sample, 32) >= marker_gap(sample, 32)
    rows = reach_rows(samples, 32, kernels=[5, 31, 61, 2047], depth=1)
    shares = [row.decidable_share for row in rows]
    assert shares == sorted(shares)
    assert rows[-1].decidable_share == 1.0 and rows[-1].window_accuracy == 1.0
    assert rows[0].decidable_share == 0.0
