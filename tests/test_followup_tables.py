"""The follow-up campaign's tables from a bundle of fake-but-complete records at profile=paper (two seeds of stage
A's arms, three of LRA's Transformer on ListOps): the follow-up tables' cells (mean ± sd, the 95% interval, the
published number beside, the trivial baselines), the claims rows, the power table, and a missing bundle refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fake_records import SMOKE_LISTOPS, fixed_labels, make_record
from scipy import stats as sps
from statsmodels.stats.power import TTestIndPower, TTestPower

from repro import bundle
from repro.paper.cli import make as make_all
from repro.run.protocol import paper_protocol

ROOT = Path(__file__).resolve().parents[1]
N_TRAIN = 1000
TEXT_TRAIN_COUNTS = {0: 600, 1: 400}
ACCURACY = {  # (arm, task) -> (techniques, per-seed accuracies)
    ("rotary_transformer", "listops"): ("followup", [0.625, 0.640]),
    ("rotary_transformer_notech", "listops"): ("none", [0.437, 0.453]),
    ("lra_transformer", "listops"): ("none", [0.359, 0.391, 0.375]),
    ("locality_k5", "text"): ("followup_data", [0.89, 0.90]),
    ("locality_k61", "text"): ("followup_data", [0.85, 0.87]),
}


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> tuple[Path, dict]:
    """The tables ``python -m repro.paper`` writes from the fixture bundle, and the accuracies (%) per cell."""
    from repro.tasks import get_task_builder

    tmp = tmp_path_factory.mktemp("followup")
    cache = tmp / "cache"
    listops = get_task_builder("listops")(SMOKE_LISTOPS, tmp / "nodata", cache, 1)
    runs, shown = tmp / "outputs" / "runs", {}
    for (arm, task), (techniques, accuracies) in ACCURACY.items():
        protocol = paper_protocol(arm, task, techniques)
        whole = {"steps": protocol.steps(N_TRAIN), "batch_size": protocol.batch_size, "n_train": N_TRAIN}
        values = []
        for seed, accuracy in enumerate(accuracies):
            if task == "listops":
                labels, extra = listops.test.labels, {"num_classes": 10, "task_cfg": SMOKE_LISTOPS}
            else:
                labels, extra = fixed_labels(task, 200), {"train_counts": TEXT_TRAIN_COUNTS}
            folder = make_record(
                runs, arm, task, seed, profile="paper", labels=labels, accuracy=accuracy, techniques=techniques,
                **whole, **extra,
            )  # fmt: skip
            predictions = np.genfromtxt(folder / "predictions.csv", delimiter=",", names=True)
            values.append(100 * float((predictions["prediction"] == predictions["label"]).mean()))
        shown[arm, task] = np.asarray(values)
    frozen = bundle.freeze(
        "v0.3-fixture", runs, tmp / "results", data_dir=tmp / "nodata", cache_dir=cache, log=lambda *a, **k: None
    )
    out = tmp / "paper"
    make_all(frozen, out)
    return out / "tables", shown


def _row(markdown: str, first_cell: str) -> list[str]:
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in\n{markdown}")


def _cell(values: np.ndarray) -> str:
    """mean ± sd (n) and the 95% Student-t interval of the mean, as a follow-up table shows a cell of ours."""
    low, high = sps.t.interval(0.95, values.size - 1, loc=values.mean(), scale=sps.sem(values))
    return f"{values.mean():.2f} ± {values.std(ddof=1):.2f} (n={values.size})", f"[{low:.2f}, {high:.2f}]"


def test_the_follow_up_tables_show_mean_sd_interval_published_and_baselines(tables):
    folder, shown = tables
    table2 = (folder / "followup_table2_transformer.md").read_text()
    lead, interval = _cell(shown["rotary_transformer", "listops"])
    row = _row(table2, "rotary_transformer_techniques")
    assert row[1] == "rotary_transformer" and row[10].startswith(lead) and row[10].endswith(interval)
    assert row[11] == "62.90"  # the follow-up's Table 2, beside ours
    lead, interval = _cell(shown["lra_transformer", "listops"])
    assert _row(table2, "transformer")[10].startswith(lead) and _row(table2, "transformer")[10].endswith(interval)
    ablation = (folder / "followup_table4_positional_ablation.md").read_text()
    lead, interval = _cell(shown["rotary_transformer_notech", "listops"])
    no = _row(ablation, "rotary / no")
    assert no[10].startswith(lead) and no[10].endswith(interval) and no[11] == "43.90"
    locality = (folder / "followup_table1_locality.md").read_text()
    for kernel, published in (("5", "88.96"), ("61", "85.41")):
        lead, interval = _cell(shown[f"locality_k{kernel}", "text"])
        row = _row(locality, kernel)
        assert row[6].startswith(lead) and row[6].endswith(interval) and row[7] == published
    assert "[a, b]: the 95% Student-t interval of the seeds' mean (two seeds or more)." in locality
    baselines = _row(locality, "Trivial baselines (our test sets)")
    labels = fixed_labels("text", 200)
    assert baselines[6] == f"majority class {100 * float((labels == 0).mean()):.2f}"
    assert baselines[10].startswith("root operator ")


def test_the_stage_a_claims_rows_test_the_fixture_s_seeds(tables):
    folder, shown = tables
    claims = (folder / "statistics_claims.md").read_text()
    a, b = shown["rotary_transformer", "listops"], shown["rotary_transformer_notech", "listops"]
    row = _row(claims, "the follow-up study")  # the first follow-up claim: followup-locality-listops, not run
    assert row[1] == "followup-locality-listops" and row[11] == "not tested"
    row = next(
        [c.strip() for c in line.strip("|").split("|")]
        for line in claims.splitlines()
        if "| followup-techniques-listops |" in line
    )
    se = np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    dof = se**4 / ((a.var(ddof=1) / a.size) ** 2 / (a.size - 1) + (b.var(ddof=1) / b.size) ** 2 / (b.size - 1))
    delta = a.mean() - b.mean()
    low, high = delta + np.array([-1, 1]) * sps.t.ppf(0.975, dof) * se
    assert row[4:10] == ["19.00", "±5", "2/2", f"{delta:.2f}", f"[{low:.2f}, {high:.2f}]", "100.0% / 100.0%"]
    low90, high90 = delta + np.array([-1, 1]) * sps.t.ppf(0.95, dof) * se
    assert 19.0 - 5 < low90 and high90 < 19.0 + 5  # the fixture's 90% interval lies inside published ± margin
    assert row[11:13] == ["matches", f"R4: 90% interval [{low90:.2f}, {high90:.2f}] inside +19.00 ± 5"]


def test_the_power_table_says_whether_two_seeds_can_detect_the_published_effect(tables):
    folder, shown = tables
    power = (folder / "followup_power.md").read_text()
    # rotary_transformer (and lra_transformer itself) take lra_transformer's ListOps seed sd: here the fixture's own
    sd = shown["lra_transformer", "listops"].std(ddof=1)
    effect = 62.90 - 36.37  # the follow-up's Table 2: rotary with the techniques against LRA's Transformer
    expected = TTestIndPower().power(effect_size=effect / sd, nobs1=2, alpha=0.025, alternative="larger")
    row = _row(power, "followup-rotary-beats-lra-transformer")
    assert expected >= 0.8  # the fixture's spread is small: two seeds are enough
    assert row[3:6] == [f"{effect:.2f}", "±6.5", f"{sd:.2f}"]
    assert row[6:] == ["lra_transformer, ListOps (v0.3-fixture; 2 dof)", "detect", f"{expected:.2f}", "2", "yes", "no"]
    # a claim without a direction must match within its margin (TOST, one arm against MEGA's published number)
    one = TTestPower()
    needed = next(n for n in range(2, 1000) if 2 * one.power(2.0 / sd, n, 0.05, alternative="larger") - 1 >= 0.8)
    assert needed > 3
    assert _row(power, "followup-rotary-near-mega")[7:] == [
        "match",
        "(goal: match)",
        str(needed),
        "no",
        f"yes, and {needed} seeds in all",
    ]
    # the bounded convolutions take lra_local's sd; the fixture has no lra_local record: unknown, no rule applied
    assert _row(power, "followup-locality-text")[5:] == [
        "—",
        "lra_local, Text (v0.3-fixture; 0 dof)",
        "detect",
        "—",
        "—",
        "unknown (no sd)",
        "—",
    ]


def test_a_missing_bundle_is_refused_in_one_line(tmp_path):
    missing = tmp_path / "results" / "v0.3-followup"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "repro.paper", "--bundle", str(missing), "--out", str(tmp_path / "paper")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2 and not (tmp_path / "paper").exists()
    assert done.stderr.strip() == (
        f"error: --bundle {missing}: no such folder (a bundle under results/, from lra-bundle freeze)"
    )
