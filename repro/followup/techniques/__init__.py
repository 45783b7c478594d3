"""The follow-up's training techniques (the follow-up study, section 3, appendices A.4 and C), as one per-run object.

A run's techniques come from the ``techniques`` config group (experiments/conf/techniques/):
``techniques.tasks.<task>`` may change the task's settings (``task:``), the training settings
(``train:``) and name training-time techniques (``augment:``), which this module builds:

==================  =========================================================  ==============
``augment`` key     what it does                                               module
==================  =========================================================  ==============
``listops_permute`` random operand order at every operator node (ListOps)       listops_permute
``autoaugment``     ``cifar10`` (the policy) | ``followup`` (the code's chain) cifar_*augment
``d4``              ``true`` or a list of elements 0-7: D4 rotations/reflections dihedral
``mlm``             ``{rate, random_fraction, weight, loss_on}``: denoising    mlm
==================  =========================================================  ==============

``autoaugment`` runs image by image on the CPU or on the whole batch on its device, as the image
task's ``augment_on`` picks (cifar_augment_batch; experiments/conf/task/image.yaml).
Transforms act on the stored training batch (before the task's ``prepare`` hook, so
AutoAugment sees RGB); the MLM objective replaces the training loss. Evaluation is never
touched. Randomness: every step draws from generators seeded by (run seed, step)
(``StepDraws``), so an interrupted and resumed run draws exactly what an uninterrupted one does. With
``train.augment_chunk_steps`` = k > 1 the transforms act on k steps' batches at once (fewer, larger kernel
launches), drawing from a stream seeded by (run seed, the chunk's first step): equal in distribution
to k = 1, not image for image, and as exactly resumable (repro/training/batches.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ...registry import Registry
from ...tasks.base import TaskData

TECHNIQUES: Registry = Registry("technique")


def step_seed(seed: int, step: int, stream: int = 0) -> int:
    """A 63-bit seed for (run seed, step), apart from the seeds of the data order; ``stream`` 1 is the
    transforms' draws for a chunk of steps (``TrainAugment.chunk_draws``), apart from the steps' own."""
    mixed = int(seed) * 0x9E3779B97F4A7C15 + int(step) * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB
    mixed = (mixed + int(stream) * 0xD6E8FEB86659FD93) % 2**64
    return mixed >> 1


class StepDraws:
    """The random generators of one training step (created on first use)."""

    def __init__(self, seed: int, step: int, stream: int = 0):
        self.seed = step_seed(seed, step, stream)
        self._cpu: torch.Generator | None = None
        self._device: dict[str, torch.Generator] = {}

    def cpu_generator(self) -> torch.Generator:
        if self._cpu is None:
            self._cpu = torch.Generator().manual_seed(self.seed)
        return self._cpu

    def device_generator(self, device: torch.device) -> torch.Generator:
        device = torch.device(device)
        if device.type == "cpu":
            return self.cpu_generator()
        key = str(device)
        if key not in self._device:
            self._device[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self._device[key]


class TrainAugment:
    """Training-time techniques of one run: batch transforms and an optional replacement loss."""

    def __init__(self, name: str, transforms: list[Callable], objective=None):
        self.name = name
        self.transforms = list(transforms)
        self.objective = objective

    def draws(self, seed: int, step: int) -> StepDraws:
        return StepDraws(seed, step)

    def chunk_draws(self, seed: int, first_step: int) -> StepDraws:
        """The transforms' draws for the batches of several steps from ``first_step`` transformed as one
        (``train.augment_chunk_steps``), from a stream apart from every step's own draws."""
        return StepDraws(seed, first_step, stream=1)

    def transform(self, inputs: Tensor, draws: StepDraws) -> Tensor:
        """The stored training batch, transformed (before the task's ``prepare``)."""
        for transform in self.transforms:
            inputs = transform(inputs, draws)
        return inputs

    @property
    def has_loss(self) -> bool:
        return self.objective is not None

    def loss(self, model: nn.Module, inputs: Tensor, labels: Tensor, draws: StepDraws) -> Tensor:
        return self.objective.loss(model, inputs, labels, draws.device_generator(inputs.device))

    def compile_transforms(self, on: bool) -> None:
        """``train.compile_transforms``: each transform that has a compiled form (the ListOps permutation,
        the batched CIFAR-10 chain) runs it, or not."""
        for transform in self.transforms:
            if hasattr(transform, "set_compiled"):
                transform.set_compiled(on)

    def loss_inputs(self, inputs: Tensor, draws: StepDraws) -> tuple[Tensor, ...]:
        """The objective's random draws for the step, as tensors: ``loss_of``'s inputs before the labels."""
        return self.objective.loss_inputs(inputs, draws.device_generator(inputs.device))

    def loss_of(self, model: nn.Module, *tensors: Tensor) -> Tensor:
        """The objective's loss from ``loss_inputs(...)`` and the labels: tensors only, so it compiles whole."""
        return self.objective.loss_of(model, *tensors)

    def model_task(self, task: TaskData) -> TaskData:
        """``task`` as the model must be sized for it (the MLM mask token adds a vocabulary entry)."""
        extra = getattr(self.objective, "extra_tokens", 0)
        return dataclasses.replace(task, vocab_size=task.vocab_size + extra) if extra else task

    def attach(self, model: nn.Module) -> None:
        """Add the modules the techniques train with (the MLM head); call before the optimiser is made."""
        if self.objective is not None:
            self.objective.attach(model)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "transforms": [repr(t) for t in self.transforms],
            "objective": repr(self.objective) if self.objective is not None else None,
        }


