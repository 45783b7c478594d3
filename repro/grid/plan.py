"""``--plan``: the GPU-minutes each cell's profile will take, and the cells that will not fit a slot.

Per (arm, task) pair, from a record of the same settings when one exists (the cell's own, or
another seed's, in the output folder or a ``--records`` folder), else from a timed probe on
this machine's GPU: the cell's own command with ``++train.max_steps=N`` (``--probe-steps``,
default 300; validations halfway and at its last step, no periodic checkpoint) into a scratch
folder, one probe per GPU at a time. The seconds per step, per validation and the fixed part (see
``costs``) then give the cell's planned run (its resolved epochs, ``max_steps`` and
validation settings). Cells over ``--slot-minutes`` are flagged (a data-parallel cell's
GPU-minutes over its ``gpus``: its wall time, if n GPUs train n times as fast; its probe runs on
one GPU). The plan is printed and written as CSV (``PLAN_COLUMNS``) for ``--plan-file`` of the slot
driver and of the ledger.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from .. import records
from ..run import runner
from .cells import GridError, command
from .costs import Cost, cell_seconds, cost_from_run
from .runs import CellRun, complete_metrics
from .schedule import Job, Scheduler

PLAN_COLUMNS = (
    "arm",
    "task",
    "seed",
    "profile",
    "planned_steps",
    "steps_per_s",
    "validations",
    "val_pass_s",
    "fixed_s",
    "data_wait_share",
    "minutes",
    "over_slot",
    "device",
    "source",
)


def probe_overrides(steps: int) -> list[str]:
    """The probe's step cap; no periodic checkpoint; no budget. Validations every ``steps // 2`` steps, so
    at its last step too, inside the loop's clock (the loop's ``finish`` validates a last step that did not,
    untimed): the first pass pays the evaluation's one-off compilation, the last times a steady pass
    (costs.probe_passes); an odd ``steps``, which ``steps // 2`` does not divide, keeps one validation,
    at its last step. Losses logged at least 3 times between validations from 6 steps on (``log_every``,
    50 at the default 300), so steps are timed between rows that hold no validation (costs.steady_step_s)."""
    every = steps // 2 if steps % 2 == 0 else steps
    return [
        f"++train.max_steps={steps}",
        f"++train.eval_every_steps={every}",
        f"++train.log_every={max(1, every // 3)}",
        "++train.eval_every_seconds=null",
        "++train.checkpoint_every_steps=null",
        "++train.checkpoint_every_seconds=null",
        "++train.budget_minutes=null",
        "resume=false",
    ]


def plan_row(plan: dict, cell) -> dict | None:
    """The cell's row of a plan file (``read_plan``), else another seed's of the same arm and task: a cell's
    cost does not depend on its seed."""
    own = plan.get(cell.key)
    if own is not None:
        return own
    return next((row for (arm, task, _), row in plan.items() if (arm, task) == (cell.arm, cell.task)), None)


def record_cost(cell_run: CellRun, output_dir: Path, record_dirs: list[Path], overhead_s: float) -> Cost | None:
    """The cost shown by the cell's own complete record, else by another seed's of the same settings."""
    relative = cell_run.run_dir.relative_to(output_dir)
    own = [base / relative for base in [output_dir, *record_dirs]]
    others = [d for base in [output_dir, *record_dirs] for d in sorted((base / relative.parent).glob("seed*"))]
    for run_dir in own + [d for d in others if d not in own]:
        metrics = complete_metrics(run_dir)
        if metrics is None or not (run_dir / "config.yaml").exists():
            continue
        if runner.settings_differences(records.read_config(run_dir / "config.yaml"), cell_run.run, complete=True):
            continue
        what = "own record" if run_dir in own else f"record of {run_dir.name}"
        beyond = float(metrics.get("wall_time_s", 0.0)) - float(metrics.get("elapsed_s", 0.0))
        try:
            return cost_from_run(metrics, run_dir / "history.csv", max(beyond, 0.0) + overhead_s, f"{what} ({run_dir})")
        except (OSError, ValueError, KeyError):
            continue
    return None


def probe_jobs(
    cell_runs: list[CellRun], runner_path: Path, common: list[str], extra: list[str], steps: int, scratch: Path
) -> dict[str, tuple[Job, CellRun]]:
    """One probe job per (arm, task) pair: the pair's first cell, capped at ``steps`` steps, in ``scratch/<pair>``."""
    jobs = {}
    kept = [item for item in extra if not item.lstrip("+").startswith("output_dir=")]
    for cell_run in cell_runs:
        key = f"{cell_run.cell.arm}__{cell_run.cell.task}"
        if key in jobs:
            continue
        folder = scratch / key
        overrides = [*kept, f"output_dir={folder}", *probe_overrides(steps)]
        job = Job(
            key,
            f"probe {cell_run.cell.arm} {cell_run.cell.task} ({steps} steps)",
            command(runner_path, replace(cell_run.cell, gpus=1), common, overrides),  # one GPU's cost
            per_gpu=1,
            log_path=folder / "probe.log",
        )
        jobs[key] = (job, cell_run)
    return jobs


