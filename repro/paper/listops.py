"""ListOps per root operator: a model's test accuracy beside the root-operator baseline (the follow-up
study, appendix B, Figures 1-2), from the bundle's root analysis (``repro.analysis.listops_roots``)."""

from __future__ import annotations

import numpy as np

from ..analysis import baselines as trivial
from ..analysis import listops_roots
from .render import MISSING, Table, fmt_number
from .view import BundleView, listops_analysis_of


def _pick_arm(view: BundleView, arm: str | None) -> str | None:
    listops = view.runs[view.runs["task"] == "listops"]
    if arm is None and not listops.empty:
        means = listops.groupby("arm")["test_acc"].mean()
        arm = sorted(means.index, key=lambda a: (-means[a], a))[0]
    return arm


def listops_analysis(view: BundleView, arm: str | None):
    """(test label counts per root, per-root rows of baseline vs model, the note)."""
    arm = _pick_arm(view, arm)
    listops = view.runs[view.runs["task"] == "listops"]
    seeds = listops[listops["arm"] == arm] if arm else listops.iloc[0:0]
    if seeds.empty:
        return None, [], f"no ListOps records{f' of arm {arm}' if arm else ''} in profile {view.profile}"
    keys = [listops_roots.roots_key(view.config(p)) for p in seeds["path"]]
    stored = listops_analysis_of(view, seeds["path"][:1])
    if stored is None:
        return (
            None,
            [],
            (f"the bundle has no root-operator analysis for {arm}'s test set (freeze with the ListOps data at hand)"),
        )
    test_rows, summary = stored
    roots = np.array([r["root"] for r in test_rows])
    labels = np.array([r["label"] for r in test_rows])
    majority = listops_roots.most_frequent({k: v["label_counts"] for k, v in summary["train"].items()})
    baseline_right = listops_roots.baseline_predictions(majority, roots) == labels
    counts = {
        root: [int((labels[roots == root] == k).sum()) for k in range(listops_roots.CLASSES)]
        for root in sorted(set(roots))
    }
    per_seed = []
    for path, key in zip(seeds["path"], keys, strict=True):
        if key == keys[0]:
            frame = view.predictions(path)
            per_seed.append(frame["prediction"].to_numpy() == frame["label"].to_numpy())
    rows = []
    for root in sorted(set(roots)):
        where = roots == root
        values = [100.0 * right[where].mean() for right in per_seed]
        sd = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
        rows.append(
            {
                "root": root,
                "n": int(where.sum()),
                "greedy": 100.0 * float(baseline_right[where].mean()),
                "model": float(np.mean(values)),
                "model_sd": sd,
                "seeds": len(values),
            }
        )
    overall = trivial.root_operator(summary["train"], test_rows)
    note = (
        f"{arm}, profile {view.profile}, {len(per_seed)} seed(s), {len(test_rows)} test examples; baseline: each "
        f"root operator's most frequent training label ({overall.detail}), {overall.accuracy:.2f}% overall"
    )
    return counts, rows, note


def listops_table(rows: list[dict], note: str) -> Table:
    body = [
        [
            r["root"].lstrip("["),
            str(r["n"]),
            fmt_number(r["greedy"]),
            fmt_number(r["model"]),
            fmt_number(r["model"] - r["greedy"]),
        ]
        for r in rows
    ]
    if not body:
        body = [[MISSING] * 5]
    return Table(
        "listops_operator_accuracy",
        "ListOps: test accuracy (%) per root operator, model vs the root-operator baseline "
        "(the follow-up study, appendix B, Figure 2)",
        ["Root", "n", "Root-operator baseline", "Model", "Δ"],
        body,
        [1, 2, 3, 4],
        [
            note + ". The follow-up's greedy algorithm guesses at random under SM (10% expected); this baseline "
            "predicts SM's most frequent training label."
        ],
    )
