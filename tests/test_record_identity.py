"""Records that cannot be mixed up: a run folder has one owner, a checkpoint one run, a cache entry the bytes
it was built from; one definition of a complete record; a resumed history equal to an uninterrupted one.

Each ``test_class_*`` is parametrised over the cases of one kind of mix-up; each case fails on the code
before these guarantees existed (a second run trained in a held folder, a foreign checkpoint was resumed,
a changed file was scored with its old labels, a bad record was frozen or aborted the freeze, a
checkpoint added a history row)."""

from __future__ import annotations

import csv
import io
import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import composed, read_json, run_cli

from repro import bundle

SHORT_TREES = ["task.max_len=300", "task.generate.min_len=50", "task.generate.max_len=300"]


def common(root: Path, cache: Path) -> list[str]:
    return [
        f"output_dir={root / 'out'}",
        f"cache_dir={cache}",
        f"data_dir={root / 'no_data'}",
        "task.source=generated",
        "progress=false",
    ]


def folder_of(root: Path, arm: str, seed: int = 0) -> Path:
    return root / "out" / "runs" / arm / "listops" / "smoke" / f"seed{seed}"


def smoke(arm: str = "locality_k5", *extra: str) -> list[str]:
    return [f"arm={arm}", "task=listops", "profile=smoke", *SHORT_TREES, *extra]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


# ---------------------------------------------------------------- class 1: one owner per run folder


def _concurrent_run_on_one_folder(tmp_path: Path, cache: Path) -> None:
    """A second run on a folder a live run holds is refused in one line naming the holder; the first run's
    record equals a solo run's."""
    solo, shared = tmp_path / "solo", tmp_path / "shared"
    assert run_cli(*smoke(), *common(solo, cache)).returncode == 0
    first = subprocess.Popen(
        [sys.executable, "experiments/run.py", *smoke(), *common(shared, cache), "debug.pause_at_step=4"],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        for line in first.stdout:
            if line.startswith("paused after step 4"):
                break
        second = run_cli(*smoke("locality_k5", "++train.lr=0.003"), *common(shared, cache))
        assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
        folder = folder_of(shared, "locality_k5")
        assert error_lines(second.stderr) == [
            f"error: {folder} is in use by pid {first.pid} on host {socket.gethostname()}: a run folder is written "
            "by one run at a time; wait for that run to end (or stop it), or pass output_dir=<another folder>"
        ]
        first.send_signal(signal.SIGTERM)  # the first run checkpoints and stops; its rerun continues it
        first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 128 + signal.SIGTERM
    assert run_cli(*smoke(), *common(shared, cache)).returncode == 0
    a, b = (read_json(folder_of(root, "locality_k5") / "metrics.json") for root in (solo, shared))
    for key in ("best_val_acc", "best_val_step", "test_acc", "test_loss", "steps", "fingerprint"):
        assert a[key] == b[key], key
    assert a["train_settings"]["lr"] == 0.001 == b["train_settings"]["lr"]
    for name in ("predictions.csv",):
        assert (folder_of(solo, "locality_k5") / name).read_text() == (
            folder_of(shared, "locality_k5") / name
        ).read_text()


def _process_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # a zombie has ended; only its exit status is left


def _grid_cell_dies_with_its_driver(tmp_path: Path, cache: Path) -> None:
    """A grid cell ends when its driver is killed (SIGKILL), so a restarted grid cannot train it twice."""
    pid_file = tmp_path / "cell.pid"
    cell = [
        sys.executable,
        "-c",
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)",
    ]
    driver_code = (
        "from repro.grid.schedule import Job, Scheduler\n"
        f"Scheduler([None], poll_s=0.05).run([Job('cell', 'cell', {cell!r})])\n"
    )
    driver = subprocess.Popen([sys.executable, "-c", driver_code], env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        for _ in range(600):  # the cell writes its pid once started (at most 60 s)
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.1)
        cell_pid = int(pid_file.read_text())
        driver.kill()
        driver.wait()
        for _ in range(100):  # the kernel signals the cell as its parent dies; allow it 10 s to go
            if _process_gone(cell_pid):
                break
            time.sleep(0.1)
        gone = _process_gone(cell_pid)
        if not gone:
            os.kill(cell_pid, signal.SIGKILL)
        assert gone, "the cell outlived its killed driver"
    finally:
        if driver.poll() is None:
            driver.kill()


@pytest.mark.parametrize("case", ["concurrent run on one folder", "grid cell of a killed driver"])
def test_class_1_a_run_folder_has_one_owner(case, tmp_path, shared_cache, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    {"concurrent run on one folder": _concurrent_run_on_one_folder,
     "grid cell of a killed driver": _grid_cell_dies_with_its_driver}[case](tmp_path, shared_cache)  # fmt: skip


# ---------------------------------------------------------------- class 2: a checkpoint belongs to one run


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (the lock file aside) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
            and p.name != "run.lock"}  # fmt: skip


