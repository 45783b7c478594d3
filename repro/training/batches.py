"""The training batch of each step: which examples, at what width, transformed how.

Epoch ``e`` visits the training set in a permutation drawn from ``(seed, e)``; the last
partial batch is dropped, as LRA does. With length bucketing (repro/training/batching.py) the same
examples are regrouped into batches of similar length, each trimmed to its longest. With
several processes (repro/training/distributed.py) every rank walks the same global permutation and
takes its equal slice of each global batch. Training techniques
(repro/followup/techniques) transform the global batch as one process would, seeded by
(seed, step), before the slicing, so a resumed or data-parallel run draws what one
uninterrupted process draws. With ``augment_chunk`` = k > 1 (``train.augment_chunk_steps``) the
transforms act on the batches of k steps of one epoch at once, drawn from (seed, the chunk's first
step); a run resumed inside a chunk transforms that chunk again, so it draws what an uninterrupted run
draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..tasks.base import TaskData
from .batching import batch_widths, bucketed_order, resolve_bucketing, sequence_lengths
from .distributed import DistContext
from .settings import TrainSettings


def to_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """Materialise a (memory-mapped) array as a tensor of a dtype torch can index with."""
    array = np.asarray(array)
    if array.dtype == np.uint16:
        array = array.astype(np.int32)
    return torch.from_numpy(np.ascontiguousarray(array)).to(device)


def epoch_permutation(seed: int, epoch: int, n: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator)


@dataclass
class TrainingData:
    """A task's splits as tensors, and how training walks them."""

    splits: dict  # name -> {"x": inputs, "y": labels}, on the device unless train.data_on_device is false
    steps_per_epoch: int  # the last partial batch is dropped, as LRA does
    total_steps: int  # planned: train.epochs, capped by train.max_steps
    bucketing: bool  # length bucketing used (repro/training/batching.py)
    bucketing_reason: str
    lengths: dict  # name -> sequence lengths (bucketing only), else empty
    batching: dict  # {"bucketing", "pool_batches"}: what a resumed run must match
    pack_lengths: torch.Tensor | None = None  # train.pack_sequences: the training examples' lengths, on the host

    @classmethod
    def build(
        cls, task: TaskData, s: TrainSettings, model: torch.nn.Module, has_augment: bool, device: torch.device
    ) -> TrainingData:
        data_device = device if s.data_on_device else torch.device("cpu")
        splits = {
            name: {"x": to_tensor(sp.inputs, data_device), "y": to_tensor(sp.labels, data_device).long()}
            for name, sp in task.splits().items()
        }
        n_train = len(task.train)
        steps_per_epoch = n_train // s.batch_size
        if steps_per_epoch == 0:
            raise ValueError(f"train.batch_size={s.batch_size} exceeds the {n_train} training examples")
        total_steps = s.epochs * steps_per_epoch
        if s.max_steps is not None:
            total_steps = min(total_steps, s.max_steps)
        bucketing, reason = resolve_bucketing(s.length_bucketing, model, task.pad_id, has_augment)
        if bucketing and (s.trim_multiple < 1 or s.bucket_pool_batches < 1):
            raise ValueError(
                f"train.trim_multiple={s.trim_multiple} and train.bucket_pool_batches="
                f"{s.bucket_pool_batches} must both be at least 1"
            )
        lengths = {}
        if bucketing:
            lengths = {
                name: torch.from_numpy(sequence_lengths(split.inputs, task.pad_id))
                for name, split in task.splits().items()
            }
        batching = {"bucketing": bucketing, "pool_batches": s.bucket_pool_batches if bucketing else None}
        pack_lengths = None
        if s.pack_sequences and task.pad_id is not None and task.train.inputs.ndim == 2:
            # so that a packed step plans its layout on the host (repro/models/packing.py)
            pack_lengths = torch.from_numpy(sequence_lengths(task.train.inputs, task.pad_id))
        return cls(splits, steps_per_epoch, total_steps, bucketing, reason, lengths, batching, pack_lengths)

    @property
    def full_width(self) -> int:
        """The padded length (used with bucketing only: never RGB channels)."""
        return int(self.splits["train"]["x"].shape[-1])


@dataclass
class Batch:
    """One step's training inputs (prepared for the model), labels and technique draws."""

    inputs: torch.Tensor
    labels: torch.Tensor
    draws: object  # repro.followup.techniques.StepDraws, or None without techniques
    width: int | None  # the trimmed width (length bucketing), else None
    lengths: torch.Tensor | None = None  # each example's real tokens, on the host (train.pack_sequences)


