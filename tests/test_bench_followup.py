"""The follow-up protocol benchmark (``lra-bench mode=followup``): its rows, its record, end to end on CPU."""

from __future__ import annotations

import csv
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_tasks_smoke import make_acl_imdb

from repro.bench import followup
from repro.bench.models import hydra_context

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "experiments" / "bench.py"
SHORT_LISTOPS = [
    "task.max_len=300",
    "task.generate.min_len=50",
    "task.generate.max_len=300",
    "++profile.tasks.listops.generate.n_train=32",
    "++profile.tasks.listops.generate.n_val=16",
    "++profile.tasks.listops.generate.n_test=16",
]
ROWS = ["rotary_transformer@listops", "s4+followup@text", "locality_k5@image"]


def run_bench(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH), "mode=followup", *overrides], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_protocol_rows_are_every_arm_on_every_task_with_a_reference_per_transformer_shape():
    arm_rows = followup.protocol_rows()
    assert len(arm_rows) == 25
    expected = {(arm, task) for arm, _ in followup.PROTOCOL_ARMS for task in ("listops", "text", "image")}
    assert {(r.arm, r.task) for r in arm_rows} == expected | {("rotary_transformer", "pathfinder")}
    assert {r.name for r in arm_rows if r.arm in ("s4", "s5", "mega")} == {
        f"{arm}+followup@{task}" for arm in ("s4", "s5", "mega") for task in ("listops", "text", "image")
    }
    with hydra_context():
        planned = followup.plan_rows(arm_rows, followup.arm_names(), ["listops", "text", "image", "pathfinder"])
    references = [i for i, r in enumerate(planned) if r.kind == "reference"]
    assert [planned[i].name for i in references] == [
        f"reference@{t}" for t in ("listops", "text", "image", "pathfinder")
    ]
    for i in references:  # each reference leads its task's rows
        assert all(r.task == planned[i].task for r in planned[i : i + 2])
    assert len(planned) == 29


def test_a_row_that_is_not_arm_at_task_is_refused_naming_the_form():
    with pytest.raises(ValueError, match=r"^followup.rows: 's4\+@text' is not ARM@TASK or ARM\+TECHNIQUES@TASK"):
        followup.parse_row("s4+@text")
    assert followup.parse_row("s4+followup@text") == followup.RowSpec("s4", "text", "followup")


def test_generated_data_is_cut_to_the_cap_and_the_cut_is_named():
    task = {"name": "listops", "generate": {"n_train": 96000, "n_val": 2000, "n_test": 2000, "max_len": 2000}}
    capped, note = followup.cap_generated(task, 4096)
    assert capped["generate"] == {"n_train": 4096, "n_val": 2000, "n_test": 2000, "max_len": 2000}
    assert note == "generated data cut to n_train=4096 (protocol 96000)"
    assert followup.cap_generated(task, None) == (task, "")


@pytest.mark.parametrize(
    "name, peak",
    [("NVIDIA H200", 989.0), ("NVIDIA H200 NVL", 835.0), ("NVIDIA H100 80GB HBM3", 989.0),
     ("NVIDIA H100 PCIe", 756.0), ("Tesla V100-SXM2-16GB", None)],
)  # fmt: skip
def test_dense_bf16_peak_by_device_name(name, peak):
    assert followup.dense_bf16_peak(name) == peak


def fake_row(spec, *_args, **_kwargs) -> dict:
    return {"row": spec.name, "kind": spec.kind, "arm": spec.arm, "task": spec.task, "status": "ok",
            "staged_examples_per_s": 100.0 if spec.kind == "reference" else 90.0, "tflops": 1.0}  # fmt: skip