@pytest.mark.parametrize(
    "case", ["another arm", "another seed", "another lr, config.yaml deleted", "config.yaml model block edited"]
)
def test_class_2_a_foreign_checkpoint_is_refused_in_one_line(case, tmp_path, shared_cache):
    args = common(tmp_path, shared_cache)
    if case == "another arm":  # same parameter shapes: lra_sparse's last.pt in lra_transformer's folder
        for arm in ("lra_transformer", "lra_sparse"):
            assert run_cli(*smoke(arm, "debug.sigterm_at_step=8"), *args).returncode == 143
        mine, theirs = folder_of(tmp_path, "lra_transformer"), folder_of(tmp_path, "lra_sparse")
        shutil.rmtree(mine / "checkpoints")
        shutil.copytree(theirs / "checkpoints", mine / "checkpoints")
        before = _snapshot(mine)
        done = run_cli(*smoke("lra_transformer"), *args)
    elif case == "another seed":  # seed 0's folder, config.yaml and checkpoints, copied as seed 1's
        assert run_cli(*smoke("locality_k5", "debug.sigterm_at_step=8"), *args).returncode == 143
        mine, theirs = folder_of(tmp_path, "locality_k5", seed=1), folder_of(tmp_path, "locality_k5")
        shutil.copytree(theirs, mine)
        before = _snapshot(mine)
        done = run_cli(*smoke("locality_k5", "seed=1"), *args)
    elif case == "another lr, config.yaml deleted":  # an interrupted run, rerun with another learning rate
        assert run_cli(*smoke("locality_k5", "debug.sigterm_at_step=8"), *args).returncode == 143
        mine = theirs = folder_of(tmp_path, "locality_k5")
        (mine / "config.yaml").unlink()
        before = _snapshot(mine)
        done = run_cli(*smoke("locality_k5", "++train.lr=0.003"), *args)
    else:  # a complete record whose config.yaml model block was edited by hand
        assert run_cli(*smoke("locality_k5"), *args).returncode == 0
        mine = theirs = folder_of(tmp_path, "locality_k5")
        _edit_model_block(mine)
        before = _snapshot(mine)
        done = run_cli(*smoke("locality_k5"), *args)
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
        assert done.stderr.strip().splitlines() == [  # the refusal alone: no warning about rewriting the record
            f"error: {mine} holds a run with other settings (model.kernel_size: 7 -> 5); its record and checkpoints "
            "belong to those. Pass output_dir=<another folder> to keep both, or force=true to start this run over "
            "in its place"
        ]
        assert _snapshot(mine) == before
        return
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert not (mine / "metrics.json").exists() and "resuming" not in done.stdout
    lines = error_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert _snapshot(mine) == before  # a refused run leaves the folder as it found it: config.yaml, log.txt
    if case == "another lr, config.yaml deleted":
        assert lines[0] == (
            f"error: {mine} holds checkpoints or a record but no config.yaml: whose run they are is unknown, so "
            "they are not continued; pass force=true to start this run over in its place, or "
            "output_dir=<another folder>"
        )
        return
    theirs_fp = read_json_yaml(theirs / "config.yaml")["fingerprint"]
    mine_arm, mine_seed = ("lra_transformer", 0) if case == "another arm" else ("locality_k5", 1)
    assert lines[0].startswith(f"error: {mine / 'checkpoints' / 'last.pt'} is another run's checkpoint (")
    assert f"({theirs_fp['arm']}/listops/smoke/seed{theirs_fp['seed']}, settings {theirs_fp['settings']}" in lines[0]
    assert f"not this run's ({mine_arm}/listops/smoke/seed{mine_seed}, settings " in lines[0]
    assert lines[0].endswith("delete the folder's checkpoints/ or pass force=true to train this run from step 0, or "
                             "output_dir=<another folder>")  # fmt: skip


def test_class_2_force_true_trains_this_run_in_place_of_a_foreign_checkpoint(tmp_path, shared_cache):
    """The refusal's advice holds: with force=true, seed 1 trains from step 0 where seed 0's checkpoint was,
    and its record equals a seed-1 run's in a folder of its own."""
    args = common(tmp_path, shared_cache)
    assert run_cli(*smoke("locality_k5", "debug.sigterm_at_step=8"), *args).returncode == 143
    mine, theirs = folder_of(tmp_path, "locality_k5", seed=1), folder_of(tmp_path, "locality_k5")
    shutil.copytree(theirs, mine)
    done = run_cli(*smoke("locality_k5", "seed=1", "force=true"), *args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        f"[locality_k5/listops] force=true: starting over in {mine} (its checkpoints are not this run's to continue)"
    ) in done.stdout and "resuming" not in done.stdout
    solo = tmp_path / "solo"
    assert run_cli(*smoke("locality_k5", "seed=1"), *common(solo, shared_cache)).returncode == 0
    alone = folder_of(solo, "locality_k5", seed=1)
    ours, theirs_alone = read_json(mine / "metrics.json"), read_json(alone / "metrics.json")
    assert ours["fingerprint"] == theirs_alone["fingerprint"] and ours["fingerprint"]["seed"] == 1
    assert (ours["steps"], ours["test_acc"]) == (theirs_alone["steps"], theirs_alone["test_acc"])
    assert (mine / "predictions.csv").read_bytes() == (alone / "predictions.csv").read_bytes()


@pytest.mark.parametrize("wrote_weights", [False, True])
def test_class_8_a_first_start_stopped_by_the_machine_keeps_its_files_once_it_wrote_weights(
    wrote_weights, tmp_path, shared_cache, monkeypatch
):
    """A full disk before any checkpoint: the first start leaves nothing. After ``best.pt`` was written (at a
    validation, before the first ``last.pt``), config.yaml and log.txt stay, naming whose weights they are."""
    import errno

    from repro.run import runner

    def stopped(model, task, settings, seed, run_dir, device, **kwargs):
        if wrote_weights:
            (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
            (run_dir / "checkpoints" / "best.pt").write_bytes(b"weights")
        raise OSError(errno.ENOSPC, "No space left on device", str(run_dir / "checkpoints" / "last.pt"))

    monkeypatch.setattr(runner, "train", stopped)
    assert runner.execute(composed(*smoke(), *common(tmp_path, shared_cache))) == 2
    folder = folder_of(tmp_path, "locality_k5")
    left = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != "run.lock")
    assert left == (["checkpoints/best.pt", "config.yaml", "log.txt"] if wrote_weights else [])


def read_json_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


# ---------------------------------------------------------------- class 3: data identity by content


def _listops(root: Path):
    from test_listops import write_official

    from repro.tasks import listops

    def write(label: int):  # [SM 4 7] is 1, [SM 4 8] is 2: the same size, other bytes
        folder = root / "listops-1000"
        shutil.rmtree(folder, ignore_errors=True)
        row = "( ( ( [MAX 2 ) 9 ) ] )\t9"
        write_official(
            folder, {"train": [row] * 3, "val": [row], "test": [f"( ( [SM 4 ) {label + 6} ] )\t{label}"] * 2}
        )

    cfg = {"name": "listops", "source": "official", "official_subdir": "listops-1000", "max_len": 50}
    return write, lambda cache: listops.build(cfg, root, cache), (1, 2)


def _text(root: Path):
    from test_text import cfg, make_acl

    from repro.tasks import text

    def write(version: int):
        shutil.rmtree(root / "aclImdb", ignore_errors=True)
        make_acl(root)
        if version:  # the test reviews' labels swapped: the positive review filed as negative and back
            test = root / "aclImdb" / "test"
            os.replace(test / "pos", test / "tmp")
            os.replace(test / "neg", test / "pos")
            os.replace(test / "tmp", test / "neg")

    return write, lambda cache: text.build(cfg(), root, cache), (0, 1)


