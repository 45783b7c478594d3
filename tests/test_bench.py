"""The speed and memory benchmark: end to end on CPU, FLOP counts, OOM rows, the table."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from repro.bench import matrix, report
from repro.bench.flops import analytic_forward_flops
from repro.bench.models import BenchModel, apply_model_changes, build, plan, resolve_arm, sequence_length

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "experiments" / "bench.py"
MODELS = ["lra_transformer", "locality_k61"]
LENGTHS = [32, 64]


def run_bench(*overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, str(BENCH), *overrides], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def read_csv(path: Path) -> list[dict]:
    with open(path) as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """One CPU run of the Hydra entry point: 2 models x 2 lengths x train and infer, depth 1, the
    arms' ListOps settings, with an out-of-memory error injected into the first measurement."""
    out = tmp_path_factory.mktemp("bench")
    done = run_bench(
        f"models=[{','.join(MODELS)}]",
        f"lengths=[{','.join(map(str, LENGTHS))}]",
        "batch=2",
        "depth=1",
        "warmup=1",
        "reps=2",
        f"out_dir={out}",
        f"accuracy_dir={out / 'no_runs'}",
        "progress=false",
        "device=cpu",
        "arm_task=listops",  # the arms' ListOps settings (a plain key: `task` names the runner's task group)
        "debug.oom_at=lra_transformer@32@infer",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    folders = [p for p in out.iterdir()]
    assert len(folders) == 1 and re.fullmatch(r"\d{4}-\d{2}-\d{2}_cpu_both", folders[0].name), folders
    assert "1 OOM" in done.stdout
    return folders[0]


def test_cli_writes_a_record_with_every_field(bundle):
    assert sorted(p.name for p in bundle.iterdir()) == ["bench.csv", "bench.json", "figure.png", "table.md"]
    record = json.loads((bundle / "bench.json").read_text())
    for key in (
        "device",
        "torch",
        "cuda",
        "dtype",
        "date",
        "batch",
        "lengths",
        "matmul_peak_tflops",
        "git_commit",
        "tree_changes",
    ):
        assert key in record, key
    assert record["device"] == "cpu" and record["batch"] == 2 and record["lengths"] == LENGTHS
    assert record["task"] == "listops"
    assert (bundle / "table.md").read_text().startswith("# Speed and memory, LRA listops configuration")
    assert record["matmul_peak_tflops"] > 0
    assert record["cuda"] is None  # a CPU run names no CUDA version, and its table says how it computed:
    header = (bundle / "table.md").read_text().splitlines()[2]
    assert "float32 on the CPU" in header and "CUDA" not in header.replace("CUDA only", "")
    rows = record["rows"]
    assert len(rows) == len(MODELS) * len(LENGTHS) * 2
    assert {(r["model"], r["length"], r["mode"]) for r in rows} == {
        (m, n, mode) for m in MODELS for n in LENGTHS for mode in ("train", "infer")
    }
    for row in rows:
        assert set(row) == set(report.ROW_FIELDS), set(report.ROW_FIELDS) ^ set(row)
        assert row["layers"] == 1 and row["flops_source"] == "analytic" and row["parameters"] > 0
        assert row["peak_mem_gb"] is None and "CUDA only" in row["peak_mem_reason"] or row["status"] == "OOM"
        if row["status"] != "ok":
            continue
        assert row["steps_per_s_min"] <= row["steps_per_s"] <= row["steps_per_s_max"]
        assert row["tflops"] == pytest.approx(row["flops_per_step"] * row["steps_per_s"] / 1e12)
        assert row["roofline_fraction"] == pytest.approx(row["tflops"] / record["matmul_peak_tflops"])
        assert row["seq_len"] == row["length"] + (1 if row["model"] == "lra_transformer" else 0)  # CLS token
        assert (row["conv_layer_tflops"] is not None) == (row["model"] == "locality_k61")
    infer = {(r["model"], r["length"]): r for r in rows if r["mode"] == "infer"}
    train = {(r["model"], r["length"]): r for r in rows if r["mode"] == "train"}
    for key in infer:
        assert train[key]["flops_per_step"] == 3 * infer[key]["flops_per_step"]
    csv_rows = read_csv(bundle / "bench.csv")
    assert [(r["model"], int(r["length"]), r["mode"]) for r in csv_rows] == [
        (r["model"], r["length"], r["mode"]) for r in rows
    ]
    assert list(csv_rows[0]) == report.ROW_FIELDS


def test_injected_oom_is_a_row_and_the_run_goes_on(bundle):
    rows = {(r["model"], int(r["length"]), r["mode"]): r for r in read_csv(bundle / "bench.csv")}
    oom = rows[("lra_transformer", 32, "infer")]
    assert oom["status"] == "OOM" and oom["steps_per_s"] == "" and oom["peak_mem_reason"] == "out of memory"
    assert all(r["status"] == "ok" for key, r in rows.items() if key != ("lra_transformer", 32, "infer"))
    assert "| lra_transformer | OOM |" in (bundle / "table.md").read_text()


def table_rows(text: str, heading: str) -> dict[str, list[str]]:
    """The body of the Markdown table under ``heading``: {model: cells}."""
    block = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in block.splitlines() if line.startswith("| ")]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}


