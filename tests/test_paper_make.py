"""``lra-paper`` (``python -m repro.paper``) on bundles frozen from synthetic records: tables, claims, baselines,
shares; ``lra-paper lra-table1`` on several bundles (LRA Table 1 at the protocol, the ranking table)."""

from __future__ import annotations

import copy
import importlib
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import matplotlib.text
import numpy as np
import pandas as pd
import pytest
import tomllib
from fake_records import SMOKE_LISTOPS, fixed_labels, make_record
from omegaconf import OmegaConf
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from repro import bundle, stats
from repro.bundle import BundleError
from repro.paper import claims as claims_file
from repro.paper import plots
from repro.paper.accuracy import LRA_NAMES
from repro.paper.cli import make as make_all
from repro.paper.cli import make_lra_table1
from repro.paper.evaluate import _average_data
from repro.paper.figures import seed_scores, shared_tasks, tradeoff_points
from repro.paper.lra_campaign import rank_correlation, ranking
from repro.paper.view import BundleView
from repro.reference import LRA_MODEL_ARMS, published

ROOT = Path(__file__).resolve().parents[1]
TABLES = [
    "lra_table1_accuracy",
    "lra_table2_efficiency",
    "followup_table1_locality",
    "followup_table2_transformer",
    "followup_table3_ssm_gmlp",
    "followup_table4_positional_ablation",
    "statistics_claims",
    "statistics_secondary",
    "followup_power",
    "trivial_baselines",
    "protocol_share",
    "parameters",
    "listops_operator_accuracy",
    "runs",
]
AT_PROTOCOL = {"locality_k5", "locality_k61"}  # these records ran the whole protocol (steps x batch)
LISTOPS_N_TRAIN, TEXT_N_TRAIN, TEXT_TRAIN_COUNTS = 128, 100, {0: 60, 1: 40}
FIGURES = [
    "lra_figure3_tradeoff",
    "followup_accuracy_vs_kernel",
    "listops_label_distribution",
    "listops_operator_accuracy",
]
ACCURACY = {  # arm -> task -> per-seed accuracies
    "lra_transformer": {
        t: [0.50, 0.55, 0.53] for t in ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
    },
    "lra_performer": {"listops": [0.2, 0.25], "text": [0.6, 0.62]},
    "locality_k5": {"listops": [0.40, 0.42, 0.41], "text": [0.88, 0.90, 0.89]},
    "locality_k61": {"listops": [0.50, 0.53, 0.52], "text": [0.84, 0.85, 0.86]},
    "locality_k11": {"image": [0.6]},
    "rotary_transformer": {"listops": [0.61, 0.62, 0.63], "text": [0.90, 0.91, 0.89]},
    "rotary_transformer_notech": {"listops": [0.44, 0.43, 0.45], "text": [0.70, 0.69, 0.71]},
}


