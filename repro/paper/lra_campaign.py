"""LRA Table 1 at the release's protocol (Tay et al. 2021, Table 1), ours beside the published, and how
well our ranking of the models follows theirs, task by task.

Only the tasks with records are columns; the others are named in a note. Per cell: the seeds' mean ±
sd (n), a 95% Student-t interval of the mean over seeds ("1 seed" when there is one), the published
number. Averages are over the tasks run, ours only for an arm with every one of them, the published
over the same tasks. Under the rows: each column's data source and the trivial baselines of its test set.

The ranking table: per task, Spearman's rank correlation between our seed means and the published
numbers over the arms run there, with a 95% percentile bootstrap interval over seeds (each arm's seeds
resampled with replacement) when every arm has two seeds or more; an arm with one seed has no spread to
resample, so with any such arm there is no interval ("not tested at this budget"). The interval holds
the arms fixed; whether the agreement exceeds what a random order of these arms gives is the one-sided
permutation p of rho (the pairing of our means with the published ones permuted).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
from scipy import stats as sps
from statsmodels.stats.weightstats import DescrStatsW

from ..reference import LRA_MODEL_ARMS, published
from .accuracy import LRA_NAMES, MARKS_NOTE, ours_cell, pub_cell
from .names import LRA_AVG_TASKS, LRA_TABLE1_TASKS, task_title
from .render import MISSING, Table, fmt_ci, fmt_number, fmt_p
from .view import BundleView

PUBLISHED_COLUMN = {task: column for column, task in LRA_TABLE1_TASKS}
NOT_RUN_WHY = {
    "retrieval": "Retrieval: the AAN data is not public any more",
    "pathx": "Path-X: out of the campaign's scope",
}
BOOTSTRAP_RESAMPLES = 2000
PERMUTATIONS = 9999  # random pairings for the p of rho; every pairing when there are fewer
MIN_ARMS = 3  # a rank correlation over fewer arms says nothing


def tasks_run(view: BundleView) -> list[str]:
    """The LRA tasks with a record of an ``lra_*`` arm, in Table 1's column order."""
    present = set(view.runs[view.runs["arm"].isin(LRA_MODEL_ARMS.values())]["task"])
    return [task for _, task in LRA_TABLE1_TASKS if task in present]


def seed_interval(values: list[float]) -> str:
    """95% Student-t interval of the mean over seeds; one seed has none."""
    if len(values) < 2:
        return "1 seed" if values else MISSING
    if np.ptp(values) == 0:
        return fmt_ci(values[0], values[0])
    low, high = DescrStatsW(np.asarray(values, dtype=np.float64)).tconfint_mean(alpha=0.05)
    return fmt_ci(float(low), float(high))


@cache
def _published_table():
    return published("lra_table1_accuracy").set_index("model")


def _published(model: str, task: str) -> float:
    """Tay et al. 2021, Table 1's number for ``model`` on ``task``; NaN where it reads FAIL."""
    try:
        return float(_published_table().loc[model, PUBLISHED_COLUMN[task]])
    except ValueError:
        return math.nan


def _averages(view: BundleView, model: str, arm: str, tasks: list[str]) -> list[str]:
    accuracies = [view.accuracies(arm, t) for t in tasks]
    means = [float(np.mean(a)) if a else math.nan for a in accuracies]
    ours = fmt_number(float(np.mean(means))) if all(math.isfinite(m) for m in means) else MISSING
    return [ours, fmt_number(float(np.mean([_published(model, t) for t in tasks])))]


def _reference_rows(view: BundleView, tasks: list[str]) -> list[list[str]]:
    data_row, baseline_row = ["Data (our records)", ""], ["Trivial baselines (our test sets)", ""]
    for task in tasks:
        sources = sorted(set(view.runs[view.runs["task"] == task]["data"]))
        data_row += ["; ".join(sources) or MISSING, "", ""]
        found = view.baselines_of(task)
        baseline_row += [
            "; ".join(f"{b.name} {b.accuracy:.2f} {fmt_ci(*b.interval)}" for b in found) or MISSING,
            "",
            "",
        ]
    return [data_row + ["", ""], baseline_row + ["", ""]]


def table1(view: BundleView, name: str = "lra_table1") -> Table:
    tasks = tasks_run(view)
    columns, ours_cols = ["Model", "Arm"], []
    for task in tasks:
        ours_cols += [len(columns), len(columns) + 1]
        columns += [f"{task_title(task)} ours", f"{task_title(task)} 95% CI", f"{task_title(task)} pub."]
    ours_cols.append(len(columns))
    columns += ["Avg ours", "Avg pub."]
    rows = []
    for model, arm in LRA_MODEL_ARMS.items():
        row = [LRA_NAMES.get(model, model.capitalize()), arm]
        for task in tasks:
            theirs = _published(model, task)
            row += [ours_cell(view, arm, task), seed_interval(view.accuracies(arm, task))]
            row.append(pub_cell(theirs) if math.isfinite(theirs) else "FAIL")
        rows.append(row + _averages(view, model, arm, tasks))
    left_out = [why for task, why in NOT_RUN_WHY.items() if task not in tasks]
    absent = [t for t in LRA_AVG_TASKS if t not in tasks and t not in NOT_RUN_WHY]
    left_out += [f"{task_title(t)}: no records in these bundles" for t in absent]
    return Table(
        name,
        "LRA Table 1 at the release's protocol: test accuracy (%), ours beside the published",
        columns,
        rows,
        ours_cols,
        [
            view.profile_note(),
            "95% CI: Student t over the seeds' test accuracies (the mean's interval), not cut to 0-100 (with two "
            "seeds the t factor is 12.7, so it can pass both ends); 1 seed: none.",
            "Avg: mean over the tasks in this table; ours only for an arm with all of them, the published "
            "over the same tasks. Published: Tay et al. 2021, Table 1, scored at the last weights (ours at the "
            "best-validation checkpoint; records that hold both give test_acc_last too).",
            "Columns not shown: " + ("; ".join(left_out) if left_out else "none") + ".",
            MARKS_NOTE,
            f"Bundles: {', '.join(view.versions)}.",
        ],
        _reference_rows(view, tasks),
    )


