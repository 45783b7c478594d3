"""Per-example evidence pooled over every seed pair: a Cochran-Mantel-Haenszel test of matched pairs.

Two arms scored on the same test examples give, for each seed pair (seed i of A, seed j of B)
and each example, a matched pair of outcomes. Each such (seed pair, example) is one stratum
whose 2x2 table is arm (A, B) by outcome (right, wrong); the CMH test over all strata
(``statsmodels.stats.contingency_tables.StratifiedTable.test_null_odds``) asks whether A and B
are right equally often within pairs. Only discordant pairs carry information, and the CMH
statistic equals McNemar's chi-square on the discordant counts summed over every seed pair
(Agresti, *Categorical Data Analysis*, section on matched pairs; tests/test_stats_claims.py checks
the identity). The Mantel-Haenszel pooled odds ratio is (only A right) / (only B right).

Note what it does NOT measure: the strata share runs (seed i of A is in every pair (i, j)), and
the test conditions on the trained networks. It says whether these networks differ on these
examples, not whether another draw of seeds would; that is the Welch interval's job over seeds.
This is why it is a secondary test (paper/claims.yaml).

A stratified table of the seed pairs' own 2x2 tables [[both right, only A], [only B, both wrong]]
would test something else: whether A's and B's correctness are associated, not whether their
accuracies differ.
"""

from __future__ import annotations

import numpy as np
from statsmodels.stats.contingency_tables import StratifiedTable

from .core import NAN, StatResult, _correctness

ONLY_A = np.array([[1.0, 0.0], [0.0, 1.0]])  # rows: arm A, arm B; columns: right, wrong
ONLY_B = np.array([[0.0, 1.0], [1.0, 0.0]])


def discordant_counts(correct_a, correct_b) -> tuple[int, int, int]:
    """(only A right, only B right, pairs x examples) summed over every seed pair."""
    ca, cb = _correctness(correct_a, "correct_a"), _correctness(correct_b, "correct_b")
    if ca.shape[1] != cb.shape[1]:
        raise ValueError(f"the two arms were scored on different test sets: {ca.shape[1]} vs {cb.shape[1]} examples")
    # sum over i, j of sum over examples of a_i (1 - b_j), and of (1 - a_i) b_j
    right_a, right_b = ca.sum(axis=0), cb.sum(axis=0)
    only_a = float(np.sum(right_a * (cb.shape[0] - right_b)))
    only_b = float(np.sum((ca.shape[0] - right_a) * right_b))
    return int(only_a), int(only_b), ca.shape[0] * cb.shape[0] * ca.shape[1]


def cmh_seed_pairs(correct_a, correct_b) -> StatResult:
    """CMH test over (seed pair, example) strata; the estimate is the accuracy difference A - B
    averaged over seed pairs (= mean accuracy of A minus that of B)."""
    only_a, only_b, n = discordant_counts(correct_a, correct_b)
    ca, cb = np.atleast_2d(correct_a), np.atleast_2d(correct_b)
    pairs = ca.shape[0] * cb.shape[0]
    estimate = (only_a - only_b) / n
    details = {"only_a": only_a, "only_b": only_b, "seed_pairs": pairs}
    if only_a + only_b == 0:
        return StatResult(
            "CMH over seed pairs",
            (pairs, ca.shape[1]),
            estimate,
            (NAN, NAN),
            NAN,
            note="no discordant pairs",
            details=details,
        )
    strata = np.concatenate(
        [np.repeat(ONLY_A[:, :, None], only_a, axis=2), np.repeat(ONLY_B[:, :, None], only_b, axis=2)], axis=2
    )
    table = StratifiedTable(strata)  # concordant strata add nothing to the statistic or its variance
    test = table.test_null_odds(correction=False)
    details["odds_ratio"] = float(table.oddsratio_pooled) if only_b else float("inf")
    return StatResult(
        "CMH over seed pairs",
        (pairs, ca.shape[1]),
        estimate,
        (NAN, NAN),
        float(test.pvalue),
        details={**details, "statistic": float(test.statistic)},
    )
