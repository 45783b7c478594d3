"""The Hydra runner end to end on the smoke profile."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import CONF, composed, read_json, run_cli

from repro import records
from repro.records import METRIC_FIELDS


def common(tmp_path: Path, cache: Path, source: str = "task.source=generated") -> list[str]:
    """A private output and data folder; with a data folder named, generated data is asked for by ``source``."""
    return [
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={cache}",
        f"data_dir={tmp_path / 'no_data'}",
        source,
        "progress=false",
    ]


# Smoke ListOps trees of 50-300 tokens (the smoke split sizes, so still 32 steps): for tests of the runner's
# bookkeeping that run a model several times; test_smoke_run_writes_a_complete_record keeps the full length.
SHORT_TREES = ["task.max_len=300", "task.generate.min_len=50", "task.generate.max_len=300"]


def run_folder(tmp_path: Path, arm: str = "locality_k61", task: str = "listops") -> Path:
    return tmp_path / "out" / "runs" / arm / task / "smoke" / "seed0"


def read_csv(path: Path) -> list[dict]:
    with open(path) as handle:
        return list(csv.DictReader(handle))


def test_smoke_run_writes_a_complete_record(tmp_path, shared_cache):
    done = run_cli("arm=locality_k61", "task=listops", "profile=smoke", *common(tmp_path, shared_cache))
    assert done.returncode == 0, done.stderr[-3000:]
    folder = run_folder(tmp_path)
    metrics = read_json(folder / "metrics.json")
    missing = [f for f in METRIC_FIELDS if f not in metrics]
    assert not missing, missing
    assert metrics["status"] == "complete" and metrics["arm"] == "locality_k61" and metrics["task"] == "listops"
    assert metrics["tree_changes"] == records.tree_changes()  # what the commit's +dirty, if any, stands for
    if "LRA_REPRO_GIT_COMMIT" not in os.environ:  # else the variable names the commit and no tree is read
        assert metrics["git_commit"].endswith("+dirty") == bool(metrics["tree_changes"])
    assert 0.0 <= metrics["test_acc"] <= 1.0 and metrics["best_val_step"] > 0
    assert metrics["steps"] == 32 and metrics["device"] == "cpu" and metrics["train_examples_per_s"] > 0
    assert metrics["data_wait_sampled_steps"] == 1 and 0.0 < metrics["data_wait_share"] < 1.0  # step 1 of 32
    assert set(metrics["versions"]) >= {"python", "torch", "numpy", "repro"}
    config = yaml.safe_load((folder / "config.yaml").read_text())
    assert config["model"]["kernel_size"] == 61 and config["model"]["d_model"] == 32  # smoke shrinks widths only
    assert config["train"]["lr"] == 0.001 and config["train"]["weight_decay"] == 0.1  # Table 7, ListOps
    predictions = read_csv(folder / "predictions.csv")
    assert len(predictions) == metrics["data"]["sizes"]["test"]
    accuracy = sum(p["prediction"] == p["label"] for p in predictions) / len(predictions)
    assert abs(accuracy - metrics["test_acc"]) < 1e-12
    history = read_csv(folder / "history.csv")
    assert any(row["val_acc"] for row in history) and any(row["train_loss"] for row in history)
    # Without progress bars, each evaluation logs one line, in the history's order.
    logged = [line for line in done.stdout.splitlines() if line.startswith("eval step ")]
    evals = [row for row in history if row["val_acc"]]
    assert [line.split()[2] for line in logged] == [row["step"] for row in evals], done.stdout
    assert all(f"val acc {float(row['val_acc']):.4f}," in line for line, row in zip(logged, evals, strict=True))
    leftovers = [p.name for p in folder.rglob(".*")]
    assert not leftovers, f"temporary files left: {leftovers}"
    # A second identical command finds the record complete and does not retrain.
    again = run_cli("arm=locality_k61", "task=listops", "profile=smoke", *common(tmp_path, shared_cache))
    assert again.returncode == 0 and "record complete" in again.stdout


@pytest.mark.parametrize("bucketing", ["off", pytest.param("on", marks=pytest.mark.slow)])
def test_killed_run_resumes_to_the_uninterrupted_metrics(tmp_path, shared_cache, bucketing):
    whole = tmp_path / "whole"
    cut = tmp_path / "cut"
    # with bucketing, techniques=none: the locality arms' default ListOps permutation transforms the padded
    # batch, which length bucketing refuses (the record's folder is then locality_k5+none)
    techniques = ["techniques=none"] if bucketing == "on" else []
    folder_arm = "locality_k5+none" if bucketing == "on" else "locality_k5"
    args = ["arm=locality_k5", "task=listops", "profile=smoke", *techniques,
            f"++train.length_bucketing={bucketing}", *SHORT_TREES]  # fmt: skip
    done = run_cli(*args, *common(whole, shared_cache))
    assert done.returncode == 0, done.stderr[-3000:]

    killed = run_cli(*args, *common(cut, shared_cache), "debug.sigterm_at_step=13")
    assert killed.returncode == 128 + 15, killed.stderr[-3000:]
    assert "stopped by SIGTERM at step 13" in killed.stderr
    assert not (run_folder(cut, folder_arm) / "metrics.json").exists()
    assert (run_folder(cut, folder_arm) / "checkpoints" / "last.pt").exists()

    resumed = run_cli(*args, *common(cut, shared_cache))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stdout and "from step 13" in resumed.stdout

    a = read_json(run_folder(whole, folder_arm) / "metrics.json")
    b = read_json(run_folder(cut, folder_arm) / "metrics.json")
    for key in ("best_val_acc", "best_val_step", "test_acc", "test_loss", "steps", "epochs"):
        assert a[key] == b[key], (key, a[key], b[key])
    assert read_csv(run_folder(whole, folder_arm) / "predictions.csv") == read_csv(
        run_folder(cut, folder_arm) / "predictions.csv"
    )
    assert a["length_bucketing"]["used"] == (bucketing == "on") == b["length_bucketing"]["used"]
    assert a["length_bucketing"]["mean_train_width"] == b["length_bucketing"]["mean_train_width"]


def test_unknown_arm_exits_nonzero_listing_the_arms(tmp_path, shared_cache):
    done = run_cli("arm=no_such_arm", "task=listops", *common(tmp_path, shared_cache))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(
        f"experiments/run.py: error: arm=no_such_arm: no no_such_arm.yaml in {CONF / 'arm'}; choose one of: gmlp, "
    )
    for name in ("locality_k5", "locality_k31", "locality_k61"):
        assert name in done.stderr


def test_unknown_profile_and_task_and_a_short_commit_exit_nonzero_naming_the_fix(tmp_path, shared_cache):
    done = run_cli("arm=locality_k5", "task=listops", "profile=huge", *common(tmp_path, shared_cache))
    assert done.returncode == 2 and done.stderr == (
        f"experiments/run.py: error: profile=huge: no huge.yaml in {CONF / 'profile'}; choose one of: budget, "
        "paper, smoke\n"
    )
    done = run_cli("arm=locality_k5", "task=lisstops", *common(tmp_path, shared_cache))
    assert done.returncode == 2 and "task=lisstops: no lisstops.yaml" in done.stderr and "listops" in done.stderr
    # A short commit in LRA_REPRO_GIT_COMMIT: refused in one line before any data or training, no folder made.
    done = run_cli(
        "arm=locality_k5", "task=listops", *common(tmp_path, shared_cache), env={"LRA_REPRO_GIT_COMMIT": "abc1234"}
    )
    assert done.returncode == 2 and done.stderr.startswith(
        "[locality_k5/listops] refused: LRA_REPRO_GIT_COMMIT='abc1234' is not a full commit"
    ), done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_an_arm_outside_the_package_runs_through_config_dir(tmp_path, shared_cache):
    conf = tmp_path / "my_conf"
    (conf / "arm").mkdir(parents=True)
    (conf / "arm" / "locality_k9.yaml").write_text(
        "# @package arm\n"
        "defaults:\n  - /base/locality@_here_\n  - _self_\n"
        "name: locality_k9\nmodel:\n  kernel_size: 9\n"
    )
    done = run_cli(
        "--config-dir", str(conf), "arm=locality_k9", "task=listops", "profile=smoke", *common(tmp_path, shared_cache)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    folder = run_folder(tmp_path, "locality_k9")
    assert read_json(folder / "metrics.json")["arm"] == "locality_k9"
    assert yaml.safe_load((folder / "config.yaml").read_text())["model"]["kernel_size"] == 9


@pytest.mark.slow
def test_without_task_an_arm_runs_its_tasks_and_skips_missing_data(tmp_path, shared_cache):
    conf = tmp_path / "my_conf"
    (conf / "arm").mkdir(parents=True)
    (conf / "task").mkdir(parents=True)
    # A task whose official files are absent and which has no generator: ListOps forced to 'official'.
    (conf / "task" / "listops_official.yaml").write_text(
        "# @package task\ndefaults:\n  - listops\n  - _self_\n"
        "name: listops_official\nbuilder: listops\nsource: official\n"
    )
    (conf / "arm" / "two_tasks.yaml").write_text(
        "# @package arm\nname: two_tasks\n"
        "model: {backbone: conv, d_model: 16, d_hidden: 16, kernel_size: 3, depth: 1}\n"
        "train: {lr: 0.001, weight_decay: 0.0, batch_size: 8, epochs: 1}\n"
        "tasks:\n  listops: {}\n  listops_official: {}\n"
    )
    # Without a task there is no task.source to type: the profile's ListOps block asks for generated data.
    done = run_cli(
        "--config-dir",
        str(conf),
        "arm=two_tasks",
        "profile=smoke",
        *common(tmp_path, shared_cache, "++profile.tasks.listops.source=generated"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    skipped = [line for line in done.stdout.splitlines() if "skipped: data missing" in line]
    assert len(skipped) == 1 and skipped[0].startswith("[two_tasks/listops_official] skipped"), done.stdout
    assert "ListOps official files not found" in skipped[0]
    assert (run_folder(tmp_path, "two_tasks", "listops") / "metrics.json").exists()
    assert "arm two_tasks: 1 task(s) done, skipped (no data): listops_official" in done.stdout


def test_tree_changes_spell_out_what_dirty_means(tmp_path, monkeypatch):
    """A record says where its tree differed from HEAD: per top-level folder or file, how many tracked
    paths were deleted, modified or added; untracked files are not counted."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    monkeypatch.delenv("LRA_REPRO_GIT_COMMIT", raising=False)
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):  # e.g. set by a hook that runs the tests
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)  # no signing, hooks or status settings of the user's
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for name in ["results/a/x.json", "results/b.json", "repro/m.py", "README.md", "dir with space/é.txt"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    git("add", ".")
    git("-c", "user.email=t@example.org", "-c", "user.name=t", "commit", "-q", "-m", "start")
    assert records.tree_changes(tmp_path) == []
    (tmp_path / "results/a/x.json").unlink()
    (tmp_path / "results/b.json").unlink()
    (tmp_path / "README.md").write_text("changed\n")
    (tmp_path / "repro/new.py").write_text("y\n")  # untracked
    git("add", "repro/new.py")
    (tmp_path / "notes.txt").write_text("untracked\n")
    (tmp_path / "dir with space/é.txt").write_text("changed\n")  # git quotes such paths without -z
    assert records.tree_changes(tmp_path) == [
        "README.md: 1 modified",
        "dir with space/: 1 modified",
        "repro/: 1 added",
        "results/: 2 deleted",
    ]
    assert records.git_commit(tmp_path).endswith("+dirty")
    codes = [" M", "MM", "AM", " D", "D ", "AD", "UU", "UD", "AA", "DD", "C "]
    kinds = ["modified", "modified", "added", "deleted", "deleted", "added"] + ["unmerged"] * 4 + ["copied"]
    assert [records.change_kind(code) for code in codes] == kinds
    plain = tmp_path.parent / f"{tmp_path.name}-plain"  # a folder outside any checkout
    plain.mkdir()
    assert records.tree_changes(plain) is None
    monkeypatch.setenv("LRA_REPRO_GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567")
    assert records.tree_changes(tmp_path) is None  # the variable stands in for the tree's metadata


def test_git_commit_prefers_the_environment_variable(monkeypatch):
    """A copied tree may carry stale git metadata: LRA_REPRO_GIT_COMMIT, when set, wins."""
    full = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setenv("LRA_REPRO_GIT_COMMIT", full + "+dirty")
    assert records.git_commit() == full + "+dirty"
    monkeypatch.delenv("LRA_REPRO_GIT_COMMIT")
    assert records.git_commit() != full + "+dirty"
    # A short commit would make records that the campaign's record checks refuse: it is refused first.
    monkeypatch.setenv("LRA_REPRO_GIT_COMMIT", "abc1234")
    message = (
        "LRA_REPRO_GIT_COMMIT='abc1234' is not a full commit: set it to `git rev-parse HEAD` "
        "(40 hex digits), with +dirty when the tree differs from it, or unset it"
    )
    assert records.commit_variable_problem() == message
    with pytest.raises(ValueError) as refused:
        records.git_commit()
    assert str(refused.value) == message


def test_every_arm_declares_the_techniques_its_defaults_pick():
    """An arm's ``techniques_default`` key equals what its defaults list selects (none when absent)."""
    arms = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "experiments" / "conf" / "arm").glob("*.yaml"))
    assert len(arms) >= 25
    for arm in arms:
        cfg = composed(f"arm={arm}", "task=listops", "profile=smoke")
        assert cfg.techniques.name == cfg.arm.get("techniques_default", "none"), arm


