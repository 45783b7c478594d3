"""How many seeds a claim needs: the seed sd pooled over a bundle's cells and statsmodels' power tools.

``pooled_sd``: the within-cell sd pooled over cells (an arm on a task, one value per seed),
sqrt(sum (n_i - 1) s_i^2 / sum (n_i - 1)) over the cells with at least two seeds: the usual
pooled estimate of a common sd, each cell's mean removed.

``seeds_needed``: the smallest number of seeds per arm that reaches the target power, found
by an integer search on ``statsmodels.stats.power.TTestIndPower.power`` (two arms) or
``TTestPower.power`` (one arm against a published number), with the effect in sd units.

* ``detect``: a two-sided test at level alpha of "no difference" when the true difference is
  the published effect. Its power is taken as the one-sided power at alpha / 2 in the effect's
  direction: the opposite tail adds less than alpha / 2, and dropping it avoids the noncentral t's
  lower-tail underflow (NaN) at large effects.
* ``match``: TOST equivalence within +/- margin of the published effect when the truth equals
  it; power >= 2 P - 1 with P the one-sided power at alpha for an effect of one margin (each of
  TOST's two one-sided tests must reject).
"""

from __future__ import annotations

import math

import numpy as np
from statsmodels.stats.power import TTestIndPower, TTestPower

MAX_SEEDS = 10_000


def pooled_sd(cells) -> tuple[float, int]:
    """(pooled sd, its degrees of freedom) over ``cells``, each a sequence of per-seed values (NaN, 0: none has 2)."""
    numerator, dof = 0.0, 0
    for values in cells:
        values = np.asarray(values, dtype=np.float64)
        if values.size >= 2:
            numerator += (values.size - 1) * float(values.var(ddof=1))
            dof += values.size - 1
    return (math.sqrt(numerator / dof), dof) if dof else (math.nan, 0)


def _power(effect_size: float, n: int, alpha: float, two_arms: bool) -> float:
    tool = TTestIndPower() if two_arms else TTestPower()
    keyword = "nobs1" if two_arms else "nobs"
    return float(tool.power(effect_size=effect_size, alpha=alpha, alternative="larger", **{keyword: n}))


def detect_power(effect: float, sd: float, n: int, *, alpha: float = 0.05, two_arms: bool = True) -> float:
    """The power of ``n`` seeds per arm to detect ``effect`` at level ``alpha`` (two-sided, as ``seeds_needed``'s
    ``detect`` reads it: the one-sided power at alpha / 2 in the effect's direction); NaN without a finite sd."""
    if not (math.isfinite(sd) and sd > 0) or effect == 0:
        return math.nan
    return _power(abs(effect) / sd, n, alpha / 2, two_arms)


def _smallest_n(reaches) -> int | None:
    """The least n in [2, MAX_SEEDS] with reaches(n), by an upward scan; None if none.

    A scan, not a bisection: at very large noncentrality scipy's noncentral t returns NaN (power
    about 1), which a bisection probing there would read as "not reached"; the scan stops first.
    """
    return next((n for n in range(2, MAX_SEEDS + 1) if reaches(n)), None)


def seeds_needed(
    effect: float,
    sd: float,
    *,
    goal: str,
    alpha: float = 0.05,
    power: float = 0.8,
    margin: float | None = None,
    two_arms: bool = True,
) -> int | None:
    """Seeds per arm for ``goal`` ``detect`` (the effect) or ``match`` (within +/- margin); None: not reachable."""
    if not (math.isfinite(sd) and sd > 0):
        return None
    if goal == "detect":
        size = abs(effect) / sd
        if size == 0:
            return None
        return _smallest_n(lambda n: _power(size, n, alpha / 2, two_arms) >= power)
    if goal == "match":
        if not (margin and margin > 0):
            raise ValueError(f"goal 'match' needs a positive margin, got {margin}")
        size = margin / sd
        return _smallest_n(lambda n: 2 * _power(size, n, alpha, two_arms) - 1 >= power)
    raise ValueError(f"goal {goal!r}: use 'detect' or 'match'")
