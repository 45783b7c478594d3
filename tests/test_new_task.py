"""A task added as its module and its YAML (and an arm block) alone: a toy task written to a temporary folder,
found by ``repro.tasks.load_all`` as a module of the package, trained at profile=smoke through the real runner.

The toy module is written exactly as a task module in ``repro/tasks/`` is (``from . import TASKS``); the test
puts its folder on ``repro.tasks.__path__`` instead of into the checkout. Its YAML declares paper-sized splits
and its own smoke default (``profiles.smoke``), which the smoke profile knows nothing of.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, read_json

TOY = "parity_toy"

TOY_MODULE = '''\
"""Parity of the first token (a toy task): random token rows, label = first token odd."""

import numpy as np

from . import TASKS
from .base import Split, TaskData, TaskEntry, empty_task


def build(cfg, data_dir, cache_dir, workers=1) -> TaskData:
    rng = np.random.default_rng(cfg["data_seed"])

    def split(count: int) -> Split:
        inputs = rng.integers(1, cfg["vocab_size"], size=(count, cfg["max_len"]))
        return Split(inputs.astype(np.int64), (inputs[:, 0] % 2).astype(np.int64))

    sizes = cfg["generate"]
    splits = {name: split(sizes[f"n_{name}"]) for name in ("train", "val", "test")}
    info = {"source": "generated", "sizes": {name: len(s) for name, s in splits.items()}}
    return TaskData(
        name=cfg["name"], num_classes=2, vocab_size=cfg["vocab_size"], max_len=cfg["max_len"], info=info, **splits
    )


def shape(cfg) -> TaskData:
    return empty_task(cfg, (cfg["max_len"],), 2, cfg["vocab_size"])


TASKS.register("parity_toy")(TaskEntry(build, shape, titles={"parity_toy": "Parity (toy)"}))
'''

TOY_YAML = """\
# @package task
name: parity_toy
builder: parity_toy
source: generated
max_len: 24
vocab_size: 12
data_seed: 0
generate: {n_train: 200000, n_val: 5000, n_test: 5000}
profiles:
  smoke:
    generate: {n_train: 48, n_val: 16, n_test: 16}
"""

TOY_ARM = """\
# @package arm
name: toy_conv
model: {backbone: conv, d_model: 16, d_hidden: 16, kernel_size: 3, depth: 1}
train: {lr: 0.001, weight_decay: 0.0, batch_size: 8, epochs: 1}
tasks:
  parity_toy: {}
"""

LAUNCH = """\
import sys

import repro.tasks

repro.tasks.__path__.append({folder!r})  # as if the toy module sat in repro/tasks/

from repro.cli import run

run.main()
"""


def write_toy(tmp_path: Path) -> tuple[Path, Path]:
    """The toy task module's folder and a config folder with its YAML and an arm that names it."""
    modules, conf = tmp_path / "tasks", tmp_path / "conf"
    modules.mkdir()
    (modules / f"{TOY}.py").write_text(TOY_MODULE)
    for group, name, text in (("task", TOY, TOY_YAML), ("arm", "toy_conv", TOY_ARM)):
        (conf / group).mkdir(parents=True, exist_ok=True)
        (conf / group / f"{name}.yaml").write_text(text)
    return modules, conf


@pytest.fixture
def toy_registered(tmp_path, monkeypatch):
    """The toy module found by ``load_all`` in this process; the task table and sys.modules restored after."""
    import repro.tasks

    modules, conf = write_toy(tmp_path)
    repro.tasks.load_all()
    monkeypatch.setattr(repro.tasks, "__path__", [*repro.tasks.__path__, str(modules)])
    monkeypatch.setattr(repro.tasks.TASKS, "_table", dict(repro.tasks.TASKS._table))
    yield conf
    sys.modules.pop(f"repro.tasks.{TOY}", None)


def test_a_new_task_is_registered_by_its_module_and_named_in_the_claims_file(toy_registered, tmp_path):
    from repro.paper import claims
    from repro.run.footprint import task_shape
    from repro.tasks import get_task_builder, task_titles

    assert task_titles()[TOY] == "Parity (toy)"
    assert claims.task_names()[-1] == TOY  # after the LRA tasks, in Table 1's order
    build = get_task_builder(TOY)
    assert build.__module__ == f"repro.tasks.{TOY}"
    cfg = yaml.safe_load((toy_registered / "task" / f"{TOY}.yaml").read_text())
    cfg["generate"] = cfg["profiles"]["smoke"]["generate"]
    built, shape = build(cfg, tmp_path, tmp_path, 1), task_shape(cfg)  # --cfg run's model size, without data
    facts = ("num_classes", "vocab_size", "max_len", "two_tower", "pad_id")
    assert [getattr(shape, f) for f in facts] == [getattr(built, f) for f in facts] == [2, 12, 24, False, 0]
    assert shape.train.inputs.shape[1:] == built.train.inputs.shape[1:] and len(shape.train) == 0


def test_a_new_task_trains_at_profile_smoke_through_the_runner_with_its_own_smoke_default(tmp_path):
    modules, conf = write_toy(tmp_path)
    launch = tmp_path / "launch.py"
    launch.write_text(LAUNCH.format(folder=str(modules)))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(launch), "--config-dir", str(conf), "arm=toy_conv", f"task={TOY}", "profile=smoke"]
        + [f"output_dir={out}", f"cache_dir={tmp_path / 'cache'}", "progress=false", "workers=1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    folder = out / "runs" / "toy_conv" / TOY / "smoke" / "seed0"
    metrics = read_json(folder / "metrics.json")
    assert metrics["status"] == "complete" and metrics["task"] == TOY and metrics["arm"] == "toy_conv"
    assert metrics["data"]["sizes"] == {"train": 48, "val": 16, "test": 16}  # the YAML's smoke default
    task = yaml.safe_load((folder / "config.yaml").read_text())["task"]
    assert task["generate"] == {"n_train": 48, "n_val": 16, "n_test": 16}
    assert "profiles" not in task  # the per-profile defaults are applied, not recorded as a setting
