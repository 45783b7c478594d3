"""The claims tables: each claim's primary test and verdict, the secondary tests, the trivial
baselines and the share of the protocol each cell ran."""

from __future__ import annotations

import math

from ..analysis.baselines import Baseline
from ..stats.verdict import SHARE_NEEDED
from .claims import AVERAGE_TASKS, PAPERS
from .evaluate import ClaimResult, Result, shares_frame
from .names import task_title
from .render import MISSING, Table, fmt_ci, fmt_number, fmt_p
from .view import BundleView

RULES_NOTE = (
    "Verdict rules, the first that applies (repro/stats/verdict.py): R1 not tested: an arm has < 2 seeds. "
    f"R2 not tested: an arm ran < {SHARE_NEEDED:.0%} of the protocol's training examples (or unknown). "
    "R3 not tested: every arm's mean lies inside the task's trivial-baseline 95% interval. "
    "R4 matches: the 90% interval lies inside published ± margin. "
    "R5 contradicted: the 95% interval excludes the published effect, or lies wholly against the claimed direction. "
    "R6 supported: the 95% interval lies on the claimed side of zero (holding the published effect). "
    "R7 inconclusive: otherwise."
)


def _where(comparison) -> str:
    if comparison.task:
        return task_title(comparison.task)
    if comparison.tasks == AVERAGE_TASKS:
        return "5-task average"
    return "average of " + ", ".join(task_title(t) for t in comparison.tasks)


def _test(result: Result) -> str:
    c = result.comparison
    b = c.b.arm or c.b.label
    kind = "Welch" if result.b is not None else "one-sample t"
    sign = {"greater": " > 0", "less": " < 0", "none": ""}[c.direction]
    return f"{c.a.arm} − {b}{sign} ({kind})"


def _seeds(result: Result) -> str:
    return f"{len(result.a.seeds)}/{len(result.b.seeds)}" if result.b is not None else f"{len(result.a.seeds)}"


def _share(result: Result) -> str:
    sides = [result.a] + ([result.b] if result.b is not None else [])
    return " / ".join(f"{100 * s.share:.1f}%" if math.isfinite(s.share) else MISSING for s in sides)


def _needed(r: ClaimResult) -> str:
    def one(n):
        return str(n) if n is not None else "—"

    return f"{one(r.seeds_detect)} / {one(r.seeds_match)}"


def _short(verdict) -> str:
    return f"{verdict.word} ({verdict.rule.split(':')[0]})"


def _baseline(r: ClaimResult) -> str:
    if r.baseline is None:
        return MISSING
    low, high = r.baseline.interval
    return f"{r.baseline.name} {r.baseline.accuracy:.2f} [{low:.2f}, {high:.2f}]"


def trivial_sides(result: Result, baselines: list[Baseline]) -> str | None:
    """The trivial baseline each arm sits at, as "A: <name>, B: <name>", when each arm's seed mean lies
    inside the 95% interval of one of the task's trivial baselines (the first in ``baselines`` that holds
    it); else None. Rule R3 asks it of the strongest baseline for every arm; this also catches arms at two
    different trivial predictors (the majority class and ListOps' root operator), whose gap a verdict can
    match without either arm learning."""
    if result.b is None or not baselines:
        return None
    sides = []
    for label, side in (("A", result.a), ("B", result.b)):
        inside = [base.name for base in baselines if base.contains(side.mean)]
        if not inside:
            return None
        sides.append(f"{label}: {inside[0]}")
    return ", ".join(sides)


def _verdict(r: ClaimResult, view: BundleView) -> str:
    """The verdict's word, flagged when it compares two trivial predictors (``trivial_sides``)."""
    task = r.claim.primary.task
    sides = trivial_sides(r.result, view.baselines_of(task)) if task else None
    if sides is None or r.verdict.word == "not tested":
        return r.verdict.word
    return f"{r.verdict.word}; each arm at a trivial baseline ({sides})"


def _effect(result: Result) -> str:
    """The claimed effect: the published one, or a claim of your own's expected one, marked so."""
    mark = "" if result.comparison.expected is None else " (expected)"
    return fmt_number(result.published) + mark


