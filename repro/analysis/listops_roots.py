"""ListOps by root operator: the test set's roots, the training set's labels per root, and the
root-operator baseline (the follow-up study, appendix B and Figures 1-2).

At freeze time (``repro.bundle.freeze``) the test split of each ListOps record is rebuilt from
the record's config, checked label by label against its ``predictions.csv``, and written to
``analysis/listops_roots/<key>.csv`` (index, root, label of every test example) with
``<key>.json`` (the training split's label counts per root operator and the most frequent
label of each). ``key`` is :func:`roots_key` of the record's config: one per test set.

The root-operator baseline predicts, for each test example, the most frequent TRAINING label
of its root operator (ties: the smallest label). The follow-up's greedy algorithm guesses at
random under SUM MOD instead; this baseline is deterministic everywhere, SUM MOD included.
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOTS_DIR = "analysis/listops_roots"
CLASSES = 10


def roots_key(config: dict) -> str:
    """Which test set a ListOps record was scored on: a hash of its task settings and subset."""
    ident = {"task": config.get("task"), "subset": config.get("subset")}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


def train_label_counts(roots, labels, classes: int = CLASSES) -> dict[str, list[int]]:
    """Per root operator, how many training examples carry each label."""
    counts: dict[str, list[int]] = {}
    for root, label in zip(roots, np.asarray(labels).astype(int).tolist(), strict=True):
        counts.setdefault(str(root), [0] * classes)[label] += 1
    return dict(sorted(counts.items()))


def most_frequent(counts: dict[str, list[int]]) -> dict[str, int]:
    """Each root's most frequent training label (ties: the smallest label, numpy's argmax)."""
    return {root: int(np.argmax(c)) for root, c in counts.items()}


def baseline_predictions(majority: dict[str, int], test_roots) -> np.ndarray:
    """The root-operator baseline's prediction for each test example; a root unseen in training is an error."""
    unseen = sorted({str(r) for r in test_roots} - set(majority))
    if unseen:
        raise ValueError(f"root operator(s) {', '.join(unseen)} of the test set never occur in the training split")
    return np.array([majority[str(r)] for r in test_roots], dtype=int)


def rebuild(config: dict, labels: list[int], data_dir: Path, cache_dir: Path, workers: int) -> tuple[list[dict], dict]:
    """Rebuild a ListOps record's splits: rows (index, root, label) of its test set and the training statistics."""
    from ..run.runner import take_subset
    from ..tasks import get_task_builder
    from ..tasks.listops import VOCAB

    task_cfg = config["task"]
    task = get_task_builder(task_cfg.get("builder", "listops"))(task_cfg, Path(data_dir), Path(cache_dir), workers)
    if config.get("subset"):
        task = take_subset(task, config["subset"], task_cfg.get("data_seed", 0))
    test_labels = np.asarray(task.test.labels).astype(int).tolist()
    if test_labels != labels:
        raise ValueError(
            f"the rebuilt test set ({len(test_labels)} examples) does not match the record's "
            f"predictions.csv labels ({len(labels)}): different data; pass the --data-dir the run used"
        )

    def roots(split):
        return [VOCAB[int(tok)] for tok in np.asarray(split.inputs)[:, 0]]

    pairs = enumerate(zip(roots(task.test), test_labels, strict=True))
    rows = [{"index": i, "root": root, "label": label} for i, (root, label) in pairs]
    counts = train_label_counts(roots(task.train), task.train.labels)
    majority = most_frequent(counts)
    train = {root: {"label_counts": c, "most_frequent_label": majority[root]} for root, c in counts.items()}
    return rows, {"train": train, "n_train": len(task.train), "n_test": len(test_labels), "data": task.info}


def _read_labels(predictions: Path) -> list[int]:
    with open(predictions, newline="") as handle:
        return [int(row["label"]) for row in csv.DictReader(handle)]


def analyse_records(chosen, staging: Path, data_dir: Path, cache_dir: Path, workers: int, log=print):
    """Write the analysis of every ListOps record among ``chosen`` (``repro.bundle.Candidate``) under
    ``staging``; returns (written analysis paths, records whose analysis failed with the reason)."""
    from .. import records

    done: dict[str, str | None] = {}
    analysed, missing = [], []
    for cand in chosen:
        if cand.metrics["task"] != "listops":
            continue
        config = records.read_config(cand.path / "config.yaml")
        key = roots_key(config)
        if key not in done:
            try:
                labels = _read_labels(cand.path / "predictions.csv")
                rows, summary = rebuild(config, labels, data_dir, cache_dir, workers)
                records.write_csv(staging / ROOTS_DIR / f"{key}.csv", rows, ["index", "root", "label"])
                records.write_json(staging / ROOTS_DIR / f"{key}.json", {"key": key, **summary})
                done[key] = None
                analysed.append(f"{ROOTS_DIR}/{key}")
            except Exception as err:  # noqa: BLE001 -- any failure is reported, never hidden
                done[key] = f"{type(err).__name__}: {err}"
        if done[key]:
            missing.append({"record": cand.rel, "analysis": "listops_roots", "reason": done[key]})
            log(f"ListOps root-operator analysis not made for {cand.rel}: {done[key]}", file=sys.stderr)
    return analysed, missing


def read(bundle: Path, key: str) -> tuple[list[dict], dict] | None:
    """(test rows sorted by index, the training summary) stored in a bundle for ``key``; None when absent."""
    csv_path, json_path = Path(bundle) / ROOTS_DIR / f"{key}.csv", Path(bundle) / ROOTS_DIR / f"{key}.json"
    if not (csv_path.exists() and json_path.exists()):
        return None
    with open(csv_path, newline="") as handle:
        rows = [{"index": int(r["index"]), "root": r["root"], "label": int(r["label"])} for r in csv.DictReader(handle)]
    return sorted(rows, key=lambda r: r["index"]), json.loads(json_path.read_text())


def data_identity(data: dict) -> tuple | None:
    """What identifies a ListOps test set in a record's (or an analysis's) ``data`` block: the data
    cache entry's name (a hash of the generator's or reader's settings), the resolved source, the seed,
    the split sizes and the subset taken of them (``runner.take_subset`` records it apart and leaves the
    sizes whole); None when the block lacks the cache entry."""
    entry = (data or {}).get("cache_entry")
    if not entry:
        return None
    sizes = tuple(sorted((data.get("sizes") or {}).items()))
    subset = json.dumps(data.get("subset"), sort_keys=True, default=str)
    return (Path(entry).name, data.get("source"), data.get("seed"), sizes, subset)


def find(bundles, key: str, data: dict) -> tuple[list[dict], dict] | None:
    """The analysis of a record's test set in any of ``bundles``: the one stored under its ``key``,
    else one whose ``data`` block names the same test set (``data_identity``; a record with
    ``task.source=auto`` and one with ``generated`` that resolved to the same generated data share
    it, though their keys differ)."""
    for bundle in bundles:
        if found := read(bundle, key):
            return found
    wanted = data_identity(data)
    if wanted is None:
        return None
    for bundle in bundles:
        for summary_path in sorted((Path(bundle) / ROOTS_DIR).glob("*.json")):
            summary = json.loads(summary_path.read_text())
            if data_identity(summary.get("data") or {}) == wanted:
                return read(bundle, summary_path.stem)
    return None