def test_relative_speed_is_ours_over_the_sdpa_transformer_at_the_same_length(bundle):
    rows = {
        (r["model"], int(r["length"]), r["mode"]): float(r["steps_per_s"])
        for r in read_csv(bundle / "bench.csv")
        if r["status"] == "ok"
    }
    body = table_rows((bundle / "table.md").read_text(), report.MODE_TITLES["train"])
    assert set(body) == set(MODELS)
    for model, cells in body.items():
        for length, cell in zip(LENGTHS, cells, strict=True):
            value, ratio = re.fullmatch(r"([\d.]+) \(([\d.]+)x\)", cell).groups()
            assert float(value) == pytest.approx(rows[(model, length, "train")], abs=0.006)
            expected = rows[(model, length, "train")] / rows[("lra_transformer", length, "train")]
            assert float(ratio) == pytest.approx(expected, abs=0.006)


def tiny(model_cfg: dict) -> dict:
    keys = {"d_model": 32, "d_ff": 48, "qkv_dim": 16, "n_heads": 2, "depth": 2, "d_hidden": 24}
    return {**model_cfg, **{k: v for k, v in keys.items() if k in model_cfg}}


@pytest.mark.parametrize(
    "arm, changes",
    [
        ("lra_transformer", {"attention_params": {"backend": "materialized"}}),
        ("locality_k61", {}),
    ],
)
def test_analytic_flops_equal_torch_flop_counter(arm, changes):
    """Forward and forward+backward matmul FLOPs of the vanilla encoder (and the conv model),
    against FlopCounterMode on CPU (the SDPA kernel has no CPU formula, so the materialised
    backend, whose count is the same function, is the one counted)."""
    run = resolve_arm(arm)
    spec = BenchModel("x", arm, "arm", tiny(apply_model_changes(run["model"], changes)), run["train"])
    model = build(spec, 40, torch.device("cpu"))
    ids = torch.randint(1, 257, (3, 40))
    with FlopCounterMode(display=False) as forward:
        model(ids)
    with FlopCounterMode(display=False) as both:
        model(ids).sum().backward()
    analytic = analytic_forward_flops(spec.model, 3, sequence_length(spec, 40), 2)
    assert forward.get_total_flops() == analytic
    assert both.get_total_flops() == 3 * analytic
    if arm == "lra_transformer":
        # The SDPA backend: FlopCounterMode counts its attention where torch decomposes it into
        # matrix products (the math path: training mode, dropout) and not where a fused CPU kernel
        # without a FLOP formula runs (evaluation mode); with the score and context products,
        # 2 x 2 B S^2 Q per layer, added back the count is the same in both.
        sdpa = BenchModel("y", arm, "arm", tiny(run["model"]), run["train"])
        assert sdpa.model["attention_params"] == {"backend": "sdpa"}
        attention = sdpa.model["depth"] * 4 * 3 * 41 * 41 * sdpa.model["qkv_dim"]
        counts = set()
        for training in (True, False):
            with FlopCounterMode(display=False) as counted:
                build(sdpa, 40, torch.device("cpu")).train(training)(ids)
            counts.add(counted.get_total_flops())
        assert counts <= {analytic, analytic - attention} and counts


def small_settings(**changes) -> matrix.Settings:
    base = dict(
        lengths=[16],
        batch=2,
        modes=["infer", "train"],
        dtype="bf16",
        warmup=1,
        reps=2,
        max_row_seconds=None,
        count_batch=1,
        seed=0,
        device=torch.device("cpu"),
        progress=False,
    )
    return matrix.Settings(**{**base, **changes})


def tiny_specs() -> list[BenchModel]:
    specs, _ = plan(["lra_transformer", "lra_linformer"], {}, depth=1)
    for spec in specs:
        spec.model = tiny(spec.model)
        spec.model["depth"] = 1
    return specs


def test_oom_and_errors_in_a_step_are_recorded_and_the_matrix_goes_on(monkeypatch):
    real = matrix.time_train

    def flaky(model, ids, labels, spec, settings, inject):
        if spec.name == "lra_transformer":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        if spec.name == "lra_linformer":
            raise ValueError("broken mechanism")
        return real(model, ids, labels, spec, settings, inject)

    monkeypatch.setattr(matrix, "time_train", flaky)
    rows = matrix.run_matrix(tiny_specs(), small_settings(), peak_tflops=1.0)
    status = {(r["model"], r["mode"]): r["status"] for r in rows}
    assert status == {
        ("lra_transformer", "infer"): "ok",
        ("lra_transformer", "train"): "OOM",
        ("lra_linformer", "infer"): "ok",
        ("lra_linformer", "train"): "error: ValueError: broken mechanism",
    }
    linformer = next(r for r in rows if r["model"] == "lra_linformer" and r["mode"] == "infer")
    assert linformer["flops_source"] == "counted" and linformer["flops_per_step"] > 0


