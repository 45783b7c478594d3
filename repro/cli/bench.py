"""Speed and memory of every arm in the LRA text configuration: ``lra-bench`` (or ``python experiments/bench.py``).

Tay et al. 2021, Table 2 and Figure 3 (section 3.4) on this machine's GPU: for each
model and length, training and inference steps per second (median of timed steps
after warm-up, with their spread), peak GPU memory, FLOPs per step and the
fraction of the bf16 matmul peak measured in the same run. An out-of-memory is a
row marked OOM, never a crash. Settings: experiments/conf/bench.yaml, e.g.

    lra-bench models=[lra_transformer,locality_k61] lengths=[1024,4096] mode=train
    lra-bench depth=1 batch=8 mode=train lengths=[1024,2048,4096]
    lra-bench attention_dropout=0 mode=train lengths=[4096]   # every arm without attention dropout

``mode=followup`` times the follow-up arms' training steps at their protocols' settings instead, beside a
plain reference of each Transformer shape (``repro/bench/followup.py``; the ``followup`` block of
bench.yaml).

Writes ``<out_dir>/<date>_<device>_<mode>/`` (``..._attention-dropout-0`` with attention_dropout=0)
with bench.json, bench.csv, table.md and figure.png. Exits 1 (after writing) when a row failed with an
error other than OOM.
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..invocation import invoked_as
from . import GROUPS, config_dir, config_dirs, fail, group_options, require_same_checkout
from .usage import BENCH, page, wants_help

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from ..bench.matrix import Settings

# torch, Hydra and the benchmark's modules are imported where a measurement needs them, so that --help answers
# before any of them loads.


def as_list(value, key: str) -> list | None:
    """``models=x`` or ``models=[x,y]`` (also lengths); None stays None."""
    from omegaconf import ListConfig

    if value is None:
        return None
    if isinstance(value, (str, int)):
        return [value]
    if isinstance(value, ListConfig):
        return list(value)
    raise ValueError(f"{key}={value!r} (experiments/conf/bench.yaml): give one value or a list, e.g. {key}=[a,b]")


def count_setting(key: str, value, minimum: int, meaning: str) -> int:
    """``value`` if it is a whole number >= ``minimum``; else a one-line error naming ``key`` and ``meaning``."""
    from ..run.validate import is_int

    if not is_int(value) or value < minimum:
        raise ValueError(f"{key}={value!r} (experiments/conf/bench.yaml): give {meaning}")
    return value


def sync_every_setting(value) -> int:
    """``sync_every``: a whole number of steps >= 1."""
    meaning = (
        "a whole number of timed steps per synchronisation, 1 (each step alone) or more (blocks of steps run "
        "back to back)"
    )
    return count_setting("sync_every", value, 1, meaning)


def setup(cfg: DictConfig) -> tuple[list, list[str], Settings]:
    """The rows to measure, the lines of skipped rows and the settings; bad keys raise with their name."""
    from omegaconf import OmegaConf

    from ..bench.matrix import Settings, modes_for
    from ..bench.models import attention_dropout_setting, plan
    from ..run.runner import pick_device

    device = pick_device(str(cfg.device))
    variants = OmegaConf.to_container(cfg.variants, resolve=True) or {}
    dropout = attention_dropout_setting(cfg.attention_dropout)
    specs, skipped = plan(
        as_list(cfg.models, "models"), variants, task=str(cfg.arm_task), depth=cfg.depth, attention_dropout=dropout
    )
    settings = Settings(
        lengths=[int(n) for n in as_list(cfg.lengths, "lengths")],
        batch=int(cfg.batch),
        modes=modes_for(str(cfg.mode)),
        dtype=str(cfg.dtype),
        warmup=int(cfg.warmup),
        reps=int(cfg.reps),
        max_row_seconds=None if cfg.max_row_seconds is None else float(cfg.max_row_seconds),
        count_batch=int(cfg.count_batch),
        seed=int(cfg.seed),
        device=device,
        progress=bool(cfg.progress),
        time_budget_s=None if cfg.time_budget_s is None else float(cfg.time_budget_s),
        sync_every=sync_every_setting(cfg.sync_every),
        profile_steps=count_setting(
            "profile_steps", cfg.profile_steps, 0, "a whole number of steps to profile, 0 (none) or more"
        ),
        oom_at=cfg.debug.oom_at,
    )
    settings.autocast_dtype  # noqa: B018 - validates dtype before anything is measured
    return specs, skipped, settings


def bench_app(cfg: DictConfig) -> None:
    """Measure the composed rows, write the bundle; exit 1 after writing when a row failed (not OOM)."""
    import torch

    from ..bench import report
    from ..bench.matrix import run_matrix
    from ..bench.models import attention_dropout_setting
    from ..bench.timing import device_name, matmul_peak_tflops
    from ..records import commit_variable_problem, git_commit, tree_changes

    if str(cfg.mode) == "followup":  # the follow-up arms at their protocols' settings (repro/bench/followup.py)
        from ..bench import followup

        followup.main(cfg)
        return
    if problem := commit_variable_problem():  # the record names its commit: refuse a bad one before measuring
        sys.exit(f"bench: {problem}")
    try:
        specs, skipped, settings = setup(cfg)
    except (KeyError, ValueError, RuntimeError) as err:
        sys.exit(f"bench: {err.args[0] if err.args else err}")
    device = settings.device
    if device.type == "cuda":  # as repro/training/: TF32 for float32 matmuls and convolutions, tuned cuDNN
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    for line in skipped:
        print(line)
    if not specs:
        sys.exit("no model to measure: every requested row was skipped (see the lines above)")
    matmul_n = int(cfg.matmul_n) if device.type == "cuda" else min(int(cfg.matmul_n), 512)
    matmul_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # CPU: the dtype the models run in
    peak = matmul_peak_tflops(matmul_n, device, matmul_dtype)
    name = device_name(device)
    print(
        f"{len(specs)} models x {len(settings.lengths)} lengths x {len(settings.modes)} modes on {name}; "
        f"{matmul_dtype} matmul peak {peak:.3g} TFLOP/s ({matmul_n}^3)"
    )
    rows = run_matrix(specs, settings, peak)
    meta = {
        "device": name,
        "device_slug": report.slug(name),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if device.type == "cuda" else None,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "dtype": settings.dtype,
        "autocast": str(settings.autocast_dtype).replace("torch.", "") if settings.autocast_dtype else "none",
        "tf32": device.type == "cuda",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),  # noqa: UP017 (UTC: Python 3.11+)
        "batch": settings.batch,
        "lengths": settings.lengths,
        "mode": str(cfg.mode),
        "modes": settings.modes,
        "depth": cfg.depth,
        "attention_dropout": report.dropout_label(attention_dropout_setting(cfg.attention_dropout)),
        "task": str(cfg.arm_task),
        "warmup": settings.warmup,
        "reps": settings.reps,
        "sync_every": settings.sync_every,
        "profile_steps": settings.profile_steps,
        "max_row_seconds": settings.max_row_seconds,
        "time_budget_s": settings.time_budget_s,
        "matmul_peak_tflops": peak,
        "matmul_n": matmul_n,
        "matmul_dtype": str(matmul_dtype).replace("torch.", ""),
        "memory_unit": "GB = 10^9 bytes, torch.cuda.max_memory_allocated after reset_peak_memory_stats"
        if device.type == "cuda"
        else "not measured (CUDA only)",
        "flops_counted": "matrix products only, 2 per multiply-add; training = 3x forward (repro/bench/flops.py)",
        "git_commit": git_commit(),
        "tree_changes": tree_changes(),  # what +dirty stands for
        "command": " ".join([invoked_as("lra-bench"), *sys.argv[1:]]),
    }
    notes = {s.name: s.note for s in specs if s.note}
    pairs = {s.name: s.compare_with for s in specs if s.compare_with}
    arms = [s.name for s in specs if s.kind == "arm"]
    accuracies = report.read_accuracies(Path(cfg.accuracy_dir), arms, str(cfg.arm_task))
    where = report.write_bundle(Path(cfg.out_dir), meta, rows, notes, skipped, accuracies, pairs)
    failed = [r for r in rows if r["status"].startswith("error")]
    oom = sum(r["status"] == "OOM" for r in rows)
    late = sum(r["status"].startswith("skipped") for r in rows)
    print(f"wrote {where} ({len(rows)} rows, {oom} OOM, {late} skipped for time, {len(failed)} failed)")
    if failed:
        for row in failed:
            print(f"  {row['model']} L={row['length']} {row['mode']}: {row['status']}", file=sys.stderr)
        sys.exit(1)


def command_line_problem(argv: list[str], conf: Path) -> str | None:
    """The first mistake on the benchmark's command line: a run's group (``task=``, ``arm=``, ...), which
    the benchmark does not read, or an ``arm_task`` that names no task; None when there is none."""
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key in GROUPS:
            return (
                f"{arg}: the benchmark takes no {key}; the rows are models=[...] (arms or variants), and the "
                "task whose settings they take is arm_task=NAME"
            )
        if sep and key == "arm_task" and value not in (options := group_options("task", config_dirs(argv, conf))):
            return f"{arg}: no task {value!r}; choose one of: {', '.join(options)}"
    return None


def main(script: str | None = None) -> None:
    """``lra-bench``; experiments/bench.py passes its own path as ``script`` (it must be this checkout's)."""
    if wants_help(sys.argv[1:]):
        print(page(BENCH, invoked_as("lra-bench")), end="")
        return
    if script is not None:
        require_same_checkout(script)
    prog = "experiments/bench.py" if script else "lra-bench"
    conf = config_dir(prog, "bench")
    if mistake := command_line_problem(sys.argv[1:], Path(conf)):
        fail(f"{prog}: error: {mistake}")
    import hydra

    hydra.main(version_base="1.3", config_path=conf, config_name="bench")(bench_app)()


if __name__ == "__main__":
    main()
