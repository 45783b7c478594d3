"""A run's checkpoint size from its settings (repro/run/footprint.py) against a real run's files, and the
slot driver's refusal to carry over a cell whose checkpoint its archive cannot hold."""

from __future__ import annotations

import pytest
import yaml
from conftest import SHORT_LISTOPS_OVERRIDES, run_cli
from test_grid_schedule import _cell_rows, _grid, _run
from test_record_identity import common

from repro.grid.cells import load_grid
from repro.grid.runs import resolve_cells
from repro.run.footprint import checkpoint_bytes


@pytest.mark.parametrize("extra", [[], ["+train.swa_start=0.5"]], ids=["no average", "weight average"])
def test_the_checkpoint_estimate_is_the_real_files_less_their_pickling(tmp_path, shared_cache, extra):
    """``last.pt`` and ``best.pt`` of a trained smoke run weigh the estimate plus the pickling's own bytes:
    never less, and less than half a copy of the model more (a copy left out or counted twice shows)."""
    overrides = ["arm=locality_k5", "task=listops", "profile=smoke", *SHORT_LISTOPS_OVERRIDES, *extra]
    folder = tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed0"
    done = run_cli(*overrides, *common(tmp_path, shared_cache))
    assert done.returncode == 0, done.stderr[-3000:]
    run = yaml.safe_load((folder / "config.yaml").read_text())
    assert (run["train"].get("swa_start") is not None) is bool(extra)
    best = (folder / "checkpoints" / "best.pt").stat().st_size
    actual = (folder / "checkpoints" / "last.pt").stat().st_size + best
    estimate = checkpoint_bytes(run)
    assert 0 <= actual - estimate < best / 2, (actual, estimate, best)


@pytest.mark.parametrize("transfer_mib, carried", [("0.26", False), ("64", True)])
def test_a_cell_whose_checkpoint_the_archive_cannot_hold_does_not_start_as_a_carry_over(
    tmp_path, transfer_mib, carried
):
    """Planned for 10 minutes of a 6-minute slot, the cell may start only to carry over: with an archive of
    one 0.26 MiB transfer (10 KiB for parts) its checkpoint could not travel, so one line says so, with the
    transfers that would carry it, and the cell is not started; with 64 MiB it starts."""
    grid = _grid(tmp_path, "  - {arms: [locality_k5], tasks: [listops], seeds: [0], carry_over: true}\n")
    plan = tmp_path / "plan.csv"
    plan.write_text("arm,task,seed,minutes,planned_steps\nlocality_k5,listops,0,10,100\n")
    archive = ["--archive-to", str(tmp_path / "slot"), "--archive-transfer-mib", transfer_mib]
    done = _run(
        tmp_path, grid, "--gpus", "0", "--deadline-minutes", "6", "--plan-file", str(plan), *archive, seconds=0.2
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    loaded = load_grid(grid)
    (cell_run,) = resolve_cells(loaded.cells, loaded.common, [f"output_dir={tmp_path / 'out'}"], str(grid))
    size = checkpoint_bytes(cell_run.run)
    room = int(0.26 * 2**20) - 256 * 1024  # the transfer less the room kept for the manifest's copy
    refusal = (
        f"[grid] locality_k5 listops seed 0 cannot carry over: its checkpoint (about {size / 2**20:.2f} MiB) is "
        f"more than the archive holds ({room / 2**20:.2f} MiB in 1 transfer(s)); it starts only if it can end "
        f"before the deadline (--archive-transfers {-(-size // room)} would carry it)"
    )
    assert (refusal in done.stdout.splitlines()) is not carried, done.stdout[-3000:]
    assert ("not started (deadline): locality_k5 listops seed 0" in done.stdout) is not carried
    assert [row["exit"] for row in _cell_rows(tmp_path)] == (["0"] if carried else [])