def test_counted_flops_scale_from_the_count_batch():
    spec = tiny_specs()[1]  # lra_linformer: no analytic count
    one = matrix.forward_flops(spec, build(spec, 16, torch.device("cpu")), 16, small_settings(batch=4, count_batch=1))
    two = matrix.forward_flops(spec, build(spec, 16, torch.device("cpu")), 16, small_settings(batch=4, count_batch=2))
    assert one[1] == two[1] == "counted" and one[0] == two[0] > 0


def test_time_budget_records_the_rest_as_skipped():
    rows = matrix.run_matrix(tiny_specs(), small_settings(time_budget_s=0.0), peak_tflops=1.0)
    assert len(rows) == 4 and all(r["status"].startswith("skipped: time budget") for r in rows)


def test_unknown_model_names_are_listed_and_missing_peers_skipped(monkeypatch):
    with pytest.raises(KeyError, match=r"unknown model\(s\) lra_nope .*arms: .*lra_transformer"):
        plan(["lra_nope"], {})
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "performer_pytorch" else find(name, *a)
    )
    variants = {
        "peer_performer": {
            "arm": "lra_transformer",
            "requires": "performer_pytorch",
            "model": {"attention": "peer_performer"},
        }
    }
    specs, skipped = plan(["lra_transformer", "peer_performer"], variants)
    assert [s.name for s in specs] == ["lra_transformer"]
    assert skipped == [
        "peer_performer: peer package 'performer_pytorch' is not installed (pip install -e \".[peers]\"); skipped"
    ]


def test_variant_replaces_attention_params_when_it_changes_the_attention():
    arm = {"attention": "vanilla", "attention_params": {"backend": "sdpa"}, "depth": 4}
    assert apply_model_changes(arm, {"attention_params": {"backend": "materialized"}})["attention_params"] == {
        "backend": "materialized"
    }
    peer = apply_model_changes(arm, {"attention": "peer_local", "attention_params": {"window_size": 256}})
    assert peer["attention_params"] == {"window_size": 256} and arm["attention_params"] == {"backend": "sdpa"}


def test_every_row_of_the_default_benchmark_builds():
    """Each arm and each variant of experiments/conf/bench.yaml (peers aside: their packages are
    optional) constructs at a short length: a variant whose keys an arm no longer accepts fails here,
    not as an error row of a GPU run."""
    from omegaconf import OmegaConf

    variants = OmegaConf.to_container(OmegaConf.load(ROOT / "experiments" / "conf" / "bench.yaml").variants)
    specs, _ = plan(None, variants, task="text", depth=1, attention_dropout=None)
    assert {"lra_local_w256", "lra_transformer_materialized"} <= {spec.name for spec in specs}
    failed = {}
    for spec in specs:
        if spec.kind == "peer":
            continue
        try:
            build(spec, 64, torch.device("cpu"))
        except (ValueError, TypeError) as err:
            failed[spec.name] = str(err)
    assert failed == {}


def test_a_peer_row_is_built_from_the_benchmarks_own_table(monkeypatch):
    """A peer's attention comes from repro.bench.peers' table; the package's attention registry stays as it is."""
    from repro.bench import peers
    from repro.models.mixer import TokenMixer
    from repro.original.attention import load_all
    from repro.registry import Registry

    class Zeros(TokenMixer):
        def __init__(self, d_model, n_heads, max_len, dropout=0.0):
            super().__init__()

        def forward(self, x, mask=None):
            return torch.zeros_like(x)

    table = Registry("peer attention")
    table.register("peer_zeros")(Zeros)
    monkeypatch.setattr(peers, "PEERS", table)
    before = load_all().names()
    model = {"backbone": "lra_transformer", "attention": "peer_zeros", "d_model": 8, "n_heads": 2, "depth": 2}
    spec = BenchModel(name="peer_zeros", arm="lra_transformer", kind="peer", model={**model, "d_ff": 16}, train={})
    built = build(spec, 16, torch.device("cpu"))
    assert [type(s.mixer).__name__ for s in built.encoder.sublayers] == ["Zeros", "FeedForward"] * 2
    assert load_all().names() == before and "peer_zeros" not in before
    monkeypatch.undo()
    assert peers.PEERS.names() == sorted(peers.PEER_PACKAGES)
    with pytest.raises(KeyError, match="unknown attention 'peer_zeros'"):
        build(BenchModel("x", "lra_transformer", "arm", {**model, "d_ff": 16}, {}), 16, torch.device("cpu"))