def protocol_record(arm: str, task: str) -> dict:
    """make_record's keywords for a record that trained the whole protocol: epochs x (n_train // batch) steps,
    the epochs and batch read from experiments/conf/base/locality.yaml."""
    train = OmegaConf.to_container(OmegaConf.load(ROOT / "experiments/conf/base/locality.yaml"))["tasks"][task]["train"]
    n_train = LISTOPS_N_TRAIN if task == "listops" else TEXT_N_TRAIN
    return {
        "steps": train["epochs"] * (n_train // train["batch_size"]),
        "batch_size": train["batch_size"],
        "n_train": n_train,
    }


@pytest.fixture(scope="module")
def frozen(tmp_path_factory) -> Path:
    from repro.tasks import get_task_builder

    tmp = tmp_path_factory.mktemp("paper")
    cache = tmp / "cache"
    listops = get_task_builder("listops")(SMOKE_LISTOPS, tmp / "nodata", cache, 1)
    runs = tmp / "outputs" / "runs"
    for arm, tasks in ACCURACY.items():
        for task, accuracies in tasks.items():
            for seed, acc in enumerate(accuracies):
                full = protocol_record(arm, task) if arm in AT_PROTOCOL else {}
                if task == "listops":
                    make_record(
                        runs,
                        arm,
                        task,
                        seed,
                        labels=listops.test.labels,
                        accuracy=acc,
                        num_classes=10,
                        task_cfg=SMOKE_LISTOPS,
                        examples_per_s=900.0 + seed,
                        **full,
                    )
                else:
                    make_record(
                        runs,
                        arm,
                        task,
                        seed,
                        labels=fixed_labels(task, 100),
                        accuracy=acc,
                        examples_per_s=1000.0 + 10 * seed,
                        **full,
                        train_counts=TEXT_TRAIN_COUNTS if task == "text" else None,
                    )
    # same arm with and without the training techniques (told apart by config.yaml's techniques.name)
    for seed, techniques, acc in ((0, "none", 0.80), (1, "none", 0.82), (2, "followup", 0.90), (3, "followup", 0.91)):
        make_record(runs, "s4", "text", seed, labels=fixed_labels("text", 100), accuracy=acc, techniques=techniques)
    for seed, acc in ((0, 0.89), (1, 0.90)):
        make_record(runs, "gmlp", "text", seed, labels=fixed_labels("text", 100), accuracy=acc, techniques="followup")
    make_record(
        runs,
        "lra_transformer",
        "text",
        0,
        profile="smoke",
        labels=fixed_labels("text", 100),
        accuracy=0.5,
        device="cpu",
    )
    bench = tmp / "bench"
    bench.mkdir()
    rows = [
        ("lra_transformer", length, "train", s, int(m * 1e9), "ok", 4)  # GB of 10^9 bytes, as LRA Table 2
        for length, s, m in ((1024, 100.0, 1.0), (4096, 20.0, 5.0), (4096, 22.0, 5.0))
    ]
    rows += [("lra_transformer", 1024, "train", 500.0, 2**28, "ok", 1)]  # a one-layer memory row: not LRA Table 2's
    rows += [
        ("lra_performer", 4096, "train", float("nan"), float("nan"), "OOM", 4),
        ("lra_performer", 4096, "infer", 99.0, 1, "ok", 4),
    ]
    columns = ["model", "length", "mode", "steps_per_s", "peak_mem_bytes", "status", "layers"]
    pd.DataFrame(rows, columns=columns).to_csv(bench / "bench.csv", index=False)
    out = bundle.freeze(
        "v0", runs, tmp / "results", bench=[bench], data_dir=tmp / "nodata", cache_dir=cache, log=lambda *a, **k: None
    )
    assert bundle.load_manifest(out)["analysis_missing"] == []
    return out


def make(bundle_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "repro.paper", "--bundle", str(bundle_dir), "--out", str(out), *extra]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    return done


@pytest.fixture(scope="module")
def made(frozen, tmp_path_factory) -> tuple[Path, Path]:
    first, second = tmp_path_factory.mktemp("out1"), tmp_path_factory.mktemp("out2")
    for out in (first, second):
        done = make(frozen, out)
        assert done.returncode == 0, done.stderr
    return first, second


def test_every_table_and_figure_is_written_deterministically(made):
    first, second = made
    for name in TABLES:
        for suffix in (".md", ".tex"):
            a, b = first / "tables" / f"{name}{suffix}", second / "tables" / f"{name}{suffix}"
            assert a.read_bytes() == b.read_bytes(), f"{a.name} differs between two runs"
            assert a.stat().st_size > 0
    assert (first / "tables/index.md").read_bytes() == (second / "tables/index.md").read_bytes()
    assert ".tex)" not in (first / "tables/index.md").read_text()  # the index links only the tracked Markdown
    for name in FIGURES:
        png = first / "figures" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.read_bytes() == (second / "figures" / f"{name}.png").read_bytes(), f"{name}.png differs"
        assert b"Software" not in png.read_bytes()
    produced = sorted(p.name for p in (first / "tables").iterdir())
    assert produced == sorted([f"{n}{s}" for n in TABLES for s in (".md", ".tex")] + ["index.md"])


def _row(markdown: str, first_cell: str) -> list[str]:
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in\n{markdown}")


def _test_accs(frozen: Path, arm: str, task: str) -> np.ndarray:
    """Per-seed test accuracy (%) straight from the frozen records' metrics.json."""
    paths = sorted((frozen / "runs" / arm / task / "budget").glob("seed*/metrics.json"))
    return np.array([100 * json.loads(p.read_text())["test_acc"] for p in paths])


def _roots(frozen: Path) -> tuple[pd.DataFrame, dict]:
    [key] = [p.stem for p in (frozen / "analysis/listops_roots").glob("*.csv")]
    return (
        pd.read_csv(frozen / f"analysis/listops_roots/{key}.csv"),
        json.loads((frozen / f"analysis/listops_roots/{key}.json").read_text())["train"],
    )


def _baseline(frozen: Path, task: str) -> tuple[float, tuple[float, float]] | None:
    """The strongest trivial baseline (accuracy %, 95% Wilson interval), computed here from the bundle's files."""
    if task == "listops":
        roots, train = _roots(frozen)
        majority = {root: int(np.argmax(entry["label_counts"])) for root, entry in train.items()}
        right = int((roots["root"].map(majority) == roots["label"]).sum())
        n = len(roots)
    elif task == "text":
        labels = pd.read_csv(frozen / "runs/locality_k5/text/budget/seed0/predictions.csv")["label"]
        top = max(TEXT_TRAIN_COUNTS, key=TEXT_TRAIN_COUNTS.get)
        right, n = int((labels == top).sum()), len(labels)
    else:
        return None
    low, high = proportion_confint(right, n, method="wilson")
    return 100 * right / n, (100 * low, 100 * high)


def _seeds_cell(pct: np.ndarray, frozen: Path | None = None, task: str | None = None) -> str:
    """Seeds' mean ± sd (n), with † inside the task's baseline interval and ‡ below it."""
    cell = f"{pct.mean():.2f} ± {pct.std(ddof=1):.2f} (n={pct.size})"
    found = _baseline(frozen, task) if frozen is not None else None
    if found is None:
        return cell
    low, high = found[1]
    return cell + (" †" if low <= pct.mean() <= high else " ‡" if pct.mean() < low else "")


def test_lra_table1_shows_ours_beside_published_and_counts_missing_cells(made, frozen):
    table = (made[0] / "tables/lra_table1_accuracy.md").read_text()
    transformer = _row(table, "Transformer")
    listops = _seeds_cell(_test_accs(frozen, "lra_transformer", "listops"), frozen, "listops")
    assert transformer[2:4] == [listops, "36.37"]
    assert transformer[12:14] == [_seeds_cell(_test_accs(frozen, "lra_transformer", "pathx")), "FAIL"]
    average = np.mean(
        [
            _test_accs(frozen, "lra_transformer", t).mean()
            for t in ("listops", "text", "retrieval", "image", "pathfinder")
        ]
    )
    assert transformer[14:16] == [f"{average:.2f}", "54.39"]  # every task but Path-X ran: our average is shown
    performer = _row(table, "Performer")
    assert performer[2:6] == [
        _seeds_cell(_test_accs(frozen, "lra_performer", "listops"), frozen, "listops"),
        "18.01",
        _seeds_cell(_test_accs(frozen, "lra_performer", "text"), frozen, "text"),
        "65.40",
    ]
    assert performer[6] == "—" and performer[14] == "—"  # not run, never filled
    # 11 models x (6 tasks + avg) of ours; transformer has 7, performer 2; the baselines row is not counted
    assert "Missing cells (not run, marked —): 68 of 77." in table
    assert "Not shown: 1 record(s) of profile smoke." in table
    baselines = _row(table, "Trivial baselines (our test sets)")
    root_accuracy = _baseline(frozen, "listops")[0]
    assert baselines[2].startswith(f"root operator {root_accuracy:.2f}; majority class ")
    assert baselines[4] == f"majority class {_baseline(frozen, 'text')[0]:.2f}" and baselines[6] == "—"
    tex = (made[0] / "tables/lra_table1_accuracy.tex").read_text()
    assert "\\begin{tabular}" in tex and "$\\pm$" in tex and "---" in tex and "68 of 77" in tex


def test_table_footer_counts_missing_cells_and_cells_with_fewer_seeds():
    from repro.paper.render import Table

    rows = [["a", "41.26 ± 0.85 (n=2)", "63.38 ± 0.33 (n=3)", "ref 1"], ["b", "—", "60.00 (n=1)", "ref 2"]]
    table = Table("t", "T", ["arm", "x", "y", "published"], rows, ours_columns=[1, 2])
    assert table.footer() == (
        "Missing cells (not run, marked —): 1 of 4. Cells with fewer seeds than the table's most (n=3): 2."
    )
    even = Table("t", "T", ["arm", "x"], [["a", "1.00 ± 0.10 (n=3)"], ["b", "—"]], ours_columns=[1])
    assert even.footer() == "Missing cells (not run, marked —): 1 of 2."  # every seed count the same: no count


def test_followup_tables_map_arms_to_rows(made, frozen):
    locality = (made[0] / "tables/followup_table1_locality.md").read_text()
    k61 = _row(locality, "61")
    accs = _test_accs(frozen, "locality_k61", "text")
    low, high = sps.t.interval(0.95, accs.size - 1, loc=accs.mean(), scale=sps.sem(accs))
    text = f"{_seeds_cell(accs, frozen, 'text')} [{low:.2f}, {high:.2f}]"  # the seeds' mean's 95% interval after
    assert k61[1] == "locality_k61" and k61[6:10] == [text, "85.41", "—", "89.04"]
    assert _row(locality, "11")[2:4] == ["60.00 (n=1)", "64.47"]
    ablation = (made[0] / "tables/followup_table4_positional_ablation.md").read_text()
    assert _row(ablation, "rotary / no")[1] == "rotary_transformer_notech"
    table2 = (made[0] / "tables/followup_table2_transformer.md").read_text()
    assert _row(table2, "transformer_pretrained")[1] == "(not reproduced)"
    table3 = (made[0] / "tables/followup_table3_ssm_gmlp.md").read_text()
    assert "Missing cells (not run, marked —): 27 of 30." in table3
    assert _row(table3, "s4")[1] == "s4+none" and _row(table3, "s4")[6].startswith("81.00 ± 1.41 (n=2)")
    assert _row(table3, "s4_techniques")[6].startswith("90.50 ± 0.71 (n=2)") and _row(table3, "s5_techniques")[6] == "—"
    low, high = sps.t.interval(0.95, 1, loc=89.5, scale=0.5)
    assert _row(table3, "gmlp_techniques")[6:8] == [f"89.50 ± 0.71 (n=2) [{low:.2f}, {high:.2f}]", "89.94"]
    root_accuracy = _baseline(frozen, "listops")[0]
    for name in (
        "followup_table1_locality",
        "followup_table2_transformer",
        "followup_table3_ssm_gmlp",
        "followup_table4_positional_ablation",
    ):  # every table with a ListOps column prints the baseline
        row = _row((made[0] / f"tables/{name}.md").read_text(), "Trivial baselines (our test sets)")
        assert row[10].startswith(f"root operator {root_accuracy:.2f}"), name


def test_efficiency_table_reads_benchmark_records(made):
    table = (made[0] / "tables/lra_table2_efficiency.md").read_text()
    transformer = _row(table, "Transformer")
    assert transformer[1:3] == ["100.0", "8.1"] and transformer[7:9] == ["21.0", "1.4"]  # median of 20 and 22
    assert transformer[9:11] == ["1.00", "0.85"] and transformer[15:17] == ["5.00", "9.48"]
    performer = _row(table, "Performer")
    assert performer[7] == "OOM" and performer[1] == "—"  # the inference row is not a training number


def _claim_row(made, claim: str) -> list[str]:
    table = (made[0] / "tables/statistics_claims.md").read_text()
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 1 and cells[1] == claim:
            return cells
    raise AssertionError(f"no claim {claim}")


def _welch_ci(a: np.ndarray, b: np.ndarray, level: float) -> tuple[float, float]:
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = sps.t.ppf(0.5 + level / 2, df) * math.sqrt(va + vb)
    return a.mean() - b.mean() - half, a.mean() - b.mean() + half


@pytest.mark.parametrize(
    "claim,a_arm,b_arm,task,published",
    [
        ("followup-locality-text", "locality_k5", "locality_k61", "text", 88.96 - 85.41),
        ("followup-locality-listops", "locality_k61", "locality_k5", "listops", 52.73 - 45.24),
    ],
)
def test_a_claim_row_shows_its_primary_test_and_the_rule_that_fired(made, frozen, claim, a_arm, b_arm, task, published):
    a, b = _test_accs(frozen, a_arm, task), _test_accs(frozen, b_arm, task)
    row = _claim_row(made, claim)
    low, high = _welch_ci(a, b, 0.95)
    assert row[4] == f"{published:.2f}" and row[5] == "±2" and row[6] == "3/3"
    assert row[7:10] == [f"{a.mean() - b.mean():.2f}", f"[{low:.2f}, {high:.2f}]", "100.0% / 100.0%"]
    accuracy, (b_low, b_high) = _baseline(frozen, task)
    name = "root operator" if task == "listops" else "majority class"
    assert row[10] == f"{name} {accuracy:.2f} [{b_low:.2f}, {b_high:.2f}]"
    # the rules, from the numbers computed here (repro.stats.decide is tested on hand-made cases)
    evidence = stats.Evidence(
        published=published,
        direction="greater",
        margin=2.0,
        estimate=a.mean() - b.mean(),
        ci=(low, high),
        ci_equivalence=_welch_ci(a, b, 0.90),
        seeds={a_arm: 3, b_arm: 3},
        shares={a_arm: 1.0, b_arm: 1.0},
        means={a_arm: a.mean(), b_arm: b.mean()},
        baseline=(b_low, b_high),
    )
    expected = stats.decide(evidence)
    assert row[11:13] == [expected.word, expected.rule] and expected.word != "not tested"
    # seeds needed: statsmodels' power at the seed sd pooled over every cell of this task, computed here
    cells: dict[tuple[str, str], list[float]] = {}
    for metrics in sorted((frozen / "runs").glob(f"*/{task}/budget/seed*/metrics.json")):
        techniques = (OmegaConf.load(metrics.parent / "config.yaml").get("techniques") or {}).get("name", "none")
        cells.setdefault((metrics.parts[-5], techniques), []).append(100 * json.loads(metrics.read_text())["test_acc"])
    kept = [np.array(c) for c in cells.values() if len(c) > 1]
    sd = math.sqrt(sum((c.size - 1) * c.var(ddof=1) for c in kept) / sum(c.size - 1 for c in kept))
    detect = stats.seeds_needed(published, sd, goal="detect")
    match = stats.seeds_needed(published, sd, goal="match", margin=2.0)
    assert row[14] == f"{detect} / {match}"


OWN_CLAIMS = """claims:
  - id: mine-k5-above-k61-text
    paper: ours
    source: "an ablation of ours"
    statement: "kernel 5 beats kernel 61 on text"
    primary: {a: {arm: locality_k5}, b: {arm: locality_k61}, task: text, direction: greater}
    effect: 3.0
    margin: 2.0
    margin_reason: "a test"
"""


def test_a_claim_of_your_own_is_tested_against_the_effect_it_expects(frozen, tmp_path):
    """``paper: ours``: arms only, the typed effect in place of a published one, the same rules."""
    own = tmp_path / "mine.yaml"
    own.write_text(OWN_CLAIMS)
    done = make(frozen, tmp_path / "out", "--claims", str(own))
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "out" / "tables" / "statistics_claims.md").read_text()
    assert table.splitlines()[0] == "### Claims: the primary test, its interval and the verdict rule"
    row = _claim_row((tmp_path / "out",), "mine-k5-above-k61-text")
    a, b = _test_accs(frozen, "locality_k5", "text"), _test_accs(frozen, "locality_k61", "text")
    low, high = _welch_ci(a, b, 0.95)
    assert row[0] == "ours" and row[4] == "3.00 (expected)" and row[6] == "3/3"
    assert row[7:9] == [f"{a.mean() - b.mean():.2f}", f"[{low:.2f}, {high:.2f}]"]
    evidence = stats.Evidence(
        published=3.0,
        direction="greater",
        margin=2.0,
        estimate=a.mean() - b.mean(),
        ci=(low, high),
        ci_equivalence=_welch_ci(a, b, 0.90),
        seeds={"locality_k5": 3, "locality_k61": 3},
        shares={"locality_k5": 1.0, "locality_k61": 1.0},
        means={"locality_k5": a.mean(), "locality_k61": b.mean()},
        baseline=_baseline(frozen, "text")[1],
        effect_name="expected",
    )
    expected = stats.decide(evidence)
    assert row[11:13] == [expected.word, expected.rule] and expected.word != "not tested"


