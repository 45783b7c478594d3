"""The grid's scheduling on CPU with a stand-in runner (tests/grid_fake_runner.py): packing, deadline, signals."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from conftest import ROOT

from repro.grid.gridlog import GPU_TOTAL, read_rows
from repro.grid.schedule import CARRY_OVER_MIN_S, GpuSlots, Job, Scheduler

GRID = [sys.executable, "-m", "repro.grid"]  # lra-grid, run with cwd=ROOT: this checkout's package
FAKE = ROOT / "tests" / "grid_fake_runner.py"


def _grid(tmp_path, blocks: str, minutes_per_run: float = 0.0):
    path = tmp_path / "grid.yaml"
    path.write_text(
        f"common: [profile=smoke]\nminutes_per_run: {minutes_per_run}\noverhead_minutes: 0\ncells:\n{blocks}"
    )
    return path


def _command(tmp_path, grid, *args):
    return [*GRID, str(grid), "--runner", str(FAKE), *args, "--", f"output_dir={tmp_path / 'out'}"]


def _env(tmp_path, seconds: float, fail: str = "") -> dict:
    return {**os.environ, "FAKE_SECONDS": str(seconds), "FAKE_EVENTS": str(tmp_path / "events.txt"), "FAKE_FAIL": fail}


def _run(tmp_path, grid, *args, seconds=1.0, fail=""):
    return subprocess.run(
        _command(tmp_path, grid, *args),
        env=_env(tmp_path, seconds, fail),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def _events(tmp_path) -> list[tuple[str, str, str, float]]:
    path = tmp_path / "events.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(kind, cell, gpu, float(when)) for kind, cell, gpu, when in (line.split(" ") for line in lines)]


def _max_overlap(events, gpu: str) -> int:
    """The most cells running at once on ``gpu`` (an end before a start at the same instant)."""
    marks = sorted((when, 0 if kind == "end" else 1) for kind, _, g, when in events if g == gpu)
    running = peak = 0
    for _, starts in marks:
        running += 1 if starts else -1
        peak = max(peak, running)
    return peak


def _cell_rows(tmp_path):
    return [row for row in read_rows(tmp_path / "out" / "grid_log.csv") if row["arm"] != GPU_TOTAL]


def test_packing_never_exceeds_per_gpu_and_runs_every_cell_once(tmp_path):
    grid = _grid(tmp_path, "  - {arms: [locality_k5], tasks: [listops], seeds: [0, 1, 2, 3, 4, 5]}\n")
    done = _run(tmp_path, grid, "--gpus", "0,1", "--per-gpu", "2", seconds=2.0)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    events = _events(tmp_path)
    starts = sorted(cell for kind, cell, _, _ in events if kind == "start")
    assert starts == sorted(f"locality_k5__listops__seed{s}" for s in range(6))
    assert sorted(cell for kind, cell, _, _ in events if kind == "end") == starts
    assert {_max_overlap(events, gpu) for gpu in ("0", "1")} == {2}  # packed, never more than two
    rows = _cell_rows(tmp_path)
    assert sorted(int(row["seed"]) for row in rows) == list(range(6)) and {row["exit"] for row in rows} == {"0"}
    totals = [row for row in read_rows(tmp_path / "out" / "grid_log.csv") if row["arm"] == GPU_TOTAL]
    assert sorted(row["gpu"] for row in totals) == ["0", "1"]
    for total in totals:
        mine = [row for row in rows if row["gpu"] == total["gpu"]]
        assert int(total["examples"]) == sum(int(row["examples"]) for row in mine) == 200 * len(mine)
        rate = int(total["examples"]) / float(total["wall_s"])  # wall_s as written: to 0.1 s
        assert float(total["examples_per_s"]) == pytest.approx(rate, rel=0.01 + 0.05 / float(total["wall_s"]))
        assert sum(float(row["gpu_s"]) for row in mine) == pytest.approx(float(total["gpu_s"]), abs=0.1 * len(mine))
    assert "[grid] throughput: 1200 training examples in 6 cell(s)" in done.stdout


def test_a_blocks_per_gpu_wins_over_the_command_line(tmp_path):
    grid = _grid(
        tmp_path,
        "  - {arms: [locality_k5], tasks: [listops], seeds: [0, 1], per_gpu: 1}\n"
        "  - {arms: [locality_k61], tasks: [listops], seeds: [0, 1, 2]}\n",
    )
    done = _run(tmp_path, grid, "--gpus", "0", "--per-gpu", "3", seconds=1.5)
    assert done.returncode == 0, done.stdout[-3000:]
    events = _events(tmp_path)
    alone = {cell for _, cell, _, _ in events if cell.startswith("locality_k5_")}
    spans = {cell: [when for kind, c, _, when in sorted(events, key=lambda e: e[3]) if c == cell] for cell in alone}
    for cell, (begin, end) in spans.items():  # nothing else ran while a per_gpu: 1 cell ran
        others = [e for e in events if e[1] != cell and begin < e[3] < end]
        assert not others, (cell, others)
    assert _max_overlap([e for e in events if e[1].startswith("locality_k61")], "0") == 3


def _dp_grid(tmp_path, minutes: dict):
    """k5, then k61 on two GPUs (gpus: 2), then k31, each planned at ``minutes[arm]``."""
    plan = tmp_path / "plan.csv"
    rows = "".join(f"{arm},listops,0,{m},100\n" for arm, m in minutes.items())
    plan.write_text("arm,task,seed,minutes,planned_steps\n" + rows)
    grid = _grid(
        tmp_path,
        "  - {arms: [locality_k5], tasks: [listops], seeds: [0]}\n"
        "  - {arms: [locality_k61], tasks: [listops], seeds: [0], gpus: 2}\n"
        "  - {arms: [locality_k31], tasks: [listops], seeds: [0]}\n",
    )
    return grid, plan


def _spans(tmp_path) -> dict:
    """(kind, arm) -> [(gpu, time)], in time order."""
    times = defaultdict(list)
    for kind, cell, gpu, when in sorted(_events(tmp_path), key=lambda e: e[3]):
        times[kind, cell.split("__")[0]].append((gpu, when))
    return times


def test_a_data_parallel_cell_holds_its_gpus_alone_and_holds_back_the_cells_after_it(tmp_path):
    """gpus: 2 runs the cell under torchrun, two ranks seeing both GPUs, alone (whatever --per-gpu) and planned
    at its minutes over its GPUs (8 / 2 < 5 minutes left); it waits for two idle GPUs, and the cell queued after
    it, which would not end before they are free, waits too; it is charged on each of its GPUs."""
    grid, plan = _dp_grid(tmp_path, {"locality_k5": 1, "locality_k61": 8, "locality_k31": 1})
    args = ["--gpus", "0,1", "--per-gpu", "3", "--deadline-minutes", "5", "--plan-file", str(plan)]
    done = _run(tmp_path, grid, *args, seconds=3.0)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "start locality_k61 listops seed 0 [2/3] on GPU 0+1" in done.stdout
    times = _spans(tmp_path)
    assert [gpu for gpu, _ in times["start", "locality_k61"]] == ["0,1", "0,1"]  # two ranks
    assert len(times["end", "locality_k61"]) == 2
    assert times["end", "locality_k5"][0][1] < min(when for _, when in times["start", "locality_k61"])
    assert times["start", "locality_k31"][0][1] > max(when for _, when in times["end", "locality_k61"])
    rows = {row["arm"]: row for row in _cell_rows(tmp_path)}
    assert (rows["locality_k61"]["gpu"], rows["locality_k61"]["per_gpu"]) == ("0+1", "1")
    assert float(rows["locality_k61"]["gpu_s"]) == pytest.approx(2 * float(rows["locality_k61"]["wall_s"]), abs=0.2)
    totals = {row["gpu"]: row for row in read_rows(tmp_path / "out" / "grid_log.csv") if row["arm"] == GPU_TOTAL}
    shared = int(rows["locality_k61"]["examples"]) / 2
    assert int(totals["1"]["examples"]) == round(shared)
    assert int(totals["0"]["examples"]) == round(
        int(rows["locality_k5"]["examples"]) + shared + int(rows["locality_k31"]["examples"])
    )


def test_a_cell_that_ends_before_the_data_parallel_cells_gpus_are_free_starts_meanwhile(tmp_path):
    grid, plan = _dp_grid(tmp_path, {"locality_k5": 1, "locality_k61": 1, "locality_k31": 0.01})
    done = _run(tmp_path, grid, "--gpus", "0,1", "--plan-file", str(plan), seconds=3.0)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    times = _spans(tmp_path)
    (gpu, began), dp_began = times["start", "locality_k31"][0], min(w for _, w in times["start", "locality_k61"])
    assert gpu == "1" and began < times["end", "locality_k5"][0][1] < dp_began  # backfilled beside k5


def test_a_data_parallel_cell_wider_than_the_gpus_named_is_left_out_and_the_rest_runs(tmp_path):
    grid = _grid(
        tmp_path,
        "  - {arms: [locality_k5], tasks: [listops], seeds: [0], gpus: 3}\n"
        "  - {arms: [locality_k31], tasks: [listops], seeds: [0]}\n",
    )
    done = _run(tmp_path, grid, "--gpus", "0,1", seconds=0.1)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (
        f"[grid] not started: {grid}: cells[0] trains locality_k5 listops seed 0 on 3 GPUs (gpus: 3), but --gpus "
        "gives 2; name at least 3 (--gpus all, or --gpus 0,1)"
    ) in done.stderr
    assert [row["arm"] for row in _cell_rows(tmp_path)] == ["locality_k31"]
    assert "1 of 2 cells attempted" in done.stdout and "1 left" in done.stdout


@pytest.mark.slow
def test_the_deadline_stops_every_rank_of_a_data_parallel_cell_which_counts_as_interrupted(tmp_path):
    """torchrun forwards the deadline's SIGTERM to both ranks (each checkpoints and exits 143) and exits 1
    itself: the checkpoint written since the cell started says it was stopped, not failed; it is left for
    the next slot."""
    grid = _grid(tmp_path, "  - {arms: [locality_k5], tasks: [listops], seeds: [0], gpus: 2}\n")
    done = _run(tmp_path, grid, "--gpus", "0,1", "--deadline-minutes", "0.4", seconds=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    events = _events(tmp_path)
    assert sorted(kind for kind, *_ in events) == ["end", "end", "start", "start"]
    run_dir = tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke" / "seed0"
    assert (run_dir / "interrupted").read_text() == f"signal {int(signal.SIGTERM)}\n"
    assert [row["exit"] for row in _cell_rows(tmp_path)] == ["1"]
    assert "failed with exit" not in done.stdout and "0 failed" in done.stdout
    assert "1 of 1 cells attempted" in done.stdout and "1 left" in done.stdout


def test_a_failed_cell_does_not_stop_the_others(tmp_path):
    grid = _grid(tmp_path, "  - {arms: [locality_k5], tasks: [listops], seeds: [0, 1, 2]}\n")
    done = _run(tmp_path, grid, "--gpus", "0", seconds=0.2, fail="locality_k5__listops__seed0")
    assert done.returncode == 1
    assert "failed with exit 1: locality_k5 listops seed 0" in done.stdout
    assert sorted((row["seed"], row["exit"]) for row in _cell_rows(tmp_path)) == [("0", "1"), ("1", "0"), ("2", "0")]
    runs = tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke"
    assert all((runs / f"seed{seed}" / "metrics.json").is_file() for seed in (1, 2))


@pytest.mark.slow
def test_the_deadline_checkpoints_running_cells_and_starts_no_more(tmp_path):
    """At the deadline the running cell gets SIGTERM (the runner checkpoints, exits 143); the next never starts."""
    grid = _grid(tmp_path, "  - {arms: [locality_k5], tasks: [listops], seeds: [0, 1]}\n")
    done = _run(tmp_path, grid, "--gpus", "0", "--deadline-minutes", "0.4", seconds=120)
    assert done.returncode == 0, done.stdout[-3000:]
    run_dir = tmp_path / "out" / "runs" / "locality_k5" / "listops" / "smoke"
    assert (run_dir / "seed0" / "interrupted").read_text() == f"signal {int(signal.SIGTERM)}\n"
    assert not (run_dir / "seed1").exists()
    assert [(row["seed"], row["exit"]) for row in _cell_rows(tmp_path)] == [("0", str(128 + signal.SIGTERM))]
    assert "not started (deadline reached first): locality_k5 listops seed 1" in done.stdout
    assert "1 of 2 cells attempted" in done.stdout and "2 left" in done.stdout


def test_sigterm_to_the_grid_reaches_every_running_cell_then_archives(tmp_path):
    grid = _grid(tmp_path, "  - {arms: [locality_k5], tasks: [listops], seeds: [0, 1, 2]}\n")
    process = subprocess.Popen(
        _command(tmp_path, grid, "--gpus", "0", "--per-gpu", "2", "--archive-to", str(tmp_path / "slot")),
        env=_env(tmp_path, 120),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 120
    while sum(kind == "start" for kind, *_ in _events(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
    rows = _cell_rows(tmp_path)
    assert sorted((row["seed"], row["exit"]) for row in rows) == [("0", "143"), ("1", "143")]
    assert "not started (stopped by signal 15 first): locality_k5 listops seed 2" in output
    assert (tmp_path / "slot" / "grid-manifest.json").exists()


@pytest.mark.parametrize(
    "block_setting, extra_args, started",
    [
        ("", [], False),
        ("", ["--carry-over"], True),
        (", carry_over: false", ["--carry-over"], False),  # the block's setting wins
        (", carry_over: true", [], True),
    ],
)
def test_a_cell_planned_past_the_deadline_is_not_started_unless_carried_over(
    tmp_path, block_setting, extra_args, started
):
    grid = _grid(tmp_path, f"  - {{arms: [locality_k5], tasks: [listops], seeds: [0, 1]{block_setting}}}\n")
    plan = tmp_path / "plan.csv"
    plan.write_text(
        "arm,task,seed,minutes,planned_steps\nlocality_k5,listops,0,10,100\nlocality_k5,listops,1,0.01,100\n"
    )
    done = _run(
        tmp_path, grid, "--gpus", "0", "--deadline-minutes", "6", "--plan-file", str(plan), *extra_args, seconds=0.2
    )
    assert done.returncode == 0, done.stdout[-3000:]
    seeds = sorted(row["seed"] for row in _cell_rows(tmp_path))
    assert seeds == (["0", "1"] if started else ["1"])
    assert ("not started (deadline): locality_k5 listops seed 0" in done.stdout) is not started


@pytest.mark.parametrize("carry_over, stopped", [("false", True), pytest.param("true", False, marks=pytest.mark.slow)])
def test_a_cell_that_cannot_carry_over_is_stopped_once_its_pace_overruns_the_deadline(tmp_path, carry_over, stopped):
    """Planned to fit (1 minute of a 6-minute slot), the cell's progress.json shows 1 step a minute of 100,000:
    a block that may not carry over stops it at the first projection (its work would be lost at the deadline),
    one that may carry over lets it run; either way the grid ends without a failure."""
    grid = _grid(tmp_path, f"  - {{arms: [locality_k5], tasks: [listops], seeds: [0], carry_over: {carry_over}}}\n")
    plan = tmp_path / "plan.csv"
    plan.write_text("arm,task,seed,minutes,planned_steps\nlocality_k5,listops,0,1,100000\n")
    env = {**_env(tmp_path, 20.0), "FAKE_PROGRESS": "1,60"}  # seen every 5 s: projected from the second look
    done = subprocess.run(
        _command(tmp_path, grid, "--gpus", "0", "--deadline-minutes", "6", "--plan-file", str(plan)),
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = _cell_rows(tmp_path)
    assert [row["exit"] for row in rows] == (["143"] if stopped else ["0"])
    message = "stopped early (projected past the deadline, cannot carry over): locality_k5 listops seed 0"
    assert (message in done.stdout) is stopped


def test_the_plan_file_holds_each_probe_as_soon_as_it_ends(tmp_path):
    """--plan rewrites its plan file as each probe ends: a second probe, at its start, finds the first's row
    costed and its own marked as not probed yet, so a slot that ends mid-plan keeps what was probed."""
    grid = _grid(tmp_path, "  - {arms: [locality_k5, lra_local], tasks: [listops], seeds: [0]}\n")
    plan = tmp_path / "plan.csv"
    args = ["--plan", "--probe-all", "--probe-steps", "4", "--plan-out", str(plan)]
    env = {**_env(tmp_path, 0.2), "FAKE_SNAPSHOT": str(plan)}
    done = subprocess.run(_command(tmp_path, grid, *args), env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not (tmp_path / "plan.csv.at-locality_k5__listops__seed0").exists()  # no plan file before a probe ended
    with open(tmp_path / "plan.csv.at-lra_local__listops__seed0") as handle:
        seen = {row["arm"]: row for row in csv.DictReader(handle)}
    assert float(seen["locality_k5"]["minutes"]) > 0 and seen["locality_k5"]["source"] == "probe of 10 steps"
    assert seen["lra_local"]["minutes"] == "" and seen["lra_local"]["source"].startswith("not probed yet")
    with plan.open() as handle:
        assert [row["source"] for row in csv.DictReader(handle)] == ["probe of 10 steps"] * 2


@pytest.mark.parametrize("slowdown, started", [(None, False), ("1", True)])
def test_packing_slowdown_counts_against_the_deadline(tmp_path, slowdown, started):
    """0.5 minutes alone, per_gpu 2: 1.0 minutes expected on a full GPU (default), over a 0.9-minute deadline."""
    grid = _grid(tmp_path, "  - {arms: [locality_k5], tasks: [listops], seeds: [0]}\n")
    plan = tmp_path / "plan.csv"
    plan.write_text("arm,task,seed,minutes,planned_steps\nlocality_k5,listops,0,0.5,100\n")
    args = ["--gpus", "0", "--per-gpu", "2", "--deadline-minutes", "0.9", "--plan-file", str(plan)]
    done = _run(tmp_path, grid, *args, *(["--pack-slowdown", slowdown] if slowdown else []), seconds=0.2)
    assert done.returncode == 0, done.stdout[-3000:]
    rows = _cell_rows(tmp_path) if (tmp_path / "out" / "grid_log.csv").exists() else []
    assert bool(rows) is started


def test_slots_place_on_the_emptiest_gpu_within_every_members_limit():
    slots = GpuSlots(["0", "1"])
    assert slots.place(2) == ("0",)
    slots.add(("0",), "a", 2, now=0.0)
    assert slots.place(2) == ("1",)
    slots.add(("1",), "b", 1, now=0.0)  # GPU 1 now holds a cell that runs alone
    assert slots.place(3) == ("0",)
    slots.add(("0",), "c", 3, now=1.0)
    assert slots.place(3) is False  # GPU 0: a's limit 2 reached; GPU 1: b's limit 1
    ends = ((("0",), "a", 3.0), (("1",), "b", 4.0), (("0",), "c", 5.0))
    charged = {key: slots.remove(gpu, key, now) for gpu, key, now in ends}
    assert charged == pytest.approx({"a": 1.0 + 2.0 / 2, "b": 4.0, "c": 2.0 / 2 + 2.0})
    assert slots.busy_s == pytest.approx({"0": 5.0, "1": 4.0})
    assert sum(charged.values()) == pytest.approx(sum(slots.busy_s.values()))


def test_a_data_parallel_job_takes_idle_gpus_alone_and_is_charged_on_each():
    slots = GpuSlots(["0", "1", "2"])
    slots.add(("0",), "a", 3, now=0.0)
    assert slots.place(1, gpus=2) == ("1", "2")  # the idle ones, not GPU 0 which has room for two more
    assert slots.place(1, gpus=3) is False
    slots.add(("1", "2"), "dp", 1, now=0.0)
    assert slots.place(3) == ("0",)  # nothing packs beside the data-parallel job
    slots.add(("0",), "b", 3, now=1.0)
    charged = {"dp": slots.remove(("1", "2"), "dp", now=2.0), "a": slots.remove(("0",), "a", 3.0)}
    assert charged == pytest.approx({"dp": 2 * 2.0, "a": 1.0 + 2.0 / 2})
    assert slots.place(1, gpus=2) == ("1", "2")
    assert sum(slots.busy_s.values()) == pytest.approx(2.0 + 2.0 + 3.0)


def test_a_cell_spans_each_gpu_charge_once():
    """Charges of one GPU add up to its busy time however the cells come and go."""
    slots, busy = GpuSlots([None]), defaultdict(float)
    times = [
        (0.0, "add", "a"),
        (0.5, "add", "b"),
        (0.7, "add", "c"),
        (1.1, "rm", "b"),
        (2.0, "rm", "a"),
        (2.5, "rm", "c"),
        (3.0, "add", "d"),
        (3.25, "rm", "d"),
    ]
    for now, what, key in times:
        if what == "add":
            slots.add((None,), key, 5, now)
        else:
            busy[key] = slots.remove((None,), key, now)
    assert sum(busy.values()) == pytest.approx(slots.busy_s[None]) == pytest.approx(2.5 + 0.25)


@pytest.mark.parametrize(
    "left_s, carry_over, kept",
    [
        (CARRY_OVER_MIN_S, True, True),  # too short to end, long enough to be worth a checkpoint
        (CARRY_OVER_MIN_S - 1, True, False),  # a carried-over start needs CARRY_OVER_MIN_S of the slot
        (CARRY_OVER_MIN_S, False, False),
        (3600.0, False, True),  # ends before the deadline: started either way
    ],
)
def test_a_carried_over_job_starts_only_with_carry_over_min_s_left(left_s, carry_over, kept):
    """The rule behind the idle tail of a slot whose GPUs come free a few minutes before the deadline."""
    scheduler = Scheduler(["0"], deadline=1000.0 + left_s, carry_over=carry_over, clock=lambda: 1000.0)
    job = Job("k", "a cell", ["true"], est_s=1800.0)
    assert scheduler._drop_unfinishable([job], now=1000.0) == ([job] if kept else [])
    assert scheduler.outcome.not_started == ([] if kept else [job])
