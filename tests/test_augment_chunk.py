"""train.augment_chunk_steps: the techniques' transforms acting on several steps' batches at once
(repro/training/batches.py) serve the same examples, transformed as the chunk's definition says, and
resume exactly inside a chunk."""

from __future__ import annotations

import pytest
import torch

from repro.followup.techniques import StepDraws, TrainAugment
from repro.training.batches import TrainBatches
from repro.training.distributed import DistContext

N, BATCH, STEPS_PER_EPOCH = 23, 4, 5  # 5 steps an epoch (3 examples dropped), so a chunk of 4 leaves 1


def noise(inputs: torch.Tensor, draws: StepDraws) -> torch.Tensor:
    """A transform that adds one uniform draw per example from the step's (or chunk's) generator."""
    shift = torch.rand(inputs.shape[0], generator=draws.device_generator(inputs.device), dtype=torch.float64)
    return inputs.double() + shift[:, None]


def identity(inputs: torch.Tensor, draws: StepDraws) -> torch.Tensor:
    return inputs


def split() -> dict:
    x = torch.arange(N * 3, dtype=torch.float64).reshape(N, 3)
    return {"x": x, "y": torch.arange(N)}


def batches(transform, chunk: int, seed: int = 7) -> TrainBatches:
    augment = TrainAugment("test", [transform])
    return TrainBatches(split(), seed, BATCH, STEPS_PER_EPOCH, torch.device("cpu"), DistContext(), augment,
                        prepare=lambda t: t, augment_chunk=chunk)  # fmt: skip


def served(loader: TrainBatches, steps) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(b.inputs, b.labels) for b in map(loader.fetch, steps)]


@pytest.mark.parametrize("chunk", [2, 4, 8])
def test_chunked_batches_hold_the_same_examples_in_the_same_order(chunk):
    plain, chunked = served(batches(identity, 1), range(12)), served(batches(identity, chunk), range(12))
    for (x1, y1), (x2, y2) in zip(plain, chunked, strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)


def test_each_batch_is_its_slice_of_the_chunk_transformed_once():
    seed, chunk = 7, 4
    loader, reference = batches(noise, chunk, seed), batches(identity, 1, seed)
    chunks = [(0, 0, 4), (0, 4, 5), (1, 0, 4), (1, 4, 5)]  # (epoch, first, end): never across an epoch
    for epoch, first, end in chunks:
        stored = torch.cat([reference.fetch(epoch * STEPS_PER_EPOCH + i).inputs for i in range(first, end)])
        draws = StepDraws(seed, epoch * STEPS_PER_EPOCH + first, stream=1)
        expected = noise(stored, draws)
        for i in range(first, end):
            got = loader.fetch(epoch * STEPS_PER_EPOCH + i).inputs
            assert torch.equal(got, expected[(i - first) * BATCH : (i - first + 1) * BATCH])


def test_a_run_resumed_inside_a_chunk_draws_what_an_uninterrupted_run_draws():
    uninterrupted = served(batches(noise, 4), range(14))
    for start in (1, 3, 6, 9):
        resumed = served(batches(noise, 4), range(start, 14))
        for (x1, y1), (x2, y2) in zip(uninterrupted[start:], resumed, strict=True):
            assert torch.equal(x1, x2) and torch.equal(y1, y2)


def test_one_step_chunks_are_the_per_step_transform():
    seed = 3
    loader, reference = batches(noise, 1, seed), batches(identity, 1, seed)
    for step in range(7):
        expected = noise(reference.fetch(step).inputs, StepDraws(seed, step))
        assert torch.equal(loader.fetch(step).inputs, expected)


def test_the_chunk_stream_is_apart_from_the_steps_own():
    seeds = {StepDraws(5, step).seed for step in range(200)}
    assert not seeds & {StepDraws(5, step, stream=1).seed for step in range(200)}
    assert StepDraws(5, 9, stream=0).seed == StepDraws(5, 9).seed


def test_a_chunk_below_one_step_is_refused():
    with pytest.raises(ValueError, match=r"^train.augment_chunk_steps=0: give a whole number of steps >= 1$"):
        batches(noise, 0)


def test_a_chunk_with_length_bucketing_is_refused():
    augment = TrainAugment("test", [noise])
    with pytest.raises(ValueError, match=r"^train.augment_chunk_steps=2 with length bucketing: .*=1$"):
        TrainBatches(split(), 0, BATCH, STEPS_PER_EPOCH, torch.device("cpu"), DistContext(), augment,
                     lengths=torch.full((N,), 3), augment_chunk=2)  # fmt: skip


@pytest.mark.parametrize("augment", [None, TrainAugment("test", [])])
def test_length_bucketing_with_a_chunk_but_no_transforms_serves_the_unchunked_batches(augment):
    """A chunk size set where no transform runs (an arm without techniques) chunks nothing: bucketed
    batches are served as with a chunk of one step."""
    lengths = torch.tensor([1 + i % 3 for i in range(N)])
    loaders = [TrainBatches(split(), 3, BATCH, STEPS_PER_EPOCH, torch.device("cpu"), DistContext(), augment,
                            lengths=lengths, trim_multiple=1, augment_chunk=chunk) for chunk in (1, 4)]  # fmt: skip
    for (x1, y1), (x2, y2) in zip(*(served(loader, range(12)) for loader in loaders), strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
