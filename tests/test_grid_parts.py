"""A slot's archives in parts over several transfers (repro/grid/archive.py, parts.py): the limits of each
transfer, staging for the next machine, assembling there, refusing a part missing or damaged, and a cell carried
over three slots in parts ending with the record of one uninterrupted run."""

from __future__ import annotations

import csv
import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, SHORT_LISTOPS_OVERRIDES, read_json
from test_grid_archive import UNFINISHED, _files, _output

from repro.grid.archive import MANIFEST, pack
from repro.grid.cells import GridError
from repro.grid.cli import main
from repro.grid.parts import assemble, stage, stage_plan
from repro.grid.unpack import unpack

LAST = f"{UNFINISHED}/checkpoints/last.pt"
LIMITS = {"max_files": 3, "max_mib": 0.12, "transfers": 8, "transfer_mib": 0.5}  # 2 parts a transfer


def _slot(tmp_path):
    root = _output(tmp_path / "out")
    return root, pack(root, tmp_path / "slot", piece_bytes=50_000, **LIMITS)


def _transfers(folder):
    return sorted(p for p in folder.iterdir() if p.is_dir())


def test_each_transfer_is_a_folder_within_its_limits_holding_its_parts_and_the_manifest(tmp_path):
    root, manifest = _slot(tmp_path)
    transfers = _transfers(tmp_path / "slot")
    assert [t.name for t in transfers] == [f"transfer-{n:02d}" for n in range(1, manifest["transfers"] + 1)]
    assert manifest["transfers"] >= 3 and not manifest["left_out"]
    text = (transfers[0] / MANIFEST).read_bytes()
    for number, folder in enumerate(transfers, 1):
        files = sorted(folder.iterdir())
        assert len(files) <= LIMITS["max_files"] and sum(f.stat().st_size for f in files) <= 0.5 * 2**20
        assert (folder / MANIFEST).read_bytes() == text
        names = {a["name"] for a in manifest["archives"] if a["transfer"] == number}
        assert {f.name for f in files} == names | {MANIFEST}
        assert all(
            (folder / a["name"]).stat().st_size <= 0.12 * 2**20 for a in manifest["archives"] if a["name"] in names
        )
    last = next(e for u in manifest["units"] for e in u["files"] if e["path"] == LAST)
    transfer_of = {a["name"]: a["transfer"] for a in manifest["archives"]}
    assert len({transfer_of[p["archive"]] for p in last["pieces"]}) >= 2  # the checkpoint crosses transfers
    unpack(tmp_path / "slot", tmp_path / "next")  # the folder of transfers, as brought back
    carried, original = _files(tmp_path / "next"), _files(root)
    assert carried and all(carried[path] == original[path] for path in carried)
    assert carried[LAST] == original[LAST]


def test_fewer_transfers_than_the_checkpoint_needs_leave_it_out_whole(tmp_path):
    _, manifest = _slot(tmp_path)
    short = pack(_output(tmp_path / "again"), tmp_path / "short", piece_bytes=50_000, **{**LIMITS, "transfers": 2})
    assert [u["unit"] for u in short["left_out"]] == [f"checkpoint {UNFINISHED}"]
    assert short["transfers"] <= 2 < manifest["transfers"]
    assert {a["transfer"] for a in short["archives"]} <= {1, 2}


