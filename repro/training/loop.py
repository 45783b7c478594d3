"""The training engine: one (model, task, seed) training with evaluation, checkpoints and a record.

A reader can hold the loop in their head (in the spirit of nanoGPT): a flat loop over
optimiser steps (:meth:`StepLoop.run`); epoch ``e`` visits the training set in a permutation
drawn from ``(seed, e)`` (batches.py); validation at epoch ends and at configured intervals;
the best-validation weights are kept and the test set is scored with them (``test_acc``;
ARCHITECTURE.md, "Test at the best validation checkpoint"), and, for comparison with the LRA
release, which tested its final weights, with the last weights too (``test_acc_last``; never used
for selection). Each part has a module:

- ``state.py``: the run's progress (:class:`RunState`), which ``last.pt`` keeps;
- ``batches.py``: the task's splits as tensors and the batch of each step;
- ``step.py``: one optimiser step and the log of its losses;
- ``evaluate.py``: scoring a split, the validation log and ``best.pt``;
- ``clock.py``: the time budget, throughput, the time-based intervals and the data-wait probe;
- ``agreement.py``: the per-step decisions every rank must share;
- ``signals.py``: SIGTERM/SIGINT/SIGUSR1/SIGPIPE as a flag read between steps;
- ``resume.py`` (with repro/training/checkpoints.py): ``last.pt``, written and resumed from;
- ``progress.py``: the progress bar, whose time left follows the cap that stops the run;
- ``scalars.py``: ``logger=tensorboard``'s event files;
- ``console.py`` (used by the runner): the run's ``log.txt`` and a closed stdout as a stop.

Resuming: a run interrupted by a stop signal and restarted ends with the same metrics as
one never stopped (resume.py). Data parallel (``torchrun``, repro/training/distributed.py): every
rank takes its equal slice of each global batch and DistributedDataParallel averages the
gradients; evaluation batches are dealt out to the ranks and gathered back in order; rank 0
writes checkpoints and decides the time-based stops, which every rank obeys at the same step.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import torch

from .. import records
from ..tasks.base import TaskData
from .agreement import StepAgreement
from .batches import TrainBatches, TrainingData
from .checkpoints import load_best_checkpoint, load_on_rank_0
from .clock import DataWaitProbe, RunClock
from .distributed import DistContext
from .evaluate import Scorer, compiled_forward, validate
from .progress import RunBar
from .resume import LastCheckpoint
from .scalars import ScalarLog, open_scalar_log
from .schedule import LRController
from .settings import TrainSettings
from .signals import StopSignals
from .state import RunState
from .step import LossLog, TrainStep, make_optimizer
from .swa import WeightAverage, swa_start_epoch


def run_controller(s: TrainSettings, swa_start: int | None) -> LRController:
    """The learning-rate schedule of a run's settings (``swa_start``: ``swa_start_epoch`` of them)."""
    return LRController(s.lr, s.schedule, s.warmup_steps, s.final_fraction, s.plateau_factor, s.plateau_patience,
                        s.plateau_threshold, s.plateau_min_lr, s.final_phase, s.final_factor, swa_start,
                        s.swa_lr, s.swa_anneal_epochs)  # fmt: skip


def train_batches(
    data: TrainingData, task: TaskData, s: TrainSettings, seed: int, device: torch.device, ctx: DistContext, augment
) -> TrainBatches:
    """The loader of a run's training steps: its split, order, bucketing, techniques and chunks."""
    return TrainBatches(data.splits["train"], seed, s.batch_size, data.steps_per_epoch, device, ctx, augment,
                        task.prepare, data.lengths.get("train"), s.bucket_pool_batches, s.trim_multiple,
                        s.augment_chunk_steps, data.pack_lengths)  # fmt: skip