def _image(root: Path):
    from test_image import cfg, make_official

    from repro.tasks import image

    def write(version: int):
        shutil.rmtree(root / "cifar-10-batches-py", ignore_errors=True)
        make_official(root)
        if version:  # every test label moved to the next class
            path = root / "cifar-10-batches-py" / "test_batch"
            batch = pickle.loads(path.read_bytes())
            key = b"labels" if b"labels" in batch else "labels"
            batch[key] = [(v + 1) % 10 for v in batch[key]]
            path.write_bytes(pickle.dumps(batch, protocol=2))

    return write, lambda cache: image.build(cfg(), root, cache), (0, 1)


def _pathfinder(root: Path):
    from test_pathfinder import official_cfg, write_fixture

    from repro.tasks import pathfinder

    def write(version: int):
        shutil.rmtree(root / "pathfinder32", ignore_errors=True)
        write_fixture(root, "hard", 20)
        if version:  # every label flipped in the metadata
            for meta in (root / "pathfinder32" / "curv_contour_length_14" / "metadata").iterdir():
                rows = [line.split(" ") for line in meta.read_text().splitlines()]
                meta.write_text("".join(" ".join([*r[:3], str(1 - int(r[3])), *r[4:]]) + "\n" for r in rows))

    return write, lambda cache: pathfinder.build(official_cfg(), root, cache, workers=1), (0, 1)


@pytest.mark.parametrize("reader", ["listops", "text", "image", "pathfinder"])
def test_class_3_a_changed_data_file_is_read_again(reader, tmp_path):
    write, build, (before, after) = {"listops": _listops, "text": _text, "image": _image,
                                     "pathfinder": _pathfinder}[reader](tmp_path / "data")  # fmt: skip
    cache = tmp_path / "cache"
    write(before)
    first = build(cache)
    first_labels, first_inputs = np.array(first.test.labels), np.array(first.test.inputs)
    write(after)
    second = build(cache)
    write(after)  # the same contents written again (a new modification time): the same entry
    third = build(cache)
    fresh = build(tmp_path / "fresh_cache")  # what the changed files hold, read without a cache
    changed = not np.array_equal(first_labels, fresh.test.labels) or not np.array_equal(first_inputs, fresh.test.inputs)
    assert changed  # the fixture's change reaches the test split
    np.testing.assert_array_equal(second.test.labels, fresh.test.labels)
    np.testing.assert_array_equal(second.test.inputs, fresh.test.inputs)
    cache_hit = (
        (lambda task: task.info["per_difficulty"]["hard"]["cache_hit"])
        if reader == "pathfinder"
        else (lambda task: task.info["cache_hit"])
    )
    assert (cache_hit(first), cache_hit(second), cache_hit(third)) == (False, False, True)


def test_a_record_holds_the_digest_of_each_split(tmp_path, shared_cache):
    """metrics.json's data_digests are the sha256 of each split's inputs and labels the run saw."""
    from repro import records
    from repro.tasks import listops

    assert run_cli(*smoke(), *common(tmp_path, shared_cache)).returncode == 0
    folder = folder_of(tmp_path, "locality_k5")
    metrics = read_json(folder / "metrics.json")
    config = read_json_yaml(folder / "config.yaml")
    task = listops.build(config["task"], tmp_path / "no_data", shared_cache)
    subset = {name: len(split) for name, split in task.splits().items()} == metrics["data"]["subset"]
    assert subset  # the smoke profile takes every generated example here, so the digests are the task's
    assert metrics["data_digests"] == records.split_digests({n: (s.inputs, s.labels) for n, s in task.splits().items()})
    assert (
        metrics["fingerprint"] == config["fingerprint"]
        and metrics["fingerprint"]["data"] == records.digest_json(metrics["data_digests"])[:16]
    )


# ---------------------------------------------------------------- class 4: one definition of a complete record


@pytest.fixture(scope="module")
def one_record(tmp_path_factory) -> Path:
    """A complete smoke record, written by the runner."""
    root = tmp_path_factory.mktemp("record")
    done = run_cli(*smoke(), *common(root, root / "cache"))
    assert done.returncode == 0, done.stderr[-3000:]
    return folder_of(root, "locality_k5")


def _edit_model_block(folder: Path) -> None:
    config = read_json_yaml(folder / "config.yaml")
    config["model"]["kernel_size"] = 7
    (folder / "config.yaml").write_text(yaml.safe_dump(config))


def _empty_history(folder: Path) -> None:
    (folder / "history.csv").write_text("step,epoch,lr,train_loss,val_loss,val_acc,elapsed_s\n")


FREEZE_CASES = {
    "config.yaml model block edited": (
        _edit_model_block,
        "inconsistent: config.yaml changed after the run wrote it (sha256 differs from metrics.json's files)",
    ),
    "history.csv emptied": (
        _empty_history,
        "incomplete: history.csv holds no row",
    ),
    "metrics.json a JSON list": (
        lambda folder: (folder / "metrics.json").write_text("[1, 2]\n"),
        "unreadable metrics.json: a JSON list, not an object",
    ),
    "metrics.json not UTF-8": (
        lambda folder: (folder / "metrics.json").write_bytes(b'{"status": "complete\xff"}'),
        "unreadable metrics.json: not UTF-8 (invalid start byte at byte 20)",
    ),
    "predictions.csv not UTF-8": (
        lambda folder: (folder / "predictions.csv").write_bytes(b"index,prediction,label\n0,\xff,1\n"),
        "unreadable predictions.csv: 'utf-8' codec can't decode byte 0xff in position 25: invalid start byte",
    ),
}


def _copy_runs(record: Path, root: Path, seeds=(0, 1)) -> list[Path]:
    """The record as seed 0 and seed 1 of one runs root (seed 1's metrics and config renamed to match)."""
    folders = []
    for seed in seeds:
        folder = root / "locality_k5" / "listops" / "smoke" / f"seed{seed}"
        shutil.copytree(record, folder, ignore=shutil.ignore_patterns("checkpoints", "run.lock", "progress.json"))
        if seed:
            metrics = read_json(folder / "metrics.json")
            metrics["seed"] = seed
            (folder / "metrics.json").write_text(json.dumps(metrics))
        folders.append(folder)
    return folders


