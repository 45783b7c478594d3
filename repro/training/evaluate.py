"""Scoring a split (validation during training, test once with the best weights) and the validation log.

The test set is scored once, with the best-validation weights, never the last ones
(ARCHITECTURE.md, "Test at the best validation checkpoint").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .. import records
from .batching import trimmed_width
from .checkpoints import CHECKPOINT_FORMAT, save_best_checkpoint
from .distributed import DistContext, gather_1d, sum_
from .state import RunState


def compiled_forward(model: torch.nn.Module, compile_model: bool):
    """The model's forward for scoring: with ``train.compile``, the model through ``torch.compile`` in its
    default mode (no CUDA graphs), the same function as the model (tests/test_compiled_step.py); its weights
    are the model's, so loading the best checkpoint or the weight average into ``model`` is what it scores.
    ``evaluate`` fills a split's last batch to the batch size for it (the examples are scored one by one, so
    the filler changes nothing), so that batch does not compile a graph of its own or turn the batch size
    dynamic in the graphs training compiles from the same forward. Without: None (the model)."""
    return torch.compile(model) if compile_model else None


@torch.no_grad()
def evaluate(
    model,
    split: dict,
    batch_size: int,
    autocast_dtype,
    prepare=None,
    dist: DistContext | None = None,
    lengths: torch.Tensor | None = None,
    trim_multiple: int = 128,
    progress: str | None = None,
    forward=None,
) -> dict:
    """Loss, accuracy and predictions of ``model`` on a split held as tensors.

    With several ranks (``dist``), batch ``b`` is scored by rank ``b % world`` and the
    predictions are gathered back in order, so every rank returns what one process would
    (each batch holds the same examples as in a one-process run). With ``lengths`` (length
    bucketing, a length-flexible model), examples are scored in order of length, each batch
    trimmed to its longest (repro/training/batching.py); predictions come back in the split's order.
    ``progress``: a bar over this rank's batches, with this name (None: none). ``forward``: what computes
    the logits, ``model`` itself or the same function compiled (``train.compile``: ``compiled_forward``);
    ``model`` is what is switched to evaluation mode and back.
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
    mine = starts[ctx.rank :: ctx.world]
    for start in tqdm(mine, desc=progress, unit="batch", leave=False, disable=progress is None, dynamic_ncols=True):
        if order is None:
            inputs, labels = x[start : start + batch_size], y[start : start + batch_size]
        else:  # this batch of the length-sorted order, trimmed to its longest
            rows = order_on_data[start : start + batch_size]
            width = trimmed_width(int(sorted_lengths[start : start + batch_size].max()), trim_multiple, x.shape[-1])
            inputs, labels = x.narrow(-1, 0, width)[rows], y[rows.to(y.device)]
        inputs = inputs.to(device, non_blocking=True)
        inputs = prepare(inputs) if prepare else inputs.long()
        labels = labels.to(device)
        short = batch_size - len(inputs) if forward is not None else 0
        if short > 0:  # a split's last batch, filled to the batch size with its last row: one shape to compile
            inputs = torch.cat([inputs, inputs[-1:].expand(short, *inputs.shape[1:])])
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits = (model if forward is None else forward)(inputs)
        logits = logits[: len(labels)]
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


@dataclass
class Scorer:
    """:func:`evaluate` with one run's settings, by split name (``val``, ``test``)."""

    model: torch.nn.Module
    splits: dict  # name -> {"x": inputs, "y": labels} as tensors
    batch_size: int
    autocast_dtype: torch.dtype | None
    prepare: object  # the task's prepare hook, or None
    ctx: DistContext
    lengths: dict  # name -> sequence lengths (length bucketing), else empty
    trim_multiple: int
    progress: bool = False  # a bar per scoring, named by the split
    forward: object = None  # the model compiled for scoring (train.compile), else None: the model itself

    def __call__(self, name: str) -> dict:
        return evaluate(
            self.model,
            self.splits[name],
            self.batch_size,
            self.autocast_dtype,
            self.prepare,
            dist=self.ctx,
            lengths=self.lengths.get(name),
            trim_multiple=self.trim_multiple,
            progress=name if self.progress else None,
            forward=self.forward,
        )


def validate(
    score: Scorer,
    state: RunState,
    steps_per_epoch: int,
    best_path: Path,
    print_line: bool,
    progress_path: Path | None = None,
    fingerprint: dict | None = None,
) -> dict:
    """Score the validation split, log it in the history, keep the weights in ``best_path`` when they are
    the best so far (rank 0 writes, with the run's ``fingerprint``: ``records.run_fingerprint``), with
    ``print_line`` print :func:`eval_line`, and (rank 0) write the step and elapsed seconds to
    ``progress_path`` (``records.PROGRESS_FILE``: a grid's view of the run)."""
    result = score("val")
    state.log(steps_per_epoch, val_loss=result["loss"], val_acc=result["acc"])
    state.last_eval_step = state.step
    if result["acc"] > state.best_val_acc:
        state.best_val_acc, state.best_val_step = result["acc"], state.step
        if score.ctx.is_main:
            best = {"format": CHECKPOINT_FORMAT, "model": score.model.state_dict(), "step": state.step}
            if fingerprint is not None:
                best["fingerprint"] = fingerprint
            save_best_checkpoint(best_path, best)
    if print_line:
        print(eval_line(state), flush=True)
    if progress_path is not None and score.ctx.is_main:
        records.write_json(progress_path, {"step": state.step, "elapsed_s": round(state.elapsed_s, 3)})
    return result


def eval_line(state: RunState) -> str:
    """One log line for the evaluation just appended to ``state.history``: step, epoch, the
    validation accuracy and loss, the best so far, the last logged training loss, elapsed time."""
    row = state.history[-1]
    last_train = next((r["train_loss"] for r in reversed(state.history) if "train_loss" in r), None)
    train = "-" if last_train is None else f"{last_train:.4f}"
    return (
        f"eval step {row['step']} (epoch {row['epoch']:.2f}): val acc {row['val_acc']:.4f}, "
        f"val loss {row['val_loss']:.4f}; top {state.best_val_acc:.4f} at step {state.best_val_step}; "
        f"train loss {train}; {row['elapsed_s']:.0f} s"
    )