def test_rows_are_written_as_measured_and_a_resumed_run_measures_only_the_missing(tmp_path, monkeypatch):
    specs = [
        followup.RowSpec("rotary_transformer", "listops", kind="reference"),
        followup.RowSpec("rotary_transformer", "listops"),
        followup.RowSpec("s4", "listops", "followup"),
    ]
    measured = []

    def cut_after_two(spec, *args, **kwargs):
        if len(measured) == 2:
            raise KeyboardInterrupt  # the slot ends
        measured.append(spec.name)
        return fake_row(spec)

    monkeypatch.setattr(followup, "measure", cut_after_two)
    meta = {"date": "2026-01-01", "profile": "smoke", "warmup": 1, "steps": 2, "torch": "x", "cuda": None}
    later = {**meta, "date": "2026-01-02"}  # the next slot
    options = followup.Options(profile="smoke")
    with hydra_context(), pytest.raises(KeyboardInterrupt):
        followup.run_followup(specs, options, followup.torch.device("cpu"), tmp_path, meta)
    (folder,) = tmp_path.iterdir()
    assert folder.name == "2026-01-01_cpu_followup-protocol"
    kept = list(csv.DictReader(open(folder / "bench.csv")))
    assert [r["row"] for r in kept] == ["reference@listops", "rotary_transformer@listops"]
    assert float(kept[1]["ratio_to_reference"]) == pytest.approx(0.9)
    assert json.loads((folder / "bench.json").read_text())["complete"] is False

    again = []
    monkeypatch.setattr(followup, "measure", lambda spec, *a, **k: again.append(spec.name) or fake_row(spec))
    options = followup.Options(profile="smoke", resume=folder)
    with hydra_context():
        followup.run_followup(specs, options, followup.torch.device("cpu"), tmp_path, {**later, "command": "again"})
    assert again == ["s4+followup@listops"]
    rows = list(csv.DictReader(open(folder / "bench.csv")))
    assert [r["row"] for r in rows] == [s.name for s in specs]
    record = json.loads((folder / "bench.json").read_text())
    assert record["complete"] is True
    assert record["date"] == "2026-01-01" and record["resumed"] == [{"date": "2026-01-02", "command": "again"}]
    heading = (folder / "table.md").read_text().splitlines()[0]
    assert heading == "# Training steps at the follow-up protocols' settings (2026-01-01, resumed 2026-01-02, cpu)"
    with hydra_context():  # a complete record: nothing to measure, and no run is listed as having added to it
        followup.run_followup(specs, options, followup.torch.device("cpu"), tmp_path, {**later, "command": "idle"})
    assert again == ["s4+followup@listops"]
    assert json.loads((folder / "bench.json").read_text())["resumed"] == record["resumed"]


@pytest.mark.parametrize(
    "key, theirs, ours",
    [
        ("device", "NVIDIA H100 80GB HBM3", "cpu"),
        ("git_commit", "a" * 40, "b" * 40),
        ("rounds", 3, 5),
        ("conv_auto_table", {"path": "bench_conv.json", "sha256": "0" * 64}, None),  # another convolution chosen
    ],
)
def test_a_record_is_resumed_only_with_the_device_software_and_settings_it_began_with(
    tmp_path, monkeypatch, key, theirs, ours
):
    spec = followup.RowSpec("s4", "listops", "followup")
    monkeypatch.setattr(followup, "measure", fake_row)
    meta = {"date": "2026-01-01", "profile": "smoke", "warmup": 1, "steps": 2, "torch": "x", "cuda": None}
    with hydra_context():
        folder, _ = followup.run_followup([spec], followup.Options(profile="smoke"), followup.torch.device("cpu"),
                                          tmp_path, {**meta, "git_commit": "a" * 40, "rounds": 3})  # fmt: skip
    record = json.loads((folder / "bench.json").read_text())
    (folder / "bench.json").write_text(json.dumps({**record, key: theirs}))
    before = (folder / "bench.json").read_text()
    measured = []
    monkeypatch.setattr(followup, "measure", lambda s, *a, **k: measured.append(s.name) or fake_row(s))
    options = followup.Options(profile="smoke", resume=folder)
    now = {**meta, "git_commit": "a" * 40, "rounds": 3}
    if key != "device":  # the device is the one this run measures on: the CPU here
        now[key] = ours
    with hydra_context(), pytest.raises(ValueError) as refused:
        followup.run_followup([spec], options, followup.torch.device("cpu"), tmp_path, now)
    # a setting is named as its command-line key, the table as the environment variable that names it
    name = {"rounds": "followup.rounds", "conv_auto_table": "LRA_CONV_AUTO_TABLE"}.get(key, key)
    assert str(refused.value) == (
        f"followup.resume={folder}: its rows were measured with {name}={theirs!r}, this run has {name}={ours!r}; "
        "resume with the same GPU kind, software, commit and settings, or leave followup.resume out to start "
        "a new record"
    )
    assert measured == [] and (folder / "bench.json").read_text() == before


