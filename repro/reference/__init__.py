"""The two papers' published numbers as CSV (see README.md here), shipped with the package.

``published(name)`` reads one table as a pandas DataFrame; names are the CSV stems,
e.g. ``lra_table1_accuracy`` or ``followup_table1_locality``.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

FOLDER = Path(__file__).resolve().parent
TABLES = sorted(p.stem for p in FOLDER.glob("*.csv"))


def published(name: str) -> pd.DataFrame:
    """The published table ``name`` (a CSV stem in this folder)."""
    path = FOLDER / f"{name}.csv"
    if not path.exists():
        raise KeyError(f"no published table {name!r}; there are: {', '.join(TABLES)}")
    return pd.read_csv(path)
