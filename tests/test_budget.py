"""Example budgets (repro/run/budget.py): every arm of one protocol trains the same number of examples."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import yaml
from conftest import SHORT_LISTOPS_OVERRIDES, composed, read_json, run_cli
from test_runner import common

from repro import records
from repro.run.budget import apply_example_budget
from repro.run.settings import resolve
from repro.tasks.base import Split, TaskData


def generated_task(n_train: int) -> TaskData:
    split = Split(np.zeros((n_train, 4), dtype=np.int64), np.zeros(n_train, dtype=np.int64))
    return TaskData(
        "listops", split, split, split, num_classes=10, vocab_size=20, max_len=4, info={"source": "generated"}
    )


def paper_examples(arm: str, task: str) -> int:
    """The protocol's training examples, read straight from the paper profile's composed settings."""
    run = resolve(composed(f"arm={arm}", f"task={task}", "profile=paper"))
    train, n_train = run["train"], run["task"]["generate"]["n_train"]
    steps = int(train["epochs"]) * (n_train // int(train["batch_size"]))
    if train.get("max_steps") is not None:
        steps = min(steps, int(train["max_steps"]))
    return steps * int(train["batch_size"])


def budget_train(arm: str, *overrides: str) -> dict:
    run = resolve(composed(f"arm={arm}", "task=listops", "profile=budget", *overrides))
    return apply_example_budget(run, generated_task(96_000))


def test_a_fraction_gives_the_arms_of_one_protocol_the_same_examples_and_no_wall_clock_cap():
    k5, k61 = (budget_train(arm, "budget.fraction=0.1") for arm in ("locality_k5", "locality_k61"))
    assert paper_examples("locality_k5", "listops") == paper_examples("locality_k61", "listops")  # one protocol
    expected = round(0.1 * paper_examples("locality_k5", "listops") / k5["batch_size"]) * k5["batch_size"]
    for train in (k5, k61):
        assert train["max_steps"] * train["batch_size"] == train["budget_examples"] == expected
        assert train["budget_minutes"] is None and train["budget_fraction"] == 0.1
        assert train["epochs"] * (96_000 // train["batch_size"]) >= train["max_steps"]  # epochs never cut it short


def test_a_fraction_of_a_step_capped_protocol_counts_its_steps():
    train = budget_train("lra_transformer", "budget.fraction=0.5")
    assert train["budget_examples"] == round(0.5 * paper_examples("lra_transformer", "listops") / 32) * 32


def test_an_example_count_is_the_same_across_protocols():
    counts = {
        arm: budget_train(arm, "budget.examples=64000")["budget_examples"]
        for arm in ("locality_k61", "lra_transformer", "rotary_transformer")
    }
    assert set(counts.values()) == {64000}, counts


def test_fraction_and_examples_together_are_refused():
    with pytest.raises(ValueError, match=r"^budget\.fraction=0\.1 and budget\.examples=64: give one of them$"):
        budget_train("locality_k5", "budget.fraction=0.1", "budget.examples=64")


def test_a_run_with_an_example_budget_trains_that_many_and_its_record_says_so(tmp_path, shared_cache):
    done = run_cli(
        "arm=locality_k5",
        "task=listops",
        "profile=smoke",
        *SHORT_LISTOPS_OVERRIDES,
        "+train.budget_examples=40",
        *common(tmp_path, shared_cache),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed0"
    metrics = read_json(folder / "metrics.json")
    assert metrics["steps"] == 5 and metrics["stopped_by"] == "steps"  # 40 examples at batch 8
    assert metrics["budget_examples"] == 40 and metrics["budget_fraction"] is None
    config = yaml.safe_load((folder / "config.yaml").read_text())
    assert config["train"]["budget_examples"] == 40 and config["train"].get("max_steps") is None  # as typed
    assert records.config_disagreements(config, metrics) == []  # the step cap it became is no disagreement
    with open(folder / "history.csv") as handle:
        assert max(int(row["step"]) for row in csv.DictReader(handle)) == 5


def test_a_fraction_typed_on_the_command_line_reads_the_protocol_inside_the_run(tmp_path, shared_cache):
    """The protocol is composed inside the running Hydra app (it once failed there: "GlobalHydra is already
    initialized"), and the run trains the fraction's examples at its own batch."""
    fraction = 3.5e-6
    done = run_cli(
        "arm=locality_k5",
        "task=listops",
        "profile=smoke",
        *SHORT_LISTOPS_OVERRIDES,
        f"+train.budget_fraction={fraction}",
        *common(tmp_path, shared_cache),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed0"
    metrics = read_json(folder / "metrics.json")
    assert metrics["train_settings"]["max_steps"] is not None
    assert records.config_disagreements(yaml.safe_load((folder / "config.yaml").read_text()), metrics) == []
    steps = max(1, round(fraction * paper_examples("locality_k5", "listops") / 8))  # smoke's batch of 8
    assert metrics["steps"] == steps > 1 and metrics["budget_examples"] == steps * 8
    assert metrics["budget_fraction"] == fraction


def test_a_run_stopped_at_a_step_is_the_uninterrupted_run_cut_there_with_its_schedule(tmp_path, shared_cache):
    """``train.stop_at_step`` ends training early without moving the schedule: every step up to the stop
    (learning rate and loss, logged at each step) equals the uninterrupted run's, and the record says why
    it ended. The cosine schedule's learning rate depends on the planned steps, so a squeezed schedule
    would show at once."""

    def run(out, *extra):
        schedule = ["+train.schedule=lra_cosine", "+train.log_every=1"]
        done = run_cli(
            "arm=locality_k5", "task=listops", "profile=smoke", *SHORT_LISTOPS_OVERRIDES, *schedule, *extra,
            *common(out, shared_cache),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        folder = out / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed0"
        with open(folder / "history.csv") as handle:
            rows = [r for r in csv.DictReader(handle) if r["train_loss"]]
        return read_json(folder / "metrics.json"), [(r["step"], r["lr"], r["train_loss"]) for r in rows]

    full, full_rows = run(tmp_path / "full")
    cut, cut_rows = run(tmp_path / "cut", "+train.stop_at_step=5")
    assert full["stopped_by"] == "steps" and full["steps"] == full["planned_steps"] > 5
    assert cut["stopped_by"] == "stop_at_step" and cut["steps"] == 5
    assert cut["planned_steps"] == full["planned_steps"]  # the schedule is the whole run's
    assert [r[0] for r in cut_rows] == ["1", "2", "3", "4", "5"]
    assert cut_rows == full_rows[:5] and len({r[1] for r in full_rows}) > 1  # the learning rate moves
