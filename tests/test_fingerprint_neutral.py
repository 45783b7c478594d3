"""A setting added after run fingerprints, at the value that reproduces earlier runs, leaves the
fingerprint as it was, so a checkpoint written before the setting existed still resumes."""

import pytest

from repro import records
from repro.run import runner

RUN = {
    "arm": "lra_transformer",
    "profile": "paper",
    "seed": 1,
    "model": {"d_model": 128, "n_heads": 8},
    "task": {"name": "image", "channels": "gray"},
    "train": {"lr": 0.0005, "log_every": 100},
    "techniques": {},
    "subset": None,
}


def _fingerprint(run):
    neutral = runner.fingerprint_neutral(run["task"]["name"])
    return records.run_fingerprint(run, {"test": {"inputs": "a", "labels": "b"}}, runner.FREE_TRAIN_KEYS, neutral)


TASKS = ("image", "listops", "text", "retrieval")
CASES = [(task, key) for task in TASKS for key in sorted(runner.fingerprint_neutral(task))]


def _with(run, key, value):
    block, name = key.split(".", 1)
    return {**run, block: {**run[block], name: value}}


def _run(task):
    return {**RUN, "task": {**RUN["task"], "name": task}}


@pytest.mark.parametrize(("task", "key"), CASES)
def test_a_neutral_key_at_its_implicit_value_keeps_the_fingerprint(task, key):
    value = runner.fingerprint_neutral(task)[key]
    assert _fingerprint(_with(_run(task), key, value)) == _fingerprint(_run(task))


@pytest.mark.parametrize(("task", "key"), CASES)
def test_a_neutral_key_at_another_value_changes_the_fingerprint(task, key):
    assert _fingerprint(_with(_run(task), key, "another")) != _fingerprint(_run(task))


def test_every_neutral_key_is_neutral_somewhere():
    assert {key for _, key in CASES} == set(runner.FINGERPRINT_NEUTRAL_KEYS)


def test_truncate_is_neutral_at_the_value_each_task_ran_with():
    assert runner.fingerprint_neutral("listops")["task.truncate"] is False
    assert runner.fingerprint_neutral("text")["task.truncate"] is True


def test_other_settings_still_change_the_fingerprint():
    assert _fingerprint(_with(RUN, "model.d_model", 64)) != _fingerprint(RUN)
