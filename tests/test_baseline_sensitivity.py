"""A verdict that rests on a trivial baseline, read again with each near-tie label (within 1% of the
majority's training count) in the majority's place."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from repro import stats
from repro.analysis import baselines as trivial
from repro.paper.claims_tables import sensitivity_notes

# ListOps-like training counts per root: SM's majority 7 leads 8 by 5 trees (2,443 against 2,438), 5 is
# within 1% too (2,432 >= 0.99 * 2,443 = 2,418.57), 2 just outside it (2,418)
TRAIN = {
    "[MAX": {"label_counts": [1, 1, 1, 1, 1, 1, 1, 1, 1, 90]},
    "[SM": {"label_counts": [2334, 2390, 2418, 2000, 2398, 2432, 2390, 2443, 2438, 2391]},
}


def test_near_ties_are_the_labels_within_one_percent_of_the_majority():
    assert trivial.near_ties(TRAIN["[SM"]["label_counts"]) == [(8, 2438), (5, 2432)]
    assert trivial.near_ties(TRAIN["[MAX"]["label_counts"]) == []
    assert trivial.near_ties({"0": 100, "1": 100}) == [(1, 100)]  # an exact tie: the majority is label 0
    assert trivial.near_ties({0: 100, 1: 99}) == [(1, 99)] and trivial.near_ties({0: 100, 1: 98}) == []


def test_root_operator_variants_change_one_root_s_label_and_rescore_the_test_set():
    rows = [{"root": "[SM", "label": 8}] * 30 + [{"root": "[SM", "label": 7}] * 10 + [{"root": "[MAX", "label": 9}] * 60
    base = trivial.root_operator(TRAIN, rows)
    assert base.accuracy == 70.0  # SM -> 7: 10 of 40, MAX -> 9: 60 of 60
    variants = dict(trivial.root_operator_variants(TRAIN, rows))
    assert list(variants) == [
        "SM 7 -> 8 (2,438 against 2,443 training trees)",
        "SM 7 -> 5 (2,432 against 2,443 training trees)",
    ]
    assert variants["SM 7 -> 8 (2,438 against 2,443 training trees)"].accuracy == 90.0
    assert variants["SM 7 -> 5 (2,432 against 2,443 training trees)"].accuracy == 60.0
    low, high = variants["SM 7 -> 8 (2,438 against 2,443 training trees)"].interval
    assert low < 90.0 < high


def test_majority_class_variants():
    labels = np.array([0] * 40 + [1] * 60)
    (what, variant), *rest = trivial.majority_class_variants({"0": 1000, "1": 995, "2": 10}, labels)
    assert not rest and what == "majority class 0 -> 1 (995 against 1,000 training examples)"
    assert variant.accuracy == 60.0 and trivial.majority_class({"0": 1000, "1": 995}, labels).accuracy == 40.0


def _evidence(baseline):
    return stats.Evidence(published=5.0, direction="greater", margin=1.0, estimate=-3.0, ci=(-6.0, -0.5),
                          ci_equivalence=(-5.5, -1.0), seeds={"A": 3, "B": 3}, shares={"A": 1.0, "B": 1.0},
                          means={"A": 63.0, "B": 66.0}, baseline=baseline)  # fmt: skip


def test_a_verdict_resting_on_a_near_tie_says_so_in_the_claims_table():
    rows = [{"root": "[SM", "label": 8}] * 30 + [{"root": "[SM", "label": 7}] * 10 + [{"root": "[MAX", "label": 9}] * 60
    base = trivial.root_operator(TRAIN, rows)
    verdict = stats.decide(_evidence(base.interval))
    assert verdict.word == "not tested" and verdict.rule.startswith(
        "R3"
    )  # both means inside the 95% interval of 70 of 100
    sensitivity = tuple(
        (what, stats.decide(_evidence(b.interval))) for what, b in trivial.root_operator_variants(TRAIN, rows)
    )
    assert [v.rule[:2] for _, v in sensitivity] == ["R5", "R3"]  # SM -> 8: the baseline moves above both means
    result = SimpleNamespace(claim=SimpleNamespace(id="lra-listops-x"), verdict=verdict, sensitivity=sensitivity)
    quiet = SimpleNamespace(claim=SimpleNamespace(id="other"), verdict=verdict, sensitivity=())
    supported = stats.Verdict("supported", "R6: ...")
    unmoved = SimpleNamespace(claim=SimpleNamespace(id="apart"), verdict=supported, sensitivity=(("x", supported),))
    (line,) = sensitivity_notes([result, quiet, unmoved])  # a verdict the baseline does not decide: no line
    assert line == (
        "Baseline sensitivity, lra-listops-x (not tested, R3), with a near-tie label in the baseline's place: "
        "SM 7 -> 8 (2,438 against 2,443 training trees): contradicted (R5, a different verdict); "
        "SM 7 -> 5 (2,432 against 2,443 training trees): not tested (R3)."
    )
