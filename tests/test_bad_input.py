"""No bad input becomes a result: each mistake is refused in one line and nothing is recorded as complete.

The runner is driven in-process (``experiments/run.py``'s Hydra entry point run by ``runpy``, as
``python experiments/run.py ...`` runs it), on ListOps shortened to 50-300 tokens.
"""

from __future__ import annotations

import json
import lzma
import math
import os
import runpy
import shutil
import sys
from pathlib import Path

import pytest
from conftest import CONF, RUN, SHORT_LISTOPS_OVERRIDES, composed, read_json

ARM = ["arm=locality_k5", "task=listops", "profile=smoke", *SHORT_LISTOPS_OVERRIDES]
TYPO_WHERE = "(arm locality_k5, task listops, profile smoke)"
MINUTES = "must be a number > 0, or null for no wall-clock cap"


def cli(monkeypatch, capsys, *overrides: str) -> tuple[int, str, str]:
    """``python experiments/run.py <overrides>`` in this process: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", [str(RUN), *overrides])
    monkeypatch.setattr(sys, "path", list(sys.path))  # run.py puts the checkout first
    monkeypatch.delenv("LRA_DATA_DIR", raising=False)
    try:
        runpy.run_path(str(RUN), run_name="__main__")
        status = 0
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def private(tmp_path: Path, cache: Path) -> list[str]:
    return [f"output_dir={tmp_path / 'out'}", f"cache_dir={cache}", "progress=false", "workers=1", "+train.max_steps=4"]


def run_folder(tmp_path: Path) -> Path:
    return tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed0"


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "error:" in line]


# ---------------------------------------------------------------- data fixtures


def listops_with_a_bad_row(tmp_path: Path) -> Path:
    """The release layout with line 3 of basic_train.tsv missing its Target."""
    folder = tmp_path / "data" / "listops-1000"
    folder.mkdir(parents=True)
    for split in ("train", "val", "test"):
        rows = ["Source\tTarget", "( ( [MAX 2 9 ] ) )\t9", "[MIN 4 ( 1 ) ]" if split == "train" else "[SM 1 2 ]\t3"]
        (folder / f"basic_{split}.tsv").write_text("\n".join(rows) + "\n")
    return tmp_path / "data"


def imdb_bundle(tmp_path: Path, damage: str) -> Path:
    """``imdb/imdb_{train,test}.jsonl.xz`` with the train file cut in half or replaced by bytes that are not xz."""
    folder = tmp_path / "data" / "imdb"
    folder.mkdir(parents=True)
    for split in ("train", "test"):
        lines = [json.dumps({"id": i, "rating": 8, "label": i % 2, "text": f"review {i} " * 40}) for i in range(400)]
        (folder / f"imdb_{split}.jsonl.xz").write_bytes(lzma.compress("\n".join(lines).encode()))
    train = folder / "imdb_train.jsonl.xz"
    data = train.read_bytes()
    train.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"not an xz stream " * 20)
    return tmp_path / "data"


def record_with_damaged_config(tmp_path: Path) -> None:
    """A record folder in progress (a checkpoint) whose config.yaml is not YAML."""
    folder = run_folder(tmp_path)
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.pt").write_bytes(b"a checkpoint")
    (folder / "config.yaml").write_text("model: {kernel_size: [61\n")


def setup_none(tmp_path):
    return []


# ---------------------------------------------------------------- the table

# (id, overrides or a setup returning them, exit status, the error line (a trailing "..." means: starts with))
CASES = [
    ("negative budget", ["budget.minutes=-5"], 2, f"error: budget.minutes=-5: {MINUTES}"),
    ("zero budget", ["budget.minutes=0"], 2, f"error: budget.minutes=0: {MINUTES}"),
    ("budget not a number", ["budget.minutes=abc"], 2, f"error: budget.minutes='abc': {MINUTES}"),
    (
        "budget under smoke",
        ["budget.minutes=3"],
        2,
        "error: budget.minutes=3: profile smoke does not read budget.minutes (its train.budget_minutes is null); only "
        "profile=budget does: pass profile=budget, or +train.budget_minutes=3 to cap this run",
    ),
    (
        "example budget under smoke",
        ["budget.fraction=0.1"],
        2,
        "error: budget.fraction=0.1: profile smoke does not read budget.fraction (its train.budget_fraction is null); "
        "only profile=budget does: pass profile=budget, or +train.budget_fraction=0.1 to budget this run by examples",
    ),
    (
        "negative example budget",
        ["+train.budget_fraction=-0.1"],
        2,
        "error: train.budget_fraction=-0.1: must be a number > 0, or null",
    ),
    ("zero epochs", ["+train.epochs=0"], 2, "error: train.epochs=0: must be an integer >= 1"),
    ("zero steps", ["++train.max_steps=0"], 2, "error: train.max_steps=0: must be an integer >= 1, or null"),
    ("fractional batch", ["++train.batch_size=7.5"], 2, "error: train.batch_size=7.5: must be an integer >= 1"),
    ("compile not a boolean", ["++train.compile=treu"], 2, "error: train.compile='treu': must be true or false"),
    (
        "compiled transforms not a boolean",
        ["++train.compile_transforms=1"],
        2,
        "error: train.compile_transforms=1: must be true or false",
    ),
    ("seed not a number", ["seed=abc"], 2, "error: seed='abc': must be an integer >= 0"),
    ("negative seed", ["seed=-1"], 2, "error: seed=-1: must be an integer >= 0"),
    ("fractional seed", ["seed=1.5"], 2, "error: seed=1.5: must be an integer >= 0"),
    ("zero workers", ["workers=0"], 2, "error: workers=0: must be an integer >= 1, or null"),
    (
        "model key typo",
        ["+model.kernel_sise=9"],
        2,
        f"error: +model.kernel_sise=9: model has no key 'kernel_sise' {TYPO_WHERE}; "
        "did you mean model.kernel_size? ...",
    ),
    (
        "task key typo",
        ["+task.data_sed=3"],
        2,
        f"error: +task.data_sed=3: task has no key 'data_sed' {TYPO_WHERE}; "
        "did you mean task.data_seed? (valid: builder, data_seed, generate, max_len, name, official_subdir, source, "
        "truncate)",
    ),
    (
        "nested task key typo",
        ["++task.generate.n_trian=3"],
        2,
        f"error: ++task.generate.n_trian=3: task.generate has no key 'n_trian' {TYPO_WHERE}; did you mean "
        "task.generate.n_train? (valid: max_args, max_depth, max_len, min_len, n_test, n_train, n_val)",
    ),
    (
        "train key typo",
        ["+train.lrr=0.1"],
        2,
        f"error: +train.lrr=0.1: train has no key 'lrr' {TYPO_WHERE}; did you mean train.lr? ...",
    ),
    (
        "unknown arm",
        ["arm=megaa"],
        2,
        "experiments/run.py: error: arm=megaa: no megaa.yaml in {conf}/arm; choose one of: gmlp, learned_pe, ...",
    ),
    (
        "unknown task in a sweep",
        ["task=listops,texts"],
        2,
        "experiments/run.py: error: task=texts: no texts.yaml in {conf}/task; choose one of: image, listops, "
        "pathfinder, pathx, retrieval, text",
    ),
    (
        "train setting without +",
        ["train.lr=0.1"],
        2,
        "experiments/run.py: error: train.lr=0.1: settings under train are added to the arm's with a leading +: "
        "+train.lr=0.1",
    ),
    (
        "budget key typo",
        ["+budget.minuts=3"],
        2,
        f"error: +budget.minuts=3: budget has no key 'minuts' {TYPO_WHERE}; did you mean budget.minutes? "
        "(valid: examples, fraction, minutes)",
    ),
    (
        "data_dir without ListOps",
        lambda t: [f"data_dir={t / 'empty'}"],
        2,
        "error: data_dir={t}/empty lacks the listops files (no {t}/empty/listops-1000/basic_train.tsv, "
        "{t}/empty/listops-1000/basic_val.tsv, {t}/empty/listops-1000/basic_test.tsv); with a data folder named, "
        "task.source=auto does not generate data: put the files there, or pass task.source=generated to generate them",
    ),
    (
        "malformed ListOps row",
        lambda t: [f"data_dir={listops_with_a_bad_row(t)}"],
        2,
        "error: {t}/data/listops-1000/basic_train.tsv:3: expected 2 tab-separated fields (Source, Target), found 1",
    ),
    (
        "truncated IMDb bundle",
        lambda t: ["task=text", f"data_dir={imdb_bundle(t, 'truncated')}"],
        2,
        "error: {t}/data/imdb/imdb_train.jsonl.xz: cannot read the xz-compressed JSONL past line ...",
    ),
    (
        "IMDb bundle not xz",
        lambda t: ["task=text", f"data_dir={imdb_bundle(t, 'invalid')}"],
        2,
        "error: {t}/data/imdb/imdb_train.jsonl.xz: cannot read the xz-compressed JSONL past line 0 "
        "(LZMAError: Input format not supported by decoder)",
    ),
    (
        "damaged config.yaml",
        lambda t: record_with_damaged_config(t) or [],
        2,
        "error: {t}/out/runs/locality_k5/listops/smoke/seed0/config.yaml cannot be read (...",
    ),
    (
        "budget too short for one step",
        ["++train.budget_minutes=1e-9"],
        1,
        "[locality_k5/listops] error: not a result, no record written "
        "(trained 0 steps; train_examples_per_s=nan is not a number); "
        "the history is in {t}/out/runs/locality_k5/listops/smoke/seed0/history.csv",
    ),
]


@pytest.mark.parametrize("overrides, status, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_in_one_line_and_nothing_is_complete(
    overrides, status, expected, tmp_path, shared_cache, monkeypatch, capsys
):
    typed = overrides(tmp_path) if callable(overrides) else overrides
    other_task = any(o.startswith("task=") for o in typed)
    base = ARM[:1] + ARM[2:3] if other_task else ARM  # another task: without the short ListOps settings
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "out").rglob("*"))
    done, out, err = cli(monkeypatch, capsys, *base, *private(tmp_path, shared_cache), *typed)
    assert done == status, err[-3000:]
    expected = expected.replace("{t}", str(tmp_path)).replace("{conf}", str(CONF))
    lines = error_lines(err)
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    if expected.endswith("..."):
        assert lines[0].startswith(expected[:-3]), lines[0]
    else:
        assert lines[0] == expected
    assert not list((tmp_path / "out").rglob("metrics.json")), "a refused run was marked complete"
    after = sorted(p.relative_to(tmp_path) for p in (tmp_path / "out").rglob("*"))
    if status == 2:  # refused before any work: nothing written at all
        assert after == before, after
    else:  # trained nothing: no metrics, no predictions
        assert not list((tmp_path / "out").rglob("predictions.csv"))


def test_the_command_line_check_finds_arms_in_a_users_config_dir_and_leaves_hydra_sweeps_alone(tmp_path):
    from repro.cli import command_line_problem as problem

    (tmp_path / "arm").mkdir()
    (tmp_path / "arm" / "mine.yaml").write_text("name: mine\n")
    assert problem(["arm=mine"], CONF).startswith("arm=mine: no mine.yaml in ")
    for extra in (["--config-dir", str(tmp_path)], [f"--config-dir={tmp_path}"], ["-cd", str(tmp_path)]):
        assert problem([*extra, "arm=mine", "task=listops", "+train.lr=0.1", "++model.depth=2"], CONF) is None
    assert problem(["-m", "arm=choice(locality_k5,megaa)"], CONF) is None  # Hydra's sweep syntax: Hydra checks
    assert problem(["hydra.searchpath=[file:///x]", "arm=elsewhere"], CONF) is None
    assert problem(["arm=locality_k5", "task=null", "techniques=followup", "profile=paper"], CONF) is None


def test_a_gpu_asked_for_on_a_machine_without_one_is_refused_in_one_line(tmp_path, shared_cache, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    done, _, err = cli(monkeypatch, capsys, *ARM, *private(tmp_path, shared_cache), "device=cuda")
    assert done == 2 and "Traceback" not in err, err[-3000:]
    assert error_lines(err) == [
        "error: device=cuda: CUDA is not available on this machine; use device=cpu, or device=auto (a GPU when "
        "there is one)"
    ]
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*"))


def test_an_arm_key_that_an_inherited_per_task_block_overrides_is_refused(tmp_path, shared_cache, monkeypatch, capsys):
    """``model.depth`` at an arm file's top level loses to ``base/locality``'s per-task depth: refused, naming
    the file and the fix; the same depth under ``tasks.listops`` is the arm's own choice and runs."""
    arms = tmp_path / "my_conf" / "arm"
    arms.mkdir(parents=True)
    head = "# @package arm\ndefaults:\n  - /base/locality@_here_\n  - _self_\n"
    (arms / "k9_depth3.yaml").write_text(head + "name: k9_depth3\nmodel: {kernel_size: 9, depth: 3}\n")
    (arms / "k9_listops3.yaml").write_text(
        head + "name: k9_listops3\nmodel: {kernel_size: 9}\ntasks: {listops: {model: {depth: 3}}}\n"
    )
    config_dir, common = ["--config-dir", str(tmp_path / "my_conf")], [*ARM[1:], *private(tmp_path, shared_cache)]
    done, _, err = cli(monkeypatch, capsys, *config_dir, "arm=k9_depth3", *common)
    assert done == 2, err[-3000:]
    assert error_lines(err) == [
        f"error: {arms / 'k9_depth3.yaml'}: model.depth=3 is overridden on task listops by the per-task block "
        "arm k9_depth3 inherits (model.depth=6); set it under tasks.listops.model.depth in that file, for each "
        "task it should change"
    ]
    assert not (tmp_path / "out").exists()
    done, _, err = cli(monkeypatch, capsys, *config_dir, "arm=k9_listops3", *common)
    assert done == 0 and not error_lines(err), err[-3000:]


