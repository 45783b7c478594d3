"""Learning-rate schedules of the two studies, as one checkpointable controller.

- ``followup`` (the follow-up study, appendix A.2): "a learning rate scheduler that reduces
  the learning rate on training plateau and during the last 10% of the training
  epochs". The plateau rule watches the mean training loss of each epoch, as torch's
  ``ReduceLROnPlateau`` (mode min, relative threshold, no cooldown): an epoch whose loss is not
  below ``best * (1 - plateau_threshold)`` is a bad one, and more than ``plateau_patience`` of
  them in a row multiply the rate by ``plateau_factor``, never below ``plateau_min_lr``. The
  final phase over the last ``final_fraction`` of the steps either decays linearly to zero
  (``final_phase: linear``) or multiplies the rate by ``final_factor`` (``final_phase: step``,
  the follow-up's code). The values are config keys; the follow-up arms' file names their source.
  Stochastic weight averaging (``swa_start``, repro/training/swa.py) takes the rate over from
  epoch ``int(swa_start * epochs)``: the plateau rule stops, and at each epoch end the rate
  moves towards ``swa_lr`` along torch's ``SWALR`` cosine over ``swa_anneal_epochs`` epochs,
  from the rate in effect when averaging began.
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
FINAL_PHASES = ("linear", "step")


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
        plateau_min_lr: float = 0.0,
        final_phase: str = "linear",
        final_factor: float = 0.1,
        swa_start_epoch: int | None = None,
        swa_lr: float = 0.01,
        swa_anneal_epochs: int = 4,
    ):
        if kind not in SCHEDULES:
            raise ValueError(f"train.schedule={kind!r}: choose one of {', '.join(SCHEDULES)}")
        if final_phase not in FINAL_PHASES:
            raise ValueError(f"train.final_phase={final_phase!r}: choose one of {', '.join(FINAL_PHASES)}")
        if swa_start_epoch is not None and kind != "followup":
            raise ValueError(
                f"train.swa_start with train.schedule={kind!r}: set train.schedule=followup or swa_start=null"
            )
        self.plateau_min_lr = plateau_min_lr
        self.final_phase, self.final_factor = final_phase, final_factor
        self.swa_start_epoch, self.swa_lr, self.swa_anneal_epochs = swa_start_epoch, swa_lr, swa_anneal_epochs
        self.epochs_done = 0
        self.swa_from_lr: float | None = base_lr if swa_start_epoch == 0 else None  # the rate when averaging began
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
        if self.averaging:
            return self.swa_rate()
        lr = self.base_lr
        if self.warmup_steps:
            lr *= min(1.0, (step + 1) / self.warmup_steps)
        if self.kind == "followup":
            lr *= self.plateau_scale
            start = 1.0 - self.final_fraction
            if self.final_fraction > 0 and progress > start:
                linear = max(0.0, (1.0 - progress) / self.final_fraction)
                lr *= self.final_factor if self.final_phase == "step" else linear
        return lr

    @property
    def averaging(self) -> bool:
        """True from the epoch stochastic weight averaging starts at (``swa_start_epoch``, 0-based)."""
        return self.swa_start_epoch is not None and self.epochs_done >= self.swa_start_epoch

    def swa_rate(self) -> float:
        """torch.optim.swa_utils.SWALR's cosine annealing, stepped once an epoch: after ``k`` epochs of
        averaging ``swa_lr * a + lr0 * (1 - a)`` with ``a = (1 - cos(pi * min(1, k / anneal_epochs))) / 2``
        and ``lr0`` the rate when averaging began."""
        if self.swa_anneal_epochs == 0:
            return self.swa_lr
        k = self.epochs_done - self.swa_start_epoch
        t = min(1.0, k / max(1, self.swa_anneal_epochs))
        a = (1.0 - math.cos(math.pi * t)) / 2.0
        return self.swa_lr * a + self.swa_from_lr * (1.0 - a)

    def end_epoch(self, mean_train_loss: float) -> bool:
        """Feed the epoch's mean training loss; returns True when the plateau rule cut the rate."""
        if self.kind != "followup":
            return False
        if self.averaging:
            self.epochs_done += 1
            return False
        self.epochs_done += 1
        cut = self._plateau(mean_train_loss)
        if self.averaging:  # averaging starts with the next epoch, at the rate in effect now
            self.swa_from_lr = self.base_lr * self.plateau_scale
        return cut

    def _plateau(self, mean_train_loss: float) -> bool:
        if mean_train_loss < self.best_epoch_loss * (1.0 - self.plateau_threshold):
            self.best_epoch_loss = mean_train_loss
            self.bad_epochs = 0
            return False
        self.bad_epochs += 1
        if self.bad_epochs > self.plateau_patience:
            self.plateau_scale = max(self.plateau_scale * self.plateau_factor, self.plateau_min_lr / self.base_lr)
            self.bad_epochs = 0
            return True
        return False

    def state_dict(self) -> dict:
        return {
            "plateau_scale": self.plateau_scale,
            "best_epoch_loss": self.best_epoch_loss,
            "bad_epochs": self.bad_epochs,
            "epochs_done": self.epochs_done,
            "swa_from_lr": self.swa_from_lr,
        }

    def load_state_dict(self, state: dict) -> None:
        self.plateau_scale = state["plateau_scale"]
        self.best_epoch_loss = state["best_epoch_loss"]
        self.bad_epochs = state["bad_epochs"]
        self.epochs_done = state.get("epochs_done", 0)  # checkpoints of earlier versions: no averaging ran
        self.swa_from_lr = state.get("swa_from_lr")
