"""The training engine: one (model, task, seed) training with evaluation, checkpoints and a record.

A reader can hold the loop in their head (in the spirit of nanoGPT): a flat loop
over optimiser steps; epoch ``e`` visits the training set in a permutation drawn
from ``(seed, e)``; validation at epoch ends and at configured intervals; the
best-validation weights are kept and the test set is scored once, with them
(never the last weights; DESIGN.md "Test at the best validation checkpoint").

Resuming: ``last.pt`` holds everything the next step depends on (weights,
optimiser, schedule, step, RNG states, history), so a run interrupted by
SIGTERM/SIGINT/SIGUSR1 and restarted ends with the same metrics as one never stopped.
Writing a new ``last.pt`` keeps the one before as ``last.prev.pt``, each with a sha256
beside it; an unreadable latest checkpoint (truncated, corrupt) falls back to the previous.

Data parallel (``torchrun``, repro/distributed.py): every rank walks the same global
permutation and takes its equal slice of each global batch of ``train.batch_size``;
DistributedDataParallel averages the gradients, so a step is the step of one process on
the whole batch (up to floating-point reduction order). Evaluation batches are dealt out
to the ranks and gathered back in order; rank 0 writes checkpoints and decides the
time-based stops, which every rank then obeys at the same step.
"""
from __future__ import annotations

import functools
import hashlib
import io
import math
import os
import sys
import random
import signal
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from .batching import (batch_widths, bucketed_order, check_resume_batching, checkpoint_batching, resolve_bucketing,
                       sequence_lengths, trimmed_width)
from .distributed import DistContext, agree_max, broadcast_object, gather_1d, gather_objects, mean_, sum_
from .records import write_atomic
from .schedule import LRController
from .tasks.base import Split, TaskData

CHECKPOINT_FORMAT = 1


class NonFiniteLoss(RuntimeError):
    """The training loss became NaN or infinite."""


class RunInterrupted(RuntimeError):
    """SIGTERM/SIGINT/SIGUSR1 arrived; a checkpoint was written and the run can be resumed."""

    def __init__(self, signum: int, step: int, checkpoint: Path, previous_handler=None):
        self.signum = signum
        self.previous_handler = previous_handler
        super().__init__(f"stopped by {signal.Signals(signum).name} at step {step}; checkpoint {checkpoint}; rerun the same command to resume")

    def pass_on(self) -> None:
        """Call the Python handler the signal had before training took it (e.g. a cluster
        launcher's requeue-on-SIGUSR1), now that the checkpoint is safe; default handlers are
        left alone (the caller exits with 128 + signum)."""
        handler = self.previous_handler
        if callable(handler) and handler is not signal.default_int_handler:
            handler(self.signum, None)


class CorruptCheckpoint(RuntimeError):
    """A checkpoint file fails its checksum or cannot be loaded."""


