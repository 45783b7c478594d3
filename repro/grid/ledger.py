"""``lra-grid ledger GRID --records DIR ...``: the grid's ``LEDGER.md``, cells done and left with their GPU-minutes.

A cell is done when one of the ``DIR`` folders (output folders, or bundles: a campaign freezes
its records slot by slot) holds its complete record with the grid's settings (as the slot
driver skips it). GPU-minutes spent per cell: the GPU seconds ``grid_log.csv`` charged to it over
every attempt (interrupted and failed ones too; a GPU shared by k cells charges each 1/k),
for rows of older grid versions their wall seconds, and for a done cell without any row the
record's ``max(elapsed_s, wall_time_s)``. GPU-minutes left per cell: the plan file's row for
the cell, or for another seed of its arm and task (``--plan-file``, written by ``--plan``), else
the cost a record of the same arm, task and settings shows (``costs``), else none (counted as
such). Columns are (task, seed) in the grid's order, stages (a block's ``stage``, else the block itself)
too; optional blocks are counted apart.

A cell not done whose run folder, in a ``--progress`` folder (a slot's output folder, or the folder
``lra-grid unpack`` wrote its archives into) or a records folder, holds a checkpoint (``checkpoints/last.pt``)
or a ``progress.json`` is in progress: the ledger gives it one line (epoch, steps done of the planned, the
best validation accuracy so far and its step, the last validations), marked as progress, never as a result
(tables read records only). Its GPU-minutes left are the plan's, less the share of the planned steps done.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .. import records
from .cells import GridError, load_grid
from .costs import cell_seconds, record_processes
from .gridlog import GPU_TOTAL, read_rows
from .plan import plan_row, read_plan, record_cost
from .runs import CellRun, complete_metrics, locate, record_matches, resolve_cells
from .schedule import utc_now

PROGRESS_MARK = "progress, not a result"
CURVE_POINTS = 5  # the last validations a progress line shows


def _checkpoint(run_dir: Path) -> dict | None:
    """The ``state`` of ``checkpoints/last.pt`` (step, examples, best validation, history), or None."""
    import torch

    path = Path(run_dir) / "checkpoints" / "last.pt"
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)["state"]
        return state if isinstance(state, dict) and "step" in state else None
    except Exception:  # a truncated or foreign file: not progress the ledger can read
        return None


def run_progress(run_dir: Path) -> dict | None:
    """What a run in progress in ``run_dir`` shows: its ``last.pt`` (step, epoch, best validation accuracy and its
    step, the validations so far) and its ``progress.json`` (the step of its last validation, which may be later
    than the checkpoint's); None when it holds neither."""
    state = _checkpoint(run_dir)
    found = None
    if state is not None:
        history = list(state.get("history") or [])
        curve = [(float(r["epoch"]), float(r["val_acc"])) for r in history if r.get("val_acc") not in (None, "")]
        rows = [r for r in reversed(history) if int(r.get("step", 0)) > 0]
        per_step = float(rows[0]["epoch"]) / int(rows[0]["step"]) if rows else None
        best = float(state.get("best_val_acc", -1.0))
        found = {
            "step": int(state["step"]),
            "epoch": None if per_step is None else per_step * int(state["step"]),
            "best_val_acc": best if best >= 0 else None,
            "best_val_step": int(state.get("best_val_step", -1)),
            "curve": curve,
            "source": "checkpoints/last.pt",
            "epochs_per_step": per_step,
        }
    try:
        shown = json.loads((Path(run_dir) / records.PROGRESS_FILE).read_text())
        step = int(shown["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return found
    if found is None:
        return {"step": step, "epoch": None, "best_val_acc": None, "best_val_step": -1, "curve": [],
                "source": records.PROGRESS_FILE}  # fmt: skip
    if step > found["step"]:
        later = f"{records.PROGRESS_FILE} (last.pt at step {found['step']})"
        epoch = None if found["epochs_per_step"] is None else found["epochs_per_step"] * step
        return {**found, "step": step, "epoch": epoch, "source": later}
    return found


def cell_progress(cell_run: CellRun, folders: list[Path]) -> dict | None:
    """The furthest progress of the cell's run among ``folders`` (each holding ``runs/...`` as an output folder),
    with the folder it was read from."""
    relative = Path(*cell_run.run_dir.parts[-5:])  # runs/<arm>/<task>/<profile>/seed<k>
    seen = [(p, f) for f in folders if (p := run_progress(Path(f) / relative)) is not None]
    if not seen:
        return None
    progress, folder = max(seen, key=lambda pair: pair[0]["step"])
    return {**progress, "folder": folder}


def spent_seconds(log_rows: list[dict]) -> dict[tuple[str, str, int], float]:
    """GPU seconds charged per (arm, task, seed) over the rows of grid logs."""
    spent: dict = defaultdict(float)
    for row in log_rows:
        if row["arm"] == GPU_TOTAL:
            continue
        seconds = row["gpu_s"] if row["gpu_s"] != "" else row["wall_s"]
        spent[row["arm"], row["task"], int(row["seed"])] += float(seconds or 0.0)
    return spent


def cell_status(
    cell_run: CellRun,
    spent: dict,
    plan: dict,
    out: Path | None,
    overhead_s: float,
    progress_folders: list[Path] = (),
) -> dict:
    """Done or not, GPU-minutes spent, and (when not done) its progress (``cell_progress`` over
    ``progress_folders``) and GPU-minutes estimated left with their source. ``out`` None: no records folder
    exists yet (a campaign before its first bundle), so nothing is done."""
    key = cell_run.cell.key
    done = out is not None and record_matches(cell_run)
    minutes = spent.get(key, 0.0) / 60.0
    if done and key not in spent:  # no grid log row: the record's own time, on each of its GPUs
        metrics = complete_metrics(cell_run.run_dir) or {}
        wall = max(float(metrics.get("elapsed_s", 0.0)), float(metrics.get("wall_time_s", 0.0)))
        minutes = record_processes(metrics) * wall / 60.0
    status = {"cell": cell_run.cell, "done": done, "spent": minutes, "left": None, "source": "", "progress": None}
    if done:
        return status
    progress = cell_progress(cell_run, list(progress_folders))
    status["progress"] = progress
    planned = plan_row(plan, cell_run.cell)
    if planned is not None:
        if progress is not None and planned["planned_steps"] > 0:
            share_left = max(0.0, 1.0 - progress["step"] / planned["planned_steps"])
            progress["planned_steps"] = planned["planned_steps"]
            return {**status, "left": planned["minutes"] * share_left, "source": "plan"}
        return {**status, "left": planned["minutes"], "source": "plan"}
    cost = record_cost(cell_run, out, [], overhead_s) if out is not None else None
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


def stage_name(cell) -> str:
    """The cell's stage: its block's ``stage``, else the block itself (``cells[i]``)."""
    return cell.stage or f"cells[{cell.block}]"


def _stage_rows(statuses: list[dict]) -> list[str]:
    stages: dict = {}
    for status in statuses:
        stages.setdefault((stage_name(status["cell"]), status["cell"].optional), []).append(status)
    lines = [
        "| stage | cells | done | in progress | GPU-min spent (cells done or not) | GPU-min est. left |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (stage, optional), group in stages.items():
        left = [s for s in group if not s["done"]]
        known = [s["left"] for s in left if s["left"] is not None]
        running = sum(1 for s in left if s["progress"] is not None)
        name = f"{stage} (optional)" if optional else stage
        lines.append(
            f"| {name} | {len(group)} | {len(group) - len(left)} | {running} | {sum(s['spent'] for s in group):.1f} | "
            f"{_estimate(known, len(left) - len(known)) if left else '0.0'} |"
        )
    return lines


def _percent(value: float | None) -> str:
    return "?" if value is None else f"{100 * value:.2f}"


def progress_line(status: dict) -> str:
    """One line for a cell in progress: epoch, steps done (of the planned), best validation accuracy so far, the
    last validations, where it was read; marked as progress, never as a result."""
    cell, p = status["cell"], status["progress"]
    steps = f"{p['step']:,}" + (f" of {p['planned_steps']:,}" if p.get("planned_steps") else "")
    epoch = "?" if p["epoch"] is None else f"{p['epoch']:.2f}"
    best = _percent(p["best_val_acc"]) + (f" at step {p['best_val_step']:,}" if p["best_val_step"] >= 0 else "")
    curve = ", ".join(f"{e:.1f}: {100 * a:.2f}" for e, a in p["curve"][-CURVE_POINTS:]) or "-"
    where = f"{Path(p['folder']).as_posix()}, {p['source']}"
    return f"| {cell} | {epoch} | {steps} | {best} | {curve} | {where} | {PROGRESS_MARK} |"


def _progress_rows(statuses: list[dict]) -> list[str]:
    running = [s for s in statuses if not s["done"] and s["progress"] is not None]
    if not running:
        return []
    return [
        "",
        f"Cells in progress ({PROGRESS_MARK}: a checkpoint's validation accuracy, no test score; the tables "
        "read complete records only):",
        "",
        "| cell | epoch | steps done | best val. acc. so far (%) | last validations (epoch: val. acc. %) | read from "
        "| |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *(progress_line(s) for s in running),
    ]


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
    lines += ["", "Per stage, in the grid's order:", "", *_stage_rows(statuses)]
    lines += ["", "Per column (all arms of one task and seed), in the grid's order:", "", *_column_rows(statuses)]
    lines += [*_progress_rows(statuses), ""]
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
    for folder in getattr(args, "progress", None) or []:
        if not folder.is_dir():
            raise GridError(
                f"--progress {folder}: no such folder (a slot's output folder, or where lra-grid unpack wrote its "
                "files)"
            )
    grid = load_grid(args.grid, include_optional=True)
    args.records = grid.records_folders(args.records)
    if not args.records and not grid.records:
        raise GridError(f"{args.grid}: no records folder: pass --records or give the grid file a records list")
    for path in args.grid_log or []:
        if not path.is_file():
            raise GridError(f"--grid-log {path}: no such file (a slot's grid_log.csv, as lra-grid unpack writes it)")
    # --grid-log adds a slot's log that no records folder holds yet (a slot that completed no record); each
    # file once however it is spelled, each row once: a slot resumed from another's files carries its rows
    logs = list({path.resolve(): path for path in [*_default_logs(args.records), *(args.grid_log or [])]}.values())
    log_rows = list({tuple(row.values()): row for path in logs for row in read_rows(path)}.values())
    plan = read_plan(args.plan_file) if args.plan_file else {}
    spent = spent_seconds(log_rows)
    overhead_s = 60.0 * grid.overhead_minutes
    progress_folders = [*(getattr(args, "progress", None) or []), *args.records]
    if args.records:
        located = locate(grid.cells, grid.common, extra, args.records, str(args.grid))  # else the first folder's run
        located = [(cr, out or args.records[0]) for cr, out in located]
        named = ", ".join(f"`{f.as_posix()}`" for f in args.records)
        sources = [f"the records in {named}"]
    else:  # the grid file's records patterns match no folder yet: no cell is done
        located = [(cr, None) for cr in resolve_cells(grid.cells, grid.common, extra, str(args.grid))]
        sources = ["no records yet (no folder matches the grid file's records: " + ", ".join(grid.records) + ")"]
    statuses = [cell_status(cr, spent, plan, out, overhead_s, progress_folders) for cr, out in located]
    sources += [f"`{p.as_posix()}`" for p in logs]
    sources += [f"the plan `{args.plan_file.as_posix()}`"] if args.plan_file else []
    sources += [f"the runs in progress in `{f.as_posix()}`" for f in getattr(args, "progress", None) or []]
    out = args.out or args.grid.with_suffix("") / "LEDGER.md"
    records.write_atomic(out, render(args.grid, statuses, sources))
    done = sum(1 for s in statuses if s["done"])
    running = sum(1 for s in statuses if not s["done"] and s["progress"] is not None)
    print(f"[ledger] {done} of {len(statuses)} cells done, {running} in progress; written to {out}")
    return 0
