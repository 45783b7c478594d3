"""A grid file -> its settings and its cells in order; one ``experiments/run.py`` command per cell.

A grid file (YAML)::

    common: [profile=paper]          # overrides every cell gets
    minutes_per_run: 0               # a cell's cost when neither a plan nor a record gives one
    overhead_minutes: 0.75           # start-up and final evaluation, added to minutes_per_run
    records: [results/camp-slot*]    # folders (glob patterns) whose complete records count as done
    superseded: [results/camp-slot1/runs/a/t/paper/seed0]   # records whose cell's settings changed since
    cells:                           # blocks, expanded arms x tasks x seeds, in this order
      - {arms: [a, b], tasks: [text], seeds: [0, 1, 2], per_gpu: 3}
      - {arms: [a], tasks: [pathfinder], seeds: [0], optional: true}
      - {arms: [a], tasks: [listops], seeds: [0], overrides: [task.source=generated]}
      - {arms: [big], tasks: [image], seeds: [0], carry_over: false}
      - {arms: [slow], tasks: [image], seeds: [0], gpus: 2}
      - {arms: [a], tasks: [listops], seeds: [1], stage: B}

A cell is an (arm, task, seed): a later block repeating one is run once, as the first block gives it.
``--plan`` rows and the slot driver's time estimates are per (arm, task, seed) too, so a block whose
``overrides`` change the model or the training (a check of another setting) is estimated from the
arm's row at its own settings; records count only at the cell's settings.

``per_gpu`` (a block's): at most that many runs on one GPU while one of its cells runs there
(``--per-gpu`` gives it for blocks without one). ``optional`` blocks run only with
``--include-optional``. ``overrides`` (a block's): its cells' own settings, after ``common`` and
before the command line's. ``carry_over`` (a block's, true or false): whether its cells may start
when they cannot end before the deadline, to be checkpointed and continued in a later slot
(``--carry-over`` gives it for blocks without one); false for cells whose checkpoints cannot travel
between slots. ``gpus`` (a block's, default 1): how many GPUs each of its cells trains on, one
process a GPU, data-parallel under ``torchrun`` (repro/training/distributed.py: the same global batch, one
record); such a cell holds its GPUs alone, for a run too long for one GPU within a slot.
``stage`` (a block's, a name): the campaign stage its cells belong to, which the ledger totals apart
(several blocks may share one; a block without one counts as its own ``cells[i]``).
``records``: the folders a campaign freezes its records into, as ``--records`` gives them (both
count): a slot's command, its ``--dry-run`` and the ledger skip what they hold. ``superseded``: record
folders of those bundles that ran before their cell's settings were corrected (the ledger already
counts them as not done); tables and the final freeze leave them out (``--leave-out-from GRID``).
"""

from __future__ import annotations

import glob
import itertools
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

GRID_KEYS = ("common", "minutes_per_run", "overhead_minutes", "records", "superseded", "cells")
BLOCK_KEYS = ("arms", "tasks", "seeds", "optional", "per_gpu", "carry_over", "overrides", "gpus", "stage")
TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"  # forwarded to every rank, which checkpoints
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RUNNER = REPO_ROOT / "experiments" / "run.py"


class GridError(ValueError):
    """A grid file, archive or plan the grid cannot use; the message names the file and the key to fix."""


@dataclass(frozen=True)
class Cell:
    """One run of the grid. ``per_gpu``: the block's packing limit, ``carry_over`` whether it may
    start without time to end (None: the command line's); ``overrides``: the block's own settings;
    ``gpus``: the GPUs it trains on, data-parallel (not part of its identity: the record is the same)."""

    arm: str
    task: str
    seed: int
    per_gpu: int | None = None
    optional: bool = False
    overrides: tuple[str, ...] = ()
    carry_over: bool | None = None
    block: int = 0  # the index of its block in the grid file (not part of its identity)
    gpus: int = 1
    stage: str = ""  # the block's ``stage`` name (not part of its identity), or empty

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.arm, self.task, self.seed)

    @property
    def name(self) -> str:
        """One file name per cell (claims, logs); '__' keeps arm a_b, task c apart from arm a, task b_c."""
        return cell_name(self.arm, self.task, self.seed)

    def __str__(self) -> str:
        return f"{self.arm} {self.task} seed {self.seed}"


def cell_name(arm: str, task: str, seed: int) -> str:
    return f"{arm}__{task}__seed{seed}"


@dataclass
class Grid:
    path: Path
    common: list[str]
    minutes_per_run: float
    overhead_minutes: float
    cells: list[Cell]
    optional_left_out: int = 0
    records: tuple[str, ...] = ()  # glob patterns of record folders (bundles) whose complete records count
    superseded: tuple[str, ...] = ()  # record folders run before their cell's settings were corrected

    def records_folders(self, given: list[Path] | None = None) -> list[Path]:
        """The folders the grid file's ``records`` patterns match now (relative to the working directory,
        as ``--records``; a campaign's frozen slot bundles, for example), sorted, then ``given`` (the
        command line's ``--records``), each once."""
        found = sorted({Path(p) for pattern in self.records for p in glob.glob(pattern) if Path(p).is_dir()})
        return list({folder.resolve(): folder for folder in [*found, *(Path(f) for f in given or [])]}.values())

    @property
    def default_minutes(self) -> float:
        """A cell's cost when no plan and no record gives one: ``minutes_per_run + overhead_minutes``."""
        return self.minutes_per_run + self.overhead_minutes


