"""Whether two seeds can decide each follow-up claim: the power table (``followup_power``).

Neither paper reports seeds or a spread, so each claim's seed sd is read from three-seed records of
the nearest arm of an earlier bundle (the LRA campaign's, ``--study``): the LRA Transformer
(``lra_transformer``) for the Transformer arms and MEGA (attention models), local attention
(``lra_local``, a bounded window) for the bounded convolutions (``locality_k*``), an arm's own
records for an ``lra_*`` arm, and for arms with no near LRA arm (gMLP, S4, S5) the sd pooled over
every arm of the task (also where the nearest arm's seeds all scored the same, sd 0, as a
trivial predictor does). A comparison's sd is pooled over its two sides' cells (one cell counted once);
an average over tasks takes each seed's mean over them. The goal a claim's verdict needs decides:
a directional claim must detect the published effect (``detect``), a claim without a direction
must show ours within its margin of it (``match``, TOST); two seeds are enough when the seeds that
goal needs (``repro.stats.seeds_needed``, the claims file's alpha and power) are at most two, and
otherwise the claim takes a third seed (the campaign's rule), or as many as the table says.
"""

from __future__ import annotations

import math

import numpy as np

from .. import stats
from ..stats.power import detect_power
from .claims import AVERAGE_TASKS, ClaimsFile, Comparison
from .names import task_title
from .render import MISSING, Table, fmt_number
from .view import BundleView

FOLLOWUP = "the follow-up study"
TWO = 2  # the seeds per arm the campaign runs first
ATTENTION_ARMS = ("rotary_transformer", "rotary_transformer_notech", "sinusoidal_pe", "learned_pe", "mega")


def nearest_arm(arm: str) -> str | None:
    """The LRA campaign's arm whose seed sd stands for ``arm``'s (module docstring); None: pool every arm."""
    name = arm.partition("+")[0]
    if name.startswith("lra_"):
        return name
    if name.startswith("locality_k"):
        return "lra_local"
    return "lra_transformer" if name in ATTENTION_ARMS else None


def _seed_values(study: BundleView, arm: str, tasks: tuple[str, ...]) -> list[float]:
    """``arm``'s test accuracy per seed on one task, or each seed's mean over ``tasks`` (seeds with all of them)."""
    frames = [study.seeds(arm, t) for t in tasks]
    common = sorted(set.intersection(*(set(f["seed"]) for f in frames)))
    return [float(np.mean([f.loc[f["seed"] == s, "test_acc"].iloc[0] for f in frames])) for s in common]


def comparison_sd(study: BundleView, comparison: Comparison) -> tuple[float, int, str]:
    """(seed sd, its degrees of freedom, where it comes from) of ``comparison``'s sides in ``study``."""
    tasks = (comparison.task,) if comparison.task else comparison.tasks
    sides = [comparison.a.arm] + ([comparison.b.arm] if comparison.b.arm else [])
    nearest = list(dict.fromkeys(nearest_arm(arm) for arm in sides))
    cells, named = [], []
    for lra in nearest:
        if lra is not None:
            cells.append(_seed_values(study, lra, tasks))
            named.append(lra)
        else:
            arms = sorted(set(study.runs["arm"]))
            cells += [_seed_values(study, arm, tasks) for arm in arms]
            named.append("every arm pooled")
    sd, dof = stats.pooled_sd(cells)
    if sd == 0:  # the near arm's seeds all scored the same (a trivial predictor's): no spread to stand in
        cells = [_seed_values(study, arm, tasks) for arm in sorted(set(study.runs["arm"]))]
        sd, dof = stats.pooled_sd(cells)
        named = [f"every arm pooled ({' and '.join(named)}: sd 0)"]
    where = "average of " + ", ".join(task_title(t) for t in tasks) if len(tasks) > 1 else task_title(tasks[0])
    return sd, dof, f"{' and '.join(named)}, {where} ({', '.join(study.versions)}; {dof} dof)"