def train(
    model: torch.nn.Module,
    task: TaskData,
    settings: TrainSettings,
    seed: int,
    run_dir: Path,
    device: torch.device,
    resume: bool = True,
    sigterm_at_step: int | None = None,
    progress: bool = True,
    augment=None,
    pause_at_step: int | None = None,
    dist: DistContext | None = None,
    logger: str = "none",
    fingerprint: dict | None = None,
) -> dict:
    """Train, keep the best-validation weights, score the test set with them.

    ``augment`` (a ``repro.followup.techniques.TrainAugment``, or None): training-time
    techniques, applied to each step's batch (batches.py) and perhaps replacing its loss
    (step.py); evaluation never sees them. ``dist`` (repro.training.distributed.setup): this process's
    rank in a data-parallel run; None or world 1 trains in this process alone. ``logger``: ``none`` or
    ``tensorboard`` (scalars.py). ``progress``: bars for training, validation and test.
    ``sigterm_at_step``, ``pause_at_step``: test hooks (signals.py). ``fingerprint``
    (``records.run_fingerprint``): whose run this is; every checkpoint carries it, and a ``last.pt`` or
    ``best.pt`` of another run is refused (RunFolderConflict).

    Returns a dict of metrics, the history rows and the test predictions (on every rank;
    only rank 0 should write them); the caller writes the record. Raises NonFiniteLoss or
    RunInterrupted.
    """
    s, ctx, run_dir = settings, dist or DistContext(device=device), Path(run_dir)
    if ctx.active and s.batch_size % ctx.world:
        raise ValueError(
            f"train.batch_size={s.batch_size} is not divisible by the {ctx.world} processes: each takes "
            f"an equal slice of the global batch; set +train.batch_size to a multiple of {ctx.world} or "
            "change --nproc_per_node"
        )
    autocast_dtype = configure_device(device, s)
    model.to(device)
    if augment is not None:
        augment.compile_transforms(s.compile_transforms)
    optimizer = make_optimizer(model, s, device)
    data = TrainingData.build(task, s, model, augment is not None, device)
    packing_info = start_packing(model, s, data.bucketing)
    swa_start = swa_start_epoch(s.swa_start, s.epochs)
    controller = run_controller(s, swa_start)
    average = WeightAverage(model, swa_start) if swa_start is not None else None
    last = LastCheckpoint(run_dir, ctx, model, optimizer, controller, average, fingerprint)
    state = last.start(resume, seed, s, data.batching, device)
    score = Scorer(model, data.splits, s.eval_batch_size or s.batch_size, autocast_dtype, task.prepare, ctx,
                   data.lengths, s.trim_multiple, progress=progress and ctx.is_main,
                   forward=compiled_forward(model, s.compile))  # fmt: skip
    best_path = run_dir / "checkpoints" / "best.pt"
    batches = train_batches(data, task, s, seed, device, ctx, augment)
    # Without progress bars (batch jobs, GPU drivers) one line per evaluation is the sign of life, and
    # progress.json the step a grid reads: history.csv is written with the record, at the end.
    on_validate = partial(validate, score, steps_per_epoch=data.steps_per_epoch, best_path=best_path,
                          print_line=ctx.is_main and not progress,
                          progress_path=run_dir / records.PROGRESS_FILE, fingerprint=fingerprint)  # fmt: skip
    loop = StepLoop(settings=s, ctx=ctx, data=data, controller=controller, last=last, batches=batches, average=average,
                    step=TrainStep(model, optimizer, controller, s, device, ctx, augment, autocast_dtype),
                    losses=LossLog(ctx, optimizer, data.steps_per_epoch, last.path, first_step=state.step,
                                   pending=state.pending_losses),
                    validate=on_validate, data_wait=DataWaitProbe(device),
                    scalars=open_scalar_log(logger, run_dir, state, ctx.is_main))  # fmt: skip
    model.train()
    clock = RunClock(s.budget_minutes, s.eval_every_seconds, s.checkpoint_every_seconds)
    capped = f" ({s.budget_minutes:g} min budget)" if s.budget_minutes else ""
    bar = RunBar(total=loop.last_step, initial=state.step, desc=f"train {task.name}{capped}", unit="step",
                 disable=not progress or not ctx.is_main, dynamic_ncols=True,
                 budget_left=partial(clock.budget_left, state))  # fmt: skip
    try:
        with StopSignals(sigterm_at_step, pause_at_step, loud=ctx.is_main) as stop:
            loop.run(state, clock, stop, bar)
        loop.finish(state)
        averaged = average.apply(model) if average is not None else False  # the last weights are the average
        last_test = score("test")  # the final weights, as the LRA release tests: reported, never selected on
        test = score_test_with_best(score, best_path, state, device, fingerprint)
        metrics = run_metrics(state, data, s, ctx, device, autocast_dtype, test, clock.wall_time())
        # train.pack_sequences: the stream's share and this process's forward passes packed / run padded
        metrics["packing"] = packing_info()
        metrics.update(test_acc_last=last_test["acc"], test_loss_last=last_test["loss"])
        if metrics["stopped_by"] == "budget" and loop.early_stopped(state):
            metrics["stopped_by"] = "early_stopping"  # no better validation for train.early_stop_patience epochs
        if average is not None:
            metrics["swa_epochs_averaged"] = average.count if averaged else 0
        loop.scalars.test(state, metrics)
    finally:
        loop.scalars.close()
    pairs = enumerate(zip(test["predictions"], test["labels"], strict=True))
    predictions = [{"index": i, "prediction": int(p), "label": int(label)} for i, (p, label) in pairs]
    return {"metrics": metrics, "history": state.history, "predictions": predictions}


