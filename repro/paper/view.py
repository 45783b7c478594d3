"""Bundles as the tables read them: a frame of their run records, their predictions, shares and baselines.

Each record's row holds its accuracy, the training examples it ran and their share of the
protocol's (``repro.run.protocol``), its budget and data source; per task, the trivial
baselines of the test set the records were scored on (``repro.analysis.baselines``).
"""

from __future__ import annotations

import json
import math
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis import baselines as trivial
from ..analysis import listops_roots
from ..bundle import BundleError, load_manifest, manifest_hash
from ..records import read_config
from ..run import protocol
from ..run.settings import CONF_DIR

PROFILE_ORDER = ("paper", "budget", "smoke")
GB = 1e9  # peak memory in GB of 10^9 bytes, as LRA Table 2 and our benchmark report it
COLUMNS = [
    "arm",
    "techniques",
    "task",
    "profile",
    "seed",
    "test_acc",
    "best_val_acc",
    "steps",
    "examples_per_s",
    "peak_mem_gb",
    "device",
    "path",
    "examples",
    "share",
    "share_note",
    "budget",
    "data",
    "epochs",
    "parameters",
]


def _float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def data_source(task: str, data: dict) -> str:
    """Where a record's data came from, in words (the record's ``data`` block)."""
    source = data.get("source")
    if task == "listops":
        return "generated ListOps" if source == "generated" else f"ListOps ({source} files)"
    if task in ("pathfinder", "pathx"):
        name = "Pathfinder" if task == "pathfinder" else "Path-X"
        return f"generated {name}" if source == "generated" else f"{name} ({source} files)"
    if task == "text":
        return "IMDb, exact" + (" (JSONL bundle)" if source == "bundle" else f" ({source} files)")
    if task == "image":
        return "CIFAR-10, lossy JPEG proxy" if data.get("proxy") else f"CIFAR-10 ({source} files)"
    if task == "retrieval":
        return f"AAN ({source} files)"
    return str(source or "unknown")


def _row(record: str, metrics: dict, conf_dir: Path, arm_dirs: tuple[str, ...] = ()) -> dict:
    config = read_config(Path(record) / "config.yaml")
    techniques = (config.get("techniques") or {}).get("name") or "none"
    peak = metrics.get("peak_gpu_mem_bytes")
    share, note = protocol.share(metrics, metrics["arm"], metrics["task"], techniques, conf_dir, arm_dirs)
    return {
        "arm": metrics["arm"],
        "techniques": techniques,
        "task": metrics["task"],
        "profile": metrics["profile"],
        "seed": int(metrics["seed"]),
        "test_acc": 100.0 * float(metrics["test_acc"]),
        "best_val_acc": 100.0 * float(metrics["best_val_acc"]),
        "steps": metrics.get("steps"),
        "examples_per_s": _float(metrics.get("train_examples_per_s")),
        "peak_mem_gb": float(peak) / GB if peak else math.nan,
        "device": metrics.get("device"),
        "path": record,
        "examples": protocol.trained_examples(metrics),
        "share": share,
        "share_note": note,
        "budget": protocol.budget_label(metrics),
        "data": data_source(metrics["task"], metrics.get("data") or {}),
        "epochs": _float(metrics.get("epochs")),
        "parameters": _float(
            metrics.get("parameters")
        ),  # the parameters of the model the run built (repro/run/runner.py)
    }


