"""The training engine (loop.py's ``train``) and its parts, one module each (listed in loop.py);
checkpoint files are repro/training/checkpoints.py's."""

from __future__ import annotations

from .batches import epoch_permutation
from .evaluate import evaluate
from .loop import train
from .settings import TrainSettings
from .signals import RunInterrupted
from .state import RunState, seed_everything
from .step import NonFiniteLoss, make_optimizer

__all__ = [
    "NonFiniteLoss",
    "RunInterrupted",
    "RunState",
    "TrainSettings",
    "epoch_permutation",
    "evaluate",
    "make_optimizer",
    "seed_everything",
    "train",
]