@pytest.mark.parametrize(
    "change, said",
    [
        (("    effect: 3.0\n", ""), "claims[0] lacks 'effect' (see the header of paper/claims.yaml)"),
        (
            ("b: {arm: locality_k61}", "b: {published: {table: lra_table1_accuracy, row: {model: transformer}}}"),
            "claims[0].primary.b lacks 'arm': a claim of your own compares two of our arms",
        ),
        (("effect: 3.0", "effect: -3.0"), "claims[0].primary.direction 'greater' but its effect is -3.00"),
        (("effect: 3.0", "effect: .nan"), "claims[0].effect nan: a finite number of accuracy points (a - b)"),
        (("effect: 3.0", "effect: true"), "claims[0].effect True: a finite number of accuracy points (a - b)"),
        (
            ("effect: 3.0", "effect: " + "1" * 400),
            f"claims[0].effect {'1' * 20}...: a finite number of accuracy points (a - b)",
        ),
        (
            ("paper: ours", "paper: Tay et al. 2021"),
            "claims[0].effect: only a claim of your own (paper: ours) types its effect; a paper's is read from its "
            "published tables",
        ),
    ],
)
def test_a_malformed_claim_of_your_own_is_refused_naming_the_key(tmp_path, change, said):
    own = tmp_path / "mine.yaml"
    own.write_text(OWN_CLAIMS.replace(*change))
    with pytest.raises(claims_file.ClaimsError) as error:
        claims_file.load(own)
    assert str(error.value) == f"{own}: {said}"


