"""Fabricate run records in the exact format the runner writes (repro.run.runner.write_record).

The files come from the real writers (``write_record`` for history, predictions and
metrics; ``records.write_atomic`` for config.yaml), so a change to the record format
shows up here too. Accuracies are controlled through per-example correctness.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from repro import records
from repro.run.runner import write_record

SMOKE_LISTOPS = {
    "name": "listops",
    "builder": "listops",
    "source": "generated",
    "official_subdir": "listops-1000",
    "max_len": 2000,
    "data_seed": 0,
    "generate": {
        "n_train": 128,
        "n_val": 32,
        "n_test": 64,
        "max_depth": 10,
        "max_args": 10,
        "min_len": 500,
        "max_len": 2000,
    },
}


def fixed_labels(task: str, n: int, num_classes: int = 2, data_seed: int = 0) -> np.ndarray:
    """A fixed label vector per task (the same test set for every arm and seed)."""
    return np.random.default_rng([data_seed, sum(map(ord, task))]).integers(0, num_classes, n)


def correctness(n: int, accuracy: float, rng: np.random.Generator) -> np.ndarray:
    """0/1 per example with exactly round(accuracy * n) ones, in random positions."""
    k = int(round(accuracy * n))
    out = np.zeros(n, dtype=int)
    out[rng.permutation(n)[:k]] = 1
    return out


def make_record(
    runs_root: Path,
    arm: str,
    task: str,
    seed: int,
    *,
    profile: str = "budget",
    labels: np.ndarray,
    accuracy: float,
    num_classes: int = 2,
    device: str = "NVIDIA H200",
    task_cfg: dict | None = None,
    examples_per_s: float = 1000.0,
    peak_mem: int | None = 2**30,
    status: str = "complete",
    write_metrics: bool = True,
    techniques: str | None = None,
    steps: int = 20,
    batch_size: int | None = None,
    n_train: int | None = None,
    train_counts: dict | None = None,
    data: dict | None = None,
) -> Path:
    """One record folder ``runs_root/arm/task/profile/seed<k>``; returns it.

    ``batch_size`` and ``n_train``: written as ``train_settings.batch_size`` and ``data.sizes.train``
    (what the protocol share reads) when given; records without them have an unknown share. ``train_counts``:
    ``data.class_counts.train`` (label -> count), what the majority-class baseline reads. ``data``: the
    record's ``data`` block to start from (default ``{"source": "fake"}``)."""
    rng = np.random.default_rng([seed, sum(map(ord, arm)), sum(map(ord, task))])
    labels = np.asarray(labels, dtype=int)
    right = correctness(labels.size, accuracy, rng)
    wrong_label = (labels + 1 + rng.integers(0, num_classes - 1, labels.size)) % num_classes
    predictions = np.where(right == 1, labels, wrong_label)
    test_acc = float((predictions == labels).mean())
    run_dir = Path(runs_root) / arm / task / profile / f"seed{seed}"
    config = {
        "subset": None,
        "arm": arm,
        "task": task_cfg or {"name": task, "data_seed": 0},
        "profile": profile,
        "seed": seed,
        "model": {"backbone": "fake"},
        "train": {"lr": 0.001},
        "device": "auto",
    }
    if techniques is not None:  # the runner's techniques block: name and per-task augment
        config["techniques"] = {"name": techniques, "augment": {}}
    records.write_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(config)))
    history = [
        {"step": 10, "epoch": 0.5, "lr": 0.001, "train_loss": 1.0},
        {"step": 20, "epoch": 1.0, "val_loss": 0.9, "val_acc": test_acc, "elapsed_s": 3.0},
    ]
    metrics = {
        "status": status,
        "arm": arm,
        "task": task,
        "seed": seed,
        "profile": profile,
        "best_val_acc": test_acc,
        "best_val_step": steps,
        "test_acc": test_acc,
        "steps": steps,
        "epochs": 1.0,
        "wall_time_s": 4.0,
        "train_time_s": 3.0,
        "train_examples_per_s": examples_per_s,
        "peak_gpu_mem_bytes": peak_mem,
        "device": device,
        "versions": {"python": "3.11.7", "torch": "2.11.0+cu130", "cuda": "13.0", "numpy": "2.4.6", "repro": "0.1.0"},
        "git_commit": "0123456789abcdef0123456789abcdef01234567",
        "data": dict(data or {"source": "fake"}),
        "budget_minutes": 3.0 if profile == "budget" else None,
    }
    if batch_size is not None:
        metrics["train_settings"] = {"batch_size": batch_size}
    if n_train is not None:
        metrics["data"]["sizes"] = {"train": n_train}
    if train_counts is not None:
        metrics["data"]["class_counts"] = {"train": {str(k): int(v) for k, v in train_counts.items()}}
    assert set(records.METRIC_FIELDS) <= set(metrics)
    rows = [
        {"index": i, "prediction": int(p), "label": int(y)}
        for i, (p, y) in enumerate(zip(predictions, labels, strict=True))
    ]
    if write_metrics:
        write_record(run_dir, history, rows, metrics)
    else:  # a run still in progress: history and predictions, no metrics.json
        records.write_csv(
            run_dir / "history.csv", history, ["step", "epoch", "lr", "train_loss", "val_loss", "val_acc", "elapsed_s"]
        )
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    (run_dir / "checkpoints" / "last.pt").write_bytes(b"not a real checkpoint")
    return run_dir
