"""Accuracy tables of both papers, ours beside the published, with the trivial baselines under each task.

A cell of ours whose seed mean lies inside the task's strongest trivial baseline's 95% interval is
marked †, one below it ‡ (``repro.analysis.baselines``); the baselines row is printed under the
rows of every table with a task column (for ListOps: the root-operator and majority baselines).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
from statsmodels.stats.weightstats import DescrStatsW

from ..reference import LRA_MODEL_ARMS, published
from .names import FOLLOWUP_TASKS, LRA_AVG_TASKS, LRA_TABLE1_TASKS, task_title
from .render import MISSING, Table, fmt_ci, fmt_number, fmt_seeds
from .view import BundleView

LRA_NAMES = {
    "bigbird": "BigBird",
    "linear_transformer": "Linear Transformer",
    "local_attention": "Local Attention",
    "sparse_transformer": "Sparse Transformer",
}
# Follow-up table rows -> our arms. "ARM+TECHNIQUES" selects the records of ARM trained with that
# techniques group (config.yaml's techniques.name: none | followup); a bare ARM takes its records
# whatever the techniques. None: not reproduced here (the row stays "—").
FOLLOWUP_TABLE2 = {
    "transformer": "lra_transformer",
    "transformer_pretrained": None,
    "rotary_transformer_techniques": "rotary_transformer",
    "mega": "mega+none",
    "mega_techniques": "mega+followup",
}
FOLLOWUP_TABLE3 = {
    "s4": "s4+none",
    "s5": "s5+none",
    "s4_techniques": "s4+followup",
    "s5_techniques": "s5+followup",
    "gmlp_techniques": "gmlp+followup",
}
FOLLOWUP_TABLE4 = {
    ("learned", "yes"): "learned_pe",
    ("sinusoidal", "yes"): "sinusoidal_pe",
    ("rotary", "no"): "rotary_transformer_notech",
    ("rotary", "yes"): "rotary_transformer",
}
MARKS_NOTE = (
    "† our mean lies inside the 95% interval of the task's strongest trivial baseline (ListOps: the root "
    "operator), ‡ below that interval: the runs do no better than a trivial predictor (trivial_baselines)."
)


def pub_cell(value, digits: int = 2) -> str:
    """A published number with the decimals it was published with; text (FAIL) as it is."""
    if isinstance(value, str):
        try:
            return f"{float(value):.{digits}f}"
        except ValueError:
            return value
    return fmt_number(value, digits)


def ours_cell(view: BundleView, arm: str | None, task: str) -> str:
    """Seeds' mean ± sd (n), marked against the task's strongest trivial baseline."""
    values = view.accuracies(arm, task)
    text = fmt_seeds(values)
    baseline = view.strongest_baseline(task) if values else None
    if baseline is None:
        return text
    mean = float(np.mean(values))
    return text + (" †" if baseline.contains(mean) else " ‡" if mean < baseline.interval[0] else "")


def _mean_or_nan(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def _average(view: BundleView, arm: str | None, tasks) -> str:
    means = [_mean_or_nan(view.accuracies(arm, t)) for t in tasks]
    return fmt_number(np.mean(means)) if all(math.isfinite(m) for m in means) else MISSING


def baseline_row(view: BundleView, tasks, lead: int, has_avg: bool) -> list[str]:
    """Under every table with task columns: the trivial baselines of each task's test set (our records')."""
    row = ["Trivial baselines (our test sets)"] + [""] * (lead - 1)
    for task in tasks:
        found = view.baselines_of(task)
        row += ["; ".join(f"{b.name} {b.accuracy:.2f}" for b in found) or MISSING, ""]
    return row + (["", ""] if has_avg else [])


NOT_RUN_WHY = {
    "retrieval": "Retrieval: the AAN data is not public any more",
    "pathx": "Path-X: out of the campaign's scope",
}


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


def published_accuracy(model: str, task: str) -> float:
    """Tay et al. 2021, Table 1's number for ``model`` on ``task``; NaN where it reads FAIL."""
    column = {task: column for column, task in LRA_TABLE1_TASKS}[task]
    try:
        return float(_published_table().loc[model, column])
    except ValueError:
        return math.nan


