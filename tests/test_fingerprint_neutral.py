"""A setting added after run fingerprints, at the value that reproduces earlier runs, leaves the
fingerprint as it was, so a checkpoint written before the setting existed still resumes."""

import pytest

from repro import records, runner

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
    return records.run_fingerprint(run, {"test": {"inputs": "a", "labels": "b"}}, runner.FREE_TRAIN_KEYS,
                                   runner.FINGERPRINT_NEUTRAL)  # fmt: skip


def _with(key, value):
    block, name = key.split(".", 1)
    return {**RUN, block: {**RUN[block], name: value}}


@pytest.mark.parametrize("key", sorted(runner.FINGERPRINT_NEUTRAL))
def test_a_neutral_key_at_its_implicit_value_keeps_the_fingerprint(key):
    assert _fingerprint(_with(key, runner.FINGERPRINT_NEUTRAL[key])) == _fingerprint(RUN)


@pytest.mark.parametrize("key", sorted(runner.FINGERPRINT_NEUTRAL))
def test_a_neutral_key_at_another_value_changes_the_fingerprint(key):
    assert _fingerprint(_with(key, "another")) != _fingerprint(RUN)


def test_neutral_keys_are_implicit_settings():
    assert all(runner.IMPLICIT_SETTINGS[k] == v for k, v in runner.FINGERPRINT_NEUTRAL.items())


def test_other_settings_still_change_the_fingerprint():
    assert _fingerprint(_with("model.d_model", 64)) != _fingerprint(RUN)
