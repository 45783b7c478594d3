"""Scaling out: DDP under torchrun, Hydra sweeps, preemption signals, checkpoint fallback.

Every run here is the smoke profile on CPU (ListOps, 32 steps); the reference is one
uninterrupted single-process run computed once per module.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, RUN, read_json, run_cli

from repro.training import RunInterrupted, TrainSettings, train
from repro.training.checkpoints import load_resume_checkpoint, save_checkpoint
from repro.training.distributed import DistContext

ARGS = [
    "arm=locality_k5",
    "task=listops",
    "profile=smoke",
    "+train.eval_batch_size=12",
]  # 12: uneven eval batches (12, 12, 8)
COMPARED = ("best_val_acc", "best_val_step", "test_acc", "steps", "epochs")


def common(out: Path, cache: Path, generated: bool = True) -> list[str]:
    """A private output and an empty data folder; ``generated``: ask for generated ListOps (a named data
    folder never falls back to it)."""
    return [
        f"output_dir={out}",
        f"cache_dir={cache}",
        f"data_dir={out / 'no_data'}",
        "progress=false",
        *(["task.source=generated"] if generated else []),
    ]


def torchrun(script: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``script`` under ``torch.distributed.run`` with two local processes, one thread each."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script), *args]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode:  # whole, in the test's captured output: the assertion's message is cut short
        print(done.stdout, done.stderr, sep="\n")
    return done


def folder(out: Path, arm: str = "locality_k5", seed: int = 0) -> Path:
    return out / "runs" / arm / "listops" / "smoke" / f"seed{seed}"


def read_csv(path: Path) -> list[dict]:
    with open(path) as handle:
        return list(csv.DictReader(handle))


def assert_same_run(reference: Path, other: Path, loss_tol: float = 0.0) -> None:
    a, b = read_json(reference / "metrics.json"), read_json(other / "metrics.json")
    for key in COMPARED:
        assert a[key] == b[key], (key, a[key], b[key])
    assert abs(a["test_loss"] - b["test_loss"]) <= loss_tol, (a["test_loss"], b["test_loss"])
    assert read_csv(reference / "predictions.csv") == read_csv(other / "predictions.csv")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, shared_cache) -> Path:
    """One uninterrupted single-process run."""
    out = tmp_path_factory.mktemp("reference")
    done = run_cli(*ARGS, *common(out, shared_cache))
    assert done.returncode == 0, done.stderr[-3000:]
    return folder(out)


def test_ddp_two_processes_equal_one_process_with_the_same_global_batch(tmp_path, shared_cache, reference):
    out = tmp_path / "ddp"
    done = torchrun(RUN, *ARGS, *common(out, shared_cache))
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert done.stdout.count("best val") == 1 and "on cpu x2 processes" in done.stdout  # rank 0 alone reports
    records = sorted(p.relative_to(out) for p in out.rglob("metrics.json"))
    assert records == [folder(out).relative_to(out) / "metrics.json"], records
    run = folder(out)
    metrics = read_json(run / "metrics.json")
    assert metrics["data_parallel"] == {"processes": 2, "per_process_batch": 4, "backend": "gloo"}
    assert metrics["train_settings"]["batch_size"] == 8  # the global batch, as in the reference
    assert_same_run(reference, run, loss_tol=1e-4)
    # Every logged loss (training: the mean over the global batch; validation) agrees step by step.
    rows_a, rows_b = read_csv(reference / "history.csv"), read_csv(run / "history.csv")
    assert [(r["step"], r["lr"]) for r in rows_a] == [(r["step"], r["lr"]) for r in rows_b]
    for ra, rb in zip(rows_a, rows_b, strict=True):
        for key in ("train_loss", "val_loss"):
            if ra[key]:
                assert abs(float(ra[key]) - float(rb[key])) < 1e-4, (ra, rb)
    # The trained weights themselves match (gradients averaged over equal slices = the global-batch gradient)
    # after 32 Adam steps of lr 1e-3: one step of a different gradient moves a weight by about the learning
    # rate, reduction order by about 1e-6 on average (one thread a process: at most 1.5e-4 on a few of the
    # 10,240 conv weights, where Adam divides a near-zero gradient by its own size).
    wa = torch.load(reference / "checkpoints" / "last.pt", weights_only=False)["model"]
    wb = torch.load(run / "checkpoints" / "last.pt", weights_only=False)
    assert len(wb["rng_ranks"]) == 2
    for name, tensor in wa.items():
        difference = (tensor - wb["model"][name]).abs()
        assert difference.mean() < 1e-5 and difference.max() < 1e-3, (name, difference.mean(), difference.max())


@pytest.mark.slow
def test_ddp_processes_stop_on_rank_0s_budget_clock_at_the_same_step(tmp_path, shared_cache):
    """A time budget far shorter than the 32 smoke steps: every rank must leave the loop at the
    step rank 0's clock decides (a rank that stopped alone would leave the others waiting in a
    collective until the timeout)."""
    out = tmp_path / "ddp_budget"
    done = torchrun(RUN, *ARGS, "++train.budget_minutes=0.005", *common(out, shared_cache))
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    metrics = read_json(folder(out) / "metrics.json")
    assert metrics["stopped_by"] == "budget" and 1 <= metrics["steps"] < 32, (metrics["stopped_by"], metrics["steps"])
    assert metrics["elapsed_s"] >= 0.3
    assert len(torch.load(folder(out) / "checkpoints" / "last.pt", weights_only=False)["rng_ranks"]) == 2


@pytest.mark.slow
def test_ddp_ranks_follow_rank_0s_folder_without_a_shared_disk(tmp_path, shared_cache, reference):
    """Rank 1 gets an output folder of its own, as on a machine that does not share rank 0's disk:
    stopping, resuming, the best checkpoint and skipping a complete record all follow rank 0, and
    the result equals the uninterrupted single-process run."""
    out = tmp_path / "split"
    wrapper = tmp_path / "split_disk.py"
    wrapper.write_text(
        "import os, runpy, sys\n"
        "if os.environ['RANK'] != '0':\n"
        "    sys.argv = [a + '_rank1' if a.startswith('output_dir=') else a for a in sys.argv]\n"
        f"runpy.run_path({str(RUN)!r}, run_name='__main__')\n"
    )

    def launch(*extra: str) -> subprocess.CompletedProcess:
        return torchrun(wrapper, *ARGS, *common(out, shared_cache), *extra, timeout=300)

    first = launch("debug.sigterm_at_step=13")
    assert first.returncode != 0 and "stopped by SIGTERM at step 13" in first.stderr, (
        first.stdout[-2000:],
        first.stderr[-3000:],
    )
    run = folder(out)
    assert (run / "checkpoints" / "last.pt").exists() and not (run / "metrics.json").exists()
    assert not list(Path(f"{out}_rank1").rglob("*.pt")) and not list(Path(f"{out}_rank1").rglob("metrics.json"))

    resumed = launch()
    assert resumed.returncode == 0, (resumed.stdout[-2000:], resumed.stderr[-3000:])
    assert f"resuming {run} from step 13\n" in resumed.stdout
    assert_same_run(reference, run, loss_tol=1e-4)

    again = launch()  # complete on rank 0's disk, nothing on rank 1's: every rank skips
    assert again.returncode == 0, (again.stdout[-2000:], again.stderr[-3000:])
    assert "record complete" in again.stdout and "best val" not in again.stdout


def test_batch_not_divisible_by_the_processes_names_the_key(tmp_path):
    settings = TrainSettings(lr=1e-3, weight_decay=0.0, batch_size=7, epochs=1)
    with pytest.raises(ValueError, match=r"train.batch_size=7 is not divisible by the 2 processes"):
        train(
            torch.nn.Linear(2, 2), None, settings, 0, tmp_path, torch.device("cpu"), dist=DistContext(rank=0, world=2)
        )


@pytest.mark.slow
def test_a_2x2_sweep_writes_four_records_and_a_rerun_skips_them(tmp_path, shared_cache):
    out = tmp_path / "sweep"
    sweep = [
        "-m",
        "arm=locality_k5,locality_k61",
        "seed=0,1",
        "task=listops",
        "profile=smoke",
        "+train.max_steps=4",
        *common(out, shared_cache),
    ]
    done = run_cli(*sweep)
    assert done.returncode == 0, done.stderr[-3000:]
    cells = [folder(out, arm, seed) for arm in ("locality_k5", "locality_k61") for seed in (0, 1)]
    for cell in cells:
        metrics = read_json(cell / "metrics.json")
        assert metrics["status"] == "complete" and metrics["steps"] == 4, cell
        assert (cell.parent.name, cell.name) == ("smoke", f"seed{metrics['seed']}") and cell.parents[2].name == metrics[
            "arm"
        ]
    assert len(list(out.rglob("metrics.json"))) == 4
    assert len(list((out / "multirun").glob("*/multirun.yaml"))) == 1  # the sweep folder lives under output_dir
    stamps = {p: p.stat().st_mtime_ns for cell in cells for p in cell.rglob("*") if p.is_file()}

    again = run_cli(*sweep)
    assert again.returncode == 0, again.stderr[-3000:]
    skips = [
        line
        for line in again.stdout.splitlines()
        if "record complete" in line and line.endswith("skipping (force=true reruns it)")
    ]
    assert len(skips) == 4, again.stdout
    for cell in cells:
        assert sum(str(cell) in line for line in skips) == 1, (cell, skips)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert "best val" not in again.stdout


@pytest.mark.slow
def test_sigusr1_checkpoints_exits_138_and_the_resumed_run_equals_the_uninterrupted_one(
    tmp_path, shared_cache, reference
):
    out = tmp_path / "usr1"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(RUN), *ARGS, *common(out, shared_cache), "debug.pause_at_step=13"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        for line in proc.stdout:  # wait until the run is inside its training loop, after step 13
            lines.append(line)
            if "paused after step 13" in line:
                break
        else:
            raise AssertionError("".join(lines) + proc.stderr.read()[-3000:])
        proc.send_signal(signal.SIGUSR1)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGUSR1, stderr[-3000:]
    assert "stopped by SIGUSR1 at step 13" in stderr
    run = folder(out)
    assert not (run / "metrics.json").exists() and (run / "checkpoints" / "last.pt").exists()

    resumed = run_cli(*ARGS, *common(out, shared_cache))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming {run} from step 13\n" in resumed.stdout
    assert_same_run(reference, run)


@pytest.mark.slow
def test_a_corrupt_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, shared_cache, reference):
    out = tmp_path / "corrupt"
    killed = run_cli(*ARGS, *common(out, shared_cache), "debug.sigterm_at_step=13")
    assert killed.returncode == 128 + signal.SIGTERM, killed.stderr[-3000:]
    ckpts = folder(out) / "checkpoints"
    last, previous = ckpts / "last.pt", ckpts / "last.prev.pt"
    assert torch.load(previous, weights_only=False)["state"]["step"] == 8  # the checkpoint before (every 8 steps)
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])  # truncated, as by a full disk or a kill mid-copy

    resumed = run_cli(*ARGS, *common(out, shared_cache))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"warning: checkpoint {last}: sha256 differs from last.pt.sha256" in resumed.stderr
    assert f"falling back to {previous}" in resumed.stderr
    assert f"resuming {folder(out)} from step 8 (from last.prev.pt)" in resumed.stdout
    assert_same_run(reference, folder(out))


def test_no_readable_checkpoint_starts_over_and_says_so(tmp_path, capsys):
    last = tmp_path / "last.pt"
    save_checkpoint(last, {"format": 1, "step": 1})
    save_checkpoint(last, {"format": 1, "step": 2}, keep_previous=True)
    assert load_resume_checkpoint(last, torch.device("cpu"))[0]["step"] == 2
    (tmp_path / "last.pt.sha256").unlink()  # without its checksum, a load failure still tells
    last.write_bytes(b"not a checkpoint")
    state, source = load_resume_checkpoint(last, torch.device("cpu"))
    assert state["step"] == 1 and source.name == "last.prev.pt"
    assert f"warning: checkpoint {last}: cannot be loaded" in capsys.readouterr().err
    (tmp_path / "last.prev.pt").write_bytes(b"\0" * 10)
    assert load_resume_checkpoint(last, torch.device("cpu")) == (None, None)
    err = capsys.readouterr().err
    assert "no earlier checkpoint is readable" in err and "starting this run from step 0" in err


def test_an_interrupted_run_hands_the_signal_to_a_launcher_handler():
    """After checkpointing, a Python handler installed before training (submitit's requeue) still runs."""
    calls = []
    err = RunInterrupted(signal.SIGUSR1, 5, Path("last.pt"), lambda signum, frame: calls.append(signum))
    err.pass_on()
    assert calls == [signal.SIGUSR1]
    RunInterrupted(signal.SIGINT, 5, Path("last.pt"), signal.default_int_handler).pass_on()  # no KeyboardInterrupt
    RunInterrupted(signal.SIGTERM, 5, Path("last.pt"), signal.SIG_DFL).pass_on()


def test_several_slurm_tasks_without_torchrun_are_refused(monkeypatch):
    """Two copies of one run in one Slurm step would race on the same record: refuse, saying what to do."""
    from repro.training import distributed

    monkeypatch.setattr(distributed, "_CONTEXT", None)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    with pytest.raises(RuntimeError, match=r"runs 4 tasks but no torchrun environment .*tasks_per_node=1"):
        distributed.setup(torch.device("cpu"))
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "1")
    assert distributed.setup(torch.device("cpu")) == DistContext(device=torch.device("cpu"))


def test_a_sweep_member_without_data_is_reported_after_the_others_ran(tmp_path, shared_cache):
    out = tmp_path / "sweep"
    done = run_cli(
        "-m",
        "arm=locality_k5",
        "task=listops",
        "task.source=official,generated",
        "profile=smoke",
        "+train.max_steps=4",
        *common(out, shared_cache, generated=False),
    )
    assert done.returncode != 0
    assert "[locality_k5/listops] skipped: data missing" in done.stdout
    assert "sweep member arm=locality_k5 task=listops task.source=official profile=smoke" in done.stderr
    assert "ended with status 3" in done.stderr
    assert read_json(folder(out) / "metrics.json")["steps"] == 4  # the member after the failed one still ran


def test_batch_norm_under_several_processes_is_refused_with_the_reason(tmp_path, shared_cache):
    done = torchrun(RUN, *ARGS, "++model.norm=batch", *common(tmp_path, shared_cache))
    assert done.returncode != 0
    assert (
        "[locality_k5/listops] model.norm=batch under 2 processes: each would normalise its own part of the batch "
        "and keep its own running statistics; run it in one process, or use model.norm=layer"
    ) in done.stderr
    assert not list(tmp_path.rglob("metrics.json"))
