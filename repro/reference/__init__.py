"""The two papers' published numbers as CSV (see README.md here), shipped with the package.

``published(name)`` reads one table as a pandas DataFrame; names are the CSV stems,
e.g. ``lra_table1_accuracy`` or ``followup_table1_locality``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

FOLDER = Path(__file__).resolve().parent

# LRA Tables 1 and 2: the published model name (a row of lra_table1_accuracy.csv /
# lra_table2_efficiency.csv) -> our arm (experiments/conf/arm/lra_*.yaml).
LRA_MODEL_ARMS = {
    "transformer": "lra_transformer",
    "local_attention": "lra_local",
    "sparse_transformer": "lra_sparse",
    "longformer": "lra_longformer",
    "linformer": "lra_linformer",
    "reformer": "lra_reformer",
    "sinkhorn": "lra_sinkhorn",
    "synthesizer": "lra_synthesizer",
    "bigbird": "lra_bigbird",
    "linear_transformer": "lra_linear",
    "performer": "lra_performer",
}
TABLES = sorted(p.stem for p in FOLDER.glob("*.csv"))


def published(name: str) -> pd.DataFrame:
    """The published table ``name`` (a CSV stem in this folder)."""
    path = FOLDER / f"{name}.csv"
    if not path.exists():
        raise KeyError(f"no published table {name!r}; there are: {', '.join(TABLES)}")
    return pd.read_csv(path)
