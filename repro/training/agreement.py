"""What every rank must decide at the same step: time-based evaluation and checkpoints, stops.

Rank 0's clock decides the budget stop, the time-placed schedule and the time-based
evaluation and checkpoint intervals; any rank may have caught a stop signal. With several
processes these decisions travel in one :func:`repro.training.distributed.agree_max` per step, at the
step's end, on CPU tensors over a gloo group (it never waits on the GPU stream); a rank that
decided alone would leave the others waiting in a collective. So the budget's clock a step
reads is rank 0's as it stood before the previous step's evaluation or checkpoint (a budget
stop may come one step later than one process would make it). One process reads its own
clock and signal flag directly, each as late as it can: the checkpoint and stop decision
after any evaluation.
"""

from __future__ import annotations

from .clock import RunClock
from .distributed import DistContext, agree_max
from .signals import StopSignals
from .state import RunState


class StepAgreement:
    """The per-step decisions, the same on every rank; for one process, its own clock and flag."""

    def __init__(self, ctx: DistContext, clock: RunClock, stop: StopSignals, state: RunState):
        self.ctx, self.clock, self.stop = ctx, clock, stop
        self.agreed_elapsed = agree_max(ctx, [state.elapsed_s if ctx.is_main else 0.0])[0] if ctx.active else None
        self.agreed_checkpoint, self.agreed_signum = False, None

    def elapsed(self, state: RunState) -> float:
        """The budget's clock before a step: this process's, or rank 0's as agreed at the last step's end."""
        return self.agreed_elapsed if self.ctx.active else self.clock.elapsed(state)

    def evaluation_due(self, state: RunState) -> bool:
        """Right after a step: whether ``train.eval_every_seconds`` calls for an evaluation now.

        With several processes this is the step's one agreement: it also settles the checkpoint
        and stop decisions (:meth:`checkpoint_or_stop`) and rank 0's elapsed time for the next step.
        """
        due = self.clock.evaluation_due(state)
        if not self.ctx.active:
            return due
        main = self.ctx.is_main
        self.stop.read(state.step)
        checkpoint = self.clock.checkpoint_due()
        agreed = agree_max(
            self.ctx,
            [
                float(due and main),
                float(checkpoint and main),
                float(self.stop.signum or 0),
                state.elapsed_s if main else 0.0,
            ],
        )
        self.agreed_checkpoint, self.agreed_signum = bool(agreed[1]), int(agreed[2]) or None
        self.agreed_elapsed = agreed[3]
        return bool(agreed[0])

    def checkpoint_or_stop(self, state: RunState) -> tuple[bool, int | None]:
        """After any evaluation: whether ``train.checkpoint_every_seconds`` calls for a checkpoint, and
        the stop signal caught (None: none)."""
        if self.ctx.active:
            return self.agreed_checkpoint, self.agreed_signum
        self.stop.read(state.step)
        return self.clock.checkpoint_due(), self.stop.signum