def test_claims_that_cannot_be_tested_say_which_rule_fired(made):
    unrun = _claim_row(made, "lra-listops-linear")
    assert unrun[6] == "0/3" and unrun[11:13] == ["not tested", "R1: fewer than 2 seeds of lra_linear"]
    unknown = _claim_row(made, "lra-listops-performer")  # records without train_settings: share unknown
    assert unknown[6] == "2/3" and unknown[11] == "not tested"
    assert unknown[12] == (
        "R2: below 50% of the protocol's training examples (lra_performer unknown, lra_transformer unknown)"
    )
    against = _claim_row(made, "followup-locality-text-sota")  # one arm against MEGA's published 90.43
    assert against[3] == "locality_k5 − mega (published) (one-sample t)" and against[6] == "3"
    assert against[4] == f"{88.96 - 90.43:.2f}"


def test_secondary_tests_pool_every_seed_pair(made, frozen):
    table = (made[0] / "tables/statistics_secondary.md").read_text()
    pair = [line for line in table.splitlines() if "| followup-locality-text | primary pair |" in line]
    line = next(line for line in pair if "CMH" in line)
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    only_a = only_b = 0
    for i in range(3):
        for j in range(3):
            pa = pd.read_csv(frozen / f"runs/locality_k5/text/budget/seed{i}/predictions.csv")
            pb = pd.read_csv(frozen / f"runs/locality_k61/text/budget/seed{j}/predictions.csv")
            ra, rb = pa["prediction"] == pa["label"], pb["prediction"] == pb["label"]
            only_a, only_b = only_a + int((ra & ~rb).sum()), only_b + int((~ra & rb).sum())
    p = sps.chi2.sf((only_a - only_b) ** 2 / (only_a + only_b), 1)
    assert cells[10] == ("<0.001" if p < 0.001 else f"{p:.3f}")
    assert cells[11] == f"9 seed pairs; only A right {only_a}, only B right {only_b}"
    permutation = next(line for line in pair if "permutation" in line)
    assert "cannot reach p < 0.05: 3 + 3 seeds give 20 splits, smallest p 0.100" in permutation


def test_baselines_and_shares_tables(made, frozen):
    baselines = (made[0] / "tables/trivial_baselines.md").read_text()
    accuracy, (low, high) = _baseline(frozen, "listops")
    assert "| ListOps | ListOps (fake files) | root operator |" in baselines
    assert f"| {len(_roots(frozen)[0])} | {accuracy:.2f} | [{low:.2f}, {high:.2f}] |" in baselines
    shares = (made[0] / "tables/protocol_share.md").read_text()
    k5 = next(line for line in shares.splitlines() if line.startswith("| locality_k5 | none | ListOps |"))
    train = protocol_record("locality_k5", "listops")
    assert f"| {train['steps'] * train['batch_size']:,} | 100.0% |" in k5 and "| 3 min wall clock |" in k5
    rotary = next(line for line in shares.splitlines() if line.startswith("| rotary_transformer | none | ListOps |"))
    assert "the record lacks data.sizes.train, steps or train_settings.batch_size" in rotary


def test_listops_operator_table_against_the_root_operator_baseline(made, frozen):
    roots, train = _roots(frozen)
    table = (made[0] / "tables/listops_operator_accuracy.md").read_text()
    assert "rotary_transformer, profile budget, 3 seed(s)" in table  # the best ListOps arm by default
    for root, group in roots.groupby("root"):
        baseline = 100 * float((group["label"] == int(np.argmax(train[root]["label_counts"]))).mean())
        accs = []
        for seed in range(3):
            pred = pd.read_csv(frozen / f"runs/rotary_transformer/listops/budget/seed{seed}/predictions.csv")
            right = (pred["prediction"] == pred["label"]).to_numpy()
            accs.append(100 * right[group["index"].to_numpy()].mean())
        assert _row(table, root.lstrip("["))[1:4] == [str(len(group)), f"{baseline:.2f}", f"{np.mean(accs):.2f}"]
    assert f"{_baseline(frozen, 'listops')[0]:.2f}% overall" in table


def test_a_malformed_claims_file_is_refused_naming_the_key(frozen, tmp_path):
    bad = tmp_path / "claims.yaml"
    text = (ROOT / "paper/claims.yaml").read_text().replace("direction: less\n", "direction: greater\n", 1)
    bad.write_text(text)
    done = make(frozen, tmp_path / "out", "--claims", str(bad))
    assert done.returncode == 2 and not (tmp_path / "out").exists()
    said = f"error: {bad}: claims[0].primary.direction 'greater' but the published effect is {18.01 - 36.37:+.2f}"
    assert done.stderr.strip() == said
    bad.write_text(text.replace("    margin: 5.0\n", "", 1).replace("direction: greater\n", "direction: less\n", 1))
    done = make(frozen, tmp_path / "out", "--claims", str(bad))
    assert done.stderr.strip() == (f"error: {bad}: claims[0] lacks 'margin' (see the header of paper/claims.yaml)")


def test_lra_paper_entry_point_and_its_help():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["lra-paper"].partition(":")
    assert callable(getattr(importlib.import_module(module), function))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "repro.paper", "--help"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m repro.paper ")
    assert "--claims" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "repro.paper", "pathfinder-samples", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m repro.paper pathfinder-samples")
    assert "--render" in done.stdout and "--difficulty" in done.stdout


def test_a_changed_bundle_is_refused(frozen, tmp_path):
    import shutil

    copy = tmp_path / "v0"
    shutil.copytree(frozen, copy)
    (copy / "runs/locality_k5/text/budget/seed0/metrics.json").write_text("{}")
    done = make(copy, tmp_path / "out")
    assert done.returncode == 2 and "changed: runs/locality_k5/text/budget/seed0/metrics.json" in done.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- lra-table1 on several bundles