def _number(grid: dict, key: str, path: Path) -> float:
    value = grid.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise GridError(f"{path}: {key} must be a number of minutes >= 0, not {value!r}")
    return float(value)


def _block_cells(block, i: int, path: Path) -> list[Cell]:
    if not isinstance(block, dict):
        raise GridError(f"{path}: cells[{i}] must be a mapping {{arms: [...], tasks: [...], seeds: [...]}}")
    unknown = sorted(set(block) - set(BLOCK_KEYS))
    if unknown:
        raise GridError(f"{path}: cells[{i}] has unknown key(s) {', '.join(unknown)}; known: {', '.join(BLOCK_KEYS)}")
    missing = [k for k in ("arms", "tasks", "seeds") if not isinstance(block.get(k), list)]
    if missing:
        raise GridError(f"{path}: cells[{i}] lacks list key(s) {', '.join(missing)}")
    per_gpu = block.get("per_gpu")
    if per_gpu is not None and (isinstance(per_gpu, bool) or not isinstance(per_gpu, int) or per_gpu < 1):
        raise GridError(f"{path}: cells[{i}].per_gpu must be a whole number >= 1, not {per_gpu!r}")
    carry_over = block.get("carry_over")
    if carry_over is not None and not isinstance(carry_over, bool):
        raise GridError(f"{path}: cells[{i}].carry_over must be true or false, not {carry_over!r}")
    bad_seeds = [s for s in block["seeds"] if isinstance(s, bool) or not isinstance(s, int)]
    if bad_seeds:
        raise GridError(f"{path}: cells[{i}].seeds must be whole numbers, not {bad_seeds[0]!r}")
    overrides = block.get("overrides", [])
    if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
        raise GridError(
            f"{path}: cells[{i}].overrides must be a list of KEY=VALUE settings, e.g. "
            f"[task.source=generated], not {overrides!r}"
        )
    gpus = block.get("gpus", 1)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise GridError(f"{path}: cells[{i}].gpus must be a whole number >= 1, not {gpus!r}")
    if gpus > 1 and per_gpu not in (None, 1):
        raise GridError(
            f"{path}: cells[{i}] trains each cell on {gpus} GPUs, which it holds alone; per_gpu must be 1 "
            f"or left out, not {per_gpu}"
        )
    stage = block.get("stage", "")
    if not isinstance(stage, str):
        raise GridError(f"{path}: cells[{i}].stage must be a name, e.g. A, not {stage!r}")
    optional = bool(block.get("optional", False))
    return [
        Cell(str(arm), str(task), int(seed), per_gpu, optional, tuple(overrides), carry_over, i, gpus, stage)
        for arm, task, seed in itertools.product(block["arms"], block["tasks"], block["seeds"])
    ]


def load_grid(path: Path, include_optional: bool = False) -> Grid:
    """The grid file's settings and its cells in order; a bad file raises GridError naming the key to fix."""
    path = Path(path)
    try:
        grid = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise GridError(f"{path}: cannot read the grid: {err}") from err
    if not isinstance(grid, dict) or not isinstance(grid.get("cells"), list):
        raise GridError(f"{path}: needs a 'cells' list of {{arms: [...], tasks: [...], seeds: [...]}}")
    unknown = sorted(set(grid) - set(GRID_KEYS))
    if unknown:
        raise GridError(f"{path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(GRID_KEYS)}")
    common = grid.get("common") or []
    if not isinstance(common, list):
        raise GridError(f"{path}: common must be a list of overrides, e.g. [profile=paper]")
    patterns = grid.get("records") or []
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise GridError(f"{path}: records must be a list of folder patterns, e.g. [results/v0.2-lra-slot*]")
    superseded = grid.get("superseded") or []
    if not isinstance(superseded, list) or not all(isinstance(p, str) for p in superseded):
        raise GridError(
            f"{path}: superseded must be a list of record folders, e.g. [results/v0.2-lra-slot01/runs/a/t/paper/seed0]"
        )
    cells, seen, left_out = [], set(), 0
    for i, block in enumerate(grid["cells"]):
        for cell in _block_cells(block, i, path):
            if cell.optional and not include_optional:
                left_out += 1
            elif cell.key in seen:
                print(f"[grid] {path}: cells[{i}] repeats {cell}; running it once")
            else:
                seen.add(cell.key)
                cells.append(cell)
    return Grid(
        path,
        [str(x) for x in common],
        _number(grid, "minutes_per_run", path),
        _number(grid, "overhead_minutes", path),
        cells,
        left_out,
        tuple(patterns),
        tuple(superseded),
    )


