"""A run's log.txt, its stdout closed by the reader (SIGPIPE) as a resumable stop, and logger=tensorboard."""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RUN, composed, read_json, run_cli

from repro.run import validate
from repro.training import console
from repro.training.scalars import TENSORBOARD_DIR

# Smoke ListOps of 50-300 tokens at the smoke sizes: 16 steps an epoch, 32 in all.
SHORT_TREES = ["task.max_len=300", "task.generate.min_len=50", "task.generate.max_len=300"]
ARGS = ["arm=locality_k5", "task=listops", "profile=smoke", *SHORT_TREES]


def common(out: Path, cache: Path, progress: bool = False) -> list[str]:
    return [f"output_dir={out}", f"cache_dir={cache}", f"progress={str(progress).lower()}"]


def run_folder(out: Path) -> Path:
    return out / "runs" / "locality_k5" / "listops" / "smoke" / "seed0"


def logged(out: Path) -> list[str]:
    return (run_folder(out) / console.LOG_FILE).read_text().splitlines()


def read_csv(path: Path) -> list[dict]:
    with open(path) as handle:
        return list(csv.DictReader(handle))


def test_a_smoke_run_logs_the_lines_it_printed(tmp_path, shared_cache):
    done = run_cli(*ARGS, *common(tmp_path, shared_cache))
    assert done.returncode == 0, done.stderr[-3000:]
    header, *lines = logged(tmp_path)
    command = " ".join([Path(sys.executable).name, str(RUN), *ARGS, *common(tmp_path, shared_cache)])
    assert header.startswith("# ") and header.endswith(f" UTC: {command}")
    printed = done.stdout.splitlines()
    assert printed[0].startswith("[locality_k5/listops] smoke seed 0 on cpu: ")
    assert [line for line in lines if line in printed] == printed  # every line, in its order
    assert sum(line.startswith("eval step ") for line in lines) == 2  # the two epochs' validations


def test_the_log_keeps_the_last_drawing_of_a_bar_and_skips_bars_drawn_below_it(tmp_path, monkeypatch):
    terminal = io.StringIO()
    monkeypatch.setattr(sys, "stderr", terminal)
    with console.run_console(tmp_path / "log.txt", fresh=True):
        sys.stderr.write("\rtrain:  10%")
        sys.stderr.write("\rtrain:  50%")
        sys.stderr.write("\n\rval: 3/4\x1b[A")  # a nested bar, drawn one line below
        sys.stderr.write("\rtrain: 100%\n")
        print("done", file=sys.stderr)
        sys.stdout.writelines(["one\n", "two\n"])
        sys.stderr.write("\rgenerating: 99%\r          \r")  # a bar that clears itself
        sys.stderr.write("partial")
    assert sys.stderr is terminal
    _, *lines = (tmp_path / "log.txt").read_text().splitlines()
    assert lines == ["train:  50%", "train: 100%", "done", "one", "two", "partial"]
    assert terminal.getvalue().endswith("\rgenerating: 99%\r          \rpartial")  # the terminal gets it all
    with console.run_console(tmp_path / "log.txt", fresh=False):
        print("again")
    log = (tmp_path / "log.txt").read_text().splitlines()
    assert len(log) == 9 and log[:7] == [log[0], *lines]  # appended: the first opening's lines stay
    assert log[7].startswith("# ") and log[8] == "again"  # after a header of its own


def test_a_closed_stdout_checkpoints_exits_141_and_the_run_resumes_to_the_uninterrupted_metrics(tmp_path, shared_cache):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    done = run_cli(*ARGS, *common(whole, shared_cache))
    assert done.returncode == 0, done.stderr[-3000:]

    # `experiments/run.py ... | head -1`: the reader takes the first line and goes.
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(RUN), *ARGS, *common(cut, shared_cache)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=300) == 128 + signal.SIGPIPE, stderr[-3000:]
    assert first.startswith("[locality_k5/listops] smoke seed 0 on cpu: ")
    # The next line is the first validation's, at the end of epoch 1 (16 steps): the run stops there.
    assert "[locality_k5/listops] stopped by SIGPIPE at step 16; checkpoint " in stderr, stderr[-3000:]
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
    assert (run_folder(cut) / "checkpoints" / "last.pt").exists()
    assert not (run_folder(cut) / "metrics.json").exists()
    lines = logged(cut)
    assert "stdout was closed by its reader (broken pipe): its lines go to this log only" in lines
    assert any(line.startswith("eval step 16 ") for line in lines)  # what the reader missed is in the log
    assert [line for line in lines if "stopped by SIGPIPE" in line] == [line for line in stderr.splitlines() if
                                                                        "stopped by SIGPIPE" in line]  # fmt: skip

    resumed = run_cli(*ARGS, *common(cut, shared_cache))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "from step 16" in resumed.stdout
    a, b = read_json(run_folder(whole) / "metrics.json"), read_json(run_folder(cut) / "metrics.json")
    for key in ("best_val_acc", "best_val_step", "test_acc", "test_loss", "steps"):
        assert a[key] == b[key], (key, a[key], b[key])
    assert read_csv(run_folder(whole) / "predictions.csv") == read_csv(run_folder(cut) / "predictions.csv")
    log = logged(cut)
    assert sum(line.startswith("# ") for line in log) == 2 and log[: len(lines)] == lines  # appended on resume


