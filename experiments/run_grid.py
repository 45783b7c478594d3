"""Run a grid of (arm, task, seed) cells: ``python experiments/run_grid.py GRID.yaml [options] [-- overrides]``.

The same command as the ``lra-grid`` console script (``repro/grid/cli.py`` documents every
option): N cells at once on each GPU (``--gpus all --per-gpu N``), a deadline that checkpoints
the running cells, ``--plan`` (GPU-minutes per cell), and the slot driver for GPU machines lent
for 30 minutes, e.g.::

    python experiments/run_grid.py experiments/grids/v0.2-lra.yaml --gpus all --per-gpu 3 \\
        --deadline-minutes 24 --plan-file experiments/grids/v0.2-lra/plan.csv --archive-to $OUT \\
        --resume-from <previous slot's files> -- data_dir=.gpu/data output_dir=outputs

and ``python experiments/run_grid.py ledger GRID.yaml --records DIR`` for the grid's LEDGER.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from repro.grid.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