@pytest.mark.parametrize(
    "case", [*FREEZE_CASES, "record without predictions.csv", "symlink out of the bundle", "--strict", "test sets"]
)
def test_class_4_one_definition_of_a_complete_record(case, one_record, tmp_path, capsys):
    runs = tmp_path / "runs"
    good, bad = _copy_runs(one_record, runs)
    results = tmp_path / "results"
    if case in FREEZE_CASES:  # freeze names the bad record, leaves it out, and freezes the good one
        damage, reason = FREEZE_CASES[case]
        damage(bad)
        frozen = bundle.freeze("v1", runs, results, analysis=False, log=lambda *a, **k: None)
        manifest = bundle.load_manifest(frozen)
        assert [r["path"] for r in manifest["runs"]] == ["runs/locality_k5/listops/smoke/seed0"]
        assert manifest["left_out"] == [{"path": "locality_k5/listops/smoke/seed1", "reason": reason}]
        assert bundle.verify(frozen) == []
    elif case == "record without predictions.csv":  # the runner writes it again instead of skipping it
        out = tmp_path / "rerun"
        folder = out / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed0"
        shutil.copytree(one_record.parents[4], out / "out", dirs_exist_ok=True)
        expected = (folder / "predictions.csv").read_text()
        (folder / "predictions.csv").unlink()
        done = run_cli(*smoke(), *common(out, one_record.parents[4].parent / "cache"))
        assert done.returncode == 0 and "record complete" not in done.stdout, done.stdout + done.stderr
        assert (folder / "predictions.csv").read_text() == expected
        assert bundle.records.record_problem(folder) == (read_json(folder / "metrics.json"), None)
    elif case == "symlink out of the bundle":  # verify refuses a record file that is a symlink out of it
        frozen = bundle.freeze("v1", runs, results, analysis=False, log=lambda *a, **k: None)
        history = frozen / "runs" / "locality_k5" / "listops" / "smoke" / "seed1" / "history.csv"
        outside = tmp_path / "outside.csv"
        shutil.copyfile(history, outside)
        history.unlink()
        history.symlink_to(outside)
        problems = bundle.verify(frozen)
        assert "a symlink: runs/locality_k5/listops/smoke/seed1/history.csv" in problems
        assert bundle.main(["verify", str(frozen)]) == 2
    elif case == "--strict":  # --strict refuses a bundle with a bad record, naming it
        _empty_history(bad)
        with pytest.raises(bundle.BundleError) as err:
            bundle.freeze("v1", runs, results, analysis=False, log=lambda *a, **k: None, strict=True)
        assert str(err.value) == (
            "--strict: 1 record not complete: locality_k5/listops/smoke/seed1: incomplete: history.csv holds no row "
            "(rerun or remove them, or freeze without --strict to leave them out)"
        )
        assert not results.exists() or not list(results.iterdir())
    else:  # two records of one task that saw different test sets are refused
        metrics = read_json(bad / "metrics.json")
        metrics["data_digests"]["test"]["labels"] = "0" * 64
        (bad / "metrics.json").write_text(json.dumps(metrics))
        with pytest.raises(bundle.BundleError) as err:
            bundle.freeze("v1", runs, results, analysis=False, log=lambda *a, **k: None)
        good_digest = bundle.records.digest_json(read_json(good / "metrics.json")["data_digests"]["test"])[:16]
        odd_digest = bundle.records.digest_json(metrics["data_digests"]["test"])[:16]
        sides = sorted([(good_digest, "seed0"), (odd_digest, "seed1")])
        listed = "; ".join(f"{d}: runs/locality_k5/listops/smoke/{s}" for d, s in sides)
        assert str(err.value) == (
            f"listops (smoke) records saw 2 different test sets ({listed}): an arm compared on a task must see its "
            "test set; freeze the records of each test set apart, or rerun the odd ones on the others' data"
        )
        assert not results.exists() or not list(results.iterdir())


# ---------------------------------------------------------------- class 5: history equal after resume


class StepClock:
    """A fake run clock (``repro.training.clock.clock``) that moves half a second with each training step and
    stands still otherwise, so a run's ``elapsed_s`` is a function of its steps, resumed or not."""

    def __init__(self, monkeypatch):
        from repro.training import clock, step

        self.now = 1000.0
        train_step = step.TrainStep.__call__

        def timed_step(*args, **kwargs):
            self.now += 0.5
            return train_step(*args, **kwargs)

        monkeypatch.setattr(clock, "clock", lambda: self.now)
        monkeypatch.setattr(step.TrainStep, "__call__", timed_step)


HISTORY_CASES = {  # the settings of both runs; the step after which the second is stopped and resumed (None: never)
    "stop off a logging step": ([], 13),  # logged every 8 steps
    "time-based checkpoints and a stop": (["++train.checkpoint_every_seconds=1.5"], 13),  # one every 3 steps
    "time-based evaluation and a stop": (["++train.eval_every_seconds=2.5"], 13),  # validated every 5 steps
}


@pytest.mark.parametrize("case", list(HISTORY_CASES))
def test_class_5_history_after_resume_equals_the_uninterrupted_one(case, tmp_path, shared_cache, monkeypatch):
    """history.csv byte for byte, its elapsed_s column included (on a fake clock: the real one differs between
    any two runs), and the metrics the record is read for."""
    from repro.run.runner import execute

    StepClock(monkeypatch)
    settings, stop_at = HISTORY_CASES[case]
    whole, other = tmp_path / "whole", tmp_path / "other"
    assert execute(composed(*smoke(), *common(whole, shared_cache), *settings)) == 0
    if stop_at is not None:
        stopped = composed(*smoke(), *common(other, shared_cache), *settings, f"debug.sigterm_at_step={stop_at}")
        assert execute(stopped) == 128 + signal.SIGTERM
    assert execute(composed(*smoke(), *common(other, shared_cache), *settings)) == 0
    a, b = ((folder_of(root, "locality_k5") / "history.csv").read_text() for root in (whole, other))
    assert a == b
    rows = list(csv.DictReader(io.StringIO(a)))
    assert rows[-1]["step"] == "32" and rows[-1]["elapsed_s"] == "16.0"  # 32 steps of half a second
    if "evaluation" in case:  # validated every 5 steps and at the epochs' ends, across the resume too
        validated = [int(row["step"]) for row in rows if row["val_acc"]]
        assert validated == [5, 10, 15, 16, 21, 26, 31, 32]
    ma, mb = (read_json(folder_of(root, "locality_k5") / "metrics.json") for root in (whole, other))
    for key in ("test_acc", "test_loss", "best_val_step", "elapsed_s", "fingerprint"):
        assert ma[key] == mb[key], key