# arm -> per-seed ListOps accuracies; slot A holds the first three arms, slot B the others
LISTOPS = {
    "lra_transformer": [0.50, 0.55, 0.53],
    "lra_local": [0.20, 0.25],
    "lra_linformer": [0.45, 0.40],
    "lra_performer": [0.30, 0.32],
    "lra_linear": [0.60, 0.58],
}
SLOT_A = ("lra_transformer", "lra_local", "lra_linformer")
TEXT = {"lra_transformer": [0.6], "lra_local": [0.7]}
TEXT_EXAMPLES_PER_S = {"lra_transformer": 1234.0, "lra_local": 777.0}  # the ListOps records say 1000


@pytest.fixture(scope="module")
def slots(tmp_path_factory) -> tuple[Path, Path, dict]:
    """Two bundles of profile=paper records: A (with the ListOps root analysis) and B (frozen without it;
    its ListOps records say task.source=auto, so their analysis key differs, their data block does not)."""
    from repro.tasks import get_task_builder

    tmp = tmp_path_factory.mktemp("slots")
    cache = tmp / "cache"
    listops = get_task_builder("listops")(SMOKE_LISTOPS, tmp / "nodata", cache, 1)
    auto = {**copy.deepcopy(SMOKE_LISTOPS), "source": "auto"}
    for arm, accuracies in LISTOPS.items():
        runs = tmp / ("a" if arm in SLOT_A else "b") / "runs"
        for seed, acc in enumerate(accuracies):
            make_record(
                runs,
                arm,
                "listops",
                seed,
                profile="paper",
                labels=listops.test.labels,
                accuracy=acc,
                num_classes=10,
                task_cfg=SMOKE_LISTOPS if arm in SLOT_A else auto,
                data=listops.info,
            )
    for arm, accuracies in TEXT.items():
        for seed, acc in enumerate(accuracies):
            make_record(
                tmp / "b" / "runs",
                arm,
                "text",
                seed,
                profile="paper",
                labels=fixed_labels("text", 100),
                accuracy=acc,
                train_counts={0: 50, 1: 50},
                examples_per_s=TEXT_EXAMPLES_PER_S[arm],
            )
    quiet = {"data_dir": tmp / "nodata", "cache_dir": cache, "log": lambda *a, **k: None}
    a = bundle.freeze("slotA", tmp / "a" / "runs", tmp / "results", **quiet)
    b = bundle.freeze("slotB", tmp / "b" / "runs", tmp / "results", analysis=False, **quiet)
    return a, b, {"cache": cache}


