"""What every task hands the training engine: tokenised splits and their shape facts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


class DataMissing(Exception):
    """The task's data is not where the config says; the message says what to put where."""


class DataError(Exception):
    """The task's data is there but malformed; the message names the file (and line)."""


def too_long(where: str, length: int, unit: str, max_len: int, why: str) -> DataError:
    """The refusal of one row longer than ``task.max_len`` under ``task.truncate=false``: ``where`` (file, line or
    row) and ``why`` (what the task's data is known to hold) name it, and the fixes."""
    return DataError(
        f"{where}: {length} {unit}, more than task.max_len={max_len} ({why}); pass task.truncate=true to cut such "
        "rows to task.max_len (printed and counted in the record), raise task.max_len, or fix or remove the row"
    )


def report_truncated(task: str, counts: dict[str, int], max_len: int, what: str) -> None:
    """Under ``task.truncate=true``, the rows cut to ``task.max_len`` per split, in one printed line (none: nothing);
    the record keeps the counts (``info.truncated``)."""
    if any(counts.values()):
        each = ", ".join(f"{split} {n}" for split, n in counts.items())
        print(f"{task}: {what} longer than task.max_len={max_len} cut to it (task.truncate=true): {each}")


@dataclass
class Split:
    """Token ids ``[N, L]`` (``[N, 2, L]`` for two-tower tasks; 0 is padding) and labels ``[N]``."""

    inputs: np.ndarray
    labels: np.ndarray

    def __post_init__(self):
        if len(self.inputs) != len(self.labels):
            raise ValueError(f"{len(self.inputs)} inputs but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class TaskData:
    """One task's three splits and the facts a model needs to be built for it."""

    name: str
    train: Split
    val: Split
    test: Split
    num_classes: int
    vocab_size: int  # including the padding id 0
    max_len: int
    two_tower: bool = False
    # Id of padding, excluded from attention and pooling; None when every position is a
    # real token (image and Pathfinder pixels, where 0 is black, not padding).
    pad_id: int | None = 0
    # Optional hook run on each batch of inputs (already on the training device) before
    # the model, e.g. RGB -> LRA grayscale ids for the image task. Must be deterministic.
    prepare: Callable | None = None
    # Provenance and counts for the run record: source, truncations, filtered items, notes.
    info: dict = field(default_factory=dict)

    def splits(self) -> dict[str, Split]:
        return {"train": self.train, "val": self.val, "test": self.test}


@dataclass(frozen=True)
class TaskEntry:
    """What a task module registers in ``repro.tasks.TASKS`` under its builder name.

    ``build(cfg, data_dir, cache_dir, workers) -> TaskData``; ``shape(cfg) -> TaskData``: the task ``build`` would
    return, with empty splits (``empty_task``; what ``lra-run --cfg run`` sizes the model by, reading no data);
    ``titles``: the task configs this builder serves (their ``name``) and how tables name each;
    ``official_files_missing(cfg, data_dir)``: for a task that generates its data when the official files are
    absent, which of them ``data_dir`` lacks (None: all there).
    """

    build: Callable[..., TaskData]
    shape: Callable[[dict], TaskData]
    titles: dict[str, str]
    official_files_missing: Callable[..., str | None] | None = None


def empty_task(cfg: dict, example: tuple[int, ...], num_classes: int, vocab_size: int, **facts) -> TaskData:
    """A task of ``cfg`` with no examples: ``example`` is one input's stored shape; ``facts`` the other
    ``TaskData`` fields (``max_len`` defaults to the config's)."""
    empty = Split(np.zeros((0, *example), dtype=np.uint8), np.zeros(0, dtype=np.int64))
    facts.setdefault("max_len", int(cfg["max_len"]))
    return TaskData(
        name=cfg["name"], train=empty, val=empty, test=empty, num_classes=num_classes, vocab_size=vocab_size, **facts
    )