@pytest.mark.parametrize(
    "base, body, task, said",
    [
        ("/base/locality", "my_lr: 0.001\ntrain:\n  lr: ${arm.my_lr}", "listops", None),  # resolved: equal
        ("/base/locality", "model: {depth: 4}\ntasks:\n  listops: ${arm.tasks.text}", "listops", None),  # its own
        ("/arm/lra_local", "model: {attention_params: {release: false}}", "pathfinder", None),  # merged by key
        (
            "/arm/lra_local",
            "model: {attention_params: {block_size: 32}}",
            "pathfinder",
            "model.attention_params.block_size=32 is overridden on task pathfinder by the per-task block arm mine "
            "inherits (model.attention_params.block_size=64)",
        ),
        (  # a per-task value that is no block replaces the file's block: named by that shorter key
            "/arm/parent",
            "train:\n  schedule_params: {warmup: 20}",
            "listops",
            "train.schedule_params={'warmup': 20} is overridden on task listops by the per-task block arm mine "
            "inherits (train.schedule_params=null)",
        ),
        ("/base/locality", "my:\n  listops: {model: {depth: 3}}\nmodel: {depth: 2}\ntasks: ${arm.my}", "listops", None),
    ],
)
def test_shadowed_arm_keys_are_compared_leaf_by_leaf_on_resolved_values(tmp_path, base, body, task, said):
    from hydra import compose, initialize_config_dir

    from repro.run.validate import shadowed_arm_keys

    (tmp_path / "arm").mkdir()
    (tmp_path / "arm" / "parent.yaml").write_text(
        "# @package arm\ndefaults:\n  - /base/locality@_here_\n  - _self_\nname: parent\n"
        "tasks:\n  listops:\n    train: {schedule_params: null}\n"
    )
    arm = tmp_path / "arm" / "mine.yaml"
    arm.write_text(f"# @package arm\ndefaults:\n  - {base}@_here_\n  - _self_\nname: mine\n{body}\n")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"hydra.searchpath=[file://{tmp_path}]", "arm=mine"])
    found = shadowed_arm_keys(arm, cfg.arm, task)
    assert found == (
        []
        if said is None
        else [
            f"{arm}: {said}; set it under tasks.{task}.{said.split('=')[0]} in "
            "that file, for each task it should change"
        ]
    )


