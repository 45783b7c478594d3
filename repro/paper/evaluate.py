"""Each claim's primary test on a bundle, its verdict, and the seeds it would need (paper/claims.yaml).

Primary: the difference of seed means, a - b, with Welch's (1 - alpha) t interval (``stats.welch``)
and the (1 - 2 alpha) interval for "matches" (``stats.tost_ind``); against a published number, the
one-sample t intervals (``stats.one_sample``, ``stats.tost_published``). The LRA average is, per
seed, the mean of that seed's task accuracies over the five tasks, or the claim's ``tasks`` (seeds
that ran all of them). The verdict:
``stats.decide`` (rules R1-R7). Secondary, never a verdict: the exact permutation test over seeds
and the CMH test over seed pairs of per-example correctness (``stats.cmh_seed_pairs``).

Seeds needed: ``stats.seeds_needed`` at the claim's published effect and margin, from the seed sd
pooled per task over the bundle's cells (all tasks pooled where a task has none; for an average over
n tasks, sqrt(sum of their variances) / n, tasks taken as independent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .. import stats
from ..analysis.baselines import Baseline
from .claims import AVERAGE_TASKS, Claim, ClaimsFile, Comparison
from .view import BundleView


@dataclass(frozen=True)
class ArmData:
    """One arm's per-seed values on a task (or an average over tasks) and what the rules need."""

    label: str
    seeds: tuple[int, ...]
    values: np.ndarray
    share: float  # mean over seeds of the share of the protocol's examples (average: the least task's)
    share_note: str
    correct: np.ndarray | None  # [seeds, examples] 0/1 (single task only)
    labels: np.ndarray | None
    missing: tuple[str, ...] = ()  # the average's tasks of which the arm has no record

    @property
    def mean(self) -> float:
        return float(self.values.mean()) if self.values.size else math.nan


@dataclass(frozen=True)
class Result:
    """One comparison evaluated: the published effect, both sides, the primary test and the secondary ones."""

    comparison: Comparison
    published: float | None
    a: ArmData
    b: ArmData | None  # None: b is a published number
    reference: float | None  # b's published value when b has no arm
    primary: stats.StatResult
    equivalence_ci: tuple[float, float]
    permutation: stats.StatResult | None
    cmh: stats.StatResult | None


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    result: Result
    verdict: stats.Verdict
    budget_reading: stats.Verdict  # the rules without R2 (the share of the protocol)
    baseline: Baseline | None
    sd: float
    sd_source: str
    seeds_detect: int | None
    seeds_match: int | None
    secondary: tuple[Result, ...]
    # the verdict with a near-tie label in a baseline majority's place: (what changed, verdict), one per tie
    sensitivity: tuple[tuple[str, stats.Verdict], ...] = ()


def _task_data(view: BundleView, arm: str, task: str, label: str) -> ArmData:
    seeds = view.seeds(arm, task)
    shares = seeds["share"].to_numpy(dtype=float)
    notes = [n for n in seeds["share_note"] if n]
    found = view.correctness(seeds) if len(seeds) else None
    return ArmData(
        label,
        tuple(int(s) for s in seeds["seed"]),
        seeds["test_acc"].to_numpy(dtype=float),
        float(shares.mean()) if shares.size else math.nan,
        notes[0] if notes else "",
        found[0] if found else None,
        found[1] if found else None,
    )


def _average_data(view: BundleView, arm: str, label: str, tasks: tuple[str, ...] = AVERAGE_TASKS) -> ArmData:
    per_task = {t: view.seeds(arm, t) for t in tasks}
    common = sorted(set.intersection(*(set(frame["seed"]) for frame in per_task.values())))
    values = [np.mean([float(f.loc[f["seed"] == s, "test_acc"].iloc[0]) for f in per_task.values()]) for s in common]
    shares = [float(f["share"].mean()) if len(f) else math.nan for f in per_task.values()]
    notes = [n for f in per_task.values() for n in f["share_note"] if n]
    return ArmData(
        label,
        tuple(common),
        np.asarray(values, dtype=float),
        min(shares) if common else math.nan,  # no seed with every task: no share (min would skip a NaN)
        notes[0] if notes else "",
        None,
        None,
        tuple(t for t, frame in per_task.items() if not len(frame)),
    )


def arm_data(view: BundleView, arm: str, task: str | None, tasks: tuple[str, ...] = AVERAGE_TASKS) -> ArmData:
    """``arm``'s per-seed values on ``task`` (None: the average over ``tasks``)."""
    return _task_data(view, arm, task, arm) if task else _average_data(view, arm, arm, tasks)


