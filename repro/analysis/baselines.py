"""Trivial baselines of a task on its test set: majority class and (ListOps) root operator.

Both are computed from TRAINING labels and scored on the test set's labels:

* majority class: predict the most frequent training label everywhere (ties: the smallest
  label), from the training label counts the record describes (``data.class_counts.train``)
  or, for ListOps, the training label counts per root operator summed
  (``repro.analysis.listops_roots``).
* root operator (ListOps): predict each root operator's most frequent training label
  (the follow-up study, appendix B).

Near ties: a label whose training count is within ``NEAR_TIE`` (1%) of the most frequent one's could
as well have been the majority on another draw of the training set. ``majority_class_variants`` and
``root_operator_variants`` give the baseline with each such label in the majority's place (one root at a
time), so a verdict that rests on the baseline can be read under each (repro/paper/evaluate.py).

A baseline's interval is the 95% Wilson interval of its accuracy on the n test examples
(``statsmodels.stats.proportion.proportion_confint(method="wilson")``): how far another test
set of this size could put the same predictor. An arm whose seed mean lies inside it has not
been shown to beat the trivial predictor (verdict rule R3, ``repro.stats.verdict``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from statsmodels.stats.proportion import proportion_confint

from . import listops_roots


@dataclass(frozen=True)
class Baseline:
    """One trivial predictor's test accuracy (points) with its 95% Wilson interval."""

    name: str  # "majority class" | "root operator"
    accuracy: float
    interval: tuple[float, float]
    n_test: int
    detail: str  # what it predicts

    def contains(self, value: float) -> bool:
        return self.interval[0] <= value <= self.interval[1]


def scored(name: str, predictions, labels, detail: str, alpha: float = 0.05) -> Baseline:
    """A baseline from its predictions and the test labels."""
    predictions, labels = np.asarray(predictions).astype(int), np.asarray(labels).astype(int)
    if predictions.shape != labels.shape or labels.size == 0:
        raise ValueError(f"{name}: {predictions.size} predictions for {labels.size} test labels")
    right = int((predictions == labels).sum())
    low, high = proportion_confint(right, labels.size, alpha=alpha, method="wilson")
    interval = (100.0 * float(low), 100.0 * float(high))
    return Baseline(name, 100.0 * right / labels.size, interval, int(labels.size), detail)


def majority_class(train_counts: dict, test_labels) -> Baseline:
    """Predict the most frequent training label; ``train_counts``: label -> count (keys may be strings)."""
    if not train_counts:
        raise ValueError("majority class: no training label counts")
    counts = {int(label): int(n) for label, n in train_counts.items()}
    label = max(sorted(counts), key=lambda k: counts[k])  # the first of the most frequent: the smallest label
    labels = np.asarray(test_labels).astype(int)
    return scored("majority class", np.full(labels.shape, label), labels, f"label {label} everywhere")


def root_operator(train_summary: dict, test_rows: list[dict]) -> Baseline:
    """ListOps: each root's most frequent training label; ``train_summary``: the roots analysis' ``train`` block."""
    counts = {root: entry["label_counts"] for root, entry in train_summary.items()}
    majority = listops_roots.most_frequent(counts)
    roots = [row["root"] for row in test_rows]
    detail = ", ".join(f"{root.lstrip('[')} -> {label}" for root, label in majority.items())
    return scored(
        "root operator", listops_roots.baseline_predictions(majority, roots), [r["label"] for r in test_rows], detail
    )


def listops_train_counts(train_summary: dict) -> dict[int, int]:
    """ListOps training label counts over every root operator."""
    total = np.sum([entry["label_counts"] for entry in train_summary.values()], axis=0)
    return {label: int(n) for label, n in enumerate(total)}


def strongest(baselines: list[Baseline]) -> Baseline | None:
    """The most accurate baseline (the one an arm must leave), or None."""
    return max(baselines, key=lambda b: b.accuracy) if baselines else None


NEAR_TIE = 0.01  # a label within 1% of the majority's training count is a near tie


def near_ties(counts, fraction: float = NEAR_TIE) -> list[tuple[int, int]]:
    """(label, count) of each label other than the majority (the first most frequent) whose training count is
    at least ``(1 - fraction)`` of the majority's, most frequent first; ``counts``: a list, or label -> count."""
    pairs = sorted((int(k), int(n)) for k, n in (counts.items() if isinstance(counts, dict) else enumerate(counts)))
    top = max(pairs, key=lambda kn: (kn[1], -kn[0]))
    near = [(k, n) for k, n in pairs if k != top[0] and n >= (1.0 - fraction) * top[1]]
    return sorted(near, key=lambda kn: (-kn[1], kn[0]))


def majority_class_variants(train_counts: dict, test_labels) -> list[tuple[str, Baseline]]:
    """The majority-class baseline with each near-tie label in the majority's place: (what changed, baseline)."""
    counts = {int(label): int(n) for label, n in train_counts.items()}
    top = max(sorted(counts), key=lambda k: counts[k])
    labels = np.asarray(test_labels).astype(int)
    out = []
    for label, n in near_ties(counts):
        what = f"majority class {top} -> {label} ({n:,} against {counts[top]:,} training examples)"
        out.append((what, scored("majority class", np.full(labels.shape, label), labels, f"label {label} everywhere")))
    return out


def root_operator_variants(train_summary: dict, test_rows: list[dict]) -> list[tuple[str, Baseline]]:
    """The root-operator baseline with one root's near-tie label in its majority's place, for each such label."""
    counts = {root: entry["label_counts"] for root, entry in train_summary.items()}
    majority = listops_roots.most_frequent(counts)
    roots, labels = [row["root"] for row in test_rows], [r["label"] for r in test_rows]
    out = []
    for root in sorted(counts):
        for label, n in near_ties(counts[root]):
            changed = {**majority, root: label}
            top = majority[root]
            what = f"{root.lstrip('[')} {top} -> {label} ({n:,} against {counts[root][top]:,} training trees)"
            detail = ", ".join(f"{r.lstrip('[')} -> {k}" for r, k in changed.items())
            predictions = listops_roots.baseline_predictions(changed, roots)
            out.append((what, scored("root operator", predictions, labels, detail)))
    return out