def test_a_resume_names_every_difference_and_a_key_the_record_lacks(tmp_path):
    earlier = {"device": "NVIDIA H200", "torch": "2.11", "steps": 30, "rows": []}  # no rounds: one timing a round
    now = {"device": "NVIDIA H200", "torch": "2.12", "steps": 30, "rounds": 5, "tree_changes": []}
    assert followup.resume_problem(earlier, now, tmp_path) == (
        f"followup.resume={tmp_path}: its rows were measured with torch='2.11', tree_changes=<not recorded>, "
        "followup.rounds=1, this run has torch='2.12', tree_changes=[], followup.rounds=5; resume "
        "with the same GPU kind, software, commit and settings, or leave followup.resume out to start a new record"
    )
    assert followup.resume_problem({**earlier, "rounds": 5, "tree_changes": [], "torch": "2.12"}, now, tmp_path) is None
    (tmp_path / "bench.json").write_text("{not json")
    with pytest.raises(followup.ResumeRefused, match="bench.json cannot be read"):
        followup.read_record(tmp_path)


def test_rows_not_started_within_the_time_budget_are_recorded_as_skipped(tmp_path, monkeypatch):
    specs = [followup.RowSpec("rotary_transformer", "listops"), followup.RowSpec("s4", "listops", "followup")]
    ticks = iter(range(0, 1000, 3))  # a fake clock: 3 s a reading
    monkeypatch.setattr(followup, "measure", fake_row)
    meta = {"date": "2026-01-01", "profile": "smoke", "warmup": 1, "steps": 2, "torch": "x", "cuda": None}
    options = followup.Options(profile="smoke", time_budget_s=5)
    with hydra_context():
        _, rows = followup.run_followup(
            specs, options, followup.torch.device("cpu"), tmp_path, meta, lambda: next(ticks)
        )
    assert [r["status"] for r in rows] == ["ok", "skipped: not started within time_budget_s=5"]


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> Path:
    """One CPU run of ``experiments/bench.py mode=followup`` at profile=smoke: ListOps generated, text from
    an IMDb fixture in the official layout, image absent (a stand-in)."""
    tmp = tmp_path_factory.mktemp("followup")
    make_acl_imdb(tmp / "data", {"train": 12, "test": 6}, random.Random(0))
    overrides = "{listops: [" + ",".join(f"'{o}'" for o in SHORT_LISTOPS) + "], text: ['task.max_len=256']}"
    done = run_bench(
        "device=cpu",
        "followup.profile=smoke",
        "followup.warmup=1",
        "followup.steps=2",
        "followup.staged_batches=2",
        f"followup.rows=[{','.join(ROWS)}]",
        f"followup.overrides={overrides}",
        f"followup.data_dir={tmp / 'data'}",
        f"followup.cache_dir={tmp / 'cache'}",
        "followup.workers=1",
        f"out_dir={tmp / 'out'}",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (folder,) = (tmp / "out").iterdir()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}_cpu_followup-protocol", folder.name)
    return folder


def test_the_command_refuses_to_resume_a_record_begun_on_another_device_in_one_line(record, tmp_path):
    copy = tmp_path / record.name
    shutil.copytree(record, copy)
    earlier = json.loads((copy / "bench.json").read_text())
    (copy / "bench.json").write_text(json.dumps({**earlier, "device": "NVIDIA H200"}))
    done = run_bench("device=cpu", "followup.profile=smoke", f"followup.rows=[{ROWS[0]}]",
                     f"followup.resume={copy}", f"out_dir={tmp_path / 'out'}")  # fmt: skip
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]  # one line naming each difference (here also the settings)
    assert line.startswith(f"bench: followup.resume={copy}: its rows were measured with device='NVIDIA H200', ")
    assert ", this run has device='cpu', " in line and line.endswith(
        "; resume with the same GPU kind, software, commit and settings, or leave followup.resume out to start "
        "a new record"
    )
    assert json.loads((copy / "bench.json").read_text())["device"] == "NVIDIA H200"  # untouched


