"""Compute-matched budgets: train a given number of examples instead of for a wall-clock time.

A wall-clock budget (``budget.minutes``) gives a fast arm more examples than a slow one, so an
architecture comparison at equal minutes is also a comparison at unequal data. An example
budget gives every arm the same data:

- ``budget.fraction=F``: F times the protocol's training examples of the arm on the task (the
  paper profile's ``min(epochs x (n_train // batch), max_steps) x batch``,
  repro/run/protocol.py). Arms that share a protocol (every arm of one paper on one task:
  Tay et al. 2021 train all models of a task for the same steps; the follow-up study, Tables 5-7,
  the same epochs) get the same number of examples.
- ``budget.examples=N``: N examples, whatever the protocol: equal across papers too.

Either replaces the wall-clock cap: the run trains ``round(examples / batch)`` optimiser steps
(at least one), its schedule placed by steps, and the record says ``budget_fraction`` /
``budget_examples``. Both are read by ``profile=budget``; ``+train.budget_fraction`` and
``+train.budget_examples`` set them under any profile.
"""

from __future__ import annotations

import math
from typing import cast

from ..tasks.base import TaskData
from .protocol import paper_protocol


def protocol_examples(run: dict, task: TaskData) -> int:
    """The training examples of the protocol of ``run``'s arm on its task (with its techniques)."""
    protocol = paper_protocol(run["arm"], run["task"]["name"], run["techniques"]["name"])
    n_train = protocol.generated_n_train  # a generated task's paper-profile size, else the data's
    if task.info.get("source") != "generated" or n_train is None:
        n_train = len(task.train)
    return protocol.examples(n_train)


def apply_example_budget(run: dict, task: TaskData) -> dict:
    """``run["train"]`` with an example budget turned into a step cap (unchanged without one)."""
    train = dict(run["train"])
    fraction, examples = train.get("budget_fraction"), train.get("budget_examples")
    if fraction is None and examples is None:
        return train
    if fraction is not None and examples is not None:
        raise ValueError(f"budget.fraction={fraction} and budget.examples={examples}: give one of them")
    if fraction is not None:
        examples = fraction * protocol_examples(run, task)
    batch, steps_per_epoch = int(train["batch_size"]), len(task.train) // int(train["batch_size"])
    steps = max(1, round(cast(float, examples) / batch))
    train.update(
        max_steps=steps,
        budget_minutes=None,
        budget_examples=steps * batch,
        epochs=max(int(train["epochs"]), math.ceil(steps / max(steps_per_epoch, 1))),
    )
    return train
