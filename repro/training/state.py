"""A run's progress (what ``last.pt`` keeps besides weights, optimiser and schedule) and the RNG states.

A resumed run must continue exactly as an uninterrupted one, so everything the next step
depends on is here or in the RNG states: the step (the epoch and batch follow from it),
the clocks, the running epoch loss the plateau schedule reads, the best validation so far,
the history rows and the training losses not yet in a row.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

# Keys older checkpoints may hold and this version derives instead (the count of bucketed
# steps: a run never changes its batching, so it is the step count or zero).
LEGACY_STATE_KEYS = frozenset({"bucketed_steps"})


@dataclass
class RunState:
    """The progress of one run; ``last.pt`` stores it as a plain dict (``as_checkpoint``)."""

    step: int = 0  # optimiser steps done
    elapsed_s: float = 0.0  # wall-clock seconds over every resume: the budget's clock
    train_time_s: float = 0.0  # seconds inside training steps only (throughput)
    examples: int = 0  # training examples seen, over every rank
    epoch_loss_sum: float = 0.0  # the logged losses of the epoch so far (the plateau schedule's input)
    epoch_loss_count: int = 0
    best_val_acc: float = -1.0
    best_val_step: int = -1
    history: list = field(default_factory=list)  # history.csv's rows
    last_eval_step: int = -1
    batching: dict | None = None  # {"bucketing", "pool_batches"}: how batches are drawn; a run never changes it
    width_sum: int = 0  # the trimmed widths of the training batches so far (length bucketing)
    data_wait_s: float = 0.0  # seconds fetching batches, on the steps clock.py's DataWaitProbe samples
    data_wait_step_s: float = 0.0  # seconds of those whole steps
    data_wait_steps: int = 0  # how many steps were sampled
    pending_losses: list = field(default_factory=list)  # the losses since the last history row (step.LossLog)
    last_eval_elapsed_s: float = 0.0  # elapsed_s when the last evaluation ended (train.eval_every_seconds)

    def as_checkpoint(self) -> dict:
        """The fields as the dict ``last.pt`` holds under ``state`` (the history list itself, not a copy)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_checkpoint(cls, state: dict, batching: dict, source: Path) -> RunState:
        """The state a checkpoint holds. Older checkpoints may lack ``width_sum`` (0) and ``batching``
        (``batching``: the run's own, which the caller checked the checkpoint was trained with)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(state) - known - LEGACY_STATE_KEYS)
        if unknown:
            raise RuntimeError(
                f"{source}: the checkpoint's state holds unknown key(s) {', '.join(unknown)} "
                "(written by another version of repro); delete it, or pass resume=false, to start over"
            )
        return cls(**{**{"batching": batching}, **{k: v for k, v in state.items() if k in known}})

    def log(self, steps_per_epoch: int, **values) -> None:
        """Append a history row: step, epoch, ``values``, elapsed seconds."""
        self.history.append(
            {"step": self.step, "epoch": self.step / steps_per_epoch, **values, "elapsed_s": round(self.elapsed_s, 3)}
        )


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore ``rng_state()``'s generators; the torch states may come back on the GPU (a checkpoint
    read with ``map_location`` a CUDA device), and the setters take CPU byte tensors only."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([generator.cpu() for generator in state["cuda"]])
