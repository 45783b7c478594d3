"""The run's clocks: the time budget, the throughput clock, the evaluation/checkpoint intervals and the
share of step time spent fetching batches.

``state.elapsed_s`` (kept across resumes) counts all of training: steps, evaluation and
checkpoints; it is what a time budget (``train.budget_minutes``, the budget profile) limits
and what a budget run's schedule follows. ``state.train_time_s`` counts the steps alone
(examples per second). Time spent validating and checkpointing counts toward the budget,
not toward throughput.

``DataWaitProbe`` times the share of a training step spent producing its batch (the input
pipeline's cost). Every ``every``-th step is timed serially: the device is synchronised before
the batch is fetched, once the batch is ready and once the optimiser step is done, so the two intervals are
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

# The clock a run reads (seconds, monotonic). A test replaces it with a fake one (monkeypatch) whose time
# moves only with the training steps; then ``elapsed_s`` is a function of the steps and two runs' history.csv
# can be compared byte for byte, a resumed one against an uninterrupted one.
clock: Callable[[], float] = time.monotonic


class RunClock:
    """Accumulates wall-clock time into a :class:`RunState` in segments between reads."""

    def __init__(
        self,
        budget_minutes: float | None,
        eval_every_seconds: float | None,
        checkpoint_every_seconds: float | None,
        now: Callable[[], float] | None = None,
    ):
        self.now = now or clock  # seconds, monotonic: the module's ``clock`` unless given
        self.budget_s = budget_minutes * 60 if budget_minutes else None
        self.eval_every_seconds = eval_every_seconds
        self.checkpoint_every_seconds = checkpoint_every_seconds
        self.wall_start = self.segment_start = self.last_checkpoint = self.now()

    def elapsed(self, state: RunState) -> float:
        """The run's seconds so far, the open segment included."""
        return state.elapsed_s + (self.now() - self.segment_start)

    def over_budget(self, elapsed: float) -> bool:
        return self.budget_s is not None and elapsed >= self.budget_s

    def budget_left(self, state: RunState) -> float | None:
        """The wall-clock budget's seconds left, resumes included (None: no budget); the progress bar's ETA."""
        return None if self.budget_s is None else self.budget_s - self.elapsed(state)

    def progress(self, step: int, total_steps: int, elapsed: float) -> float:
        """Training progress in [0, 1] (repro/training/schedule.py): steps done over planned, or under a
        budget the share of its seconds used, whichever is larger."""
        return min(max(step / total_steps, elapsed / self.budget_s if self.budget_s else 0.0), 1.0)

    def end_step(self, state: RunState) -> None:
        """Close the segment of a training step: it counts toward the budget and toward throughput."""
        now = self.now()
        state.elapsed_s += now - self.segment_start
        state.train_time_s += now - self.segment_start
        self.segment_start = now

    def end_overhead(self, state: RunState) -> None:
        """Close the segment of evaluation and checkpointing: it counts toward the budget only."""
        now = self.now()
        state.elapsed_s += now - self.segment_start
        self.segment_start = now

    def evaluation_due(self, state: RunState) -> bool:
        """``train.eval_every_seconds`` of the run's clock have passed since the last evaluation, as of the step's
        end (called right after ``end_step``). On the run's clock, resumes included, so a resumed run evaluates
        at the steps an uninterrupted one would, given the same step times."""
        interval = self.eval_every_seconds
        return bool(interval and state.elapsed_s - state.last_eval_elapsed_s >= interval)

    def checkpoint_due(self) -> bool:
        """``train.checkpoint_every_seconds`` have passed since the last checkpoint, as of now."""
        return bool(
            self.checkpoint_every_seconds and self.now() - self.last_checkpoint >= self.checkpoint_every_seconds
        )

    def evaluated(self, state: RunState) -> None:
        state.last_eval_elapsed_s = self.elapsed(state)

    def checkpointed(self) -> None:
        self.last_checkpoint = self.now()

    def wall_time(self) -> float:
        """Seconds since this process started training (not spanning resumes, unlike ``elapsed_s``)."""
        return self.now() - self.wall_start


class DataWaitProbe:
    """Times every ``every``-th step's fetch and whole step into ``state.data_wait_s`` / ``state.data_wait_step_s``,
    counted from the third step this process trains. The first two carry one-off costs: the first kernel
    selection, compilation and caches warming; the second a compiled function's second compilation
    (``train.compile_transforms``' CIFAR-10 chain builds its second graph on its second call), seconds that a
    200-step probe's four samples would count as waiting for data. Counting from
    there also keeps the samples off the epochs' first steps where those are multiples of 25 or 50 (ListOps'
    3,000 and image's 175 steps an epoch): each draws its epoch's permutation, which sampled every seventh
    time (image) weighed 25 times its share."""

    def __init__(self, device: torch.device, every: int = 50, clock: Callable[[], float] = time.perf_counter):
        self.device, self.every, self.clock = device, every, clock
        self.first_step: int | None = None

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, state: RunState, fetch: Callable[[], object], compute: Callable[[object], object]):
        """``compute(fetch())``, timed when this step is sampled; returns (batch, compute's result)."""
        if self.first_step is None:
            self.first_step = state.step
        if (state.step - self.first_step) % self.every != min(2, self.every - 1):
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
