"""How well our ranking of the LRA models follows the published one (Tay et al. 2021, Table 1), task by task,
for the LRA campaign's records (LRA Table 1 itself: ``repro.paper.accuracy.lra_table1``).

The ranking table: per task, Spearman's rank correlation between our seed means and the published
numbers over the arms run there, with a 95% percentile bootstrap interval over seeds (each arm's seeds
resampled with replacement) when every arm has two seeds or more; an arm with one seed has no spread to
resample, so with any such arm there is no interval ("not tested at this budget"). The interval holds
the arms fixed; whether the agreement exceeds what a random order of these arms gives is the one-sided
permutation p of rho (the pairing of our means with the published ones permuted).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from ..reference import LRA_MODEL_ARMS
from .accuracy import published_accuracy, tasks_run
from .names import task_title
from .render import Table, fmt_ci, fmt_number, fmt_p
from .view import BundleView

BOOTSTRAP_RESAMPLES = 2000
PERMUTATIONS = 9999  # random pairings for the p of rho; every pairing when there are fewer
MIN_ARMS = 3  # a rank correlation over fewer arms says nothing


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
    reference = np.array([published_accuracy(m, task) for m, _ in arms])
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