def probe_cost(folder: Path, wall_s: float, steps: int) -> Cost:
    """The cost a finished probe in ``folder`` shows (its one record under ``runs/``)."""
    found = sorted(folder.glob("runs/*/*/*/seed*/metrics.json"))
    if len(found) != 1:
        raise GridError(f"{folder}: the probe left {len(found)} records, not 1; see {folder / 'probe.log'}")
    metrics = json.loads(found[0].read_text())
    return cost_from_run(
        metrics,
        found[0].parent / "history.csv",
        wall_s - float(metrics["elapsed_s"]),
        f"probe of {metrics['steps']} steps",
        steady=True,
    )


def run_probes(
    todo: list[CellRun],
    gpus: list,
    deadline,
    runner_path: Path,
    common: list[str],
    extra: list[str],
    steps: int,
    on_found: Callable[[dict], None] | None = None,
) -> dict[tuple[str, str], Cost | str]:
    """Probe each (arm, task) pair of ``todo``; a pair's value is its Cost or why it has none. ``on_found``
    gets the values so far each time a probe ends."""
    scratch = Path(tempfile.mkdtemp(prefix="lra-grid-probe-"))
    try:
        jobs = probe_jobs(todo, runner_path, common, extra, steps, scratch)
        found: dict = {}

        def ended_probe(ended) -> None:
            cell = jobs[ended.job.key][1].cell
            if ended.returncode != 0:
                tail = ended.job.log_path.read_text()[-1500:] if ended.job.log_path.exists() else ""
                print(f"[plan] probe of {cell.arm} {cell.task} failed (exit {ended.returncode}):\n{tail}", flush=True)
                found[cell.arm, cell.task] = f"probe failed (exit {ended.returncode})"
            else:
                try:
                    found[cell.arm, cell.task] = probe_cost(scratch / ended.job.key, ended.wall_s, steps)
                except (GridError, ValueError) as err:  # the other probes go on; the row says why this one has no cost
                    print(f"[plan] {err}", flush=True)
                    found[cell.arm, cell.task] = f"probe unreadable ({err})"
            if on_found is not None:
                on_found(dict(found))

        outcome = Scheduler(gpus, deadline=deadline, on_end=ended_probe).run([job for job, _ in jobs.values()])
        for job in outcome.not_started + outcome.left_queued:
            cell = jobs[job.key][1].cell
            found[cell.arm, cell.task] = "not probed (deadline or stop)"
        return found
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def gather_costs(
    cell_runs: list[CellRun],
    output_dir: Path,
    record_dirs: list[Path],
    overhead_s: float,
    probe_all: bool,
    probe,
    on_costs: Callable[[dict], None] | None = None,
) -> dict:
    """Per cell key: a record's cost (unless ``probe_all``), else its (arm, task) pair's probe
    (``probe(todo, on_found)``); ``on_costs`` gets every cell's cost so far as each probe ends."""
    costs: dict = {}
    if not probe_all:
        for cell_run in cell_runs:
            cost = record_cost(cell_run, output_dir, record_dirs, overhead_s)
            if cost is not None:
                costs[cell_run.cell.key] = cost
    todo = [cell_run for cell_run in cell_runs if cell_run.cell.key not in costs]

    def merged(probed: dict, missing: str) -> dict:
        pairs = {cell_run.cell.key: probed.get((cell_run.cell.arm, cell_run.cell.task), missing) for cell_run in todo}
        return {**costs, **pairs}

    def found_so_far(probed: dict) -> None:
        if on_costs is not None:
            on_costs(merged(probed, "not probed yet (the plan was still probing)"))

    return merged(probe(todo, found_so_far) if todo else {}, "no record and no probe")