def test_debug_traceback_shows_the_traceback_of_a_refused_setting(tmp_path, shared_cache, monkeypatch, capsys):
    done, _, err = cli(monkeypatch, capsys, *ARM, *private(tmp_path, shared_cache), "seed=abc", "debug.traceback=true")
    assert done == 1 and "BadInput: seed='abc': must be an integer >= 0" in err, err[-3000:]


def test_every_shipped_arm_and_profile_passes_the_checks():
    """The checks refuse mistakes, not the configs the package ships (every arm and task on smoke,
    every profile on one arm)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from repro.run import validate
    from repro.run.settings import arm_tasks

    arms = sorted(p.stem for p in (CONF / "arm").glob("*.yaml"))
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for arm in arms:
            cfg = compose(config_name="config", overrides=[f"arm={arm}", "task=listops"])
            OmegaConf.set_struct(cfg, False)
            for task in arm_tasks(cfg):  # a task file has no defaults list: loading it is composing it (faster)
                cfg.task = OmegaConf.load(CONF / "task" / f"{task}.yaml")
                validate.check(cfg, [])
                assert validate.shadowed_arm_keys(CONF / "arm" / f"{arm}.yaml", cfg.arm, task) == [], (arm, task)
        for profile in ("budget", "paper"):
            validate.check(compose(config_name="config", overrides=["task=pathfinder", f"profile={profile}"]), [])
        typed = ["task=listops", "profile=budget", "budget.minutes=null", "++task.generate.n_train=10"]
        validate.check(compose(config_name="config", overrides=typed), typed)  # typed keys: composed again


# ---------------------------------------------------------------- records


@pytest.fixture(scope="module")
def finished(tmp_path_factory, shared_cache) -> Path:
    """One complete smoke record (4 steps, the best validation at the last step); tests copy it."""
    root = tmp_path_factory.mktemp("finished")
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(sys, "argv", [str(RUN), *ARM, *private(root, shared_cache)])
        mp.setattr(sys, "path", list(sys.path))
        runpy.run_path(str(RUN), run_name="__main__")
    finally:
        mp.undo()
    assert read_json(run_folder(root) / "metrics.json")["status"] == "complete"
    return root


def copy_of(finished: Path, tmp_path: Path) -> Path:
    shutil.copytree(finished / "out", tmp_path / "out")
    return run_folder(tmp_path)


def test_a_cpu_float32_run_records_the_arithmetic_its_convolutions_ran_in(finished):
    metrics = read_json(run_folder(finished) / "metrics.json")
    assert metrics["autocast"] == "none" and metrics["conv_impls"] == ["fp32"]


def test_record_files_get_the_umask_permissions(tmp_path):
    from repro import records

    for umask, mode in ((0o022, 0o644), (0o027, 0o640)):
        previous = os.umask(umask)
        try:
            records.write_json(tmp_path / f"m{umask}.json", {"a": 1})
        finally:
            os.umask(previous)
        assert (tmp_path / f"m{umask}.json").stat().st_mode & 0o777 == mode


def test_metrics_json_never_holds_nan(tmp_path):
    from repro import records

    refused = r"not written: data\.loss=nan, curve\[1\]=inf \(JSON holds no NaN or infinity\)"
    with pytest.raises(ValueError, match=refused):
        records.write_json(tmp_path / "metrics.json", {"data": {"loss": math.nan}, "curve": [1.0, math.inf]})
    assert not (tmp_path / "metrics.json").exists()


def test_a_run_whose_metrics_hold_nan_is_not_recorded(tmp_path, shared_cache, monkeypatch, capsys):
    from repro.run import runner

    real_train = runner.train

    def train_then_nan(*args, **kwargs):
        result = real_train(*args, **kwargs)
        result["metrics"]["test_loss"] = math.nan
        return result

    monkeypatch.setattr(runner, "train", train_then_nan)
    status = runner.execute(composed(*ARM, *private(tmp_path, shared_cache), "task.source=generated"))
    err = capsys.readouterr().err
    assert status == 1
    assert error_lines(err) == [
        f"[locality_k5/listops] error: not a result, no record written (test_loss=nan is not a "
        f"number); the history is in {run_folder(tmp_path) / 'history.csv'}"
    ]
    assert not (run_folder(tmp_path) / "metrics.json").exists()


def test_freeze_leaves_out_and_names_records_of_zero_steps_or_nan(tmp_path):
    from fake_records import fixed_labels, make_record

    from repro import bundle

    runs = tmp_path / "outputs" / "runs"
    labels = fixed_labels("text", 20)
    folders = {seed: make_record(runs, "locality_k5", "text", seed, labels=labels, accuracy=0.7) for seed in (0, 1, 2)}
    zero = read_json(folders[1] / "metrics.json")
    (folders[1] / "metrics.json").write_text(json.dumps({**zero, "steps": 0}))
    text = (folders[2] / "metrics.json").read_text()
    (folders[2] / "metrics.json").write_text(text.replace('"test_acc": ', '"test_acc": NaN, "was": '))
    logged = []
    out = bundle.freeze("v1", runs, tmp_path / "results", analysis=False, log=lambda m, file=None: logged.append(m))
    manifest = read_json(out / "MANIFEST.json")
    assert [r["path"] for r in manifest["runs"]] == ["runs/locality_k5/text/budget/seed0"]
    assert manifest["left_out"] == [
        {"path": "locality_k5/text/budget/seed1", "reason": "not a result: trained 0 steps"},
        {"path": "locality_k5/text/budget/seed2", "reason": "not a result: test_acc=nan is not a number"},
    ]
    named = [line for line in logged if line.startswith("left out")]
    assert named == [f"left out {item['path']}: {item['reason']}" for item in manifest["left_out"]]


# ---------------------------------------------------------------- damaged files are recovered


def flip_a_byte(path: Path, offset: int = 200) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_damaged_best_checkpoint_is_recovered_without_retraining(
    finished, tmp_path, shared_cache, monkeypatch, capsys
):
    folder = copy_of(finished, tmp_path)
    whole = read_json(folder / "metrics.json")
    best = folder / "checkpoints" / "best.pt"
    (folder / "metrics.json").unlink()  # as if the run had stopped after its last checkpoint
    flip_a_byte(best)
    done, out, err = cli(monkeypatch, capsys, *ARM, *private(tmp_path, shared_cache))
    assert done == 0, err[-3000:]
    assert f"resuming {folder} from step 4" in out  # the last checkpoint: nothing trained again
    assert f"warning: checkpoint {best}: sha256 differs from best.pt.sha256" in err
    assert "using best.copy.pt (the same step 4) and writing it again" in err
    again = read_json(folder / "metrics.json")
    for key in ("best_val_acc", "best_val_step", "test_acc", "test_loss", "steps"):
        assert again[key] == whole[key], key
    from repro.training.checkpoints import load_checkpoint

    assert load_checkpoint(best, "cpu")["step"] == 4  # written again from the copy

    # Both copies damaged: one line naming them and the command that recovers the run.
    (folder / "metrics.json").unlink()
    flip_a_byte(best)
    flip_a_byte(folder / "checkpoints" / "best.copy.pt")
    done, out, err = cli(monkeypatch, capsys, *ARM, *private(tmp_path, shared_cache))
    lines = error_lines(err)
    assert (
        done == 2
        and len(lines) == 1
        and lines[0].startswith(f"error: no usable best-validation checkpoint (step 4): {best}: sha256 differs")
    ), err[-3000:]
    assert lines[0].endswith("the weights to test are lost: rerun with force=true to train this run again")
    assert not (folder / "metrics.json").exists()


def test_a_damaged_metrics_json_is_written_again(finished, tmp_path, shared_cache, monkeypatch, capsys):
    folder = copy_of(finished, tmp_path)
    whole = read_json(folder / "metrics.json")
    (folder / "metrics.json").write_text('{"status": "compl')
    done, _, err = cli(monkeypatch, capsys, *ARM, *private(tmp_path, shared_cache))
    assert done == 0, err[-3000:]
    assert f"warning: {folder / 'metrics.json'} is damaged (" in err
    assert read_json(folder / "metrics.json")["test_acc"] == whole["test_acc"]


def test_a_damaged_config_yaml_is_started_over_with_force(tmp_path, shared_cache, monkeypatch, capsys):
    record_with_damaged_config(tmp_path)
    done, out, err = cli(monkeypatch, capsys, *ARM, *private(tmp_path, shared_cache), "force=true")
    assert done == 0, err[-3000:]
    assert "force=true: starting over" in out and "(its config.yaml is unreadable)" in out
    assert read_json(run_folder(tmp_path) / "metrics.json")["steps"] == 4


@pytest.mark.parametrize("damage", ["truncated", "one byte changed", "meta.json garbled", "file missing"])
def test_a_damaged_cache_entry_is_detected_and_rebuilt(damage, tmp_path, capsys):
    import numpy as np

    from repro.tasks.cache import cache_key, cached_arrays

    builds = []

    def build():
        builds.append(1)
        return {"x": np.arange(4096, dtype=np.int64).reshape(64, 64), "y": np.arange(64)}, {"source": "test"}

    first, _ = cached_arrays(tmp_path, "toy", {"n": 64}, build)
    entry = tmp_path / "toy" / cache_key({"n": 64})
    x_file = entry / "x.npy"
    if damage == "truncated":
        x_file.write_bytes(x_file.read_bytes()[:1000])
    elif damage == "one byte changed":
        flip_a_byte(x_file, 5000)
    elif damage == "meta.json garbled":
        (entry / "meta.json").write_text("{")
    else:
        x_file.unlink()
    arrays, meta = cached_arrays(tmp_path, "toy", {"n": 64}, build)
    assert len(builds) == 2 and meta["cache_hit"] is False
    assert np.array_equal(arrays["x"], first["x"]) and np.array_equal(arrays["y"], first["y"])
    assert f"warning: cache entry {entry} is damaged (" in capsys.readouterr().err
    again, meta = cached_arrays(tmp_path, "toy", {"n": 64}, build)
    assert len(builds) == 2 and meta["cache_hit"] is True  # the rebuilt entry is whole


WAIT_FOR_ENTRY = """
import sys
import numpy as np
from repro.tasks.cache import cached_arrays

