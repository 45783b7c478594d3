"""Slot archives (repro/grid/archive.py, unpack.py): what is carried, the size limits, and unpacking safely."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import torch
from conftest import ROOT
from fake_records import make_record

from repro.grid.archive import MANIFEST, collect_units, pack
from repro.grid.cells import GridError
from repro.grid.unpack import merge_lines, unpack

UNFINISHED = "runs/lra_transformer/text/paper/seed1"


def _checkpoint(folder, step: int, elapsed_s: float, nbytes: int = 300_000, seed: int = 0) -> None:
    """A checkpoint in the runner's layout (state, random weights that do not compress) and its sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    weights = torch.from_numpy(np.random.default_rng(seed).standard_normal(nbytes // 4).astype(np.float32))
    for name in ("last.pt", "best.pt"):
        buffer = io.BytesIO()
        torch.save({"state": {"step": step, "examples": 8 * step, "elapsed_s": elapsed_s}, "model": weights}, buffer)
        (folder / name).write_bytes(buffer.getvalue())
        (folder / f"{name}.sha256").write_text(hashlib.sha256(buffer.getvalue()).hexdigest() + "\n")


def _output(root):
    """Two complete records (one with leftover checkpoints), one unfinished run, a grid log and a cell log."""
    labels = np.zeros(50, dtype=int)
    for seed in (0, 1):
        make_record(root / "runs", "lra_transformer", "listops", seed, profile="paper", labels=labels, accuracy=0.5)
    _checkpoint(root / "runs/lra_transformer/listops/paper/seed0/checkpoints", 100, 60.0)
    (root / UNFINISHED / "checkpoints").mkdir(parents=True)
    (root / UNFINISHED / "config.yaml").write_text("arm: lra_transformer\n")
    _checkpoint(root / UNFINISHED / "checkpoints", 40, 30.0, seed=1)
    (root / UNFINISHED / "checkpoints" / "last.prev.pt").write_bytes(b"older")
    (root / "grid_log.csv").write_text("lra_transformer,listops,0,0,10.0,2026-01-01T00:00:00Z,0\n")
    (root / "grid_logs").mkdir()
    (root / "grid_logs" / "lra_transformer__text__seed1.log").write_text("step 40\n")
    return root