# ---------------------------------------------------------------- class 8: nothing left behind


def _refused_run(tmp_path: Path, cache: Path) -> None:
    """A run refused once its data is built (a batch larger than the training set) writes nothing."""
    done = run_cli(*smoke("locality_k5", "++train.batch_size=1000"), *common(tmp_path, cache))
    assert done.returncode == 2
    assert error_lines(done.stderr) == ["error: train.batch_size=1000 exceeds the 128 training examples"]
    assert not (tmp_path / "out").exists()


def _killed_freeze(tmp_path: Path, cache: Path) -> None:
    """The staging folder a killed freeze left under results/ is removed by the next freeze."""
    from fake_records import fixed_labels, make_record

    results = tmp_path / "results"
    stale = results / ".v0.partial-k1ll3d"
    (stale / "runs").mkdir(parents=True)
    make_record(tmp_path / "runs", "lra_transformer", "text", 0, labels=fixed_labels("text", 8), accuracy=0.5)
    bundle.freeze("v1", tmp_path / "runs", results, analysis=False, log=lambda *a, **k: None)
    assert sorted(p.name for p in results.iterdir()) == ["v1"]


def _killed_cache_build(tmp_path: Path, cache: Path) -> None:
    """The temporary folder a killed cache build left beside its entry is removed by the next build of it."""
    from repro.tasks.cache import cache_key, cached_arrays

    entry = tmp_path / "cache" / "toy" / cache_key({"n": 3})
    stale = entry.parent / f".{entry.name}.0123456789ab"
    stale.mkdir(parents=True)
    (stale / "x.npy").write_bytes(b"half")
    arrays, meta = cached_arrays(tmp_path / "cache", "toy", {"n": 3}, lambda: ({"x": np.arange(3)}, {}))
    assert meta["cache_hit"] is False and arrays["x"].tolist() == [0, 1, 2]
    assert sorted(p.name for p in entry.parent.iterdir() if p.is_dir()) == [entry.name]


def _unknown_precision(tmp_path: Path, cache: Path) -> None:
    """A precision the loop does not know is refused, not trained as bf16."""
    done = run_cli(*smoke("locality_k5", "++train.precision=fp16"), *common(tmp_path, cache))
    assert done.returncode == 2
    assert error_lines(done.stderr) == [
        "error: train.precision='fp16': use bf16 or fp32 (the autocast dtype on CUDA; CPU runs are float32)"
    ]
    assert not (tmp_path / "out").exists()


ARM_HEAD = "# @package arm\ndefaults:\n  - /base/locality@_here_\n  - _self_\nname: mine\n"


def own_arm(root: Path, body: str) -> Path:
    """``<root>/my_conf/arm/mine.yaml``: an arm of one's own on the locality base, for ``--config-dir``."""
    path = root / "my_conf" / "arm" / "mine.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(body)
    return path


def run_script(*args: str) -> subprocess.CompletedProcess:
    """``python <args>`` from the checkout (``-m repro.bundle ...``, ``experiments/run.py ...``)."""
    return subprocess.run(
        [sys.executable, *args], cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300
    )


def _misspelt_arm_model_key(tmp_path: Path, cache: Path, block: str, where: str, close: str) -> None:
    """A model key of an arm file of one's own that no model setting has is refused, not left unread."""
    path = own_arm(tmp_path, ARM_HEAD + block)
    done = run_script("experiments/run.py", "--config-dir", str(path.parents[1]), "arm=mine", *smoke()[1:],
                      *common(tmp_path, cache))  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    from repro.cli import block_keys
    from repro.run.settings import CONF_DIR

    known = ", ".join(sorted(block_keys([CONF_DIR])["model"]))
    key = where.rsplit(".", 1)[1]
    assert done.stderr.splitlines() == [
        f"experiments/run.py: error: {path}: {where}: no model setting {key!r}; did you mean {close}? correct the "
        f"key in that file (the model settings: {known})"
    ]
    assert not (tmp_path / "out").exists()


STANDALONE_ARMS = {  # an arm of one's own with no base (a new backbone's), lacking what every arm names
    "no tasks block": (
        "model: {backbone: conv, d_model: 16, d_hidden: 16, kernel_size: 3, depth: 1}\n"
        "train: {lr: 0.001, weight_decay: 0.0, batch_size: 8, epochs: 1}\n",
        "error: arm 'solo' defines no settings for task 'listops'; it defines: none (each task an arm runs has a "
        "tasks.<task> block, {} at least)",
    ),
    "no train.weight_decay": (
        "model: {backbone: conv, d_model: 16, d_hidden: 16, kernel_size: 3, depth: 1}\n"
        "train: {lr: 0.001, batch_size: 8, epochs: 1}\ntasks: {listops: {}}\n",
        "error: train.weight_decay is not set: an arm's train block names lr, weight_decay, batch_size, epochs "
        "(missing here: weight_decay); set them in the arm's file or its per-task block",
    ),
}


@pytest.mark.parametrize("case", list(STANDALONE_ARMS))
def test_class_6_a_standalone_arm_lacking_a_block_is_one_line(case, tmp_path, shared_cache):
    body, said = STANDALONE_ARMS[case]
    path = tmp_path / "my_conf" / "arm" / "solo.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("# @package arm\nname: solo\n" + body)
    done = run_script("experiments/run.py", "--config-dir", str(path.parents[1]), "arm=solo", *smoke()[1:],
                      *common(tmp_path, shared_cache))  # fmt: skip
    assert done.returncode == 2 and done.stderr.splitlines() == [said], done.stderr[-3000:]
    assert not (tmp_path / "out").exists()