def _where(comparison: Comparison) -> str:
    if comparison.task:
        return task_title(comparison.task)
    if comparison.tasks == AVERAGE_TASKS:
        return "5-task average"
    return "average of " + ", ".join(task_title(t) for t in comparison.tasks)


def power_rows(spec: ClaimsFile, study: BundleView) -> list[dict]:
    """One row per follow-up claim of ``spec``: its published effect, seed sd and source, the goal its verdict
    needs, the power of two seeds to detect the effect, the seeds the goal needs, and whether a third is due."""
    rows = []
    for claim in spec.claims:
        if claim.paper != FOLLOWUP:
            continue
        c = claim.primary
        effect, two_arms = c.published_effect(), c.b.arm is not None
        sd, dof, source = comparison_sd(study, c)
        goal = "detect" if c.direction != "none" else "match"
        needed = None
        if effect is not None and math.isfinite(sd):
            needed = stats.seeds_needed(
                effect, sd, goal=goal, alpha=spec.alpha, power=spec.power, margin=claim.margin, two_arms=two_arms
            )
        power = detect_power(effect, sd, TWO, alpha=spec.alpha, two_arms=two_arms) if effect is not None else math.nan
        if not math.isfinite(sd):
            enough = "unknown (no sd)"
        elif needed is not None and needed <= TWO:
            enough = "yes"
        else:
            enough = "no"
        rows.append(
            {
                "claim": claim,
                "effect": effect,
                "sd": sd,
                "source": source,
                "goal": goal,
                "power2": power,
                "needed": needed,
                "enough": enough,
                "third": "no" if enough == "yes" else ("yes" if enough == "no" else MISSING),
            }
        )
    return rows


def power_table(spec: ClaimsFile, study: BundleView) -> Table:
    """``followup_power``: for each follow-up claim, whether two seeds can decide it (module docstring)."""
    rows = []
    for r in power_rows(spec, study):
        c = r["claim"].primary
        needed = MISSING if r["needed"] is None else str(r["needed"])
        if r["enough"] == "no" and r["needed"] is not None and r["needed"] > TWO + 1:
            third = f"yes, and {r['needed']} seeds in all"
        else:
            third = r["third"]
        rows.append(
            [
                r["claim"].id,
                _where(c),
                f"{c.a.arm} − {c.b.arm or c.b.label}",
                fmt_number(r["effect"]),
                f"±{r['claim'].margin:g}",
                fmt_number(r["sd"]),
                r["source"],
                r["goal"],
                fmt_number(r["power2"]) if r["goal"] == "detect" else "(goal: match)",
                needed,
                r["enough"],
                third,
            ]
        )
    notes = [
        f"Seed sd: the sample sd of three-seed records in {', '.join(study.versions)} (the follow-up study reports "
        "one run per cell, no sd): lra_transformer's for the Transformer arms and MEGA, lra_local's for the bounded "
        "convolutions, every arm of the task pooled for gMLP, S4 and S5 and where the nearest arm's seeds all scored "
        "the same (repro/paper/claims_power.py).",
        f"Goal: detect (a directional claim: the published Δ, two-sided, level {spec.alpha:g}) or match (no "
        "direction: TOST within ± margin when our Δ equals the published). Power, 2 seeds: of two seeds per arm to "
        f"detect the published Δ (a detect goal's). Seeds needed: per arm for power {spec.power:g} at the goal. "
        "Two seeds enough: the seeds needed are at most 2; otherwise a third seed (or the seeds needed) is due "
        "before the verdict.",
    ]
    return Table(
        "followup_power",
        "Follow-up claims: can two seeds decide them? (seed sd from the LRA campaign's three-seed records)",
        [
            "Claim",
            "Task",
            "A − B",
            "Published Δ",
            "Margin",
            "Seed sd",
            "Sd from",
            "Goal",
            "Power, 2 seeds",
            "Seeds needed",
            "Two seeds enough",
            "Third seed",
        ],
        rows,
        [5, 8, 9],
        notes,
    )
