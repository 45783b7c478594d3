"""``lra-grid ... --records DIR``: DIR is the folder holding runs/ (an output folder or a bundle); its runs/
folder stands for it, and a folder that holds no runs/ is refused by name rather than counted as no cells done."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT
from test_grid_ledger import _record

from repro.grid.cells import GridError, load_grid
from repro.grid.cli import records_folders
from repro.grid.runs import resolve_cells

GRID = [sys.executable, "-m", "repro.grid"]


def test_a_runs_folder_given_as_records_counts_as_its_output_folder(tmp_path):
    grid_path = tmp_path / "camp.yaml"
    grid_path.write_text(
        "common: [profile=paper]\ncells:\n  - {arms: [lra_transformer, lra_local], tasks: [listops], seeds: [0]}\n"
    )
    grid = load_grid(grid_path)
    outputs = tmp_path / "outputs"
    for cell_run in resolve_cells(grid.cells, grid.common, [f"output_dir={outputs}"], "t"):
        _record(outputs, cell_run, elapsed_s=3.5)
    ledgers = []
    for given in (outputs, outputs / "runs"):
        done = subprocess.run(
            [*GRID, "ledger", str(grid_path), "--records", str(given)], capture_output=True, text=True, cwd=ROOT
        )
        assert done.returncode == 0 and "2 of 2 cells done" in done.stdout, done.stdout + done.stderr[-2000:]
        ledgers.append((tmp_path / "camp" / "LEDGER.md").read_text())
    assert ledgers[0] == ledgers[1]

    elsewhere = tmp_path / "outputs" / "runs" / "lra_transformer"  # a folder of records, but not one holding runs/
    done = subprocess.run(
        [*GRID, "ledger", str(grid_path), "--records", str(elsewhere)], capture_output=True, text=True, cwd=ROOT
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"--records {elsewhere}: holds no runs/ folder; give the output folder or bundle that holds runs/ "
        "(e.g. outputs, results/v0.2-lra)\n"
    )


def test_records_folders_of_the_run_command(tmp_path):
    (tmp_path / "out" / "runs").mkdir(parents=True)
    (tmp_path / "bundle" / "runs" / "runs").mkdir(parents=True)  # a label named runs: the folder is taken as given
    given = [tmp_path / "out", tmp_path / "out" / "runs", tmp_path / "bundle" / "runs"]
    assert records_folders(given) == [tmp_path / "out", tmp_path / "out", tmp_path / "bundle" / "runs"]
    assert records_folders(None) is None
    with pytest.raises(GridError, match=r"^--records .*nowhere: no such folder \(an output folder or bundle holding"):
        records_folders([tmp_path / "nowhere"])
