"""``lra-grid ledger GRID --records DIR ...``: the grid's ``LEDGER.md``, cells done and left with their GPU-minutes.

A cell is done when one of the ``DIR`` folders (output folders, or bundles: a campaign freezes
its records slot by slot) holds its complete record with the grid's settings (as the slot
driver skips it). GPU-minutes spent per cell: the GPU seconds ``grid_log.csv`` charged to it over
every attempt (interrupted and failed ones too; a GPU shared by k cells charges each 1/k),
for rows of older grid versions their wall seconds, and for a done cell without any row the
record's ``max(elapsed_s, wall_time_s)``. GPU-minutes left per cell: the plan file's row for
the cell, or for another seed of its arm and task (``--plan-file``, written by ``--plan``), else
the cost a record of the same arm, task and settings shows (``costs``), else none (counted as
such). Columns are (task, seed) in the grid's order; optional blocks are counted apart.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from .. import records
from .cells import GridError, load_grid
from .costs import cell_seconds, record_processes
from .gridlog import GPU_TOTAL, read_rows
from .plan import plan_row, read_plan, record_cost
from .runs import CellRun, complete_metrics, locate, record_matches
from .schedule import utc_now


def spent_seconds(log_rows: list[dict]) -> dict[tuple[str, str, int], float]:
    """GPU seconds charged per (arm, task, seed) over the rows of grid logs."""
    spent: dict = defaultdict(float)
    for row in log_rows:
        if row["arm"] == GPU_TOTAL:
            continue
        seconds = row["gpu_s"] if row["gpu_s"] != "" else row["wall_s"]
        spent[row["arm"], row["task"], int(row["seed"])] += float(seconds or 0.0)
    return spent


def cell_status(cell_run: CellRun, spent: dict, plan: dict, out: Path, overhead_s: float) -> dict:
    """Done or not, GPU-minutes spent, and (when not done) GPU-minutes estimated left with their source."""
    key = cell_run.cell.key
    done = record_matches(cell_run)
    minutes = spent.get(key, 0.0) / 60.0
    if done and key not in spent:  # no grid log row: the record's own time, on each of its GPUs
        metrics = complete_metrics(cell_run.run_dir) or {}
        wall = max(float(metrics.get("elapsed_s", 0.0)), float(metrics.get("wall_time_s", 0.0)))
        minutes = record_processes(metrics) * wall / 60.0
    status = {"cell": cell_run.cell, "done": done, "spent": minutes, "left": None, "source": ""}
    if done:
        return status
    planned = plan_row(plan, cell_run.cell)
    if planned is not None:
        return {**status, "left": planned["minutes"], "source": "plan"}
    cost = record_cost(cell_run, out, [], overhead_s)
    if cost is not None:
        return {**status, "left": cell_seconds(cost, cell_run.train)[2] / 60.0, "source": "records"}
    return status


def _estimate(known: list[float], unknown: int) -> str:
    if not known and unknown:
        return f"? ({unknown} unknown)"
    return f"{sum(known):.1f}" + (f" (+{unknown} unknown)" if unknown else "")


def _column_rows(statuses: list[dict]) -> list[str]:
    columns: dict = {}
    for status in statuses:
        cell = status["cell"]
        columns.setdefault((cell.task, cell.seed, cell.optional), []).append(status)
    lines = [
        "| task | seed | cells | done | left | GPU-min spent (cells done or not) | GPU-min est. left | arms left |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (task, seed, optional), group in columns.items():
        left = [s for s in group if not s["done"]]
        known = [s["left"] for s in left if s["left"] is not None]
        estimate = _estimate(known, len(left) - len(known))
        arms = ", ".join(s["cell"].arm for s in left) or "-"
        name = f"{task} (optional)" if optional else task
        lines.append(
            f"| {name} | {seed} | {len(group)} | {len(group) - len(left)} | {len(left)} | "
            f"{sum(s['spent'] for s in group):.1f} | {estimate if left else '0.0'} | {arms} |"
        )
    return lines


def _totals(statuses: list[dict], label: str) -> str:
    done = [s for s in statuses if s["done"]]
    left = [s for s in statuses if not s["done"]]
    known = [s for s in left if s["left"] is not None]
    by_source = ", ".join(
        f"{sum(1 for s in known if s['source'] == src)} from the {src}"
        for src in ("plan", "records")
        if any(s["source"] == src for s in known)
    )
    estimate = _estimate([s["left"] for s in known], len(left) - len(known)) + (f" ({by_source})" if by_source else "")
    return (
        f"| {label} | {len(done)} of {len(statuses)} | {sum(s['spent'] for s in done):.1f} | "
        f"{sum(s['spent'] for s in left):.1f} | {len(left)} | {estimate} |"
    )


def render(grid_path: Path, statuses: list[dict], sources: list[str]) -> str:
    required = [s for s in statuses if not s["cell"].optional]
    optional = [s for s in statuses if s["cell"].optional]
    lines = [
        f"# Ledger of `{grid_path.as_posix()}`",
        "",
        f"Written by `lra-grid ledger` on {utc_now()[:10]} from {'; '.join(sources)}.",
        "",
        "| cells | done | GPU-min spent on done cells | GPU-min spent on cells not done | left | GPU-min est. left |",
        "| --- | --- | --- | --- | --- | --- |",
        _totals(required, "required"),
    ]
    if optional:
        lines.append(_totals(optional, "optional"))
    lines += ["", "Per column (all arms of one task and seed), in the grid's order:", "", *_column_rows(statuses), ""]
    return "\n".join(lines)


def _default_logs(folders: list[Path]) -> list[Path]:
    """Each folder's grid log: an output folder's ``grid_log.csv``, a slot bundle's ``extra/grid_log.csv``, and
    those a merged bundle keeps of its slot bundles (``sources/<slot version>/extra/grid_log.csv``)."""
    found = [f / name for f in folders for name in ("grid_log.csv", "extra/grid_log.csv")]
    found += [log for f in folders for log in sorted(f.glob("sources/*/extra/grid_log.csv"))]
    return [path for path in found if path.exists()]


def ledger_command(args, extra: list[str]) -> int:
    for folder in args.records or []:
        if not folder.is_dir():
            raise GridError(f"--records {folder}: no such folder (an output folder or bundle holding runs/)")
    grid = load_grid(args.grid, include_optional=True)
    args.records = grid.records_folders(args.records)
    if not args.records:
        raise GridError(f"{args.grid}: no records folder: pass --records or give the grid file a records list")
    logs = args.grid_log or _default_logs(args.records)
    log_rows = [row for path in logs for row in read_rows(path)]
    plan = read_plan(args.plan_file) if args.plan_file else {}
    spent = spent_seconds(log_rows)
    overhead_s = 60.0 * grid.overhead_minutes
    located = locate(grid.cells, grid.common, extra, args.records, str(args.grid))  # else the first folder's run
    statuses = [cell_status(cr, spent, plan, out or args.records[0], overhead_s) for cr, out in located]
    named = ", ".join(f"`{f.as_posix()}`" for f in args.records)
    sources = [f"the records in {named}"] + [f"`{p.as_posix()}`" for p in logs]
    sources += [f"the plan `{args.plan_file.as_posix()}`"] if args.plan_file else []
    out = args.out or args.grid.with_suffix("") / "LEDGER.md"
    records.write_atomic(out, render(args.grid, statuses, sources))
    done = sum(1 for s in statuses if s["done"])
    print(f"[ledger] {done} of {len(statuses)} cells done; written to {out}")
    return 0
