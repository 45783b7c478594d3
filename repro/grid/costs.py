"""What a cell costs in GPU seconds, from a timed probe or from a record of the same (arm, task, settings).

A run's time (repro/training/) is a fixed part (start-up, data, the final checkpoint and test
pass), its training steps and its validation passes. A record gives the seconds per step
(``train_time_s / steps``), per validation pass (``(elapsed_s - train_time_s)`` over its
validations: ``elapsed_s`` counts validation and checkpoint time, ``train_time_s`` does not) and
the fixed part (``wall_time_s`` beyond ``elapsed_s`` plus the grid's ``overhead_minutes``, as
records do not time their start-up). A probe (``steady``) takes the one-off costs out of the
rates and counts them once, in its fixed part (with the process's wall time beyond
``elapsed_s``): the first steps' compilation (``steady_step_s``) and, when it validated halfway
and at its last step, the first evaluation's compilation (``probe_passes``). The planned steps
and validations come from the cell's resolved settings, as the training loop counts them.
Periodic checkpoints (``checkpoint_every_seconds``: 10 minutes at ``profile=paper``) are not counted.
Costs are of one GPU: a data-parallel record's seconds count once per process (its
``data_parallel.processes``), as if n GPUs trained n times as fast.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Cost:
    step_s: float
    val_pass_s: float
    fixed_s: float
    steps_per_epoch: int
    device: str
    source: str
    data_wait_share: float | None = None  # the run's metrics.json ``data_wait_share`` (None: not sampled)


def planned_steps(train: dict, steps_per_epoch: int) -> int:
    """The steps a run trains: ``epochs * steps_per_epoch``, capped by ``max_steps`` (the training loop's
    ``total_steps``) and by ``stop_at_step`` (where the loop ends a truncated protocol)."""
    caps = [int(train[key]) for key in ("max_steps", "stop_at_step") if train.get(key) is not None]
    return min([int(train["epochs"]) * int(steps_per_epoch), *caps])


def validations(train: dict, steps: int, steps_per_epoch: int, step_s: float) -> int:
    """Validation passes of a run of ``steps`` steps: at each epoch end, every ``eval_every_steps``,
    every ``eval_every_seconds`` of training (about), and once more at the end unless its last step had one."""
    every = train.get("eval_every_steps")
    count = steps // steps_per_epoch
    if every:
        count += steps // every - steps // math.lcm(int(every), int(steps_per_epoch))
    if train.get("eval_every_seconds"):
        count += int(steps * step_s // float(train["eval_every_seconds"]))
    last_step_validates = steps % steps_per_epoch == 0 or bool(every and steps % every == 0)
    return count + (0 if last_step_validates else 1)


def cell_seconds(cost: Cost, train: dict) -> tuple[int, int, float]:
    """(planned steps, validation passes, GPU seconds) of a run with settings ``train`` at this cost."""
    steps = planned_steps(train, cost.steps_per_epoch)
    passes = validations(train, steps, cost.steps_per_epoch, cost.step_s)
    loop_s = steps * cost.step_s + passes * cost.val_pass_s
    if train.get("budget_minutes"):
        loop_s = min(loop_s, 60.0 * float(train["budget_minutes"]))
    return steps, passes, cost.fixed_s + loop_s


def validation_rows(history: Path) -> int:
    """The validation rows of a record's ``history.csv`` (rows with a ``val_acc``)."""
    with Path(history).open(newline="") as handle:
        return sum(1 for row in csv.DictReader(handle) if row.get("val_acc") not in (None, ""))


def history_rows(history: Path) -> list[tuple[int, float, bool]]:
    """(step, ``elapsed_s``, whether a validation) of each training-loss or validation row of a ``history.csv``."""
    with Path(history).open(newline="") as handle:
        return [
            (int(r["step"]), float(r["elapsed_s"]), r.get("val_acc") not in (None, ""))
            for r in csv.DictReader(handle)
            if r.get("train_loss") not in (None, "") or r.get("val_acc") not in (None, "")
        ]


PROJECTION_WINDOW_S = 120.0  # the run's own seconds of progress a projection reads ...
PROJECTION_AFTER_S = 300.0  # ... once this much of it has been seen (start-up and first compilations behind it)


def seconds_left(
    seen: list[tuple[int, float]],
    planned: int,
    window_s: float = PROJECTION_WINDOW_S,
    after_s: float = PROJECTION_AFTER_S,
) -> float | None:
    """Seconds a running run still needs to reach ``planned`` steps after the last of ``seen`` ((step,
    ``elapsed_s``) at its validations, in order, as its ``progress.json`` showed them), at the pace of the last
    ``window_s`` of its own seconds (validations included: they recur); None before ``after_s`` of them."""
    if not seen or seen[-1][1] - seen[0][1] < after_s:
        return None
    last_step, last_s = seen[-1]
    earlier = [point for point in seen if point[1] <= last_s - window_s]
    if not earlier or last_step <= earlier[-1][0]:
        return None
    step0, s0 = earlier[-1]
    return max(0, planned - last_step) * (last_s - s0) / (last_step - step0)