def build():
    print("built", flush=True)
    return {"x": np.zeros(3)}, {}

arrays, meta = cached_arrays(sys.argv[1], "toy", {"n": 3}, build)
print("hit" if meta["cache_hit"] else "miss", arrays["x"].tolist(), flush=True)
"""


def test_a_second_process_waits_for_the_build_and_loads_it(tmp_path):
    """While one process builds an entry, another asking for it waits and loads it, not building again."""
    import subprocess
    import time

    import numpy as np

    from repro.tasks.cache import build_lock, cache_key, store

    entry = tmp_path / "toy" / cache_key({"n": 3})
    with build_lock(entry):
        waiter = subprocess.Popen(
            [sys.executable, "-c", WAIT_FOR_ENTRY, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        line = waiter.stderr.readline().decode()
        assert line == f"waiting for another process to build cache entry {entry}\n"
        time.sleep(0.2)
        assert waiter.poll() is None  # still waiting
        store(entry, {"n": 3}, {"x": np.arange(3.0)}, {})
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err.decode()
    assert out.decode() == "hit [0.0, 1.0, 2.0]\n"  # the stored arrays, never its own build's zeros


HOLD_LOCK = """
import sys, time
from pathlib import Path
from repro.tasks.cache import build_lock

with build_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_a_builder_that_dies_leaves_no_lock_behind(tmp_path):
    import subprocess

    import numpy as np

    from repro.tasks.cache import cache_key, cached_arrays

    entry = tmp_path / "toy" / cache_key({"n": 3})
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(entry)], stdout=subprocess.PIPE)
    assert holder.stdout.readline() == b"locked\n"
    holder.kill()
    holder.wait(timeout=60)
    arrays, meta = cached_arrays(tmp_path, "toy", {"n": 3}, lambda: ({"x": np.ones(3)}, {}))
    assert meta["cache_hit"] is False and arrays["x"].tolist() == [1.0, 1.0, 1.0]
