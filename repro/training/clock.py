"""The run's clocks: the time budget, the throughput clock and the evaluation/checkpoint intervals.

``state.elapsed_s`` (kept across resumes) counts all of training: steps, evaluation and
checkpoints; it is what a time budget (``train.budget_minutes``, the budget profile) limits
and what a budget run's schedule follows. ``state.train_time_s`` counts the steps alone
(examples per second). Time spent validating and checkpointing counts toward the budget,
not toward throughput.
"""

from __future__ import annotations

import time

from .state import RunState


class RunClock:
    """Accumulates wall-clock time into a :class:`RunState` in segments between reads."""

    def __init__(
        self, budget_minutes: float | None, eval_every_seconds: float | None, checkpoint_every_seconds: float | None
    ):
        self.budget_s = budget_minutes * 60 if budget_minutes else None
        self.eval_every_seconds = eval_every_seconds
        self.checkpoint_every_seconds = checkpoint_every_seconds
        self.wall_start = time.monotonic()
        self.segment_start = time.monotonic()
        self.last_eval = self.last_checkpoint = time.monotonic()
        self.step_end = self.segment_start

    def elapsed(self, state: RunState) -> float:
        """The run's seconds so far, the open segment included."""
        return state.elapsed_s + (time.monotonic() - self.segment_start)

    def over_budget(self, elapsed: float) -> bool:
        return self.budget_s is not None and elapsed >= self.budget_s

    def progress(self, step: int, total_steps: int, elapsed: float) -> float:
        """Training progress in [0, 1] (repro/schedule.py): steps done over planned, or under a
        budget the share of its seconds used, whichever is larger."""
        return min(max(step / total_steps, elapsed / self.budget_s if self.budget_s else 0.0), 1.0)

    def end_step(self, state: RunState) -> None:
        """Close the segment of a training step: it counts toward the budget and toward throughput."""
        self.step_end = now = time.monotonic()
        state.elapsed_s += now - self.segment_start
        state.train_time_s += now - self.segment_start
        self.segment_start = now

    def end_overhead(self, state: RunState) -> None:
        """Close the segment of evaluation and checkpointing: it counts toward the budget only."""
        now = time.monotonic()
        state.elapsed_s += now - self.segment_start
        self.segment_start = now

    def evaluation_due(self) -> bool:
        """``train.eval_every_seconds`` have passed since the last evaluation, as of the step's end."""
        return bool(self.eval_every_seconds and self.step_end - self.last_eval >= self.eval_every_seconds)

    def checkpoint_due(self) -> bool:
        """``train.checkpoint_every_seconds`` have passed since the last checkpoint, as of now."""
        return bool(
            self.checkpoint_every_seconds and time.monotonic() - self.last_checkpoint >= self.checkpoint_every_seconds
        )

    def evaluated(self) -> None:
        self.last_eval = time.monotonic()

    def checkpointed(self) -> None:
        self.last_checkpoint = time.monotonic()

    def wall_time(self) -> float:
        """Seconds since this process started training (not spanning resumes, unlike ``elapsed_s``)."""
        return time.monotonic() - self.wall_start
