"""LRA Table 2 from benchmark records: training steps/s and peak memory at 1K-4K, the one builder of the table
(``lra-paper`` from a bundle's records; ``repro.bench.report`` from a benchmark run's own rows, in its table.md).

Benchmark records are read from every ``bench/**/*.csv`` of the bundle that has the columns
``model`` (or ``arm``), ``length``, ``steps_per_s`` and ``peak_mem_bytes`` (or ``peak_mem_gb``),
optionally ``mode`` (only ``train`` rows are used) and ``status`` (``OOM`` is shown as such).
Where several rows give one cell, the median is shown; where rows of several depths (``layers``)
exist, a model's deepest ones.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..reference import LRA_MODEL_ARMS, published
from .accuracy import LRA_NAMES, pub_cell
from .render import MISSING, Table, fmt_number
from .view import GB, BundleView

LENGTHS = (("1k", 1024), ("2k", 2048), ("3k", 3072), ("4k", 4096))


COLUMNS = ["model", "length", "steps_per_s", "peak_mem_gb", "status", "layers"]


def training_rows(frame: pd.DataFrame) -> pd.DataFrame | None:
    """One benchmark table's training rows in ``COLUMNS`` (None when it lacks model, length and steps_per_s)."""
    if "model" not in frame.columns and "arm" in frame.columns:
        frame = frame.rename(columns={"arm": "model"})
    if not {"model", "length", "steps_per_s"} <= set(frame.columns):
        return None
    if "mode" in frame.columns:
        frame = frame[frame["mode"].astype(str) == "train"]
    frame = frame.copy()
    if "peak_mem_gb" not in frame.columns:
        frame["peak_mem_gb"] = pd.to_numeric(frame.get("peak_mem_bytes"), errors="coerce") / GB
    frame["status"] = frame["status"].astype(str) if "status" in frame.columns else "ok"
    frame["layers"] = pd.to_numeric(frame["layers"], errors="coerce") if "layers" in frame.columns else math.nan
    return frame[COLUMNS]


def table2_frame(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows LRA Table 2 reads from benchmark tables (``training_rows`` of each): each model's deepest
    rows, named as the LRA tables name the model, numbers numeric."""
    frames = [f for f in (training_rows(frame) for frame in frames) if f is not None]
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    # A one-layer memory table beside the full-model one: keep each model's deepest rows (LRA Table 2's).
    deepest = out.groupby("model")["layers"].transform("max")
    out = out[out["layers"].isna() | (out["layers"] == deepest)]
    reverse = {arm: model for model, arm in LRA_MODEL_ARMS.items()}
    out["model"] = out["model"].astype(str).map(lambda m: reverse.get(m, m))
    out["steps_per_s"] = pd.to_numeric(out["steps_per_s"], errors="coerce")
    out["peak_mem_gb"] = pd.to_numeric(out["peak_mem_gb"], errors="coerce")
    out["length"] = pd.to_numeric(out["length"], errors="coerce")
    return out


def bench_frame(view: BundleView) -> pd.DataFrame:
    """Training rows of every benchmark CSV in the bundle: model, length, steps_per_s, peak_mem_gb, status."""
    folder = view.path / "bench"
    return table2_frame([pd.read_csv(path) for path in sorted(folder.rglob("*.csv"))] if folder.is_dir() else [])


def _bench_cell(bench: pd.DataFrame, model: str, length: int, column: str, digits: int) -> str:
    rows = bench[(bench["model"] == model) & (bench["length"] == length)]
    if rows.empty:
        return MISSING
    ok = rows[rows["status"].str.upper() != "OOM"][column].dropna()
    if ok.empty:
        return "OOM" if (rows["status"].str.upper() == "OOM").any() else MISSING
    return fmt_number(float(np.median(ok)), digits)


BUNDLE_SOURCE = "the bundle's benchmark records (bench/*.csv, training rows, median per cell)"


def lra_table2(bench: pd.DataFrame, devices: list[str], source: str = BUNDLE_SOURCE) -> Table:
    """LRA Table 2 (Tay et al. 2021, Table 2): training steps/s and peak memory at 1K-4K, ours (``bench``, a
    ``table2_frame``, measured on ``devices``; ``source`` says which records) beside the published."""
    pub = published("lra_table2_efficiency").set_index("model")
    models = list(LRA_MODEL_ARMS) + sorted(set(bench["model"]) - set(LRA_MODEL_ARMS))
    columns, ours_cols = ["Model"], []
    for label, _ in LENGTHS:
        ours_cols.append(len(columns))
        columns += [f"steps/s {label.upper()} ours", f"steps/s {label.upper()} pub."]
    for label, _ in LENGTHS:
        ours_cols.append(len(columns))
        columns += [f"GB {label.upper()} ours", f"GB {label.upper()} pub."]
    rows = []
    for model in models:
        row = [LRA_NAMES.get(model, model.capitalize()) if model in LRA_MODEL_ARMS else model]
        for label, length in LENGTHS:
            row += [
                _bench_cell(bench, model, length, "steps_per_s", 1),
                pub_cell(pub.loc[model, f"steps_per_s_{label}"], 1) if model in pub.index else MISSING,
            ]
        for label, length in LENGTHS:
            row += [
                _bench_cell(bench, model, length, "peak_mem_gb", 2),
                pub_cell(pub.loc[model, f"peak_mem_gb_{label}"]) if model in pub.index else MISSING,
            ]
        rows.append(row)
    return Table(
        "lra_table2_efficiency",
        "LRA Table 2: training steps per second and peak memory (GB), ours beside the published",
        columns,
        rows,
        ours_cols,
        [
            f"Ours: {source}; run devices: {', '.join(devices) or 'none'}.",
            "Published: 4x4 TPU v3, batch 32, byte-level text (Tay et al. 2021, Table 2); Sparse Transformer "
            "and Longformer were not timed there.",
        ],
    )
