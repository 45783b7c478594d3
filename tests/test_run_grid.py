"""experiments/run_grid.py: cells back to back, complete ones skipped on rerun, a deadline respected."""
from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, SHORT_LISTOPS_OVERRIDES, read_json

GRID = ROOT / "experiments" / "run_grid.py"
SHORT = ["profile=smoke", *SHORT_LISTOPS_OVERRIDES, "+train.max_steps=2"]


def _grid(tmp_path, minutes_per_run=0.0):
    path = tmp_path / "grid.yaml"
    path.write_text(
        "common: [" + ", ".join(SHORT) + "]\n"
        f"minutes_per_run: {minutes_per_run}\noverhead_minutes: 0\n"
        "cells:\n  - {arms: [locality_k5], tasks: [listops], seeds: [0, 1]}\n"
        "  - {arms: [locality_k61], tasks: [listops], seeds: [0], optional: true}\n")
    return path


def _run(tmp_path, shared_cache, *args):
    extra = ["--", f"output_dir={tmp_path / 'out'}", f"cache_dir={shared_cache}", f"data_dir={tmp_path / 'none'}",
             "task.source=generated"]
    return subprocess.run([sys.executable, str(GRID), str(_grid(tmp_path, *args[:1])), *args[1:], *extra],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_grid_runs_its_cells_then_skips_them_on_rerun(tmp_path, shared_cache):
    first = _run(tmp_path, shared_cache, 0.0)
    assert first.returncode == 0, first.stderr[-2000:]
    for seed in (0, 1):
        metrics = read_json(tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / f"seed{seed}" / "metrics.json")
        assert metrics["status"] == "complete" and metrics["seed"] == seed
    assert not (tmp_path / "out" / "runs" / "locality_k61").exists()  # optional cells need --include-optional
    second = _run(tmp_path, shared_cache, 0.0)
    assert second.returncode == 0 and second.stdout.count("record complete") == 2
    log = (tmp_path / "out" / "grid_log.csv").read_text().splitlines()
    assert len(log) == 4 and all(line.split(",")[3] == "0" for line in log)


def test_a_cell_that_would_overrun_the_deadline_is_not_started(tmp_path, shared_cache):
    done = _run(tmp_path, shared_cache, 5.0, "--deadline-minutes", "4")
    assert done.returncode == 0
    assert "not started (deadline): locality_k5 listops seed 0" in done.stdout
    assert "0 of 2 cells attempted" in done.stdout
    assert not (tmp_path / "out" / "runs").exists()


def test_a_grid_without_cells_names_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cells:\n  - {arms: [locality_k5], seeds: [0]}\n")
    done = subprocess.run([sys.executable, str(GRID), str(bad), "--dry-run"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0 and "cells[0] lacks list key(s) tasks" in done.stderr


def test_cells_spread_over_gpu_slots_each_with_its_own_log(tmp_path, shared_cache):
    """--gpus runs one cell per listed device at once (CUDA_VISIBLE_DEVICES; smoke runs stay on CPU)."""
    done = _run(tmp_path, shared_cache, 0.0, "--gpus", "0,1")
    assert done.returncode == 0, done.stdout[-2000:]
    assert "on GPU 0" in done.stdout and "on GPU 1" in done.stdout
    rows = [line.split(",") for line in (tmp_path / "out" / "grid_log.csv").read_text().splitlines()]
    assert sorted((row[2], row[3], row[6]) for row in rows) == [("0", "0", "0"), ("1", "0", "1")]
    for seed in (0, 1):
        log = (tmp_path / "out" / "grid_logs" / f"locality_k5__listops__seed{seed}.log").read_text()
        assert "best val" in log
        metrics = read_json(tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / f"seed{seed}" / "metrics.json")
        assert metrics["status"] == "complete"


def test_a_cell_claimed_by_another_grid_process_is_left_to_it(tmp_path, shared_cache):
    claims = tmp_path / "claims"
    claims.mkdir()
    (claims / "locality_k5__listops__seed0").touch()  # another process holds seed 0 now
    done = _run(tmp_path, shared_cache, 0.0, "--claim-dir", str(claims))
    assert done.returncode == 0, done.stdout[-2000:]
    assert "claimed by another grid process: locality_k5 listops seed 0" in done.stdout
    assert not (tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed0").exists()
    assert read_json(tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed1" / "metrics.json")["status"] == "complete"
    assert "1 of 2 cells attempted, 1 claimed by another grid process" in done.stdout
    assert not (claims / "locality_k5__listops__seed1").exists()  # released when its run ended


def test_sigterm_to_the_grid_reaches_its_running_cell_and_releases_the_claim(tmp_path, shared_cache):
    """A grid stopped by SIGTERM passes it on (the run checkpoints and exits 143), logs it, frees the claim."""
    import signal
    import time

    grid = tmp_path / "grid.yaml"
    grid.write_text("common: [" + ", ".join(["profile=smoke", *SHORT_LISTOPS_OVERRIDES, "+train.max_steps=6",
                                            "debug.pause_at_step=2"]) + "]\n"
                    "minutes_per_run: 0\noverhead_minutes: 0\ncells:\n  - {arms: [locality_k5], tasks: [listops], seeds: [0]}\n")
    claims, out = tmp_path / "claims", tmp_path / "out"
    extra = ["--", f"output_dir={out}", f"cache_dir={shared_cache}", f"data_dir={tmp_path / 'none'}",
             "task.source=generated"]
    grid_process = subprocess.Popen([sys.executable, str(GRID), str(grid), "--gpus", "0", "--claim-dir", str(claims), *extra],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
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
    row = (out / "grid_log.csv").read_text().strip().split(",")
    assert row[:4] == ["locality_k5", "listops", "0", str(128 + signal.SIGTERM)]
    assert not (claims / "locality_k5__listops__seed0").exists()
    assert (run_dir / "checkpoints" / "last.pt").exists()
    assert not (run_dir / "metrics.json").exists()
