"""A stand-in for experiments/run.py in the grid's scheduling tests (``--runner``): no torch, no data.

Takes the runner's ``key=value`` overrides. Sleeps ``FAKE_SECONDS`` (default 1), logging
``start``/``end`` lines (cell, CUDA_VISIBLE_DEVICES, time) to ``$FAKE_EVENTS``; exits 1 for
the cells named in ``FAKE_FAIL`` (comma-separated ``arm__task__seedS``); with ``FAKE_PROGRESS``
(``STEPS,SECONDS``) it rewrites ``progress.json`` every 0.05 s, each time ``STEPS`` steps and
``SECONDS`` of its own clock further (a run's pace, for the grid's projection); with ``FAKE_SNAPSHOT``
(a file's path) it copies that file, as it is at its start, to ``<path>.at-<cell>``; on SIGTERM writes
``interrupted`` in its record folder (under torchrun, rank 0 also a stand-in ``checkpoints/last.pt``)
and exits 143, as the runner does after checkpointing;
otherwise writes a complete record (``metrics.json`` last) whose examples are 100 per second slept
(under torchrun, rank 0 alone; every rank logs its events).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

args = dict(item.lstrip("+").split("=", 1) for item in sys.argv[1:] if "=" in item)
name = f"{args['arm']}__{args['task']}__seed{args['seed']}"
run_dir = (
    Path(args.get("output_dir", "outputs"))
    / "runs"
    / args["arm"]
    / args["task"]
    / args.get("profile", "smoke")
    / f"seed{args['seed']}"
)
seconds = float(os.environ.get("FAKE_SECONDS", "1"))
gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")


def event(what: str) -> None:
    if os.environ.get("FAKE_EVENTS"):
        with open(os.environ["FAKE_EVENTS"], "a") as out:
            out.write(f"{what} {name} {gpu} {time.time():.6f}\n")


def stop(signum, _frame) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "interrupted").write_text(f"signal {signum}\n")
    if os.environ.get("RANK") == "0":  # under torchrun: rank 0's checkpoint, the grid's sign of a clean stop
        (run_dir / "checkpoints").mkdir(exist_ok=True)
        (run_dir / "checkpoints" / "last.pt").write_bytes(b"fake")
    event("end")
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, stop)
event("start")
snapshot = Path(os.environ.get("FAKE_SNAPSHOT", "/nonexistent"))
if snapshot.is_file():
    Path(f"{snapshot}.at-{name}").write_bytes(snapshot.read_bytes())
if os.environ.get("FAKE_PROGRESS"):
    steps, clock = (float(x) for x in os.environ["FAKE_PROGRESS"].split(","))
    run_dir.mkdir(parents=True, exist_ok=True)
    written, until = 0, time.monotonic() + seconds
    while time.monotonic() < until:
        written += 1
        progress = json.dumps({"step": int(written * steps), "elapsed_s": written * clock})
        (run_dir / ".progress.tmp").write_text(progress)
        os.replace(run_dir / ".progress.tmp", run_dir / "progress.json")
        time.sleep(0.05)
else:
    time.sleep(seconds)
if name in os.environ.get("FAKE_FAIL", "").split(","):
    event("end")
    sys.exit(1)
if os.environ.get("RANK", "0") != "0":  # under torchrun rank 0 alone writes the record, as the runner
    event("end")
    sys.exit(0)
run_dir.mkdir(parents=True, exist_ok=True)
# the smallest record the runner's definition of complete accepts (repro/records.py, record_problem)
(run_dir / "config.yaml").write_text(f"arm: {args['arm']}\ntrain: {{}}\n")
(run_dir / "history.csv").write_text(f"step,elapsed_s,train_loss,val_acc\n10,{seconds},1.0,\n")
(run_dir / "predictions.csv").write_text("index,prediction,label\n0,1,1\n")
metrics = {
    "status": "complete",
    "arm": args["arm"],
    "task": args["task"],
    "seed": int(args["seed"]),
    "steps": 10,
    "epochs": 1,
    "test_acc": 1.0,
    "train_time_s": seconds,
    "train_examples_per_s": 100.0,
    "elapsed_s": seconds,
    "wall_time_s": seconds,
}
(run_dir / "metrics.json").write_text(json.dumps(metrics))
event("end")
print(f"fake {name} done")
