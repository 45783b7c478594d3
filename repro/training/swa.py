"""Stochastic weight averaging (Izmailov et al., 2018) through ``torch.optim.swa_utils.AveragedModel``.

With ``train.swa_start`` set, the weights are averaged at the end of every epoch from epoch
``int(swa_start * epochs)`` on (0-based, counted as the schedule counts them: repro/training/schedule.py,
which also sets the rate of those epochs); when training ends the model takes the average
(``test_acc_last`` scores it). Validation during training, and so ``best.pt`` and ``test_acc``,
sees the weights being trained, not the average. The average is part of ``last.pt``, so a resumed
run averages the same weights.
"""

from __future__ import annotations

import torch
from torch.optim.swa_utils import AveragedModel


def swa_start_epoch(swa_start: float | None, epochs: int) -> int | None:
    """The first averaged epoch (0-based) of a run of ``epochs`` epochs, or None without averaging."""
    return None if swa_start is None else int(swa_start * epochs)


class WeightAverage:
    """The running mean of the weights at the ends of the averaged epochs."""

    def __init__(self, model: torch.nn.Module, start_epoch: int):
        self.start_epoch = start_epoch
        self.average = AveragedModel(model, use_buffers=True)

    def end_epoch(self, model: torch.nn.Module, epochs_done: int) -> None:
        """After epoch ``epochs_done - 1`` (0-based): add the weights when that epoch is averaged."""
        if epochs_done - 1 >= self.start_epoch:
            self.average.update_parameters(model)

    @property
    def count(self) -> int:
        return int(self.average.n_averaged)

    def apply(self, model: torch.nn.Module) -> bool:
        """Load the average into ``model``; False (nothing changed) when no epoch was averaged."""
        if not self.count:
            return False
        model.load_state_dict(self.average.module.state_dict())
        return True

    def state_dict(self) -> dict:
        return self.average.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.average.load_state_dict(state)