def test_the_record_has_every_requested_row_and_column(record):
    rows = list(csv.DictReader(open(record / "bench.csv")))
    assert list(rows[0]) == followup.COLUMNS
    assert [r["row"] for r in rows] == ["reference@listops", *ROWS]
    assert all(r["status"] == "ok" for r in rows), [r["status"] for r in rows]
    by = {r["row"]: r for r in rows}
    for name in ("rotary_transformer@listops", "s4+followup@text"):  # real data: both timings and the wait
        assert float(by[name]["real_examples_per_s"]) > 0 and float(by[name]["staged_examples_per_s"]) > 0
        assert by[name]["data_wait_share"] != ""
    assert by["s4+followup@text"]["techniques"] == "followup" and by["s4+followup@text"]["seq_len"] == "256"
    image = by["locality_k5@image"]  # no CIFAR-10 under data_dir: random RGB images, and the row says so
    assert image["data"] == "stand-in" and float(image["real_examples_per_s"]) > 0
    assert image["data_note"].startswith("data missing (CIFAR-10 data not found.")
    assert float(by["rotary_transformer@listops"]["ratio_to_reference"]) > 0  # a Transformer arm: set against it
    assert by["s4+followup@text"]["ratio_to_reference"] == ""
    assert by["reference@listops"]["data"] == "stand-in" and by["reference@listops"]["techniques"] == "none"
    # the convolution names what ran (off CUDA, auto's plain convolution in float32); other arms have none
    assert image["conv_impls"] == "fp32" and by["rotary_transformer@listops"]["conv_impls"] == ""
    assert all(int(r["flops_per_step"]) > 0 for r in rows)
    assert all(r["peak_tflops"] == "" and r["peak_fraction"] == "" for r in rows)  # the CPU has no table entry


def test_the_record_names_its_environment_and_command(record):
    meta = json.loads((record / "bench.json").read_text())
    assert meta["complete"] is True and meta["rows_planned"] == 4 and meta["device"] == "cpu"
    assert meta["conv_auto_table"] is None  # LRA_CONV_AUTO_TABLE unset: auto follows its built-in rule
    assert {"torch", "cuda", "git_commit", "tree_changes", "command"} <= set(meta)
    assert "mode=followup" in meta["command"]
    table = (record / "table.md").read_text()
    assert all(f"| {name} |" in table for name in ["reference@listops", *ROWS])


TIMED = ("warmup_s", "staged_step_ms", "staged_examples_per_s", "real_step_ms", "real_examples_per_s",
         "data_wait_share", "staged_spread", "real_spread", "tflops", "peak_fraction")  # fmt: skip


def test_a_row_measured_in_its_own_process_is_the_row_measured_here():
    options = followup.Options(
        profile="smoke", warmup=1, steps=2, staged_batches=2, overrides={"listops": SHORT_LISTOPS}
    )
    spec = followup.RowSpec("rotary_transformer", "listops")
    cpu = followup.torch.device("cpu")
    isolated, here = followup.measure_isolated(spec, options, cpu, None), followup.measure(spec, options, cpu, None)
    assert set(isolated) == set(here) and set(TIMED) <= set(here)
    assert {k: v for k, v in isolated.items() if k not in TIMED} == {k: v for k, v in here.items() if k not in TIMED}
    assert isolated["flops_per_step"] > 0 and isolated["status"] == "ok"


def test_a_row_reports_the_median_round_and_the_spread_of_the_rounds():
    staged, real = [0.010, 0.020, 0.012, 0.050, 0.011], [0.030, 0.020, 0.040, 0.025, 0.100]
    readings = [0.0, 0.0]  # the warm-up's start and end, then each round's start and end, staged and real
    for s_step, r_step in zip(staged, real, strict=True):
        for seconds in (s_step, r_step):
            readings += [readings[-1], readings[-1] + 2 * seconds]  # two steps a round
    clock = iter(readings)
    options = followup.Options(profile="smoke", warmup=1, steps=2, rounds=5, staged_batches=2,
                               overrides={"listops": SHORT_LISTOPS})  # fmt: skip
    row = followup.measure(
        followup.RowSpec("rotary_transformer", "listops"),
        options,
        followup.torch.device("cpu"),
        None,
        lambda: next(clock),
    )
    assert row["rounds"] == 5
    assert row["staged_step_ms"] == pytest.approx(12.0) and row["real_step_ms"] == pytest.approx(30.0)
    assert row["staged_spread"] == pytest.approx((0.050 - 0.010) / 0.012)
    assert row["real_spread"] == pytest.approx((0.100 - 0.020) / 0.030)
    assert row["data_wait_share"] == pytest.approx(1 - 12.0 / 30.0)


