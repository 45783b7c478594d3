"""``lra-run ... --cfg run``: a run's resolved settings, as its config.yaml will hold them (less the run's
fingerprint, which needs the data), and its parameter count, without data, training or writing anything.

The model is built on the CPU as the runner builds it (``repro.run.runner.execute``: the arm's model sized for the
task, the techniques' extra tokens and modules attached), for a task described by its shape alone
(``task_shape``: what ``build_model`` reads of a task, from the task's configuration and its module's
constants, with empty splits), so no data is read, generated or cached.
"""

from __future__ import annotations

import numpy as np
from omegaconf import DictConfig, OmegaConf

from ..followup.techniques import build_train_augment
from ..models.model import build_model
from ..run import validate
from ..run.settings import command_line_task_keys, resolve
from ..tasks import Split, TaskData, image, listops, pathfinder, retrieval, text
from ..tasks.byte_text import BYTE_VOCAB_SIZE, PAD_ID


def task_shape(task_cfg: dict) -> TaskData:
    """A task with no examples, sized as its builder sizes it (``repro/tasks/<builder>.py``'s ``build``)."""
    builder = task_cfg.get("builder", task_cfg["name"])
    max_len = int(task_cfg.get("max_len", image.MAX_LEN) if builder == "image" else task_cfg["max_len"])
    # builder -> (classes, vocabulary incl. padding, padding id, one example's stored shape: image as RGB, as its
    # official files and its RGB bundle give it, which the follow-up's AutoAugment needs)
    shapes = {
        "listops": (listops.NUM_CLASSES, len(listops.VOCAB), 0, (max_len,)),
        "text": (text.NUM_CLASSES, BYTE_VOCAB_SIZE, PAD_ID, (max_len,)),
        "retrieval": (retrieval.NUM_CLASSES, BYTE_VOCAB_SIZE, PAD_ID, (2, max_len)),
        "image": (image.NUM_CLASSES, image.VOCAB_SIZE, None, (image.SIDE, image.SIDE, 3)),
        "pathfinder": (pathfinder.NUM_CLASSES, pathfinder.VOCAB_SIZE, None, (max_len,)),
    }
    if builder not in shapes:
        raise ValueError(f"task.builder={builder!r}: no such task module; choose one of: {', '.join(shapes)}")
    classes, vocab, pad_id, example = shapes[builder]
    empty = Split(np.zeros((0, *example), dtype=np.uint8), np.zeros(0, dtype=np.int64))
    return TaskData(
        name=task_cfg["name"],
        train=empty,
        val=empty,
        test=empty,
        num_classes=classes,
        vocab_size=vocab,
        max_len=max_len,
        two_tower=builder == "retrieval",
        pad_id=pad_id,
        prepare=image.lra_grayscale if builder == "image" else None,
    )


def parameter_count(run: dict) -> int:
    """The parameters of the model the run ``run`` (a resolved run) trains, techniques' modules included."""
    task = task_shape(run["task"])
    augment = build_train_augment(run["techniques"], task)
    model = build_model(run["model"], augment.model_task(task) if augment else task)
    if augment is not None:
        augment.attach(model)
    return sum(p.numel() for p in model.parameters())


def described(cfg: DictConfig, run: dict | None = None) -> str:
    """The run's config.yaml text followed by ``parameters: N`` (one YAML document); ``run``: ``cfg`` resolved
    (resolved here when not given)."""
    run = resolve(cfg, command_line_task_keys()) if run is None else run
    return OmegaConf.to_yaml(OmegaConf.create(run)) + f"parameters: {parameter_count(run)}\n"


@validate.refusing_bad_input
def show(cfg: DictConfig, run: dict | None = None) -> int:
    """Print ``described(cfg)`` after the run's own checks (``run``: the run they resolved); 0, or 2 (one line)
    on bad input."""
    print(described(cfg, run), end="")
    return 0
