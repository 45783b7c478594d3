"""The two papers' published numbers as CSV, shipped with the package.

``published(name)`` reads one table as a pandas DataFrame; names are the CSV stems,
e.g. ``lra_table1_accuracy`` or ``followup_table1_locality``.

Figures transcribed from the two papers (LRA: Tay et al. 2021; follow-up: "You Can Train from
Scratch"; accuracy in %, efficiency as published). They are facts to compare against, side by
side, never targets to tune to.

``lra_table1_accuracy.csv``
    LRA paper (Tay et al., ICLR 2021), Table 1, ICLR submission version. FAIL = chance level on Path-X.
``lra_table2_efficiency.csv``
    LRA paper, Table 2: training steps/s and peak memory per TPU device, 4x4 TPU v3, batch 32,
    byte-level text task, lengths 1K-4K. Sparse Transformer and Longformer were not timed
    (implemented with masks).
``followup_table1_locality.csv``
    "You Can Train from Scratch", Table 1: bounded-kernel conv model, kernel size K (receptive
    field K//2 per layer); depth 6/6/4/4/6 for image/pathfinder/text/retrieval/listops.
``followup_table2_transformer.csv``
    same paper, Table 2.
``followup_table3_ssm_gmlp.csv``
    same paper, Table 3.
``followup_table4_positional_ablation.csv``
    same paper, Table 4 (the rows were reconstructed from a garbled PDF extraction; every row's
    average checks against its five values).

Hyperparameters: LRA appendix A (Tay et al. 2021) and the follow-up's Tables 5-7 (the follow-up
study, appendix A).
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
