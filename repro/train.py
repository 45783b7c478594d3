"""The training engine: one (model, task, seed) training with evaluation, checkpoints and a record.

A reader can hold the loop in their head (in the spirit of nanoGPT): a flat loop
over optimiser steps; epoch ``e`` visits the training set in a permutation drawn
from ``(seed, e)``; validation at epoch ends and at configured intervals; the
best-validation weights are kept and the test set is scored once, with them
(never the last weights; DESIGN.md "Test at the best validation checkpoint").

Resuming: ``last.pt`` holds everything the next step depends on (weights,
optimiser, schedule, step, RNG states, history), so a run interrupted by
SIGTERM/SIGINT and restarted ends with the same metrics as one never stopped.
"""
from __future__ import annotations

import math
import os
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

from .records import write_atomic
from .schedule import LRController
from .tasks.base import Split, TaskData

CHECKPOINT_FORMAT = 1


class NonFiniteLoss(RuntimeError):
    """The training loss became NaN or infinite."""


class RunInterrupted(RuntimeError):
    """SIGTERM/SIGINT arrived; a checkpoint was written and the run can be resumed."""

    def __init__(self, signum: int, step: int, checkpoint: Path):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name} at step {step}; checkpoint {checkpoint}; rerun the same command to resume")


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


def save_checkpoint(path: Path, state: dict) -> None:
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    write_atomic(path, buffer.getvalue())


class _SignalFlag:
    """Turns SIGTERM/SIGINT into a flag the loop checks between steps."""

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.signum = signum

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------- evaluation


@torch.no_grad()
def evaluate(model, split: dict, batch_size: int, autocast_dtype, prepare=None) -> dict:
    """Loss, accuracy and predictions of ``model`` on a split held as tensors."""
    model.eval()
    x, y = split["x"], split["y"]
    device = x.device
    total_loss = torch.zeros((), device=device, dtype=torch.float64)
    predictions = []
    for start in range(0, len(y), batch_size):
        inputs = x[start : start + batch_size].to(device, non_blocking=True)
        inputs = prepare(inputs) if prepare else inputs.long()
        labels = y[start : start + batch_size].to(device)
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits = model(inputs)
        total_loss += F.cross_entropy(logits.float(), labels, reduction="sum").double()
        predictions.append(logits.argmax(-1))
    model.train()
    predictions = torch.cat(predictions).cpu()
    labels = y.cpu()
    return {
        "loss": float(total_loss) / len(labels),
        "acc": float((predictions == labels).double().mean()),
        "predictions": predictions.numpy(),
        "labels": labels.numpy(),
    }