def test_a_run_with_other_techniques_gets_its_own_record_folder():
    from repro.run.runner import run_dir_for
    from repro.run.settings import resolve

    def folder(*overrides):
        cfg = composed(*overrides, "task=listops", "profile=smoke")
        return run_dir_for(cfg, resolve(cfg)).parts[-4]

    assert folder("arm=s4") == "s4"
    assert folder("arm=s4", "techniques=none") == "s4"
    assert folder("arm=s4", "techniques=followup") == "s4+followup"
    assert folder("arm=locality_k5", "techniques=none") == "locality_k5+none"  # its default: followup_data
    assert folder("arm=rotary_transformer") == "rotary_transformer"
    assert folder("arm=rotary_transformer", "techniques=none") == "rotary_transformer+none"


def test_a_task_setting_typed_on_the_command_line_wins_over_the_techniques():
    """``techniques=followup`` sets Pathfinder's difficulty to all; ``task.difficulty=hard`` typed
    beside it must not be dropped silently."""
    from repro.run.settings import resolve

    cfg = composed(
        "arm=locality_k61",
        "task=pathfinder",
        "profile=smoke",
        "techniques=followup",
        "task.difficulty=hard",
        "task.generate.paddle_margins=[1,2]",
    )
    assert resolve(cfg)["task"]["difficulty"] == "all"  # the layers alone: the techniques' value
    run = resolve(cfg, ["difficulty", "generate.paddle_margins"])
    assert run["task"]["difficulty"] == "hard"
    assert run["task"]["generate"]["paddle_margins"] == [1, 2] and run["task"]["generate"]["padding"] == 1


