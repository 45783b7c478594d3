"""Regenerate both papers' tables and figures from a bundle: ``python paper/make.py --bundle results/v1``.

A thin wrapper of ``lra-paper`` (repro/paper/cli.py), kept for its command line; ``--help`` lists
the options and the tables and figures written.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python paper/make.py` from a checkout finds repro

from repro.paper.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