@dataclass
class TrainSettings:
    """The ``train`` block of a resolved config (experiments/conf)."""

    lr: float
    weight_decay: float
    batch_size: int
    epochs: int
    max_steps: int | None = None  # cap on optimiser steps (smoke runs)
    budget_minutes: float | None = None  # wall-clock cap on training (budget profile)
    schedule: str = "followup"
    warmup_steps: int = 0
    final_fraction: float = 0.1
    plateau_factor: float = 0.5
    plateau_patience: int = 5
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8  # Adam's epsilon (LRA: 1e-9)
    decay_1d_params: bool = False  # weight decay on biases and norm gains too
    grad_clip: float | None = None
    eval_every_steps: int | None = None
    eval_every_seconds: float | None = None
    eval_batch_size: int | None = None
    checkpoint_every_steps: int | None = None
    checkpoint_every_seconds: float | None = 300.0
    log_every: int = 50
    precision: str = "bf16"  # autocast dtype on CUDA: bf16 | fp32
    data_on_device: bool = True
    deterministic: bool = False  # torch.use_deterministic_algorithms on CUDA (CPU runs are deterministic)
    length_bucketing: str = "off"  # off | auto | on: batches of similar length, trimmed (repro/batching.py)
    bucket_pool_batches: int = 64  # batches sorted together by length before the batches are shuffled
    trim_multiple: int = 128  # trimmed widths are multiples of this (few shapes for cuDNN's autotuner)

    @classmethod
    def from_dict(cls, cfg: dict) -> "TrainSettings":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(f"unknown key(s) under train: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        cfg = dict(cfg)
        if "betas" in cfg:
            cfg["betas"] = tuple(cfg["betas"])
        return cls(**cfg)


# ---------------------------------------------------------------- helpers


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
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def to_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """Materialise a (memory-mapped) array as a tensor of a dtype torch can index with."""
    array = np.asarray(array)
    if array.dtype == np.uint16:
        array = array.astype(np.int32)
    return torch.from_numpy(np.ascontiguousarray(array)).to(device)


def epoch_permutation(seed: int, epoch: int, n: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator)


def make_optimizer(model: torch.nn.Module, s: TrainSettings, device: torch.device) -> torch.optim.Optimizer:
    """AdamW; by default no decay on 1-D parameters (biases, norm gains).

    A parameter may carry ``param._optim = {"lr": ..., "weight_decay": ...}`` (the state-space
    parameters of S4D and S5, which their papers train at a smaller rate without decay): it
    gets its own group whose ``lr_scale`` (its rate over ``s.lr``) the schedule multiplies,
    so the schedule's shape applies to every group.
    """
    decay, no_decay, special = [], [], {}
    for p in model.parameters():
        if not p.requires_grad:
            continue
        hint = getattr(p, "_optim", None)
        if hint:
            key = (float(hint.get("lr", s.lr)), float(hint.get("weight_decay", s.weight_decay)))
            special.setdefault(key, []).append(p)
        else:
            (decay if p.ndim >= 2 or s.decay_1d_params else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": s.weight_decay, "lr_scale": 1.0},
              {"params": no_decay, "weight_decay": 0.0, "lr_scale": 1.0}]
    for (lr, wd), params in sorted(special.items()):
        groups.append({"params": params, "weight_decay": wd, "lr_scale": lr / s.lr, "lr": lr})
    return torch.optim.AdamW(groups, lr=s.lr, betas=s.betas, eps=s.eps, fused=device.type == "cuda")


def checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def previous_path(path: Path) -> Path:
    """``last.pt`` -> ``last.prev.pt``: the checkpoint before the latest."""
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def save_checkpoint(path: Path, state: dict, keep_previous: bool = False) -> None:
    """Write ``state`` atomically, then its sha256 beside it (``<name>.sha256``).

    ``keep_previous``: first move the current file (and its sha256) to ``previous_path``,
    the fallback when the new one turns out unreadable.
    """
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    if keep_previous and path.exists():
        previous = previous_path(path)
        checksum_path(previous).unlink(missing_ok=True)
        os.replace(path, previous)
        if checksum_path(path).exists():
            os.replace(checksum_path(path), checksum_path(previous))
    write_atomic(path, data)
    write_atomic(checksum_path(path), hashlib.sha256(data).hexdigest() + "\n")


def load_checkpoint(path: Path, device: torch.device) -> dict:
    """Load a checkpoint, checking its sha256 when one was written; CorruptCheckpoint names the file."""
    path = Path(path)
    data = path.read_bytes()
    digest_file = checksum_path(path)
    if digest_file.exists():
        expected = digest_file.read_text().strip()
        if hashlib.sha256(data).hexdigest() != expected:
            raise CorruptCheckpoint(f"{path}: sha256 differs from {digest_file.name} (corrupt or truncated, {len(data)} bytes)")
    try:
        return torch.load(io.BytesIO(data), map_location=device, weights_only=False)
    except Exception as err:  # truncated zip, unpickling errors: all mean the file is unusable
        raise CorruptCheckpoint(f"{path}: cannot be loaded ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from err


def load_resume_checkpoint(last_path: Path, device: torch.device) -> tuple[dict | None, Path | None]:
    """The newest readable of ``last.pt`` and ``last.prev.pt``, warning (on stderr) about each unreadable one."""
    candidates = [p for p in (last_path, previous_path(last_path)) if p.exists()]
    for i, path in enumerate(candidates):
        try:
            return load_checkpoint(path, device), path
        except CorruptCheckpoint as err:
            then = f"falling back to {candidates[i + 1]}" if i + 1 < len(candidates) else "no earlier checkpoint is readable"
            print(f"warning: checkpoint {err}; {then}", file=sys.stderr, flush=True)
    if candidates:
        print(f"warning: no readable checkpoint among {', '.join(p.name for p in candidates)} in {last_path.parent}; "
              f"starting this run from step 0", file=sys.stderr, flush=True)
    return None, None


def _load_on_rank_0(ctx: DistContext, load, path: Path, device: torch.device):
    """``load(path, device)`` in one process. With several, rank 0 loads onto the CPU and sends
    the result to every rank: checkpoints are rank 0's, and the others need not see its disk."""
    if not ctx.active:
        return load(path, device)
    return broadcast_object(ctx, load(path, torch.device("cpu")) if ctx.is_main else None)


def copy_path(path: Path) -> Path:
    """``best.pt`` -> ``best.copy.pt``: a second copy of the same checkpoint."""
    return path.with_name(f"{path.stem}.copy{path.suffix}")


def save_best_checkpoint(path: Path, state: dict) -> None:
    """``best.pt`` and an identical ``best.copy.pt``, each with its sha256. Unlike ``last.pt``, whose
    fallback ``last.prev.pt`` is an earlier step the run can go on from, the best weights have no
    older equivalent: the test set is scored with exactly these, so the fallback is a copy."""
    save_checkpoint(path, state)
    save_checkpoint(copy_path(path), state)


def load_best_checkpoint(path: Path, device: torch.device, step: int) -> dict:
    """The first readable of ``best.pt`` and ``best.copy.pt`` that holds the run's best step ``step``,
    warning (on stderr) about each damaged one and rewriting it from the good one."""
    problems = []
    for candidate in (path, copy_path(path)):
        try:
            best = load_checkpoint(candidate, device) if candidate.exists() else None
        except CorruptCheckpoint as err:
            problems.append(str(err))
            continue
        if best is None or best.get("step") != step:
            problems.append(f"{candidate}: " + ("missing" if best is None else f"holds step {best.get('step')}"))
            continue
        for damaged in problems:
            print(f"warning: checkpoint {damaged}; using {candidate.name} (the same step {step}) and writing it again",
                  file=sys.stderr, flush=True)
        if problems:
            save_best_checkpoint(path, best)
        return best
    raise CorruptCheckpoint(f"no usable best-validation checkpoint (step {step}): {'; '.join(problems)}; the weights "
                            "to test are lost: rerun with force=true to train this run again")


def remove_checkpoint(path: Path) -> None:
    for p in (path, checksum_path(path)):
        p.unlink(missing_ok=True)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)  # SIGUSR1: Slurm's warning before preemption/time limit


class _SignalFlag:
    """Turns SIGTERM/SIGINT/SIGUSR1 into a flag the loop checks between steps."""

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def previous(self, signum: int):
        """The handler ``signum`` had before (None outside the main thread)."""
        return self._previous.get(signum)

    def _handle(self, signum, frame):
        self.signum = signum

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------- evaluation


@torch.no_grad()
def evaluate(model, split: dict, batch_size: int, autocast_dtype, prepare=None, dist: DistContext | None = None,
             lengths: torch.Tensor | None = None, trim_multiple: int = 128) -> dict:
    """Loss, accuracy and predictions of ``model`` on a split held as tensors.

    With several ranks (``dist``), batch ``b`` is scored by rank ``b % world`` and the
    predictions are gathered back in order, so every rank returns what one process would
    (each batch holds the same examples as in a one-process run). With ``lengths`` (length
    bucketing, a length-flexible model), examples are scored in order of length, each batch
    trimmed to its longest (repro/batching.py); predictions come back in the split's order.
    """
    ctx = dist or DistContext()
    model.eval()
    x, y = split["x"], split["y"]
    order = None
    if lengths is not None:
        order = torch.argsort(lengths, stable=True)
        sorted_lengths, order_on_data = lengths[order], order.to(x.device)
    device = x.device
    total_loss = torch.zeros((), device=device, dtype=torch.float64)
    predictions = []
    starts = range(0, len(y), batch_size)
    for start in starts[ctx.rank :: ctx.world]:
        if order is None:
            inputs, labels = x[start : start + batch_size], y[start : start + batch_size]
        else:  # this batch of the length-sorted order, trimmed to its longest
            rows = order_on_data[start : start + batch_size]
            width = trimmed_width(int(sorted_lengths[start : start + batch_size].max()), trim_multiple, x.shape[-1])
            inputs, labels = x.narrow(-1, 0, width)[rows], y[rows.to(y.device)]
        inputs = inputs.to(device, non_blocking=True)
        inputs = prepare(inputs) if prepare else inputs.long()
        labels = labels.to(device)
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits = model(inputs)
        total_loss += F.cross_entropy(logits.float(), labels, reduction="sum").double()
        predictions.append(logits.argmax(-1))
    model.train()
    if ctx.active:
        predictions = _gather_batches(ctx, predictions, starts, len(y), batch_size, device)
        sum_(ctx, total_loss)
    predictions = torch.cat(predictions).cpu()
    if order is not None:
        predictions = torch.empty_like(predictions).index_copy_(0, order, predictions)
    labels = y.cpu()
    return {
        "loss": float(total_loss) / len(labels),
        "acc": float((predictions == labels).double().mean()),
        "predictions": predictions.numpy(),
        "labels": labels.numpy(),
    }


def _gather_batches(ctx: DistContext, mine: list, starts: range, n: int, batch_size: int, device) -> list:
    """Per-batch predictions of every rank (rank r scored batches r, r + world, ...), in batch order."""
    sizes = [min(batch_size, n - start) for start in starts]
    lengths = [sum(sizes[r :: ctx.world]) for r in range(ctx.world)]
    local = torch.cat(mine) if mine else torch.zeros(0, dtype=torch.long, device=device)
    parts = gather_1d(ctx, local, lengths)
    offsets = [0] * ctx.world
    ordered = []
    for b, size in enumerate(sizes):
        r = b % ctx.world
        ordered.append(parts[r][offsets[r] : offsets[r] + size])
        offsets[r] += size
    return ordered


class _TechniqueLoss(torch.nn.Module):
    """A technique's replacement loss as a module's forward, so DistributedDataParallel sees the pass."""

    def __init__(self, model: torch.nn.Module, augment):
        super().__init__()
        self.model = model
        self.augment = augment

    def forward(self, inputs, labels, draws):
        return self.augment.loss(self.model, inputs, labels, draws)


def debug_signals(stop: "_SignalFlag", sigterm_at_step: int | None, pause_at_step: int | None, step: int, loud: bool) -> None:
    """Test hooks: send this process SIGTERM after ``sigterm_at_step``; after ``pause_at_step``,
    wait up to two minutes for a signal from outside (so a test can send one at a known step)."""
    if sigterm_at_step is not None and step == sigterm_at_step:
        os.kill(os.getpid(), signal.SIGTERM)
    if pause_at_step is not None and step == pause_at_step:
        if loud:
            print(f"paused after step {step} (debug.pause_at_step): waiting for a signal", flush=True)
        deadline = time.monotonic() + 120
        while stop.signum is None and time.monotonic() < deadline:
            time.sleep(0.02)


# ---------------------------------------------------------------- the loop


def eval_line(state: dict) -> str:
    """One log line for the evaluation just appended to ``state["history"]``: step, epoch, the
    validation accuracy and loss, the best so far, the last logged training loss, elapsed time."""
    row = state["history"][-1]
    last_train = next((r["train_loss"] for r in reversed(state["history"]) if "train_loss" in r), None)
    train = "-" if last_train is None else f"{last_train:.4f}"
    return (f"eval step {row['step']} (epoch {row['epoch']:.2f}): val acc {row['val_acc']:.4f}, val loss {row['val_loss']:.4f}; "
            f"top {state['best_val_acc']:.4f} at step {state['best_val_step']}; train loss {train}; {row['elapsed_s']:.0f} s")


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
) -> dict:
    """Train, keep the best-validation weights, score the test set with them.

    ``augment`` (a ``repro.followup.techniques.TrainAugment``, or None): training-time
    techniques. Each step it transforms the stored batch before ``task.prepare`` and may
    replace the loss (the multitask MLM); its randomness is seeded by (seed, step), so
    resuming draws what an uninterrupted run draws. Evaluation never sees it.

    ``dist`` (repro.distributed.setup): this process's rank in a data-parallel run; None
    or world 1 trains in this process alone. ``pause_at_step`` (tests): after that step,
    wait (up to two minutes) for a stop signal sent from outside.

    Returns a dict of metrics, the history rows and the test predictions (on every rank;
    only rank 0 should write them); the caller writes the record. Raises NonFiniteLoss or
    RunInterrupted.
    """
    s = settings
    ctx = dist or DistContext(device=device)
    if ctx.active and s.batch_size % ctx.world:
        raise ValueError(f"train.batch_size={s.batch_size} is not divisible by the {ctx.world} processes: each takes an equal "
                         f"slice of the global batch; set +train.batch_size to a multiple of {ctx.world} or change --nproc_per_node")
    rank_rows = slice(ctx.rank * (s.batch_size // ctx.world), (ctx.rank + 1) * (s.batch_size // ctx.world))
    run_dir = Path(run_dir)
    ckpt_dir = run_dir / "checkpoints"
    last_path, best_path = ckpt_dir / "last.pt", ckpt_dir / "best.pt"
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = not s.deterministic
        if s.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=True)
        torch.cuda.reset_peak_memory_stats(device)
    autocast_dtype = torch.bfloat16 if (device.type == "cuda" and s.precision == "bf16") else None

    model.to(device)
    optimizer = make_optimizer(model, s, device)
    controller = LRController(s.lr, s.schedule, s.warmup_steps, s.final_fraction, s.plateau_factor, s.plateau_patience)

    data_device = device if s.data_on_device else torch.device("cpu")
    splits = {name: {"x": to_tensor(sp.inputs, data_device), "y": to_tensor(sp.labels, data_device).long()} for name, sp in task.splits().items()}
    n_train = len(task.train)
    steps_per_epoch = n_train // s.batch_size  # the last partial batch is dropped, as LRA does
    if steps_per_epoch == 0:
        raise ValueError(f"train.batch_size={s.batch_size} exceeds the {n_train} training examples")
    total_steps = s.epochs * steps_per_epoch
    if s.max_steps is not None:
        total_steps = min(total_steps, s.max_steps)
    budget_s = s.budget_minutes * 60 if s.budget_minutes else None
    eval_bs = s.eval_batch_size or s.batch_size
    bucketing, bucketing_reason = resolve_bucketing(s.length_bucketing, model, task.pad_id, augment is not None)
    if bucketing and (s.trim_multiple < 1 or s.bucket_pool_batches < 1):
        raise ValueError(f"train.trim_multiple={s.trim_multiple} and train.bucket_pool_batches={s.bucket_pool_batches} "
                         "must both be at least 1")
    batching = {"bucketing": bucketing, "pool_batches": s.bucket_pool_batches if bucketing else None}
    full_width = int(splits["train"]["x"].shape[-1])  # the padded length (bucketing only: never RGB channels)
    lengths = ({name: torch.from_numpy(sequence_lengths(sp.inputs, task.pad_id)) for name, sp in task.splits().items()}
               if bucketing else {})

    state = {
        "step": 0, "elapsed_s": 0.0, "train_time_s": 0.0, "examples": 0,
        "epoch_loss_sum": 0.0, "epoch_loss_count": 0,
        "best_val_acc": -1.0, "best_val_step": -1, "history": [], "last_eval_step": -1,
        "batching": batching, "width_sum": 0,  # a run never changes its batching, so every step is bucketed or none
    }
    ckpt, source = _load_on_rank_0(ctx, load_resume_checkpoint, last_path, device) if resume else (None, None)
    if ckpt is not None:
        if ckpt.get("format") != CHECKPOINT_FORMAT:
            raise RuntimeError(f"{source}: checkpoint format {ckpt.get('format')} is not {CHECKPOINT_FORMAT}; delete it to start over")
        check_resume_batching(checkpoint_batching(ckpt["state"], s.bucket_pool_batches), batching, s.length_bucketing, source)
        ckpt["state"].setdefault("width_sum", 0)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        controller.load_state_dict(ckpt["controller"])
        state = ckpt["state"]
        rank_rngs = ckpt.get("rng_ranks")
        set_rng_state(rank_rngs[ctx.rank] if ctx.active and rank_rngs and len(rank_rngs) == ctx.world else ckpt["rng"])
        if ctx.is_main:
            print(f"resuming {run_dir} from step {state['step']}" + ("" if source == last_path else f" (from {source.name})"))
    else:
        if not resume and ctx.is_main:
            remove_checkpoint(last_path)
            remove_checkpoint(previous_path(last_path))
        if ctx.rank > 0:  # every rank built the same model; each draws its own dropout from here on
            seed_everything(seed + 1_000_003 * ctx.rank)
    del ckpt

    step_model = model  # what the training step calls: the model, or its DDP wrapper
    if ctx.active:
        from torch.nn.parallel import DistributedDataParallel

        core = _TechniqueLoss(model, augment) if augment is not None and augment.has_loss else model
        step_model = DistributedDataParallel(core, device_ids=[device.index] if device.type == "cuda" else None)

    def checkpoint():
        """All ranks call it (their RNG states are gathered); rank 0 writes ``last.pt``, keeping the one before."""
        rngs = gather_objects(ctx, rng_state()) if ctx.active else None
        if not ctx.is_main:
            return
        payload = {
            "format": CHECKPOINT_FORMAT, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "controller": controller.state_dict(), "state": state, "rng": rngs[0] if rngs else rng_state(),
        }
        if rngs:
            payload["rng_ranks"] = rngs
        save_checkpoint(last_path, payload, keep_previous=True)

    loss_buffer: list[torch.Tensor] = []
    buffer_first_step = state["step"]

    def flush_losses():
        """Move buffered step losses to the host; stop on the first non-finite one."""
        nonlocal buffer_first_step
        if not loss_buffer:
            return
        values = mean_(ctx, torch.stack(loss_buffer).float()).cpu()  # per-rank means -> global-batch means
        bad = (~torch.isfinite(values)).nonzero()
        if len(bad):
            step = buffer_first_step + int(bad[0]) + 1
            where = f"last good checkpoint: {last_path}" if last_path.exists() else "no checkpoint was written yet"
            raise NonFiniteLoss(f"training loss is {float(values[bad[0]])} at step {step}; {where}")
        state["epoch_loss_sum"] += float(values.double().sum())
        state["epoch_loss_count"] += len(values)
        state["history"].append({"step": state["step"], "epoch": state["step"] / steps_per_epoch,
                                 "lr": optimizer.param_groups[0]["lr"], "train_loss": float(values.mean()),
                                 "elapsed_s": round(state["elapsed_s"], 3)})
        loss_buffer.clear()
        buffer_first_step = state["step"]

    def run_validation():
        flush_losses()
        result = evaluate(model, splits["val"], eval_bs, autocast_dtype, task.prepare, dist=ctx,
                          lengths=lengths.get("val"), trim_multiple=s.trim_multiple)
        state["history"].append({"step": state["step"], "epoch": state["step"] / steps_per_epoch,
                                 "val_loss": result["loss"], "val_acc": result["acc"], "elapsed_s": round(state["elapsed_s"], 3)})
        state["last_eval_step"] = state["step"]
        if result["acc"] > state["best_val_acc"]:
            state["best_val_acc"], state["best_val_step"] = result["acc"], state["step"]
            if ctx.is_main:
                best = {"format": CHECKPOINT_FORMAT, "model": model.state_dict(), "step": state["step"]}
                save_best_checkpoint(best_path, best)
        if ctx.is_main and not progress:
            # Without progress bars (batch jobs, GPU drivers) one line per evaluation is the only
            # sign of life: history.csv is written with the record, at the end.
            print(eval_line(state), flush=True)
        return result

    model.train()
    wall_start = time.monotonic()
    segment_start = time.monotonic()
    last_eval_time = last_ckpt_time = time.monotonic()
    perm_epoch, perm = -1, None
    bar = tqdm(total=total_steps, initial=state["step"], desc=f"train {task.name}", unit="step",
               disable=not progress or not ctx.is_main, dynamic_ncols=True)

    # Rank 0's clock decides the budget stop and the time-placed schedule. Several processes
    # agree on it once here and then in the one agreement at each step's end, so a step reads
    # the clock as it stood before the previous step's evaluation or checkpoint (a budget stop
    # may come one step later than one process would make it).
    agreed_elapsed = agree_max(ctx, [state["elapsed_s"] if ctx.is_main else 0.0])[0] if ctx.active else None
    with _SignalFlag() as stop:
        while True:
            elapsed = state["elapsed_s"] + (time.monotonic() - segment_start)
            if ctx.active:
                elapsed = agreed_elapsed
            done = state["step"] >= total_steps or (budget_s is not None and elapsed >= budget_s)
            if done:
                break
            epoch, index_in_epoch = divmod(state["step"], steps_per_epoch)
            if epoch != perm_epoch:
                perm_epoch, perm = epoch, epoch_permutation(seed, epoch, n_train)
                if bucketing:  # the same examples as without, regrouped by length (repro/batching.py)
                    regroup = torch.Generator().manual_seed(seed * 1_000_003 + epoch + 500_009)
                    perm = bucketed_order(perm[: steps_per_epoch * s.batch_size], lengths["train"], s.batch_size,
                                          s.bucket_pool_batches, regroup)
                    widths = batch_widths(perm, lengths["train"], s.batch_size, s.trim_multiple, full_width)
                perm = perm.to(data_device)
            idx = perm[index_in_epoch * s.batch_size : (index_in_epoch + 1) * s.batch_size]
            if ctx.active and augment is None:
                idx = idx[rank_rows]  # this rank's slice of the global batch
            source = splits["train"]["x"]
            if bucketing:
                source = source.narrow(-1, 0, widths[index_in_epoch])
                state["width_sum"] += widths[index_in_epoch]
            inputs = source[idx].to(device, non_blocking=True)
            labels = splits["train"]["y"][idx].to(device, non_blocking=True)
            draws = augment.draws(seed, state["step"]) if augment is not None else None
            if augment is not None:
                inputs = augment.transform(inputs, draws)
                if ctx.active:  # transformed as one process would transform the whole batch, then sliced
                    inputs, labels = inputs[rank_rows], labels[rank_rows]
                    if ctx.rank > 0:  # the objective's own draws (MLM masks) differ between ranks
                        draws = augment.draws(seed + 1_000_003 * ctx.rank, state["step"])
            inputs = task.prepare(inputs) if task.prepare else inputs.long()

            progress_frac = max(state["step"] / total_steps, elapsed / budget_s if budget_s else 0.0)
            lr = controller.lr(state["step"], min(progress_frac, 1.0))
            for group in optimizer.param_groups:
                group["lr"] = lr * group.get("lr_scale", 1.0)
            technique_loss = augment is not None and augment.has_loss
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                if technique_loss and ctx.active:
                    loss = step_model(inputs, labels, draws)  # through DDP, so its gradients are averaged
                elif technique_loss:
                    loss = augment.loss(model, inputs, labels, draws)  # task loss + auxiliary loss
                else:
                    logits = step_model(inputs)
            if not technique_loss:
                loss = F.cross_entropy(logits.float(), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if s.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
            optimizer.step()
            loss_buffer.append(loss.detach())
            state["step"] += 1
            state["examples"] += len(labels) * ctx.world  # every rank trained on an equal slice
            bar.update(1)

            now = time.monotonic()
            state["elapsed_s"] += now - segment_start
            state["train_time_s"] += now - segment_start
            segment_start = now
            epoch_end = state["step"] % steps_per_epoch == 0
            if len(loss_buffer) >= s.log_every or epoch_end:
                flush_losses()
                bar.set_postfix(loss=f"{state['history'][-1]['train_loss']:.3f}", lr=f"{lr:.2e}")
            if epoch_end and state["epoch_loss_count"]:
                controller.end_epoch(state["epoch_loss_sum"] / state["epoch_loss_count"])
                state["epoch_loss_sum"], state["epoch_loss_count"] = 0.0, 0
            time_eval = bool(s.eval_every_seconds and now - last_eval_time >= s.eval_every_seconds)
            if ctx.active:
                # The step's one agreement: rank 0's clocks (the budget's elapsed time for the next
                # step, evaluation and checkpoint intervals) and any rank's signal.
                debug_signals(stop, sigterm_at_step, pause_at_step, state["step"], ctx.is_main)
                time_ckpt = bool(s.checkpoint_every_seconds and time.monotonic() - last_ckpt_time >= s.checkpoint_every_seconds)
                agreed = agree_max(ctx, [float(time_eval and ctx.is_main), float(time_ckpt and ctx.is_main), float(stop.signum or 0),
                                         state["elapsed_s"] if ctx.is_main else 0.0])
                time_eval, time_ckpt, signum = bool(agreed[0]), bool(agreed[1]), int(agreed[2]) or None
                agreed_elapsed = agreed[3]
            want_eval = (
                epoch_end
                or (s.eval_every_steps and state["step"] % s.eval_every_steps == 0)
                or time_eval
            )
            if want_eval:
                run_validation()
                last_eval_time = time.monotonic()
            if not ctx.active:
                debug_signals(stop, sigterm_at_step, pause_at_step, state["step"], True)
                time_ckpt = bool(s.checkpoint_every_seconds and time.monotonic() - last_ckpt_time >= s.checkpoint_every_seconds)
                signum = stop.signum
            want_ckpt = (
                signum is not None
                or (s.checkpoint_every_steps and state["step"] % s.checkpoint_every_steps == 0)
                or time_ckpt
            )
            if want_ckpt:
                flush_losses()
                checkpoint()
                last_ckpt_time = time.monotonic()
            if signum is not None:
                bar.close()
                raise RunInterrupted(signum, state["step"], last_path, stop.previous(signum))
            # Time spent validating and checkpointing counts toward the budget, not toward throughput.
            now = time.monotonic()
            state["elapsed_s"] += now - segment_start
            segment_start = now

    bar.close()
    if state["last_eval_step"] != state["step"]:
        run_validation()
    flush_losses()
    checkpoint()

    load_best = functools.partial(load_best_checkpoint, step=state["best_val_step"])
    best = _load_on_rank_0(ctx, load_best, best_path, device)
    model.load_state_dict(best["model"])
    test = evaluate(model, splits["test"], eval_bs, autocast_dtype, task.prepare, dist=ctx,
                    lengths=lengths.get("test"), trim_multiple=s.trim_multiple)
    wall = time.monotonic() - wall_start
    metrics = {
        "best_val_acc": state["best_val_acc"],
        "best_val_step": state["best_val_step"],
        "test_acc": test["acc"],
        "test_loss": test["loss"],
        "steps": state["step"],
        "epochs": state["step"] / steps_per_epoch,
        "steps_per_epoch": steps_per_epoch,
        "planned_steps": total_steps,
        "budget_minutes": s.budget_minutes,
        "stopped_by": "steps" if state["step"] >= total_steps else "budget",
        "train_time_s": state["train_time_s"],
        "elapsed_s": state["elapsed_s"],
        "wall_time_s": wall,  # this process only; elapsed_s spans resumes
        "train_examples_per_s": state["examples"] / state["train_time_s"] if state["train_time_s"] else math.nan,
        "peak_gpu_mem_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "autocast": str(autocast_dtype).replace("torch.", "") if autocast_dtype else "none",
        "train_settings": asdict(s),
        "length_bucketing": {
            "used": bucketing, "why": bucketing_reason, "full_width": full_width if bucketing else None,
            "mean_train_width": state["width_sum"] / state["step"] if bucketing and state["step"] else None,
        },
    }
    if ctx.active:
        metrics["data_parallel"] = {"processes": ctx.world, "per_process_batch": s.batch_size // ctx.world,
                                    "backend": "nccl" if device.type == "cuda" else "gloo"}
    predictions = [{"index": i, "prediction": int(p), "label": int(l)} for i, (p, l) in enumerate(zip(test["predictions"], test["labels"]))]
    return {"metrics": metrics, "history": state["history"], "predictions": predictions}