def _files(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_records_checkpoints_and_logs_round_trip_within_the_limits(tmp_path):
    root = _output(tmp_path / "out")
    manifest = pack(root, tmp_path / "slot", max_files=6, max_mib=0.25, piece_bytes=100_000)
    names = sorted(p.name for p in (tmp_path / "slot").iterdir())
    assert len(names) <= 6 and MANIFEST in names
    for archive in manifest["archives"]:
        assert (tmp_path / "slot" / archive["name"]).stat().st_size == archive["bytes"] <= 0.25 * 2**20
    last = next(e for u in manifest["units"] for e in u["files"] if e["path"] == f"{UNFINISHED}/checkpoints/last.pt")
    assert len(last["pieces"]) >= 3 and len({p["archive"] for p in last["pieces"]}) >= 2  # cut, across archives
    assert not manifest["left_out"]
    unpack(tmp_path / "slot", tmp_path / "next")
    carried, original = _files(tmp_path / "next"), _files(root)
    expected = {path for path in original if "/checkpoints/" not in path or path.startswith(UNFINISHED)}
    expected -= {f"{UNFINISHED}/checkpoints/last.prev.pt"}
    assert set(carried) == expected
    assert all(carried[path] == original[path] for path in carried)


def test_the_archives_are_plain_tar_gz(tmp_path):
    pack(_output(tmp_path / "out"), tmp_path / "slot", max_files=8, max_mib=16)
    with tarfile.open(tmp_path / "slot" / "grid-01.tar.gz", "r:gz") as tar:
        members = tar.getnames()
    assert "runs/lra_transformer/listops/paper/seed0/metrics.json" in members
    assert f"{UNFINISHED}/checkpoints/last.pt" in members
    if shutil.which("tar"):
        listed = subprocess.run(
            ["tar", "-tzf", str(tmp_path / "slot" / "grid-01.tar.gz")], capture_output=True, text=True
        )
        assert listed.returncode == 0 and sorted(listed.stdout.split()) == sorted(members)


def test_priority_records_then_the_log_then_the_most_trained_checkpoint_then_logs(tmp_path):
    root = _output(tmp_path / "out")
    _checkpoint(root / "runs/lra_transformer/image/paper/seed2/checkpoints", 400, 90.0, seed=2)
    (root / "runs/lra_transformer/image/paper/seed2/config.yaml").write_text("arm: lra_transformer\n")
    units = collect_units(root)
    assert [u.kind for u in units] == ["record", "record", "log", "checkpoint", "checkpoint", "log"]
    assert [u.folder for u in units if u.kind == "checkpoint"] == ["runs/lra_transformer/image/paper/seed2", UNFINISHED]


def test_what_does_not_fit_is_left_out_whole_and_named(tmp_path, capsys):
    from repro.grid.driver import archive

    root = _output(tmp_path / "out")
    assert archive(root, tmp_path / "slot", 2, 0.2) is False  # one archive of 0.2 MiB: no room for 0.6 MB of weights
    manifest = json.loads((tmp_path / "slot" / MANIFEST).read_text())
    carried = [
        root / UNFINISHED / "config.yaml",
        *[p for p in (root / UNFINISHED / "checkpoints").glob("*") if p.name != "last.prev.pt"],
    ]
    assert manifest["left_out"] == [
        {"unit": f"checkpoint {UNFINISHED}", "kind": "checkpoint", "bytes": sum(p.stat().st_size for p in carried)}
    ]
    assert f"left out (no room in 1 archives of 0.2 MiB): checkpoint {UNFINISHED}" in capsys.readouterr().err
    assert [u["kind"] for u in manifest["units"]] == ["record", "record", "log", "log"]  # nothing of it half packed
    pieces = [p["member"] for u in manifest["units"] for e in u["files"] for p in e["pieces"]]
    with tarfile.open(tmp_path / "slot" / "grid-01.tar.gz", "r:gz") as tar:
        assert tar.getnames() == pieces


def test_a_unit_that_opened_archives_before_it_ran_out_of_room_leaves_none_behind(tmp_path):
    # one 0.5 MB checkpoint cut in 0.1 MB pieces: three more archives of 0.15 MiB open, then no room
    root = _output(tmp_path / "out")
    manifest = pack(root, tmp_path / "slot", max_files=4, max_mib=0.15, piece_bytes=100_000)
    assert [u["unit"] for u in manifest["left_out"]] == [f"checkpoint {UNFINISHED}"]
    names = {p["archive"] for u in manifest["units"] for e in u["files"] for p in e["pieces"]}
    assert sorted(a["name"] for a in manifest["archives"]) == sorted(names)  # no archive of the left-out unit
    unpack(tmp_path / "slot", tmp_path / "next")
    assert not (tmp_path / "next" / UNFINISHED).exists()


def test_a_changed_archive_is_refused(tmp_path):
    pack(_output(tmp_path / "out"), tmp_path / "slot")
    path = tmp_path / "slot" / "grid-01.tar.gz"
    path.write_bytes(path.read_bytes()[:-10] + b"0" * 10)
    with pytest.raises(GridError, match="grid-01.tar.gz: damaged, its sha256 differs"):
        unpack(tmp_path / "slot", tmp_path / "next")
    assert not (tmp_path / "next").exists()


def test_a_different_complete_record_here_stops_the_unpacking_before_anything_is_written(tmp_path):
    pack(_output(tmp_path / "out"), tmp_path / "slot")
    make_record(
        tmp_path / "next" / "runs",
        "lra_transformer",
        "listops",
        1,
        profile="paper",
        labels=np.zeros(50, dtype=int),
        accuracy=0.9,
    )
    with pytest.raises(GridError, match="listops/paper/seed1/.*a complete record here differs from the archive's"):
        unpack(tmp_path / "slot", tmp_path / "next")
    assert not (tmp_path / "next" / "grid_log.csv").exists()
    assert not (tmp_path / "next" / "runs/lra_transformer/listops/paper/seed0").exists()


def test_a_checkpoint_replaces_only_a_less_trained_one_and_never_a_complete_record(tmp_path):
    pack(_output(tmp_path / "out"), tmp_path / "slot")
    here = tmp_path / "next" / UNFINISHED / "checkpoints"
    _checkpoint(here, 50, 35.0, seed=3)  # more steps than the archive's 40
    assert f"skipped checkpoint {UNFINISHED}: the checkpoint here has trained 50 steps" in "\n".join(
        unpack(tmp_path / "slot", tmp_path / "next")
    )
    _checkpoint(here, 10, 5.0, seed=4)
    (here / "last.prev.pt").write_bytes(b"of the older lineage")
    assert f"unpacked checkpoint {UNFINISHED}" in unpack(tmp_path / "slot", tmp_path / "next")
    assert (here / "last.pt").read_bytes() == (tmp_path / "out" / UNFINISHED / "checkpoints" / "last.pt").read_bytes()
    assert not (here / "last.prev.pt").exists()
    make_record(
        tmp_path / "next" / "runs",
        "lra_transformer",
        "text",
        1,
        profile="paper",
        labels=np.zeros(5, dtype=int),
        accuracy=1.0,
    )
    lines = unpack(tmp_path / "slot", tmp_path / "next")
    assert f"skipped checkpoint {UNFINISHED}: its record is complete here" in lines


def test_unpacking_twice_changes_nothing(tmp_path):
    pack(_output(tmp_path / "out"), tmp_path / "slot")
    unpack(tmp_path / "slot", tmp_path / "next")
    first = _files(tmp_path / "next")
    lines = unpack(tmp_path / "slot", tmp_path / "next")
    assert _files(tmp_path / "next") == first
    assert sum(line.startswith("skipped record") for line in lines) == 2


@pytest.mark.parametrize(
    "local, incoming, merged",
    [
        ("", "a\nb\n", "a\nb\n"),
        ("a\n", "a\nb\n", "a\nb\n"),  # the archive's copy continues the local one
        ("a\nb\nc\n", "a\nb\n", "a\nb\nc\n"),  # the local copy is ahead
        ("a\nx\n", "a\ny\n", "a\nx\ny\n"),  # both went on: local lines, then the archive's new ones
    ],
)
def test_append_only_files_merge(local, incoming, merged):
    assert merge_lines(local, incoming) == merged


def test_the_unpack_command_puts_a_slot_into_a_folder(tmp_path):
    root = _output(tmp_path / "out")
    pack(root, tmp_path / "slot")
    done = subprocess.run(
        [sys.executable, "-m", "repro.grid", "unpack", str(tmp_path / "slot"), "--into", str(tmp_path / "home")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"[grid] unpacked checkpoint {UNFINISHED}" in done.stdout
    assert (tmp_path / "home" / "runs/lra_transformer/listops/paper/seed1/metrics.json").read_bytes() == (
        root / "runs/lra_transformer/listops/paper/seed1/metrics.json"
    ).read_bytes()