class TrainBatches:
    """Serves the batch of any step from the training split held as tensors (``{"x": inputs, "y": labels}``).

    ``augment``: training techniques (or None); ``prepare``: the task's hook before the model;
    ``lengths`` (length bucketing only): the examples' lengths, for batches of similar length,
    each trimmed to its longest rounded up to ``trim_multiple``; ``augment_chunk``: the steps whose
    batches the transforms act on at once (module docstring); ``pack_lengths``: the examples' lengths on the
    host, given with each batch (``Batch.lengths``) for a packed model (train.pack_sequences).
    """

    def __init__(
        self,
        split: dict,
        seed: int,
        batch_size: int,
        steps_per_epoch: int,
        device: torch.device,
        ctx: DistContext,
        augment=None,
        prepare=None,
        lengths: torch.Tensor | None = None,
        pool_batches: int = 64,
        trim_multiple: int = 128,
        augment_chunk: int = 1,
        pack_lengths: torch.Tensor | None = None,
    ):
        if augment_chunk < 1:
            raise ValueError(f"train.augment_chunk_steps={augment_chunk}: give a whole number of steps >= 1")
        chunked = augment is not None and augment_chunk > 1 and bool(augment.transforms)  # _from_chunk serves
        if chunked and lengths is not None:  # without transforms there is no chunk: nothing to refuse
            raise ValueError(
                f"train.augment_chunk_steps={augment_chunk} with length bucketing: the chunk's batches have "
                "different widths; set train.length_bucketing=off or train.augment_chunk_steps=1"
            )
        self.x, self.y = split["x"], split["y"]
        self.seed, self.batch_size, self.steps_per_epoch = seed, batch_size, steps_per_epoch
        self.device, self.ctx, self.augment, self.prepare = device, ctx, augment, prepare
        self.lengths, self.pool_batches, self.trim_multiple = lengths, pool_batches, trim_multiple
        share = batch_size // ctx.world
        self.rank_rows = slice(ctx.rank * share, (ctx.rank + 1) * share)  # this rank's slice of a global batch
        self._epoch, self._order, self._widths = -1, None, None
        self.augment_chunk = augment_chunk
        self._chunked = chunked
        self._chunk_key: tuple[int, int] | None = None  # (epoch, first index) of the transformed chunk held
        self._chunk: torch.Tensor | None = None
        self.pack_lengths = pack_lengths
        self._order_host: torch.Tensor | None = None

    def _epoch_order(self, epoch: int) -> None:
        """The permutation of ``epoch`` (bucketed: regrouped by length, with each batch's trimmed width)."""
        order = epoch_permutation(self.seed, epoch, len(self.y))
        if self.lengths is not None:  # the same examples as without, regrouped by length (repro/training/batching.py)
            regroup = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch + 500_009)
            order = bucketed_order(
                order[: self.steps_per_epoch * self.batch_size],
                self.lengths,
                self.batch_size,
                self.pool_batches,
                regroup,
            )
            self._widths = batch_widths(order, self.lengths, self.batch_size, self.trim_multiple, int(self.x.shape[-1]))
        self._epoch, self._order, self._order_host = epoch, order.to(self.x.device), order

    def fetch(self, step: int) -> Batch:
        """The batch of optimiser step ``step`` (0-based): this rank's part of the global batch, on the device."""
        epoch, index = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            self._epoch_order(epoch)
        global_rows = slice(index * self.batch_size, (index + 1) * self.batch_size)
        rows = self._order[global_rows]
        if self.ctx.active and self.augment is None:
            rows = rows[self.rank_rows]
        source, width = self.x, None
        if self.lengths is not None:
            width = self._widths[index]
            source = source.narrow(-1, 0, width)
        inputs = self._from_chunk(epoch, index) if self._chunked else source[rows].to(self.device, non_blocking=True)
        labels = self.y[rows].to(self.device, non_blocking=True)
        draws = None
        if self.augment is not None:
            draws = self.augment.draws(self.seed, step)
            if not self._chunked:
                inputs = self.augment.transform(inputs, draws)
            if self.ctx.active:  # transformed as one process would transform the whole batch, then sliced
                inputs, labels = inputs[self.rank_rows], labels[self.rank_rows]
                if self.ctx.rank > 0:  # the objective's own draws (MLM masks) differ between ranks
                    draws = self.augment.draws(self.seed + 1_000_003 * self.ctx.rank, step)
        inputs = self.prepare(inputs) if self.prepare else inputs.long()
        lengths = None
        if self.pack_lengths is not None:  # the same rows as ``rows``, read on the host
            lengths = self.pack_lengths[self._order_host[global_rows]]
            lengths = lengths[self.rank_rows] if self.ctx.active else lengths
        return Batch(inputs, labels, draws, width, lengths)

    def _from_chunk(self, epoch: int, index: int) -> torch.Tensor:
        """The transformed global batch of step ``index`` of ``epoch``, cut from its chunk's (transformed
        once, when the chunk's first batch is asked for or a run resumes inside it)."""
        first = index - index % self.augment_chunk
        if self._chunk_key != (epoch, first):
            last = min(first + self.augment_chunk, self.steps_per_epoch)
            rows = self._order[first * self.batch_size : last * self.batch_size]
            stored = self.x[rows].to(self.device, non_blocking=True)
            draws = self.augment.chunk_draws(self.seed, epoch * self.steps_per_epoch + first)
            self._chunk, self._chunk_key = self.augment.transform(stored, draws), (epoch, first)
        offset = (index - first) * self.batch_size
        return self._chunk[offset : offset + self.batch_size]