def _published_average(model: str, tasks) -> str:
    """The published mean over ``tasks``: Table 1's own average when they are its five."""
    if tuple(tasks) == LRA_AVG_TASKS:
        return pub_cell(_published_table().loc[model, "avg"])
    return fmt_number(float(np.mean([published_accuracy(model, t) for t in tasks])))


def _campaign_rows(view: BundleView, tasks: list[str]) -> list[list[str]]:
    """Under the campaign's rows: each column's data source and its trivial baselines with their intervals."""
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


def _campaign_notes(view: BundleView, tasks: list[str]) -> list[str]:
    left_out = [why for task, why in NOT_RUN_WHY.items() if task not in tasks]
    absent = [t for t in LRA_AVG_TASKS if t not in tasks and t not in NOT_RUN_WHY]
    left_out += [f"{task_title(t)}: no records in these bundles" for t in absent]
    return [
        view.profile_note(),
        "95% CI: Student t over the seeds' test accuracies (the mean's interval), not cut to 0-100 (with two "
        "seeds the t factor is 12.7, so it can pass both ends); 1 seed: none.",
        "Avg: mean over the tasks in this table; ours only for an arm with all of them, the published "
        "over the same tasks. Published: Tay et al. 2021, Table 1, scored at the last weights (ours at the "
        "best-validation checkpoint; records that hold both give test_acc_last too).",
        "Columns not shown: " + ("; ".join(left_out) if left_out else "none") + ".",
        MARKS_NOTE,
        f"Bundles: {', '.join(view.versions)}.",
    ]


def lra_table1(view: BundleView, campaign: bool = False) -> Table:
    """LRA Table 1 (Tay et al. 2021, Table 1): per model and task our seeds' mean ± sd (n) beside the published
    number, and the averages. ``lra_table1_accuracy``: every task a column, LRA's average over its five.
    ``campaign`` (``lra_table1``, the LRA campaign's records at the release's protocol): only the tasks with
    records (``tasks_run``), each with a 95% interval over seeds, averages over those tasks (the published too),
    and each column's data source under the rows."""
    pub = _published_table()
    column = {task: column for column, task in LRA_TABLE1_TASKS}
    tasks = tasks_run(view) if campaign else list(column)
    columns, ours_cols = ["Model", "Arm"], []
    for task in tasks:
        ours_cols += [len(columns), len(columns) + 1] if campaign else [len(columns)]
        interval = [f"{task_title(task)} 95% CI"] if campaign else []
        columns += [f"{task_title(task)} ours", *interval, f"{task_title(task)} pub."]
    ours_cols.append(len(columns))
    columns += ["Avg ours", "Avg pub."]
    average = tasks if campaign else LRA_AVG_TASKS
    rows = []
    for model, arm in LRA_MODEL_ARMS.items():
        row = [LRA_NAMES.get(model, model.capitalize()), arm]
        for task in tasks:
            interval = [seed_interval(view.accuracies(arm, task))] if campaign else []
            row += [ours_cell(view, arm, task), *interval, pub_cell(pub.loc[model, column[task]])]
        rows.append(row + [_average(view, arm, average), _published_average(model, average)])
    if campaign:
        title = "LRA Table 1 at the release's protocol: test accuracy (%), ours beside the published"
        return Table(
            "lra_table1", title, columns, rows, ours_cols, _campaign_notes(view, tasks), _campaign_rows(view, tasks)
        )
    notes = [
        view.profile_note(),
        "Avg: mean over the five tasks without Path-X, as LRA's; ours only when all "
        "five ran. Published: Tay et al. 2021, Table 1 (FAIL: chance on Path-X).",
        MARKS_NOTE,
    ]
    reference = [baseline_row(view, tasks, 2, True)]
    title = "LRA Table 1: test accuracy (%), ours beside the published"
    return Table("lra_table1_accuracy", title, columns, rows, ours_cols, notes, reference)


def _with_interval(view: BundleView, arm: str | None, task: str) -> str:
    """``ours_cell`` followed by the 95% interval of the seeds' mean when two or more seeds ran."""
    values = view.accuracies(arm, task)
    return ours_cell(view, arm, task) + (f" {seed_interval(values)}" if len(values) >= 2 else "")