def test_the_runner_reads_the_typed_task_settings_from_hydra(tmp_path, shared_cache):
    # smoke's own block sets n_per_difficulty 200: the typed 1000 must win over it too
    done = run_cli(
        "arm=locality_k5",
        "task=pathfinder",
        "profile=smoke",
        "techniques=followup",
        "task.difficulty=easy",
        "++task.generate.n_per_difficulty=1000",
        *common(tmp_path, shared_cache),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    config = yaml.safe_load(
        (
            tmp_path / "out" / "runs" / "locality_k5+followup" / "pathfinder" / "smoke" / "seed0" / "config.yaml"
        ).read_text()
    )
    assert config["task"]["difficulty"] == "easy" and config["task"]["generate"]["n_per_difficulty"] == 1000


def test_a_typed_block_changes_only_the_keys_it_names_and_deletions_and_list_items_are_handled():
    from repro.run.settings import resolve, typed_task_paths

    typed = [
        "task.generate={padding: 2}",
        "~task.generate.marker_radius",
        "++task.difficulty=hard",
        "task=pathfinder",
        "seed=1",
    ]
    assert typed_task_paths(typed) == ["generate.padding", "~generate.marker_radius", "difficulty"]
    # an empty block changes nothing: the profile's per-task settings (smoke: 200 images) stay
    assert typed_task_paths(["task.generate={}"]) == []
    cfg = composed("arm=locality_k61", "task=pathfinder", "profile=smoke", "task.generate={}")
    assert resolve(cfg, typed_task_paths(["task.generate={}"]))["task"]["generate"]["n_per_difficulty"] == 200
    cfg = composed("arm=locality_k61", "task=pathfinder", "profile=smoke", "task.generate={padding: 2}")
    generate = resolve(cfg, typed_task_paths(["task.generate={padding: 2}"]))["task"]["generate"]
    assert generate["padding"] == 2 and generate["n_per_difficulty"] == 200 and generate["marker_radius"] == 1.5
    cfg = composed("arm=locality_k61", "task=pathfinder", "profile=smoke", "~task.generate.marker_radius")
    assert "marker_radius" not in resolve(cfg, ["~generate.marker_radius"])["task"]["generate"]
    cfg = composed("arm=locality_k61", "task=pathfinder", "profile=smoke", "task.generate.paddle_margins.0=3")
    with pytest.raises(
        ValueError,
        match=r"task.generate.paddle_margins.0: 'paddle_margins' is not a block of settings; "
        r"set the whole value instead \(task.generate.paddle_margins=...\)",
    ):
        resolve(cfg, ["generate.paddle_margins.0"])


def test_settings_differences_name_what_shapes_training_and_skip_what_may_change():
    from repro.run.runner import settings_differences

    old = {
        "model": {"kernel_size": 61, "norm": "layer"},
        "task": {"difficulty": "all", "generate": {"padding": 1}},
        "train": {"lr": 0.001, "budget_minutes": 5, "eval_every_seconds": 60},
        "techniques": {"augment": {}},
    }
    new = {
        "model": {"kernel_size": 61, "norm": "batch", "token_encoding": "intensity"},
        "task": {"difficulty": "hard", "generate": {"padding": 1}},
        "train": {"lr": 0.001, "budget_minutes": 60, "eval_every_seconds": 30, "warmup_steps": 10},
        "techniques": {"augment": {"d4": True}},
    }
    assert settings_differences(old, new) == [
        "model.norm: 'layer' -> 'batch'",
        "model.token_encoding: 'embedding' -> 'intensity'",  # absent from the old record: its implicit value
        "task.difficulty: 'all' -> 'hard'",
        "train.warmup_steps: 0 -> 10",  # typed on one side only: TrainSettings' default on the other
        "techniques.augment: {} -> {'d4': True}",
    ]
    assert settings_differences(old, old) == []
    # Once the earlier run is complete its budget is part of what it measured.
    assert "train.budget_minutes: 5 -> 60" in settings_differences(old, new, complete=True)
    # A key neither implicit nor a training default counts as absent on the side that lacks it.
    assert settings_differences(old, {**old, "subset": {"train": 64}}) == ["subset.train: '(absent)' -> 64"]


@pytest.mark.slow
def test_a_record_folder_holding_other_settings_is_refused_and_force_starts_over(tmp_path, shared_cache):
    args = ["arm=locality_k61", "task=listops", "profile=smoke", *SHORT_TREES, *common(tmp_path, shared_cache)]
    assert run_cli(*args).returncode == 0
    done = run_cli(*args, "++train.lr=0.002")
    assert done.returncode == 2
    folder = run_folder(tmp_path)
    assert (
        f"error: {folder} holds a run with other settings (train.lr: 0.001 -> 0.002); its record "
        "and checkpoints belong to those. Pass output_dir=<another folder> to keep both, or force=true to start "
        "this run over in its place"
    ) in done.stderr
    done = run_cli(*args, "++train.lr=0.002", "force=true")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "force=true: starting over" in done.stdout and "resuming" not in done.stdout
    assert yaml.safe_load((folder / "config.yaml").read_text())["train"]["lr"] == 0.002
    assert read_json(folder / "metrics.json")["steps"] == 32  # trained from step 0, not resumed
    assert (
        "record complete" in run_cli(*args, "++train.lr=0.002", "++train.eval_batch_size=5").stdout
    )  # free keys: same run
    # A forced rerun removes the earlier metrics first: interrupted, it leaves no complete record behind.
    done = run_cli(*args, "++train.lr=0.003", "force=true", "debug.sigterm_at_step=8")
    assert done.returncode == 143 and not (folder / "metrics.json").exists()
    assert run_cli(*args, "++train.lr=0.003").returncode == 0  # resumes the lr 0.003 run
    assert read_json(folder / "metrics.json")["steps"] == 32
    done = run_cli(*args, "++train.lr=0.003", "force=true")  # the same settings, complete: trained again
    assert done.returncode == 0, done.stderr[-3000:]
    assert "force=true: rerunning the complete record" in done.stdout and "resuming" not in done.stdout


@pytest.mark.slow
def test_a_run_that_died_before_its_first_checkpoint_is_not_guarded(tmp_path, shared_cache):
    args = ["arm=locality_k61", "task=listops", "profile=smoke", *SHORT_TREES, *common(tmp_path, shared_cache)]
    folder = run_folder(tmp_path)
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"model": {"kernel_size": 61}, "train": {"batch_size": 512}}))
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert yaml.safe_load((folder / "config.yaml").read_text())["train"]["batch_size"] == 8