def synthetic_rows() -> list[dict]:
    rows = []
    for model, speed, mem in [("lra_transformer", 10.0, 1.0), ("lra_performer", 25.0, 0.5)]:
        for length, scale in [(1024, 1.0), (4096, 0.25)]:
            rows.append(
                {
                    "model": model,
                    "arm": model,
                    "kind": "arm",
                    "length": length,
                    "mode": "train",
                    "status": "ok",
                    "steps_per_s": speed * scale,
                    "peak_mem_gb": mem / scale,
                    "parameters": 1000,
                }
            )
    return rows


TABLE_META = {  # a benchmark run's metadata as report.table_markdown reads it
    "date": "2026-01-01",
    "device": "test",
    "batch": 32,
    "dtype": "bf16",
    "autocast": "bfloat16",
    "torch": "x",
    "cuda": "y",
    "warmup": 1,
    "reps": 2,
    "matmul_peak_tflops": None,
    "matmul_n": 8192,
}


def test_table_puts_published_tpu_numbers_beside_ours_and_memory_scaling():
    meta = dict(TABLE_META)
    text = report.table_markdown(meta, report.complete_rows(synthetic_rows()), {}, [])
    speed = table_rows(text, report.MODE_TITLES["train"])
    assert speed["lra_performer"] == ["25.00 (2.50x)", "6.25 (2.50x)"]
    # LRA Table 2 (lra-paper's builder): Performer 9.5 / 8.0 steps/s at 1K / 4K, the Transformer 8.1 / 1.4;
    # ours at 1K and 4K (steps/s, then GB), nothing at 2K and 3K.
    table2 = table_rows(text, "LRA Table 2 from this run")
    assert table2["Performer"][:8] == ["25.0", "9.5", "—", "9.4", "—", "8.7", "6.2", "8.0"]
    assert table2["Transformer"][6:8] == ["2.5", "1.4"] and table2["Transformer"][14:] == ["4.00", "9.48"]
    scaling = table_rows(text, "Memory scaling")
    assert scaling["lra_transformer"] == ["train", "1.000", "4.000", "4.00"]
    # another task's configuration (arm_task): titled by it, and no LRA Table 2 (published for text only)
    image = report.table_markdown({**meta, "task": "image"}, report.complete_rows(synthetic_rows()), {}, [])
    assert image.startswith("# Speed and memory, LRA image configuration") and "LRA Table 2" not in image
    assert table_rows(image, report.MODE_TITLES["train"])["lra_performer"] == ["25.00 (2.50x)", "6.25 (2.50x)"]


def test_peer_table_sets_ours_against_each_peer_at_the_largest_length():
    rows = []
    for model, speed, mem, status in [
        ("lra_performer", 12.0, 2.0, "ok"),
        ("peer_performer", 10.0, 4.0, "ok"),
        ("lra_reformer", 5.0, 3.0, "ok"),
        ("peer_reformer", None, None, "OOM"),
        ("lra_local", 9.0, 5.0, "ok"),
        ("peer_local", 10.0, 4.0, "ok"),
    ]:
        rows.append(
            {
                "model": model,
                "length": 4096,
                "mode": "train",
                "status": status,
                "steps_per_s": speed,
                "peak_mem_gb": mem,
            }
        )
    pairs = {"peer_performer": ["lra_performer"], "peer_reformer": ["lra_reformer"], "peer_local": ["lra_local"]}
    body = {
        (cells[0], cells[1]): cells[2:]
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in report.peer_table(rows, pairs)[2:])
    }
    assert body[("peer_performer", "lra_performer")] == [
        "train",
        "12.00",
        "10.00",
        "1.20",
        "2.000",
        "4.000",
        "0.50",
        "yes",
    ]
    assert body[("peer_reformer", "lra_reformer")][-1] == "yes (peer OOM)"
    assert body[("peer_local", "lra_local")][3:] == ["0.90", "5.000", "4.000", "1.25", "no"]


