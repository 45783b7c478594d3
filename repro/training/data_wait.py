"""The share of a training step spent producing its batch (the input pipeline's cost).

Every ``every``-th step is timed serially: the device is synchronised before the batch is
fetched, once the batch is ready and once the optimiser step is done, so the two intervals are
the time the batch took (indexing the split held on the device, the training techniques'
transforms, the task's ``prepare``) and the time the whole step took. The other steps run
asynchronously, as always, so a host that runs ahead hides the fetch: the share of the sampled
steps is an upper bound on the time the accelerator waits for data. On the CPU nothing is
asynchronous and the share is the fetch's share of the step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from .state import RunState


class DataWaitProbe:
    """Times every ``every``-th step's fetch and whole step into ``state.data_wait_s`` / ``state.data_wait_step_s``."""

    def __init__(self, device: torch.device, every: int = 50, clock: Callable[[], float] = time.perf_counter):
        self.device, self.every, self.clock = device, every, clock

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, state: RunState, fetch: Callable[[], object], compute: Callable[[object], object]):
        """``compute(fetch())``, timed when this step is sampled; returns (batch, compute's result)."""
        if state.step % self.every:
            batch = fetch()
            return batch, compute(batch)
        self._sync()
        start = self.clock()
        batch = fetch()
        self._sync()
        fetched = self.clock()
        result = compute(batch)
        self._sync()
        state.data_wait_s += fetched - start
        state.data_wait_step_s += self.clock() - start
        state.data_wait_steps += 1
        return batch, result

    @staticmethod
    def share(state: RunState) -> float | None:
        """The fetch's share of the sampled steps' time (None before any step was sampled)."""
        return state.data_wait_s / state.data_wait_step_s if state.data_wait_step_s > 0 else None
