"""``lra-grid`` (``python -m repro.grid``) with the real runner: cells run, complete ones skipped, a deadline
respected, a slot's archives resumed elsewhere to the same record as an uninterrupted run. (Scheduling with a
stand-in runner: test_grid_schedule.py.)"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, SHORT_LISTOPS_OVERRIDES, read_json

from repro.grid.gridlog import GPU_TOTAL, read_rows

GRID = [sys.executable, "-m", "repro.grid"]  # lra-grid, run with cwd=ROOT: this checkout's package
SHORT = ["profile=smoke", *SHORT_LISTOPS_OVERRIDES, "+train.max_steps=2"]


def _record(out, seed: int, name: str = "metrics.json"):
    return out / "runs" / "locality_k5" / "listops" / "smoke" / f"seed{seed}" / name


def _grid(tmp_path, minutes_per_run=0.0):
    path = tmp_path / "grid.yaml"
    path.write_text(
        "common: [" + ", ".join(SHORT) + "]\n"
        f"minutes_per_run: {minutes_per_run}\noverhead_minutes: 0\n"
        "cells:\n  - {arms: [locality_k5], tasks: [listops], seeds: [0, 1]}\n"
        "  - {arms: [locality_k61], tasks: [listops], seeds: [0], optional: true}\n"
    )
    return path


def _run(tmp_path, shared_cache, *args):
    extra = [
        "--",
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={shared_cache}",
        f"data_dir={tmp_path / 'none'}",
        "task.source=generated",
    ]
    options = [a for a in args[1:] if not a.startswith("output_dir=")]  # an output_dir= replaces the default
    extra += [a for a in args[1:] if a.startswith("output_dir=")]
    return subprocess.run(
        [*GRID, str(_grid(tmp_path, *args[:1])), *options, *extra],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


def test_grid_runs_its_cells_then_skips_them_on_rerun(tmp_path, shared_cache):
    first = _run(tmp_path, shared_cache, 0.0)
    assert first.returncode == 0, first.stderr[-2000:]
    for seed in (0, 1):
        metrics = read_json(_record(tmp_path / "out", seed))
        assert metrics["status"] == "complete" and metrics["seed"] == seed
    assert not (tmp_path / "out" / "runs" / "locality_k61").exists()  # optional cells need --include-optional
    second = _run(tmp_path, shared_cache, 0.0)
    assert second.returncode == 0 and second.stdout.count("record complete, skipped") == 2
    assert "0 of 2 cells attempted" in second.stdout and "2 already complete" in second.stdout
    rows = read_rows(tmp_path / "out" / "grid_log.csv")  # the first command's two cells and its one GPU row
    assert [row["arm"] for row in rows] == ["locality_k5", "locality_k5", GPU_TOTAL]
    assert all(row["exit"] == "0" for row in rows[:2])
    # a new output folder, with the first one's records counted (as a frozen bundle's are): nothing to run
    elsewhere = _run(tmp_path, shared_cache, 0.0, "--records", str(tmp_path / "out"), f"output_dir={tmp_path / 'new'}")
    assert elsewhere.returncode == 0 and "2 already complete" in elsewhere.stdout, elsewhere.stderr[-2000:]
    assert f"record complete, skipped: locality_k5 listops seed 0 (in {tmp_path / 'out'})" in elsewhere.stdout
    assert not (tmp_path / "new" / "runs").exists()


def test_a_cell_that_would_overrun_the_deadline_is_not_started(tmp_path, shared_cache):
    done = _run(tmp_path, shared_cache, 5.0, "--deadline-minutes", "4")
    assert done.returncode == 0
    assert "not started (deadline): locality_k5 listops seed 0" in done.stdout
    assert "0 of 2 cells attempted" in done.stdout
    assert not (tmp_path / "out" / "runs").exists()


def test_a_grid_without_cells_or_with_a_short_commit_names_the_fix(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cells:\n  - {arms: [locality_k5], seeds: [0]}\n")
    done = subprocess.run([*GRID, str(bad), "--dry-run"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0 and "cells[0] lacks list key(s) tasks" in done.stderr
    # A short commit in LRA_REPRO_GIT_COMMIT, which every cell's record would carry: refused before any cell.
    good = tmp_path / "good.yaml"
    good.write_text("cells:\n  - {arms: [locality_k5], tasks: [listops], seeds: [0]}\n")
    env = {**os.environ, "LRA_REPRO_GIT_COMMIT": "abc1234"}
    done = subprocess.run(
        [*GRID, str(good), "--", f"output_dir={tmp_path / 'out'}"], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert done.returncode == 2 and done.stderr.startswith("LRA_REPRO_GIT_COMMIT='abc1234' is not a full commit")
    assert not (tmp_path / "out").exists()


def test_first_puts_arms_at_the_front_of_each_block_and_refuses_an_unknown_arm(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "cells:\n  - {arms: [a, b, c], tasks: [listops], seeds: [0]}\n"
        "  - {arms: [a, b, c], tasks: [text], seeds: [0]}\n"
    )

    def order(*args):
        done = subprocess.run([*GRID, str(grid), "--dry-run", *args], capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert all(line.startswith(f"python {ROOT / 'experiments' / 'run.py'} arm=") for line in lines)
        return [" ".join(line.split()[2:4]) for line in lines]

    plain = ["arm=a task=listops", "arm=b task=listops", "arm=c task=listops"]
    assert order() == plain + [x.replace("listops", "text") for x in plain]
    first = ["arm=c task=listops", "arm=b task=listops", "arm=a task=listops"]
    assert order("--first", "c,b") == first + [x.replace("listops", "text") for x in first]  # blocks keep their order
    done = subprocess.run([*GRID, str(grid), "--dry-run", "--first", "c,d"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.strip() == f"--first c,d: d not in {grid}'s cells"


def test_columns_runs_only_the_columns_named_in_their_order_and_refuses_one_without_cells(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "cells:\n  - {arms: [a, b], tasks: [listops], seeds: [0, 1]}\n"
        "  - {arms: [a, b], tasks: [text], seeds: [0, 1]}\n"
    )

    def dry_run(*args):
        return subprocess.run([*GRID, str(grid), "--dry-run", *args], capture_output=True, text=True, cwd=ROOT)

    def cells(*args):
        done = dry_run(*args)
        assert done.returncode == 0, done.stderr
        return [" ".join(line.split()[2:5]) for line in done.stdout.splitlines()]

    assert cells("--columns", "text:1,listops") == [
        "arm=a task=text seed=1",
        "arm=b task=text seed=1",
        "arm=a task=listops seed=0",
        "arm=b task=listops seed=0",
        "arm=a task=listops seed=1",
        "arm=b task=listops seed=1",
    ]
    assert cells("--columns", "text:0", "--first", "b") == ["arm=b task=text seed=0", "arm=a task=text seed=0"]
    assert cells("--columns", "listops:1,listops") == cells("--columns", "listops:1,listops:0")  # each cell once
    assert cells("--columns", "listops,listops:1") == cells("--columns", "listops")
    for item, why in (
        ("image", f"no cells of it in {grid} (optional blocks need --include-optional)"),
        ("text:2", f"no cells of it in {grid} (optional blocks need --include-optional)"),
        ("text:x", "write a column as TASK or TASK:SEED, e.g. text:1"),
    ):
        done = dry_run("--columns", f"listops,{item}")
        assert done.returncode == 2 and done.stderr.strip() == f"--columns {item}: {why}"
    done = dry_run("--columns", ",")
    assert (
        done.returncode == 2
        and done.stderr.strip() == "--columns: name at least one column, e.g. --columns text:1,listops"
    )


@pytest.mark.slow
def test_cells_spread_over_gpu_slots_each_with_its_own_log(tmp_path, shared_cache):
    """--gpus runs one cell per listed device at once (CUDA_VISIBLE_DEVICES; smoke runs stay on CPU)."""
    done = _run(tmp_path, shared_cache, 0.0, "--gpus", "0,1")
    assert done.returncode == 0, done.stdout[-2000:]
    assert "on GPU 0" in done.stdout and "on GPU 1" in done.stdout
    rows = [row for row in read_rows(tmp_path / "out" / "grid_log.csv") if row["arm"] != GPU_TOTAL]
    assert sorted((row["seed"], row["exit"], row["gpu"]) for row in rows) == [("0", "0", "0"), ("1", "0", "1")]
    for seed in (0, 1):
        log = (tmp_path / "out" / "grid_logs" / f"locality_k5__listops__seed{seed}.log").read_text()
        assert "best val" in log
        metrics = read_json(_record(tmp_path / "out", seed))
        assert metrics["status"] == "complete"


@pytest.mark.slow
def test_a_data_parallel_cell_trains_under_torchrun_and_writes_one_record(tmp_path, shared_cache):
    """gpus: 2 with the real runner (two gloo processes here): one complete record that names its two
    processes, logged on GPU 0+1, and skipped on a rerun."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "common: [" + ", ".join(SHORT) + "]\nminutes_per_run: 0\noverhead_minutes: 0\n"
        "cells:\n  - {arms: [locality_k5], tasks: [listops], seeds: [0], gpus: 2}\n"
    )
    extra = ["--", f"output_dir={tmp_path / 'out'}", f"cache_dir={shared_cache}", "task.source=generated"]
    command = [*GRID, str(grid), "--gpus", "0,1", *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    metrics = read_json(_record(tmp_path / "out", 0))
    assert metrics["status"] == "complete" and metrics["data_parallel"]["processes"] == 2
    assert metrics["train_settings"]["batch_size"] == 8 and metrics["data_parallel"]["per_process_batch"] == 4
    rows = [row for row in read_rows(tmp_path / "out" / "grid_log.csv") if row["arm"] != GPU_TOTAL]
    assert [(row["gpu"], row["exit"]) for row in rows] == [("0+1", "0")]
    again = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert again.returncode == 0 and "1 already complete" in again.stdout


@pytest.mark.slow
def test_a_cell_claimed_by_another_grid_process_is_left_to_it(tmp_path, shared_cache):
    claims = tmp_path / "claims"
    claims.mkdir()
    (claims / "locality_k5__listops__seed0").touch()  # another process holds seed 0 now
    done = _run(tmp_path, shared_cache, 0.0, "--claim-dir", str(claims))
    assert done.returncode == 0, done.stdout[-2000:]
    assert "claimed by another grid process: locality_k5 listops seed 0" in done.stdout
    assert not (tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed0").exists()
    assert read_json(_record(tmp_path / "out", 1))["status"] == "complete"
    assert "1 of 2 cells attempted, 1 claimed by another grid process" in done.stdout
    assert not (claims / "locality_k5__listops__seed1").exists()  # released when its run ended


@pytest.mark.slow
def test_sigterm_to_the_grid_reaches_its_running_cell_and_releases_the_claim(tmp_path, shared_cache):
    """A grid stopped by SIGTERM passes it on (the run checkpoints and exits 143), logs it, frees the claim."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "common: ["
        + ", ".join(["profile=smoke", *SHORT_LISTOPS_OVERRIDES, "+train.max_steps=6", "debug.pause_at_step=2"])
        + "]\n"
        "minutes_per_run: 0\noverhead_minutes: 0\n"
        "cells:\n  - {arms: [locality_k5], tasks: [listops], seeds: [0]}\n"
    )
    claims, out = tmp_path / "claims", tmp_path / "out"
    extra = [
        "--",
        f"output_dir={out}",
        f"cache_dir={shared_cache}",
        f"data_dir={tmp_path / 'none'}",
        "task.source=generated",
    ]
    grid_process = subprocess.Popen(
        [*GRID, str(grid), "--gpus", "0", "--claim-dir", str(claims), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    run_dir = out / "runs" / "locality_k5" / "listops" / "smoke" / "seed0"
    cell_log = out / "grid_logs" / "locality_k5__listops__seed0.log"

    def paused() -> bool:
        return cell_log.exists() and "paused after step 2" in cell_log.read_text()

    deadline = time.monotonic() + 300
    while not paused() and time.monotonic() < deadline and grid_process.poll() is None:
        time.sleep(0.5)
    assert paused(), "the cell never reached its pause"
    assert (claims / "locality_k5__listops__seed0").exists()
    grid_process.send_signal(signal.SIGTERM)
    output, _ = grid_process.communicate(timeout=300)
    assert grid_process.returncode == 128 + signal.SIGTERM, output[-2000:]
    row = read_rows(out / "grid_log.csv")[0]
    assert [row[k] for k in ("arm", "task", "seed", "exit")] == ["locality_k5", "listops", "0", "143"]
    assert not (claims / "locality_k5__listops__seed0").exists()
    assert (run_dir / "checkpoints" / "last.pt").exists()
    assert not (run_dir / "metrics.json").exists()


@pytest.mark.slow
def test_a_slot_stopped_mid_run_resumes_from_its_archives_to_the_uninterrupted_record(tmp_path, shared_cache):
    """Slot 1 is stopped at step 2 and archives; slot 2 starts from an empty output folder with --resume-from
    and ends with the record an uninterrupted run writes (same predictions, accuracies and steps)."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "common: [" + ", ".join(["profile=smoke", *SHORT_LISTOPS_OVERRIDES, "+train.max_steps=6"]) + "]\n"
        "cells:\n  - {arms: [locality_k5], tasks: [listops], seeds: [0]}\n"
    )
    shared = [f"cache_dir={shared_cache}", f"data_dir={tmp_path / 'none'}", "task.source=generated"]

    def grid_command(*args, output):
        return [*GRID, str(grid), "--gpus", "0", *args, "--", f"output_dir={output}", *shared]

    reference = subprocess.run(
        grid_command(output=tmp_path / "ref"), capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert reference.returncode == 0, reference.stdout[-2000:]
    first = subprocess.Popen(
        grid_command("--archive-to", str(tmp_path / "slot1"), output=tmp_path / "out1") + ["debug.pause_at_step=2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    cell_log = tmp_path / "out1" / "grid_logs" / "locality_k5__listops__seed0.log"
    until = time.monotonic() + 300
    while not (cell_log.exists() and "paused after step 2" in cell_log.read_text()) and time.monotonic() < until:
        time.sleep(0.5)
    first.send_signal(signal.SIGTERM)
    output, _ = first.communicate(timeout=300)
    assert first.returncode == 128 + signal.SIGTERM, output[-2000:]
    manifest = json.loads((tmp_path / "slot1" / "grid-manifest.json").read_text())
    carried = {entry["path"].rsplit("/", 1)[-1] for unit in manifest["units"] for entry in unit["files"]}
    assert {"config.yaml", "last.pt", "last.pt.sha256", "grid_log.csv"} <= carried and "metrics.json" not in carried
    second = subprocess.run(
        grid_command("--resume-from", str(tmp_path / "slot1"), output=tmp_path / "out2"),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert second.returncode == 0, second.stdout[-2000:]
    assert "unpacked checkpoint runs/locality_k5/listops/smoke/seed0" in second.stdout
    cell_log = (tmp_path / "out2" / "grid_logs" / "locality_k5__listops__seed0.log").read_text()
    assert "resuming" in cell_log and "from step 2" in cell_log
    record = ("runs", "locality_k5", "listops", "smoke", "seed0")
    resumed, uninterrupted = tmp_path.joinpath("out2", *record), tmp_path.joinpath("ref", *record)
    assert (resumed / "predictions.csv").read_text() == (uninterrupted / "predictions.csv").read_text()
    with (resumed / "history.csv").open(newline="") as handle:
        last_validation = [row for row in csv.DictReader(handle) if row.get("val_acc")][-1]
    progress = read_json(resumed / "progress.json")  # what the grid projects a running cell from
    assert (progress["step"], progress["elapsed_s"]) == (
        int(last_validation["step"]),
        float(last_validation["elapsed_s"]),
    )
    ours, theirs = read_json(resumed / "metrics.json"), read_json(uninterrupted / "metrics.json")
    for key in ("steps", "best_val_acc", "best_val_step", "test_acc", "test_loss"):
        assert ours[key] == theirs[key], key
    assert [row["exit"] for row in read_rows(tmp_path / "out2" / "grid_log.csv") if row["arm"] != GPU_TOTAL] == [
        "143",
        "0",
    ]  # slot 1's row came along in the archive


def test_the_lra_grid_console_script_is_declared_and_shows_its_help():
    """pyproject's [project.scripts] names lra-grid's function; called as the script would be, it prints the usage."""
    tomllib = pytest.importorskip("tomllib")
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["lra-grid"]
    module, _, function = target.partition(":")
    for argv, usage in (
        (["--help"], "usage: lra-grid"),
        (["ledger", "--help"], "usage: lra-grid ledger"),
        (["unpack", "--help"], "usage: lra-grid unpack"),
    ):
        code = f"import sys; sys.argv = ['lra-grid', *{argv!r}]; from {module} import {function}; {function}()"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 0 and done.stdout.startswith(usage), done.stderr[-2000:]
    assert (
        "--per-gpu"
        in subprocess.run(
            [sys.executable, "-m", "repro.grid", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
        ).stdout
    )
    if shutil.which("lra-grid"):  # installed (pip install -e .)
        assert subprocess.run(["lra-grid", "--help"], capture_output=True, text=True).returncode == 0