def test_a_failed_write_leaves_no_folder(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(report, "figure", broken)
    meta = {"date": "2026-01-01", "device_slug": "test", "mode": "train"}
    with pytest.raises(RuntimeError, match="disk full"):
        report.write_bundle(tmp_path, meta, report.complete_rows(synthetic_rows()), {}, [], {})
    assert list(tmp_path.iterdir()) == []
    # A short commit in LRA_REPRO_GIT_COMMIT: refused in one line before measuring, no folder made.
    monkeypatch.setenv("LRA_REPRO_GIT_COMMIT", "abc1234")
    done = run_bench("models=[lra_transformer]", "lengths=[32]", "device=cpu", f"out_dir={tmp_path}")
    assert done.returncode == 1 and done.stderr.startswith("bench: LRA_REPRO_GIT_COMMIT='abc1234' is not a full commit")
    assert list(tmp_path.iterdir()) == []


def test_a_run_setting_or_an_unknown_task_is_refused_in_one_line(tmp_path):
    """``task`` is the runner's group, not the benchmark's key (``arm_task``): both mistakes stop before any
    measurement with one line on stderr and status 2."""
    wrong_key = run_bench("task=image", "device=cpu", f"out_dir={tmp_path}")
    assert wrong_key.returncode == 2 and wrong_key.stderr.splitlines() == [
        "experiments/bench.py: error: task=image: the benchmark takes no task; the rows are models=[...] (arms or "
        "variants), and the task whose settings they take is arm_task=NAME"
    ]
    unknown = run_bench("arm_task=imagenet", "device=cpu", f"out_dir={tmp_path}")
    assert unknown.returncode == 2 and unknown.stderr.splitlines() == [
        "experiments/bench.py: error: arm_task=imagenet: no task 'imagenet'; choose one of: image, listops, "
        "pathfinder, pathx, retrieval, text"
    ]
    assert list(tmp_path.iterdir()) == []


def test_accuracies_come_from_complete_records_paper_before_budget_never_smoke(tmp_path):
    def record(arm, profile, seed, acc, status="complete"):
        folder = tmp_path / arm / "text" / profile / f"seed{seed}"
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps({"status": status, "test_acc": acc}))

    record("lra_transformer", "paper", 0, 0.60)
    record("lra_transformer", "paper", 1, 0.64)
    record("lra_transformer", "budget", 0, 0.10)
    record("locality_k61", "budget", 0, 0.80)
    record("locality_k61", "paper", 0, 0.99, status="running")
    record("lra_performer", "smoke", 0, 0.50)
    found = report.read_accuracies(tmp_path, ["lra_transformer", "locality_k61", "lra_performer"])
    assert {arm: value[:3] for arm, value in found.items()} == {
        "lra_transformer": (pytest.approx(0.62), 2, "paper"),
        "locality_k61": (0.80, 1, "budget"),
    }
    # the records' sd (Figure 3's error bar): none from one record
    assert found["lra_transformer"][3] == pytest.approx(0.04 / 2**0.5) and math.isnan(found["locality_k61"][3])
    rows = [r for r in synthetic_rows()] + [
        {
            "model": "locality_k61",
            "arm": "locality_k61",
            "kind": "arm",
            "length": 4096,
            "mode": "train",
            "status": "ok",
            "steps_per_s": 30.0,
            "peak_mem_gb": 0.5,
            "parameters": 10,
        }
    ]
    meta = {"batch": 32, "device": "test", "date": "2026-01-01"}
    assert report.figure(report.complete_rows(rows), found, tmp_path / "f.png", meta) == "accuracy"
    assert report.figure(report.complete_rows(rows), {}, tmp_path / "g.png", meta) == "memory"
    assert (tmp_path / "f.png").stat().st_size > 0


def test_rerender_plots_accuracy_once_records_exist(bundle, tmp_path):
    import shutil

    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    runs = tmp_path / "runs" / "locality_k61" / "listops" / "paper" / "seed0"  # the record's task
    runs.mkdir(parents=True)
    (runs / "metrics.json").write_text(json.dumps({"status": "complete", "test_acc": 0.87}))
    report.main([str(copy), "--accuracy-dir", str(tmp_path / "runs")])
    record = json.loads((copy / "bench.json").read_text())
    assert record["figure_y"] == "accuracy" and record["accuracies"]["locality_k61"]["test_acc"] == 0.87
    assert (copy / "table.md").read_text() == (bundle / "table.md").read_text()  # same rows, same table
    assert record["rows"] == json.loads((bundle / "bench.json").read_text())["rows"]
    assert not [p.name for p in copy.iterdir() if p.name.startswith(".")]