# ---------------------------------------------------------------- the loop


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
) -> dict:
    """Train, keep the best-validation weights, score the test set with them.

    ``augment`` (a ``repro.followup.techniques.TrainAugment``, or None): training-time
    techniques. Each step it transforms the stored batch before ``task.prepare`` and may
    replace the loss (the multitask MLM); its randomness is seeded by (seed, step), so
    resuming draws what an uninterrupted run draws. Evaluation never sees it.

    Returns a dict of metrics, the history rows and the test predictions; the
    caller writes the record. Raises NonFiniteLoss or RunInterrupted.
    """
    s = settings
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

    state = {
        "step": 0, "elapsed_s": 0.0, "train_time_s": 0.0, "examples": 0,
        "epoch_loss_sum": 0.0, "epoch_loss_count": 0,
        "best_val_acc": -1.0, "best_val_step": -1, "history": [], "last_eval_step": -1,
    }
    if resume and last_path.exists():
        ckpt = torch.load(last_path, map_location=device, weights_only=False)
        if ckpt.get("format") != CHECKPOINT_FORMAT:
            raise RuntimeError(f"{last_path}: checkpoint format {ckpt.get('format')} is not {CHECKPOINT_FORMAT}; delete it to start over")
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        controller.load_state_dict(ckpt["controller"])
        state = ckpt["state"]
        set_rng_state(ckpt["rng"])
        print(f"resuming {run_dir} from step {state['step']}")
    elif last_path.exists():
        last_path.unlink()

    def checkpoint():
        save_checkpoint(last_path, {
            "format": CHECKPOINT_FORMAT, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "controller": controller.state_dict(), "state": state, "rng": rng_state(),
        })

    loss_buffer: list[torch.Tensor] = []
    buffer_first_step = state["step"]

    def flush_losses():
        """Move buffered step losses to the host; stop on the first non-finite one."""
        nonlocal buffer_first_step
        if not loss_buffer:
            return
        values = torch.stack(loss_buffer).float().cpu()
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
        result = evaluate(model, splits["val"], eval_bs, autocast_dtype, task.prepare)
        state["history"].append({"step": state["step"], "epoch": state["step"] / steps_per_epoch,
                                 "val_loss": result["loss"], "val_acc": result["acc"], "elapsed_s": round(state["elapsed_s"], 3)})
        state["last_eval_step"] = state["step"]
        if result["acc"] > state["best_val_acc"]:
            state["best_val_acc"], state["best_val_step"] = result["acc"], state["step"]
            save_checkpoint(best_path, {"format": CHECKPOINT_FORMAT, "model": model.state_dict(), "step": state["step"]})
        return result

    model.train()
    wall_start = time.monotonic()
    segment_start = time.monotonic()
    last_eval_time = last_ckpt_time = time.monotonic()
    perm_epoch, perm = -1, None
    bar = tqdm(total=total_steps, initial=state["step"], desc=f"train {task.name}", unit="step", disable=not progress, dynamic_ncols=True)

    with _SignalFlag() as stop:
        while True:
            elapsed = state["elapsed_s"] + (time.monotonic() - segment_start)
            done = state["step"] >= total_steps or (budget_s is not None and elapsed >= budget_s)
            if done:
                break
            epoch, index_in_epoch = divmod(state["step"], steps_per_epoch)
            if epoch != perm_epoch:
                perm_epoch, perm = epoch, epoch_permutation(seed, epoch, n_train).to(data_device)
            idx = perm[index_in_epoch * s.batch_size : (index_in_epoch + 1) * s.batch_size]
            inputs = splits["train"]["x"][idx].to(device, non_blocking=True)
            labels = splits["train"]["y"][idx].to(device, non_blocking=True)
            draws = augment.draws(seed, state["step"]) if augment is not None else None
            if augment is not None:
                inputs = augment.transform(inputs, draws)
            inputs = task.prepare(inputs) if task.prepare else inputs.long()

            progress_frac = max(state["step"] / total_steps, elapsed / budget_s if budget_s else 0.0)
            lr = controller.lr(state["step"], min(progress_frac, 1.0))
            for group in optimizer.param_groups:
                group["lr"] = lr * group.get("lr_scale", 1.0)
            technique_loss = augment is not None and augment.has_loss
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                if technique_loss:
                    loss = augment.loss(model, inputs, labels, draws)  # task loss + auxiliary loss
                else:
                    logits = model(inputs)
            if not technique_loss:
                loss = F.cross_entropy(logits.float(), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if s.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
            optimizer.step()
            loss_buffer.append(loss.detach())
            state["step"] += 1
            state["examples"] += len(labels)
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
            want_eval = (
                epoch_end
                or (s.eval_every_steps and state["step"] % s.eval_every_steps == 0)
                or (s.eval_every_seconds and now - last_eval_time >= s.eval_every_seconds)
            )
            if want_eval:
                run_validation()
                last_eval_time = time.monotonic()
            if sigterm_at_step is not None and state["step"] == sigterm_at_step:
                os.kill(os.getpid(), signal.SIGTERM)
            want_ckpt = (
                stop.signum is not None
                or (s.checkpoint_every_steps and state["step"] % s.checkpoint_every_steps == 0)
                or (s.checkpoint_every_seconds and time.monotonic() - last_ckpt_time >= s.checkpoint_every_seconds)
            )
            if want_ckpt:
                flush_losses()
                checkpoint()
                last_ckpt_time = time.monotonic()
            if stop.signum is not None:
                bar.close()
                raise RunInterrupted(stop.signum, state["step"], last_path)
            # Time spent validating and checkpointing counts toward the budget, not toward throughput.
            now = time.monotonic()
            state["elapsed_s"] += now - segment_start
            segment_start = now

    bar.close()
    if state["last_eval_step"] != state["step"]:
        run_validation()
    flush_losses()
    checkpoint()

    best = torch.load(best_path, map_location=device, weights_only=False)
    model.load_state_dict(best["model"])
    test = evaluate(model, splits["test"], eval_bs, autocast_dtype, task.prepare)
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
    }
    predictions = [{"index": i, "prediction": int(p), "label": int(l)} for i, (p, l) in enumerate(zip(test["predictions"], test["labels"]))]
    return {"metrics": metrics, "history": state["history"], "predictions": predictions}
