"""The basic tests between arms: plain arrays in, a :class:`StatResult` out (tables read only records).

Every function takes plain arrays and returns a :class:`StatResult` carrying the
test's name, the sample size(s), the estimate, a confidence interval and the
p-value. The computations are scipy's and statsmodels'; this module is the glue.

Which test answers which question:

* ``welch``: two arms on one task, one accuracy per seed each; Welch's t-test
  (statsmodels ``CompareMeans.ttest_ind(usevar="unequal")``, equal to
  ``scipy.stats.ttest_ind(equal_var=False)``); the CI is the Welch interval of the
  difference in means (``CompareMeans.tconfint_diff(usevar="unequal")``).
* ``bootstrap_seeds``: percentile bootstrap 95% CI of the difference in mean accuracy,
  resampling **seeds** within each arm independently (``scipy.stats.bootstrap``,
  ``method="percentile"``), seeded. Captures training variability only.
* ``bootstrap_hierarchical``: percentile bootstrap resampling **seeds** within each arm
  and **test examples** jointly for both arms (the same examples for A and B, so
  the pairing by example is kept). Captures training and test-set variability;
  this is the CI the paper's statistics table reports.
* ``mcnemar``: paired per-example predictions of two runs on the same test set
  (``task.data_seed`` fixes it); exact binomial McNemar
  (``statsmodels.stats.contingency_tables.mcnemar(exact=True)``). The estimate is
  the accuracy difference (b - c) / n, its CI the Wald interval of a paired difference
  of proportions.
* ``holm``: Holm's step-down correction over a family of p-values
  (``statsmodels.stats.multitest.multipletests(method="holm")``); NaN p-values (tests
  that could not run) stay NaN and are not counted in the family.
* ``tost_ind``: equivalence of two arms, H0 |mu_A - mu_B| >= margin
  (``statsmodels.stats.weightstats.ttost_ind``, unequal variances); the CI is the
  (1 - 2 alpha) interval of the difference, the usual TOST report.
* ``tost_published``: equivalence of our seeds to a published number, H0
  |mu - ref| >= margin, one-sample TOST (``DescrStatsW.ttost_mean``).
* ``one_sample``: our seeds against a published number, two-sided one-sample t-test
  (``scipy.stats.ttest_1samp``).
* ``permutation``: exact two-sided permutation test of mean(a) - mean(b) over every split of
  the pooled seeds (``scipy.stats.permutation_test``, ``permutation_type="independent"``);
  its smallest attainable p-value is 2 / C(na + nb, na) (0.1 for 3 + 3 seeds), said in ``note``
  when it cannot reach alpha.

Accuracies may be fractions or points; margins are in the same unit as the data
(the paper tables use points, i.e. percent, and a 1-point margin).

A test that cannot run (fewer than two seeds, zero variance) returns NaN p-value and
CI with ``note`` saying why, never an exception, so a table can mark the cell.

Usage::

    from repro import stats
    r = stats.welch([52.1, 52.9, 51.7], [45.0, 46.2, 45.5])
    r.p_value, r.ci, r.estimate, r.n
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar as _sm_mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import CompareMeans, DescrStatsW, ttost_ind
from tqdm import tqdm

NAN = float("nan")


@dataclass(frozen=True)
class StatResult:
    """One test's answer: name, sample size(s), estimate, CI, p-value (NaN where it could not run)."""

    test: str
    n: tuple[int, ...]
    estimate: float
    ci: tuple[float, float]
    p_value: float
    note: str = ""
    details: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "test": self.test,
            "n": list(self.n),
            "estimate": self.estimate,
            "ci_low": self.ci[0],
            "ci_high": self.ci[1],
            "p_value": self.p_value,
            "note": self.note,
            **self.details,
        }


def _vector(values, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name}: every value must be finite, got {array.tolist()}")
    return array


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else NAN


def _too_few(test: str, n: tuple[int, ...], estimate: float, why: str) -> StatResult:
    return StatResult(test, n, estimate, (NAN, NAN), NAN, note=why)


def _constant(x: np.ndarray) -> bool:
    return x.size > 0 and float(np.ptp(x)) == 0.0


# ---------------------------------------------------------------- across seeds


def _two_arms(test: str, a, b):
    """Both arms' seed vectors, their sizes and mean difference, and a NaN result when the
    test cannot run (fewer than 2 seeds in an arm, or no variance in either), else None."""
    a, b = _vector(a, "a"), _vector(b, "b")
    n, estimate = (a.size, b.size), _mean(a) - _mean(b)
    if a.size < 2 or b.size < 2:
        return a, b, n, estimate, _too_few(test, n, estimate, "needs at least 2 seeds per arm")
    if _constant(a) and _constant(b):
        return a, b, n, estimate, _too_few(test, n, estimate, "both arms have zero variance across seeds")
    return a, b, n, estimate, None