def test_reference_section_sets_each_arm_against_lra_transformer_and_its_own_reference():
    rows = []
    for model, kind, speed, mem in [
        ("lra_transformer", "arm", 10.0, 2.0),
        ("lra_bigbird", "arm", 12.0, 2.5),
        ("lra_synthesizer", "arm", 3.0, 30.0),
        ("learned_pe", "arm", 8.0, 4.0),
        ("rotary_transformer", "arm", 7.6, 4.4),
        ("lra_sparse", "arm", None, None),
        ("lra_transformer_materialized", "variant", 2.0, 20.0),
        ("peer_reformer", "peer", 5.0, 9.0),
    ]:
        for length, scale in [(1024, 4.0), (4096, 1.0)]:
            status = "OOM" if speed is None and length == 4096 else "ok"
            rows.append(
                {
                    "model": model,
                    "arm": model,
                    "kind": kind,
                    "length": length,
                    "mode": "train",
                    "status": status,
                    "steps_per_s": speed * scale if speed else (1.0 if status == "ok" else None),
                    "peak_mem_gb": mem / scale if mem else (1.0 if status == "ok" else None),
                    "parameters": 1,
                }
            )
    meta = {**TABLE_META, "attention_dropout": 0.0}
    text = report.table_markdown(meta, report.complete_rows(rows), {}, [])
    heading = "Each arm against lra_transformer at 4K (training, attention dropout 0 for every arm)"
    body = table_rows(text, heading)
    assert set(body) == {
        "lra_transformer",
        "lra_bigbird",
        "lra_synthesizer",
        "learned_pe",
        "rotary_transformer",
        "lra_sparse",
    }  # arms only: no variant, no peer
    # steps/s, GB, speed and memory over lra_transformer, the reference, speed and memory over it
    assert body["lra_bigbird"] == ["12.00", "2.500", "1.20", "1.25", "lra_transformer", "1.20", "1.25"]
    assert body["lra_synthesizer"] == [
        "3.00",
        "30.000",
        "0.30",
        "15.00",
        "lra_transformer_materialized",
        "1.50",
        "1.50",
    ]
    assert body["rotary_transformer"] == ["7.60", "4.400", "0.76", "2.20", "learned_pe", "0.95", "1.10"]
    assert body["lra_sparse"] == ["OOM", "OOM", "n/a", "n/a", "lra_transformer", "n/a", "n/a"]
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    assert "`lra_synthesizer` is quadratic by design" in section and "`learned_pe`" in section
    assert "Attention dropout: attention dropout 0 for every arm." in text
    lra = report.table_markdown({**meta, "attention_dropout": "lra"}, report.complete_rows(rows), {}, [])
    assert "(training, each arm's own attention dropout (LRA's 0.1 on text))" in lra


def test_attention_dropout_option_sets_every_arm_and_names_the_folder(tmp_path):
    from repro.bench.models import attention_dropout_setting

    assert attention_dropout_setting("lra") is None and attention_dropout_setting(0) == 0.0
    with pytest.raises(ValueError, match=r"attention_dropout='none' \(experiments/conf/bench.yaml\): give lra"):
        attention_dropout_setting("none")
    specs, _ = plan(["lra_transformer", "lra_sparse", "learned_pe"], {}, attention_dropout=0.0)
    by_name = {s.name: s.model for s in specs}
    assert by_name["lra_transformer"]["attention_dropout"] == by_name["lra_sparse"]["attention_dropout"] == 0.0
    assert "attention_dropout" not in by_name["learned_pe"]  # no attention dropout to set: no key added
    own, _ = plan(["lra_sparse"], {})
    assert own[0].model["attention_dropout"] == 0.1
    meta = {
        "date": "2026-01-01",
        "device_slug": "test",
        "mode": "train",
        "device": "test",
        "batch": 2,
        "dtype": "bf16",
        "autocast": "none",
        "torch": "x",
        "cuda": None,
        "warmup": 1,
        "reps": 2,
        "matmul_peak_tflops": None,
        "matmul_n": 1,
        "attention_dropout": report.dropout_label(0.0),
    }
    folder = report.write_bundle(tmp_path, meta, report.complete_rows(synthetic_rows()), {}, [], {})
    assert folder.name == "2026-01-01_test_train_attention-dropout-0"
    rows = report.complete_rows(synthetic_rows())
    blocks = report.write_bundle(tmp_path, {**meta, "sync_every": 5}, rows, {}, [], {})
    assert blocks.name == "2026-01-01_test_train_attention-dropout-0_sync-every-5"
    assert "in blocks of 5 run back to back" in (blocks / "table.md").read_text()
    assert "each timed alone" in (folder / "table.md").read_text()


