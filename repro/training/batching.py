"""Length bucketing: batches of similar length, trimmed to their longest sequence.

The padded tasks spend much of every step on padding: generated ListOps sequences are 500-2,000
tokens (mean about 1,030) padded to 2,000, IMDb reviews are mostly far shorter than 4,096
bytes. A random batch of 32 is nearly always as long as the longest example, so trimming alone
saves little; sorting each *pool* of consecutive batches of the epoch's permutation by length,
cutting it into batches and shuffling the batches (the bucketing of fairseq and tensor2tensor)
makes batches of similar lengths, and each is trimmed to its longest sequence rounded up to
``multiple`` (a few distinct shapes for cuDNN's autotuner).

Trimming changes nothing a model computes only if the model is *length-flexible*: padded
positions must not reach the real positions' outputs, and no weight may be tied to the padded
length. A mixer says so with its field ``TokenMixer.length_flexible = True`` (the bounded
convolution zeroes padded positions before each convolution); tests check trimmed equals padded
for each model that claims it. LRA pads every batch to the task length (Tay et al. 2021, section 2.2),
so the paper profile keeps ``train.length_bucketing=off``; the budget profile uses ``auto``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..models.mixer import TokenMixer

MODES = ("off", "auto", "on")


def sequence_lengths(inputs: np.ndarray, pad_id: int, chunk_rows: int = 8192) -> np.ndarray:
    """Per example, one past the last non-padding position (over every tower of ``[N, ..., L]``)."""
    inputs = inputs if hasattr(inputs, "shape") else np.asarray(inputs)
    n, width = inputs.shape[0], inputs.shape[-1]
    lengths = np.empty(n, dtype=np.int64)
    for start in range(0, n, chunk_rows):
        real = np.asarray(inputs[start : start + chunk_rows]).reshape(-1, width) != pad_id  # bool, no int64 copy
        last = np.where(real.any(axis=1), width - np.argmax(real[:, ::-1], axis=1), 0)
        lengths[start : start + chunk_rows] = last.reshape(min(chunk_rows, n - start), -1).max(axis=1)
    return lengths


def bucketed_order(
    order: torch.Tensor, lengths: torch.Tensor, batch_size: int, pool_batches: int, generator: torch.Generator
) -> torch.Tensor:
    """``order`` (a multiple of ``batch_size`` long) regrouped into batches of similar length.

    Each run of ``pool_batches`` consecutive batches is sorted by length (stably) and cut into
    batches again; then the batches of the whole epoch are shuffled by ``generator``. Every
    index of ``order`` appears exactly once in the result.
    """
    if len(order) % batch_size:
        raise ValueError(f"{len(order)} indices are not a whole number of batches of {batch_size}")
    pool = batch_size * max(1, pool_batches)
    pieces = []
    for start in range(0, len(order), pool):
        chunk = order[start : start + pool]
        pieces.append(chunk[torch.argsort(lengths[chunk], stable=True)])
    batches = torch.cat(pieces).view(-1, batch_size)
    return batches[torch.randperm(len(batches), generator=generator)].reshape(-1)


def trimmed_width(longest: int, multiple: int, full: int) -> int:
    """``longest`` rounded up to a multiple of ``multiple``, at least ``multiple`` and at most ``full``."""
    return min(full, max(multiple, math.ceil(longest / multiple) * multiple))


def batch_widths(order: torch.Tensor, lengths: torch.Tensor, batch_size: int, multiple: int, full: int) -> list[int]:
    """The trimmed width of each consecutive batch of ``order``."""
    longest = lengths[order].view(-1, batch_size).amax(dim=1)
    return [trimmed_width(int(w), multiple, full) for w in longest]


def model_is_length_flexible(model: torch.nn.Module) -> bool:
    """True when every token mixer of ``model`` declares ``length_flexible`` (see the module doc) and its
    pooling leaves padding out (``mean_all`` averages the padded positions too, so a trimmed batch differs)."""
    encoder = getattr(model, "encoder", None)
    sublayers = getattr(encoder, "sublayers", None)
    if sublayers is None or len(sublayers) == 0:
        return False
    if getattr(getattr(model, "head", None), "pooling", None) == "mean_all":
        return False
    return all(isinstance(sub.mixer, TokenMixer) and sub.mixer.length_flexible for sub in sublayers)


def mode_name(mode) -> str:
    """``train.length_bucketing`` as written: YAML reads a bare off/on as a boolean."""
    return {False: "off", True: "on"}.get(mode, mode) if isinstance(mode, bool) else mode


def resolve_bucketing(mode: str, model: torch.nn.Module, pad_id: int | None, has_augment: bool) -> tuple[bool, str]:
    """Whether to bucket and trim (``train.length_bucketing``), and why; ``on`` refuses what ``auto`` skips."""
    mode = mode_name(mode)
    if mode not in MODES:
        raise ValueError(f"train.length_bucketing={mode!r}: use off, auto or on")
    if mode == "off":
        return False, "off"
    reasons = []
    if pad_id is None:
        reasons.append("the task has no padding (every sequence is full length)")
    if not model_is_length_flexible(model):
        reasons.append(
            "the model's mixers do not declare length_flexible or its pooling averages padding (mean_all) "
            "(its output may depend on the padded length)"
        )
    if has_augment:
        reasons.append("training techniques transform the padded batch")
    if not reasons:
        return True, "length-flexible model on a padded task"
    if mode == "on":
        raise ValueError(f"train.length_bucketing=on, but {'; '.join(reasons)}; use train.length_bucketing=auto or off")
    return False, "auto: " + "; ".join(reasons)


def checkpoint_batching(state: dict, pool_batches: int) -> dict:
    """How the run behind a checkpoint's ``state`` drew its batches.

    Checkpoints written before the setting was stored carry no ``batching`` entry; those that
    bucketed have a ``width_sum`` (it was kept only then), with the run's pool size.
    """
    if "batching" in state:
        return state["batching"]
    bucketed = "width_sum" in state
    return {"bucketing": bucketed, "pool_batches": pool_batches if bucketed else None}


def check_resume_batching(trained_with: dict, wanted: dict, mode, source) -> None:
    """Refuse to continue a run under another batch order: it would train some examples twice
    and skip others in the current epoch. ``trim_multiple`` only changes widths, so it may differ."""
    keys = ("bucketing", "pool_batches")
    if all(trained_with.get(k) == wanted.get(k) for k in keys):
        return

    def describe(b: dict) -> str:
        return f"on (pools of {b['pool_batches']} batches)" if b["bucketing"] else "off"

    same = (
        "++train.length_bucketing=off"
        if not trained_with["bucketing"]
        else f"++train.length_bucketing=on ++train.bucket_pool_batches={trained_with['pool_batches']}"
    )
    raise RuntimeError(
        f"{source} was trained with length bucketing {describe(trained_with)} and this run would train "
        f"with it {describe(wanted)} (train.length_bucketing={mode_name(mode)}): add {same} to continue it, "
        f"or resume=false to start over"
    )
