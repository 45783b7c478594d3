"""``logger=tensorboard``: the run's history as TensorBoard scalars, in ``<run folder>/tensorboard/``.

Each history row (``state.history``, what ``history.csv`` holds) becomes scalars as it is
appended: ``train/loss`` and ``train/lr`` at each logged loss, ``val/loss`` and ``val/acc`` at each
validation, and at the end ``test/acc`` (the best-validation weights) and ``test/acc_last`` (the
last weights), all against the optimiser step. Watch runs with ``tensorboard --logdir outputs/runs``.

A resumed run opens a new event file that hides what the interrupted one wrote after its
checkpoint's step (``purge_step``: those steps are trained again), so the scalars follow the
record's history; a run starting at step 0 removes the folder first. Rank 0 writes. It needs
the ``tensorboard`` package (``pip install -e ".[tensorboard]"``); ``logger=none`` (the default)
writes nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .state import RunState

LOGGERS = ("none", "tensorboard")
TENSORBOARD_DIR = "tensorboard"
# history.csv column -> scalar tag
TAGS = {"train_loss": "train/loss", "lr": "train/lr", "val_loss": "val/loss", "val_acc": "val/acc"}


def tensorboard_installed() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


def logger_problem(name) -> str | None:
    """Why the ``logger`` setting cannot be used (one line with the fix), or None."""
    if name not in LOGGERS:
        return f"logger={name}: not a logger; use logger=none (the default) or logger=tensorboard"
    if name == "tensorboard" and not tensorboard_installed():
        return (
            'logger=tensorboard: the tensorboard package is not installed; pip install -e ".[tensorboard]" '
            "(or pip install tensorboard), or use logger=none"
        )
    return None


class ScalarLog:
    """Writes nothing (``logger=none``, ranks above 0); :class:`TensorBoardLog` writes."""

    def update(self, state: RunState) -> None:
        """Write the history rows appended since the last call."""

    def test(self, state: RunState, metrics: dict) -> None:
        """Write the test scores at the last step."""

    def close(self) -> None:
        pass


class TensorBoardLog(ScalarLog):
    def __init__(self, folder: Path, state: RunState):
        from torch.utils.tensorboard import SummaryWriter

        if state.step == 0:
            shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        # The rows up to the checkpoint's step were written before it; later ones are written again.
        self.writer = SummaryWriter(str(folder), purge_step=state.step + 1 if state.step else None)
        self.seen = len(state.history)

    def update(self, state: RunState) -> None:
        rows = state.history[self.seen :]
        for row in rows:
            for column, tag in TAGS.items():
                if row.get(column) is not None:
                    self.writer.add_scalar(tag, row[column], row["step"])
        self.seen = len(state.history)
        if any("val_acc" in row for row in rows):
            self.writer.flush()  # a validation is worth seeing now, not at tensorboard's next timed flush

    def test(self, state: RunState, metrics: dict) -> None:
        self.writer.add_scalar("test/acc", metrics["test_acc"], state.step)
        self.writer.add_scalar("test/acc_last", metrics["test_acc_last"], state.step)

    def close(self) -> None:
        self.writer.close()


def open_scalar_log(logger: str, run_dir: Path, state: RunState, is_main: bool) -> ScalarLog:
    """The run's scalar log (``logger``: none or tensorboard; only rank 0 writes)."""
    if logger == "tensorboard" and is_main:
        return TensorBoardLog(Path(run_dir) / TENSORBOARD_DIR, state)
    if logger not in LOGGERS:
        raise ValueError(logger_problem(logger))
    return ScalarLog()
