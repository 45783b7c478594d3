"""Parameter counts per arm and task, from the records (``metrics.json`` ``parameters``: the parameters of
the model the run built, its technique heads included), with the LRA release's size rule for Table 1.

The release's README ("Sanctioned setting"): a new model "should be within at best 10% larger in terms of
parameters compared to the base Transformer model in the provided config file". For the ``lra_*`` arms on
the tasks of Table 1, each cell says how the arm's count compares with ``lra_transformer``'s on the same
task: ``within 10%`` or ``+N%`` (more than 10% larger). The seeds of a cell build the same model, so they
hold one count; a cell whose seeds differ shows the range.
"""

from __future__ import annotations

import math

from ..reference import LRA_MODEL_ARMS
from .names import task_names, task_title
from .render import MISSING, Table
from .view import BundleView

BASE_ARM = "lra_transformer"
RULE_PERCENT = 10  # at most 10% more parameters than the base Transformer


def counts(view: BundleView, arm: str, techniques: str, task: str) -> list[int]:
    """The distinct parameter counts of a cell's records (sorted; empty when none holds one)."""
    runs = view.runs
    cell = runs[(runs["arm"] == arm) & (runs["techniques"] == techniques) & (runs["task"] == task)]
    return sorted({int(n) for n in cell["parameters"] if math.isfinite(n)})


def size_flag(count: int, base: int) -> str:
    """The release's rule for one cell: ``within 10%`` of the base Transformer's count, or ``+N%``."""
    if count * 100 <= base * (100 + RULE_PERCENT):  # whole numbers: 110 of 100 is within
        return "within 10%"
    return f"+{100 * (count / base - 1.0):.0f}%"


def cell(view: BundleView, arm: str, techniques: str, task: str, lra_rule: bool) -> str:
    found = counts(view, arm, techniques, task)
    if not found:
        return MISSING
    text = f"{found[0]:,}" if len(found) == 1 else f"{found[0]:,}-{found[-1]:,}"
    base = counts(view, BASE_ARM, "none", task) if lra_rule else []
    if lra_rule and len(found) == 1 and len(base) == 1:
        text += f" ({size_flag(found[0], base[0])})"
    return text


def parameters_table(view: BundleView, name: str = "parameters") -> Table:
    tasks = [t for t in task_names() if t in set(view.runs["task"])]
    lra_arms = set(LRA_MODEL_ARMS.values())
    rows = []
    for (arm, techniques), _ in view.runs.groupby(["arm", "techniques"], sort=True):
        lra_rule = arm in lra_arms and techniques == "none"
        rows.append([arm, techniques, *(cell(view, arm, techniques, t, lra_rule) for t in tasks)])
    return Table(
        name,
        "Parameters per arm and task (the models the records trained)",
        ["Arm", "Techniques", *(task_title(t) for t in tasks)],
        rows,
        list(range(2, 2 + len(tasks))),
        [
            view.profile_note(),
            "Parameters: metrics.json's count of the model's parameters, technique heads included (the MLM "
            "head). lra_* arms: against lra_transformer's count on the task, the LRA release's rule (README, "
            "'Sanctioned setting': at most 10% larger than the base Transformer): within 10%, or +N% larger.",
        ],
    )