def superseded_records(grid_files: list[Path], bundles: list[Path] = ()) -> list[Path]:
    """The ``superseded`` record folders of these grid files (``--leave-out-from``), but for those that one of
    ``bundles`` keeps under its ``extra/``: a merged bundle holds its superseded records there, apart from its
    runs, so there is nothing to leave out (any other folder is still refused if no bundle holds it as a run)."""
    kept_apart = [(Path(b) / "extra").resolve() for b in bundles]
    folders = [Path(folder) for path in grid_files for folder in load_grid(path).superseded]
    return [f for f in folders if not (f.exists() and any(f.resolve().is_relative_to(x) for x in kept_apart))]


def superseded_source(message: str, grid_files: list[Path]) -> str:
    """`` (listed as superseded in GRID)`` when ``message`` (a ``--leave-out PATH: ...`` refusal) names a
    folder one of ``grid_files`` lists, else empty."""
    for path in grid_files:
        try:
            listed = load_grid(path).superseded
        except GridError:  # the grid file itself is the problem: the message says so
            continue
        if any(message.startswith(f"--leave-out {folder}:") for folder in listed):
            return f" (listed as superseded in {path})"
    return ""


def comma_list(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``: a command-line list, blanks dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


def put_first(grid: Grid, arms: list[str]) -> Grid:
    """The grid with the cells of ``arms`` moved to the front of each column (the cells of one task, seed and
    optionality, which may span blocks), in that order (``--first``): the columns keep their order, and so
    do the other cells of a column."""
    known = {c.arm for c in grid.cells}
    unknown = [a for a in arms if a not in known]
    if unknown:
        raise GridError(f"--first {','.join(arms)}: {', '.join(unknown)} not in {grid.path}'s cells")
    rank = {arm: i for i, arm in enumerate(arms)}
    columns: dict = {}
    for cell in grid.cells:
        columns.setdefault((cell.task, cell.seed, cell.optional), len(columns))
    key = lambda c: (columns[c.task, c.seed, c.optional], rank.get(c.arm, len(arms)))  # noqa: E731
    return replace(grid, cells=sorted(grid.cells, key=key))


def select_columns(grid: Grid, columns: list[str]) -> Grid:
    """The grid's cells of these columns only, the columns in the order given (``--columns``): each item a
    task (each of its seeds in the grid's order) or ``task:seed``. For a slot whose machine holds one task's
    data, or that gives a long column's cells a GPU first. A cell named twice keeps its first place; an item
    that names no cell of the grid file (done or not) is refused, as is an empty list."""
    if not columns:
        raise GridError("--columns: name at least one column, e.g. --columns text:1,listops")
    chosen: list[Cell] = []
    for item in columns:
        task, _, seed = item.partition(":")
        if seed and not seed.isdigit():
            raise GridError(f"--columns {item}: write a column as TASK or TASK:SEED, e.g. text:1")
        seeds = [int(seed)] if seed else list(dict.fromkeys(c.seed for c in grid.cells if c.task == task))
        cells = [c for s in seeds for c in grid.cells if (c.task, c.seed) == (task, s)]
        if not cells:
            raise GridError(
                f"--columns {item}: no cells of it in {grid.path} (optional blocks need --include-optional)"
            )
        chosen += [c for c in cells if c not in chosen]
    return replace(grid, cells=chosen)


def command(runner: Path, cell: Cell, common: list[str], extra: list[str]) -> list[str]:
    """The cell's command line: ``python RUNNER arm=A task=T seed=S progress=false <common> <block's> <extra>``;
    a cell on several GPUs runs RUNNER under ``torchrun --standalone --nproc_per_node=<gpus>``, which forwards
    the stop signals to every rank; its exit status is torchrun's: 0, or 1 when a rank failed, stopped or
    exited 3 (its data missing)."""
    launcher = (
        []
        if cell.gpus == 1
        else [
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={cell.gpus}",
            f"--signals_to_handle={TORCHRUN_SIGNALS}",
        ]
    )
    return [
        sys.executable,
        *launcher,
        str(runner),
        f"arm={cell.arm}",
        f"task={cell.task}",
        f"seed={cell.seed}",
        "progress=false",
        *common,
        *cell.overrides,
        *extra,
    ]


def override_value(overrides: list[str], key: str, default: str | None = None) -> str | None:
    """The value the last ``key=value`` (or ``+key=`` / ``++key=``) of ``overrides`` gives ``key``."""
    value = default
    for item in overrides:
        name, sep, rest = item.lstrip("+").partition("=")
        if sep and name == key:
            value = rest
    return value


def output_dir(overrides: list[str]) -> Path:
    """The runs' ``output_dir`` (the runner's default ``outputs``)."""
    return Path(override_value(overrides, "output_dir", "outputs"))