def test_staged_parts_fit_each_inbound_call_and_assemble_to_the_same_files(tmp_path):
    root, manifest = _slot(tmp_path)
    lines = stage([tmp_path / "slot"], budget_mib=0.45, checkout_mib=0.2, data_mib=0.1, to=tmp_path / "staged")
    inbound = _transfers(tmp_path / "staged")
    assert len(lines) == len(inbound) >= 3
    assert lines[0].startswith(f"inbound 1 of {len(inbound)} into {inbound[0]}: grid-01.tar.gz")
    for number, folder in enumerate(inbound, 1):
        beside = (0.2 + (0.1 if number == 1 else 0.0)) * 2**20
        assert sum(f.stat().st_size for f in folder.iterdir()) + beside <= 0.45 * 2**20
    staged = sorted(f.name for folder in inbound for f in folder.iterdir() if f.name != MANIFEST)
    assert staged == sorted(a["name"] for a in manifest["archives"])  # every part once
    machine = tmp_path / "machine" / "in"
    for folder in inbound:  # each call's folder arrives on its own
        shutil.copytree(folder, machine / folder.name)
    line = assemble([machine], tmp_path / "machine" / "set")
    assert line.startswith(f"assembled {len(manifest['archives'])} part(s)")
    unpack(tmp_path / "machine" / "set", tmp_path / "next")
    carried, original = _files(tmp_path / "next"), _files(root)
    assert carried[LAST] == original[LAST] and all(carried[p] == original[p] for p in carried)


def test_a_part_larger_than_an_inbound_call_leaves_is_refused_by_name():
    manifest = {"archives": [{"name": "grid-01.tar.gz", "bytes": 3 * 2**20}]}
    with pytest.raises(GridError) as err:
        stage_plan(manifest, 1000, budget_mib=4, checkout_mib=1.5)
    assert str(err.value) == (
        "grid-01.tar.gz: 3.00 MiB does not fit an inbound transfer of --budget-mib 4 beside 1.50 MiB "
        "(the checkout and the manifest); pack with a smaller --archive-mib"
    )


def test_data_that_leaves_the_first_call_no_room_for_a_part_travels_alone():
    manifest = {"archives": [{"name": f"grid-{n:02d}.tar.gz", "bytes": 13 * 2**20} for n in (1, 2, 3, 4, 5)]}
    # 64 MiB a call: the checkout (9) and the data (43) leave 12 MiB, later calls 55 (four parts of 13)
    assert stage_plan(manifest, 10_000, budget_mib=64, checkout_mib=9, data_mib=43) == [
        [],
        ["grid-01.tar.gz", "grid-02.tar.gz", "grid-03.tar.gz", "grid-04.tar.gz"],
        ["grid-05.tar.gz"],
    ]
    assert stage_plan(manifest, 10_000, budget_mib=64, checkout_mib=9)[0] == [f"grid-0{n}.tar.gz" for n in (1, 2, 3, 4)]
    with pytest.raises(GridError, match=r"^--budget-mib 50: less than the first call's checkout, data and manifest"):
        stage_plan(manifest, 10_000, budget_mib=50, checkout_mib=9, data_mib=43)


def _assemble_cli(tmp_path, capsys, *folders):
    status = main(["assemble", *map(str, folders), "--into", str(tmp_path / "set")])
    err = capsys.readouterr().err
    return status, err


def test_a_missing_part_is_refused_in_one_line_and_nothing_is_assembled_or_unpacked(tmp_path, capsys):
    _, manifest = _slot(tmp_path)
    third = manifest["archives"][2]
    (tmp_path / "slot" / f"transfer-{third['transfer']:02d}" / third["name"]).unlink()
    status, err = _assemble_cli(tmp_path, capsys, tmp_path / "slot")
    expected = (
        f"{tmp_path / 'slot'}: grid-03.tar.gz (part 3 of {len(manifest['archives'])}, in transfer "
        f"{third['transfer']}) is missing; copy that transfer again"
    )
    assert (status, err) == (2, expected + "\n")
    assert not (tmp_path / "set").exists() and not list(tmp_path.glob(".set*"))
    with pytest.raises(GridError) as refused:
        unpack(tmp_path / "slot", tmp_path / "next")
    assert str(refused.value) == expected and not (tmp_path / "next").exists()


