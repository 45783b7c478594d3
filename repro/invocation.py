"""How the user started this process, for usage lines and records: ``lra-bundle`` for an installed command,
``python -m repro.bundle`` for a module of the package, ``python experiments/run.py`` for a script.

Standard library only: the command lines print their help through it before importing anything heavy.
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def invoked_as(default: str, argv0: str | None = None) -> str:
    """The command as typed: an installed script by its name, a module of this package as ``python -m MODULE``
    (its package for a ``__main__.py``), another Python file as ``python PATH`` (PATH as typed); ``default`` (the
    installed name) when there is no script (``python -c``, the interactive interpreter)."""
    argv0 = (sys.argv[0] if sys.argv else "") if argv0 is None else argv0
    if argv0 in ("", "-c", "-"):
        return default
    path = Path(argv0)
    if path.suffix != ".py":
        return path.name
    try:
        inside = path.resolve().relative_to(PACKAGE.parent)
    except ValueError:
        return f"python {argv0}"
    if inside.parts[0] != PACKAGE.name:
        return f"python {argv0}"
    parts = list(inside.with_suffix("").parts)
    if parts[-1] == "__main__":
        parts.pop()
    return "python -m " + ".".join(parts)


def fail(message: str) -> None:
    """One line on stderr, exit status 2 (a setup error, before anything runs)."""
    print(message, file=sys.stderr)
    raise SystemExit(2)
