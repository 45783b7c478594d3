"""repro.stats against answers computed independently here (the basic tests of repro.stats.core)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from repro import stats


def paired_from_table(both: int, only_a: int, only_b: int, neither: int, seed: int = 0):
    """Two 0/1 correctness vectors whose McNemar 2x2 table is the one given, in shuffled order."""
    a = np.array([1] * both + [1] * only_a + [0] * only_b + [0] * neither)
    b = np.array([1] * both + [0] * only_a + [1] * only_b + [0] * neither)
    order = np.random.default_rng(seed).permutation(a.size)
    return a[order], b[order]


@pytest.mark.parametrize(
    "both,only_a,only_b,neither", [(40, 12, 3, 45), (500, 7, 19, 474), (3, 0, 0, 2), (10, 1, 0, 0)]
)
def test_mcnemar_equals_the_exact_binomial_test_on_discordant_pairs(both, only_a, only_b, neither):
    a, b = paired_from_table(both, only_a, only_b, neither)
    assert stats.mcnemar_table(a, b).tolist() == [[both, only_a], [only_b, neither]]
    result = stats.mcnemar(a, b)
    discordant = only_a + only_b
    expected = sps.binomtest(only_a, discordant, 0.5).pvalue if discordant else 1.0
    assert result.p_value == pytest.approx(expected, rel=1e-12, abs=1e-15)
    n = both + only_a + only_b + neither
    assert result.n == (n,)
    assert result.estimate == pytest.approx((only_a - only_b) / n)
    assert result.ci[0] <= result.estimate <= result.ci[1]
    assert result.test == "McNemar exact"


def test_mcnemar_of_a_run_with_itself_is_one_and_mismatched_lengths_fail():
    a, _ = paired_from_table(20, 5, 5, 10)
    assert stats.mcnemar(a, a).p_value == 1.0
    with pytest.raises(ValueError, match="same examples: 40 vs 39"):
        stats.mcnemar(a, a[:-1])


def test_welch_matches_scipy_and_the_welch_satterthwaite_interval():
    rng = np.random.default_rng(1)
    a, b = rng.normal(60, 1.0, 7), rng.normal(58.5, 2.5, 5)
    result = stats.welch(a, b)
    reference = sps.ttest_ind(a, b, equal_var=False)
    assert result.p_value == pytest.approx(reference.pvalue, rel=1e-12)
    assert result.details["statistic"] == pytest.approx(reference.statistic, rel=1e-12)
    # The interval, written out: se^2 = va/na + vb/nb, df by Welch-Satterthwaite.
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = sps.t.ppf(0.975, df) * math.sqrt(va + vb)
    diff = a.mean() - b.mean()
    assert result.estimate == pytest.approx(diff)
    assert result.ci == pytest.approx((diff - half, diff + half), rel=1e-10)
    assert result.n == (7, 5)
    # One arm constant (every seed at the majority class): the same numbers as scipy, and no warning.
    flat = np.array([17.15, 17.15])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one_flat = stats.welch(flat, a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = sps.ttest_ind(flat, a, equal_var=False)
    assert one_flat.p_value == pytest.approx(reference.pvalue, rel=1e-12)
    assert one_flat.details["df"] == pytest.approx(reference.df, rel=1e-12)


def test_tests_that_cannot_run_say_why_instead_of_failing():
    one = stats.welch([50.0], [49.0, 48.0])
    assert math.isnan(one.p_value) and one.note == "needs at least 2 seeds per arm"
    assert one.estimate == pytest.approx(1.5)
    flat = stats.tost_published([50.0, 50.0], 50.0, margin=1.0)
    assert math.isnan(flat.p_value) and flat.note == "zero variance across seeds"
    with pytest.raises(ValueError, match="margin must be positive"):
        stats.tost_ind([1.0, 2.0], [1.0, 2.0], margin=0.0)


def test_seed_bootstrap_covers_the_true_difference_in_at_least_90_of_100_datasets():
    rng = np.random.default_rng(2024)
    true_difference, covered = 2.0, 0
    for dataset in range(100):
        a = rng.normal(60.0 + true_difference, 1.5, 25)
        b = rng.normal(60.0, 1.0, 25)
        result = stats.bootstrap_seeds(a, b, n_resamples=2000, seed=dataset)
        covered += result.ci[0] <= true_difference <= result.ci[1]
    assert covered >= 90, f"covered the true difference in {covered} of 100 datasets"


def test_hierarchical_bootstrap_covers_the_true_accuracy_difference_in_at_least_90_of_100_datasets():
    """Seeds and examples both vary; the estimand is the population accuracy difference."""
    rng = np.random.default_rng(7)
    p_a, p_b, seeds, examples, covered = 0.62, 0.55, 8, 300, 0
    for dataset in range(100):
        difficulty = rng.normal(0.0, 1.0, examples)  # shared by both arms: the pairing matters

        def runs(p, difficulty=difficulty):
            logit = math.log(p / (1 - p))
            # per-seed shift of small size, per-example difficulty, then Bernoulli outcomes
            shifts = rng.normal(0.0, 0.05, (seeds, 1))
            probability = 1.0 / (1.0 + np.exp(-(logit + shifts + difficulty)))
            return (rng.random((seeds, examples)) < probability).astype(float)

        result = stats.bootstrap_hierarchical(runs(p_a), runs(p_b), n_resamples=1000, seed=dataset)
        covered += result.ci[0] <= TRUE_DIFF[(p_a, p_b)] <= result.ci[1]
    assert covered >= 90, f"covered the true difference in {covered} of 100 datasets"


def _population_accuracy(p: float, draws: int = 2_000_000) -> float:
    """E over difficulty ~ N(0,1) of sigmoid(logit(p) + difficulty), by Monte Carlo with a fixed seed."""
    z = np.random.default_rng(0).normal(0.0, 1.0, draws)
    return float(np.mean(1.0 / (1.0 + np.exp(-(math.log(p / (1 - p)) + z)))))


TRUE_DIFF = {(0.62, 0.55): _population_accuracy(0.62) - _population_accuracy(0.55)}


def test_hierarchical_bootstrap_rejects_different_test_sets():
    with pytest.raises(ValueError, match="different test sets: 4 vs 5"):
        stats.bootstrap_hierarchical(np.ones((2, 4)), np.ones((2, 5)))


def test_holm_matches_multipletests_and_the_step_down_rule_written_out():
    p = np.array([0.01, 0.04, 0.03, 0.20, 0.002, 0.049])
    adjusted, reject = stats.holm(p)
    reference = multipletests(p, alpha=0.05, method="holm")
    assert np.allclose(adjusted, reference[1]) and (reject == reference[0]).all()
    # Holm by hand: sort, multiply the i-th smallest by (m - i), running maximum, cap at 1.
    order = np.argsort(p)
    by_hand = np.minimum(1.0, np.maximum.accumulate(p[order] * (p.size - np.arange(p.size))))
    expected = np.empty_like(p)
    expected[order] = by_hand
    assert np.allclose(adjusted, expected)


def test_holm_leaves_tests_that_did_not_run_out_of_the_family():
    adjusted, reject = stats.holm([0.01, float("nan"), 0.04])
    assert math.isnan(adjusted[1]) and not reject[1]
    assert adjusted[[0, 2]] == pytest.approx(multipletests([0.01, 0.04], method="holm")[1])


def test_tost_accepts_equivalence_for_identical_distributions_and_not_for_a_shifted_one():
    rng = np.random.default_rng(3)
    a, same = rng.normal(60.0, 1.0, 200), rng.normal(60.0, 1.0, 200)
    shifted = rng.normal(62.0, 1.0, 200)
    equivalent = stats.tost_ind(a, same, margin=1.0)
    assert equivalent.p_value < 0.05, equivalent
    assert -1.0 < equivalent.ci[0] and equivalent.ci[1] < 1.0  # the 90% CI inside the margin
    assert stats.tost_ind(a, shifted, margin=1.0).p_value > 0.05
    # few samples: not enough evidence for equivalence even when the means agree
    assert stats.tost_ind(a[:3], same[:3], margin=0.2).p_value > 0.05


def test_tost_against_a_published_number():
    rng = np.random.default_rng(4)
    seeds = rng.normal(63.1, 0.5, 40)
    assert stats.tost_published(seeds, 63.14, margin=1.0).p_value < 0.05
    far = stats.tost_published(seeds, 61.0, margin=1.0)
    assert far.p_value > 0.05 and far.estimate == pytest.approx(seeds.mean() - 61.0)
    # the one-sided p-values, written out with scipy: H0 mu <= ref - m, H0 mu >= ref + m
    lower = sps.ttest_1samp(seeds, 63.14 - 1.0, alternative="greater").pvalue
    upper = sps.ttest_1samp(seeds, 63.14 + 1.0, alternative="less").pvalue
    assert stats.tost_published(seeds, 63.14, margin=1.0).p_value == pytest.approx(max(lower, upper), rel=1e-9)


def test_one_sample_test_matches_scipy():
    seeds = np.array([52.1, 53.0, 51.4, 52.6])
    result = stats.one_sample(seeds, 52.73)
    assert result.p_value == pytest.approx(sps.ttest_1samp(seeds, 52.73).pvalue, rel=1e-12)
    assert result.ci[0] < result.estimate < result.ci[1]
    assert result.as_dict()["test"] == "one-sample t-test"
