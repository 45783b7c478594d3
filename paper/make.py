"""Regenerate both papers' tables and figures from a bundle, ours beside the published numbers.

Usage::

    python paper/make.py --bundle results/v1 [--out paper] [--profile budget] [--listops-arm locality_k61]
                         [--comparisons paper/comparisons.yaml] [--no-verify]

Writes ``<out>/tables/<name>.md`` and ``.tex`` and ``<out>/figures/<name>.png``:

tables
  ``lra_table1_accuracy``      LRA Table 1 (seed 001): test accuracy per task, seeds' mean ± sd, published beside
  ``lra_table2_efficiency``    LRA Table 2: training steps/s and peak memory at 1K-4K from the bundle's benchmark records
  ``followup_table1_locality`` seed 003 Table 1 (bounded-kernel conv, K = 5 ... 61)
  ``followup_table2_transformer``, ``followup_table3_ssm_gmlp``, ``followup_table4_positional_ablation``
  ``statistics_pairs``         the follow-up's three claims (paper/comparisons.yaml): Welch, bootstrap CI,
                               exact McNemar, Holm within each claim, TOST between arms
  ``statistics_published``     each arm of a claim against the published number: one-sample TOST and t-test
  ``listops_operator_accuracy`` per root operator: greedy baseline vs a model (seed 003 appendix B)
  ``runs``                     every record in the bundle
  ``index``                    (Markdown only) the bundle's version and hash, and what each file is
figures
  ``lra_figure3_tradeoff``, ``followup_accuracy_vs_kernel``, ``listops_label_distribution``,
  ``listops_operator_accuracy``

Only records of one profile are shown (``--profile``; default the largest present:
paper, then budget, then smoke); the tables say how many records of other profiles
the bundle holds. A cell whose run is not in the bundle is "—" and every table counts
them; nothing is filled in. Same bundle, same bytes: rows are sorted, numbers have fixed
formats, the bootstrap is seeded and no table carries a date.

Benchmark records (LRA Table 2, Figure 3) are read from every ``bench/**/*.csv`` of the
bundle that has the columns ``model`` (or ``arm``), ``length``, ``steps_per_s`` and
``peak_mem_bytes`` (or ``peak_mem_gb``), optionally ``mode`` (only ``train`` rows are
used) and ``status`` (``OOM`` is shown as such). Where several rows give one cell, the
median is shown; where rows of several depths (``layers``) exist, a model's deepest ones.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # `python paper/make.py` from a checkout finds repro
sys.path.insert(0, str(HERE))

import plots  # noqa: E402
from render import MISSING, Table, fmt_ci, fmt_number, fmt_p, fmt_seeds  # noqa: E402

from repro import stats  # noqa: E402
from repro.bundle import BundleError, ROOTS_DIR, listops_roots_key, load_manifest, manifest_hash, require_intact  # noqa: E402
from repro.records import read_config  # noqa: E402
from repro.reference import LRA_MODEL_ARMS, published  # noqa: E402

PROFILE_ORDER = ("paper", "budget", "smoke")
TASK_NAMES = {"listops": "ListOps", "text": "Text", "retrieval": "Retrieval", "image": "Image",
              "pathfinder": "Pathfinder", "pathx": "Path-X"}
# LRA Table 1/2 model (published CSV row) -> our arm (experiments/conf/arm/lra_*.yaml)
LRA_ARMS = LRA_MODEL_ARMS
LRA_NAMES = {"bigbird": "BigBird", "linear_transformer": "Linear Transformer", "local_attention": "Local Attention",
             "sparse_transformer": "Sparse Transformer"}
LRA_TABLE1_TASKS = [("listops", "listops"), ("text", "text"), ("retrieval", "retrieval"), ("image", "image"),
                    ("pathfinder", "pathfinder"), ("path_x", "pathx")]  # (published column, our task)
LRA_AVG_TASKS = ("listops", "text", "retrieval", "image", "pathfinder")  # LRA's average leaves Path-X out
FOLLOWUP_TASKS = ("image", "pathfinder", "text", "retrieval", "listops")  # the follow-up's column order
# Follow-up table rows -> our arms. "ARM+TECHNIQUES" selects the records of ARM trained with that
# techniques group (config.yaml's techniques.name: none | followup; a record without it counts
# as none); a bare ARM takes its records whatever the techniques. None: not reproduced here (the
# row stays "—").
FOLLOWUP_TABLE2 = {"transformer": "lra_transformer", "transformer_pretrained": None,
                   "rotary_transformer_techniques": "rotary_transformer", "mega": "mega+none",
                   "mega_techniques": "mega+followup"}
FOLLOWUP_TABLE3 = {"s4": "s4+none", "s5": "s5+none", "s4_techniques": "s4+followup", "s5_techniques": "s5+followup",
                   "gmlp_techniques": "gmlp+followup"}
FOLLOWUP_TABLE4 = {("learned", "yes"): "learned_pe", ("sinusoidal", "yes"): "sinusoidal_pe",
                   ("rotary", "no"): "rotary_transformer_notech", ("rotary", "yes"): "rotary_transformer"}
LENGTHS = (("1k", 1024), ("2k", 2048), ("3k", 3072), ("4k", 4096))
GREEDY_RANDOM_ROOTS = ("[SM",)  # seed 003 appendix B: the greedy baseline guesses at random under SUM MOD


# ---------------------------------------------------------------- reading a bundle


class BundleView:
    """The records of one bundle: a frame of runs and cached per-record predictions and configs."""

    def __init__(self, path: Path, profile: str | None):
        self.path = Path(path)
        self.manifest = load_manifest(self.path)
        self.hash = manifest_hash(self.path)
        rows = []
        for run in self.manifest["runs"]:
            metrics = json.loads((self.path / run["path"] / "metrics.json").read_text())
            peak = metrics.get("peak_gpu_mem_bytes")
            techniques = (self.config(run["path"]).get("techniques") or {}).get("name") or "none"
            rows.append({"arm": metrics["arm"], "techniques": techniques, "task": metrics["task"], "profile": metrics["profile"],
                         "seed": int(metrics["seed"]), "test_acc": 100.0 * float(metrics["test_acc"]),
                         "best_val_acc": 100.0 * float(metrics["best_val_acc"]), "steps": metrics.get("steps"),
                         "examples_per_s": _float(metrics.get("train_examples_per_s")),
                         "peak_mem_gb": float(peak) / 2**30 if peak else math.nan,
                         "device": metrics.get("device"), "path": run["path"]})
        self.all_runs = pd.DataFrame(rows, columns=["arm", "techniques", "task", "profile", "seed", "test_acc", "best_val_acc", "steps",
                                                    "examples_per_s", "peak_mem_gb", "device", "path"])
        self.all_runs = self.all_runs.sort_values(["arm", "techniques", "task", "profile", "seed"]).reset_index(drop=True)
        present = list(dict.fromkeys(self.all_runs["profile"]))
        ranked = [p for p in PROFILE_ORDER if p in present] + sorted(p for p in present if p not in PROFILE_ORDER)
        if profile is not None and profile not in present:
            raise BundleError(f"--profile {profile}: the bundle holds {', '.join(sorted(present)) or 'no runs'}")
        self.profile = profile or (ranked[0] if ranked else "none")
        self.runs = self.all_runs[self.all_runs["profile"] == self.profile]
        self.other_profiles = {p: int((self.all_runs["profile"] == p).sum()) for p in sorted(present) if p != self.profile}

    def seeds(self, arm: str | None, task: str) -> pd.DataFrame:
        """Records of ``arm`` (or ``arm+techniques``) on ``task`` in the profile shown, by seed."""
        if arm is None:
            return self.runs.iloc[0:0]
        name, _, techniques = arm.partition("+")
        chosen = self.runs[(self.runs["arm"] == name) & (self.runs["task"] == task)]
        return chosen[chosen["techniques"] == techniques] if techniques else chosen

    def accuracies(self, arm: str | None, task: str) -> list[float]:
        return self.seeds(arm, task)["test_acc"].tolist()

    def predictions(self, run_path: str) -> pd.DataFrame:
        frame = pd.read_csv(self.path / run_path / "predictions.csv")
        return frame.sort_values("index").reset_index(drop=True)

    def config(self, run_path: str) -> dict:
        return read_config(self.path / run_path / "config.yaml")

    def profile_note(self) -> str:
        note = f"Ours: profile {self.profile}, test accuracy at the best-validation checkpoint (%), seeds' mean ± sd (n seeds)."
        if self.other_profiles:
            note += " Not shown: " + ", ".join(f"{n} record(s) of profile {p}" for p, n in self.other_profiles.items()) + "."
        return note


def _float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


# ---------------------------------------------------------------- accuracy tables


def _pub(value, digits: int = 2) -> str:
    """A published number with the decimals it was published with; text (FAIL) as it is."""
    if isinstance(value, str):
        try:
            return f"{float(value):.{digits}f}"
        except ValueError:
            return value
    return fmt_number(value, digits)


def _mean_or_nan(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def _lra_name(model: str) -> str:
    return LRA_NAMES.get(model, model.capitalize())


def lra_table1(view: BundleView) -> Table:
    pub = published("lra_table1_accuracy").set_index("model")
    columns, ours_cols = ["Model", "Arm"], []
    for column, task in LRA_TABLE1_TASKS:
        ours_cols.append(len(columns))
        columns += [f"{TASK_NAMES[task]} ours", f"{TASK_NAMES[task]} pub."]
    ours_cols.append(len(columns))
    columns += ["Avg ours", "Avg pub."]
    rows = []
    for model, arm in LRA_ARMS.items():
        row = [_lra_name(model), arm]
        for column, task in LRA_TABLE1_TASKS:
            row += [fmt_seeds(view.accuracies(arm, task)), _pub(pub.loc[model, column])]
        means = [_mean_or_nan(view.accuracies(arm, t)) for t in LRA_AVG_TASKS]
        row += [fmt_number(np.mean(means)) if all(math.isfinite(m) for m in means) else MISSING, _pub(pub.loc[model, "avg"])]
        rows.append(row)
    return Table("lra_table1_accuracy", "LRA Table 1: test accuracy (%), ours beside the published", columns, rows, ours_cols,
                 [view.profile_note(), "Avg: mean over the five tasks without Path-X, as LRA's; ours only when all five ran. "
                  "Published: Tay et al. 2021, Table 1 (FAIL: chance on Path-X)."])


def followup_table(view: BundleView, name: str, title: str, source: str, arms: dict, key) -> Table:
    pub = published(source)
    columns, ours_cols = ["Row", "Arm"], []
    for task in FOLLOWUP_TASKS:
        ours_cols.append(len(columns))
        columns += [f"{TASK_NAMES[task]} ours", f"{TASK_NAMES[task]} pub."]
    has_avg = "avg" in pub.columns
    if has_avg:
        ours_cols.append(len(columns))
        columns += ["Avg ours", "Avg pub."]
    rows = []
    for _, record in pub.iterrows():
        row_key = key(record)
        arm = arms.get(row_key)
        label = " / ".join(map(str, row_key)) if isinstance(row_key, tuple) else str(row_key)
        row = [str(label), arm or "(not reproduced)"]
        for task in FOLLOWUP_TASKS:
            row += [fmt_seeds(view.accuracies(arm, task)), _pub(record[task])]
        if has_avg:
            means = [_mean_or_nan(view.accuracies(arm, t)) for t in FOLLOWUP_TASKS]
            row += [fmt_number(np.mean(means)) if all(math.isfinite(m) for m in means) else MISSING, _pub(record["avg"])]
        rows.append(row)
    notes = [view.profile_note(), f"Published: seed 003 ({source}.csv in repro/reference)."]
    if any(a is None for a in arms.values()):
        notes.append("(not reproduced): a row outside this reproduction's arms; its cells stay empty.")
    return Table(name, title, columns, rows, ours_cols, notes)


def locality_table(view: BundleView) -> Table:
    return followup_table(view, "followup_table1_locality",
                          "Follow-up Table 1: bounded-kernel convolution, test accuracy (%) per kernel size K",
                          "followup_table1_locality",
                          {int(k): f"locality_k{int(k)}" for k in published("followup_table1_locality")["kernel_size"]},
                          lambda r: int(r["kernel_size"]))


# ---------------------------------------------------------------- efficiency


def bench_frame(view: BundleView) -> pd.DataFrame:
    """Training rows of every benchmark CSV in the bundle: model, length, steps_per_s, peak_mem_gb, status."""
    frames = []
    for path in sorted((view.path / "bench").rglob("*.csv")) if (view.path / "bench").is_dir() else []:
        frame = pd.read_csv(path)
        if "model" not in frame.columns and "arm" in frame.columns:
            frame = frame.rename(columns={"arm": "model"})
        if not {"model", "length", "steps_per_s"} <= set(frame.columns):
            continue
        if "mode" in frame.columns:
            frame = frame[frame["mode"].astype(str) == "train"]
        if "peak_mem_gb" not in frame.columns:
            frame["peak_mem_gb"] = pd.to_numeric(frame.get("peak_mem_bytes"), errors="coerce") / 2**30
        frame["status"] = frame["status"].astype(str) if "status" in frame.columns else "ok"
        frame["layers"] = pd.to_numeric(frame["layers"], errors="coerce") if "layers" in frame.columns else math.nan
        frames.append(frame[["model", "length", "steps_per_s", "peak_mem_gb", "status", "layers"]])
    if not frames:
        return pd.DataFrame(columns=["model", "length", "steps_per_s", "peak_mem_gb", "status", "layers"])
    out = pd.concat(frames, ignore_index=True)
    # A one-layer memory table beside the full-model one: keep each model's deepest rows (LRA Table 2's).
    deepest = out.groupby("model")["layers"].transform("max")
    out = out[out["layers"].isna() | (out["layers"] == deepest)]
    reverse = {arm: model for model, arm in LRA_ARMS.items()}
    out["model"] = out["model"].astype(str).map(lambda m: reverse.get(m, m))
    out["steps_per_s"] = pd.to_numeric(out["steps_per_s"], errors="coerce")
    out["peak_mem_gb"] = pd.to_numeric(out["peak_mem_gb"], errors="coerce")
    out["length"] = pd.to_numeric(out["length"], errors="coerce")
    return out


def _bench_cell(bench: pd.DataFrame, model: str, length: int, column: str, digits: int) -> str:
    rows = bench[(bench["model"] == model) & (bench["length"] == length)]
    if rows.empty:
        return MISSING
    ok = rows[rows["status"].str.upper() != "OOM"][column].dropna()
    if ok.empty:
        return "OOM" if (rows["status"].str.upper() == "OOM").any() else MISSING
    return fmt_number(float(np.median(ok)), digits)


def lra_table2(view: BundleView, bench: pd.DataFrame) -> Table:
    pub = published("lra_table2_efficiency").set_index("model")
    models = list(LRA_ARMS) + sorted(set(bench["model"]) - set(LRA_ARMS))
    columns, ours_cols = ["Model"], []
    for label, _ in LENGTHS:
        ours_cols.append(len(columns))
        columns += [f"steps/s {label.upper()} ours", f"steps/s {label.upper()} pub."]
    for label, _ in LENGTHS:
        ours_cols.append(len(columns))
        columns += [f"GB {label.upper()} ours", f"GB {label.upper()} pub."]
    rows = []
    for model in models:
        row = [_lra_name(model) if model in LRA_ARMS else model]
        for label, length in LENGTHS:
            row += [_bench_cell(bench, model, length, "steps_per_s", 1),
                    _pub(pub.loc[model, f"steps_per_s_{label}"], 1) if model in pub.index else MISSING]
        for label, length in LENGTHS:
            row += [_bench_cell(bench, model, length, "peak_mem_gb", 2),
                    _pub(pub.loc[model, f"peak_mem_gb_{label}"]) if model in pub.index else MISSING]
        rows.append(row)
    devices = sorted(view.manifest.get("devices", []))
    return Table("lra_table2_efficiency", "LRA Table 2: training steps per second and peak memory (GB), ours beside the published",
                 columns, rows, ours_cols,
                 [f"Ours: the bundle's benchmark records (bench/*.csv, training rows, median per cell); run devices: {', '.join(devices) or 'none'}.",
                  "Published: 4x4 TPU v3, batch 32, byte-level text (Tay et al. 2021, Table 2); Sparse Transformer and Longformer were not timed there."])


# ---------------------------------------------------------------- statistics


def load_comparisons(path: Path) -> dict:
    if not path.exists():
        raise BundleError(f"{path}: no comparisons file (see paper/comparisons.yaml for the format)")
    spec = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    for i, family in enumerate(spec.get("families", [])):
        for key in ("claim", "tasks", "pairs"):
            if key not in family:
                raise BundleError(f"{path}: families[{i}] lacks '{key}'")
    return spec


def _correctness(view: BundleView, seeds: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """[seeds, examples] 0/1 matrix and the labels, or None when the seeds saw different test sets."""
    labels, rows = None, []
    for path in seeds["path"]:
        frame = view.predictions(path)
        if labels is None:
            labels = frame["label"].to_numpy()
        elif not np.array_equal(labels, frame["label"].to_numpy()):
            return None
        rows.append((frame["prediction"].to_numpy() == frame["label"].to_numpy()).astype(float))
    return (np.vstack(rows), labels) if rows else None


def _published_value(spec: dict, task: str) -> tuple[float, str]:
    table = published(spec["table"])
    match = table[table[spec.get("key", "arm")].astype(str) == str(spec["row"])]
    if match.empty:
        raise BundleError(f"published table {spec['table']} has no row {spec.get('key', 'arm')}={spec['row']}")
    return float(match.iloc[0][task]), f"{spec['row']} ({spec['table']})"


def statistics_tables(view: BundleView, spec: dict) -> tuple[Table, Table]:
    alpha, margin = float(spec.get("alpha", 0.05)), float(spec["margin_points"])
    boot = spec.get("bootstrap", {})
    pair_rows, pub_rows = [], []
    for family in spec["families"]:
        results = []
        for task in family["tasks"]:
            for arm_a, arm_b in family["pairs"]:
                a, b = view.seeds(arm_a, task), view.seeds(arm_b, task)
                welch = stats.welch(a["test_acc"], b["test_acc"], alpha=alpha)
                tost = stats.tost_ind(a["test_acc"], b["test_acc"], margin=margin, alpha=alpha)
                ca, cb = _correctness(view, a), _correctness(view, b)
                boot_ci, mcnemar, mcnemar_seed = (math.nan, math.nan), math.nan, None
                if ca is not None and cb is not None and np.array_equal(ca[1], cb[1]):
                    boot_ci = tuple(100 * x for x in stats.bootstrap_hierarchical(
                        ca[0], cb[0], n_resamples=int(boot.get("resamples", 2000)), seed=int(boot.get("seed", 0))).ci)
                    common = sorted(set(a["seed"]) & set(b["seed"]))
                    if common:
                        mcnemar_seed = common[0]
                        ia, ib = list(a["seed"]).index(mcnemar_seed), list(b["seed"]).index(mcnemar_seed)
                        mcnemar = stats.mcnemar(ca[0][ia], cb[0][ib]).p_value
                results.append((task, arm_a, arm_b, a, b, welch, tost, boot_ci, mcnemar, mcnemar_seed))
        welch_holm, _ = stats.holm([r[5].p_value for r in results], alpha=alpha)
        mcnemar_holm, _ = stats.holm([r[8] for r in results], alpha=alpha)
        for (task, arm_a, arm_b, a, b, welch, tost, boot_ci, mcnemar, seed), wh, mh in zip(results, welch_holm, mcnemar_holm):
            have = len(a) and len(b)
            pair_rows.append([family["claim"], TASK_NAMES.get(task, task), arm_a, arm_b, f"{len(a)}/{len(b)}",
                              fmt_number(a["test_acc"].mean() if len(a) else math.nan),
                              fmt_number(b["test_acc"].mean() if len(b) else math.nan),
                              fmt_number(welch.estimate if have else math.nan), fmt_ci(*boot_ci),
                              fmt_p(welch.p_value), fmt_p(wh),
                              f"{fmt_p(mcnemar)} (seed {seed})" if seed is not None else MISSING, fmt_p(mh),
                              fmt_p(tost.p_value)])
        if "published" in family:
            arms = sorted({arm for pair in family["pairs"] for arm in pair})
            for task in family["tasks"]:
                reference, source = _published_value(family["published"], task)
                for arm in arms:
                    seeds = view.accuracies(arm, task)
                    tost = stats.tost_published(seeds, reference, margin=margin, alpha=alpha) if seeds else None
                    one = stats.one_sample(seeds, reference, alpha=alpha) if seeds else None
                    pub_rows.append([family["claim"], TASK_NAMES.get(task, task), arm, source, fmt_number(reference),
                                     str(len(seeds)), fmt_seeds(seeds),
                                     fmt_number(tost.estimate if tost else math.nan),
                                     fmt_ci(*(tost.ci if tost else (math.nan, math.nan))),
                                     fmt_p(tost.p_value if tost else math.nan), fmt_p(one.p_value if one else math.nan)])
    pairs = Table("statistics_pairs", f"Statistics: the follow-up's claims, arm A vs arm B (accuracy points; TOST margin ±{margin:g})",
                  ["Claim", "Task", "A", "B", "n A/B", "A mean", "B mean", "Δ A−B", "95% CI (bootstrap)", "Welch p",
                   "Welch p (Holm)", "McNemar p", "McNemar p (Holm)", f"TOST A≈B p (±{margin:g})"],
                  pair_rows, list(range(4, 14)),
                  [view.profile_note(),
                   "Welch: t-test over seeds (scipy). Bootstrap: percentile 95% CI, seeds resampled within each arm and "
                   "test examples resampled jointly for both arms "
                   f"({int(boot.get('resamples', 2000))} resamples, seed {int(boot.get('seed', 0))}). McNemar: exact binomial "
                   "on the lowest seed both arms ran (same test set). Holm: within each claim, over its tasks and pairs, "
                   f"separately for Welch and McNemar. TOST: H0 |Δ| ≥ {margin:g} point(s); small p supports equivalence. "
                   "— : fewer than 2 seeds per arm, or not run."])
    against = Table("statistics_published", f"Statistics: our seeds against the published numbers (TOST margin ±{margin:g} point)",
                    ["Claim", "Task", "Arm", "Published row", "Published", "n", "Ours", "Δ ours−pub", "90% CI of Δ",
                     f"TOST p (±{margin:g})", "t-test p"],
                    pub_rows, list(range(5, 11)),
                    [view.profile_note(), "TOST: one-sample, H0 |mean − published| ≥ margin (statsmodels ttost_mean); "
                     "t-test: two-sided one-sample (scipy). — : fewer than 2 seeds, or not run."])
    return pairs, against


# ---------------------------------------------------------------- ListOps appendix B


def listops_analysis(view: BundleView, arm: str | None):
    """(label counts per root, per-root rows of greedy vs model, the note) for seed 003 appendix B."""
    listops = view.runs[view.runs["task"] == "listops"]
    if arm is None and not listops.empty:
        means = listops.groupby("arm")["test_acc"].mean()
        arm = sorted(means.index, key=lambda a: (-means[a], a))[0]
    seeds = listops[listops["arm"] == arm] if arm else listops.iloc[0:0]
    if seeds.empty:
        return None, [], f"no ListOps records{f' of arm {arm}' if arm else ''} in profile {view.profile}"
    keys = [listops_roots_key(view.config(p)) for p in seeds["path"]]
    key = keys[0]
    csv_path, json_path = view.path / ROOTS_DIR / f"{key}.csv", view.path / ROOTS_DIR / f"{key}.json"
    if not csv_path.exists():
        return None, [], f"the bundle has no root-operator analysis for {arm}'s test set (freeze with the ListOps data at hand)"
    roots = pd.read_csv(csv_path).sort_values("index")
    train = json.loads(json_path.read_text())["train"]
    counts = {root: [int((group["label"] == k).sum()) for k in range(10)] for root, group in roots.groupby("root")}
    per_seed = []
    for path, seed_key in zip(seeds["path"], keys):
        if seed_key != key:
            continue
        frame = view.predictions(path)
        right = (frame["prediction"].to_numpy() == frame["label"].to_numpy())
        per_seed.append({root: 100.0 * right[group["index"].to_numpy()].mean() for root, group in roots.groupby("root")})
    rows = []
    for root, group in sorted(roots.groupby("root")):
        if root in GREEDY_RANDOM_ROOTS:
            greedy = 10.0  # uniform guess over 10 labels: expected accuracy 1/10
        else:
            majority = train.get(root, {}).get("most_frequent_label")
            greedy = 100.0 * float((group["label"] == majority).mean()) if majority is not None else math.nan
        values = [s[root] for s in per_seed]
        rows.append({"root": root, "n": len(group), "greedy": greedy, "model": float(np.mean(values)),
                     "model_sd": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0, "seeds": len(values)})
    note = (f"{arm}, profile {view.profile}, {len(per_seed)} seed(s), {len(roots)} test examples; greedy: the training "
            "set's most frequent label per root operator (SM: uniform guess, 10%)")
    return counts, rows, note


def listops_table(rows: list[dict], note: str) -> Table:
    body = [[r["root"].lstrip("["), str(r["n"]), fmt_number(r["greedy"]), fmt_number(r["model"]),
             fmt_number(r["model"] - r["greedy"])] for r in rows]
    if not body:
        body = [[MISSING] * 5]
    return Table("listops_operator_accuracy", "ListOps: test accuracy (%) per root operator, model vs greedy baseline (seed 003 appendix B, Figure 2)",
                 ["Root", "n", "Greedy", "Model", "Δ"], body, [1, 2, 3, 4], [note + "."])


# ---------------------------------------------------------------- runs and figures


def runs_table(view: BundleView) -> Table:
    rows = [[r.arm, r.techniques, TASK_NAMES.get(r.task, r.task), r.profile, str(r.seed), fmt_number(r.test_acc), fmt_number(r.best_val_acc),
             str(r.steps), fmt_number(r.examples_per_s, 1), fmt_number(r.peak_mem_gb), str(r.device)]
            for r in view.all_runs.itertuples()]
    return Table("runs", "Every run record in the bundle", ["Arm", "Techniques", "Task", "Profile", "Seed", "Test acc", "Best val acc",
                 "Steps", "Train examples/s", "Peak GB", "Device"], rows, [5, 6, 7, 8],
                 ["Test accuracy at the best-validation checkpoint (%). Peak GB: torch.cuda.max_memory_allocated (— on CPU)."])


def tradeoff_points(view: BundleView, bench: pd.DataFrame) -> tuple[list[dict], list[dict], str]:
    pub_acc = published("lra_table1_accuracy").set_index("model")
    pub_eff = published("lra_table2_efficiency").set_index("model")
    pub_points = [{"name": m, "accuracy": float(pub_acc.loc[m, "avg"]),
                   "speed": float(pub_eff.loc[m, "steps_per_s_4k"]) if m in pub_eff.index else math.nan,
                   "memory_gb": float(pub_eff.loc[m, "peak_mem_gb_4k"]) if m in pub_eff.index else math.nan}
                  for m in LRA_ARMS]
    use_bench = not bench.empty
    axis = "training steps/s at 4K (benchmark records)" if use_bench else "training examples/s on text (run records)"
    ours = []
    for model, arm in LRA_ARMS.items():
        means = [_mean_or_nan(view.accuracies(arm, t)) for t in LRA_AVG_TASKS]
        done = [m for m in means if math.isfinite(m)]
        if use_bench:
            rows = bench[(bench["model"] == model) & (bench["length"] == 4096) & (bench["status"].str.upper() != "OOM")]
            speed = float(rows["steps_per_s"].median()) if not rows.empty else math.nan
            memory = float(rows["peak_mem_gb"].median()) if not rows.empty else math.nan
        else:
            text = view.seeds(arm, "text")
            speed = float(text["examples_per_s"].mean()) if not text.empty else math.nan
            memory = float(text["peak_mem_gb"].mean()) if not text.empty else math.nan
        ours.append({"name": model, "accuracy": float(np.mean(done)) if done else math.nan, "speed": speed,
                     "memory_gb": memory, "tasks": len(done)})
    return pub_points, ours, axis


def kernel_curves(view: BundleView) -> tuple[list[int], dict, dict]:
    table = published("followup_table1_locality")
    kernels = [int(k) for k in table["kernel_size"]]
    pub = {t: {int(r["kernel_size"]): float(r[t]) for _, r in table.iterrows()} for t in FOLLOWUP_TASKS}
    ours = {t: {k: view.accuracies(f"locality_k{k}", t) for k in kernels} for t in FOLLOWUP_TASKS}
    return kernels, pub, ours


def index_page(view: BundleView, tables: list[Table], figures: list[Path]) -> str:
    lines = [f"# Tables and figures of bundle {view.manifest['version']}", "",
             f"Regenerated by `python paper/make.py --bundle {view.path.as_posix()}` from bundle version "
             f"{view.manifest['version']} (MANIFEST.json sha256 {view.hash}); profile shown: {view.profile}.", "",
             "| table | missing cells (not run) | files |", "| --- | --- | --- |"]
    for t in tables:
        missing, total = t.missing()
        lines.append(f"| {t.title} | {missing} of {total} | [{t.name}.md]({t.name}.md), [{t.name}.tex]({t.name}.tex) |")
    lines += ["", "| figure | file |", "| --- | --- |"]
    lines += [f"| {p.stem} | [../figures/{p.name}](../figures/{p.name}) |" for p in figures]
    return "\n".join(lines) + "\n"


def make(bundle: Path, out: Path, profile: str | None = None, comparisons: Path = HERE / "comparisons.yaml",
         listops_arm: str | None = None, verify: bool = True) -> list[Path]:
    """Write every table and figure; returns the paths written."""
    if verify:
        require_intact(bundle)
    view = BundleView(bundle, profile)
    bench = bench_frame(view)
    tables = [
        lra_table1(view),
        lra_table2(view, bench),
        locality_table(view),
        followup_table(view, "followup_table2_transformer", "Follow-up Table 2: Transformer arms and MEGA, test accuracy (%)",
                       "followup_table2_transformer", FOLLOWUP_TABLE2, lambda r: r["arm"]),
        followup_table(view, "followup_table3_ssm_gmlp", "Follow-up Table 3: SSMs and gMLP, test accuracy (%)",
                       "followup_table3_ssm_gmlp", FOLLOWUP_TABLE3, lambda r: r["arm"]),
        followup_table(view, "followup_table4_positional_ablation",
                       "Follow-up Table 4: positional encodings with and without training techniques, test accuracy (%)",
                       "followup_table4_positional_ablation", FOLLOWUP_TABLE4, lambda r: (r["positional"], r["training_techniques"])),
        *statistics_tables(view, load_comparisons(Path(comparisons))),
    ]
    counts, operator_rows, note = listops_analysis(view, listops_arm)
    tables += [listops_table(operator_rows, note), runs_table(view)]
    written = [p for t in tables for p in t.write(out / "tables")]
    figures_dir = out / "figures"
    pub_points, our_points, axis = tradeoff_points(view, bench)
    kernels, pub_curves, our_curves = kernel_curves(view)
    figures = [
        plots.tradeoff(pub_points, our_points, axis, figures_dir / "lra_figure3_tradeoff.png"),
        plots.accuracy_vs_kernel(list(FOLLOWUP_TASKS), kernels, pub_curves, our_curves, figures_dir / "followup_accuracy_vs_kernel.png"),
        plots.label_distribution(counts, figures_dir / "listops_label_distribution.png", note),
        plots.operator_accuracy(operator_rows, figures_dir / "listops_operator_accuracy.png", note),
    ]
    index = out / "tables" / "index.md"
    index.write_text(index_page(view, tables, figures), encoding="utf-8")
    return written + figures + [index]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True, help="a bundle folder, e.g. results/v1")
    parser.add_argument("--out", type=Path, default=HERE, help="where tables/ and figures/ go (default: paper/)")
    parser.add_argument("--profile", help="profile to show (default: paper, else budget, else smoke)")
    parser.add_argument("--comparisons", type=Path, default=HERE / "comparisons.yaml")
    parser.add_argument("--listops-arm", help="arm of the ListOps per-operator figure (default: best mean ListOps accuracy)")
    parser.add_argument("--no-verify", action="store_true", help="skip checking the bundle's checksums first")
    args = parser.parse_args(argv)
    try:
        written = make(args.bundle, args.out, args.profile, args.comparisons, args.listops_arm, verify=not args.no_verify)
    except BundleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