def followup_table(view: BundleView, name: str, title: str, source: str, arms: dict, key) -> Table:
    pub = published(source)
    columns, ours_cols = ["Row", "Arm"], []
    for task in FOLLOWUP_TASKS:
        ours_cols.append(len(columns))
        columns += [f"{task_title(task)} ours", f"{task_title(task)} pub."]
    has_avg = "avg" in pub.columns
    if has_avg:
        ours_cols.append(len(columns))
        columns += ["Avg ours", "Avg pub."]
    rows = []
    for _, record in pub.iterrows():
        row_key = key(record)
        arm = arms.get(row_key)
        label = " / ".join(map(str, row_key)) if isinstance(row_key, tuple) else str(row_key)
        row = [str(label), arm or "(not reproduced)"]
        for task in FOLLOWUP_TASKS:
            row += [_with_interval(view, arm, task), pub_cell(record[task])]
        if has_avg:
            row += [_average(view, arm, FOLLOWUP_TASKS), pub_cell(record["avg"])]
        rows.append(row)
    notes = [
        view.profile_note(),
        "[a, b]: the 95% Student-t interval of the seeds' mean (two seeds or more).",
        f"Published: the follow-up study ({source}.csv in repro/reference).",
        MARKS_NOTE,
    ]
    if any(a is None for a in arms.values()):
        notes.append("(not reproduced): a row outside this reproduction's arms; its cells stay empty.")
    return Table(name, title, columns, rows, ours_cols, notes, [baseline_row(view, FOLLOWUP_TASKS, 2, has_avg)])


def followup_tables(view: BundleView) -> list[Table]:
    """The follow-up study's Tables 1-4."""
    kernels = {int(k): f"locality_k{int(k)}" for k in published("followup_table1_locality")["kernel_size"]}
    return [
        followup_table(
            view,
            "followup_table1_locality",
            "Follow-up Table 1: bounded-kernel convolution, test accuracy (%) per kernel size K",
            "followup_table1_locality",
            kernels,
            lambda r: int(r["kernel_size"]),
        ),
        followup_table(
            view,
            "followup_table2_transformer",
            "Follow-up Table 2: Transformer arms and MEGA, test accuracy (%)",
            "followup_table2_transformer",
            FOLLOWUP_TABLE2,
            lambda r: r["arm"],
        ),
        followup_table(
            view,
            "followup_table3_ssm_gmlp",
            "Follow-up Table 3: SSMs and gMLP, test accuracy (%)",
            "followup_table3_ssm_gmlp",
            FOLLOWUP_TABLE3,
            lambda r: r["arm"],
        ),
        followup_table(
            view,
            "followup_table4_positional_ablation",
            "Follow-up Table 4: positional encodings with and without training techniques, test accuracy (%)",
            "followup_table4_positional_ablation",
            FOLLOWUP_TABLE4,
            lambda r: (r["positional"], r["training_techniques"]),
        ),
    ]


def runs_table(view: BundleView) -> Table:
    rows = [
        [
            r.arm,
            r.techniques,
            task_title(r.task),
            r.profile,
            str(r.seed),
            fmt_number(r.test_acc),
            fmt_number(r.best_val_acc),
            str(r.steps),
            fmt_number(r.examples_per_s, 1),
            fmt_number(r.peak_mem_gb),
            str(r.device),
            f"{100 * r.share:.1f}%" if math.isfinite(r.share) else MISSING,
        ]
        for r in view.all_runs.itertuples()
    ]
    return Table(
        "runs",
        "Every run record in the bundle",
        [
            "Arm",
            "Techniques",
            "Task",
            "Profile",
            "Seed",
            "Test acc",
            "Best val acc",
            "Steps",
            "Train examples/s",
            "Peak GB",
            "Device",
            "Share of protocol",
        ],
        rows,
        [5, 6, 7, 8, 11],
        [
            "Test accuracy at the best-validation checkpoint (%). Peak GB: torch.cuda.max_memory_allocated "
            "(— on CPU). Share of protocol: training examples trained / the protocol's (protocol_share)."
        ],
    )