def plan_rows(cell_runs: list[CellRun], costs: dict, slot_minutes: float) -> list[dict]:
    """One plan row per cell (``PLAN_COLUMNS``); ``costs``: per (arm, task, seed), a Cost or why there is none."""
    rows = []
    for cell_run in cell_runs:
        cell, cost = cell_run.cell, costs.get(cell_run.cell.key, "no record and no probe")
        row = {"arm": cell.arm, "task": cell.task, "seed": cell.seed, "profile": cell_run.run["profile"]}
        if isinstance(cost, str):
            rows.append({**row, "source": cost})
            continue
        steps, passes, seconds = cell_seconds(cost, cell_run.train)
        rows.append(
            {
                **row,
                "planned_steps": steps,
                "steps_per_s": round(1.0 / cost.step_s, 3),
                "validations": passes,
                "val_pass_s": round(cost.val_pass_s, 3),
                "fixed_s": round(cost.fixed_s, 1),
                "data_wait_share": "" if cost.data_wait_share is None else round(cost.data_wait_share, 4),
                "minutes": round(seconds / 60.0, 2),
                "over_slot": "yes" if seconds / 60.0 / cell.gpus > slot_minutes else "no",  # its wall time
                "device": cost.device,
                "source": cost.source,
            }
        )
    return rows


def write_plan(path: Path, rows: list[dict]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=PLAN_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({c: row.get(c, "") for c in PLAN_COLUMNS} for row in rows)
    records.write_atomic(Path(path), buffer.getvalue())


def read_plan(path: Path) -> dict[tuple[str, str, int], dict]:
    """``{"minutes", "planned_steps"}`` per (arm, task, seed) of a plan file (cells without an estimate left out)."""
    path = Path(path)
    try:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            needed = ("arm", "task", "seed", "minutes", "planned_steps")
            missing = [c for c in needed if c not in (reader.fieldnames or [])]
            if missing:
                raise GridError(f"{path}: not a plan file (no column {', '.join(missing)}); write one with --plan")
            plan = {}
            for number, row in enumerate(reader, 2):
                if row["minutes"] in ("", None):
                    continue
                try:
                    plan[row["arm"], row["task"], int(row["seed"])] = {
                        "minutes": float(row["minutes"]),
                        "planned_steps": int(row["planned_steps"]),
                    }
                except ValueError as err:
                    raise GridError(f"{path}:{number}: seed, minutes or planned_steps is not a number ({err})") from err
    except OSError as err:
        raise GridError(f"{path}: cannot read the plan: {err}") from err
    return plan


def data_wait_by_task(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """(lowest, highest) data-wait share per task over the rows that sampled one (probes and records)."""
    shares: dict[str, list[float]] = {}
    for row in rows:
        if row.get("data_wait_share") not in (None, ""):
            shares.setdefault(row["task"], []).append(float(row["data_wait_share"]))
    return {task: (min(values), max(values)) for task, values in shares.items()}


def print_plan(rows: list[dict], slot_minutes: float) -> None:
    print(f"{'cell':<44} {'steps':>7} {'steps/s':>8} {'vals':>5} {'wait':>6} {'GPU-min':>8}  source")
    for row in rows:
        name = f"{row['arm']} {row['task']} seed {row['seed']}"
        if row.get("minutes") in (None, ""):
            print(f"{name:<44} {'':>7} {'':>8} {'':>5} {'':>6} {'?':>8}  {row['source']}")
            continue
        flag = "  OVER SLOT" if row["over_slot"] == "yes" else ""
        wait = "" if row.get("data_wait_share") in (None, "") else f"{100 * float(row['data_wait_share']):.1f}%"
        print(
            f"{name:<44} {row['planned_steps']:>7} {row['steps_per_s']:>8.2f} {row['validations']:>5} {wait:>6} "
            f"{row['minutes']:>8.2f}  {row['source']}, {row['device']}{flag}"
        )
    for task, (low, high) in sorted(data_wait_by_task(rows).items()):
        print(f"[plan] data-wait share of step time, {task}: {100 * low:.1f}-{100 * high:.1f}% (sampled steps)")
    known = [row for row in rows if row.get("minutes") not in (None, "")]
    over = [row for row in known if row["over_slot"] == "yes"]
    print(
        f"[plan] total: {sum(row['minutes'] for row in known):.1f} GPU-minutes for {len(known)} of {len(rows)} "
        f"cells; {len(over)} over the {slot_minutes:g}-minute slot; {len(rows) - len(known)} without an estimate"
    )
