"""lra-grid ledger on fake records: cells done (with the grid's settings), GPU-minutes spent and estimated left;
and the campaign grid file's shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from fake_records import make_record
from omegaconf import OmegaConf

from repro import records
from repro.grid.cells import load_grid
from repro.grid.costs import cell_seconds, cost_from_run
from repro.grid.gridlog import append_rows
from repro.grid.runs import resolve_cells

GRID = [sys.executable, "-m", "repro.grid"]  # lra-grid, run with cwd=ROOT: this checkout's package
LRA_ARMS = [
    "lra_transformer",
    "lra_local",
    "lra_sparse",
    "lra_longformer",
    "lra_linformer",
    "lra_reformer",
    "lra_sinkhorn",
    "lra_synthesizer",
    "lra_bigbird",
    "lra_linear",
    "lra_performer",
]


def _record(folder, cell_run, **metrics):
    """A complete record of the cell whose config.yaml holds the cell's resolved settings (as the runner writes)."""
    cell = cell_run.cell
    run_dir = make_record(
        folder / "runs", cell.arm, cell.task, cell.seed, profile="paper", labels=np.zeros(20, dtype=int), accuracy=0.5
    )
    records.write_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(cell_run.run)))
    path = run_dir / "metrics.json"
    written = json.loads(path.read_text())
    files = {**written["files"], "config.yaml": records.file_sha256(run_dir / "config.yaml")}  # as the runner lists it
    path.write_text(json.dumps({**written, "files": files, **metrics}))
    return run_dir


