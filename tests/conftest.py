"""Shared helpers: run the Hydra entry point in a subprocess with a private output and cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Under pytest-xdist (the default: two workers, for two cores) each worker and every run it starts uses one
# CPU thread, so two workers do not fight over the cores; results do not depend on the thread count.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)

# The runs and grids the tests start as subprocesses import the package afresh; with the bytecode cache
# switched off (PYTHONDONTWRITEBYTECODE, set in some environments) each would compile it again, 20-55 s
# of the default run on two cores (364 s against 308-346 s, before --dist worksteal). They cache it, as
# Python does by default.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "experiments" / "run.py"
CONF = ROOT / "experiments" / "conf"


def assert_same_gradients(out, expected, inputs, rtol: float, atol: float) -> None:
    """The gradients of ``sum(out * w)`` and ``sum(expected * w)`` (one random ``w``) with respect to each of
    ``inputs`` agree: a path against its reference, backward as well as forward."""
    import torch

    weights = torch.randn_like(out)
    got = torch.autograd.grad((out * weights).sum(), inputs)
    want = torch.autograd.grad((expected * weights).sum(), inputs)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


# Smoke ListOps shortened to 50-300 tokens and 32/16/16 trees, for tests that run whole arms
# (add "task=listops" and the profile; full-length smoke ListOps runs in test_runner/test_listops).
SHORT_LISTOPS_OVERRIDES = [
    "task.max_len=300",
    "task.generate.min_len=50",
    "task.generate.max_len=300",
    "++profile.tasks.listops.generate.n_train=32",
    "++profile.tasks.listops.generate.n_val=16",
    "++profile.tasks.listops.generate.n_test=16",
]


def run_cli(
    *overrides: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    """``python experiments/run.py <overrides>``; returns the completed process (text output)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, str(RUN), *overrides],
        cwd=cwd or ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One data cache for every CLI test of the run (generated ListOps is reused)."""
    return tmp_path_factory.mktemp("cache")


def composed(*overrides: str):
    """The run configuration experiments/run.py would get for ``overrides`` (Hydra's compose API)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))
