"""Learning-rate schedules of the two studies, as one checkpointable controller.

- ``followup`` (the follow-up study, appendix A.2): "a learning rate scheduler that reduces
  the learning rate on training plateau and during the last 10% of the training
  epochs". The plateau rule watches the mean training loss of each epoch; the
  final phase decays linearly to zero over the last ``final_fraction`` of
  training. The paper gives neither the plateau factor nor the patience: they
  are config keys (defaults 0.5 and 5 epochs, our choice, recorded per run).
- ``lra`` (LRA release, ``constant * linear_warmup * rsqrt_decay``):
  ``lr * min(1, step / warmup) / sqrt(max(step, warmup))``.
- ``lra_cosine`` (LRA release, image and Pathfinder configs:
  ``constant * linear_warmup * cosine_decay``): ``lr * min(1, step / warmup) *
  0.5 * (1 + cos(pi * progress))``. LRA's cosine phase is
  ``(step - warmup) / steps_per_cycle`` with ``steps_per_cycle = num_train_steps``,
  so it ends at ``cos(pi * (1 - warmup / steps))`` (a factor ~1e-4 of ``lr``) where
  this one, driven by training progress, ends at 0 (and follows a budget's clock).
- ``constant``: ``lr`` after an optional linear warmup.

Training progress is the larger of steps done over planned steps and, under a
wall-clock budget, seconds used over seconds allowed, so a budget run also ends
with its decay phase.
"""

from __future__ import annotations

import math

SCHEDULES = ("followup", "lra", "lra_cosine", "constant")


class LRController:
    def __init__(
        self,
        base_lr: float,
        kind: str = "followup",
        warmup_steps: int = 0,
        final_fraction: float = 0.1,
        plateau_factor: float = 0.5,
        plateau_patience: int = 5,
        plateau_threshold: float = 1e-3,
    ):
        if kind not in SCHEDULES:
            raise ValueError(f"train.schedule={kind!r}: choose one of {', '.join(SCHEDULES)}")
        self.base_lr = base_lr
        self.kind = kind
        self.warmup_steps = warmup_steps
        self.final_fraction = final_fraction
        self.plateau_factor = plateau_factor
        self.plateau_patience = plateau_patience
        self.plateau_threshold = plateau_threshold
        self.plateau_scale = 1.0
        self.best_epoch_loss = math.inf
        self.bad_epochs = 0

    def lr(self, step: int, progress: float) -> float:
        """The learning rate for optimiser step ``step`` (0-based) at training ``progress`` in [0, 1]."""
        if self.kind == "lra":
            warm = max(self.warmup_steps, 1)
            return self.base_lr * min(1.0, (step + 1) / warm) / math.sqrt(max(step + 1, warm))
        if self.kind == "lra_cosine":
            warm = max(self.warmup_steps, 1)
            return (
                self.base_lr
                * min(1.0, (step + 1) / warm)
                * 0.5
                * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))
            )
        lr = self.base_lr
        if self.warmup_steps:
            lr *= min(1.0, (step + 1) / self.warmup_steps)
        if self.kind == "followup":
            lr *= self.plateau_scale
            start = 1.0 - self.final_fraction
            if self.final_fraction > 0 and progress > start:
                lr *= max(0.0, (1.0 - progress) / self.final_fraction)
        return lr

    def end_epoch(self, mean_train_loss: float) -> bool:
        """Feed the epoch's mean training loss; returns True when the plateau rule cut the rate."""
        if self.kind != "followup":
            return False
        if mean_train_loss < self.best_epoch_loss * (1.0 - self.plateau_threshold):
            self.best_epoch_loss = mean_train_loss
            self.bad_epochs = 0
            return False
        self.bad_epochs += 1
        if self.bad_epochs > self.plateau_patience:
            self.plateau_scale *= self.plateau_factor
            self.bad_epochs = 0
            return True
        return False

    def state_dict(self) -> dict:
        return {
            "plateau_scale": self.plateau_scale,
            "best_epoch_loss": self.best_epoch_loss,
            "bad_epochs": self.bad_epochs,
        }

    def load_state_dict(self, state: dict) -> None:
        self.plateau_scale = state["plateau_scale"]
        self.best_epoch_loss = state["best_epoch_loss"]
        self.bad_epochs = state["bad_epochs"]