# ---------------------------------------------------------------- builders (key -> technique)


def _where(task: TaskData, key: str) -> str:
    return f"techniques.tasks.{task.name}.augment.{key}"


@TECHNIQUES.register("listops_permute")
def _listops_permute(value, task: TaskData):
    from ...tasks.listops import VOCAB
    from .listops_permute import ListOpsOperandPermutation, tree_level_count

    if task.vocab_size != len(VOCAB) or task.two_tower or task.train.inputs.ndim != 2:
        raise ValueError(
            f"{_where(task, 'listops_permute')}: needs ListOps token ids (repro/tasks/listops.py); "
            f"task {task.name!r} is not ListOps"
        )
    levels = tree_level_count(torch.as_tensor(task.train.inputs))  # once, so no batch reads its depth
    return "transform", ListOpsOperandPermutation(levels)


@TECHNIQUES.register("autoaugment")
def _autoaugment(value, task: TaskData):
    from .cifar_augment import CifarFollowupAugment
    from .cifar_augment_batch import AUTOAUGMENT_ONLY, FULL_CHAIN, PlacedCifarAugment
    from .cifar_autoaugment import CifarAutoAugment

    if value not in ("cifar10", "followup"):
        raise ValueError(
            f"{_where(task, 'autoaugment')}={value!r}: choose cifar10 (the AutoAugment policy alone) or followup "
            "(the follow-up's whole pipeline), or null for none"
        )
    shape = task.train.inputs.shape
    if len(shape) != 4 or shape[-1] != 3:
        raise ValueError(
            f"{_where(task, 'autoaugment')}: needs RGB training images [N, 32, 32, 3], but task "
            f"{task.name!r} stores {tuple(shape)} ({task.info.get('inputs', 'no RGB')}); provide "
            "cifar-10-batches-py/ or the rgb bundle, or run techniques=none"
        )
    if value == "cifar10":
        per_image, stages = CifarAutoAugment(), AUTOAUGMENT_ONLY
    else:
        per_image, stages = CifarFollowupAugment(), FULL_CHAIN
    return "transform", PlacedCifarAugment(per_image, stages, task.info.get("augment_on", "auto"))


@TECHNIQUES.register("d4")
def _d4(value, task: TaskData):
    from .dihedral import D4_ELEMENTS, DihedralAugment

    if task.pad_id is not None or task.train.inputs.ndim != 2:
        raise ValueError(
            f"{_where(task, 'd4')}: needs square images flattened to pixels [N, S*S] (Pathfinder); "
            f"task {task.name!r} holds token sequences"
        )
    return "transform", DihedralAugment(D4_ELEMENTS if value is True else value)


@TECHNIQUES.register("mlm")
def _mlm(value, task: TaskData):
    from .mlm import MaskedTokenObjective

    if task.pad_id is None:
        raise ValueError(
            f"{_where(task, 'mlm')}: needs a token task with padding (text, retrieval); task {task.name!r} has none"
        )
    settings = {} if value is True else dict(value)
    known = {"rate", "random_fraction", "weight", "loss_on"}
    if set(settings) - known:
        raise ValueError(
            f"{_where(task, 'mlm')}: unknown key(s) {sorted(set(settings) - known)}; known: {sorted(known)}"
        )
    return "objective", MaskedTokenObjective(task.vocab_size, task.pad_id, **settings)


def build_train_augment(spec: dict | None, task: TaskData) -> TrainAugment | None:
    """The techniques ``spec`` (a run's resolved ``techniques``: name and ``augment``) asks for on ``task``;
    None if none."""
    spec = dict(spec or {})
    augment = dict(spec.get("augment") or {})
    transforms, objective = [], None
    for key, value in augment.items():
        if key not in TECHNIQUES:
            raise ValueError(
                f"techniques.tasks.{task.name}.augment: unknown technique {key!r}; "
                f"known: {', '.join(TECHNIQUES.names())}"
            )
        if value is None or value is False:
            continue
        kind, technique = TECHNIQUES.get(key)(value, task)
        if kind == "objective":
            if objective is not None:
                raise ValueError(f"techniques.tasks.{task.name}.augment: two loss objectives; use one")
            objective = technique
        else:
            transforms.append(technique)
    if not transforms and objective is None:
        return None
    return TrainAugment(spec.get("name", "custom"), transforms, objective)


__all__ = ["TECHNIQUES", "StepDraws", "TrainAugment", "build_train_augment", "step_seed"]