def _user_errors_exit_2(tmp_path: Path, command: list[str], said: str) -> None:
    """``lra-bundle`` and ``lra-paper`` answer refused input as the runner does: one line, exit status 2;
    ``--debug`` shows the traceback instead (an exception that ends the process: exit status 1). The bundle
    named is a folder that is not a bundle."""
    (tmp_path / "v9").mkdir()
    done = run_script(*command)
    assert done.returncode == 2 and done.stderr.splitlines() == [said], done.stderr[-3000:]
    debug = run_script(*command, "--debug")
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert f"BundleError: {tmp_path / 'v9'} fails verification:\n" in debug.stderr


def _not_a_bundle(tmp_path: Path) -> str:
    return (
        f"error: {tmp_path / 'v9'} fails verification: missing: MANIFEST.sha256 {tmp_path / 'v9' / 'MANIFEST.json'} "
        f"does not exist: {tmp_path / 'v9'} is not a bundle (freeze one with `python -m repro.bundle freeze`)"
    )


LEFT_OR_DROPPED = {
    "refused run": _refused_run,
    "killed freeze": _killed_freeze,
    "killed cache build": _killed_cache_build,
    "unknown precision": _unknown_precision,
    "misspelt model key in an arm file": lambda tmp_path, cache: _misspelt_arm_model_key(
        tmp_path, cache, "model: {kernel_size: 5, d_modle: 64}\n", "model.d_modle", "d_model"
    ),
    "misspelt per-task model key in an arm file": lambda tmp_path, cache: _misspelt_arm_model_key(
        tmp_path,
        cache,
        "model: {kernel_size: 5}\ntasks: {listops: {model: {dpth: 3}}}\n",
        "tasks.listops.model.dpth",
        "depth",
    ),
    "lra-bundle exit status": lambda tmp_path, cache: _user_errors_exit_2(
        tmp_path, ["-m", "repro.bundle", "cite", str(tmp_path / "v9")], _not_a_bundle(tmp_path)
    ),
    "lra-paper exit status": lambda tmp_path, cache: _user_errors_exit_2(
        tmp_path,
        ["-m", "repro.paper", "--bundle", str(tmp_path / "v9"), "--out", str(tmp_path / "out")],
        _not_a_bundle(tmp_path),
    ),
}


@pytest.mark.parametrize("case", list(LEFT_OR_DROPPED))
def test_class_8_nothing_is_left_behind_or_dropped(case, tmp_path, shared_cache):
    LEFT_OR_DROPPED[case](tmp_path, shared_cache)


# ---------------------------------------------------------------- class 7: data checked as it is read


def _listops_row(root: Path, row: str):
    from test_listops import write_official

    from repro.tasks import listops

    good = "( ( ( [MAX 2 ) 9 ) ] )\t9"
    write_official(root / "listops-1000", {"train": [good, row], "val": [good], "test": [good]})
    return lambda: listops.load_official(root, "listops-1000", 50), f"{root / 'listops-1000' / 'basic_train.tsv'}:3: "


def _review(root: Path, data: bytes | None):
    from test_text import make_acl

    from repro.tasks import text

    make_acl(root)
    path = root / "aclImdb" / "train" / "pos" / "0_9.txt"
    path.unlink()
    if data is None:
        path.mkdir()
    else:
        path.write_bytes(data)
    return lambda: text.read_official_split(root / "aclImdb", "train"), f"{path}: "


def _pathfinder_twice(root: Path):
    from test_pathfinder import write_fixture

    from repro.tasks import pathfinder

    write_fixture(root, "hard", 4, files=1)
    folder = root / "pathfinder32" / "curv_contour_length_14"
    meta = folder / "metadata" / "0.npy"
    first = meta.read_text().splitlines()[0].split(" ")
    meta.write_text(meta.read_text() + " ".join([*first[:3], str(1 - int(first[3])), *first[4:]]) + "\n")
    return lambda: pathfinder.read_official_difficulty(folder, 32), f"{folder / 'imgs/0/sample_0.png'} is listed "


DATA_CASES = {
    "ListOps ']' closing nothing": (
        lambda root: _listops_row(root, "( [MAX 2 ] ] )\t2"),
        "']' at token 5 closes no operator in Source; the release's rows are well formed: fix or remove the row",
    ),
    "ListOps operator not closed": (
        lambda root: _listops_row(root, "( ( [MIN 3 ) 4 )\t3"),
        "1 operator(s) not closed by ']' in Source; the release's rows are well formed: fix or remove the row",
    ),
    "ListOps label contradicting its expression": (
        lambda root: _listops_row(root, "( ( ( [MAX 2 ) 9 ) ] )\t2"),
        "Target 2 is not the value of its Source (9); in the release's files every Target is: fix or remove the row",
    ),
    "empty review": (lambda root: _review(root, b"  \n"), "empty review; restore its text or remove the file"),
    "binary review": (
        lambda root: _review(root, b"ok\x00\x01"),
        "binary data (a NUL byte at byte 2), not a review; restore the file",
    ),
    "review not UTF-8": (
        lambda root: _review(root, b"caf\xe9"),
        "not UTF-8 text (unexpected end of data at byte 3); restore the file",
    ),
    "review that is a folder": (
        lambda root: _review(root, None),
        "not a file; a review is a text file <id>_<rating>.txt",
    ),
    "Pathfinder image with two labels": (
        _pathfinder_twice,
        "in {metadata} with label 0 and with label 1: an image has one label; remove the wrong line",
    ),
}


@pytest.mark.parametrize("case", list(DATA_CASES))
def test_class_7_bad_data_is_named_not_taken(case, tmp_path):
    from repro.tasks.base import DataError

    make, message = DATA_CASES[case]
    read, where = make(tmp_path)
    message = message.replace("{metadata}", str(tmp_path / "pathfinder32" / "curv_contour_length_14" / "metadata"))
    with pytest.raises(DataError) as err:
        read()
    assert str(err.value) == where + message