def training_intervals(rows: list[tuple[int, float, bool]]) -> list[tuple[int, float]]:
    """(steps, seconds) between consecutive training rows with no validation between them: an interval
    that holds one counts its pass (the first, compiling the evaluation, above all) as training time."""
    intervals, previous, validated = [], None, False
    for step, elapsed_s, is_validation in rows:
        if is_validation:
            validated = True
            continue
        if previous is not None and not validated and step > previous[0]:
            intervals.append((step - previous[0], elapsed_s - previous[1]))
        previous, validated = (step, elapsed_s), False
    return intervals


def steady_step_s(rows: list[tuple[int, float, bool]]) -> tuple[float, float] | None:
    """(seconds per step after the first logged row, the seconds the steps before it took beyond that
    rate) from a probe's ``history_rows``, over the intervals between training rows that hold no
    validation; None when there is no such interval. The first steps carry the one-off costs (kernel
    compilation, cuDNN autotuning, caches warming), which a short probe must not spread over a whole
    run's steps."""
    intervals = training_intervals(rows)
    if not intervals:
        return None
    step_s = sum(seconds for _, seconds in intervals) / sum(steps for steps, _ in intervals)
    first_step, first_s = next((step, elapsed_s) for step, elapsed_s, is_val in rows if not is_val)
    return step_s, max(0.0, first_s - first_step * step_s)


def probe_passes(
    rows: list[tuple[int, float, bool]], steps: int, step_s: float, end_s: float
) -> tuple[float, float] | None:
    """(seconds of a steady validation pass, the earlier passes' seconds beyond it) of a probe that validated
    more than once, its last row a validation at its last step (``steps``) timed up to ``end_s`` (its
    ``elapsed_s``); None otherwise. The first evaluation pays one-off costs (torch.compile compiling the
    eval-mode graph and the new batch shapes), so the last pass is the one a run repeats and the earlier
    passes' excess is paid once. An earlier pass lasts to the next training row, less the steps between."""
    checked = [i for i, row in enumerate(rows) if row[2]]
    if len(checked) < 2 or checked[-1] != len(rows) - 1 or rows[-1][0] != steps:
        return None
    steady = end_s - rows[-1][1]
    if steady <= 1e-3:  # validated by the loop's finish, after the clock's last reading: not timed
        return None
    excess = 0.0
    for i in checked[:-1]:
        step, elapsed_s, _ = rows[i]
        after = next((row for row in rows[i + 1 :] if not row[2]), None)
        if after is None:
            return None
        excess += max(0.0, after[1] - elapsed_s - (after[0] - step) * step_s - steady)
    return steady, excess


def record_processes(metrics: dict) -> int:
    """The processes (one a GPU) a record trained with: its ``data_parallel.processes``, else 1."""
    return int((metrics.get("data_parallel") or {}).get("processes") or 1)


def cost_from_run(metrics: dict, history: Path, beyond_elapsed_s: float, source: str, steady: bool = False) -> Cost:
    """The cost a finished run shows: its ``metrics.json``, ``history.csv`` and seconds beyond ``elapsed_s``.
    ``steady`` (a probe): seconds per step from the rows after the first (``steady_step_s``) and per
    validation from its last pass (``probe_passes``); the first steps' and the earlier passes' extra
    seconds counted once, in the fixed part."""
    steps = int(metrics["steps"])
    if steps < 1 or not metrics.get("train_time_s"):
        raise ValueError(f"{source}: the run trained no step (steps {steps}); nothing to time")
    train_s, elapsed_s = float(metrics["train_time_s"]), float(metrics.get("elapsed_s", metrics["train_time_s"]))
    passes = validation_rows(history)
    per_epoch = metrics.get("steps_per_epoch") or max(1, round(steps / float(metrics["epochs"])))
    step_s, warm_up_s = train_s / steps, 0.0
    val_pass_s, first_passes_s = max(0.0, elapsed_s - train_s) / max(passes, 1), 0.0
    if steady:
        rows = history_rows(history)
        step_s, warm_up_s = steady_step_s(rows) or (step_s, warm_up_s)
        val_pass_s, first_passes_s = probe_passes(rows, steps, step_s, elapsed_s) or (val_pass_s, 0.0)
    gpus = record_processes(metrics)
    return Cost(
        step_s=step_s * gpus,
        val_pass_s=val_pass_s * gpus,
        fixed_s=(max(0.0, beyond_elapsed_s) + warm_up_s + first_passes_s) * gpus,
        steps_per_epoch=int(per_epoch),
        device=str(metrics.get("device", "?")),
        source=source,
        data_wait_share=metrics.get("data_wait_share"),
    )