def welch(a, b, alpha: float = 0.05) -> StatResult:
    """Welch's t-test of mean(a) - mean(b) over seeds, with its (1 - alpha) CI."""
    a, b, n, estimate, too_few = _two_arms("Welch t-test", a, b)
    if too_few:
        return too_few
    # statsmodels, not scipy.stats.ttest_ind: the same statistic, but scipy warns of "catastrophic
    # cancellation" when one arm's seeds are equal (e.g. every seed at the majority class), a case
    # the test handles (the other arm's variance carries it).
    means = CompareMeans(DescrStatsW(a), DescrStatsW(b))
    statistic, p_value, df = means.ttest_ind(usevar="unequal")
    low, high = means.tconfint_diff(alpha=alpha, usevar="unequal")
    return StatResult(
        "Welch t-test",
        n,
        estimate,
        (float(low), float(high)),
        float(p_value),
        details={"statistic": float(statistic), "df": float(df)},
    )


def _bootstrap_rng_kwargs(seed: int) -> dict:
    """scipy >= 1.15 names the generator ``rng``; older versions ``random_state``."""
    params = inspect.signature(sps.bootstrap).parameters
    generator = np.random.default_rng(seed)
    return {"rng": generator} if "rng" in params else {"random_state": generator}


def bootstrap_seeds(a, b, confidence: float = 0.95, n_resamples: int = 9999, seed: int = 0) -> StatResult:
    """Percentile bootstrap CI of mean(a) - mean(b), resampling seeds within each arm."""
    a, b = _vector(a, "a"), _vector(b, "b")
    n, estimate = (a.size, b.size), _mean(a) - _mean(b)
    if a.size < 2 or b.size < 2:
        return _too_few("bootstrap (seeds)", n, estimate, "needs at least 2 seeds per arm")

    def difference(x, y, axis=-1):
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    result = sps.bootstrap(
        (a, b),
        difference,
        n_resamples=n_resamples,
        vectorized=True,
        paired=False,
        confidence_level=confidence,
        method="percentile",
        **_bootstrap_rng_kwargs(seed),
    )
    ci = (float(result.confidence_interval.low), float(result.confidence_interval.high))
    return StatResult("bootstrap (seeds)", n, estimate, ci, NAN, details={"resamples": n_resamples, "seed": seed})


def _correctness(matrix, name: str) -> np.ndarray:
    array = np.asarray(matrix, dtype=np.float64)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] == 0:
        raise ValueError(f"{name}: expected a [seeds, examples] 0/1 matrix, got shape {array.shape}")
    if not np.all((array == 0) | (array == 1)):
        raise ValueError(f"{name}: entries must be 0 (wrong) or 1 (correct)")
    return array


def bootstrap_hierarchical(
    correct_a, correct_b, confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0, progress: bool = False
) -> StatResult:
    """Percentile bootstrap CI of the accuracy difference A - B from per-example correctness.

    ``correct_a``: [seeds_A, examples] of 0/1, ``correct_b``: [seeds_B, examples], the same
    test examples in the same order. Each resample draws seeds with replacement within each
    arm and test examples with replacement, the same examples for both arms.
    """
    ca, cb = _correctness(correct_a, "correct_a"), _correctness(correct_b, "correct_b")
    if ca.shape[1] != cb.shape[1]:
        raise ValueError(f"the two arms were scored on different test sets: {ca.shape[1]} vs {cb.shape[1]} examples")
    n_examples = ca.shape[1]
    estimate = float(ca.mean() - cb.mean())
    rng = np.random.default_rng(seed)
    draws = np.empty(n_resamples)
    for i in tqdm(range(n_resamples), desc="bootstrap", disable=not progress, leave=False):
        # Example weights (multinomial counts) shared by both arms; seeds drawn per arm.
        weights = rng.multinomial(n_examples, np.full(n_examples, 1.0 / n_examples)) / n_examples
        seeds_a = rng.integers(0, ca.shape[0], ca.shape[0])
        seeds_b = rng.integers(0, cb.shape[0], cb.shape[0])
        draws[i] = float((ca[seeds_a] @ weights).mean() - (cb[seeds_b] @ weights).mean())
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(draws, [tail, 1.0 - tail])
    return StatResult(
        "bootstrap (seeds x examples)",
        (ca.shape[0], cb.shape[0], n_examples),
        estimate,
        (float(low), float(high)),
        NAN,
        details={"resamples": n_resamples, "seed": seed},
    )


# ---------------------------------------------------------------- paired predictions


def mcnemar_table(correct_a, correct_b) -> np.ndarray:
    """The 2x2 table [[both right, only A right], [only B right, both wrong]] of two runs."""
    a = np.asarray(correct_a, dtype=bool).ravel()
    b = np.asarray(correct_b, dtype=bool).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired predictions must cover the same examples: {a.size} vs {b.size}")
    return np.array([[np.sum(a & b), np.sum(a & ~b)], [np.sum(~a & b), np.sum(~a & ~b)]], dtype=np.int64)