def test_an_unknown_logger_is_refused_in_one_line(tmp_path, shared_cache):
    done = run_cli(*ARGS, *common(tmp_path, shared_cache), "logger=wandb")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: logger=wandb: not a logger; use logger=none (the default) or logger=tensorboard"
    ]
    assert not (tmp_path / "runs").exists()


def test_logger_tensorboard_without_the_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard raises ImportError
    typed = ["arm=locality_k5", "task=listops", "logger=tensorboard"]
    with pytest.raises(validate.BadInput) as refused:
        validate.check(composed(*typed), typed)
    assert str(refused.value) == (
        'logger=tensorboard: the tensorboard package is not installed; pip install -e ".[tensorboard]" '
        "(or pip install tensorboard), or use logger=none"
    )


def read_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def history_scalars(history: list[dict], column: str) -> list[tuple[int, float]]:
    return [(int(row["step"]), float(row[column])) for row in history if row[column]]


def test_logger_tensorboard_writes_the_history_as_scalars_also_across_a_resume(tmp_path, shared_cache):
    pytest.importorskip("tensorboard", reason="logger=tensorboard needs the tensorboard package (its extra)")
    # Checkpoints at steps 12 and 24; the first run is killed after step 20, having logged step 16's losses
    # and validation after its last checkpoint. The resumed run trains steps 13-20 again.
    args = [
        *ARGS,
        *common(tmp_path, shared_cache, progress=True),
        "logger=tensorboard",
        "++train.checkpoint_every_steps=12",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(RUN), *args, "debug.pause_at_step=20"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    for line in proc.stdout:
        if line.startswith("paused after step 20"):
            break
    proc.kill()  # no checkpoint: what it wrote after step 12 is trained again
    proc.wait(timeout=60)
    proc.stdout.close()
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "from step 12" in done.stdout
    folder = run_folder(tmp_path)
    assert len(list((folder / TENSORBOARD_DIR).glob("events.out.tfevents.*"))) == 2  # one per process
    scalars = read_scalars(folder / TENSORBOARD_DIR)
    history = read_csv(folder / "history.csv")
    assert 16 in [int(row["step"]) for row in history if row["val_acc"]]
    for tag, column in {
        "train/loss": "train_loss",
        "train/lr": "lr",
        "val/loss": "val_loss",
        "val/acc": "val_acc",
    }.items():
        got, want = scalars[tag], history_scalars(history, column)
        assert [step for step, _ in got] == [step for step, _ in want], tag  # each step once, as recorded
        assert [value for _, value in got] == pytest.approx([value for _, value in want], rel=1e-6), tag  # float32
    metrics = read_json(folder / "metrics.json")
    assert scalars["test/acc"] == [(32, pytest.approx(metrics["test_acc"]))]
    assert scalars["test/acc_last"] == [(32, pytest.approx(metrics["test_acc_last"]))]
    # With bars on, the log keeps the training bar's last drawing.
    assert any(line.startswith("train listops: 100%|") and "32/32" in line for line in logged(tmp_path))


def test_profile_budget_on_a_cpu_starts_with_one_line_saying_what_it_costs(tmp_path, shared_cache):
    tiny = ["+model.depth=1", "+model.d_model=16", "+model.d_hidden=16"]
    sizes = ["task.generate.n_train=32", "task.generate.n_val=16", "task.generate.n_test=16"]
    args = ["arm=locality_k61", "task=listops", "profile=budget", "budget.minutes=0.01", *SHORT_TREES, *sizes, *tiny]
    done = run_cli(*args, f"output_dir={tmp_path}", f"cache_dir={shared_cache}", "progress=false")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.splitlines()[0] == (
        "[locality_k61/listops] warning: profile=budget on a CPU trains the full data and model: a step takes "
        "seconds to minutes, generated data (ListOps, Pathfinder) is drawn first (minutes, once), and the 0.01 min "
        "budget counts training only: scoring the validation and test sets after it takes tens of minutes on a few "
        "cores; profile=smoke is the profile for a CPU"
    )


def test_the_training_bar_counts_to_the_step_that_ends_the_run(tmp_path, shared_cache):
    # A truncated protocol: 32 steps planned (the schedule's), training ends at step 20.
    done = run_cli(*ARGS, *common(tmp_path, shared_cache, progress=True), "++train.stop_at_step=20")
    assert done.returncode == 0, done.stderr[-3000:]
    bars = [line for line in logged(tmp_path) if line.startswith("train listops: ")]
    assert bars and bars[-1].startswith("train listops: 100%|") and "| 20/20 [" in bars[-1], bars
    assert read_json(run_folder(tmp_path) / "metrics.json")["steps"] == 20
