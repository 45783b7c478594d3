"""Verdict rules: what one claim's primary test says about the paper's claim, and which rule said it.

Each claim (paper/claims.yaml) names a published effect E (arm A minus arm B, or arm A minus a
published number), its direction (``greater``: E > 0 is claimed, ``less``: E < 0, ``none``: only
its size), and a margin m. Our primary test gives the seed-mean difference with its (1 - alpha)
Welch interval CI and its (1 - 2 alpha) interval CI2 (the interval of TOST at level alpha).
The rules run in this order; the first that applies gives the verdict:

R1 ``not tested``: an arm has fewer than two seeds (no interval); for an average over tasks, seeds
   with every task, and the rule names the tasks an arm has no record of.
R2 ``not tested``: an arm's runs got less than half of the protocol's training examples (the mean
   over its seeds of examples trained / the protocol's, ``repro.run.protocol``), or the share
   is unknown.
R3 ``not tested``: every arm's seed mean lies inside the task's trivial baseline's 95% interval
   (``repro.analysis.baselines``): the runs have not left the baseline, so they test no architecture.
R4 ``matches``: CI2 lies inside [E - m, E + m] (TOST: our effect equals the published one within
   the margin).
R5 ``contradicted``: CI excludes E, or lies wholly on the side of zero opposite to the claimed
   direction.
R6 ``supported``: the claim has a direction and CI lies wholly on its side of zero (and holds E,
   since R5 did not apply).
R7 ``inconclusive``: otherwise (CI holds E, and zero or the claim has no direction).

``decide(evidence, share_rule=False)`` skips R2: what the same numbers say at the budget the runs
had, which the tables print beside the verdict, never instead of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DIRECTIONS = ("greater", "less", "none")
SHARE_NEEDED = 0.5


@dataclass(frozen=True)
class Evidence:
    """What the rules read: the published effect and our primary test, per-arm facts."""

    published: float
    direction: str
    margin: float
    estimate: float
    ci: tuple[float, float]  # (1 - alpha)
    ci_equivalence: tuple[float, float]  # (1 - 2 alpha), TOST's
    seeds: dict[str, int] = field(default_factory=dict)  # arm -> seeds
    shares: dict[str, float] = field(default_factory=dict)  # arm -> share of the protocol's examples (NaN: unknown)
    means: dict[str, float] = field(default_factory=dict)  # arm -> seed mean (accuracy points)
    baseline: tuple[float, float] | None = None  # the task's trivial baseline's 95% interval, or None
    alpha: float = 0.05  # CI is the (1 - alpha) interval, ci_equivalence the (1 - 2 alpha) one
    missing: dict = field(default_factory=dict)  # arm -> the average's tasks it has no record of (R1 names them)
    effect_name: str = "published"  # "expected": a claim of your own, whose effect is typed, not published

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction {self.direction!r}: use one of {', '.join(DIRECTIONS)}")
        if not self.margin > 0:
            raise ValueError(f"margin must be positive, got {self.margin}")


@dataclass(frozen=True)
class Verdict:
    word: str  # supported | contradicted | matches | not tested | inconclusive
    rule: str  # "R5: ..." -- which rule applied, with the numbers it read


def _fmt(x: float) -> str:
    return f"{x:+.2f}"


def _interval(ci: tuple[float, float]) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def _not_tested(e: Evidence, share_rule: bool) -> Verdict | None:
    few = sorted(arm for arm, n in e.seeds.items() if n < 2)
    if few or not all(math.isfinite(x) for x in e.ci):
        per_arm = "; ".join(f"{arm} on {', '.join(tasks)}" for arm, tasks in sorted(e.missing.items()))
        absent = f" with every task of the average (no records of {per_arm})" if e.missing else ""
        return Verdict("not tested", f"R1: fewer than 2 seeds of {', '.join(few) or 'an arm'}{absent}")
    if share_rule:
        short = {arm: s for arm, s in sorted(e.shares.items()) if not (math.isfinite(s) and s >= SHARE_NEEDED)}
        if short:
            said = ", ".join(
                f"{arm} {100 * s:.1f}%" if math.isfinite(s) else f"{arm} unknown" for arm, s in short.items()
            )
            return Verdict("not tested", f"R2: below {SHARE_NEEDED:.0%} of the protocol's training examples ({said})")
    if e.baseline is not None and e.means:
        low, high = e.baseline
        if all(low <= m <= high for m in e.means.values()):
            return Verdict("not tested", f"R3: every arm's mean inside the trivial baseline's {_interval(e.baseline)}")
    return None


def decide(e: Evidence, share_rule: bool = True) -> Verdict:
    """The first rule of R1-R7 (module docstring) that applies to ``e``."""
    untested = _not_tested(e, share_rule)
    if untested:
        return untested
    low, high = e.ci
    low2, high2 = e.ci_equivalence
    if e.published - e.margin < low2 and high2 < e.published + e.margin:
        return Verdict(
            "matches",
            f"R4: {100 * (1 - 2 * e.alpha):g}% interval {_interval(e.ci_equivalence)} inside "
            f"{_fmt(e.published)} ± {e.margin:g}",
        )
    sign = {"greater": 1, "less": -1, "none": 0}[e.direction]
    if sign and (high < 0 if sign > 0 else low > 0):
        return Verdict("contradicted", f"R5: interval {_interval(e.ci)} on the side of zero opposite to the claim")
    if not low <= e.published <= high:
        return Verdict(
            "contradicted", f"R5: interval {_interval(e.ci)} excludes the {e.effect_name} {_fmt(e.published)}"
        )
    if sign and (low > 0 if sign > 0 else high < 0):
        return Verdict(
            "supported", f"R6: interval {_interval(e.ci)} on the claimed side of zero, holds {_fmt(e.published)}"
        )
    why = "holds zero" if low <= 0 <= high else "claim has no direction"
    return Verdict("inconclusive", f"R7: interval {_interval(e.ci)} holds {_fmt(e.published)}; {why}")
