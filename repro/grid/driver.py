"""The grid command's flows: run the cells (the slot driver) and plan them; ``cli`` parses the command line."""

from __future__ import annotations

import calendar
import json
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .. import records
from .archive import pack, room_bytes
from .cells import Grid, GridError, comma_list, command, output_dir
from .costs import cell_seconds, seconds_left
from .gridlog import append_rows, gpu_totals, summary_line
from .plan import gather_costs, plan_row, plan_rows, print_plan, read_plan, record_cost, run_probes, write_plan
from .runs import (
    CellRun,
    checkpoint_state,
    complete_metrics,
    examples_done,
    locate,
    record_matches,
    resolve_cells,
)
from .schedule import Ended, Job, Scheduler, named_gpus
from .unpack import unpack


def visible_gpus() -> list[str]:
    """``--gpus all``: the ids of ``CUDA_VISIBLE_DEVICES`` when set, else every device torch counts."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        ids = [item for item in comma_list(listed) if item != "-1"]
    else:
        import torch

        ids = [str(i) for i in range(torch.cuda.device_count())]
    if not ids:
        raise GridError(
            "--gpus all: no CUDA device is visible; name the GPUs (--gpus 0,1) or leave --gpus out "
            "to run on this process's own device"
        )
    return ids


def gpu_list(spec: str | None) -> list:
    if spec is None:
        return [None]
    if spec.strip() == "all":
        return visible_gpus()
    ids = comma_list(spec)
    if not ids:
        raise GridError(f"--gpus {spec!r}: give comma-separated GPU ids, e.g. --gpus 0,1, or --gpus all")
    return ids


def leave_out_too_wide(jobs: list[Job], campaign: Campaign, gpus: list) -> tuple[list[Job], list[Job]]:
    """(jobs to run, jobs left out): a data-parallel cell (``gpus: N``) needs N GPUs of ``--gpus``; one that
    asks more is left for a machine that has them, said on stderr with the fix."""
    named = named_gpus(gpus)
    kept, left = [], []
    for job in jobs:
        if job.gpus > 1 and job.gpus > named:
            cell = campaign.by_key[job.key].cell
            given = f"--gpus gives {named}" if named else "no --gpus names any"
            print(
                f"[grid] not started: {campaign.grid.path}: cells[{cell.block}] trains {cell} on {cell.gpus} GPUs "
                f"(gpus: {cell.gpus}), but {given}; name at least {cell.gpus} (--gpus all, or --gpus 0,1)",
                file=sys.stderr,
                flush=True,
            )
            left.append(job)
        else:
            kept.append(job)
    return kept, left


def stop_at_epoch(text: str, now: float | None = None) -> float:
    """``--stop-at``: ISO 8601 (``2026-12-01T10:30Z``; no zone: UTC) or ``HH:MM`` (UTC, today) -> epoch seconds."""
    now = time.time() if now is None else now
    try:
        if len(text) <= 5 and ":" in text:
            hour, minute = (int(part) for part in text.split(":"))
            if not (0 <= hour < 24 and 0 <= minute < 60):
                raise ValueError("hour 0-23, minute 0-59")
            today = time.gmtime(now)
            epoch = calendar.timegm((today.tm_year, today.tm_mon, today.tm_mday, hour, minute, 0))
        else:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
            epoch = moment.timestamp() if moment.tzinfo else calendar.timegm(moment.timetuple())
    except ValueError as err:
        raise GridError(f"--stop-at {text!r}: give a UTC time as HH:MM or ISO 8601 (2026-12-01T10:30Z): {err}") from err
    if epoch <= now:
        raise GridError(f"--stop-at {text!r}: that time (UTC) has passed")
    return float(epoch)


def deadline_of(args, started: float) -> float | None:
    """The monotonic deadline of ``--deadline-minutes`` (from the command's start) and ``--stop-at``, the earlier."""
    found = []
    if args.deadline_minutes is not None:
        found.append(started + 60.0 * args.deadline_minutes)
    if args.stop_at is not None:
        found.append(time.monotonic() + stop_at_epoch(args.stop_at) - time.time())
    return min(found) if found else None


def estimate(
    cell_run: CellRun, plan: dict, grid: Grid, out: Path, record_dirs: list[Path] = ()
) -> tuple[float, int | None, str]:
    """(GPU-minutes alone, planned steps or None, source) of a cell: its plan row (or another seed's), else a
    record (its own or another seed's, here or in ``record_dirs``), else the grid file's."""
    row = plan_row(plan, cell_run.cell)
    if row is not None:
        return row["minutes"], row["planned_steps"], "plan"
    cost = record_cost(cell_run, out, list(record_dirs), 60.0 * grid.overhead_minutes)
    if cost is not None:
        steps, _, seconds = cell_seconds(cost, cell_run.train)
        return seconds / 60.0, steps, "records"
    return grid.default_minutes, None, "grid file"


@dataclass
class Campaign:
    """What the run flow keeps about its cells while the scheduler runs them."""

    grid: Grid
    out: Path
    log_path: Path
    claim_dir: Path | None
    by_key: dict = field(default_factory=dict)  # job key -> CellRun
    before: dict = field(default_factory=dict)  # job key -> examples trained before this start
    rows: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    planned_steps: dict = field(default_factory=dict)  # job key -> the cell's planned steps (a plan or a record)
    progress_seen: dict = field(default_factory=dict)  # job key -> [(step, elapsed_s, clock when first seen)]
    began: dict = field(default_factory=dict)  # job key -> epoch seconds of its start
    elsewhere: int = 0
    started: int = 0
    interrupted: int = 0

    def on_start(self, job: Job) -> bool:
        cell_run = self.by_key[job.key]
        if self.claim_dir is not None and not claim(self.claim_dir, job.key):
            print(f"[grid] claimed by another grid process: {cell_run.cell}", flush=True)
            self.elsewhere += 1
            return False
        self.before[job.key] = examples_done(cell_run.run_dir)
        self.began[job.key] = time.time()
        self.started += 1
        return True

    def projected_end(self, job: Job, now: float) -> float | None:
        """When a running cell will take its last step (the scheduler's clock), from what its ``progress.json``
        showed since this grid started it; None while that is too little (``costs.seconds_left``)."""
        steps = self.planned_steps.get(job.key)
        try:
            progress = json.loads((self.by_key[job.key].run_dir / records.PROGRESS_FILE).read_text())
            step, elapsed_s = int(progress["step"]), float(progress["elapsed_s"])
        except (OSError, ValueError, KeyError, TypeError):  # not written yet
            return None
        seen = self.progress_seen.setdefault(job.key, [])
        if seen and step < seen[-1][0]:  # an earlier run's file, replaced by this run's first validation
            seen.clear()
        if not seen or step != seen[-1][0]:
            seen.append((step, elapsed_s, now))
        left = seconds_left([(point[0], point[1]) for point in seen], steps) if steps else None
        return None if left is None else seen[-1][2] + left

    def on_end(self, ended: Ended) -> None:
        cell_run = self.by_key[ended.job.key]
        if self.claim_dir is not None:
            (self.claim_dir / ended.job.key).unlink(missing_ok=True)
        metrics = complete_metrics(cell_run.run_dir) or {}
        row = {
            "arm": cell_run.cell.arm,
            "task": cell_run.cell.task,
            "seed": cell_run.cell.seed,
            "exit": ended.returncode,
            "wall_s": ended.wall_s,
            "finished_utc": ended.finished_utc,
            "gpu": "" if ended.gpu is None else str(ended.gpu),
            "per_gpu": ended.job.per_gpu,
            "started_utc": ended.started_utc,
            "gpu_s": ended.gpu_s,
            "examples": max(0, examples_done(cell_run.run_dir) - self.before[ended.job.key]),
            "examples_per_s": metrics.get("train_examples_per_s", ""),
        }
        append_rows(self.log_path, [row])
        self.rows.append(row)
        if ended.returncode not in (0, 3):
            if ended.stopped and (ended.returncode < 0 or ended.returncode > 128 or self._checkpointed(ended)):
                self.interrupted += 1
            else:
                self.failed.append((cell_run.cell, ended.returncode))

    def _checkpointed(self, ended: Ended) -> bool:
        """A stopped data-parallel cell ended by its signal: torchrun exits 1 whatever its ranks did, so the
        sign is the checkpoint the ranks write when stopped (``last.pt`` written since the cell started)."""
        last = self.by_key[ended.job.key].run_dir / "checkpoints" / "last.pt"
        return ended.job.gpus > 1 and last.is_file() and last.stat().st_mtime >= self.began[ended.job.key]


def claim(folder: Path, name: str) -> bool:
    """Atomically claim a cell for this process; False if another process holds it now.

    A claim is released when the cell's run ends, whatever its exit status (a complete record
    makes any later start a skip), so a failed or interrupted cell is retried by the next command.
    """
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(folder / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n".encode())
    os.close(fd)
    return True


def build_jobs(
    campaign: Campaign, cell_runs: list[CellRun], args, plan: dict, runner: Path, extra: list[str], foreground: bool
) -> tuple[list[Job], int]:
    """A job per cell without a complete record of its settings (here or in a ``--records`` folder); returns
    (jobs, cells skipped as complete)."""
    jobs, skipped, sizes = [], 0, {}
    cells = [cell_run.cell for cell_run in cell_runs]
    located = locate(cells, campaign.grid.common, extra, args.records or [], str(campaign.grid.path))
    elsewhere = {run.cell.key: folder for run, folder in located if folder is not None}
    for number, cell_run in enumerate(cell_runs, 1):
        cell = cell_run.cell
        here = record_matches(cell_run)
        if here or cell.key in elsewhere:
            where = "" if here else f" (in {elsewhere[cell.key]})"
            print(f"[grid] record complete, skipped: {cell}{where}")
            skipped += 1
            continue
        per_gpu = 1 if cell.gpus > 1 else cell.per_gpu or args.per_gpu  # a data-parallel cell runs alone
        minutes, steps, source = estimate(cell_run, plan, campaign.grid, campaign.out, args.records or [])
        if source == "grid file" and cell.carry_over is False:
            print(
                f"[grid] warning: {cell} has no plan row and no record to time it; the grid file's "
                f"{minutes:g} minutes decide whether it starts, it cannot carry over, and without planned "
                "steps it is not stopped early",
                file=sys.stderr,
                flush=True,
            )
        state = checkpoint_state(cell_run.run_dir) if steps else None
        left = max(0.0, 1.0 - state["step"] / steps) if state and steps else 1.0
        slowdown = 1.0 if per_gpu == 1 else args.pack_slowdown if args.pack_slowdown is not None else float(per_gpu)
        log = None if foreground else campaign.out / "grid_logs" / f"{cell.name}.log"
        job = Job(
            cell.name,
            f"{cell} [{number}/{len(cell_runs)}]",
            command(runner, cell, campaign.grid.common, extra),
            per_gpu=per_gpu,
            est_s=60.0 * minutes * left * slowdown / cell.gpus,  # assumed: n GPUs train n times as fast
            log_path=log,
            carry_over=cell.carry_over,
            gpus=cell.gpus,
        )
        if job.may_carry_over(args.carry_over) and args.archive_to is not None:
            job.carry_over = carry_over_room(cell_run, args, sizes)
        campaign.by_key[job.key] = cell_run
        campaign.planned_steps[job.key] = steps
        jobs.append(job)
    return jobs, skipped


def checkpoint_size(cell_run: CellRun, sizes: dict) -> tuple[int, str]:
    """(bytes, how known) of the checkpoint the cell's archive would carry: its own ``last.pt`` and ``best.pt``
    when it has them, else ``footprint.checkpoint_bytes`` of its settings (``sizes`` caches it per model)."""
    folder = cell_run.run_dir / "checkpoints"
    if (folder / "last.pt").exists():
        return sum((folder / name).stat().st_size for name in ("last.pt", "best.pt") if (folder / name).exists()), ""
    run = cell_run.run
    key = json.dumps([run["model"], run["task"], run["techniques"], run["train"].get("swa_start")], default=str)
    if key not in sizes:
        from ..run.footprint import checkpoint_bytes  # builds the model on the CPU: torch, only when asked

        sizes[key] = checkpoint_bytes(run)
    return sizes[key], "about "


def carry_over_room(cell_run: CellRun, args, sizes: dict) -> bool:
    """Whether the cell's checkpoint fits the archive the slot writes (``--archive-*``); when it does not, a
    line says so and what would carry it, and the cell starts only if it can end before the deadline."""
    limits = (args.archive_files, args.archive_mib)
    room = room_bytes(*limits, args.archive_transfers, args.archive_transfer_mib)
    size, how = checkpoint_size(cell_run, sizes)
    if size <= room:
        return True
    per_transfer = room_bytes(*limits, 1, args.archive_transfer_mib)
    needed = -(-size // per_transfer) if per_transfer else 0
    advice = f"--archive-transfers {needed} would carry it" if needed else "raise --archive-files or --archive-mib"
    print(
        f"[grid] {cell_run.cell} cannot carry over: its checkpoint ({how}{size / 2**20:.2f} MiB) is more than "
        f"the archive holds ({room / 2**20:.2f} MiB in {args.archive_transfers} transfer(s)); it starts only if "
        f"it can end before the deadline ({advice})",
        flush=True,
    )
    return False


def report(campaign: Campaign, outcome, skipped: int, total: int, too_wide: int = 0) -> None:
    for job in outcome.not_started:
        print(f"[grid] not started (deadline): {campaign.by_key[job.key].cell}")
    exits = {ended.job.key: ended.returncode for ended in outcome.ended}
    for job in outcome.stopped_early:
        if exits.get(job.key, 0) not in (0, 3):  # not one that ended on its own as the signal came
            cell = campaign.by_key[job.key].cell
            print(f"[grid] stopped early (projected past the deadline, cannot carry over): {cell}")
    why = "deadline reached" if outcome.deadline_hit else f"stopped by signal {outcome.signum}"
    for job in outcome.left_queued:
        print(f"[grid] not started ({why} first): {campaign.by_key[job.key].cell}")
    for cell, status in campaign.failed:
        print(f"[grid] failed with exit {status}: {cell}")
    left = len(outcome.not_started) + len(outcome.left_queued) + campaign.interrupted + too_wide
    print(
        f"[grid] {campaign.started} of {total} cells attempted, {campaign.elsewhere} claimed by another grid "
        f"process, {len(campaign.failed)} failed, {left} left, {skipped} already complete; log {campaign.log_path}",
        flush=True,
    )


def archive(out: Path, folder: Path, files: int, mib: float, transfers: int = 1, transfer_mib: float = 64.0) -> bool:
    """Pack the output folder into ``folder``; False (and each item named on stderr) when something did not fit."""
    manifest = pack(out, folder, files, mib, transfers=transfers, transfer_mib=transfer_mib)
    kinds = [unit["kind"] for unit in manifest["units"]]
    sizes = ", ".join(f"{a['name']} {a['bytes'] / 2**20:.1f} MiB" for a in manifest["archives"])
    spread = f" in {manifest['transfers']} transfers" if manifest["transfers"] > 1 else ""
    print(
        f"[grid] archived {kinds.count('record')} record(s), {kinds.count('checkpoint')} checkpoint(s), "
        f"{kinds.count('log')} log(s) into {folder}{spread}: {sizes or 'no archive'}",
        flush=True,
    )
    room = f"{files - 1} archives of {mib:g} MiB"
    if transfers > 1 or transfer_mib < (files - 1) * mib:
        room = f"{transfers} transfer(s) of {room}, {transfer_mib:g} MiB a transfer"
    for item in manifest["left_out"]:
        print(
            f"[grid] archive: left out (no room in {room}): {item['unit']} ({item['bytes'] / 2**20:.1f} MiB)",
            file=sys.stderr,
            flush=True,
        )
    return not manifest["left_out"]


def run_grid(args, grid: Grid, extra: list[str], runner: Path, started: float) -> int:
    """The slot driver: unpack, run every cell left (N to a GPU) before the deadline, log, archive."""
    out = output_dir([*grid.common, *extra])
    if args.resume_from is not None:
        for line in unpack(args.resume_from, out):
            print(f"[grid] {line}")
    cell_runs = resolve_cells(grid.cells, grid.common, extra, str(grid.path))
    plan = read_plan(args.plan_file) if args.plan_file else {}
    gpus = gpu_list(args.gpus)
    campaign = Campaign(grid, out, out / "grid_log.csv", args.claim_dir)
    single = all((not c.per_gpu or c.per_gpu == 1) and c.gpus == 1 for c in grid.cells)
    foreground = gpus == [None] and args.per_gpu == 1 and single
    jobs, skipped = build_jobs(campaign, cell_runs, args, plan, runner, extra, foreground)
    jobs, too_wide = leave_out_too_wide(jobs, campaign, gpus)
    scheduler = Scheduler(
        gpus,
        deadline=deadline_of(args, started),
        grace_s=args.stop_grace_seconds,
        carry_over=args.carry_over,
        on_start=campaign.on_start,
        on_end=campaign.on_end,
        projected_end=campaign.projected_end,
    )
    scheduler.start = started
    outcome = scheduler.run(jobs)
    first = {}
    for row in campaign.rows:
        for gpu in row["gpu"].split("+"):
            first[gpu] = min(first.get(gpu, row["started_utc"]), row["started_utc"])
    totals = gpu_totals(campaign.rows, {("" if g is None else str(g)): s for g, s in outcome.busy_s.items()}, first)
    append_rows(campaign.log_path, totals)
    print(summary_line(totals, len(campaign.rows)))
    report(campaign, outcome, skipped, len(grid.cells), len(too_wide))
    limits = (args.archive_files, args.archive_mib, args.archive_transfers, args.archive_transfer_mib)
    packed = archive(out, args.archive_to, *limits) if args.archive_to else True
    if outcome.signum is not None:
        return 128 + outcome.signum
    return 1 if campaign.failed or not packed else 0


def plan_grid(args, grid: Grid, extra: list[str], runner: Path, started: float) -> int:
    """``--plan``: GPU-minutes per cell from records or probes; prints the table and writes the plan file."""
    out = output_dir([*grid.common, *extra])
    if args.resume_from is not None:
        for line in unpack(args.resume_from, out):
            print(f"[grid] {line}")
    cell_runs = resolve_cells(grid.cells, grid.common, extra, str(grid.path))
    gpus, deadline = gpu_list(args.gpus), deadline_of(args, started)

    path = args.plan_out or out / "grid_plan.csv"

    def probe(todo, on_found):
        return run_probes(todo, gpus, deadline, runner, grid.common, extra, args.probe_steps, on_found)

    def write_so_far(costs):  # a plan cut short (a slot's end) keeps the probes that ended
        write_plan(path, plan_rows(cell_runs, costs, args.slot_minutes))

    overhead_s = 60.0 * grid.overhead_minutes
    costs = gather_costs(cell_runs, out, args.records or [], overhead_s, args.probe_all, probe, write_so_far)
    rows = plan_rows(cell_runs, costs, args.slot_minutes)
    print_plan(rows, args.slot_minutes)
    write_plan(path, rows)
    print(f"[plan] written to {path}")
    return 0 if all(row.get("minutes") not in (None, "") for row in rows) else 1