@pytest.mark.parametrize(
    "cap, step_s, steps", [(None, 1.0, 30), (6.0, 1.0, 6), (6.0, 2.0, 5), (6.0, 0.01, 30), (6.0, 0.25, 24)]
)
def test_a_round_takes_fewer_steps_where_its_steps_would_pass_max_round_seconds(cap, step_s, steps):
    now, calls = [0.0], []

    def run_step(i: int) -> None:  # every step takes step_s on a fake clock
        calls.append(i)
        now[0] += step_s

    options = followup.Options(steps=30, rounds=3, max_round_seconds=cap)
    row: dict = {}
    cpu = followup.torch.device("cpu")
    probe = followup.PROBE_STEPS if cap else 0
    nxt = followup.time_rounds(row, {"staged": run_step, "real": run_step}, 7, options, 4, cpu, lambda: now[0])
    assert row["steps"] == steps and row["rounds"] == 3
    assert calls == list(range(7, nxt)) and nxt == 7 + probe + 3 * 2 * steps  # each step index once, in order
    assert row["staged_step_ms"] == pytest.approx(1e3 * step_s) and row["staged_examples_per_s"] == pytest.approx(
        4 / step_s
    )


def test_the_table_names_a_row_whose_rounds_were_cut_short():
    meta = {"date": "2026-12-03", "device": "cpu", "profile": "smoke", "torch": "x", "cuda": None, "warmup": 1,
            "steps": 30, "rounds": 5, "max_round_seconds": 6.0, "rows_planned": 2, "complete": True}  # fmt: skip
    rows = [{"row": "a@listops", "status": "ok", "steps": 5}, {"row": "b@listops", "status": "ok", "steps": 30}]
    text = followup.table_markdown(meta, rows)
    assert "longer than 6 s (estimated from 2 staged steps), it takes fewer, at least 5" in text
    lines = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ") and "@" in line}
    assert "5 steps a round;" in lines["| a@listops"] and "steps a round" not in lines["| b@listops"]


def test_a_row_that_fails_in_its_own_process_raises_its_error_here():
    options = followup.Options(profile="smoke")
    with pytest.raises(Exception, match="Could not find 'arm/no_such_arm'"):
        followup.measure_isolated(
            followup.RowSpec("no_such_arm", "listops"), options, followup.torch.device("cpu"), None
        )


@pytest.mark.parametrize(
    "block, message",
    [
        ({"steps": 0}, "followup.steps=0 (experiments/conf/bench.yaml): give a whole number >= 1"),
        ({"rounds": 0}, "followup.rounds=0 (experiments/conf/bench.yaml): give a whole number >= 1"),
        (
            {"max_round_seconds": 0},
            "followup.max_round_seconds=0 (experiments/conf/bench.yaml): give seconds > 0, or null (no cap)",
        ),
        ({"step": 2}, "followup.step: no such key (experiments/conf/bench.yaml); known: "),
        ({"generated_cap": 0}, "followup.generated_cap=0: give a whole number of examples >= 1, or null (no cap)"),
        ({"time_budget_s": -1}, "followup.time_budget_s=-1: give seconds > 0, or null (no limit)"),
        ({"isolate_rows": "yes"}, "followup.isolate_rows='yes' (experiments/conf/bench.yaml): give true or false"),
        ({"overrides": {"text": "task.max_len=256"}}, "followup.overrides={'text': 'task.max_len=256'}: give a block"),
    ],
)
def test_a_bad_setting_is_refused_naming_its_key(block, message):
    with pytest.raises(ValueError) as caught:
        followup.options_from(block)
    assert caught.value.args[0].startswith(message)


def test_the_command_line_refuses_an_unknown_arm_with_exit_status_2(tmp_path):
    done = run_bench("device=cpu", "followup.rows=[s9@listops]", f"out_dir={tmp_path}")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("bench: followup.rows: no arm 's9' in s9@listops; arms: ")
    assert len(done.stderr.strip().splitlines()) == 1 and not any(tmp_path.iterdir())


def test_techniques_the_data_cannot_feed_leave_the_real_timing_out_and_say_why(tmp_path):
    """The CIFAR augmentation needs RGB images: on the grey bundle the row is timed on staged batches only."""
    from test_image import make_bundle

    make_bundle(tmp_path / "data", variants=("gray",))
    options = followup.Options(
        profile="smoke", warmup=1, steps=1, staged_batches=1, data_dir=tmp_path / "data", cache_dir=tmp_path / "cache"
    )
    with hydra_context():
        row = followup.measure(followup.RowSpec("locality_k5", "image"), options, followup.torch.device("cpu"), None)
    assert row["status"] == "ok" and row["techniques"] == "followup_data" and row["data"] == "bundle"
    assert "real_examples_per_s" not in row and row["staged_examples_per_s"] > 0
    assert row["data_note"].startswith("techniques not applied (") and row["data_note"].endswith(
        "real batches not timed"
    )