def _cells(markdown: str, first: str) -> list[str]:
    line = next(x for x in markdown.splitlines() if x.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def _table1_command(a: Path, b: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """``lra-paper lra-table1 --bundle A --bundle B --out OUT <extra>`` with this checkout's package."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "repro.paper", "lra-table1", "--bundle", str(a), "--bundle", str(b)]
    return subprocess.run([*command, "--out", str(out), *extra], capture_output=True, text=True, env=env, timeout=300)


def _lra_table1(a: Path, b: Path, out: Path) -> str:
    done = _table1_command(a, b, out)
    assert done.returncode == 0, done.stderr
    return (out / "tables" / "lra_table1.md").read_text()


def test_cells_are_the_seeds_mean_sd_and_student_t_interval(slots, tmp_path):
    a, b, _ = slots
    md = _lra_table1(a, b, tmp_path)
    view = BundleView([a, b], "paper")
    for arm in LISTOPS:
        pct = np.asarray(view.accuracies(arm, "listops"))
        n, mean, sd = pct.size, pct.mean(), pct.std(ddof=1)
        half = sps.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
        cells = _cells(md, next(m for m in md.splitlines() if f"| {arm} |" in m).split("|")[1].strip())
        assert cells[1] == arm
        assert cells[2].startswith(f"{mean:.2f} ± {sd:.2f} (n={n})")
        assert cells[3] == f"[{mean - half:.2f}, {mean + half:.2f}]"
    pub = published("lra_table1_accuracy").set_index("model")
    transformer = _cells(md, "Transformer")
    assert transformer[4] == f"{pub.loc['transformer', 'listops']:.2f}"
    # averages over the tasks run (ListOps, text): ours only where both ran, the published over the same two
    mean_both = np.mean([np.mean(view.accuracies("lra_transformer", t)) for t in ("listops", "text")])
    assert transformer[-2] == f"{mean_both:.2f}"
    assert transformer[-1] == f"{np.mean([pub.loc['transformer', 'listops'], pub.loc['transformer', 'text']]):.2f}"
    assert _cells(md, "Linformer")[-2] == "—"
    assert "| ListOps ours | ListOps 95% CI | ListOps pub. | Text ours |" in md and "Image ours" not in md
    assert "Retrieval: the AAN data is not public any more" in md and "Image: no records in these bundles" in md
    # the LRA paper's claims of paper/claims.yaml, one row each, none of the follow-up's
    claim_rows = [line for line in md.splitlines() if line.startswith("| Tay et al. 2021 | lra-")]
    lra_claims = [c for c in claims_file.load(ROOT / "paper" / "claims.yaml").claims if c.paper == "Tay et al. 2021"]
    assert len(claim_rows) == len(lra_claims) >= 6 and "followup-" not in md
    performer = _cells(md, "Tay et al. 2021 | lra-listops-performer")
    delta = np.mean(view.accuracies("lra_performer", "listops")) - np.mean(
        view.accuracies("lra_transformer", "listops")
    )
    assert performer[6] == "2/3" and performer[7] == f"{delta:.2f}"


def test_an_average_with_a_task_unrun_has_no_seed_and_no_share():
    """Seeds 0 and 1 on ListOps and text at the whole protocol, nothing on the other tasks of the average: the
    average has no seed, and its share of the protocol is unknown, not the run tasks' 100%."""

    class Records:
        def seeds(self, arm: str, task: str) -> pd.DataFrame:
            rows = [(s, 0.5, 1.0, "") for s in (0, 1)] if task in ("listops", "text") else []
            return pd.DataFrame(rows, columns=["seed", "test_acc", "share", "share_note"])

    average = _average_data(Records(), "lra_transformer", "A", ("listops", "text", "image"))
    assert average.seeds == () and math.isnan(average.share) and average.missing == ("image",)
    both = _average_data(Records(), "lra_transformer", "A", ("listops", "text"))
    assert both.seeds == (0, 1) and both.share == 1.0


def test_the_main_command_writes_the_campaign_table_as_lra_table1_writes_it(slots, tmp_path):
    """Records of profile paper of the lra_* arms: ``lra-paper --bundle ...`` writes lra_table1.md and .tex too,
    byte for byte those of ``lra-paper lra-table1`` on the same bundles."""
    a, b, _ = slots
    make_all([a, b], tmp_path / "main")
    make_lra_table1([a, b], tmp_path / "sub")
    for name in ("tables/lra_table1.md", "tables/lra_table1.tex", "figures/lra_table1_figure3.png"):
        assert (tmp_path / "main" / name).read_bytes() == (tmp_path / "sub" / name).read_bytes()
    index = (tmp_path / "main" / "tables" / "index.md").read_text()
    assert "[lra_table1.md](lra_table1.md)" in index and "(../figures/lra_table1_figure3.png)" in index
    # the campaign's Figure 3 is the one drawn, once
    assert not (tmp_path / "main" / "figures" / "lra_figure3_tradeoff.png").exists()


def test_campaign_figure3_averages_both_panels_over_the_tasks_every_arm_has(slots):
    """Slot A and B: every arm has ListOps, two have text too, so both panels average ListOps alone: ours the
    seed means, the published its ListOps column; speed and memory from the text records where there are any."""
    a, b, _ = slots
    view = BundleView([a, b], "paper")
    points = tradeoff_points(view, pd.DataFrame())
    published_points, ours, axis, tasks = points.published, points.ours, points.ours_axis, points.tasks
    assert tasks == ("listops",) and axis == "training examples/s on text, mean over the text records, NVIDIA H200"
    assert not points.same_quantity  # examples/s on text is not the published steps/s at 4K: ours drawn alone
    pub = published("lra_table1_accuracy").set_index("model")
    assert [p["accuracy"] for p in published_points] == [float(pub.loc[p["name"], "listops"]) for p in published_points]
    by_name = {p["name"]: p for p in ours}
    for model, arm in {"transformer": "lra_transformer", "linformer": "lra_linformer"}.items():
        assert by_name[model]["accuracy"] == pytest.approx(np.mean(view.accuracies(arm, "listops")))
        # one task averaged: each seed's score is its ListOps accuracy, the bar their sd
        assert by_name[model]["accuracy_sd"] == pytest.approx(np.std(view.accuracies(arm, "listops"), ddof=1))
        assert by_name[model]["seeds"] == len(LISTOPS[arm])
    assert by_name["transformer"]["speed"] == TEXT_EXAMPLES_PER_S["lra_transformer"]  # the text records' speed
    assert by_name["transformer"]["memory_gb"] == pytest.approx(2**30 / 1e9)  # their peak bytes in GB of 10^9
    assert math.isnan(by_name["linformer"]["speed"])  # no text record: not placed
    assert math.isnan(by_name["bigbird"]["accuracy"])  # no record


class _Accuracies:
    """A stand-in view: ``accuracies(arm, task)``, seed 0 at 50% (or ``score[task]``, a number or a list of one
    per seed) on the tasks ``have`` lists for the arm; with ``speed``, text records at arm's examples/s."""

    def __init__(self, have: dict[str, tuple[str, ...]], score: dict | None = None, speed: dict | None = None):
        self.have, self.score, self.speed = have, score or {}, speed or {}
        self.runs = pd.DataFrame(columns=["arm", "task", "device", "examples_per_s", "peak_mem_gb"])

    def accuracies(self, arm: str, task: str) -> list[float]:
        return self.seeds(arm, task)["test_acc"].tolist()

    def seeds(self, arm: str, task: str) -> pd.DataFrame:
        if task not in self.have.get(arm, ()):
            return pd.DataFrame(columns=["seed", "test_acc", "examples_per_s", "peak_mem_gb"])
        score = self.score.get(task, 50.0)
        scores = score if isinstance(score, list) else [score]
        speed = self.speed.get(arm, math.nan) if task == "text" else math.nan
        rows = [(seed, acc, speed, 2.0) for seed, acc in enumerate(scores)]
        return pd.DataFrame(rows, columns=["seed", "test_acc", "examples_per_s", "peak_mem_gb"])


@pytest.mark.parametrize(
    "have, expected",
    [
        ({}, ("listops", "text", "retrieval", "image", "pathfinder")),  # no records: LRA's own average
        (
            {"lra_transformer": ("listops", "text", "image"), "lra_local": ("text", "image", "listops")},
            ("listops", "text", "image"),
        ),
        ({"lra_transformer": ("listops", "text", "pathx"), "lra_local": ("text",)}, ("text",)),
        ({"lra_transformer": ("listops",), "lra_local": ("text",)}, ()),  # nothing shared: each arm its own
        ({"lra_transformer": ("listops",), "lra_local": ("pathx",)}, ("listops",)),  # Path-X: not in the average
    ],
)
def test_figure3_tasks_are_those_every_arm_with_records_has(have, expected):
    assert shared_tasks(_Accuracies(have)) == expected


def test_figure3_published_points_average_the_shared_tasks_or_take_the_papers_average():
    pub = published("lra_table1_accuracy").set_index("model")
    two = _Accuracies({"lra_transformer": ("text", "image"), "lra_local": ("image", "text")}, {"text": 60.0})
    points = tradeoff_points(two, pd.DataFrame())
    published_points, ours, tasks = points.published, points.ours, points.tasks
    assert tasks == ("text", "image")
    for point in published_points:
        assert point["accuracy"] == pytest.approx(
            (pub.loc[point["name"], "text"] + pub.loc[point["name"], "image"]) / 2
        )
    assert ours[0]["name"] == "transformer" and ours[0]["accuracy"] == 55.0 and ours[0]["own_tasks"] is None
    apart = _Accuracies({"lra_transformer": ("listops",), "lra_local": ("text", "image")})
    points = tradeoff_points(apart, pd.DataFrame())
    published_points, ours, tasks = points.published, points.ours, points.tasks
    assert tasks == () and all(p["accuracy"] == float(pub.loc[p["name"], "avg"]) for p in published_points)
    assert [(p["name"], p["own_tasks"]) for p in ours[:2]] == [("transformer", 1), ("local_attention", 2)]


def test_figure3_error_bar_is_the_sd_of_each_seeds_mean_over_the_tasks_it_has_all_of():
    """Seeds 0-2 on text, 0-1 on image: a seed's score is its mean over both tasks, so seed 2 (no image record)
    has none; the point is LRA Table 1's average of the tasks' seed means, the bar the sd of the two scores."""
    text, image = [60.0, 64.0, 71.0], [40.0, 30.0]
    view = _Accuracies(
        {"lra_transformer": ("text", "image"), "lra_local": ("text", "image")}, {"text": text, "image": image}
    )
    transformer = tradeoff_points(view, pd.DataFrame()).ours[0]
    scores = [(text[0] + image[0]) / 2, (text[1] + image[1]) / 2]
    assert seed_scores(view, "lra_transformer", ("text", "image")) == scores
    assert transformer["accuracy"] == pytest.approx((np.mean(text) + np.mean(image)) / 2)
    assert transformer["accuracy_sd"] == pytest.approx(np.std(scores, ddof=1)) and transformer["seeds"] == 2
    one = tradeoff_points(_Accuracies({"lra_transformer": ("text",)}), pd.DataFrame()).ours[0]
    assert one["seeds"] == 1 and math.isnan(one["accuracy_sd"])  # one seed: no bar


def _label_boxes(fig, labels) -> list:
    """Each label's text box as the renderer draws it (the leader line left out)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [matplotlib.text.Text.get_window_extent(label, renderer) for label in labels]


CROWDED = {  # arm -> (ListOps accuracy, text accuracy, examples/s): five arms on one spot, the others close by
    "lra_transformer": (40.0, 60.0, 1000.0),
    "lra_local": (40.0, 60.0, 1000.0),
    "lra_sparse": (40.0, 60.0, 1000.0),
    "lra_longformer": (40.0, 60.0, 1000.0),
    "lra_linformer": (40.1, 60.0, 1002.0),
    "lra_reformer": (40.0, 60.2, 998.0),
    "lra_sinkhorn": (39.8, 60.1, 1001.0),
    "lra_synthesizer": (40.2, 59.9, 999.0),
    "lra_bigbird": (41.0, 61.0, 1010.0),
    "lra_linear": (30.0, 50.0, 1100.0),
    "lra_performer": (40.0, 60.0, 1000.0),
}


def _crowded():
    """Figure 3's points with ours at ``CROWDED``, three seeds each, a bar of 1.5 points."""
    have = {arm: ("listops", "text") for arm in CROWDED}
    speeds = {arm: speed for arm, (_, _, speed) in CROWDED.items()}
    points = tradeoff_points(_Accuracies(have, speed=speeds), pd.DataFrame())
    for point, (listops, text, _) in zip(points.ours, CROWDED.values(), strict=True):
        point.update(accuracy=(listops + text) / 2, accuracy_sd=1.5, seeds=3)
    return points


@pytest.mark.parametrize("same_quantity", [False, True])
def test_figure3_labels_do_not_overlap_and_name_each_point_once(same_quantity):
    """Eleven points, five on one spot and the rest close; and the published panel's own
    cluster (Transformer, Reformer, BigBird, Synthesizer at 1-2 steps/s): the text boxes of the labels, measured
    by the renderer after drawing, do not overlap within a panel, stay inside the figure, and each point's
    name is written once."""
    points = _crowded()
    fig, labels = plots.tradeoff_figure(points.published, points.ours, points.ours_axis, points.tasks, same_quantity)
    try:
        boxes = _label_boxes(fig, labels)
        canvas = fig.bbox
        for box in boxes:
            assert canvas.x0 <= box.x0 and box.x1 <= canvas.x1 and canvas.y0 <= box.y0 and box.y1 <= canvas.y1
        panels = {}
        for label, box in zip(labels, boxes, strict=True):
            panels.setdefault(label.axes, []).append((label.get_text(), box))
        assert len(panels) == (2 if same_quantity else 1)
        for placed in panels.values():
            for (a, box_a), (b, box_b) in itertools.combinations(placed, 2):
                assert not box_a.overlaps(box_b), f"the labels {a!r} and {b!r} overlap"
        ours = panels[labels[-1].axes]
        assert sorted(name for name, _ in ours) == sorted(LRA_NAMES.get(m, m.capitalize()) for m in LRA_MODEL_ARMS)
    finally:
        plt.close(fig)


def test_figure3_is_ours_alone_unless_our_speed_is_the_published_quantity(tmp_path):
    """Run records give examples/s on text: one panel, its caption saying why the published one is not drawn;
    benchmark records give steps/s at 4K: the published panel beside ours, each on its own axis."""
    have = {arm: ("listops", "text") for arm in CROWDED}
    alone = tradeoff_points(_Accuracies(have, speed={a: 900.0 for a in CROWDED}), pd.DataFrame())
    fig, _ = plots.tradeoff_figure(alone.published, alone.ours, alone.ours_axis, alone.tasks, alone.same_quantity)
    try:
        assert [ax.get_xlabel() for ax in fig.axes] == ["training examples/s on text, mean over the text records"]
        caption = " ".join(t.get_text().replace("\n", " ") for t in fig.texts)
        assert "plots training steps/s at 4K on TPU v3, which these records do not measure" in caption
    finally:
        plt.close(fig)
    bench = pd.DataFrame(
        [("transformer", 4096, 20.0, 5.0, "ok", 4)],
        columns=["model", "length", "steps_per_s", "peak_mem_gb", "status", "layers"],
    )
    both = tradeoff_points(_Accuracies(have), bench)
    assert both.same_quantity
    fig, _ = plots.tradeoff_figure(both.published, both.ours, both.ours_axis, both.tasks, both.same_quantity)
    try:
        assert [ax.get_xlabel() for ax in fig.axes] == [
            "training steps/s at 4K, TPU v3",
            "training steps/s at 4K (benchmark records)",
        ]
        assert not fig.axes[0].get_shared_x_axes().joined(fig.axes[0], fig.axes[1])
    finally:
        plt.close(fig)


def test_the_index_leads_with_the_study_bundles_and_the_budget_bundles_tables_follow(frozen, slots, tmp_path):
    """``--study A --study B`` beside a budget bundle: LRA Table 1 and Figure 3 of A and B, byte for byte as
    ``lra-table1`` writes them, head the index; the budget bundle's tables follow under their own heading."""
    a, b, _ = slots
    make_all(frozen, tmp_path / "main", study=[a, b])
    make_lra_table1([a, b], tmp_path / "sub")
    for name in ("tables/lra_table1.md", "tables/lra_table1.tex", "figures/lra_table1_figure3.png"):
        assert (tmp_path / "main" / name).read_bytes() == (tmp_path / "sub" / name).read_bytes()
    assert (tmp_path / "main" / "figures" / "lra_figure3_tradeoff.png").exists()  # the budget bundle's own
    index = (tmp_path / "main" / "tables" / "index.md").read_text()
    headings = [line for line in index.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Bundle slotA, slotB: LRA Table 1 at the release's protocol (profile paper)",
        "## Bundle v0: every table, profile budget (3 min wall clock a run, not the papers' protocol)",
    ]
    study, rest = index.split(headings[1])
    assert "[lra_table1.md](lra_table1.md)" in study and "(../figures/lra_table1_figure3.png)" in study
    assert "lra_table1.md" not in rest and "[lra_table1_accuracy.md](lra_table1_accuracy.md)" in rest
    assert f"--bundle {frozen.as_posix()} --study {a.as_posix()} --study {b.as_posix()}`" in index.splitlines()[2]


def test_a_study_bundle_must_be_a_campaigns_and_the_bundle_not_one_already(frozen, slots, tmp_path):
    a, b, _ = slots
    with pytest.raises(BundleError, match=r"^--study v0: no records of profile paper of the lra_\* arms; give"):
        make_all(frozen, tmp_path / "x", study=[frozen])
    with pytest.raises(BundleError, match=r"^--study slotB: --bundle slotA holds a campaign's records already"):
        make_all(a, tmp_path / "y", study=[b])
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()  # refused before writing


def test_the_listops_baseline_comes_from_the_bundle_that_analysed_that_test_set(slots, tmp_path):
    a, b, _ = slots
    md = _lra_table1(a, b, tmp_path)
    baselines = _cells(md, "Trivial baselines (our test sets)")
    assert baselines[2].startswith("root operator ") and "majority class" in baselines[2]
    assert _cells(md, "Data (our records)")[2] == "generated ListOps"
    # slot B alone: its records' key (task.source=auto) is not A's, and B holds no analysis at all
    alone = BundleView([b], "paper")
    assert alone.baselines["listops"] == ([], "no root-operator analysis of this test set in the bundles")
    # with A beside it, B's records find A's analysis by their data block (same generated test set)
    both = BundleView([b, a], "paper")
    assert [x.name for x in both.baselines["listops"][0]] == [
        x.name for x in BundleView([a], "paper").baselines["listops"][0]
    ]


def test_a_listops_analysis_serves_only_records_of_the_same_test_set(slots):
    """The data-identity match (``listops_roots.find``) tells a subset of the test set from the whole."""
    from repro.analysis import listops_roots
    from repro.tasks import get_task_builder

    a, _, extra = slots
    info = get_task_builder("listops")(SMOKE_LISTOPS, a.parent / "nodata", extra["cache"], 1).info
    assert listops_roots.find([a], "no-such-key", info) is not None
    assert listops_roots.find([a], "no-such-key", {**info, "subset": {"test": 10}}) is None
    assert listops_roots.find([a], "no-such-key", {**info, "seed": 1}) is None


def test_rank_correlation_is_spearmans_rho_of_the_seed_means(slots):
    a, b, _ = slots
    view = BundleView([a, b], "paper")
    result = rank_correlation(view, "listops")
    pub = published("lra_table1_accuracy").set_index("model")
    models = {
        "lra_transformer": "transformer",
        "lra_local": "local_attention",
        "lra_linformer": "linformer",
        "lra_performer": "performer",
        "lra_linear": "linear_transformer",
    }
    ours = [np.mean(LISTOPS[arm]) for arm in models]
    theirs = [float(pub.loc[m, "listops"]) for m in models.values()]
    assert result["arms"] == 5 and result["seeds"] == [2, 3]
    assert result["rho"] == pytest.approx(sps.spearmanr(ours, theirs).statistic, abs=1e-12)
    # five arms: all 120 pairings; p is the share whose rho reaches the observed one
    pairings = [sps.spearmanr([ours[i] for i in order], theirs).statistic for order in itertools.permutations(range(5))]
    assert result["p"] == pytest.approx(np.mean([r >= result["rho"] - 1e-12 for r in pairings]), abs=1e-12)
    low, high = result["interval"]
    assert -1.0 <= low <= high <= 1.0
    assert rank_correlation(view, "listops") == result  # fixed bootstrap seed: the same interval


def test_seeds_that_agree_give_a_degenerate_interval_and_an_arm_with_one_seed_none(tmp_path):
    """Every arm with two seeds: an interval; any arm with one (all of them, or all but one): none, and the
    ranking table says how many arms have one seed."""
    labels = fixed_labels("text", 100)
    accuracies = {"lra_transformer": 0.6, "lra_local": 0.5, "lra_linformer": 0.7, "lra_performer": 0.55}
    for version, seeds_of in (
        ("two", lambda arm: 2),
        ("one", lambda arm: 1),
        ("mixed", lambda arm: 1 + (arm == "lra_local")),
    ):
        for arm, acc in accuracies.items():
            for seed in range(seeds_of(arm)):  # every seed of an arm scores the same: resampling changes nothing
                make_record(tmp_path / version, arm, "text", seed, profile="paper", labels=labels, accuracy=acc)
        frozen = bundle.freeze(
            version, tmp_path / version, tmp_path / "results", analysis=False, log=lambda *a, **k: None
        )
        view = BundleView([frozen], "paper")
        result = rank_correlation(view, "text")
        if version == "two":
            assert result["interval"] == pytest.approx((result["rho"], result["rho"]))
            continue
        assert result["interval"] is None and math.isfinite(result["rho"])
        single = 4 if version == "one" else 3
        assert ranking(view).rows[0][-1] == f"not tested at this budget ({single} of 4 arms with 1 seed)"


def test_a_left_out_record_is_not_shown_and_the_table_names_it(slots, tmp_path):
    """--leave-out (a record run before its arm's settings were corrected): its seed leaves the cell, the
    table's note names it and its regenerating command carries it; an unknown folder is refused."""
    a, b, _ = slots
    record = (a / "runs" / "lra_transformer" / "listops" / "paper" / "seed2").as_posix()
    view = BundleView([a, b], "paper", leave_out=[Path(record)])
    assert len(view.accuracies("lra_transformer", "listops")) == 2
    relative = BundleView([a, b], "paper", leave_out=[Path(os.path.relpath(record))])  # however the path is written
    assert len(relative.accuracies("lra_transformer", "listops")) == 2
    assert f"Left out (--leave-out): {record}." in view.profile_note()
    written = make_lra_table1([a, b], tmp_path, leave_out=[Path(record)])
    md = written[0].read_text()
    assert f"--leave-out {record}`" in md.splitlines()[0] and "(n=2)" in _cells(md, "Transformer")[2]
    with pytest.raises(BundleError, match=r"^--leave-out .*seed9: not a record of the bundles given"):
        BundleView([a, b], "paper", leave_out=[Path(record.replace("seed2", "seed9"))])
    # the same records listed as a grid file's superseded ones (--leave-out-from): the same table; an unknown
    # one is refused naming the grid file that lists it
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"superseded: [{record}]\ncells: []\n")
    done = _table1_command(a, b, tmp_path / "g", "--leave-out-from", str(grid))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "g" / "tables" / "lra_table1.md").read_text().splitlines()[1:] == md.splitlines()[1:]
    grid.write_text(f"superseded: [{record.replace('seed2', 'seed9')}]\ncells: []\n")
    done = _table1_command(a, b, tmp_path / "h", "--leave-out-from", str(grid))
    assert done.returncode == 2 and done.stderr.strip() == (
        f"error: --leave-out {record.replace('seed2', 'seed9')}: not a record of the bundles given "
        f"(give bundle/runs/...) (listed as superseded in {grid})"
    )