def _listops_long(root: Path, **settings):
    from test_listops import write_official

    from repro.tasks import listops

    good, long = "( ( ( [MAX 2 ) 9 ) ] )\t9", "( [SM " + "1 " * 60 + "] )\t0"  # 62 tokens, its sum 60 mod 10 = 0
    write_official(root / "listops-1000", {"train": [good, long], "val": [good], "test": [good]})
    config = {"name": "listops", "source": "official", "official_subdir": "listops-1000", "max_len": 50, **settings}
    return lambda: listops.build(config, root, root / "cache")


def _text_long(root: Path, **settings):
    from test_text import cfg, make_acl

    from repro.tasks import text

    return lambda: text.build(cfg(**settings), make_acl(root), root / "cache")


def _retrieval_long(root: Path, **settings):
    from test_retrieval import cfg, write_release

    from repro.tasks import retrieval

    return lambda: retrieval.build(cfg(**settings), write_release(root), root / "cache")


TOO_LONG = " more than task.max_len={n} ({why}); pass task.truncate=true to cut such rows to task.max_len (printed and "
TOO_LONG += "counted in the record), raise task.max_len, or fix or remove the row"
LONG_ROW_CASES = {  # reader; whether it cuts by default; where it is named, its length and why; the counts cut
    "ListOps": (
        _listops_long,
        False,
        ("listops-1000/basic_train.tsv:3: 62 tokens,", 50, "the release's rows are shorter than 2000 tokens"),
        ("rows", 50, {"train": 1, "val": 0, "test": 0}),
    ),
    "text": (
        _text_long,
        True,
        ("aclImdb/train/neg/0_3.txt: 29 bytes,", 16, "task.truncate=false; the LRA release cuts reviews by design"),
        ("reviews", 16, {"train": 1, "val": 1, "test": 1}),
    ),
    "retrieval": (
        _retrieval_long,
        True,
        (
            "tsv_data/new_aan_pairs.train.tsv:1: text1: 19 bytes,",
            16,
            "task.truncate=false; the LRA release cuts documents by design",
        ),
        ("documents", 16, {"train": 4, "val": 0, "test": 1}),
    ),  # fmt: skip
}


@pytest.mark.parametrize("reader", list(LONG_ROW_CASES))
def test_class_7_a_row_over_max_len_is_refused_unless_truncate_says_so(reader, tmp_path, capsys):
    """ListOps refuses a row longer than task.max_len by default (the release's files hold none); text and
    retrieval cut it by default, as the release does by design. Either way task.truncate decides, and a cut is
    printed and counted in the task's info (the record's ``data``)."""
    from repro.tasks.base import DataError

    make, cuts_by_default, (where, n, why), (what, max_len, counts) = LONG_ROW_CASES[reader]
    refusal = f"{tmp_path / '{folder}' / where}{TOO_LONG.format(n=n, why=why)}"
    with pytest.raises(DataError) as err:
        make(tmp_path / "refused", truncate=False)()
    assert str(err.value) == refusal.replace("{folder}", "refused")
    task = make(tmp_path / "cut", **({} if cuts_by_default else {"truncate": True}))()
    each = ", ".join(f"{split} {count}" for split, count in counts.items())
    said = f"{reader.lower()}: {what} longer than task.max_len={max_len} cut to it (task.truncate=true): {each}"
    assert capsys.readouterr().out.splitlines()[-1] == said
    assert task.info["truncated"] == counts
    if not cuts_by_default:  # ListOps: refused without task.truncate
        with pytest.raises(DataError) as err:
            make(tmp_path / "default")()
        assert str(err.value) == refusal.replace("{folder}", "default")


def test_records_from_before_task_truncate_keep_matching_their_settings():
    """A record written before ``task.truncate`` existed counts with the value it ran with (the task's default
    now), so the runner and the grid still take it as complete; a flipped value is a difference."""
    from repro.run.runner import settings_differences
    from repro.run.settings import resolve

    for task in ("listops", "text", "retrieval"):
        run = resolve(composed("arm=lra_transformer", f"task={task}", "profile=paper"))
        older = {**run, "task": {k: v for k, v in run["task"].items() if k != "truncate"}}
        assert settings_differences(older, run, complete=True) == [], task
        value = run["task"]["truncate"]
        assert value is (task != "listops")
        flipped = {**run, "task": {**run["task"], "truncate": not value}}
        assert settings_differences(older, flipped, complete=True) == [f"task.truncate: {value!r} -> {not value!r}"]


# ---------------------------------------------------------------- class 6: one line where a traceback was


def _file_size_limit() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))  # config.yaml fits, a checkpoint does not


def _cache_built(root: Path, cache: Path) -> list[str]:
    """The run's data already cached (by a run elsewhere), so that the limit meets the run's own first
    checkpoint, not the cache's entry."""
    done = run_cli(*smoke(), *common(root / "elsewhere", cache), "+train.max_steps=1")
    assert done.returncode == 0, done.stderr[-2000:]
    return []


def _other_format_checkpoints(root: Path, cache: Path) -> list[str]:
    """An interrupted run whose last.pt and last.prev.pt are in another checkpoint layout."""
    import torch

    from repro.training.checkpoints import save_checkpoint

    assert run_cli(*smoke("locality_k5", "debug.sigterm_at_step=12"), *common(root, cache)).returncode == 143
    checkpoints = folder_of(root, "locality_k5") / "checkpoints"
    for name in ("last.pt", "last.prev.pt"):
        state = torch.load(checkpoints / name, weights_only=False)
        save_checkpoint(checkpoints / name, {**state, "format": 99})
    return []


def _a_file(root: Path) -> Path:
    (root / "a_file").write_text("x")
    return root / "a_file"