def sensitivity_notes(results: list[ClaimResult]) -> list[str]:
    """One line per claim whose verdict rests on its task's trivial baseline (rule R3 fired, or a near tie
    changes the verdict) when that baseline has a near tie (a label within 1% of the majority's training count,
    repro/analysis/baselines.py): the verdict with each such label in the majority's place."""
    lines = []
    for r in results:
        rests = r.verdict.rule.startswith("R3") or any(v.word != r.verdict.word for _, v in r.sensitivity)
        if not r.sensitivity or not rests:
            continue
        readings = []
        for what, verdict in r.sensitivity:
            changed = "" if verdict.word == r.verdict.word else ", a different verdict"
            readings.append(f"{what}: {verdict.word} ({verdict.rule.split(':')[0]}{changed})")
        lines.append(
            f"Baseline sensitivity, {r.claim.id} ({r.verdict.word}, {r.verdict.rule.split(':')[0]}), with a near-tie "
            f"label in the baseline's place: " + "; ".join(readings) + "."
        )
    return lines


def claims_table(results: list[ClaimResult], view: BundleView, alpha: float, power: float) -> Table:
    rows = []
    for r in results:
        res = r.result
        rows.append(
            [
                r.claim.paper,
                r.claim.id,
                _where(r.claim.primary),
                _test(res),
                _effect(res),
                f"±{r.claim.margin:g}",
                _seeds(res),
                fmt_number(res.primary.estimate),
                fmt_ci(*res.primary.ci),
                _share(res),
                _baseline(r),
                _verdict(r, view),
                r.verdict.rule,
                _short(r.budget_reading),
                _needed(r),
            ]
        )
    notes = [
        view.profile_note(),
        "Each claim's primary test (paper/claims.yaml, fixed when the claim was registered): "
        f"Δ = mean(A) − mean(B) over seeds (accuracy points), its {100 * (1 - alpha):g}% Welch interval, "
        "or the one-sample t interval against a published number. Published Δ: the same difference in the "
        "published tables. Share: examples trained / the protocol's (the arm's paper-profile epochs × "
        "training set, or its step cap × batch), mean over seeds, A / B. Trivial baseline: the strongest on "
        "the task's test set, with its 95% Wilson interval. A verdict other than 'not tested' whose arms' "
        "means each lie inside some trivial baseline's interval says so and names the baselines: it compares "
        "trivial predictors."
        + (
            " Marked (expected): a claim of your own (paper: ours), whose Δ is the effect its claims file expects."
            if any(r.result.comparison.expected is not None for r in results)
            else ""
        ),
        RULES_NOTE,
        "Without R2: the same rules with R2 left out: what the numbers say at the budget the runs had, "
        "never a verdict on the paper.",
        f"Seeds/arm (detect / match): seeds per arm for power {power:g} at level {alpha:g} to detect the "
        "published Δ (two-sided), and for TOST to show our Δ within ± margin of it when it equals it; from "
        "the seed sd pooled over the bundle's cells (see statistics_secondary).",
        "Secondary tests (statistics_secondary) give no verdict.",
        *sensitivity_notes(results),
    ]
    papers = {r.claim.paper for r in results}
    whose = "Claims of both papers" if papers <= set(PAPERS) else "Claims"
    return Table(
        "statistics_claims",
        f"{whose}: the primary test, its interval and the verdict rule",
        [
            "Paper",
            "Claim",
            "Task",
            "Primary test (A − B)",
            "Published Δ",
            "Margin",
            "Seeds",
            "Δ ours",
            f"{100 * (1 - alpha):g}% CI",
            "Share of protocol",
            "Trivial baseline",
            "Verdict",
            "Rule",
            "Without R2",
            "Seeds/arm needed",
        ],
        rows,
        [6, 7, 8, 9, 10],
        notes,
    )


def _secondary_rows(claim_id: str, kind: str, result: Result) -> list[list[str]]:
    """One row per test of the pair: the secondary comparison's own Welch (or one-sample t), the exact
    permutation and the per-example CMH."""
    c, where = result.comparison, _where(result.comparison)
    lead = [claim_id, kind, where, c.a.arm, c.b.arm or c.b.label, _seeds(result), _effect(result)]
    tests = []
    if kind == "secondary":
        p = result.primary
        tests.append([p.test, fmt_number(p.estimate), fmt_ci(*p.ci), fmt_p(p.p_value), p.note])
    ran = not (kind == "secondary" and result.primary.note)  # a secondary that did not run: its one row says so
    if result.permutation is not None and ran:
        perm = result.permutation
        tests.append([perm.test, fmt_number(perm.estimate), MISSING, fmt_p(perm.p_value), perm.note])
    if result.cmh is not None:
        cmh = result.cmh
        said = (
            f"{cmh.details['seed_pairs']} seed pairs; only A right {cmh.details['only_a']}, only B right "
            f"{cmh.details['only_b']}"
        )
        tests.append([cmh.test, fmt_number(100 * cmh.estimate), MISSING, fmt_p(cmh.p_value), cmh.note or said])
    return [lead + test for test in tests]