def rho_p_value(ours, theirs, seed: int = 0) -> float:
    """One-sided p of Spearman's rho > 0: the share of pairings of ``ours`` with ``theirs`` (random ones,
    ``PERMUTATIONS`` of them, or all when fewer) whose rho reaches the observed; NaN when ``ours`` has no order."""
    ranks, reference = sps.rankdata(ours), sps.rankdata(theirs)
    if np.ptp(ranks) == 0 or np.ptp(reference) == 0:
        return math.nan
    centred = reference - reference.mean()

    def rho(x, axis):  # Pearson's r of the ranks, which is Spearman's rho, over many pairings at once
        x = x - x.mean(axis=axis, keepdims=True)
        return (x * centred).sum(axis=axis) / np.sqrt((x**2).sum(axis=axis) * (centred**2).sum())

    test = sps.permutation_test(
        (ranks,),
        rho,
        permutation_type="pairings",
        vectorized=True,
        n_resamples=PERMUTATIONS,
        alternative="greater",
        random_state=np.random.default_rng(seed),  # scipy >= 1.10 (the keyword rng came in 1.15)
    )
    return float(test.pvalue)


def rank_correlation(view: BundleView, task: str, seed: int = 0) -> dict:
    """Spearman's rho of our seed means against the published numbers over the arms run on ``task``, its
    one-sided permutation p (``p``), and its percentile bootstrap interval over seeds (None unless every arm
    has two seeds: an arm with one would count as if its mean were known exactly)."""
    arms = [(m, a) for m, a in LRA_MODEL_ARMS.items() if view.accuracies(a, task)]
    values = [np.asarray(view.accuracies(a, task), dtype=np.float64) for _, a in arms]
    reference = np.array([_published(m, task) for m, _ in arms])
    result = {
        "arms": len(arms),
        "seeds": sorted({len(v) for v in values}),
        "single_seed_arms": sum(len(v) == 1 for v in values),
        "rho": math.nan,
        "p": math.nan,
        "interval": None,
    }
    if len(arms) < MIN_ARMS or not np.isfinite(reference).all():
        return result
    means = [v.mean() for v in values]
    result["rho"] = float(sps.spearmanr(means, reference).statistic)
    result["p"] = rho_p_value(means, reference, seed)
    if min(len(v) for v in values) < 2:
        return result
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        means = [rng.choice(v, size=len(v), replace=True).mean() for v in values]
        rho = sps.spearmanr(means, reference).statistic
        draws.append(0.0 if np.ptp(means) == 0 else rho)
    result["interval"] = tuple(float(q) for q in np.percentile(draws, [2.5, 97.5]))
    return result


def ranking(view: BundleView, name: str = "lra_table1_ranking") -> Table:
    rows = []
    for task in tasks_run(view):
        r = rank_correlation(view, task)
        if r["arms"] < MIN_ARMS:
            interval = f"not tested: {r['arms']} arm(s), a rank correlation needs {MIN_ARMS}"
        elif not math.isfinite(r["rho"]):
            interval = "not tested: a published number is missing (FAIL) for an arm run here"
        elif r["interval"] is None:
            single = r["single_seed_arms"]
            interval = f"not tested at this budget ({single} of {r['arms']} arms with 1 seed)"
        else:
            interval = fmt_ci(*r["interval"], digits=3)
        seeds = "/".join(str(n) for n in r["seeds"])
        row = [task_title(task), str(r["arms"]), seeds, fmt_number(r["rho"], 3), fmt_p(r["p"]), interval]
        rows.append(row)
    return Table(
        name,
        "Does our ranking of the LRA models follow the published one? Spearman's rho per task",
        ["Task", "Arms run", "Seeds per arm", "rho (ours vs published)", "p (rho > 0)", "95% interval over seeds"],
        rows,
        [3, 4, 5],
        [
            "rho: Spearman's rank correlation between our seed means and Tay et al. 2021, Table 1, over the "
            "arms with records on the task. p: one-sided permutation test, the share of random pairings of our "
            f"means with the published ones ({PERMUTATIONS}, fixed seed; every pairing when fewer) whose rho is "
            "as high: how often a random order of these arms would agree as well. Interval: percentile bootstrap, "
            f"each arm's seeds resampled with replacement ({BOOTSTRAP_RESAMPLES} draws, fixed seed); it holds "
            "the arms fixed, so it says how much the seeds move rho, not whether rho exceeds chance.",
        ],
    )