def test_packing_with_length_bucketing_is_refused_in_one_line(tmp_path, shared_cache):
    """Bucketed batches fill their trimmed width: none would fit the stream, so the pair is refused."""
    args = ["arm=locality_k5", "task=listops", "profile=smoke", "techniques=none", *SHORT_TREES]
    done = run_cli(*args, "++train.length_bucketing=on", "++train.pack_sequences=true", *common(tmp_path, shared_cache))
    assert done.returncode == 2, done.stderr[-3000:]
    assert (
        "train.pack_sequences=true with length bucketing: bucketed batches fill their trimmed width, so none would "
        "fit the stream; set train.length_bucketing=off or train.pack_sequences=false"
    ) in done.stderr.splitlines()[-1]


def test_a_packed_run_trains_what_the_padded_run_trains_and_either_resumes_the_other(tmp_path, shared_cache):
    """train.pack_sequences: the rotary Transformer's smoke run on ListOps, packed, has the padded run's losses
    and validation accuracies (float32 on the CPU: summation order alone differs); it is a way of computing,
    so a run stopped padded resumes packed, to the same record."""
    args = ["arm=rotary_transformer", "task=listops", "profile=smoke", *SHORT_TREES]
    padded = run_cli(*args, *common(tmp_path / "padded", shared_cache))
    assert padded.returncode == 0, padded.stderr[-3000:]
    cut = tmp_path / "cut"
    stopped = run_cli(*args, *common(cut, shared_cache), "debug.sigterm_at_step=13")
    assert stopped.returncode == 128 + 15, stopped.stderr[-3000:]
    resumed = run_cli(*args, *common(cut, shared_cache), "++train.pack_sequences=true")
    assert resumed.returncode == 0 and "from step 13" in resumed.stdout, resumed.stderr[-3000:]
    a = read_csv(run_folder(tmp_path / "padded", "rotary_transformer") / "history.csv")
    b = read_csv(run_folder(cut, "rotary_transformer") / "history.csv")
    assert [row["step"] for row in a] == [row["step"] for row in b]
    for row_a, row_b in zip(a, b, strict=True):
        for key in ("train_loss", "val_loss", "val_acc"):
            if row_a[key]:
                assert float(row_b[key]) == pytest.approx(float(row_a[key]), rel=1e-4, abs=1e-5), (row_a, key)
    config = yaml.safe_load((run_folder(cut, "rotary_transformer") / "config.yaml").read_text())
    assert config["train"]["pack_sequences"] is True  # the record says how its last part computed
    packing = read_json(run_folder(cut, "rotary_transformer") / "metrics.json")["packing"]
    assert packing["capacity"] == 0.7 and packing["packed_passes"] > 0  # it did run packed
    assert read_json(run_folder(tmp_path / "padded", "rotary_transformer") / "metrics.json")["packing"] is None
