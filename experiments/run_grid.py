"""Run a grid of (arm, task, seed) cells back to back within a wall-clock deadline.

``python experiments/run_grid.py GRID.yaml [--deadline-minutes M] [--gpus 0,1,...] [--dry-run]
[--include-optional] [-- extra overrides]``: each cell is one ``python experiments/run.py arm=A
task=T seed=S <common> <extra>`` subprocess. With ``--gpus``, one cell runs on each listed GPU at
a time (``CUDA_VISIBLE_DEVICES``), the next cell going to the first GPU that frees up, and each
cell's output goes to ``<output_dir>/grid_logs/ARM__TASK__seedS.log``; without it, cells run one
after another in this process's output. With ``--claim-dir D``, several grid processes (started at
different times, on different GPUs or hosts sharing a file system) share one queue: a cell is
started only by the process that creates ``D/ARM__TASK__seedS`` first (released when the cell
ends, so a failed cell is retried by the next command). A cell whose record is already complete
is skipped by the runner in a few seconds, so rerunning the same command continues a grid across
GPU calls (carry or copy the ``outputs/runs`` records along). A cell is started only if
``minutes_per_run + overhead_minutes`` still fit before the deadline; the cells left are listed
at the end. Each finished cell appends a line (arm, task, seed, exit status, wall seconds, finish
time in UTC, GPU) to ``<output_dir>/grid_log.csv``. SIGTERM is passed on to the running cells
(each writes its checkpoint) and logged. Exit status: 0 when every attempted cell ended 0 (3,
data missing, counts as skipped), 128 + signal when stopped by one, else 1.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

RUN = Path(__file__).resolve().parent / "run.py"


def load_grid(path: Path, include_optional: bool) -> tuple[dict, list[tuple[str, str, int]]]:
    """The grid file's settings and its cells in order; a bad file names the key to fix."""
    try:
        grid = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        sys.exit(f"{path}: cannot read the grid: {err}")
    if not isinstance(grid, dict) or not isinstance(grid.get("cells"), list):
        sys.exit(f"{path}: needs a 'cells' list of {{arms: [...], tasks: [...], seeds: [...]}}")
    cells = []
    for i, block in enumerate(grid["cells"]):
        missing = [k for k in ("arms", "tasks", "seeds") if not isinstance(block.get(k), list)]
        if missing:
            sys.exit(f"{path}: cells[{i}] lacks list key(s) {', '.join(missing)}")
        if block.get("optional") and not include_optional:
            continue
        for cell in itertools.product(block["arms"], block["tasks"], block["seeds"]):
            cell = (str(cell[0]), str(cell[1]), int(cell[2]))
            if cell in cells:
                print(f"[grid] {path}: cells[{i}] repeats {cell[0]} {cell[1]} seed {cell[2]}; running it once")
            else:
                cells.append(cell)
    return grid, cells


def command(arm: str, task: str, seed: int, common: list[str], extra: list[str]) -> list[str]:
    return [sys.executable, str(RUN), f"arm={arm}", f"task={task}", f"seed={seed}", "progress=false", *common, *extra]


def cell_name(arm: str, task: str, seed: int) -> str:
    """One file name per cell (claims, logs); '__' keeps arm a_b, task c apart from arm a, task b_c."""
    return f"{arm}__{task}__seed{seed}"


