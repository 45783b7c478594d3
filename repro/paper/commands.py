"""The ``lra-paper`` command line's parsers, light enough that ``--help`` answers before the tables' and
figures' modules (pandas, scipy, matplotlib, torch) load; the entry point is ``entry.py``, the work
``repro.paper.cli``'s."""

from __future__ import annotations

import argparse
from pathlib import Path

PAPER_DIR = Path(__file__).resolve().parents[2] / "paper"  # a checkout's paper/ folder
DEFAULT_CLAIMS = PAPER_DIR / "claims.yaml"
HELP_FLAGS = ("-h", "--help")
SUBCOMMANDS = ("lra-table1", "pathfinder-samples")
DEBUG_HELP = "on refused input, show the traceback instead of the one-line error (exit status 2)"

USAGE = """\
{prog} --bundle DIR [--bundle DIR ...] [options]
       {prog} lra-table1 --bundle DIR [--bundle DIR ...] [options]
       {prog} pathfinder-samples [options]"""

COMMANDS = """\
Regenerate both papers' tables and figures from a bundle, ours beside the published numbers:
<out>/tables/<name>.md and .tex, <out>/figures/<name>.png. Same bundle, same bytes.

commands:
  --bundle DIR ...      every table and figure of both papers, the claims with their verdicts,
                        the trivial baselines (the options below)
  lra-table1            LRA Table 1 at the release's protocol, the ranking table and LRA Figure 3
                        ({prog} lra-table1 --help)
  pathfinder-samples    grids of generated Pathfinder and Path-X images, as the model sees them
                        ({prog} pathfinder-samples --help)"""

EXAMPLES = """\
Examples:
  {prog} --bundle results/v0.1.1-budget --out my_tables     # my_tables/tables/, my_tables/figures/
  {prog} lra-table1 --bundle results/v0.2-lra --out my_tables
  {prog} pathfinder-samples --difficulty hard --out my_tables

Without --out, the files go to the checkout's paper/ folder."""


def parser(prog: str = "lra-paper") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        usage=USAGE.format(prog=prog),
        description=COMMANDS.format(prog=prog),
        epilog=EXAMPLES.format(prog=prog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--bundle", type=Path, action="append", required=True, help="a bundle folder, e.g. results/v1 (repeatable)"
    )
    p.add_argument("--out", type=Path, default=PAPER_DIR, help=f"where tables/ and figures/ go (default: {PAPER_DIR})")
    p.add_argument("--profile", help="profile to show (default: paper, else budget, else smoke)")
    p.add_argument(
        "--claims",
        "--comparisons",
        dest="claims",
        type=Path,
        default=DEFAULT_CLAIMS,
        help=f"the claims file (default: {DEFAULT_CLAIMS})",
    )
    p.add_argument("--listops-arm", help="arm of the ListOps per-operator figure (default: best mean ListOps accuracy)")
    p.add_argument(
        "--study",
        type=Path,
        action="append",
        help="a bundle of the LRA campaign (repeatable): its LRA Table 1 and Figure 3 are written as "
        "'lra-paper lra-table1 --bundle STUDY' writes them and lead tables/index.md",
    )
    p.add_argument("--no-verify", action="store_true", help="skip checking the bundle's checksums first")
    p.add_argument(
        "--config-dir",
        action="append",
        default=[],
        help="a config folder holding arms of your own, as experiments/run.py --config-dir took them (repeatable): "
        "their protocol is read from it",
    )
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return p


def table1_parser(prog: str = "lra-paper") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{prog} lra-table1",
        description="LRA Table 1 at the release's protocol and the ranking table, from one or more bundles.",
    )
    p.add_argument("--bundle", type=Path, action="append", required=True, help="a bundle folder (repeatable)")
    p.add_argument(
        "--out",
        type=Path,
        default=PAPER_DIR,
        help=f"the table goes to OUT/tables, Figure 3 to OUT/figures (default: {PAPER_DIR})",
    )
    p.add_argument("--profile", default="paper", help="profile to show (default: paper)")
    p.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS, help=f"the claims file (default: {DEFAULT_CLAIMS})")
    p.add_argument("--no-verify", action="store_true", help="skip checking the bundles' checksums first")
    p.add_argument(
        "--leave-out",
        type=Path,
        action="append",
        default=[],
        help="a record folder of the bundles not to show, e.g. one run before its arm's settings were corrected "
        "(repeatable; the table names it)",
    )
    p.add_argument(
        "--leave-out-from",
        type=Path,
        action="append",
        default=[],
        help="a grid file whose 'superseded' records are left out too, each a record of the bundles given, its path "
        "relative to the working directory as in the grid file (run from the repository root; repeatable)",
    )
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return p