class BundleView:
    """The records of one or more bundles (each record in one of them), those of one profile shown;
    predictions and baselines read on demand. ``path``, ``manifest``, ``hash``: the first bundle's
    (its benchmark records are the ones read); ``paths``, ``manifests``, ``hashes``: every bundle's.
    A row's ``path`` is its record folder (bundle folder included)."""

    def __init__(
        self,
        paths: list[Path],
        profile: str | None,
        conf_dir: Path = CONF_DIR,
        leave_out: list[Path] | None = None,
        arm_dirs: tuple[str, ...] = (),
    ):
        """``leave_out``: record folders of these bundles not to show (each must be one of their records);
        ``arm_dirs``: config folders holding arms of your own, for their protocol (``lra-paper --config-dir``)."""
        self.paths = [Path(p) for p in paths]
        self.arm_dirs = tuple(str(d) for d in arm_dirs)
        if not self.paths:
            raise BundleError("no bundle given")
        self.path = self.paths[0]
        self._predictions: dict[str, pd.DataFrame] = {}
        self._metrics: dict[str, dict] = {}
        self.manifests = [load_manifest(p) for p in self.paths]
        self.hashes = [manifest_hash(p) for p in self.paths]
        self.manifest, self.hash = self.manifests[0], self.hashes[0]
        records = [
            (bundle / run["path"]).as_posix()
            for bundle, manifest in zip(self.paths, self.manifests, strict=True)
            for run in manifest["runs"]
        ]
        self.left_out = sorted(Path(p).as_posix() for p in leave_out or [])
        leaving, known = {Path(p).resolve() for p in self.left_out}, {Path(r).resolve() for r in records}
        unknown = [p for p in self.left_out if Path(p).resolve() not in known]
        if unknown:
            raise BundleError(f"--leave-out {unknown[0]}: not a record of the bundles given (give bundle/runs/...)")
        records = [r for r in records if Path(r).resolve() not in leaving]
        rows = [_row(record, self.metrics(record), conf_dir, self.arm_dirs) for record in records]
        frame = pd.DataFrame(rows, columns=COLUMNS)
        _refuse_repeated_records(frame)
        self.all_runs = frame.sort_values(["arm", "techniques", "task", "profile", "seed"]).reset_index(drop=True)
        present = list(dict.fromkeys(self.all_runs["profile"]))
        ranked = [p for p in PROFILE_ORDER if p in present] + sorted(p for p in present if p not in PROFILE_ORDER)
        if profile is not None and profile not in present:
            raise BundleError(f"--profile {profile}: the bundles hold {', '.join(sorted(present)) or 'no runs'}")
        self.profile = profile or (ranked[0] if ranked else "none")
        self.runs = self.all_runs[self.all_runs["profile"] == self.profile]
        self.other_profiles = {
            p: int((self.all_runs["profile"] == p).sum()) for p in sorted(present) if p != self.profile
        }

    @property
    def versions(self) -> list[str]:
        return [m["version"] for m in self.manifests]

    def seeds(self, arm: str | None, task: str) -> pd.DataFrame:
        """Records of ``arm`` (or ``arm+techniques``) on ``task`` in the profile shown, by seed."""
        if arm is None:
            return self.runs.iloc[0:0]
        name, _, techniques = arm.partition("+")
        chosen = self.runs[(self.runs["arm"] == name) & (self.runs["task"] == task)]
        return chosen[chosen["techniques"] == techniques] if techniques else chosen

    def accuracies(self, arm: str | None, task: str) -> list[float]:
        return self.seeds(arm, task)["test_acc"].tolist()

    def predictions(self, run_path: str) -> pd.DataFrame:
        """A record's predictions.csv sorted by example index (read once per view)."""
        if run_path not in self._predictions:
            frame = pd.read_csv(Path(run_path) / "predictions.csv")
            self._predictions[run_path] = frame.sort_values("index").reset_index(drop=True)
        return self._predictions[run_path]

    def config(self, run_path: str) -> dict:
        return read_config(Path(run_path) / "config.yaml")

    def metrics(self, run_path: str) -> dict:
        """A record's metrics.json (read once per view)."""
        if run_path not in self._metrics:
            self._metrics[run_path] = json.loads((Path(run_path) / "metrics.json").read_text())
        return self._metrics[run_path]

    def test_sets(self, seeds: pd.DataFrame) -> set[str]:
        """The digests of the test sets the records ``seeds`` saw (their metrics.json's ``data_digests``;
        records written before the digests were kept add none): more than one, and they saw different ones."""
        found = (self.metrics(path).get("data_digests") or {} for path in seeds["path"])
        return {json.dumps(digests["test"], sort_keys=True) for digests in found if "test" in digests}

    def correctness(self, seeds: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
        """[seeds, examples] 0/1 matrix and the labels, or None when the seeds saw different test sets (their
        test-set digests or their labels differ)."""
        if len(self.test_sets(seeds)) > 1:
            return None
        labels, rows = None, []
        for path in seeds["path"]:
            frame = self.predictions(path)
            if labels is None:
                labels = frame["label"].to_numpy()
            elif not np.array_equal(labels, frame["label"].to_numpy()):
                return None
            rows.append((frame["prediction"].to_numpy() == frame["label"].to_numpy()).astype(float))
        return (np.vstack(rows), labels) if rows else None

    def profile_note(self) -> str:
        note = (
            f"Ours: profile {self.profile}, test accuracy at the best-validation checkpoint (%), seeds' mean ± sd "
            "(n seeds)."
        )
        if self.other_profiles:
            shown = ", ".join(f"{n} record(s) of profile {p}" for p, n in self.other_profiles.items())
            note += f" Not shown: {shown}."
        if self.left_out:
            note += f" Left out (--leave-out): {', '.join(self.left_out)}."
        return note

    @cached_property
    def baselines(self) -> dict[str, tuple[list[trivial.Baseline], str]]:
        """Per task of the profile shown: (its trivial baselines, "" or why some are missing)."""
        return {task: task_baselines(self, task) for task in sorted(set(self.runs["task"]))}

    def baselines_of(self, task: str) -> list[trivial.Baseline]:
        """``task``'s trivial baselines (none when the task has no records or they cannot be computed)."""
        return self.baselines.get(task, ([], ""))[0]

    def strongest_baseline(self, task: str) -> trivial.Baseline | None:
        return trivial.strongest(self.baselines_of(task))

    @cached_property
    def baseline_variants(self) -> dict[str, list[tuple[str, trivial.Baseline]]]:
        """Per task: (what changed, the strongest baseline then) for each near tie of a baseline's label."""
        return {task: task_baseline_variants(self, task) for task in sorted(set(self.runs["task"]))}


def _refuse_repeated_records(frame: pd.DataFrame) -> None:
    """Each (arm, techniques, task, profile, seed) in one bundle only: the tables would count it twice."""
    keys = ["arm", "techniques", "task", "profile", "seed"]
    repeated = frame[frame.duplicated(keys, keep=False)]
    if not repeated.empty:
        first = repeated.sort_values("path").iloc[0]
        where = " and ".join(repeated[(repeated[keys] == first[keys]).all(axis=1)]["path"])
        raise BundleError(
            f"the record of {first.arm} {first.task} {first.profile} seed {first.seed} is in {where}: "
            "pass each record's bundle once"
        )


def _train_counts(view: BundleView, paths) -> dict | None:
    for path in paths:
        metrics = view.metrics(path)
        counts = ((metrics.get("data") or {}).get("class_counts") or {}).get("train")
        if counts:
            return counts
    return None


def task_baselines(view: BundleView, task: str) -> tuple[list[trivial.Baseline], str]:
    """The trivial baselines of ``task``'s test set, from the training labels the first record that describes
    them gives (ListOps: the bundle's root analysis of the test set)."""
    records = view.runs[view.runs["task"] == task]
    labels = [view.predictions(p)["label"].to_numpy() for p in records["path"]]
    if any(not np.array_equal(labels[0], other) for other in labels[1:]):
        return [], f"the {task} records were scored on different test sets"
    if task == "listops":
        stored = listops_analysis_of(view, records["path"])
        if stored is None:
            return [], "no root-operator analysis of this test set in the bundles"
        rows, summary = stored
        return [
            trivial.root_operator(summary["train"], rows),
            trivial.majority_class(trivial.listops_train_counts(summary["train"]), labels[0]),
        ], ""
    counts = _train_counts(view, records["path"])
    if not counts:
        return [], "no record has training label counts (data.class_counts.train)"
    return [trivial.majority_class(counts, labels[0])], ""


def task_baseline_variants(view: BundleView, task: str) -> list[tuple[str, trivial.Baseline]]:
    """``task_baselines`` with one near-tie label in a majority's place (repro/analysis/baselines.py), each
    as (what changed, the strongest of the task's baselines then)."""
    found, _ = view.baselines.get(task, ([], ""))
    if not found:
        return []
    records = view.runs[view.runs["task"] == task]
    labels = view.predictions(records["path"].iloc[0])["label"].to_numpy()
    if task == "listops":
        rows, summary = listops_analysis_of(view, records["path"])
        root, majority = found
        changed = [(w, [b, majority]) for w, b in trivial.root_operator_variants(summary["train"], rows)]
        counts = trivial.listops_train_counts(summary["train"])
        changed += [(w, [root, b]) for w, b in trivial.majority_class_variants(counts, labels)]
    else:
        changed = [(w, [b]) for w, b in trivial.majority_class_variants(_train_counts(view, records["path"]), labels)]
    return [(what, trivial.strongest(baselines)) for what, baselines in changed]


def listops_analysis_of(view: BundleView, paths) -> tuple[list[dict], dict] | None:
    """The root-operator analysis of the test set the ListOps records ``paths`` were scored on, from any
    of the view's bundles (``listops_roots.find``)."""
    for path in paths:
        key = listops_roots.roots_key(view.config(path))
        if found := listops_roots.find(view.paths, key, view.metrics(path).get("data") or {}):
            return found
    return None