def _table(text: str, first: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {first} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_ledger_counts_done_cells_minutes_spent_and_minutes_left(tmp_path):
    grid_path = tmp_path / "camp.yaml"
    grid_path.write_text(
        "common: [profile=paper]\noverhead_minutes: 0.5\ncells:\n"
        "  - {arms: [lra_transformer, lra_local], tasks: [listops], seeds: [0, 1]}\n"
        "  - {arms: [lra_transformer], tasks: [text], seeds: [0], optional: true}\n"
    )
    folder = tmp_path / "records"
    grid = load_grid(grid_path, include_optional=True)
    runs = {cr.cell.key: cr for cr in resolve_cells(grid.cells, ["profile=paper"], [f"output_dir={folder}"], "test")}
    _record(folder, runs["lra_transformer", "listops", 0], elapsed_s=3.5)
    local0 = _record(folder, runs["lra_local", "listops", 0], elapsed_s=3.5)
    _record(  # no grid_log row: its own wall time, on each of its two processes' GPUs
        folder, runs["lra_transformer", "listops", 1], elapsed_s=3.5, wall_time_s=9.0, data_parallel={"processes": 2}
    )
    other = make_record(
        folder / "runs", "lra_local", "listops", 1, profile="paper", labels=np.zeros(20, dtype=int), accuracy=0.5
    )  # complete, but with other settings than the grid's: not done
    assert other.is_dir()
    append_rows(
        folder / "grid_log.csv",
        [
            {"arm": "lra_transformer", "task": "listops", "seed": 0, "exit": 143, "wall_s": 300.0, "gpu_s": 100.0},
            {"arm": "lra_transformer", "task": "listops", "seed": 0, "exit": 0, "wall_s": 100.0, "gpu_s": 50.0},
            {"arm": "lra_local", "task": "listops", "seed": 1, "exit": 1, "wall_s": 60.0, "gpu_s": 30.0},
            {"arm": "(gpu total)", "wall_s": 460.0, "gpu_s": 460.0},
        ],
    )
    with (folder / "grid_log.csv").open("a") as log:  # a row of the older 7-column format: its wall seconds count
        log.write("lra_local,listops,0,0,120.0,2026-11-26T06:18:09,2\n")
    plan = tmp_path / "plan.csv"
    plan.write_text("arm,task,seed,minutes,planned_steps\nlra_transformer,text,0,12.0,20000\n")
    done = subprocess.run(
        [*GRID, "ledger", str(grid_path), "--records", str(folder), "--plan-file", str(plan)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3 of 5 cells done" in done.stdout
    ledger = (tmp_path / "camp" / "LEDGER.md").read_text()
    metrics = json.loads((local0 / "metrics.json").read_text())
    cost = cost_from_run(metrics, local0 / "history.csv", metrics["wall_time_s"] - 3.5 + 30.0, "test")
    left = cell_seconds(cost, runs["lra_local", "listops", 1].train)[2] / 60
    spent_done = (150.0 + 120.0 + 2 * 9.0) / 60
    assert _table(ledger, "required") == [
        "required",
        "3 of 4",
        f"{spent_done:.1f}",
        "0.5",
        "1",
        f"{left:.1f} (1 from the records)",
    ]
    assert _table(ledger, "optional") == ["optional", "0 of 1", "0.0", "0.0", "1", "12.0 (1 from the plan)"]
    assert _table(ledger, "listops")[:7] == ["listops", "0", "2", "2", "0", f"{(150.0 + 120.0) / 60:.1f}", "0.0"]
    assert _table(ledger, "text (optional)")[-1] == "lra_transformer"


def test_a_cell_counts_as_done_in_any_of_several_records_folders(tmp_path):
    # a campaign's output folder and a bundle frozen from an earlier slot (its grid log under extra/)
    grid_path = tmp_path / "camp.yaml"
    grid_path.write_text(
        "common: [profile=paper]\ncells:\n  - {arms: [lra_transformer, lra_local], tasks: [listops], seeds: [0]}\n"
    )
    grid = load_grid(grid_path)
    outputs, bundle = tmp_path / "outputs", tmp_path / "bundle"
    for folder, arm in ((outputs, "lra_transformer"), (bundle, "lra_local")):
        cell_run = next(
            cr for cr in resolve_cells(grid.cells, grid.common, [f"output_dir={folder}"], "t") if cr.cell.arm == arm
        )
        _record(folder, cell_run, elapsed_s=3.5)
    append_rows(
        bundle / "extra" / "grid_log.csv",
        [{"arm": "lra_local", "task": "listops", "seed": 0, "exit": 0, "wall_s": 90.0, "gpu_s": 60.0}],
    )
    command = [*GRID, "ledger", str(grid_path), "--records", str(outputs)]
    one = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert one.returncode == 0 and "1 of 2 cells done" in one.stdout
    both = subprocess.run([*command, "--records", str(bundle)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert both.returncode == 0 and "2 of 2 cells done" in both.stdout, both.stderr[-2000:]
    ledger = (tmp_path / "camp" / "LEDGER.md").read_text()
    assert _table(ledger, "required")[:3] == ["required", "2 of 2", f"{(3.5 + 60.0) / 60:.1f}"]
    assert f"`{bundle.as_posix()}/extra/grid_log.csv`" in ledger
    # a later slot that completed no record: its log, given with --grid-log, counts besides the bundle's
    slot_log = tmp_path / "slot2" / "grid_log.csv"
    append_rows(slot_log, [{"arm": "lra_transformer", "task": "listops", "seed": 0, "exit": 143, "wall_s": 50.0,
                            "gpu_s": 30.0}])  # fmt: skip
    added = subprocess.run([*command, "--records", str(bundle), "--grid-log", str(slot_log)],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert added.returncode == 0, added.stderr[-2000:]
    ledger = (tmp_path / "camp" / "LEDGER.md").read_text()
    # (a cell the grid log charges is charged its GPU seconds there instead of its record's own time)
    assert _table(ledger, "required")[:3] == ["required", "2 of 2", f"{(30.0 + 60.0) / 60:.1f}"]
    assert f"`{bundle.as_posix()}/extra/grid_log.csv`" in ledger and f"`{slot_log.as_posix()}`" in ledger
    # the same log spelled otherwise, and a later slot's log that carries the earlier slot's rows (a slot resumed
    # from its files): every row counts once
    resumed = tmp_path / "slot3" / "grid_log.csv"
    resumed.parent.mkdir()
    resumed.write_text(slot_log.read_text())
    again = [*command, "--records", str(bundle), "--records", f"{bundle}/../bundle", "--grid-log", str(slot_log),
             "--grid-log", f"{slot_log.parent}/../slot2/grid_log.csv", "--grid-log", str(resumed)]  # fmt: skip
    twice = subprocess.run(again, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert twice.returncode == 0, twice.stderr[-2000:]
    ledger = (tmp_path / "camp" / "LEDGER.md").read_text()
    assert _table(ledger, "required")[:3] == ["required", "2 of 2", f"{(30.0 + 60.0) / 60:.1f}"]
    missing = subprocess.run([*command, "--grid-log", str(tmp_path / "nowhere.csv")], capture_output=True, text=True,
                             cwd=ROOT, timeout=300)  # fmt: skip
    assert missing.returncode != 0
    last_line = missing.stderr.strip().splitlines()[-1]
    why = "no such file (a slot's grid_log.csv, as lra-grid unpack writes it)"
    assert last_line.endswith(f"--grid-log {tmp_path / 'nowhere.csv'}: {why}")
    # a merged bundle keeps its slot bundles' grid logs under sources/<slot version>/extra/: read there too
    (bundle / "sources" / "slot1" / "extra").mkdir(parents=True)
    (bundle / "extra" / "grid_log.csv").rename(bundle / "sources" / "slot1" / "extra" / "grid_log.csv")
    merged = subprocess.run([*command, "--records", str(bundle)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert merged.returncode == 0, merged.stderr[-2000:]
    ledger = (tmp_path / "camp" / "LEDGER.md").read_text()
    assert _table(ledger, "required")[:3] == ["required", "2 of 2", f"{(3.5 + 60.0) / 60:.1f}"]
    assert f"`{bundle.as_posix()}/sources/slot1/extra/grid_log.csv`" in ledger


def test_dry_run_marks_the_cells_a_records_folder_already_holds(tmp_path):
    grid_path = tmp_path / "camp.yaml"
    grid_path.write_text(
        "common: [profile=paper]\ncells:\n  - {arms: [lra_transformer, lra_local], tasks: [listops], seeds: [0]}\n"
    )
    grid = load_grid(grid_path)
    bundle = tmp_path / "bundle"
    done_run = next(cr for cr in resolve_cells(grid.cells, grid.common, [f"output_dir={bundle}"], "t"))
    _record(bundle, done_run, elapsed_s=3.5)
    command = [*GRID, str(grid_path), "--dry-run"]
    plain = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    marked = subprocess.run([*command, "--records", str(bundle)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert plain.returncode == 0 and marked.returncode == 0, marked.stderr[-2000:]
    first, second = marked.stdout.splitlines()
    assert first == f"# done in {bundle}: {plain.stdout.splitlines()[0]}" and done_run.cell.arm in first
    assert second == plain.stdout.splitlines()[1] and not second.startswith("#")
    # the same folder named by the grid file's records (a glob pattern): no --records needed
    grid_path.write_text(grid_path.read_text().replace("cells:", f"records: [{tmp_path}/bund*]\ncells:"))
    by_file = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert by_file.returncode == 0 and by_file.stdout == marked.stdout, by_file.stderr[-2000:]
    ledger = subprocess.run([*GRID, "ledger", str(grid_path)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert ledger.returncode == 0 and "1 of 2 cells done" in ledger.stdout, ledger.stderr[-2000:]
    grid_path.write_text("records: [a, 3]\ncells: []\n")
    bad = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert bad.returncode == 2 and "records must be a list of folder patterns" in bad.stderr


def test_a_block_s_overrides_come_after_the_common_ones_and_before_the_command_line_s(tmp_path):
    from repro.grid.cells import command

    path = tmp_path / "grid.yaml"
    path.write_text(
        "common: [profile=paper]\ncells:\n"
        "  - {arms: [lra_transformer], tasks: [listops], seeds: [0], overrides: [task.source=generated]}\n"
        "  - {arms: [lra_transformer], tasks: [text], seeds: [0]}\n"
    )
    grid = load_grid(path)
    listops, text = grid.cells
    line = command(ROOT / "experiments" / "run.py", listops, grid.common, ["task.source=official"])
    assert line[-3:] == ["profile=paper", "task.source=generated", "task.source=official"]
    assert command(ROOT / "experiments" / "run.py", text, grid.common, [])[-1] == "profile=paper"
    runs = resolve_cells(grid.cells, grid.common, [f"output_dir={tmp_path}"], "test")
    assert runs[0].run["task"]["source"] == "generated" and runs[1].run["task"]["source"] == "auto"
    wins = resolve_cells([listops], grid.common, ["task.source=official"], "test")
    assert wins[0].run["task"]["source"] == "official"


def test_the_ledger_needs_an_existing_records_folder(tmp_path):
    done = subprocess.run(
        [
            *GRID,
            "ledger",
            str(ROOT / "experiments" / "grids" / "v0.2-lra.yaml"),
            "--records",
            str(tmp_path / "nowhere"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2 and "--records" in done.stderr and "no such folder" in done.stderr


def test_the_campaign_grid_holds_whole_columns_seed_by_seed():
    grid = load_grid(ROOT / "experiments" / "grids" / "v0.2-lra.yaml")
    assert grid.common == ["profile=paper"] and not any("data_dir" in item for item in grid.common)
    assert len(grid.cells) == 99 and len({cell.key for cell in grid.cells}) == 99
    columns = [grid.cells[i : i + 11] for i in range(0, 99, 11)]
    assert all([cell.arm for cell in column] == LRA_ARMS for column in columns)
    assert all(len({(cell.task, cell.seed) for cell in column}) == 1 for column in columns)
    seeds = [column[0].seed for column in columns]
    assert seeds == sorted(seeds) and {column[0].task for column in columns} == {"listops", "text", "image"}
    everything = load_grid(ROOT / "experiments" / "grids" / "v0.2-lra.yaml", include_optional=True)
    extra = everything.cells[99:]
    assert [(c.arm, c.task, c.seed, c.optional) for c in extra] == [(arm, "pathfinder", 0, True) for arm in LRA_ARMS]


def test_first_moves_arms_to_the_front_of_each_column_across_its_blocks():
    """The image columns span three blocks (lra_synthesizer alone in the middle); --first reorders within
    each (task, seed) column and keeps the columns in order."""
    from repro.grid.cells import put_first

    grid = put_first(load_grid(ROOT / "experiments" / "grids" / "v0.2-lra.yaml"), ["lra_synthesizer", "lra_bigbird"])
    columns = [grid.cells[i : i + 11] for i in range(0, 99, 11)]
    rest = [arm for arm in LRA_ARMS if arm not in ("lra_synthesizer", "lra_bigbird")]
    assert all([c.arm for c in column] == ["lra_synthesizer", "lra_bigbird", *rest] for column in columns)
    assert [(c[0].task, c[0].seed) for c in columns] == [
        (t, s) for s in (0, 1, 2) for t in ("listops", "text", "image")
    ]


def test_a_grid_s_superseded_records_are_what_leave_out_from_reads_and_a_bad_list_names_the_key(tmp_path):
    from repro.grid.cells import GridError, superseded_records

    path = tmp_path / "grid.yaml"
    path.write_text("superseded: [results/b/runs/a/t/paper/seed0, results/c/runs/a/t/paper/seed1]\ncells: []\n")
    assert superseded_records([path]) == [
        Path("results/b/runs/a/t/paper/seed0"),
        Path("results/c/runs/a/t/paper/seed1"),
    ]
    # a merged bundle keeps a superseded record under its extra/: nothing to leave out of that bundle's runs
    apart = tmp_path / "merged" / "extra" / "slot1" / "runs" / "a" / "t" / "paper" / "seed0"
    apart.mkdir(parents=True)
    missing = tmp_path / "merged" / "extra" / "slot2" / "runs" / "a" / "t" / "paper" / "seed0"
    path.write_text(f"superseded: [{apart}, {missing}]\ncells: []\n")
    assert superseded_records([path], [tmp_path / "merged"]) == [missing]  # one that does not exist still goes on
    assert superseded_records([path], [tmp_path / "other"]) == [apart, missing]  # another bundle: refused later
    path.write_text("superseded: results/b/runs/a/t/paper/seed0\ncells: []\n")
    with pytest.raises(GridError) as error:
        load_grid(path)
    assert str(error.value) == (
        f"{path}: superseded must be a list of record folders, e.g. [results/v0.2-lra-slot01/runs/a/t/paper/seed0]"
    )


@pytest.mark.parametrize(
    "block, message",
    [
        ("{arms: [a], tasks: [t], seeds: [0], per_gpu: 0}", "cells[0].per_gpu must be a whole number >= 1, not 0"),
        ("{arms: [a], tasks: [t], seeds: [0], per-gpu: 2}", "cells[0] has unknown key(s) per-gpu; known: arms"),
        ("{arms: [a], tasks: [t], seeds: [zero]}", "cells[0].seeds must be whole numbers, not 'zero'"),
        ("{arms: [a], tasks: [t], seeds: [0], carry_over: 1}", "cells[0].carry_over must be true or false, not 1"),
        ("{arms: [a], tasks: [t], seeds: [0], gpus: 0}", "cells[0].gpus must be a whole number >= 1, not 0"),
        ("{arms: [a], tasks: [t], seeds: [0], stage: 3}", "cells[0].stage must be a name, e.g. A, not 3"),
        (
            "{arms: [a], tasks: [t], seeds: [0], gpus: 2, per_gpu: 2}",
            "cells[0] trains each cell on 2 GPUs, which it holds alone; per_gpu must be 1 or left out, not 2",
        ),
        (
            "{arms: [a], tasks: [t], seeds: [0], overrides: task.source=generated}",
            "cells[0].overrides must be a list of KEY=VALUE settings, e.g. [task.source=generated], not 'task.source",
        ),
    ],
)
def test_a_bad_grid_block_names_its_key(tmp_path, block, message):
    from repro.grid.cells import GridError

    path = tmp_path / "grid.yaml"
    path.write_text(f"cells:\n  - {block}\n")
    with pytest.raises(GridError) as error:
        load_grid(path)
    assert str(error.value).startswith(f"{path}: {message}")


def test_the_ledger_shows_a_cell_in_progress_as_progress_and_totals_each_stage(tmp_path):
    """A cell whose checkpoint sits in a slot's output folder (--progress): one line with its epoch, steps done,
    best validation so far and last validations, marked as progress; its minutes left are the plan's less the
    steps done; the stages (a block's stage) are totalled apart."""
    import torch

    grid_path = tmp_path / "camp.yaml"
    grid_path.write_text(
        "common: [profile=paper]\ncells:\n"
        "  - {stage: A, arms: [lra_transformer], tasks: [listops], seeds: [0]}\n"
        "  - {stage: A, arms: [lra_local], tasks: [listops], seeds: [0]}\n"
        "  - {stage: B, arms: [lra_transformer, lra_local], tasks: [listops], seeds: [1]}\n"
    )
    grid = load_grid(grid_path)
    assert [c.stage for c in grid.cells] == ["A", "A", "B", "B"]
    bundle, slot = tmp_path / "bundle", tmp_path / "slot01"
    runs = {cr.cell.key: cr for cr in resolve_cells(grid.cells, grid.common, [f"output_dir={bundle}"], "test")}
    _record(bundle, runs["lra_transformer", "listops", 0], elapsed_s=3.5, wall_time_s=600.0)
    # lra_local seed 0: its checkpoint in the slot's output folder (as lra-grid unpack writes it)
    running = slot / Path(*runs["lra_local", "listops", 0].run_dir.parts[-5:])
    (running / "checkpoints").mkdir(parents=True)
    history = [
        {"step": 1000, "epoch": 0.5, "train_loss": 2.0, "elapsed_s": 60.0},
        {"step": 2000, "epoch": 1.0, "val_loss": 1.9, "val_acc": 0.3745, "elapsed_s": 130.0},
        {"step": 4000, "epoch": 2.0, "val_loss": 1.7, "val_acc": 0.4055, "elapsed_s": 250.0},
        {"step": 6000, "epoch": 3.0, "val_loss": 1.8, "val_acc": 0.3990, "elapsed_s": 370.0},
    ]
    state = {"step": 6500, "examples": 208000, "elapsed_s": 400.0, "best_val_acc": 0.4055, "best_val_step": 4000}
    torch.save({"state": {**state, "history": history}}, running / "checkpoints" / "last.pt")
    (running / "progress.json").write_text(json.dumps({"step": 6000, "elapsed_s": 370.0}))  # older: last.pt counts
    # lra_transformer seed 1: only a progress.json (its checkpoint not yet written)
    other = slot / Path(*runs["lra_transformer", "listops", 1].run_dir.parts[-5:])
    other.mkdir(parents=True)
    (other / "progress.json").write_text(json.dumps({"step": 500, "elapsed_s": 40.0}))
    plan = tmp_path / "plan.csv"
    plan.write_text(
        "arm,task,seed,minutes,planned_steps\nlra_local,listops,0,20.0,10000\nlra_transformer,listops,0,10.0,5000\n"
    )
    command = [*GRID, "ledger", str(grid_path), "--records", str(bundle), "--plan-file", str(plan)]
    done = subprocess.run([*command, "--progress", str(slot)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 of 4 cells done, 2 in progress" in done.stdout
    ledger = (tmp_path / "camp" / "LEDGER.md").read_text()
    local_left, transformer_left = 20.0 * (1 - 6500 / 10000), 10.0 * (1 - 500 / 5000)
    assert _table(ledger, "A") == ["A", "2", "1", "1", f"{600.0 / 60:.1f}", f"{local_left:.1f}"]
    assert _table(ledger, "B") == ["B", "2", "0", "1", "0.0", f"{transformer_left + 20.0:.1f}"]
    where = f"{slot.as_posix()}, checkpoints/last.pt"
    assert _table(ledger, "lra_local listops seed 0") == [
        "lra_local listops seed 0",
        "3.25",
        "6,500 of 10,000",
        "40.55 at step 4,000",
        "1.0: 37.45, 2.0: 40.55, 3.0: 39.90",
        where,
        "progress, not a result",
    ]
    assert _table(ledger, "lra_transformer listops seed 1") == [
        "lra_transformer listops seed 1",
        "?",
        "500 of 5,000",
        "?",
        "-",
        f"{slot.as_posix()}, progress.json",
        "progress, not a result",
    ]
    assert "| lra_local listops seed 1 |" not in ledger  # nothing in progress: no line
    # a validation after the checkpoint (progress.json's step is later): its step, the epoch at it, last.pt's best
    (running / "progress.json").write_text(json.dumps({"step": 7000, "elapsed_s": 430.0}))
    later = subprocess.run([*command, "--progress", str(slot)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert later.returncode == 0, later.stderr[-2000:]
    ledger = (tmp_path / "camp" / "LEDGER.md").read_text()
    assert _table(ledger, "lra_local listops seed 0")[1:4] == ["3.50", "7,000 of 10,000", "40.55 at step 4,000"]
    assert _table(ledger, "lra_local listops seed 0")[5] == f"{slot.as_posix()}, progress.json (last.pt at step 6500)"
    assert _table(ledger, "A")[5] == f"{20.0 * (1 - 7000 / 10000):.1f}"
    missing = subprocess.run(
        [*command, "--progress", str(tmp_path / "nowhere")], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert missing.returncode == 2 and f"--progress {tmp_path / 'nowhere'}: no such folder" in missing.stderr


def test_the_follow_up_grid_runs_its_stages_in_order_seed_0_of_every_arm_first():
    grid = load_grid(ROOT / "experiments" / "grids" / "v0.3-followup.yaml", include_optional=True)
    assert grid.common == ["profile=paper"] and len({c.key for c in grid.cells}) == len(grid.cells)
    stages = [c.stage for c in grid.cells]
    assert stages == sorted(stages) and set(stages) == {"A", "B", "C", "D"}
    a = [(c.arm, c.task, c.seed) for c in grid.cells if c.stage == "A"]
    assert a == [
        (arm, task, seed)
        for seed in (0, 1)
        for arm, task in [
            ("rotary_transformer", "listops"),
            ("rotary_transformer_notech", "listops"),
            ("locality_k5", "text"),
            ("locality_k61", "text"),
        ]
    ]
    for stage in "ABC":  # within a stage (its required cells, its optional ones), seed 0 of every arm before seed 1
        for optional in (False, True):
            seeds = [c.seed for c in grid.cells if c.stage == stage and c.optional == optional]
            assert seeds == sorted(seeds)
    assert [(c.arm, c.seed) for c in grid.cells if c.stage == "D"] == [  # the power table's third seeds
        ("rotary_transformer", 2),
        ("rotary_transformer_notech", 2),
        ("locality_k61", 2),
        ("locality_k5", 2),
    ]
    assert all(c.carry_over is True and c.per_gpu == 1 and c.gpus == 1 for c in grid.cells)
    assert {c.arm for c in grid.cells if c.task == "pathfinder"} == {"rotary_transformer", *LRA_ARMS}
    assert all("task.source=generated" in c.overrides for c in grid.cells if c.task in ("listops", "pathfinder"))
    assert all("techniques=followup" in c.overrides for c in grid.cells if c.arm in ("s4", "s5"))


def test_a_grid_whose_records_patterns_match_nothing_yet_has_every_cell_left(tmp_path):
    """Before a campaign's first bundle its grid file's records match no folder: the ledger counts every cell
    as left (with the plan's minutes), instead of refusing; with no records patterns either it still refuses."""
    grid_path = tmp_path / "camp.yaml"
    grid_path.write_text(
        f"common: [profile=paper]\nrecords: [{tmp_path}/none-yet*]\ncells:\n"
        "  - {stage: A, arms: [lra_transformer, lra_local], tasks: [listops], seeds: [0]}\n"
    )
    plan = tmp_path / "plan.csv"
    plan.write_text("arm,task,seed,minutes,planned_steps\nlra_local,listops,0,20.0,10000\n")
    command = [*GRID, "ledger", str(grid_path), "--plan-file", str(plan)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0 and "0 of 2 cells done, 0 in progress" in done.stdout, done.stderr[-2000:]
    ledger = (tmp_path / "camp" / "LEDGER.md").read_text()
    assert f"no records yet (no folder matches the grid file's records: {tmp_path}/none-yet*)" in ledger
    assert _table(ledger, "A") == ["A", "2", "0", "0", "0.0", "20.0 (+1 unknown)"]
    grid_path.write_text(grid_path.read_text().replace(f"records: [{tmp_path}/none-yet*]\n", ""))
    refused = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert refused.returncode == 2 and "no records folder: pass --records" in refused.stderr
