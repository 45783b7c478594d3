"""Command-line entry points (``[project.scripts]`` in pyproject.toml): ``lra-run``, ``lra-bench``, and where
they find their Hydra configuration: experiments/conf of the checkout.

experiments/run.py and experiments/bench.py are thin wrappers around the same ``main()``s. Before Hydra
composes a run, ``command_line_problem`` answers two common mistakes in one line (below).

The configs stay in the checkout (users add arms there, or pass ``--config-dir``), so
``lra-run`` and ``lra-bench`` need the package installed editable (``pip install -e .``),
which leaves it in the checkout, next to experiments/.
"""

from __future__ import annotations

import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
CONF = CHECKOUT / "experiments" / "conf"


def fail(message: str) -> None:
    """One line on stderr, exit status 2 (a setup error, before anything runs)."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def config_dir(prog: str, config_name: str, conf: Path = CONF) -> str:
    """``conf`` as a path for ``hydra.main``; exits 2 naming the fix when it lacks ``<config_name>.yaml``."""
    if not (conf / f"{config_name}.yaml").is_file():
        fail(
            f"{prog}: no {config_name}.yaml under {conf}: the Hydra configs live in the checkout's experiments/conf, "
            "so install the checkout editable (pip install -e <checkout>) or run the experiments/ script from it"
        )
    return str(conf)


def require_same_checkout(script: str) -> None:
    """Exit 2 when the experiments/ ``script`` belongs to another checkout than the imported package
    (which would run that checkout's code and configs)."""
    here = Path(script).resolve().parents[1]
    if here != CHECKOUT:
        fail(
            f"{Path(script).name}: `import repro` gives {CHECKOUT / 'repro'}, not this checkout's: "
            f"run `pip install -e .` in {here} (or set PYTHONPATH={here})"
        )


def dispatch(prog: str, doc: str, commands: dict, argv: list[str]) -> int:
    """A script of subcommands (``prog COMMAND [options]``): ``-h``/``--help`` prints ``doc``; no or an
    unknown command is one usage line on stderr, exit status 2; else the command's exit status (None: 0)."""
    if argv[:1] in (["-h"], ["--help"]):
        print(doc)
        return 0
    if not argv or argv[0] not in commands:
        print(f"usage: {prog} {{{','.join(commands)}}} [options] (--help: what each does)", file=sys.stderr)
        return 2
    status = commands[argv[0]](argv[1:])
    return 0 if status is None else status


# --------------------------------------------------------------------------- the run command line
# Mistakes Hydra would answer with a multi-line error, answered in one line first (``lra-run`` and
# experiments/run.py, before Hydra composes): a config group value with no file (``arm=megaa``; also
# task, profile, techniques, and each value of a sweep such as ``arm=a,b``), looked up in
# experiments/conf and every ``--config-dir``; and a setting under ``train.`` or ``model.`` typed
# without ``+`` (config.yaml holds both blocks empty, the arm and profile fill them, so Hydra refuses
# ``train.lr=0.1``; the fix is ``+train.lr=0.1``).

GROUPS = ("arm", "task", "profile", "techniques")
ADDED_BLOCKS = ("train.", "model.")


def config_dirs(argv: list[str], conf: Path) -> list[Path]:
    """``conf`` and the folders given with ``--config-dir`` / ``-cd`` or ``--config-path`` / ``-cp``
    (``DIR`` or ``=DIR``)."""
    dirs = [conf]
    for i, arg in enumerate(argv):
        if arg in ("--config-dir", "-cd", "--config-path", "-cp") and i + 1 < len(argv):
            dirs.append(Path(argv[i + 1]))
        elif arg.startswith(("--config-dir=", "--config-path=")):
            dirs.append(Path(arg.split("=", 1)[1]))
    return dirs


def group_options(group: str, dirs: list[Path]) -> list[str]:
    return sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml")})


def command_line_problem(argv: list[str], conf: Path) -> str | None:
    """The first mistake on the command line ``argv`` (the arguments after the script), or None."""
    if any(arg.startswith(("hydra.searchpath", "+hydra.searchpath")) for arg in argv):
        return None  # groups may come from anywhere: leave the lookup to Hydra
    dirs = config_dirs(argv, conf)
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or arg.startswith("-"):
            continue
        if key.startswith(ADDED_BLOCKS):
            return f"{arg}: settings under {key.split('.')[0]} are added to the arm's with a leading +: +{arg}"
        if key in GROUPS and value not in ("null", "") and "(" not in value:  # choice(...), glob(...): Hydra's
            options = group_options(key, dirs)
            unknown = [v for v in value.split(",") if v not in options]
            if unknown:
                where = " or ".join(str(d / key) for d in dirs)
                return f"{key}={unknown[0]}: no {unknown[0]}.yaml in {where}; choose one of: {', '.join(options)}"
    return None