def mcnemar(correct_a, correct_b, alpha: float = 0.05) -> StatResult:
    """Exact (binomial) McNemar test of two runs' per-example correctness on one test set."""
    table = mcnemar_table(correct_a, correct_b)
    n = int(table.sum())
    only_a, only_b = int(table[0, 1]), int(table[1, 0])
    estimate = (only_a - only_b) / n if n else NAN
    if n == 0:
        return _too_few("McNemar exact", (0,), NAN, "no examples")
    z = sps.norm.ppf(1 - alpha / 2)
    se = math.sqrt(max(only_a + only_b - (only_a - only_b) ** 2 / n, 0.0)) / n
    result = _sm_mcnemar(table, exact=True)
    return StatResult(
        "McNemar exact",
        (n,),
        estimate,
        (estimate - z * se, estimate + z * se),
        float(result.pvalue),
        details={"only_a": only_a, "only_b": only_b},
    )


# ---------------------------------------------------------------- families


def holm(p_values, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm-adjusted p-values and rejections; NaN entries stay NaN / False and are not counted."""
    p = np.asarray(p_values, dtype=np.float64).ravel()
    adjusted = np.full(p.shape, NAN)
    reject = np.zeros(p.shape, dtype=bool)
    present = ~np.isnan(p)
    if present.any():
        rej, adj, _, _ = multipletests(p[present], alpha=alpha, method="holm")
        adjusted[present], reject[present] = adj, rej
    return adjusted, reject


# ---------------------------------------------------------------- equivalence and published numbers


def tost_ind(a, b, margin: float, alpha: float = 0.05) -> StatResult:
    """TOST equivalence of two arms: H0 |mu_A - mu_B| >= margin; small p means "as good as"."""
    if not margin > 0:
        raise ValueError(f"margin must be positive, got {margin}")
    a, b, n, estimate, too_few = _two_arms("TOST (two arms)", a, b)
    if too_few:
        return too_few
    p, _, _ = ttost_ind(a, b, -margin, margin, usevar="unequal")
    low, high = CompareMeans(DescrStatsW(a), DescrStatsW(b)).tconfint_diff(alpha=2 * alpha, usevar="unequal")
    return StatResult("TOST (two arms)", n, estimate, (float(low), float(high)), float(p), details={"margin": margin})


def _one_arm(test: str, a, reference: float):
    """Our seed vector, its size and difference from ``reference``, and a NaN result when
    the test cannot run (fewer than 2 seeds, or no variance), else None."""
    a = _vector(a, "a")
    n, estimate = (a.size,), _mean(a) - reference
    if a.size < 2:
        return a, n, estimate, _too_few(test, n, estimate, "needs at least 2 seeds")
    if _constant(a):
        return a, n, estimate, _too_few(test, n, estimate, "zero variance across seeds")
    return a, n, estimate, None


def tost_published(a, reference: float, margin: float, alpha: float = 0.05) -> StatResult:
    """One-sample TOST of our seeds against a published number: H0 |mu - reference| >= margin."""
    if not margin > 0:
        raise ValueError(f"margin must be positive, got {margin}")
    a, n, estimate, too_few = _one_arm("TOST (vs published)", a, reference)
    if too_few:
        return too_few
    described = DescrStatsW(a)
    p, _, _ = described.ttost_mean(reference - margin, reference + margin)
    low, high = described.tconfint_mean(alpha=2 * alpha)
    return StatResult(
        "TOST (vs published)",
        n,
        estimate,
        (float(low) - reference, float(high) - reference),
        float(p),
        details={"margin": margin, "reference": reference},
    )


def one_sample(a, reference: float, alpha: float = 0.05) -> StatResult:
    """Two-sided one-sample t-test of our seeds' mean against a published number."""
    a, n, estimate, too_few = _one_arm("one-sample t-test", a, reference)
    if too_few:
        return too_few
    result = sps.ttest_1samp(a, reference)
    low, high = DescrStatsW(a).tconfint_mean(alpha=alpha)
    return StatResult(
        "one-sample t-test",
        n,
        estimate,
        (float(low) - reference, float(high) - reference),
        float(result.pvalue),
        details={"reference": reference},
    )


# ---------------------------------------------------------------- exact permutation over seeds


def permutation(a, b, alpha: float = 0.05) -> StatResult:
    """Exact two-sided permutation test of mean(a) - mean(b) over all splits of the pooled seeds."""
    a, b, n, estimate, too_few = _two_arms("exact permutation", a, b)
    if too_few:
        return too_few
    splits = math.comb(a.size + b.size, a.size)
    smallest = min(1.0, 2.0 / splits)  # scipy: twice the smaller one-sided p, whose least value is 1 / splits

    def difference(x, y, axis=-1):
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    result = sps.permutation_test(
        (a, b), difference, permutation_type="independent", vectorized=True, n_resamples=np.inf, alternative="two-sided"
    )
    note = (
        ""
        if smallest <= alpha
        else (f"cannot reach p < {alpha:g}: {a.size} + {b.size} seeds give {splits} splits, smallest p {smallest:.3f}")
    )
    return StatResult(
        "exact permutation",
        n,
        estimate,
        (NAN, NAN),
        float(result.pvalue),
        note=note,
        details={"splits": splits, "smallest_p": smallest},
    )