def test_timed_steps_run_in_blocks_and_each_sample_is_its_blocks_mean(monkeypatch):
    """``sync_every=k``: the timed steps run k at a time between two clock reads, a sample is the block's
    mean step time, the remainder of ``reps`` is not run; fewer ``reps`` than k make one block of them;
    ``sync_every=1`` times each step alone."""
    from repro.bench import timing
    from repro.cli.bench import sync_every_setting

    clock = {"now": 0.0, "calls": 0}

    def step():  # call n takes n ms on the fake clock
        clock["calls"] += 1
        clock["now"] += clock["calls"] * 1e-3

    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock["now"])

    def timed(**options):
        clock.update(now=0.0, calls=0)
        return timing.StepTimer(torch.device("cpu")).timing(step, **options)

    blocks = timed(warmup=2, reps=7, sync_every=3)
    assert clock["calls"] == 2 + 6  # two blocks of three; the seventh step is not run
    assert blocks.times_ms == pytest.approx([(3 + 4 + 5) / 3, (6 + 7 + 8) / 3])
    summary = blocks.summary()
    assert (summary["reps"], summary["samples"], summary["sync_every"]) == (6, 2, 3)
    assert summary["step_ms_median"] == pytest.approx(5.5)
    short = timed(warmup=1, reps=2, sync_every=5)
    assert clock["calls"] == 1 + 2 and short.times_ms == pytest.approx([(2 + 3) / 2]) and short.steps_per_sample == 2
    assert timed(warmup=1, reps=3).times_ms == pytest.approx([2, 3, 4])
    assert timing.StepTimer(torch.device("cpu")).run(step, warmup=0, reps=0) == []
    assert set(summary) <= set(report.ROW_FIELDS)  # a row's timing fields are columns, not a note
    assert sync_every_setting(4) == 4
    for bad in (0, True, 2.5, "5"):
        with pytest.raises(ValueError) as raised:
            sync_every_setting(bad)
        assert str(raised.value) == (
            f"sync_every={bad!r} (experiments/conf/bench.yaml): give a whole number of timed steps per "
            "synchronisation, 1 (each step alone) or more (blocks of steps run back to back)"
        )


def test_kernel_summary_counts_the_devices_own_entries_per_step():
    """An operator's entry repeats its kernels' time: only the device's entries are summed, per step, and
    the kernels with most time are named first; no kernels (CPU) gives None everywhere."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from repro.bench import timing

    def entry(key, device, us, count, host_us=0.0):
        return SimpleNamespace(key=key, device_type=device, self_device_time_total=us, count=count,
                               self_cpu_time_total=host_us)  # fmt: skip

    events = [
        entry("aten::mm", DeviceType.CPU, 9000.0, 4, host_us=200.0),  # the time of the gemm below, once more
        entry("gemm_kernel", DeviceType.CUDA, 9000.0, 4),
        entry("softmax_kernel", DeviceType.CUDA, 3000.0, 2),
        entry("aten::copy_", DeviceType.CPU, 0.0, 10, host_us=600.0),  # launches nothing, costs the host
    ] + [entry(f"small_{i}", DeviceType.CUDA, 10.0, 2) for i in range(6)]
    summary = timing.kernel_summary(events, steps=2)
    assert summary["kernel_ms_per_step"] == pytest.approx((9000 + 3000 + 60) / 2 / 1e3)
    assert summary["kernels_per_step"] == (4 + 2 + 12) / 2
    named = summary["top_kernels"].split("; ")
    assert len(named) == timing.TOP_KERNELS
    assert named[:2] == ["gemm_kernel 4.50 ms x2", "softmax_kernel 1.50 ms x1"]
    assert summary["top_ops"] == "aten::mm 4.50 ms x2"  # the operators that launched kernels, not aten::copy_
    assert summary["host_ms_per_step"] == pytest.approx((200 + 600) / 2 / 1e3)  # the host's own time, per step
    assert summary["top_host_ops"] == "aten::copy_ 0.30 ms x5; aten::mm 0.10 ms x2"
    empty = timing.kernel_summary([entry("aten::mm", DeviceType.CPU, 5.0, 1)], steps=3)
    assert empty == dict.fromkeys(timing.SUMMARY_KEYS)
    assert set(summary) <= set(report.ROW_FIELDS)


def test_profiled_steps_follow_the_timed_ones_and_the_table_gives_the_busy_share(monkeypatch):
    """``profile_steps=n`` profiles n more steps after warm-up and timing (the timed ones unchanged; off
    CUDA none, and the row says why); a failing profile keeps the timing; the table's section sets the
    kernels' time against the median step; a bad count is refused in one line."""
    from repro.cli.bench import count_setting

    calls = []
    settings = matrix.Settings(
        lengths=[8], batch=1, modes=["train"], dtype="bf16", warmup=2, reps=3, max_row_seconds=None,
        count_batch=1, seed=0, device=torch.device("cpu"), profile_steps=4,
    )  # fmt: skip
    on_cpu = matrix.timed(lambda: calls.append("step"), settings).summary()
    assert len(calls) == 2 + 3 and on_cpu["samples"] == 3 and on_cpu["kernel_ms_per_step"] is None
    assert on_cpu["top_kernels"] == "not profiled: kernels are counted on CUDA only"

    def profiled(step, steps, device):  # stands in for torch.profiler on a GPU
        calls.append("profile")
        for _ in range(steps):
            step()
        return {"kernel_ms_per_step": 1.0, "kernels_per_step": 2.0, "top_kernels": "k 1.00 ms x2"}

    monkeypatch.setattr(matrix, "kernel_profile", profiled)
    calls.clear()
    summary = matrix.timed(lambda: calls.append("step"), settings).summary()
    assert calls == ["step"] * (2 + 3) + ["profile"] + ["step"] * 4 and summary["kernel_ms_per_step"] == 1.0

    def broken(step, steps, device):
        raise RuntimeError("no profiler here")

    monkeypatch.setattr(matrix, "kernel_profile", broken)
    kept = matrix.timed(lambda: None, settings).summary()
    assert kept["samples"] == 3 and kept["top_kernels"] == "not profiled: error: RuntimeError: no profiler here"
    row = {
        "model": "m", "length": 4096, "mode": "train", "status": "ok", "step_ms_median": 50.0,
        "kernel_ms_per_step": 40.0, "kernels_per_step": 1180.0, "top_kernels": "a|b 3.00 ms x4",
        "top_ops": "aten::mm 3.00 ms x4",
    }  # fmt: skip
    assert report.kernel_table([row, {**row, "model": "cpu", "kernel_ms_per_step": None}])[2:] == [
        "| m | 4K | train | 50.00 | 40.00 | 80% | 1180 | a/b 3.00 ms x4 | aten::mm 3.00 ms x4 |"
    ]
    assert count_setting("profile_steps", 0, 0, "steps") == 0
    for bad in (-1, True, 2.5, "3"):
        with pytest.raises(ValueError) as raised:
            count_setting("profile_steps", bad, 0, "a whole number of steps to profile, 0 (none) or more")
        assert str(raised.value) == (
            f"profile_steps={bad!r} (experiments/conf/bench.yaml): give a whole number of steps to profile, "
            "0 (none) or more"
        )


