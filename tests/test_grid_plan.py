"""--plan: GPU-minutes per cell from a timed probe (CPU, smoke profile) or from records; the cost model's counts."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest
from conftest import ROOT, SHORT_LISTOPS_OVERRIDES, read_json, run_cli

from repro.grid.cells import GridError
from repro.grid.costs import PROJECTION_AFTER_S, PROJECTION_WINDOW_S, planned_steps, seconds_left, validations
from repro.grid.plan import read_plan

GRID = [sys.executable, "-m", "repro.grid"]  # lra-grid, run with cwd=ROOT: this checkout's package


def _loop_validations(steps: int, per_epoch: int, every: int | None) -> int:
    """The validations repro/training/ runs: at an epoch end or every ``every`` steps, and after the loop unless
    its last step had one (a step-by-step reference of the training loop's rule)."""
    count, last = 0, -1
    for step in range(1, steps + 1):
        if step % per_epoch == 0 or (every and step % every == 0):
            count, last = count + 1, step
    return count + (last != steps)


@pytest.mark.parametrize(
    "epochs, per_epoch, max_steps, every",
    [
        (2, 3000, 5000, 250),
        (29, 703, 20000, 500),
        (200, 175, 35000, None),
        (2, 4, None, None),
        (3, 7, 20, 6),
        (1, 10, 3, None),
        (5, 12, 50, 8),
    ],
)
def test_validations_count_as_the_training_loop_does(epochs, per_epoch, max_steps, every):
    train = {"epochs": epochs, "max_steps": max_steps, "eval_every_steps": every}
    steps = planned_steps(train, per_epoch)
    assert steps == min(epochs * per_epoch, max_steps if max_steps is not None else epochs * per_epoch)
    assert validations(train, steps, per_epoch, step_s=0.1) == _loop_validations(steps, per_epoch, every)


@pytest.mark.parametrize(
    "train, expected",
    [
        ({"epochs": 200, "max_steps": 62400, "stop_at_step": 15600}, 15600),  # 50 of 200 Pathfinder epochs
        ({"epochs": 2, "stop_at_step": 3}, 3),
        ({"epochs": 2, "max_steps": 5, "stop_at_step": 7}, 5),
        ({"epochs": 2, "stop_at_step": None}, 8),
    ],
)
def test_planned_steps_end_where_the_loop_ends_a_truncated_protocol(train, expected):
    """``train.stop_at_step`` ends the loop before its schedule's end: the cost counts the steps trained."""
    assert planned_steps(train, 4 if train["epochs"] == 2 else 312) == expected


def test_a_file_that_is_not_a_plan_names_the_missing_columns(tmp_path):
    path = tmp_path / "plan.csv"
    path.write_text("arm,task,seed\nlra_local,text,0\n")
    with pytest.raises(GridError, match="plan.csv: not a plan file \\(no column minutes, planned_steps\\)"):
        read_plan(path)
    path.write_text("arm,task,seed,minutes,planned_steps\nlra_local,text,zero,3.5,10\n")
    with pytest.raises(GridError, match="plan.csv:2: seed, minutes or planned_steps is not a number"):
        read_plan(path)


def _plan(tmp_path, shared_cache, *args):
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "common: [" + ", ".join(["profile=smoke", *SHORT_LISTOPS_OVERRIDES]) + "]\n"
        "cells:\n  - {arms: [locality_k5], tasks: [listops], seeds: [0, 1]}\n"
    )
    extra = [
        "--",
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={shared_cache}",
        f"data_dir={tmp_path / 'none'}",
        "task.source=generated",
    ]
    done = subprocess.run(
        [*GRID, str(grid), "--plan", *args, *extra],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with (tmp_path / "out" / "grid_plan.csv").open() as handle:
        return done.stdout, list(csv.DictReader(handle))


@pytest.mark.slow
def test_plan_from_a_probe_then_from_the_records(tmp_path, shared_cache):
    """A 4-step probe (validated at steps 2 and 4) plans both seeds; once seed 0 has a record, the plan reads
    it (own record: its own wall time)."""
    out, rows = _plan(tmp_path, shared_cache, "--probe-steps", "4", "--slot-minutes", "0.001")
    assert [row["source"] for row in rows] == ["probe of 4 steps"] * 2
    assert all(float(row["minutes"]) > 0 and row["over_slot"] == "yes" for row in rows)
    assert "2 over the 0.001-minute slot" in out and out.count("OVER SLOT") == 2
    assert not (tmp_path / "out" / "runs").exists()  # the probe trained in a scratch folder
    record = run_cli(
        "arm=locality_k5",
        "task=listops",
        "profile=smoke",
        *SHORT_LISTOPS_OVERRIDES,
        "progress=false",
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={shared_cache}",
        f"data_dir={tmp_path / 'none'}",
        "task.source=generated",
    )
    assert record.returncode == 0, record.stderr[-2000:]
    metrics = read_json(tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed0" / "metrics.json")
    assert [int(row["planned_steps"]) for row in rows] == [metrics["planned_steps"]] * 2
    _, rows = _plan(tmp_path, shared_cache)
    assert rows[0]["source"].startswith("own record") and rows[1]["source"].startswith("record of seed0")
    assert float(rows[0]["steps_per_s"]) == pytest.approx(metrics["steps"] / metrics["train_time_s"], abs=1e-3)
    # the cost model counts the record's validations as its training loop ran them, so it gives back its wall time
    assert float(rows[0]["minutes"]) * 60 == pytest.approx(metrics["wall_time_s"], abs=0.6)
    assert int(rows[0]["validations"]) == sum(
        1
        for line in csv.DictReader(
            (tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed0" / "history.csv").open()
        )
        if line["val_acc"]
    )


def test_a_probe_s_step_time_leaves_its_first_steps_one_off_costs_out(tmp_path):
    from repro.grid.costs import cost_from_run, history_rows, steady_step_s

    history = tmp_path / "history.csv"
    history.write_text(
        "step,epoch,lr,train_loss,val_loss,val_acc,elapsed_s\n"
        "50,0.1,0.001,2.0,,,10.0\n100,0.2,0.001,1.9,,,11.0\n150,0.3,0.001,1.8,,,12.0\n"
        "150,0.3,,,1.7,0.4,12.5\n"
    )
    step_s, warm_up_s = steady_step_s(history_rows(history))
    assert step_s == pytest.approx(0.02) and warm_up_s == pytest.approx(9.0)  # 50 steps took 10 s, not 1 s
    metrics = {"steps": 150, "train_time_s": 12.0, "elapsed_s": 12.5, "epochs": 0.3, "steps_per_epoch": 500}
    probe = cost_from_run(metrics, history, 3.0, "probe", steady=True)
    record = cost_from_run(metrics, history, 3.0, "record")
    assert probe.step_s == pytest.approx(0.02) and probe.fixed_s == pytest.approx(12.0)
    assert record.step_s == pytest.approx(12.0 / 150) and record.fixed_s == pytest.approx(3.0)
    # one validation (an older probe's): its pass is the time beyond training, as before two-validation probes
    step_s = (12.0 - 10.0) / (150 - 50)
    assert probe.step_s == pytest.approx(step_s) and probe.fixed_s == pytest.approx(3.0 + 10.0 - 50 * step_s)
    assert probe.val_pass_s == pytest.approx(12.5 - 12.0) == record.val_pass_s


def test_a_probe_s_first_validation_compiles_once_and_its_last_times_a_pass(tmp_path):
    """Sinkhorn on text (an H200): the halfway validation took ~14 s (compiling the evaluation), the last 1.1 s."""
    from repro.grid.costs import cell_seconds, cost_from_run

    train = [(50, 31.0), (100, 33.5), (150, 36.006), (200, 51.579), (250, 53.172), (300, 55.158)]
    rows = [f"{step},{step / 1000},0.001,1.0,,,{elapsed}" for step, elapsed in train]
    rows.insert(3, "150,0.15,,,0.7,0.5,36.006")
    rows.append("300,0.3,,,0.6,0.6,55.158")
    history = tmp_path / "history.csv"
    history.write_text("step,epoch,lr,train_loss,val_loss,val_acc,elapsed_s\n" + "\n".join(rows) + "\n")
    metrics = {"steps": 300, "train_time_s": 41.206, "elapsed_s": 56.290, "epochs": 0.3, "steps_per_epoch": 1000}
    probe = cost_from_run(metrics, history, 3.0, "probe", steady=True)
    step_s = ((36.006 - 31.0) + (55.158 - 51.579)) / 200  # 150 -> 200 holds the first validation: left out
    steady_pass = 56.290 - 55.158
    first_pass = 51.579 - 36.006 - 50 * step_s
    assert probe.step_s == pytest.approx(step_s) and probe.val_pass_s == pytest.approx(steady_pass)
    assert probe.fixed_s == pytest.approx(3.0 + (31.0 - 50 * step_s) + (first_pass - steady_pass))
    # the cost model gives back the probe's own time: its fixed part, 300 steps and 2 steady passes
    _, passes, seconds = cell_seconds(probe, {"epochs": 1, "max_steps": 300, "eval_every_steps": 150})
    assert passes == 2 and seconds == pytest.approx(3.0 + 56.290)
    # a last validation the loop's finish ran is not on the clock: the passes' mean, as before
    untimed = cost_from_run({**metrics, "elapsed_s": 55.158}, history, 3.0, "probe", steady=True)
    assert untimed.val_pass_s == pytest.approx((55.158 - 41.206) / 2) and untimed.step_s == pytest.approx(step_s)


def test_a_probe_validates_halfway_and_at_its_last_step():
    from repro.grid.plan import probe_overrides

    assert {"++train.max_steps=200", "++train.eval_every_steps=100"} <= set(probe_overrides(200))
    assert "++train.log_every=50" in probe_overrides(300)  # the default's rows: 3 in each half
    assert "++train.eval_every_steps=301" in probe_overrides(301)  # 150 does not divide 301: the last step only


def test_the_plan_reports_each_cell_s_data_wait_share_and_its_range_per_task(tmp_path, capsys):
    from repro.grid.costs import cost_from_run
    from repro.grid.plan import data_wait_by_task, print_plan

    history = tmp_path / "history.csv"
    history.write_text("step,epoch,lr,train_loss,val_loss,val_acc,elapsed_s\n10,0.1,0.001,2.0,,,1.0\n")
    metrics = {"steps": 10, "train_time_s": 1.0, "elapsed_s": 1.0, "epochs": 0.1, "data_wait_share": 0.0712}
    assert cost_from_run(metrics, history, 0.0, "record").data_wait_share == 0.0712
    assert cost_from_run({**metrics, "data_wait_share": None}, history, 0.0, "record").data_wait_share is None

    def row(arm, task, share):
        counts = {"planned_steps": 10, "steps_per_s": 10.0, "validations": 1, "minutes": 1.0, "over_slot": "no"}
        return {"arm": arm, "task": task, "seed": 0, "data_wait_share": share, "device": "cpu", "source": "p", **counts}

    rows = [row("a", "image", 0.0712), row("b", "image", 0.026), row("a", "text", 0.0125), row("b", "text", "")]
    assert data_wait_by_task(rows) == {"image": (0.026, 0.0712), "text": (0.0125, 0.0125)}
    print_plan(rows, 30)
    out = capsys.readouterr().out
    assert "[plan] data-wait share of step time, image: 2.6-7.1% (sampled steps)" in out
    assert "[plan] data-wait share of step time, text: 1.2-1.2% (sampled steps)" in out
    assert "  7.1%" in out


def test_seconds_left_projects_the_pace_of_the_last_window():
    """Pace over the last window of the run's own clock (10 steps a minute here, after a fast start), nothing
    before PROJECTION_AFTER_S of it has been seen, nothing left past the planned steps."""
    fast_start = [(100 * i, 6.0 * i) for i in range(1, 11)]  # 1,000 steps in the first minute
    slow = [(1000 + 10 * i, 60.0 + 60.0 * i) for i in range(1, 10)]  # then 10 a minute
    seen = fast_start + slow
    assert seen[-1][1] - seen[0][1] >= PROJECTION_AFTER_S and PROJECTION_WINDOW_S == 120.0
    assert seconds_left(seen, 2090) == 1000 * 6.0  # 1,000 steps at 6 s each
    assert seconds_left(seen[:14], 2090) is None  # 294 s seen: too early
    assert seconds_left(seen, 500) == 0.0
