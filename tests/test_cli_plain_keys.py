"""A plain ``key=value`` whose key config.yaml lacks is refused in one line naming the block that holds it and
the fix (exit status 2), before Hydra would refuse it in its own words (exit status 1)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import CONF, ROOT, RUN

from repro.cli import command_line_problem

PLUS = "(settings under train and model are added to the arm's with a leading +)"
SETTINGS = (
    "arm, budget, cache_dir, data_dir, debug, device, force, hydra, logger, model, output_dir, profile, progress, "
    "resume, seed, task, techniques, train, workers"
)


@pytest.mark.parametrize(
    "typed, said",
    [
        ("lr=0.1", f"lr=0.1: lr is a training setting; set it with +train.lr=0.1 {PLUS}"),
        (
            "weight_decay=0",
            f"weight_decay=0: weight_decay is a training setting; set it with +train.weight_decay=0 {PLUS}",
        ),
        ("kernel_size=9", f"kernel_size=9: kernel_size is a model setting; set it with +model.kernel_size=9 {PLUS}"),
        (
            "attention_params.window=8",
            f"attention_params.window=8: attention_params is a model setting; set it with "
            f"+model.attention_params.window=8 {PLUS}",
        ),
        (
            "seeed=1",
            f"seeed=1: no setting 'seeed' in {CONF / 'config.yaml'}; did you mean seed? the settings: {SETTINGS} "
            "(training and model settings: +train.KEY=VALUE, +model.KEY=VALUE)",
        ),
    ],
)
def test_a_plain_key_outside_config_yaml_is_named_with_its_fix(typed, said):
    assert command_line_problem(["arm=locality_k61", "task=listops", typed], CONF) == said


def test_keys_config_yaml_has_and_hydras_own_syntax_pass():
    typed = [
        "seed=1",
        "budget.minutes=3",
        "debug.traceback=true",
        "task.max_len=300",
        "+train.lr=0.1",
        "++model.depth=2",
        "~task.generate",
        "hydra/launcher=slurm",
        "hydra.verbose=true",
    ]
    assert command_line_problem(["arm=locality_k61", "task=listops", *typed], CONF) is None


def test_plain_lr_exits_2_with_the_one_line_message(tmp_path):
    done = subprocess.run(
        [sys.executable, str(RUN), "arm=locality_k61", "task=listops", "lr=0.1", f"output_dir={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert (
        done.stderr
        == f"experiments/run.py: error: lr=0.1: lr is a training setting; set it with +train.lr=0.1 {PLUS}\n"
    )
    assert not any(tmp_path.iterdir())