def test_a_record_in_two_bundles_is_refused(slots, tmp_path):
    a, _, _ = slots
    with pytest.raises(BundleError, match=r"^the record of lra_linformer listops paper seed 0 is in .* and .*: pass"):
        BundleView([a, a], "paper")


def test_the_readme_s_table_1_is_the_generated_one_s_seed_means():
    """README's Results lead with LRA Table 1: each row the generated table's (paper/tables/lra_table1.md) model,
    mean ± sd with its baseline mark, published number and averages, the intervals and seed counts left out."""
    readme = (ROOT / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(readme) if line.startswith("| Model | ListOps ours | ListOps pub. |"))
    ours = list(itertools.takewhile(str.strip, readme[start + 2 :]))
    generated = (ROOT / "paper" / "tables" / "lra_table1.md").read_text().splitlines()
    first = next(i for i, line in enumerate(generated) if line.startswith("| Model | Arm | ListOps ours"))
    rows = list(itertools.takewhile(lambda line: not line.startswith("| Data"), generated[first + 2 :]))
    assert len(rows) == len(ours) == 11
    for row, line in zip(rows, ours, strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        kept = [cells[0], *(cells[i].replace(" (n=3)", "") for i in (2, 4, 5, 7, 8, 10)), cells[11], cells[12]]
        assert [c.strip() for c in line.strip("|").split("|")] == kept, cells[0]