def secondary_table(results: list[ClaimResult], view: BundleView, sds: tuple[dict, float]) -> Table:
    rows = []
    for r in results:
        rows += _secondary_rows(r.claim.id, "primary pair", r.result)
        for s in r.secondary:
            rows += _secondary_rows(r.claim.id, "secondary", s)
    per_task, overall = sds
    pooled = ", ".join(f"{task_title(t)} {sd:.2f}" for t, sd in per_task.items()) or "none"
    notes = [
        view.profile_note(),
        "Secondary tests never give a verdict. Exact permutation: every split of the pooled seeds (scipy); "
        "with 3 + 3 seeds its smallest p is 0.1. CMH over seed pairs: per-example matched pairs of every "
        "(seed of A, seed of B), one stratum per pair and example (statsmodels StratifiedTable); it conditions "
        "on the trained networks, so it says whether these networks differ on these examples, not whether "
        "other seeds would. Secondary comparisons: Welch (or one-sample t) as the primary, without a verdict.",
        f"Seed sd pooled over the cells with >= 2 seeds (sqrt of the dof-weighted mean variance): {pooled}; "
        f"all tasks {fmt_number(overall)}. These give the seeds needed in statistics_claims.",
    ]
    return Table(
        "statistics_secondary",
        "Claims: secondary tests (per-example evidence over every seed pair, exact permutation, further comparisons)",
        ["Claim", "Kind", "Task", "A", "B", "Seeds", "Published Δ", "Test", "Δ ours", "95% CI", "p", "Note"],
        rows,
        [5, 8, 9, 10],
        notes,
    )


def baselines_table(view: BundleView) -> Table:
    rows = []
    for task, (found, missing) in sorted(view.baselines.items()):
        data = "; ".join(sorted(set(view.runs.loc[view.runs["task"] == task, "data"])))
        for b in found:
            rows.append(
                [
                    task_title(task),
                    data,
                    b.name,
                    b.detail,
                    str(b.n_test),
                    fmt_number(b.accuracy),
                    fmt_ci(*b.interval),
                ]
            )
        if missing:
            rows.append([task_title(task), data, MISSING, missing, MISSING, MISSING, MISSING])
    return Table(
        "trivial_baselines",
        "Trivial baselines on our test sets (accuracy %, from the training labels)",
        ["Task", "Data", "Baseline", "Predicts", "Test examples", "Accuracy", "95% interval"],
        rows,
        [5, 6],
        [
            "Majority class: the most frequent training label everywhere. Root operator (ListOps): each root "
            "operator's most frequent training label (the follow-up study, appendix B; its greedy algorithm "
            "guesses at random under SM instead). Interval: 95% Wilson interval of the accuracy on n test "
            "examples. Computed by repro/analysis/baselines.py from the bundle's records and its ListOps "
            "root analysis."
        ],
    )


def shares_table(view: BundleView) -> Table:
    rows = []
    for r in shares_frame(view).itertuples():
        rows.append(
            [
                r.arm,
                r.techniques,
                task_title(r.task),
                r.data,
                r.budget,
                str(r.seeds),
                fmt_number(r.epochs),
                f"{r.examples:,.0f}" if math.isfinite(r.examples) else MISSING,
                f"{100 * r.share:.1f}%" if math.isfinite(r.share) else MISSING,
                r.note,
            ]
        )
    return Table(
        "protocol_share",
        "How much of the protocol each cell ran: training examples trained / the protocol's",
        ["Arm", "Techniques", "Task", "Data", "Budget", "Seeds", "Epochs", "Examples trained", "Share", "Note"],
        rows,
        [5, 6, 7, 8],
        [
            view.profile_note(),
            "Examples trained: steps × batch, mean over seeds. Protocol: the arm's "
            "paper-profile settings (experiments/conf, profile=paper): min(epochs × (n_train // batch), "
            "max_steps) × batch (repro/run/protocol.py). Budget: a record's budget_fraction when it "
            "has one, else its wall-clock cap.",
        ],
    )
