"""The numbers behind the papers' figures (LRA Figure 3, the follow-up's Table 1 as curves), and the generated
Pathfinder and Path-X images behind the sample grids."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..reference import LRA_MODEL_ARMS, published
from ..tasks import pathfinder as pf
from ..tasks.pathfinder import render
from .names import FOLLOWUP_TASKS, LRA_AVG_TASKS
from .view import BundleView


def _mean_or_nan(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def _speed_memory(view: BundleView, bench: pd.DataFrame, model: str, arm: str) -> tuple[float, float]:
    if not bench.empty:
        rows = bench[(bench["model"] == model) & (bench["length"] == 4096) & (bench["status"].str.upper() != "OOM")]
        if rows.empty:
            return math.nan, math.nan
        return float(rows["steps_per_s"].median()), float(rows["peak_mem_gb"].median())
    text = view.seeds(arm, "text")
    if text.empty:
        return math.nan, math.nan
    return float(text["examples_per_s"].mean()), float(text["peak_mem_gb"].mean())


def _speed_axis(view: BundleView, bench: pd.DataFrame) -> str:
    """What our panel's x axis measures; for run records, the devices the text records ran on."""
    if not bench.empty:
        return "training steps/s at 4K (benchmark records)"
    text = view.runs[view.runs["arm"].isin(LRA_MODEL_ARMS.values()) & (view.runs["task"] == "text")]
    devices = sorted({str(d) for d in text["device"].dropna()})
    where = f", {' and '.join(devices)}" if devices else ""
    return f"training examples/s on text, mean over the text records{where}"


def shared_tasks(view: BundleView) -> tuple[str, ...]:
    """The tasks of LRA's average that every ``lra_*`` arm with records on any of them has records of: the
    average both panels of Figure 3 take. All five when no arm has one (LRA's own average), none when the
    arms' tasks do not meet."""
    scored = [
        {t for t in LRA_AVG_TASKS if math.isfinite(_mean_or_nan(view.accuracies(arm, t)))}
        for arm in LRA_MODEL_ARMS.values()
    ]
    have = [tasks for tasks in scored if tasks]
    if not have:
        return LRA_AVG_TASKS
    common = set.intersection(*have)
    return tuple(t for t in LRA_AVG_TASKS if t in common)


def seed_scores(view: BundleView, arm: str, tasks: tuple[str, ...]) -> list[float]:
    """Each seed's mean test accuracy over ``tasks``, for the seeds with a record on every one of them, by seed:
    the spread of one seed's score, whose sd Figure 3's error bars show."""
    by_task = [view.seeds(arm, t).set_index("seed")["test_acc"] for t in tasks]
    if not by_task:
        return []
    common = sorted(set.intersection(*(set(s.index) for s in by_task)))
    return [float(np.mean([float(s.loc[seed]) for s in by_task])) for seed in common]


def published_points(tasks: tuple[str, ...]) -> list[dict]:
    """LRA Figure 3's published points, one per LRA model (name, accuracy, speed, memory_gb): Tables 1-2's
    accuracy averaged over ``tasks`` (the paper's ``avg`` when they are its five, or none), training steps/s
    and peak memory at 4K (NaN for a model Table 2 did not time)."""
    pub_acc = published("lra_table1_accuracy").set_index("model")
    pub_eff = published("lra_table2_efficiency").set_index("model")

    def pub_accuracy(model: str) -> float:
        if not tasks or tasks == LRA_AVG_TASKS:
            return float(pub_acc.loc[model, "avg"])
        return float(np.mean([float(pub_acc.loc[model, t]) for t in tasks]))

    return [
        {
            "name": m,
            "accuracy": pub_accuracy(m),
            "speed": float(pub_eff.loc[m, "steps_per_s_4k"]) if m in pub_eff.index else math.nan,
            "memory_gb": float(pub_eff.loc[m, "peak_mem_gb_4k"]) if m in pub_eff.index else math.nan,
        }
        for m in LRA_MODEL_ARMS
    ]