def test_a_damaged_part_is_refused_in_one_line_and_nothing_is_assembled_or_unpacked(tmp_path, capsys):
    _, manifest = _slot(tmp_path)
    second = manifest["archives"][1]
    path = tmp_path / "slot" / f"transfer-{second['transfer']:02d}" / second["name"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    status, err = _assemble_cli(tmp_path, capsys, tmp_path / "slot")
    expected = (
        f"{path}: damaged, its sha256 differs from grid-manifest.json's (part 2 of {len(manifest['archives'])}, "
        f"in transfer {second['transfer']}); copy that transfer again"
    )
    assert (status, err) == (2, expected + "\n")
    assert not (tmp_path / "set").exists()
    with pytest.raises(GridError) as refused:
        unpack(tmp_path / "slot", tmp_path / "next")
    assert str(refused.value) == expected and not (tmp_path / "next").exists()


def test_a_transfer_that_lost_its_manifest_still_gives_its_parts(tmp_path, capsys):
    root, _ = _slot(tmp_path)
    (tmp_path / "slot" / "transfer-02" / MANIFEST).unlink()
    status, err = _assemble_cli(tmp_path, capsys, tmp_path / "slot")
    assert (status, err) == (0, "")
    unpack(tmp_path / "set", tmp_path / "next")
    assert _files(tmp_path / "next")[LAST] == _files(root)[LAST]


def test_stage_and_assemble_show_their_usage(capsys):
    for command, required in (("stage", "--budget-mib BUDGET_MIB"), ("assemble", "--into INTO")):
        with pytest.raises(SystemExit) as done:
            main([command, "--help"])
        usage = " ".join(capsys.readouterr().out.split())
        assert done.value.code == 0 and f" {command} [-h] {required}" in usage


def test_transfers_of_two_slots_are_not_mixed(tmp_path, capsys):
    _slot(tmp_path)
    pack(_output(tmp_path / "other"), tmp_path / "slot2", piece_bytes=50_000, **LIMITS)
    mixed = tmp_path / "mixed"
    shutil.copytree(tmp_path / "slot" / "transfer-01", mixed / "transfer-01")
    shutil.copytree(tmp_path / "slot2" / "transfer-02", mixed / "transfer-02")
    status, err = _assemble_cli(tmp_path, capsys, mixed)
    assert status == 2 and err == (
        f"{mixed / 'transfer-02' / MANIFEST}: differs from {mixed / 'transfer-01' / MANIFEST}; "
        "give the transfers of one slot only\n"
    )


# ---------------------------------------------------------------- a cell over three slots, in parts

GRID = [sys.executable, "-m", "repro.grid"]
RECORD = ("runs", "locality_k5", "listops", "smoke", "seed0")
OUTBOUND = [
    "--archive-mib",
    "0.12",
    "--archive-files",
    "3",
    "--archive-transfers",
    "8",
    "--archive-transfer-mib",
    "0.5",
]
# what each process measures for itself: wall-clock times, the data-wait probe (sampled anew by each process that
# trains), the data cache found or built; and history.csv's sha256 in ``files``, whose elapsed_s column is one
MEASURED = {"wall_time_s", "train_time_s", "train_examples_per_s", "elapsed_s", "data_wait_share"}
MEASURED |= {"data_wait_sampled_steps"}


def _metrics(run_dir) -> dict:
    metrics = {k: v for k, v in read_json(run_dir / "metrics.json").items() if k not in MEASURED}
    metrics["data"].pop("cache_hit")
    metrics["files"].pop("history.csv")
    return metrics


def _history(run_dir):
    with (run_dir / "history.csv").open(newline="") as handle:
        return [{k: v for k, v in row.items() if k != "elapsed_s"} for row in csv.DictReader(handle)]


@pytest.mark.slow
def test_a_cell_carried_over_three_slots_in_parts_ends_with_the_uninterrupted_record(tmp_path, shared_cache):
    """Slots 1 and 2 are stopped (SIGTERM, as at a deadline) at steps 2 and 4 and pack the checkpoint into parts
    over several transfers, each copied back on its own; the next machine, a fresh folder, receives the parts in
    inbound calls (``stage``), assembles them and resumes; slot 3 ends the run. Its record equals one
    uninterrupted run's: metrics but wall-clock ones, predictions, history but elapsed_s."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "common: [" + ", ".join(["profile=smoke", *SHORT_LISTOPS_OVERRIDES, "+train.max_steps=6"]) + "]\n"
        "cells:\n  - {arms: [locality_k5], tasks: [listops], seeds: [0]}\n"
    )
    shared = [f"cache_dir={shared_cache}", f"data_dir={tmp_path / 'none'}", "task.source=generated"]

    def grid_command(machine, *args, pause=None):
        settings = [f"output_dir={machine / 'outputs'}", *shared, *([f"debug.pause_at_step={pause}"] if pause else [])]
        return [*GRID, str(grid), "--gpus", "0", *args, "--", *settings]

    reference = subprocess.run(
        grid_command(tmp_path / "reference"), capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert reference.returncode == 0, reference.stdout[-2000:]
    back = None  # the previous slot's transfers, as brought back
    for number, pause in ((1, 2), (2, 4), (3, None)):
        machine = tmp_path / f"machine{number}"
        resume = []
        if back is not None:
            staged = tmp_path / f"staged{number}"
            assert main(["stage", str(back), "--budget-mib", "0.45", "--checkout-mib", "0.2", "--to", str(staged)]) == 0
            assert len(_transfers(staged)) >= 2
            for folder in _transfers(staged):  # each inbound call on its own
                shutil.copytree(folder, machine / "in" / folder.name)
            assert main(["assemble", str(machine / "in"), "--into", str(machine / "set")]) == 0
            resume = ["--resume-from", str(machine / "set")]
        command = grid_command(machine, *resume, "--archive-to", str(machine / "slot"), *OUTBOUND, pause=pause)
        if pause is None:
            last = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
            assert last.returncode == 0, last.stdout[-2000:]
            assert "unpacked checkpoint runs/locality_k5/listops/smoke/seed0" in last.stdout
            break
        slot = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        log = machine / "outputs" / "grid_logs" / "locality_k5__listops__seed0.log"
        until = time.monotonic() + 300
        while not (log.exists() and f"paused after step {pause}" in log.read_text()) and time.monotonic() < until:
            time.sleep(0.5)
        slot.send_signal(signal.SIGTERM)
        output, _ = slot.communicate(timeout=300)
        assert slot.returncode == 128 + signal.SIGTERM, output[-2000:]
        manifest = json.loads((machine / "slot" / "transfer-01" / MANIFEST).read_text())
        last_pt = next(e for u in manifest["units"] for e in u["files"] if e["path"].endswith("last.pt"))
        assert len({p["archive"] for p in last_pt["pieces"]}) >= 3 and not manifest["left_out"]
        back = tmp_path / f"back{number}"
        for folder in _transfers(machine / "slot"):  # each transfer brought back by its own call
            assert len(list(folder.iterdir())) <= 3
            shutil.copytree(folder, back / folder.name)
    cell_log = (tmp_path / "machine3" / "outputs" / "grid_logs" / "locality_k5__listops__seed0.log").read_text()
    assert "from step 4" in cell_log
    carried, uninterrupted = (
        tmp_path.joinpath("machine3", "outputs", *RECORD),
        tmp_path.joinpath("reference", "outputs", *RECORD),
    )
    assert (carried / "predictions.csv").read_text() == (uninterrupted / "predictions.csv").read_text()
    assert _history(carried) == _history(uninterrupted)
    assert set(read_json(carried / "metrics.json")) == set(read_json(uninterrupted / "metrics.json"))
    ours = _metrics(carried)
    assert {"steps", "best_val_acc", "best_val_step", "test_acc", "test_loss", "test_acc_last"} <= set(ours)
    assert ours == _metrics(uninterrupted)