def test_a_flop_count_that_fails_keeps_the_row_s_timing_and_says_so(tmp_path, monkeypatch):
    def no_count(step, batch):
        raise RuntimeError("no formula for this kernel")

    monkeypatch.setattr(followup, "step_flops", no_count)
    options = followup.Options(
        profile="smoke", warmup=0, steps=1, staged_batches=1, cache_dir=tmp_path, overrides={"listops": SHORT_LISTOPS}
    )
    with hydra_context():
        row = followup.measure(followup.RowSpec("locality_k5", "listops"), options, followup.torch.device("cpu"), 989.0)
    assert row["status"] == "ok" and row["real_examples_per_s"] > 0 and "tflops" not in row
    assert row["data_note"] == "FLOPs not counted (RuntimeError: no formula for this kernel)"


def test_profile_steps_run_that_many_more_staged_steps_after_the_timed_ones(tmp_path, monkeypatch):
    """Off CUDA the profile counts no kernels and says so; the step indices continue past the timed ones."""
    profiled, profile = [], followup.kernel_profile

    def count_steps(step, steps, device):
        for _ in range(steps):
            step()
        profiled.append(steps)
        return profile(lambda: None, steps, device)

    monkeypatch.setattr(followup, "kernel_profile", count_steps)
    seen = []
    original = followup.TrainStep.__call__

    def spy(self, batch, i, progress):
        seen.append(i)
        return original(self, batch, i, progress)

    monkeypatch.setattr(followup.TrainStep, "__call__", spy)
    options = followup.Options(
        profile="smoke", warmup=1, steps=2, staged_batches=1, profile_steps=3, cache_dir=tmp_path,
        overrides={"listops": SHORT_LISTOPS},
    )  # fmt: skip
    with hydra_context():
        row = followup.measure(followup.RowSpec("locality_k5", "listops"), options, followup.torch.device("cpu"), None)
    assert profiled == [3] and seen == list(range(1 + 5 * (2 + 2) + 3))  # five rounds of 2 staged and 2 real
    assert row["kernel_ms_per_step"] is None and "gpu_busy_share" not in row
    assert row["top_kernels"] == "not profiled: kernels are counted on CUDA only"


def test_an_image_row_without_data_times_random_rgb_images_through_its_augmentation(tmp_path):
    options = followup.Options(
        profile="smoke", warmup=1, steps=1, staged_batches=1, data_dir=tmp_path / "none", cache_dir=tmp_path / "cache"
    )
    with hydra_context():
        row = followup.measure(followup.RowSpec("locality_k5", "image"), options, followup.torch.device("cpu"), None)
    assert row["status"] == "ok" and row["data"] == "stand-in" and row["real_examples_per_s"] > 0
    assert row["data_note"].startswith("data missing (CIFAR-10 data not found.")
    assert row["data_note"].endswith("; real batches are random RGB images through the arm's techniques")


def test_the_rgb_stand_in_feeds_the_follow_up_augmentation_and_the_grayscale():
    task = followup.rgb_stand_in({"name": "image", "augment_on": "cpu"}, 8, seed=0)
    assert task.train.inputs.shape == (8, 32, 32, 3) and task.train.inputs.dtype == followup.np.uint8
    augment = followup.build_train_augment({"name": "followup", "augment": {"autoaugment": "followup"}}, task)
    batch = followup.torch.from_numpy(task.train.inputs)
    out = augment.transform(batch, augment.draws(seed=0, step=0))
    assert out.shape == batch.shape and task.prepare(out).shape == (8, 1024)


def test_the_table_names_a_compiled_row_s_mode_where_it_is_not_the_default():
    meta = {"date": "2026-12-03", "device": "cpu", "complete": True, "rows_planned": 3, "torch": "x", "cuda": None,
            "profile": "paper", "warmup": 1, "steps": 2}  # fmt: skip
    base = {"status": "ok", "batch": 48, "seq_len": 1024}
    rows = [
        {**base, "row": "a@image", "compiled": True, "compile_mode": "reduce-overhead"},
        {**base, "row": "b@image", "compiled": True, "compile_mode": "default"},
        {**base, "row": "c@image", "compiled": False, "compile_mode": ""},
    ]
    cells = {line.split(" | ")[0][2:]: line.split(" | ")[2] for line in followup.table_markdown(meta, rows).splitlines()
             if line.startswith("| ") and "@image" in line}  # fmt: skip
    assert cells == {"a@image": "yes (reduce-overhead)", "b@image": "yes", "c@image": "no"}
