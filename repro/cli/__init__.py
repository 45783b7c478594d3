"""Command-line entry points (``[project.scripts]`` in pyproject.toml): ``lra-run``, ``lra-bench``, and where
they find their Hydra configuration: experiments/conf of the checkout.

experiments/run.py and experiments/bench.py are thin wrappers around the same ``main()``s.

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