@dataclass(frozen=True)
class Figure3:
    """LRA Figure 3's inputs: the published points and ours (dicts of name, accuracy, speed, memory_gb, NaN
    where missing; ours also accuracy_sd, seeds and own_tasks), what our x axis measures, the tasks
    averaged, and whether our x axis is the published one's quantity (training steps/s at 4K)."""

    published: list[dict]
    ours: list[dict]
    ours_axis: str
    tasks: tuple[str, ...]
    same_quantity: bool


def tradeoff_points(view: BundleView, bench: pd.DataFrame) -> Figure3:
    """LRA Figure 3's points (Tay et al. 2021, Figure 3: accuracy against speed, memory as area): published
    (Tables 1-2) and ours (speed and memory from benchmark records, else the text run records), both averaged
    over ``shared_tasks``, so that a point compares like with like; published over all five (the paper's
    ``avg``) when those are all five. When no task is shared, ours averages each arm's own tasks (``own_tasks``
    counts them) and the published points take the paper's average. Our accuracy is the mean of the tasks'
    seed means (LRA Table 1's average); ``accuracy_sd`` the sd of ``seed_scores`` (NaN under two seeds)."""
    tasks = shared_tasks(view)
    ours = []
    for model, arm in LRA_MODEL_ARMS.items():
        means = {t: _mean_or_nan(view.accuracies(arm, t)) for t in tasks or LRA_AVG_TASKS}
        done = tuple(t for t, m in means.items() if math.isfinite(m))
        scores = seed_scores(view, arm, done)
        speed, memory = _speed_memory(view, bench, model, arm)
        ours.append(
            {
                "name": model,
                "accuracy": float(np.mean([means[t] for t in done])) if done else math.nan,
                "accuracy_sd": float(np.std(scores, ddof=1)) if len(scores) > 1 else math.nan,
                "seeds": len(scores),
                "speed": speed,
                "memory_gb": memory,
                "own_tasks": len(done) if not tasks else None,
            }
        )
    return Figure3(published_points(tasks), ours, _speed_axis(view, bench), tasks, same_quantity=not bench.empty)


def kernel_curves(view: BundleView) -> tuple[list[int], dict, dict]:
    table = published("followup_table1_locality")
    kernels = [int(k) for k in table["kernel_size"]]
    pub = {t: {int(r["kernel_size"]): float(r[t]) for _, r in table.iterrows()} for t in FOLLOWUP_TASKS}
    ours = {t: {k: view.accuracies(f"locality_k{k}", t) for k in kernels} for t in FOLLOWUP_TASKS}
    return kernels, pub, ours


PATHFINDER_SAMPLE_FILES = {32: "pathfinder32_samples.png", 128: "pathx128_samples.png"}
PATHFINDER_TITLES = {32: "Pathfinder 32x32", 128: "Path-X 128x128"}


def pathfinder_samples(
    resolution: int, difficulty: str, seed: int, render_name: str = pf.DEFAULT_RENDER, per_label: int = 8
) -> tuple[list, list, str]:
    """The first ``per_label`` positives and negatives of chunk 0 of the generator (the release flips a coin
    per label), drawn by ``render_name`` exactly as the model sees them, and the grid's title."""
    spec = pf.generator_spec({"render": render_name}, resolution, difficulty)
    samples = pf.render_module(spec).chunk_samples(seed, difficulty, 0, 6 * per_label, spec)
    positives = [s for s in samples if s.label == 1][:per_label]
    negatives = [s for s in samples if s.label == 0][:per_label]
    if min(len(positives), len(negatives)) < per_label:
        raise RuntimeError(f"seed {seed}: under {per_label} images of a label in {6 * per_label}; try another --seed")
    title = (
        f"{PATHFINDER_TITLES[resolution]}, {difficulty} (contour length {render.CONTOUR_LENGTH[difficulty]}), "
        f"generated (render {render_name}), seed {seed}"
    )
    return positives, negatives, title
