"""paper/make.py on a bundle frozen from synthetic records (issue 8, acceptance 3)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_records import SMOKE_LISTOPS, fixed_labels, make_record
from scipy import stats as sps

from repro import bundle

ROOT = Path(__file__).resolve().parents[1]
TABLES = ["lra_table1_accuracy", "lra_table2_efficiency", "followup_table1_locality", "followup_table2_transformer",
          "followup_table3_ssm_gmlp", "followup_table4_positional_ablation", "statistics_pairs", "statistics_published",
          "listops_operator_accuracy", "runs"]
FIGURES = ["lra_figure3_tradeoff", "followup_accuracy_vs_kernel", "listops_label_distribution", "listops_operator_accuracy"]
ACCURACY = {  # arm -> task -> per-seed accuracies
    "lra_transformer": {t: [0.50, 0.55, 0.53] for t in ("listops", "text", "retrieval", "image", "pathfinder", "pathx")},
    "lra_performer": {"listops": [0.2, 0.25], "text": [0.6, 0.62]},
    "locality_k5": {"listops": [0.40, 0.42, 0.41], "text": [0.88, 0.90, 0.89]},
    "locality_k61": {"listops": [0.50, 0.53, 0.52], "text": [0.84, 0.85, 0.86]},
    "locality_k11": {"image": [0.6]},
    "rotary_transformer": {"listops": [0.61, 0.62, 0.63], "text": [0.90, 0.91, 0.89]},
    "rotary_transformer_notech": {"listops": [0.44, 0.43, 0.45], "text": [0.70, 0.69, 0.71]},
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
                if task == "listops":
                    make_record(runs, arm, task, seed, labels=listops.test.labels, accuracy=acc, num_classes=10,
                                task_cfg=SMOKE_LISTOPS, examples_per_s=900.0 + seed)
                else:
                    make_record(runs, arm, task, seed, labels=fixed_labels(task, 100), accuracy=acc,
                                examples_per_s=1000.0 + 10 * seed)
    # same arm with and without the training techniques (told apart by config.yaml's techniques.name)
    for seed, techniques, acc in ((0, "none", 0.80), (1, "none", 0.82), (2, "followup", 0.90), (3, "followup", 0.91)):
        make_record(runs, "s4", "text", seed, labels=fixed_labels("text", 100), accuracy=acc, techniques=techniques)
    for seed, acc in ((0, 0.89), (1, 0.90)):
        make_record(runs, "gmlp", "text", seed, labels=fixed_labels("text", 100), accuracy=acc, techniques="followup")
    make_record(runs, "lra_transformer", "text", 0, profile="smoke", labels=fixed_labels("text", 100), accuracy=0.5, device="cpu")
    bench = tmp / "bench"
    bench.mkdir()
    rows = [("lra_transformer", L, "train", s, int(m * 2**30), "ok", 4) for L, s, m in ((1024, 100.0, 1.0), (4096, 20.0, 5.0), (4096, 22.0, 5.0))]
    rows += [("lra_transformer", 1024, "train", 500.0, 2**28, "ok", 1)]  # a one-layer memory row: not LRA Table 2's model
    rows += [("lra_performer", 4096, "train", float("nan"), float("nan"), "OOM", 4), ("lra_performer", 4096, "infer", 99.0, 1, "ok", 4)]
    pd.DataFrame(rows, columns=["model", "length", "mode", "steps_per_s", "peak_mem_bytes", "status", "layers"]).to_csv(bench / "bench.csv", index=False)
    out = bundle.freeze("v0", runs, tmp / "results", bench=[bench], data_dir=tmp / "nodata", cache_dir=cache,
                        log=lambda *a, **k: None)
    assert bundle.load_manifest(out)["analysis_missing"] == []
    return out


def make(bundle_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(ROOT / "paper" / "make.py"), "--bundle", str(bundle_dir), "--out", str(out), *extra],
                          capture_output=True, text=True, env=env, timeout=300)
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
    import json

    paths = sorted((frozen / "runs" / arm / task / "budget").glob("seed*/metrics.json"))
    return np.array([100 * json.loads(p.read_text())["test_acc"] for p in paths])


def _seeds_cell(pct: np.ndarray) -> str:
    return f"{pct.mean():.2f} ± {pct.std(ddof=1):.2f} (n={pct.size})"


def test_lra_table1_shows_ours_beside_published_and_counts_missing_cells(made, frozen):
    table = (made[0] / "tables/lra_table1_accuracy.md").read_text()
    transformer = _row(table, "Transformer")
    assert transformer[2:4] == [_seeds_cell(_test_accs(frozen, "lra_transformer", "listops")), "36.37"]
    assert transformer[12:14] == [_seeds_cell(_test_accs(frozen, "lra_transformer", "pathx")), "FAIL"]
    average = np.mean([_test_accs(frozen, "lra_transformer", t).mean() for t in ("listops", "text", "retrieval", "image", "pathfinder")])
    assert transformer[14:16] == [f"{average:.2f}", "54.39"]  # every task but Path-X ran: our average is shown
    performer = _row(table, "Performer")
    assert performer[2:6] == [_seeds_cell(_test_accs(frozen, "lra_performer", "listops")), "18.01",
                              _seeds_cell(_test_accs(frozen, "lra_performer", "text")), "65.40"]
    assert performer[6] == "—" and performer[14] == "—"  # not run, never filled
    # 11 models x (6 tasks + avg) of ours; transformer has 7, performer 2
    assert "Missing cells (not run, marked —): 68 of 77." in table
    assert "Not shown: 1 record(s) of profile smoke." in table
    tex = (made[0] / "tables/lra_table1_accuracy.tex").read_text()
    assert "\\begin{tabular}" in tex and "$\\pm$" in tex and "---" in tex and "68 of 77" in tex


def test_followup_tables_map_arms_to_rows(made, frozen):
    locality = (made[0] / "tables/followup_table1_locality.md").read_text()
    k61 = _row(locality, "61")
    assert k61[1] == "locality_k61" and k61[6:10] == [_seeds_cell(_test_accs(frozen, "locality_k61", "text")), "85.41", "—", "89.04"]
    assert _row(locality, "11")[2:4] == ["60.00 (n=1)", "64.47"]
    ablation = (made[0] / "tables/followup_table4_positional_ablation.md").read_text()
    assert _row(ablation, "rotary / no")[1] == "rotary_transformer_notech"
    table2 = (made[0] / "tables/followup_table2_transformer.md").read_text()
    assert _row(table2, "transformer_pretrained")[1] == "(not reproduced)"
    table3 = (made[0] / "tables/followup_table3_ssm_gmlp.md").read_text()
    assert "Missing cells (not run, marked —): 27 of 30." in table3
    assert _row(table3, "s4")[1] == "s4+none" and _row(table3, "s4")[6] == "81.00 ± 1.41 (n=2)"
    assert _row(table3, "s4_techniques")[6] == "90.50 ± 0.71 (n=2)" and _row(table3, "s5_techniques")[6] == "—"
    assert _row(table3, "gmlp_techniques")[6:8] == ["89.50 ± 0.71 (n=2)", "89.94"]


def test_efficiency_table_reads_benchmark_records(made):
    table = (made[0] / "tables/lra_table2_efficiency.md").read_text()
    transformer = _row(table, "Transformer")
    assert transformer[1:3] == ["100.0", "8.1"] and transformer[7:9] == ["21.0", "1.4"]  # median of 20 and 22
    assert transformer[9:11] == ["1.00", "0.85"] and transformer[15:17] == ["5.00", "9.48"]
    performer = _row(table, "Performer")
    assert performer[7] == "OOM" and performer[1] == "—"  # the inference row is not a training number


def test_statistics_tables_match_tests_computed_here(made, frozen):
    table = (made[0] / "tables/statistics_pairs.md").read_text()
    line = next(l for l in table.splitlines() if "| ListOps | locality_k61 | locality_k5 |" in l)
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    a, b = _test_accs(frozen, "locality_k61", "listops"), _test_accs(frozen, "locality_k5", "listops")
    welch = sps.ttest_ind(a, b, equal_var=False).pvalue
    assert cells[4] == "3/3" and cells[7] == f"{a.mean() - b.mean():.2f}"
    assert cells[9] == ("<0.001" if welch < 0.001 else f"{welch:.3f}")
    # McNemar on seed 0 from the frozen predictions, independently: exact binomial on discordant pairs
    pa = pd.read_csv(frozen / "runs/locality_k61/listops/budget/seed0/predictions.csv")
    pb = pd.read_csv(frozen / "runs/locality_k5/listops/budget/seed0/predictions.csv")
    ra, rb = pa["prediction"] == pa["label"], pb["prediction"] == pb["label"]
    p = sps.binomtest(int((ra & ~rb).sum()), int((ra ^ rb).sum()), 0.5).pvalue
    assert cells[11] == f"{'<0.001' if p < 0.001 else f'{p:.3f}'} (seed 0)"
    assert re.fullmatch(r"\[-?\d+\.\d\d, -?\d+\.\d\d\]", cells[8])
    gmlp = next(l for l in table.splitlines() if "| ListOps | gmlp+followup | s4+followup |" in l)
    assert gmlp.count("—") >= 9 and "0/0" in gmlp  # not run: shown, not dropped
    text = next(l for l in table.splitlines() if "| Text | gmlp+followup | s4+followup |" in l)
    assert "| 2/2 | 89.50 | 90.50 | -1.00 |" in text
    against = (made[0] / "tables/statistics_published.md").read_text()
    row = next(l for l in against.splitlines() if "| Text | rotary_transformer |" in l and "Training techniques" in l)
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    assert cells[3] == "mega (followup_table2_transformer)" and cells[4] == "90.43"
    ours = _test_accs(frozen, "rotary_transformer", "text")
    t = sps.ttest_1samp(ours, 90.43).pvalue
    assert cells[10] == ("<0.001" if t < 0.001 else f"{t:.3f}")
    assert "TOST margin ±1 point" in against


def test_listops_operator_table_against_the_greedy_baseline(made, frozen):
    [key] = [p.stem for p in (frozen / "analysis/listops_roots").glob("*.csv")]
    roots = pd.read_csv(frozen / f"analysis/listops_roots/{key}.csv")
    import json
    train = json.loads((frozen / f"analysis/listops_roots/{key}.json").read_text())["train"]
    table = (made[0] / "tables/listops_operator_accuracy.md").read_text()
    assert "rotary_transformer, profile budget, 3 seed(s)" in table  # the best ListOps arm by default
    for root, group in roots.groupby("root"):
        greedy = 10.0 if root == "[SM" else 100 * float((group["label"] == train[root]["most_frequent_label"]).mean())
        accs = []
        for seed in range(3):
            pred = pd.read_csv(frozen / f"runs/rotary_transformer/listops/budget/seed{seed}/predictions.csv")
            right = (pred["prediction"] == pred["label"]).to_numpy()
            accs.append(100 * right[group["index"].to_numpy()].mean())
        assert _row(table, root.lstrip("["))[1:4] == [str(len(group)), f"{greedy:.2f}", f"{np.mean(accs):.2f}"]


def test_a_changed_bundle_is_refused(frozen, tmp_path):
    import shutil

    copy = tmp_path / "v0"
    shutil.copytree(frozen, copy)
    (copy / "runs/locality_k5/text/budget/seed0/metrics.json").write_text("{}")
    done = make(copy, tmp_path / "out")
    assert done.returncode == 1 and "changed: runs/locality_k5/text/budget/seed0/metrics.json" in done.stderr
    assert not (tmp_path / "out").exists()
