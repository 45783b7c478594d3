"""The installed command-line entry points ([project.scripts]) and the experiments/ wrappers around them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repro.cli import config_dir, require_same_checkout
from repro.invocation import invoked_as

ROOT = Path(__file__).resolve().parents[1]

TOOLS = ["lra-run", "lra-bench", "lra-grid", "lra-bundle", "lra-paper"]
# tool -> its commands, each of which its --help must list (the default command has none)
COMMANDS = {
    "lra-run": ["--cfg run", "-m"],
    "lra-bench": [],
    "lra-grid": ["ledger", "unpack"],
    "lra-bundle": ["freeze", "verify", "cite", "ls"],
    "lra-paper": ["lra-table1", "pathfinder-samples"],
}
HEAVY = ("torch", "hydra", "omegaconf", "matplotlib")


def scripts() -> dict[str, str]:
    """pyproject.toml's [project.scripts]: console script -> ``module:function``."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def entry_point_help(tool: str, argv0: str | None = None) -> subprocess.CompletedProcess:
    """``TOOL --help`` as its console script runs it (the function pyproject names, ``sys.argv[0]`` the script's
    path), in a fresh interpreter that then prints which heavy modules it had imported."""
    module, _, function = scripts()[tool].partition(":")
    argv0 = argv0 or str(Path(sys.prefix) / "bin" / tool)
    code = (
        f"import sys; sys.argv = [{argv0!r}, '--help']\n"
        f"from {module} import {function}\n"
        f"try:\n    status = {function}()\nexcept SystemExit as stop:\n    status = stop.code\n"
        f"print('imported:', *sorted(m for m in {HEAVY!r} if m in sys.modules), 'status:', status or 0)"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_every_tool_is_declared():
    assert sorted(scripts()) == sorted(TOOLS)


@pytest.mark.parametrize("tool", TOOLS)
def test_each_tools_help_names_it_lists_its_commands_and_shows_examples(tool):
    done = entry_point_help(tool)
    assert done.returncode == 0, done.stderr[-2000:]
    page, _, imported = done.stdout.rpartition("imported:")
    assert page.startswith(f"usage: {tool} ") and imported.endswith("status: 0\n"), done.stdout[-2000:]
    assert "\nExamples:\n" in page and f"\n  {tool} " in page.split("\nExamples:\n")[1]
    for command in COMMANDS[tool]:
        assert re.search(rf"\n +{re.escape(command)} ", page) or f"\n  {tool} {command} " in page, command
    assert "powered by Hydra" not in page and "\narm:\n" not in page  # not Hydra's page and config dump


@pytest.mark.parametrize("tool", TOOLS)
def test_help_imports_neither_torch_nor_hydra(tool):
    """The under-3-seconds help: printed before torch, Hydra or matplotlib is imported (each takes seconds)."""
    done = entry_point_help(tool)
    assert done.stdout.rpartition("imported:")[2] == " status: 0\n", done.stdout[-500:] + done.stderr[-2000:]


@pytest.mark.parametrize(
    "command, name",
    [
        (["experiments/run.py"], "python experiments/run.py"),
        (["experiments/bench.py"], "python experiments/bench.py"),
        (["-m", "repro.grid"], "python -m repro.grid"),
        (["-m", "repro.bundle"], "python -m repro.bundle"),
        (["-m", "repro.paper"], "python -m repro.paper"),
    ],
)
def test_the_checkout_forms_name_themselves_as_typed(command, name):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, *command, "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"usage: {name} ") and f"\n  {name} " in done.stdout, done.stdout[:500]


def test_invoked_as_maps_scripts_modules_and_files():
    assert invoked_as("lra-grid", "/venv/bin/lra-grid") == "lra-grid"
    assert invoked_as("lra-bundle", str(ROOT / "repro" / "bundle.py")) == "python -m repro.bundle"
    assert invoked_as("lra-grid", str(ROOT / "repro" / "grid" / "__main__.py")) == "python -m repro.grid"
    assert invoked_as("lra-run", "experiments/run.py") == "python experiments/run.py"
    assert invoked_as("lra-paper", "-c") == "lra-paper"


@pytest.mark.parametrize("script", TOOLS)
def test_installed_script_prints_its_help(script):
    path = shutil.which(script)
    if path is None:
        pytest.skip(f"{script} is not on PATH: install the checkout (pip install -e .) to test its entry points")
    done = subprocess.run([path, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"usage: {script} ") and "\nExamples:\n" in done.stdout, done.stdout[:2000]


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
