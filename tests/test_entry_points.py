"""The installed command-line entry points ([project.scripts]) and the experiments/ wrappers around them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repro.cli import config_dir, require_same_checkout

ROOT = Path(__file__).resolve().parents[1]

# script -> text its --help must print (a Hydra app names its job, lists the config groups and
# shows the composed config: the run's arm, the benchmark's lengths)
HELP_TEXT = {
    "lra-run": ["run is powered by Hydra.\n", "\narm:\n  name: "],
    "lra-bench": ["bench is powered by Hydra.\n", "\nlengths:\n- "],
    "lra-bundle": ["\npositional arguments:\n", "{freeze,verify,cite,ls}"],
}


@pytest.mark.parametrize("script", sorted(HELP_TEXT))
def test_installed_script_prints_its_help(script):
    path = shutil.which(script)
    if path is None:
        pytest.skip(f"{script} is not on PATH: install the checkout (pip install -e .) to test its entry points")
    done = subprocess.run([path, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    for text in HELP_TEXT[script]:
        assert text in done.stdout, (text, done.stdout[:2000])


def test_missing_configs_exit_2_naming_the_fix(tmp_path, capsys):
    """A non-editable install has no experiments/conf next to the package."""
    with pytest.raises(SystemExit) as exit_info:
        config_dir("lra-run", "config", conf=tmp_path)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        f"lra-run: no config.yaml under {tmp_path}: the Hydra configs live in the checkout's "
        "experiments/conf, so install the checkout editable (pip install -e <checkout>) or run the "
        "experiments/ script from it\n"
    )
    assert config_dir("lra-run", "config") == str(ROOT / "experiments" / "conf")


def test_a_wrapper_of_another_checkout_refuses_the_imported_package(tmp_path, capsys):
    other = tmp_path / "experiments" / "run.py"
    with pytest.raises(SystemExit) as exit_info:
        require_same_checkout(str(other))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        f"run.py: `import repro` gives {ROOT / 'repro'}, not this checkout's: "
        f"run `pip install -e .` in {tmp_path} (or set PYTHONPATH={tmp_path})\n"
    )
    require_same_checkout(str(ROOT / "experiments" / "run.py"))  # this checkout's own: no exit


@pytest.mark.parametrize("name", ["run", "bench"])
def test_wrapper_without_the_package_says_how_to_install(tmp_path, name):
    """``python -S`` skips site-packages, where the editable install's path lives."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = ROOT / "experiments" / f"{name}.py"
    done = subprocess.run(
        [sys.executable, "-S", str(script), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"experiments/{name}.py: cannot import the repro package: run `pip install -e .` in this checkout\n"
    )
