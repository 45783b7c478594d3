"""``lra-paper`` and ``python -m repro.paper``: a help page from ``commands.py``'s parsers before the tables' and
figures' modules (pandas, scipy, matplotlib, torch) load; the work is ``repro.paper.cli``'s."""

from __future__ import annotations

import sys

from ..invocation import invoked_as
from .commands import HELP_FLAGS, parser, table1_parser


def main(argv: list[str] | None = None) -> int:
    """``lra-paper`` (and ``python -m repro.paper``): the help pages here, the work in ``repro.paper.cli``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = invoked_as("lra-paper")
    asks_help = any(arg in HELP_FLAGS for arg in argv)
    if asks_help and argv[:1] == ["lra-table1"]:
        table1_parser(prog).parse_args(argv[1:])  # prints the help page and exits 0
    elif asks_help and argv[:1] != ["pathfinder-samples"]:
        parser(prog).parse_args(argv)
    from .cli import main as run  # after the help pages: the tables' modules load here

    return run(argv, prog)