def configure_device(device: torch.device, s: TrainSettings) -> torch.dtype | None:
    """CUDA: TF32 matmuls and convolutions, cuDNN autotuning unless ``train.deterministic``, peak
    memory counted from here. Returns the autocast dtype (bf16 on CUDA unless ``train.precision=fp32``)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = not s.deterministic
        if s.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=True)
        torch.cuda.reset_peak_memory_stats(device)
    return torch.bfloat16 if (device.type == "cuda" and s.precision == "bf16") else None


@dataclass
class StepLoop:
    """The loop over optimiser steps and what follows each: logging, the schedule's epoch end,
    evaluation, checkpoints, stops."""

    settings: TrainSettings
    ctx: DistContext
    data: TrainingData
    controller: LRController
    batches: TrainBatches
    step: TrainStep
    losses: LossLog
    validate: Callable[[RunState], dict]  # evaluate.validate with the run's scorer and best.pt
    last: LastCheckpoint
    data_wait: DataWaitProbe  # times every 50th step's batch against the whole step
    scalars: ScalarLog = field(default_factory=ScalarLog)  # logger=tensorboard's event files (scalars.py)
    average: WeightAverage | None = None  # stochastic weight averaging (swa.py), or None

    @property
    def last_step(self) -> int:
        """The step training ends at: the planned steps, or ``train.stop_at_step`` when earlier (the
        schedule stays the planned steps')."""
        stop_at = self.settings.stop_at_step
        return self.data.total_steps if stop_at is None else min(stop_at, self.data.total_steps)

    def run(self, state: RunState, clock: RunClock, stop: StopSignals, bar: RunBar) -> None:
        """Train until the planned steps are done or the budget is spent; a stop signal checkpoints
        and raises RunInterrupted. ``bar``: the progress bar (perhaps disabled), closed on leaving."""
        total_steps = self.data.total_steps
        agreement = StepAgreement(self.ctx, clock, stop, state)
        while True:
            elapsed = agreement.elapsed(state)
            if state.step >= self.last_step or clock.over_budget(elapsed) or self.early_stopped(state):
                break
            progress = clock.progress(state.step, total_steps, elapsed)
            batch, (loss, lr) = self.data_wait.run(
                state, partial(self.batches.fetch, state.step), partial(self.step, step=state.step, progress=progress)
            )
            if batch.width is not None:
                state.width_sum += batch.width
            self.losses.add(loss)
            state.step += 1
            state.examples += len(batch.labels) * self.ctx.world  # every rank trained on an equal slice
            bar.update(1)
            clock.end_step(state)
            if self.log_losses(state):
                bar.set_postfix(loss=f"{state.history[-1]['train_loss']:.3f}", lr=f"{lr:.2e}")
            signum = self.evaluate_and_checkpoint(state, clock, agreement)
            self.scalars.update(state)
            if signum is not None:
                bar.close()
                raise stop.interrupted(signum, state.step, self.last.path)
            clock.end_overhead(state)  # evaluation and checkpoints count toward the budget, not throughput
        bar.close()

    def early_stopped(self, state: RunState) -> bool:
        """At an epoch's end, True when ``train.early_stop_patience`` epochs have ended since the epoch of the
        best validation accuracy (evaluated at every epoch's end) without a better one."""
        patience, per_epoch = self.settings.early_stop_patience, self.data.steps_per_epoch
        if not patience or state.best_val_step < 0 or state.step % per_epoch:
            return False
        return state.step // per_epoch - math.ceil(state.best_val_step / per_epoch) >= patience

    def finish(self, state: RunState) -> None:
        """After the last step: validate unless that step did, log the last losses, write ``last.pt``."""
        if state.last_eval_step != state.step:
            self.evaluate(state)
        self.losses.flush(state)
        self.last.save(state)
        self.scalars.update(state)

    def evaluate(self, state: RunState) -> None:
        self.losses.flush(state)
        self.validate(state)

    def log_losses(self, state: RunState) -> bool:
        """Every ``train.log_every`` steps and at each epoch's end, log the losses; at an epoch's
        end, give the schedule the epoch's mean loss (the plateau rule). True when logged."""
        epoch_end = state.step % self.data.steps_per_epoch == 0
        logged = len(self.losses) >= self.settings.log_every or epoch_end
        if logged:
            self.losses.flush(state)
        if epoch_end and state.epoch_loss_count:
            self.controller.end_epoch(state.epoch_loss_sum / state.epoch_loss_count)
            state.epoch_loss_sum, state.epoch_loss_count = 0.0, 0
            if self.average is not None:
                self.average.end_epoch(self.step.model, self.controller.epochs_done)
        return logged

    def evaluate_and_checkpoint(self, state: RunState, clock: RunClock, agreement: StepAgreement) -> int | None:
        """Evaluate at epoch ends and at the step and time intervals; checkpoint at the intervals and
        on a stop signal. Returns the signal (None: none)."""
        s, step = self.settings, state.step
        time_eval = agreement.evaluation_due(state)  # first: with several ranks, the step's one agreement
        epoch_end = step % self.data.steps_per_epoch == 0
        if time_eval or epoch_end or (s.eval_every_steps and step % s.eval_every_steps == 0):
            self.evaluate(state)
            clock.evaluated(state)
        time_checkpoint, signum = agreement.checkpoint_or_stop(state)
        if signum is not None or time_checkpoint or (s.checkpoint_every_steps and step % s.checkpoint_every_steps == 0):
            self.losses.keep(state)  # a checkpoint logs no row: the history is the uninterrupted run's
            self.last.save(state)
            clock.checkpointed()
        return signum


def score_test_with_best(
    score: Scorer, best_path: Path, state: RunState, device: torch.device, fingerprint: dict | None = None
) -> dict:
    """The test split scored with the best-validation weights (``best.pt``, or its copy when damaged; read by
    rank 0 and sent to every rank), which must be this run's (``fingerprint``) when it has one."""
    load = partial(load_best_checkpoint, step=state.best_val_step, fingerprint=fingerprint)
    best = load_on_rank_0(score.ctx, load, best_path, device)
    score.model.load_state_dict(best["model"])
    return score("test")


def start_packing(model: torch.nn.Module, s: TrainSettings, bucketing: bool) -> Callable[[], dict | None]:
    """With ``train.pack_sequences``, the model set to run packed (refused, in one line, where packing would
    change its function: ``SequenceClassifier.use_packing``, or with length bucketing, ``bucketing``: the
    run's ``TrainingData.bucketing``); returns what the record says of it."""
    if not s.pack_sequences:
        return lambda: None
    if bucketing:
        raise ValueError(
            "train.pack_sequences=true with length bucketing: bucketed batches fill their trimmed width, so none "
            "would fit the stream; set train.length_bucketing=off or train.pack_sequences=false"
        )
    if (use_packing := getattr(model, "use_packing", None)) is None:
        raise ValueError(
            f"train.pack_sequences=true: {type(model).__name__} has no packed path; set train.pack_sequences=false"
        )
    use_packing(s.pack_capacity)
    return getattr(model, "packing_info", lambda: None)


def run_metrics(
    state: RunState,
    data: TrainingData,
    s: TrainSettings,
    ctx: DistContext,
    device: torch.device,
    autocast_dtype: torch.dtype | None,
    test: dict,
    wall_time_s: float,
) -> dict:
    """The run's metrics: the best validation, the test score with its weights, how long and how fast it trained."""
    metrics = {
        "best_val_acc": state.best_val_acc,
        "best_val_step": state.best_val_step,
        "test_acc": test["acc"],
        "test_loss": test["loss"],
        "steps": state.step,
        "epochs": state.step / data.steps_per_epoch,
        "steps_per_epoch": data.steps_per_epoch,
        "planned_steps": data.total_steps,
        "budget_minutes": s.budget_minutes,
        "budget_fraction": s.budget_fraction,  # an example budget (repro/run/budget.py), or None
        "budget_examples": s.budget_examples,
        "stopped_by": stopped_by(state.step, data.total_steps, s.stop_at_step),
        "train_time_s": state.train_time_s,
        "elapsed_s": state.elapsed_s,
        "wall_time_s": wall_time_s,  # this process only; elapsed_s spans resumes
        "train_examples_per_s": state.examples / state.train_time_s if state.train_time_s else math.nan,
        # the share of sampled steps' time spent producing the batch (clock.DataWaitProbe), and how many were sampled
        "data_wait_share": DataWaitProbe.share(state),
        "data_wait_sampled_steps": state.data_wait_steps,
        "peak_gpu_mem_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "autocast": str(autocast_dtype).replace("torch.", "") if autocast_dtype else "none",
        "train_settings": asdict(s),
        "length_bucketing": {
            "used": data.bucketing,
            "why": data.bucketing_reason,
            "full_width": data.full_width if data.bucketing else None,
            "mean_train_width": state.width_sum / state.step if data.bucketing and state.step else None,
        },
    }
    if ctx.active:
        metrics["data_parallel"] = {
            "processes": ctx.world,
            "per_process_batch": s.batch_size // ctx.world,
            "backend": "nccl" if device.type == "cuda" else "gloo",
        }
    return metrics


def stopped_by(step: int, planned: int, stop_at: int | None) -> str:
    """Why training ended: ``steps`` (the plan done), ``stop_at_step`` (a truncated protocol), ``budget``
    (train() names ``early_stopping`` itself)."""
    if step >= planned:
        return "steps"
    return "stop_at_step" if stop_at is not None and step >= stop_at else "budget"
