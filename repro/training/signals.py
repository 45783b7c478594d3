"""Stop signals: SIGTERM/SIGINT/SIGUSR1/SIGPIPE become a flag the loop reads between steps.

The loop then writes a checkpoint and raises :class:`RunInterrupted`; the runner exits with
128 + signum after handing the signal to the handler it had before (a launcher's requeue).
SIGPIPE is what a run raises to itself when its stdout or stderr loses its reader (console.py).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

# SIGUSR1: Slurm's warning before preemption/time limit; SIGPIPE: a console without its reader (console.py).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1) + tuple(
    getattr(signal, name) for name in ("SIGPIPE",) if hasattr(signal, name)
)


class RunInterrupted(RuntimeError):
    """A stop signal arrived; a checkpoint was written and the run can be resumed."""

    def __init__(self, signum: int, step: int, checkpoint: Path, previous_handler=None):
        self.signum = signum
        self.previous_handler = previous_handler
        super().__init__(
            f"stopped by {signal.Signals(signum).name} at step {step}; checkpoint {checkpoint}; "
            "rerun the same command to resume"
        )

    def pass_on(self) -> None:
        """Call the Python handler the signal had before training took it (e.g. a cluster
        launcher's requeue-on-SIGUSR1), now that the checkpoint is safe; default handlers are
        left alone (the caller exits with 128 + signum)."""
        handler = self.previous_handler
        if callable(handler) and handler is not signal.default_int_handler:
            handler(self.signum, None)


class StopSignals:
    """Within ``with``: each of ``STOP_SIGNALS`` sets ``signum`` instead of ending the process.

    ``sigterm_at_step`` and ``pause_at_step`` are test hooks, run when the loop reads the flag
    (``read``): send this process SIGTERM after that step; after that step, wait up to two
    minutes for a signal from outside (so a test can send one at a known step).
    """

    def __init__(self, sigterm_at_step: int | None = None, pause_at_step: int | None = None, loud: bool = True):
        self.signum: int | None = None
        self.sigterm_at_step = sigterm_at_step
        self.pause_at_step = pause_at_step
        self.loud = loud  # print the pause (rank 0 only)
        self._previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame):
        self.signum = signum

    def read(self, step: int) -> int | None:
        """The signal caught so far (None: none), after ``step``'s test hooks."""
        if self.sigterm_at_step is not None and step == self.sigterm_at_step:
            os.kill(os.getpid(), signal.SIGTERM)
        if self.pause_at_step is not None and step == self.pause_at_step:
            if self.loud:
                print(f"paused after step {step} (debug.pause_at_step): waiting for a signal", flush=True)
            deadline = time.monotonic() + 120
            while self.signum is None and time.monotonic() < deadline:
                time.sleep(0.02)
        return self.signum

    def interrupted(self, signum: int, step: int, checkpoint: Path) -> RunInterrupted:
        """The exception that ends the run, with the handler ``signum`` had before (None outside the main thread)."""
        return RunInterrupted(signum, step, checkpoint, self._previous.get(signum))