def claim(folder: Path, arm: str, task: str, seed: int) -> bool:
    """Atomically claim a cell for this process; False if another process holds it now.

    A claim is released when the cell's run ends, whatever its exit status (a complete record
    makes any later start of the cell a skip of a few seconds), so a failed or interrupted
    cell is retried by the next grid command instead of being skipped as claimed.
    """
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(folder / cell_name(arm, task, seed), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n".encode())
    os.close(fd)
    return True


def output_dir(extra: list[str]) -> Path:
    for item in extra:
        if item.startswith("output_dir="):
            return Path(item.split("=", 1)[1])
    return Path("outputs")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("grid", type=Path)
    parser.add_argument("--deadline-minutes", type=float, default=None, help="stop starting cells after this")
    parser.add_argument("--gpus", default=None, help="comma-separated GPU ids: one cell at a time on each")
    parser.add_argument("--claim-dir", type=Path, default=None, help="share the queue with other grid processes")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--include-optional", action="store_true", help="also the cells marked optional")
    args = parser.parse_args(argv)
    grid, cells = load_grid(args.grid, args.include_optional)
    common = [str(x) for x in grid.get("common", [])]
    cost_s = 60.0 * (float(grid.get("minutes_per_run", 0)) + float(grid.get("overhead_minutes", 0)))
    if args.dry_run:
        for cell in cells:
            print(" ".join(command(*cell, common, extra)[1:]))
        return 0
    slots = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else [None]
    if not slots:
        sys.exit(f"--gpus {args.gpus!r}: give comma-separated GPU ids, e.g. --gpus 0,1")
    start, failed, pending, elsewhere, started = time.monotonic(), [], [], [], 0
    log_path = output_dir(extra) / "grid_log.csv"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    running: dict = {}  # slot -> (process, cell, began, log handle)

    def release(cell: tuple) -> None:
        if args.claim_dir is not None:
            (args.claim_dir / cell_name(*cell)).unlink(missing_ok=True)

    def finish(slot) -> None:
        process, (arm, task, seed), began, handle = running.pop(slot)
        if handle is not None:
            handle.close()
        wall = time.monotonic() - began
        with log_path.open("a", newline="") as out:
            csv.writer(out).writerow([arm, task, seed, process.returncode, f"{wall:.1f}",
                                      time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), slot if slot is not None else ""])
        release((arm, task, seed))
        if slot is not None:
            print(f"[grid] done on GPU {slot}: {arm} {task} seed {seed}, exit {process.returncode}, {wall / 60:.1f} min", flush=True)
        if process.returncode not in (0, 3):
            failed.append((arm, task, seed, process.returncode))

    def on_signal(signum, _frame) -> None:
        """Pass SIGTERM on to the running cells (each writes its checkpoint), log them, release their claims."""
        print(f"[grid] signal {signum}: stopping {len(running)} running cell(s)", flush=True)
        for process, *_ in running.values():
            if signum != signal.SIGINT:  # Ctrl-C already reached the children through the process group
                process.send_signal(signum)
        for slot, (process, *_rest) in list(running.items()):
            try:
                process.wait(timeout=300)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            finish(slot)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    queue = list(enumerate(cells, 1))
    while queue or running:
        free = [slot for slot in slots if slot not in running]
        if queue and free:
            n, (arm, task, seed) = queue[0]
            elapsed = time.monotonic() - start
            if args.deadline_minutes is not None and elapsed + cost_s > 60.0 * args.deadline_minutes:
                pending = [cell for _, cell in queue]
                queue = []
                continue
            queue.pop(0)
            if args.claim_dir is not None and not claim(args.claim_dir, arm, task, seed):
                print(f"[grid] claimed by another grid process: {arm} {task} seed {seed}", flush=True)
                elsewhere.append((arm, task, seed))
                continue
            slot = free[0]
            where = f" on GPU {slot}" if slot is not None else ""
            print(f"[grid {n}/{len(cells)}] {arm} {task} seed {seed}{where} at {elapsed / 60:.1f} min", flush=True)
            env, handle = None, None
            try:
                if slot is not None:
                    env = {**os.environ, "CUDA_VISIBLE_DEVICES": slot}
                    cell_log = output_dir(extra) / "grid_logs" / f"{cell_name(arm, task, seed)}.log"
                    cell_log.parent.mkdir(parents=True, exist_ok=True)
                    handle = cell_log.open("a")
                process = subprocess.Popen(command(arm, task, seed, common, extra), env=env, stdout=handle,
                                           stderr=subprocess.STDOUT if handle else None)
            except BaseException:
                if handle is not None:
                    handle.close()
                release((arm, task, seed))
                raise
            started += 1
            running[slot] = (process, (arm, task, seed), time.monotonic(), handle)
            if slot is None:
                process.wait()
                finish(None)
            continue
        for slot in [s for s, (p, *_) in running.items() if p.poll() is not None]:
            finish(slot)
        if running:
            time.sleep(1.0)
    for arm, task, seed in pending:
        print(f"[grid] not started (deadline): {arm} {task} seed {seed}")
    for arm, task, seed, status in failed:
        print(f"[grid] failed with exit {status}: {arm} {task} seed {seed}")
    print(f"[grid] {started} of {len(cells)} cells attempted, {len(elsewhere)} claimed by another grid process, "
          f"{len(failed)} failed, {len(pending)} left; log {log_path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
