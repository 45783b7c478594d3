"""The ``train`` block of a run's settings (experiments/conf), as a checked dataclass."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

PRECISIONS = ("bf16", "fp32")  # train.precision: bf16 autocast on CUDA, or none (float32)
# train.compile_mode: torch.compile's mode; reduce-overhead replays each step's kernels as CUDA graphs (one
# launch for the host instead of hundreds: for small models whose step the host's launching bounds)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass
class TrainSettings:
    """The ``train`` block of a resolved config (experiments/conf)."""

    lr: float
    weight_decay: float
    batch_size: int
    epochs: int
    max_steps: int | None = None  # cap on optimiser steps (smoke runs); the schedule ends there
    stop_at_step: int | None = (
        None  # end training at this step, the schedule still the planned one (a truncated protocol)
    )
    budget_minutes: float | None = None  # wall-clock cap on training (budget profile)
    budget_fraction: float | None = None  # train this share of the protocol's examples (repro/run/budget.py)
    budget_examples: int | None = None  # train this many examples (repro/run/budget.py fills it in from the fraction)
    schedule: str = "followup"
    warmup_steps: int = 0
    final_fraction: float = 0.1
    final_phase: str = "linear"  # the followup schedule's last final_fraction: linear (to 0) | step (x final_factor)
    final_factor: float = 0.1  # final_phase=step: the rate's factor over the last final_fraction of the steps
    plateau_factor: float = 0.5
    plateau_patience: int = 5
    plateau_threshold: float = 1e-3  # relative improvement of the epoch's training loss that resets the patience
    plateau_min_lr: float = 0.0  # the plateau rule never cuts the rate below this
    swa_start: float | None = None  # stochastic weight averaging from epoch int(swa_start * epochs); None: off
    swa_lr: float = 0.01  # SWA: the rate it anneals to (torch.optim.swa_utils.SWALR's swa_lr)
    swa_anneal_epochs: int = 4  # SWA: epochs of cosine annealing to swa_lr
    early_stop_patience: int | None = None  # stop after this many epochs without a better validation accuracy
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8  # Adam's epsilon (LRA: 1e-9)
    decay_1d_params: bool = False  # weight decay on biases and norm gains too
    no_decay: str = "1d"  # what takes no weight decay: 1d (biases, norm gains) | bias_norm_embedding (and embeddings)
    grad_clip: float | None = None
    eval_every_steps: int | None = None
    eval_every_seconds: float | None = None
    eval_batch_size: int | None = None
    checkpoint_every_steps: int | None = None
    checkpoint_every_seconds: float | None = 300.0
    log_every: int = 50
    precision: str = "bf16"  # autocast dtype on CUDA: one of PRECISIONS
    data_on_device: bool = True
    compile: bool = False  # the model's forward (and so its backward) through torch.compile as a whole; scoring too
    compile_mode: str = "default"  # with compile: torch.compile's mode, one of COMPILE_MODES
    compile_transforms: bool = False  # the techniques' batch transforms through torch.compile (speed only)
    pack_sequences: bool = False  # padded batches packed end to end (repro/models/packing.py): the same function
    pack_capacity: float = 0.7  # with pack_sequences: the stream's share of a padded batch's positions (our choice)
    augment_chunk_steps: int = 1  # the techniques' transforms act on this many steps' batches at once (batches.py)
    deterministic: bool = False  # torch.use_deterministic_algorithms on CUDA (CPU runs are deterministic)
    length_bucketing: str = "off"  # off | auto | on: batches of similar length, trimmed (repro/training/batching.py)
    bucket_pool_batches: int = 64  # batches sorted together by length before the batches are shuffled
    trim_multiple: int = 128  # trimmed widths are multiples of this (few shapes for cuDNN's autotuner)

    @classmethod
    def missing_keys_problem(cls, cfg: dict) -> str | None:
        """The one line naming the keys without a default that ``cfg`` lacks (None: it has them all)."""
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        if not (missing := [name for name in required if name not in cfg]):
            return None
        return (
            f"train.{missing[0]} is not set: an arm's train block names {', '.join(required)} "
            f"(missing here: {', '.join(missing)}); set them in the arm's file or its per-task block"
        )

    @classmethod
    def from_dict(cls, cfg: dict) -> TrainSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(f"unknown key(s) under train: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        if problem := cls.missing_keys_problem(cfg):
            raise ValueError(problem)
        cfg = dict(cfg)
        if cfg.get("precision", "bf16") not in PRECISIONS:
            raise ValueError(
                f"train.precision={cfg['precision']!r}: use {' or '.join(PRECISIONS)} (the autocast dtype on CUDA; "
                "CPU runs are float32)"
            )
        if cfg.get("compile_mode", "default") not in COMPILE_MODES:
            raise ValueError(
                f"train.compile_mode={cfg['compile_mode']!r}: use one of {', '.join(COMPILE_MODES)} "
                "(torch.compile's modes; reduce-overhead: CUDA graphs)"
            )
        if "betas" in cfg:
            betas = cfg["betas"]
            numbers = isinstance(betas, (list, tuple)) and all(
                isinstance(b, (int, float)) and not isinstance(b, bool) for b in betas
            )
            if not numbers or len(betas) != 2 or not all(0 <= b < 1 for b in betas):
                raise ValueError(
                    f"train.betas={betas!r}: Adam's betas are two numbers in [0, 1) (beta1, beta2), "
                    "e.g. +train.betas=[0.9,0.999]"
                )
            cfg["betas"] = tuple(betas)
        return cls(**cfg)