ONE_LINE_CASES = {
    "device=tpu": (
        lambda root, cache: ["device=tpu"],
        "error: device=tpu: not a device the runner trains on; use device=cpu, cuda, cuda:<k> or auto",
    ),
    "+train.betas=[0.9]": (
        lambda root, cache: ["+train.betas=[0.9]"],
        "error: train.betas=[0.9]: Adam's betas are two numbers in [0, 1) (beta1, beta2), e.g. "
        "+train.betas=[0.9,0.999]",
    ),
    "output_dir naming a file": (
        lambda root, cache: [f"output_dir={_a_file(root)}"],
        "error: output_dir={root}/a_file: {root}/a_file is a file, not a folder; point output_dir at a folder",
    ),
    "cache_dir naming a file": (
        lambda root, cache: [f"cache_dir={_a_file(root)}"],
        "error: cache_dir={root}/a_file: {root}/a_file is a file, not a folder; point cache_dir at a folder",
    ),
    "file-size limit": (
        lambda root, cache: _cache_built(root, cache),
        "error: cannot write {root}/out/runs/locality_k5/listops/smoke/seed0: File too large; free space, lift the "
        "limit or give write permission there, or pass output_dir=<another folder> (cache_dir=<another folder> "
        "for the data cache)",
    ),
    "checkpoints of another format": (
        _other_format_checkpoints,
        "error: {root}/out/runs/locality_k5/listops/smoke/seed0/checkpoints: no checkpoint in format 1 (last.pt "
        "has format 99, last.prev.pt has format 99: written by another version of repro); delete the folder's "
        "checkpoints or pass force=true to start this run over",
    ),
}


@pytest.mark.parametrize("case", [*ONE_LINE_CASES, "manifest entry without sha256"])
def test_class_6_an_error_of_input_or_machine_is_one_line(case, tmp_path, shared_cache):
    if case == "manifest entry without sha256":  # verify names it instead of a KeyError traceback
        from fake_records import fixed_labels, make_record

        make_record(tmp_path / "runs", "lra_transformer", "text", 0, labels=fixed_labels("text", 8), accuracy=0.5)
        frozen = bundle.freeze("v1", tmp_path / "runs", tmp_path / "results", analysis=False, log=lambda *a, **k: None)
        manifest = read_json(frozen / "MANIFEST.json")
        del manifest["files"][0]["sha256"]
        (frozen / "MANIFEST.json").write_text(json.dumps(manifest))
        assert bundle.verify(frozen) == [  # the edit, and the manifest's own checksum: no file counted as extra
            "changed: MANIFEST.json (its sha256 differs from MANIFEST.sha256)",
            "MANIFEST.json: files[0] lacks sha256; freeze the bundle again",
        ]
        return
    make, expected = ONE_LINE_CASES[case]
    extra = make(tmp_path, shared_cache)
    folder = tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed0"
    before = _snapshot(folder) if folder.is_dir() else {}
    limit = _file_size_limit if case == "file-size limit" else None
    done = subprocess.run(
        [sys.executable, "experiments/run.py", *smoke(), *common(tmp_path, shared_cache), *extra],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        preexec_fn=limit,  # noqa: PLW1509
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert error_lines(done.stderr) == [expected.replace("{root}", str(tmp_path))]
    assert "Traceback" not in done.stderr and "warning:" not in done.stderr  # that line alone
    # Nothing written: a first start stopped before its first checkpoint leaves no config.yaml or log.txt,
    # and a refused resume leaves the interrupted run's folder as it was.
    assert (_snapshot(folder) if folder.is_dir() else {}) == before


CONFIG_OR_FOLDER_CASES = {  # (the command's arguments, given the arm file's path and a file's; its one line)
    "arm YAML with a syntax error": (
        ARM_HEAD + "model: {kernel_size: 5\n",
        lambda arm, a_file: ["experiments/run.py", "--config-dir", str(arm.parents[1]), "arm=mine", "task=listops"],
        "experiments/run.py: error: {arm}:7: not valid YAML (expected ',' or '}}', but got '<stream end>'); correct "
        "the file's syntax there",
    ),
    "arm YAML that is not a mapping": (
        "- name: mine\n- model: {kernel_size: 5}\n",
        lambda arm, a_file: ["experiments/run.py", "--config-dir", str(arm.parents[1]), "arm=mine", "task=listops"],
        "experiments/run.py: error: {arm}: holds a list, not a mapping of settings; a config group's file is a YAML "
        "mapping (key: value lines), as those in experiments/conf/arm/ are",
    ),
    "lra-paper --out naming a file": (
        "",
        lambda arm, a_file: ["-m", "repro.paper", "--bundle", "results/v0", "--out", str(a_file)],
        "error: --out {a_file}: {a_file} is a file, not a folder; point --out at a folder (created if absent)",
    ),
    "lra-paper --out below a file": (
        "",
        lambda arm, a_file: ["-m", "repro.paper", "pathfinder-samples", "--out", str(a_file / "figs")],
        "error: --out {a_file}/figs: {a_file} is a file, not a folder (where its folder {a_file} would be); point "
        "--out at a folder (created if absent)",
    ),
}


@pytest.mark.parametrize("case", list(CONFIG_OR_FOLDER_CASES))
def test_class_6_a_bad_config_file_or_output_folder_is_one_line(case, tmp_path):
    body, command, said = CONFIG_OR_FOLDER_CASES[case]
    arm, a_file = own_arm(tmp_path, body), _a_file(tmp_path)
    done = run_script(*command(arm, a_file))
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines() == [said.format(arm=arm, a_file=a_file)]
    assert a_file.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "my_conf"]


def test_paired_tests_pair_only_records_of_one_test_set(tmp_path):
    """Equal labels are not enough (text and image labels are sorted by class): records whose test-set
    digests differ are not paired, and freeze refuses to bundle them in the first place."""
    from fake_records import fixed_labels, make_record

    from repro.paper.view import BundleView

    labels = fixed_labels("text", 20)
    for seed in (0, 1):
        folder = make_record(tmp_path / "runs", "lra_transformer", "text", seed, labels=labels, accuracy=0.6)
        metrics = read_json(folder / "metrics.json")
        metrics["data_digests"] = {"test": {"inputs": "a" * 64, "labels": "b" * 64}}
        (folder / "metrics.json").write_text(json.dumps(metrics))
    frozen = bundle.freeze("v1", tmp_path / "runs", tmp_path / "results", analysis=False, log=lambda *a, **k: None)
    view = BundleView([frozen], None)
    assert view.correctness(view.seeds("lra_transformer", "text")) is not None
    odd = frozen / "runs" / "lra_transformer" / "text" / "budget" / "seed1" / "metrics.json"
    metrics = read_json(odd)
    metrics["data_digests"]["test"]["inputs"] = "c" * 64  # the same labels, other inputs
    odd.write_text(json.dumps(metrics))
    view = BundleView([frozen], None)
    assert view.correctness(view.seeds("lra_transformer", "text")) is None