def test_a_peer_whose_import_fails_is_skipped_with_the_reason(monkeypatch):
    import importlib

    real = importlib.import_module

    def broken(name, *args):
        if name == "linformer":
            raise ImportError("No module named 'axial_positional_embedding'")
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setattr(importlib, "import_module", broken)
    variants = {
        "peer_linformer": {"arm": "lra_transformer", "requires": "linformer", "model": {"attention": "peer_linformer"}}
    }
    specs, skipped = plan(["peer_linformer"], variants)
    assert specs == []
    assert skipped == [
        "peer_linformer: peer package 'linformer' does not import (ImportError: No module named "
        "'axial_positional_embedding'); skipped"
    ]


@pytest.mark.parametrize(
    "arm, mechanism, compiled, calls",
    [
        ("lra_sinkhorn", "sinkhorn", {"block_size": 50, "balance": "compiled", "attend": "compiled"}, 2 * 2),
        ("lra_linformer", "linformer", {"attend": "compiled"}, 2),
    ],
)
def test_nothing_compiled_runs_under_the_flop_counter(monkeypatch, arm, mechanism, compiled, calls):
    """dynamo skips a frame it meets under FlopCounterMode (on torch 2.11 for the rest of the process):
    Sinkhorn's compiled balancing and attend, and Linformer's compiled attend, are counted eagerly, and
    set back afterwards."""
    import importlib

    from repro.bench.flops import counted_forward_flops

    module = importlib.import_module(f"repro.original.attention.{mechanism}")
    modes, real = [], module.on_device
    monkeypatch.setattr(module, "on_device", lambda fn, device, mode: modes.append(mode) or real(fn, device, mode))
    run = resolve_arm(arm)
    spec = BenchModel("x", arm, "arm", tiny(apply_model_changes(run["model"], {"attention_params": compiled})), {})
    model = build(spec, 120, torch.device("cpu"))
    mixers = [m for m in model.modules() if hasattr(m, "attend_mode")]

    def plain_path_settings():
        return [{name: getattr(m, name) for name in type(m).PLAIN_PATH} for m in mixers]

    before = plain_path_settings()
    assert len(mixers) == 2 and {m.attend_mode for m in mixers} == {"compiled"}
    assert counted_forward_flops(model, torch.randint(1, 257, (2, 120))) > 0
    assert len(modes) == calls and set(modes) == {"eager"}  # each compiled function, in each of the two layers
    assert plain_path_settings() == before  # set back


def test_fast_paths_are_counted_on_their_plain_path():
    """flex_attention does not run under FlopCounterMode: the count takes the blockwise path, the
    same products as before the fast path existed, and leaves the model's backend as it was."""
    from repro.bench.flops import counted_forward_flops

    run = resolve_arm("lra_bigbird")
    counts = []
    for backend in ("flex", "blockwise"):
        model_cfg = tiny(apply_model_changes(run["model"], {"attention_params": {"backend": backend}}))
        model = build(BenchModel("x", "lra_bigbird", "arm", model_cfg, run["train"]), 40, torch.device("cpu"))
        counts.append(counted_forward_flops(model, torch.randint(1, 257, (2, 40))))
        assert {m.backend for m in model.modules() if hasattr(m, "pattern_backend")} == {backend}
    assert counts[0] == counts[1] > 0
