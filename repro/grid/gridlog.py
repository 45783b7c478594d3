"""``grid_log.csv``: one row per cell that ended, and one row per GPU when a grid command ends.

No header (rows of several grid commands, and of older versions, append to one file). Columns:

    arm, task, seed, exit, wall_s, finished_utc, gpu, per_gpu, started_utc, gpu_s, examples, examples_per_s

``gpu``: the GPU it ran on (``0+1``: data-parallel over GPUs 0 and 1); ``gpu_s``: the GPU seconds
charged to the cell (its wall time divided among the cells sharing its GPU, times its GPUs,
``schedule.GpuSlots``); ``examples``: the training examples it trained on in this command
(record or checkpoint after, minus checkpoint before); ``examples_per_s``: the record's own
``train_examples_per_s`` (empty when it wrote none). A GPU's row has arm ``(gpu total)``, the
seconds the GPU was busy in ``wall_s`` and ``gpu_s``, the examples its cells trained on, and
their aggregate ``examples / busy seconds`` (the packing measure; a data-parallel cell's examples
are shared equally among its GPUs).
Rows of older versions have the first seven columns only.
"""

from __future__ import annotations

import csv
from pathlib import Path

from .cells import GridError

COLUMNS = (
    "arm",
    "task",
    "seed",
    "exit",
    "wall_s",
    "finished_utc",
    "gpu",
    "per_gpu",
    "started_utc",
    "gpu_s",
    "examples",
    "examples_per_s",
)
LEGACY_COLUMNS = 7
GPU_TOTAL = "(gpu total)"


def append_rows(path: Path, rows: list[dict]) -> None:
    """Append rows (dicts over ``COLUMNS``; missing keys stay empty), one ``write`` per call."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(",".join(_field(row.get(c, "")) for c in COLUMNS) + "\n" for row in rows)
    with path.open("a") as out:
        out.write(text)


def _field(value) -> str:
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 1 else f"{value:.4g}"
    text = "" if value is None else str(value)
    if any(ch in text for ch in ',"\n'):
        raise ValueError(f"grid_log.csv field {text!r} holds a comma, quote or newline")
    return text


def read_rows(path: Path) -> list[dict]:
    """Every row of a grid log as a dict over ``COLUMNS`` (absent columns of older rows: empty)."""
    path = Path(path)
    rows = []
    with path.open(newline="") as handle:
        for number, fields in enumerate(csv.reader(handle), 1):
            if not fields:
                continue
            if len(fields) not in (LEGACY_COLUMNS, len(COLUMNS)):
                raise GridError(
                    f"{path}:{number}: {len(fields)} fields; a grid_log.csv row has {LEGACY_COLUMNS} "
                    f"or {len(COLUMNS)} ({', '.join(COLUMNS)})"
                )
            rows.append(dict(zip(COLUMNS, fields + [""] * (len(COLUMNS) - len(fields)), strict=True)))
    return rows


def gpu_totals(cell_rows: list[dict], busy_s: dict, started: dict) -> list[dict]:
    """One ``(gpu total)`` row per GPU that ran a cell: busy seconds, examples, aggregate examples/s."""
    totals = []
    for gpu, busy in busy_s.items():
        mine = [row for row in cell_rows if ("" if gpu is None else str(gpu)) in row["gpu"].split("+")]
        if not mine:
            continue
        examples = round(sum(int(row["examples"] or 0) / len(row["gpu"].split("+")) for row in mine))
        totals.append(
            {
                "arm": GPU_TOTAL,
                "wall_s": busy,
                "gpu_s": busy,
                "gpu": "" if gpu is None else gpu,
                "per_gpu": max(int(row["per_gpu"]) for row in mine),
                "started_utc": started.get(gpu, ""),
                "finished_utc": max(row["finished_utc"] for row in mine),
                "examples": examples,
                "examples_per_s": examples / busy if busy > 0 else "",
            }
        )
    return totals


def summary_line(totals: list[dict], cells: int) -> str:
    """``[grid] throughput: ...`` over every GPU's row."""
    examples = sum(int(row["examples"]) for row in totals)
    busy = sum(float(row["wall_s"]) for row in totals)
    parts = [
        f"GPU {row['gpu'] or '-'} {float(row['examples_per_s'] or 0):.1f}/s over {float(row['wall_s']) / 60:.1f} min"
        for row in totals
    ]
    rate = examples / busy if busy > 0 else 0.0
    return f"[grid] throughput: {examples} training examples in {cells} cell(s), {rate:.1f} examples/s per busy GPU" + (
        f" ({'; '.join(parts)})" if parts else ""
    )
