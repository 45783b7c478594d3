"""What a cell costs in GPU seconds, from a timed probe or from a record of the same (arm, task, settings).

A run's time (repro/training/) is a fixed part (start-up, data, the final checkpoint and test
pass), its training steps and its validation passes. A probe or record gives the seconds per
step (``train_time_s / steps``), per validation pass (``(elapsed_s - train_time_s)`` over its
validations: ``elapsed_s`` counts validation and checkpoint time, ``train_time_s`` does not) and
the fixed part (a probe: the process's wall time beyond ``elapsed_s``; a record: ``wall_time_s``
beyond ``elapsed_s`` plus the grid's ``overhead_minutes``, as records do not time their
start-up). The planned steps and validations come from the cell's resolved settings, as the
training loop counts them. Periodic checkpoints (``checkpoint_every_seconds``: 10 minutes at
``profile=paper``) are not counted.
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


def steady_step_s(history: Path) -> tuple[float, float] | None:
    """(seconds per step after the first logged row, the seconds the steps before it took beyond that
    rate) from the training-loss rows of a run that validated only at its end (a probe); None when it
    logged fewer than two such rows. The first steps carry the one-off costs (kernel compilation, cuDNN
    autotuning, caches warming), which a short probe must not spread over a whole run's steps."""
    with Path(history).open(newline="") as handle:
        rows = [
            (int(r["step"]), float(r["elapsed_s"]))
            for r in csv.DictReader(handle)
            if r.get("train_loss") not in (None, "") and r.get("val_acc") in (None, "")
        ]
    if len(rows) < 2 or rows[-1][0] <= rows[0][0]:
        return None
    (first_step, first_s), (last_step, last_s) = rows[0], rows[-1]
    step_s = (last_s - first_s) / (last_step - first_step)
    return step_s, max(0.0, first_s - first_step * step_s)


def cost_from_run(metrics: dict, history: Path, beyond_elapsed_s: float, source: str, steady: bool = False) -> Cost:
    """The cost a finished run shows: its ``metrics.json``, ``history.csv`` and seconds beyond ``elapsed_s``.
    ``steady`` (a probe): seconds per step from the rows after the first (``steady_step_s``), the first
    steps' extra seconds counted once, in the fixed part."""
    steps = int(metrics["steps"])
    if steps < 1 or not metrics.get("train_time_s"):
        raise ValueError(f"{source}: the run trained no step (steps {steps}); nothing to time")
    train_s, elapsed_s = float(metrics["train_time_s"]), float(metrics.get("elapsed_s", metrics["train_time_s"]))
    passes = validation_rows(history)
    per_epoch = metrics.get("steps_per_epoch") or max(1, round(steps / float(metrics["epochs"])))
    step_s, warm_up_s = train_s / steps, 0.0
    measured = steady_step_s(history) if steady else None
    if measured is not None:
        step_s, warm_up_s = measured
    return Cost(
        step_s=step_s,
        val_pass_s=max(0.0, elapsed_s - train_s) / max(passes, 1),
        fixed_s=max(0.0, beyond_elapsed_s) + warm_up_s,
        steps_per_epoch=int(per_epoch),
        device=str(metrics.get("device", "?")),
        source=source,
    )