def compare(view: BundleView, comparison: Comparison, alpha: float, margin: float) -> Result:
    """The primary test of ``comparison`` (and its secondary tests) on the bundle shown."""
    a = arm_data(view, comparison.a.arm, comparison.task, comparison.tasks)
    b = arm_data(view, comparison.b.arm, comparison.task, comparison.tasks) if comparison.b.arm else None
    if b is None:
        reference = comparison.published_of(comparison.b)
        primary = stats.one_sample(a.values, reference, alpha=alpha)
        equivalence = stats.tost_published(a.values, reference, margin=margin, alpha=alpha).ci
        return Result(comparison, comparison.claimed_effect(), a, None, reference, primary, equivalence, None, None)
    primary = stats.welch(a.values, b.values, alpha=alpha)
    equivalence = stats.tost_ind(a.values, b.values, margin=margin, alpha=alpha).ci
    permutation = stats.permutation(a.values, b.values, alpha=alpha)
    cmh = None
    both = pd.concat([view.seeds(comparison.a.arm, comparison.task), view.seeds(comparison.b.arm, comparison.task)])
    same_test_set = comparison.task is not None and len(view.test_sets(both)) <= 1  # the digests, where recorded
    if a.correct is not None and b.correct is not None and same_test_set and np.array_equal(a.labels, b.labels):
        cmh = stats.cmh_seed_pairs(a.correct, b.correct)
    return Result(comparison, comparison.claimed_effect(), a, b, None, primary, equivalence, permutation, cmh)


def pooled_sds(view: BundleView) -> tuple[dict[str, float], float]:
    """(seed sd pooled per task, pooled over every task) over the cells of the profile shown."""
    groups = view.runs.groupby(["arm", "techniques", "task"])["test_acc"]
    cells = {key: values.to_numpy() for key, values in groups}
    per_task = {}
    for task in sorted({key[2] for key in cells}):
        sd, dof = stats.pooled_sd([v for key, v in cells.items() if key[2] == task])
        if dof:
            per_task[task] = sd
    return per_task, stats.pooled_sd(list(cells.values()))[0]


def claim_sd(comparison: Comparison, per_task: dict[str, float], overall: float) -> tuple[float, str]:
    """The seed sd a claim's power is computed from, and where it comes from."""

    def one(task: str) -> tuple[float, bool]:
        return (per_task[task], True) if task in per_task else (overall, False)

    if comparison.task is not None:
        sd, own = one(comparison.task)
        return sd, f"{comparison.task} cells" if own else "all cells (none on this task)"
    parts = [one(t) for t in comparison.tasks]
    sd = math.sqrt(sum(s**2 for s, _ in parts)) / len(parts)
    own = sum(1 for _, o in parts if o)
    return sd, f"{len(parts)} tasks' cells ({own} of {len(parts)} measured, the rest: all cells)"


def _evidence(result: Result, claim: Claim, baseline: Baseline | None, alpha: float) -> stats.Evidence:
    sides = [result.a] + ([result.b] if result.b is not None else [])
    return stats.Evidence(
        published=result.published,
        direction=claim.primary.direction,
        margin=claim.margin,
        estimate=result.primary.estimate,
        ci=result.primary.ci,
        ci_equivalence=result.equivalence_ci,
        seeds={s.label: len(s.seeds) for s in sides},
        shares={s.label: s.share for s in sides},
        means={s.label: s.mean for s in sides},
        baseline=baseline.interval if baseline else None,
        alpha=alpha,
        missing={s.label: s.missing for s in sides if s.missing},
        effect_name="published" if claim.primary.expected is None else "expected",
    )


def evaluate(view: BundleView, spec: ClaimsFile) -> list[ClaimResult]:
    """Every claim of ``spec`` on the bundle shown, in the file's order."""
    per_task, overall = pooled_sds(view)
    out = []
    for claim in spec.claims:
        primary = claim.primary
        result = compare(view, primary, spec.alpha, claim.margin)
        baseline = view.strongest_baseline(primary.task) if primary.task else None
        evidence = _evidence(result, claim, baseline, spec.alpha)
        sd, source = claim_sd(primary, per_task, overall)
        two_arms = primary.b.arm is not None
        detect = stats.seeds_needed(
            result.published, sd, goal="detect", alpha=spec.alpha, power=spec.power, two_arms=two_arms
        )
        match = stats.seeds_needed(
            result.published,
            sd,
            goal="match",
            alpha=spec.alpha,
            power=spec.power,
            margin=claim.margin,
            two_arms=two_arms,
        )
        secondary = tuple(compare(view, s, spec.alpha, claim.margin) for s in claim.secondary)
        variants = view.baseline_variants.get(primary.task, []) if baseline is not None else []
        sensitivity = tuple(
            (what, stats.decide(replace(evidence, baseline=changed.interval))) for what, changed in variants
        )
        out.append(
            ClaimResult(
                claim,
                result,
                stats.decide(evidence),
                stats.decide(evidence, share_rule=False),
                baseline,
                sd,
                source,
                detect,
                match,
                secondary,
                sensitivity,
            )
        )
    return out


def shares_frame(view: BundleView) -> pd.DataFrame:
    """Per cell (arm, techniques, task) of the profile shown: seeds, data, budget, examples and share."""
    rows = []
    for (arm, techniques, task), cell in view.runs.groupby(["arm", "techniques", "task"], sort=True):
        rows.append(
            {
                "arm": arm,
                "techniques": techniques,
                "task": task,
                "seeds": len(cell),
                "data": "; ".join(sorted(set(cell["data"]))),
                "budget": "; ".join(sorted(set(cell["budget"]))),
                "examples": float(pd.to_numeric(cell["examples"]).mean()),
                "share": float(cell["share"].mean()),
                "epochs": float(cell["epochs"].mean()),
                "note": next((n for n in cell["share_note"] if n), ""),
            }
        )
    return pd.DataFrame(
        rows, columns=["arm", "techniques", "task", "seeds", "data", "budget", "examples", "share", "epochs", "note"]
    )
