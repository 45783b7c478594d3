"""A run's model and checkpoint sizes from its resolved settings alone: no data, no training, no files.

The model is built on the CPU as the runner builds it (``runner.execute``: the arm's model sized for the
task, the techniques' extra tokens and modules attached), for a task described by its shape alone
(``task_shape``: what ``build_model`` reads of a task, from the task's configuration, by the ``shape`` its
module registers, with empty splits), so no data is read, generated or cached. ``lra-run --cfg run``
prints the parameter count; the grid's slot driver reads the checkpoint size (``checkpoint_bytes``) to
know whether a cell's checkpoint fits the transfers that carry it to the next slot.
"""

from __future__ import annotations

import torch

from ..followup.techniques import build_train_augment
from ..models.model import build_model
from ..tasks import TaskData, load_all


def task_shape(task_cfg: dict) -> TaskData:
    """A task with no examples, sized as its builder sizes it (the ``shape`` its module registers)."""
    builder = task_cfg.get("builder", task_cfg["name"])
    table = load_all()
    if builder not in table:
        raise ValueError(f"task.builder={builder!r}: no such task module; choose one of: {', '.join(table.names())}")
    return table.get(builder).shape(task_cfg)


def build_for_shape(run: dict) -> torch.nn.Module:
    """The model the run ``run`` (a resolved run) trains, techniques' modules included, on the CPU."""
    task = task_shape(run["task"])
    augment = build_train_augment(run["techniques"], task)
    model = build_model(run["model"], augment.model_task(task) if augment else task)
    if augment is not None:
        augment.attach(model)
    return model


def parameter_count(run: dict) -> int:
    """The parameters of the model the run ``run`` trains, techniques' modules included."""
    return sum(p.numel() for p in build_for_shape(run).parameters())


def checkpoint_bytes(run: dict) -> int:
    """About how many bytes a checkpoint of ``run`` takes on disk, as a grid carries it (``last.pt`` and
    ``best.pt``; repro/training/resume.py and evaluate.py write them).

    ``last.pt`` holds the model's state (parameters and buffers), AdamW's two moments of every trainable
    parameter and, with ``train.swa_start`` set, the weight average (a second copy of the model's state);
    ``best.pt`` holds the model's state once more. The pickling's own bytes (names, the run's state, the
    RNG states) are left out: a few hundred KiB at most.
    """
    model = build_for_shape(run)
    state = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    moments = 2 * sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    copies = 3 if run["train"].get("swa_start") is not None else 2
    return copies * state + moments
