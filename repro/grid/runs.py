"""Where each cell's record and checkpoints live and what they say, resolved as the runner resolves them.

The cells' settings come from Hydra's compose API over ``experiments/conf`` and
``repro.run.settings`` (the runner's own precedence), once per (arm, task): the seed only
changes the record folder's last part. So the grid skips, plans and archives exactly the
folders ``experiments/run.py`` writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import records
from ..run import runner
from ..run.settings import CONF_DIR, compose_run, hydra_context
from .cells import Cell, GridError


@dataclass
class CellRun:
    """A cell with its resolved settings (``settings.resolve``) and its record folder."""

    cell: Cell
    run: dict
    run_dir: Path

    @property
    def train(self) -> dict:
        return self.run["train"]


def _resolve_cell(arm: str, task: str, overrides: list[str], where: str) -> tuple[dict, Path]:
    try:
        composed = compose_run([f"arm={arm}", f"task={task}", "seed=0", *overrides], typed_task=True)
        cfg, run = composed.cfg, composed.run
    except Exception as err:  # Hydra's and resolve's errors: name the cell and the first line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GridError(f"{where}: cell {arm} {task}: cannot resolve its settings: {first}") from err
    return run, runner.run_dir_for(cfg, run).parent


def resolve_cells(
    cells: list[Cell], common: list[str], extra: list[str], where: str, conf_dir: Path = CONF_DIR
) -> list[CellRun]:
    """Each cell's resolved settings and record folder: the grid's ``common`` overrides, the cell's block's, then
    the command line's ``extra`` (the order of ``cells.command``)."""
    by_pair: dict[tuple, tuple[dict, Path]] = {}
    with hydra_context(conf_dir):
        for cell in cells:
            key = (cell.arm, cell.task, cell.overrides)
            if key not in by_pair:
                by_pair[key] = _resolve_cell(cell.arm, cell.task, [*common, *cell.overrides, *extra], where)
    out = []
    for cell in cells:
        run, parent = by_pair[cell.arm, cell.task, cell.overrides]
        out.append(CellRun(cell, {**run, "seed": cell.seed}, parent / f"seed{cell.seed}"))
    return out


def locate(cells: list[Cell], common: list[str], extra: list[str], folders: list[Path], where: str) -> list[tuple]:
    """Per cell: (its run in the first of ``folders`` holding its complete record with these settings, that
    folder), else (its run in the first folder, None). No folders: no cells located."""
    per_folder = [resolve_cells(cells, common, [*extra, f"output_dir={f}"], where) for f in folders]
    located = []
    for runs in zip(*per_folder, strict=True):
        index = next((i for i, cell_run in enumerate(runs) if record_matches(cell_run)), None)
        located.append((runs[0], None) if index is None else (runs[index], Path(folders[index])))
    return located


def complete_metrics(run_dir: Path) -> dict | None:
    """The metrics of the complete record in ``run_dir`` (the runner's definition, ``records.record_problem``),
    or None."""
    try:
        return records.complete_metrics(run_dir)
    except OSError:
        return None


def record_matches(cell_run: CellRun) -> bool:
    """Whether the folder holds a complete record of exactly these settings (the runner would skip it)."""
    if complete_metrics(cell_run.run_dir) is None or not (cell_run.run_dir / "config.yaml").exists():
        return False
    try:
        previous = records.read_config(cell_run.run_dir / "config.yaml")
        return not runner.settings_differences(previous, cell_run.run, complete=True)
    except Exception:  # an unreadable config: the runner, started on it, names the problem
        return False


def checkpoint_state(run_dir: Path) -> dict | None:
    """Step, training examples and elapsed seconds of ``checkpoints/last.pt``, or None when absent or unreadable."""
    import torch

    path = Path(run_dir) / "checkpoints" / "last.pt"
    if not path.exists():
        return None
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        state = checkpoint["state"]
        return {"step": int(state["step"]), "examples": int(state["examples"]), "elapsed_s": float(state["elapsed_s"])}
    except Exception:  # a truncated or foreign file: the runner decides what to do with it
        return None


def examples_done(run_dir: Path) -> int:
    """Training examples the run in ``run_dir`` has trained on so far (its record's, else its checkpoint's, else 0)."""
    metrics = complete_metrics(run_dir)
    if metrics is not None and metrics.get("train_time_s"):
        return round(float(metrics["train_examples_per_s"]) * float(metrics["train_time_s"]))
    state = checkpoint_state(run_dir)
    return state["examples"] if state else 0
