"""Training steps of the follow-up arms at their protocols' settings, beside a plain reference of each
Transformer shape: ``lra-bench mode=followup`` (``python experiments/bench.py mode=followup``).

Each row is one (arm, task) at a profile's resolved settings (``profile=paper`` by default: the model,
batch, sequence length, precision, optimiser and ``train.compile`` of a real run), built with the
runner's own functions (``repro.run.settings.resolve``, the task's builder, ``build_train_augment``,
``build_model``) and trained by the training loop's own step (``repro.training.step.TrainStep``) on
batches from its own loader (``TrainBatches``). A row times, after ``warmup`` untimed steps:

- in each of ``rounds`` rounds (the median round reported, with the rounds' spread),
  ``steps`` steps on **real** batches: each step fetches its batch from the loader (indexing,
  the techniques' transforms, the task's ``prepare``) and trains on it;
- ``steps`` steps on **staged** batches: the loader's first ``staged_batches`` batches, fetched before
  timing and held on the device, cycled (the same examples, so the same computation without the
  fetch). Where the task's data is absent, or cannot feed the arm's techniques, the staged batches
  are a stand-in's random tokens of the task's shape, the real columns are empty and the row says why;
  an image row without its data takes random RGB images instead (``rgb_stand_in``), so its real
  batches still go through the arm's CIFAR-10 augmentation and the data wait is measured.

Both are wall-clock times between two device synchronisations. The data-wait share is
``1 - staged time / real time`` (as measured: noise can make it slightly negative). The FLOPs of one
training step (forward and backward; the optimiser's update not counted) are counted once per row with
``torch.utils.flop_counter.FlopCounterMode`` on the device, on the mixers' plain paths (``flops.plain_paths``:
fused and flex kernels run no counter formula, so padded positions count as the plain path computes
them); achieved TFLOP/s is that count over the staged step time, set against the device's dense bf16
peak (``DENSE_BF16_PEAK_TFLOPS``; an unknown device: n/a). With ``profile_steps`` > 0, that many more staged
steps run under ``torch.profiler`` (``timing.kernel_profile``; CUDA only): the kernels' milliseconds a step
against the staged step's wall time (the share the GPU was busy; the rest is the host launching kernels),
kernel launches a step, the kernels and operators that took most, and the operators' own host time
(``host_ms_per_step``, ``top_host_ops``: where a step the GPU waits on spends its host's time).

The **reference** row of each Transformer shape (``rotary_transformer``'s model on the task) is the
project's own plain training of that shape: the same model built for a task without padding (so
attention takes SDPA's flash kernel, and the rotation its precomputed cos/sin), ``train.compile``
on (the whole model through ``torch.compile``), fused AdamW, bf16 autocast, random full-length
batches already on the device, no techniques. Every Transformer arm's row gives its examples/s (real
where measured, else staged) over its shape's reference.

With ``isolate_rows`` (experiments/conf/bench.yaml sets it), each row is measured in a fresh process
(``spawn``), so no row inherits the compiled graphs, caches, allocator state or Python heap of the rows
measured before it: a row times what its own training run would meet.

Rows are written as they are measured (``bench.csv``, ``bench.json`` and ``table.md``, each replaced
whole), so a run cut short keeps its rows; ``followup.resume=<folder>`` measures only the rows that
folder lacks.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ..followup.techniques import build_train_augment
from ..models.model import build_model, collect_record_info
from ..ops.conv import AUTO_TABLE_ENV, auto_table_identity
from ..records import write_atomic, write_csv
from ..run.budget import apply_example_budget
from ..run.runner import take_subset
from ..run.settings import compose_run
from ..tasks import DataMissing, Split, TaskData, get_task_builder
from ..training.batches import Batch, TrainBatches, TrainingData
from ..training.distributed import DistContext
from ..training.loop import configure_device, run_controller, start_packing, train_batches
from ..training.settings import TrainSettings
from ..training.state import seed_everything
from ..training.step import TrainStep, make_optimizer
from ..training.swa import swa_start_epoch
from .flops import plain_paths
from .models import arm_names
from .report import slug
from .timing import free_memory, is_out_of_memory, kernel_profile, read_peak, reset_peak

# The follow-up protocol's rows: (arm, techniques; None = the arm's own default) on each task, and the
# rotary Transformer on Pathfinder too. s4, s5 and mega default to no techniques; the protocol measures
# them with the follow-up's.
PROTOCOL_ARMS = (
    ("rotary_transformer", None),
    ("rotary_transformer_notech", None),
    ("locality_k5", None),
    ("locality_k61", None),
    ("gmlp", None),
    ("s4", "followup"),
    ("s5", "followup"),
    ("mega", "followup"),
)
PROTOCOL_TASKS = ("listops", "text", "image")
PROTOCOL_EXTRA = (("rotary_transformer", "pathfinder"),)
REFERENCE_ARM = "rotary_transformer"  # the reference rows take its model for each task
TRANSFORMER_BACKBONE = "rotary_transformer"  # rows of this backbone are set against their shape's reference

# Dense (no 2:4 sparsity) bf16 Tensor Core peaks, TFLOP/s: NVIDIA's H100 and H200 datasheets give
# 1,979 (SXM), 1,513 (H100 PCIe) and 1,671 (NVL) "with sparsity", twice the dense figure; the A100
# datasheet gives 312 dense. Matched in order against torch.cuda.get_device_name.
DENSE_BF16_PEAK_TFLOPS = (
    ("H200 NVL", 835.0),
    ("H200", 989.0),
    ("H100 NVL", 835.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("A100", 312.0),
)

COLUMNS = [
    "row",
    "kind",
    "arm",
    "techniques",
    "task",
    "profile",
    "status",
    "batch",
    "seq_len",
    "precision",
    "compiled",
    "compile_mode",
    "conv_impls",
    "data",
    "data_note",
    "warmup",
    "steps",
    "rounds",
    "real_step_ms",
    "real_examples_per_s",
    "staged_step_ms",
    "staged_examples_per_s",
    "data_wait_share",
    "staged_spread",
    "real_spread",
    "flops_per_step",
    "tflops",
    "peak_tflops",
    "peak_fraction",
    "reference_examples_per_s",
    "ratio_to_reference",
    "peak_mem_gb",
    "warmup_s",
    "parameters",
    "kernel_ms_per_step",
    "gpu_busy_share",
    "kernels_per_step",
    "top_kernels",
    "top_ops",
    "host_ms_per_step",
    "top_host_ops",
]
RECORD_SUFFIX = "followup-protocol"
# A stand-in text batch: byte lengths log-normal around IMDb's median review (about 950 bytes; our
# choice, for rows whose text data is absent), capped at the task's max_len.
TEXT_MEDIAN_BYTES, TEXT_LOG_SPREAD = 950, 0.75
RGB_STAND_IN_IMAGES = 4096  # random RGB images of an image row whose data is absent (our choice)
PROBE_STEPS = 2  # staged steps that estimate a step's time for followup.max_round_seconds (our choice)
MIN_ROUND_STEPS = 5  # the fewest steps a round takes under followup.max_round_seconds (our choice)


@dataclass(frozen=True)
class RowSpec:
    """One row: an arm (with ``techniques``, None = its default) on a task, or a task's reference."""

    arm: str
    task: str
    techniques: str | None = None
    kind: str = "arm"  # arm | reference

    @property
    def name(self) -> str:
        if self.kind == "reference":
            return f"reference@{self.task}"
        return f"{self.arm}{'+' + self.techniques if self.techniques else ''}@{self.task}"


@dataclass
class Options:
    """The ``followup`` block of experiments/conf/bench.yaml, checked."""

    profile: str = "paper"
    warmup: int = 10
    steps: int = 30
    rounds: int = 5
    max_round_seconds: float | None = None  # fewer steps a round (at least MIN_ROUND_STEPS) past this
    staged_batches: int = 4
    generated_cap: int | None = 4096
    data_dir: Path = Path("data")
    cache_dir: Path = Path(".cache/lra-repro")
    workers: int = 1
    time_budget_s: float | None = None
    profile_steps: int = 0
    resume: Path | None = None
    overrides: dict = dataclasses.field(default_factory=dict)  # task -> the run's command-line overrides
    isolate_rows: bool = False  # each row in a fresh process (module docstring)


def parse_row(text: str) -> RowSpec:
    """``arm@task`` or ``arm+techniques@task``; a one-line error naming the key and the form otherwise."""
    left, sep, task = str(text).partition("@")
    arm, plus, techniques = left.partition("+")
    if not sep or not arm or not task or (plus and not techniques):
        raise ValueError(f"followup.rows: {text!r} is not ARM@TASK or ARM+TECHNIQUES@TASK, e.g. s4+followup@listops")
    return RowSpec(arm, task, techniques or None)


def protocol_rows() -> list[RowSpec]:
    """The follow-up protocol's arm rows: every arm of PROTOCOL_ARMS on every task, then PROTOCOL_EXTRA."""
    rows = [RowSpec(arm, task, tech) for task in PROTOCOL_TASKS for arm, tech in PROTOCOL_ARMS]
    defaults = dict(PROTOCOL_ARMS)
    return rows + [RowSpec(arm, task, defaults.get(arm)) for arm, task in PROTOCOL_EXTRA]


def plan_rows(arm_rows: list[RowSpec], arms: list[str], tasks: list[str]) -> list[RowSpec]:
    """``arm_rows`` grouped by task (in order of first appearance), each task's group led by its
    reference row where a Transformer arm is among them. Unknown arms or tasks raise, listing the names."""
    for spec in arm_rows:
        if spec.arm not in arms:
            raise ValueError(f"followup.rows: no arm {spec.arm!r} in {spec.name}; arms: {', '.join(arms)}")
        if spec.task not in tasks:
            raise ValueError(f"followup.rows: no task {spec.task!r} in {spec.name}; tasks: {', '.join(tasks)}")
    order = list(dict.fromkeys(spec.task for spec in arm_rows))
    planned = []
    for task in order:
        group = [spec for spec in arm_rows if spec.task == task]
        if any(is_transformer_arm(spec.arm) for spec in group):
            planned.append(RowSpec(REFERENCE_ARM, task, None, "reference"))
        planned += group
    return planned


def is_transformer_arm(arm: str) -> bool:
    return compose_run([f"arm={arm}"]).cfg.arm.model.get("backbone") == TRANSFORMER_BACKBONE


def resolve_row(spec: RowSpec, profile: str, extra: list[str] | None = None) -> dict:
    """The runner's resolved settings of the row's (arm, techniques, task) at ``profile``, with ``extra``
    overrides as a run's command line takes them (``task.max_len=300``, ``++train.compile=true``)."""
    overrides = [f"arm={spec.arm}", f"task={spec.task}", f"profile={profile}"]
    if spec.kind == "reference":  # a plain training: no techniques
        overrides.append("techniques=none")
    elif spec.techniques:
        overrides.append(f"techniques={spec.techniques}")
    overrides += list(extra or [])
    return compose_run(overrides, typed_task=True).run


def cap_generated(task_cfg: dict, cap: int | None) -> tuple[dict, str]:
    """``task_cfg`` with the generated data's split sizes (``generate.n_*``) cut to ``cap`` each, and a note
    of what was cut (the loader's batches are the generator's; only the data set is smaller)."""
    generate = dict(task_cfg.get("generate") or {})
    cut = {k: v for k, v in generate.items() if k.startswith("n_") and isinstance(v, int) and cap and v > cap}
    if not cut:
        return task_cfg, ""
    note = "generated data cut to " + ", ".join(f"{k}={cap} (protocol {v})" for k, v in cut.items())
    return {**task_cfg, "generate": {**generate, **dict.fromkeys(cut, cap)}}, note


def load_task(run: dict, options: Options) -> tuple[TaskData | None, str]:
    """The task's data as a run loads it (its builder, the profile's subset), or None and why not."""
    task_cfg, note = cap_generated(run["task"], options.generated_cap)
    name = task_cfg["name"]
    try:
        task = get_task_builder(task_cfg.get("builder", name))(
            task_cfg, Path(options.data_dir), Path(options.cache_dir), options.workers
        )
    except DataMissing as err:
        return None, f"data missing ({str(err).splitlines()[0]}); staged batches are a stand-in's random tokens"
    if run["subset"]:
        task = take_subset(task, run["subset"], task_cfg.get("data_seed", 0))
    return task, note


def shape_facts(task_name: str) -> dict:
    """What a model needs of ``task_name`` without its data: vocabulary, classes and padding id."""
    from ..tasks import image, listops, pathfinder, text
    from ..tasks.byte_text import BYTE_VOCAB_SIZE, PAD_ID

    facts = {
        "listops": {"vocab_size": len(listops.VOCAB), "num_classes": listops.NUM_CLASSES, "pad_id": 0},
        "text": {"vocab_size": BYTE_VOCAB_SIZE, "num_classes": text.NUM_CLASSES, "pad_id": PAD_ID},
        "image": {"vocab_size": image.VOCAB_SIZE, "num_classes": image.NUM_CLASSES, "pad_id": None},
        "pathfinder": {"vocab_size": pathfinder.VOCAB_SIZE, "num_classes": pathfinder.NUM_CLASSES, "pad_id": None},
    }
    if task_name not in facts:
        raise ValueError(f"followup.rows: task {task_name!r} has no stand-in shape; use one of {', '.join(facts)}")
    return facts[task_name]


def stand_in(
    name: str, max_len: int, facts: dict, n: int, seed: int, padded: bool = True, text_lengths: bool = False
) -> TaskData:
    """A task of ``n`` random training examples (and a few for validation and test) of the given shape:
    token ids in [1, vocab); with ``text_lengths`` (and ``padded``) each padded after a log-normal
    length around IMDb's median; ``padded`` False: a task without padding (``pad_id`` None)."""
    rng = np.random.default_rng(seed)
    vocab, classes = facts["vocab_size"], facts["num_classes"]

    def split(count: int) -> Split:
        x = rng.integers(1, vocab, size=(count, max_len), dtype=np.int64)
        if padded and text_lengths and facts["pad_id"] is not None:
            lengths = np.exp(rng.normal(math.log(TEXT_MEDIAN_BYTES), TEXT_LOG_SPREAD, count))
            lengths = np.clip(lengths, 10, max_len).astype(np.int64)
            x[np.arange(max_len)[None, :] >= lengths[:, None]] = facts["pad_id"]
        return Split(x, rng.integers(0, classes, size=count, dtype=np.int64))

    pad_id = facts["pad_id"] if padded else None
    return TaskData(name, split(n), split(2), split(2), classes, vocab, max_len, pad_id=pad_id,
                    info={"source": "stand-in: random tokens"})  # fmt: skip


def rgb_stand_in(task_cfg: dict, n: int, seed: int) -> TaskData:
    """The image task with ``n`` random RGB uint8 training images [n, 32, 32, 3] (and a few for validation
    and test), stored as the official files are: the CIFAR-10 augmentation applies, then ``prepare``'s
    grayscale. The augmentation's cost hardly depends on what the pixels show."""
    from ..tasks import image

    rng = np.random.default_rng(seed)

    def split(count: int) -> Split:
        x = rng.integers(0, 256, size=(count, image.SIDE, image.SIDE, 3), dtype=np.uint8)
        return Split(x, rng.integers(0, image.NUM_CLASSES, size=count, dtype=np.int64))

    info = {"source": "stand-in: random RGB images", "augment_on": task_cfg.get("augment_on", "auto")}
    return TaskData("image", split(n), split(2), split(2), image.NUM_CLASSES, image.VOCAB_SIZE, image.MAX_LEN,
                    pad_id=None, prepare=image.lra_grayscale, info=info)  # fmt: skip


@dataclass
class Prepared:
    """One row's model, step and loader, built as the training loop builds them."""

    step: TrainStep
    batches: TrainBatches
    settings: TrainSettings
    model: torch.nn.Module
    total_steps: int
    parameters: int
    seq_len: int


def prepare(run: dict, task: TaskData, augment, device: torch.device, compile_model: bool | None = None) -> Prepared:
    """The model, optimiser, schedule, step and loader of ``run`` on ``task``, as ``repro.training.train``
    builds them (``compile_model`` not None: ``train.compile`` set to it)."""
    settings = TrainSettings.from_dict(apply_example_budget(run, task))
    if compile_model is not None:
        settings = dataclasses.replace(settings, compile=compile_model)
    seed_everything(run["seed"])
    model = build_model(run["model"], augment.model_task(task) if augment else task)
    if augment is not None:
        augment.attach(model)
        augment.compile_transforms(settings.compile_transforms)
    autocast = configure_device(device, settings)
    model.to(device)
    optimizer = make_optimizer(model, settings, device)
    data = TrainingData.build(task, settings, model, augment is not None, device)
    start_packing(model, settings, data.bucketing)
    s = settings
    controller = run_controller(s, swa_start_epoch(s.swa_start, s.epochs))
    ctx = DistContext(device=device)
    step = TrainStep(model, optimizer, controller, settings, device, ctx, augment, autocast)
    batches = train_batches(data, task, s, run["seed"], device, ctx, augment)
    n_params = sum(p.numel() for p in model.parameters())
    return Prepared(step, batches, settings, model, data.total_steps, n_params, int(task.max_len))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_step(
    run_step: Callable[[int], object], first: int, n: int, device: torch.device, clock: Callable[[], float]
) -> float:
    """Wall seconds per call of ``run_step(i)`` for ``i`` in ``first .. first + n - 1``, between two
    synchronisations of ``device``."""
    synchronize(device)
    start = clock()
    for i in range(first, first + n):
        run_step(i)
    synchronize(device)
    return (clock() - start) / n


def step_flops(step: TrainStep, batch: Batch) -> int:
    """FLOPs FlopCounterMode counts in one forward and backward pass of ``step``'s eager model on ``batch``
    (its loss as the step computes it; plain paths), the gradients then dropped."""
    model = step.model
    autocast = torch.autocast(step.device.type, dtype=step.autocast_dtype, enabled=step.autocast_dtype is not None)
    with plain_paths(model), FlopCounterMode(display=False) as counter:
        with autocast:
            if step.technique_loss:
                loss = step.augment.loss(model, batch.inputs, batch.labels, batch.draws)
            else:
                logits = model(batch.inputs)
        if not step.technique_loss:
            loss = F.cross_entropy(logits.float(), batch.labels)
        loss.backward()
    step.optimizer.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def dense_bf16_peak(device_name: str) -> float | None:
    """The datasheet's dense bf16 TFLOP/s of ``device_name``, None for a device not in the table."""
    return next((peak for key, peak in DENSE_BF16_PEAK_TFLOPS if key.lower() in device_name.lower()), None)


def measure(spec: RowSpec, options: Options, device: torch.device, peak: float | None, clock=time.perf_counter) -> dict:
    """One row's measurements (module docstring). Raises what the row raised."""
    run = resolve_row(spec, options.profile, options.overrides.get(spec.task))
    row = {"row": spec.name, "kind": spec.kind, "arm": spec.arm, "task": spec.task, "profile": options.profile,
           "techniques": run["techniques"]["name"], "warmup": options.warmup, "steps": options.steps}  # fmt: skip
    notes, real = [], spec.kind == "arm"
    if spec.kind == "reference":
        facts = shape_facts(spec.task)
        n = run["train"]["batch_size"] * options.staged_batches
        task = stand_in(spec.task, int(run["task"]["max_len"]), facts, n, run["seed"], padded=False)
        row["data"], augment = "stand-in", None
        notes.append("random full-length tokens, no padding, on the device")
    else:
        task, note = load_task(run, options)
        notes += [note] if note else []
        augment = None
        if task is None and spec.task == "image":  # random RGB images: the techniques' real path is timed
            task = rgb_stand_in(run["task"], RGB_STAND_IN_IMAGES, run["seed"])
            row["data"] = "stand-in"
            missing = notes[-1].rpartition("; ")[0]  # load_task's "data missing (...)", without its stand-in clause
            notes[-1] = f"{missing}; real batches are random RGB images through the arm's techniques"
        elif task is None:
            real = False
            facts = shape_facts(spec.task)
            n = run["train"]["batch_size"] * options.staged_batches
            task = stand_in(
                spec.task, int(run["task"]["max_len"]), facts, n, run["seed"], text_lengths=spec.task == "text"
            )
            row["data"] = "stand-in"
        else:
            row["data"] = str(task.info.get("source", "files"))
        try:
            augment = build_train_augment(run["techniques"], task)
        except ValueError as err:  # e.g. CIFAR augmentation on grey images: timed without, never silently
            real = False
            notes.append(f"techniques not applied ({err}); real batches not timed")
    compile_model = None
    if spec.kind == "reference":  # compiled on CUDA; on the CPU (tests) inductor's C++ build would take minutes
        compile_model = device.type == "cuda"
        notes += [] if compile_model else ["not compiled on the CPU"]
    prepared = prepare(run, task, augment, device, compile_model=compile_model)
    s, step, batches = prepared.settings, prepared.step, prepared.batches
    row.update(batch=s.batch_size, seq_len=prepared.seq_len, precision=s.precision if device.type == "cuda" else "fp32",
               compiled=s.compile, compile_mode=s.compile_mode if s.compile else "",
               parameters=prepared.parameters)  # fmt: skip

    def progress(i: int) -> float:
        return i / max(1, prepared.total_steps)

    staged = [batches.fetch(i) for i in range(options.staged_batches)]
    reset_peak(device)
    start = clock()
    for i in range(options.warmup):  # untimed: compilation, kernel selection, caches
        step(batches.fetch(i) if real else staged[i % len(staged)], i, progress(i))
    synchronize(device)
    row["warmup_s"] = clock() - start
    first = options.warmup
    run_staged = lambda i: step(staged[i % len(staged)], i, progress(i))  # noqa: E731
    run_real = lambda i: step(batches.fetch(i), i, progress(i))  # noqa: E731
    runs = {"staged": run_staged, "real": run_real} if real else {"staged": run_staged}
    first = time_rounds(row, runs, first, options, s.batch_size, device, clock)
    if options.profile_steps:
        profile_staged(row, run_staged, first, options.profile_steps, device)
    # What ran where the arm chooses per shape (the convolution's conv_impl=auto, or a table the environment names)
    row["conv_impls"] = ", ".join(collect_record_info(prepared.model).get("conv_impls") or []) or None
    peak_bytes, _ = read_peak(device)
    row["peak_mem_gb"] = peak_bytes / 1e9 if peak_bytes is not None else None
    row["peak_tflops"] = peak
    try:  # after the timing, so a count that fails costs the row its FLOPs only
        flops = step_flops(step, staged[0])
    except Exception as err:  # noqa: BLE001 - named in the row
        notes.append(f"FLOPs not counted ({type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]})")
    else:
        row["flops_per_step"] = flops
        row["tflops"] = flops / (row["staged_step_ms"] / 1e3) / 1e12
        row["peak_fraction"] = row["tflops"] / peak if peak else None
    row["data_note"] = "; ".join(notes)
    row["status"] = "ok"
    return row


def time_rounds(
    row: dict, runs: dict, first: int, options: Options, batch: int, device: torch.device, clock: Callable[[], float]
) -> int:
    """``options.rounds`` rounds of ``options.steps`` steps of each of ``runs`` (``{"staged": run_step,
    "real": run_step}``, alternating, so a slow spell touches both), from step ``first``; each kind's
    median round, its examples/s and the rounds' spread ((max - min) / median) into ``row``, and the data
    wait where both ran. With ``max_round_seconds``, ``PROBE_STEPS`` staged steps first estimate a step's
    time, and a round takes fewer steps (at least ``MIN_ROUND_STEPS``) where ``steps`` would take longer
    than that; ``row["steps"]`` is the number a round took. Returns the next step."""
    steps = options.steps
    if options.max_round_seconds is not None and steps > MIN_ROUND_STEPS:
        probe = seconds_per_step(runs["staged"], first, PROBE_STEPS, device, clock)  # untimed in the row
        first += PROBE_STEPS
        steps = max(MIN_ROUND_STEPS, min(steps, math.floor(options.max_round_seconds / probe)))
    times: dict[str, list[float]] = {kind: [] for kind in runs}
    for _ in range(options.rounds):
        for kind, run_step in runs.items():
            times[kind].append(seconds_per_step(run_step, first, steps, device, clock))
            first += steps
    row["rounds"], row["steps"] = options.rounds, steps
    for kind, seconds_list in times.items():
        seconds = float(np.median(seconds_list))
        row[f"{kind}_step_ms"] = 1e3 * seconds
        row[f"{kind}_examples_per_s"] = batch / seconds
        row[f"{kind}_spread"] = (max(seconds_list) - min(seconds_list)) / seconds
    if "real" in times:
        row["data_wait_share"] = 1.0 - row["staged_step_ms"] / row["real_step_ms"]
    return first


def _measure_in_child(spec: RowSpec, options: Options, device: str, peak: float | None) -> dict:
    """``measure`` in a fresh process (``measure_isolated``)."""
    if torch.device(device).type == "cuda":
        from ..original.attention._flex import raise_recompile_limit

        raise_recompile_limit()
    return measure(spec, options, torch.device(device), peak)


def measure_isolated(spec: RowSpec, options: Options, device: torch.device, peak: float | None) -> dict:
    """``measure`` of one row in a fresh spawned process; what the row raised is raised here."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_measure_in_child, spec, options, str(device), peak).result()


def profile_staged(row: dict, run_step: Callable[[int], object], first: int, n: int, device: torch.device) -> None:
    """``run_step(i)`` for ``i`` in ``first .. first + n - 1`` under the profiler; its summary into ``row``, with
    the GPU's busy share of the staged step time where kernels were counted."""
    counter = iter(range(first, first + n))
    kernels = kernel_profile(lambda: run_step(next(counter)), n, device)
    row.update(kernels)
    if kernels["kernel_ms_per_step"] is not None:
        row["gpu_busy_share"] = kernels["kernel_ms_per_step"] / row["staged_step_ms"]


def add_reference_ratios(rows: list[dict]) -> None:
    """Each Transformer arm's examples/s (real where measured, else staged) over its task's reference."""
    references = {r["task"]: r for r in rows if r["kind"] == "reference" and r["status"] == "ok"}
    for row in rows:
        ref = references.get(row["task"])
        if row["kind"] != "arm" or row["status"] != "ok" or ref is None or not row.get("transformer"):
            continue
        ours = row.get("real_examples_per_s") or row["staged_examples_per_s"]
        row["reference_examples_per_s"] = ref["staged_examples_per_s"]
        row["ratio_to_reference"] = ours / ref["staged_examples_per_s"]


def _spread_cell(row: dict) -> str:
    spreads = [_cell(row.get(key), 0, percent=True) for key in ("real_spread", "staged_spread")]
    return ", ".join(v for v in spreads if v)


def _cell(value, digits: int = 1, percent: bool = False) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{100 * value:.{digits}f}%" if percent else f"{value:.{digits}f}"


def _compiled_cell(row: dict) -> str:
    """yes / no, with torch.compile's mode where it is not the default one (reduce-overhead: CUDA graphs)."""
    mode = row.get("compile_mode")
    if row.get("compiled") is True and mode not in (None, "", "default"):
        return f"yes ({mode})"
    return _cell(row.get("compiled"))


def _steps_note(meta: dict, row: dict) -> str:
    """``"N steps a round; "`` where ``max_round_seconds`` cut the row's rounds short, else nothing."""
    steps = row.get("steps")
    return f"{steps} steps a round; " if steps is not None and steps != meta.get("steps") else ""


def table_markdown(meta: dict, rows: list[dict]) -> str:
    done = sum(r["status"] == "ok" for r in rows)
    state = "complete" if meta.get("complete") else f"partial: {len(rows)} of {meta['rows_planned']} rows so far"
    peak = meta.get("peak_tflops")
    resumed = sorted({str(r.get("date")) for r in meta.get("resumed", [])} - {str(meta["date"])})
    dates = meta["date"] + (f", resumed {', '.join(resumed)}" if resumed else "")
    lines = [
        f"# Training steps at the follow-up protocols' settings ({dates}, {meta['device']})",
        "",
        f"profile={meta['profile']}: each arm's resolved settings on the task (batch, length, precision, optimiser, "
        f"train.compile); torch {meta['torch']}, CUDA {meta['cuda']}; {meta['warmup']} warm-up steps, then "
        f"{meta.get('rounds', 1)} rounds of {meta['steps']} timed steps on real batches (fetched from the loader each "
        f"step) and of {meta['steps']} on staged batches (already on the device), alternating; the median round "
        "is reported, and the spread of the rounds' step times (max - min) / median; data wait = 1 - staged / "
        "real time. "
        + (
            f"Where a round of {meta['steps']} steps would take longer than {meta['max_round_seconds']:g} s "
            f"(estimated from {PROBE_STEPS} staged steps), it takes fewer, at least {MIN_ROUND_STEPS} (the note says "
            "how many). "
            if meta.get("max_round_seconds")
            else ""
        )
        + "TFLOP/s: FlopCounterMode's "
        "count of one training step (plain paths) over the staged step time; peak: "
        + (f"{peak:g} TFLOP/s dense bf16 (datasheet)." if peak else "n/a (device not in the table).")
        + " Reference rows: the plain compiled Transformer of the shape, no padding, random batches on the "
        "device (repro/bench/followup.py). GPU busy: the profiled kernels' time over the staged step time "
        "(followup.profile_steps > 0). "
        f"{state}; {done} rows measured.",
        "",
        "| row | batch x length | compiled | real ex/s | staged ex/s | spread (real, staged) | data wait | TFLOP/s | "
        "% of peak | / reference | GPU busy | peak GB | status | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        shape = f"{r.get('batch')} x {r.get('seq_len')}" if r.get("batch") else ""
        lines.append(
            "| "
            + " | ".join(
                [
                    r["row"],
                    shape,
                    _compiled_cell(r),
                    _cell(r.get("real_examples_per_s")),
                    _cell(r.get("staged_examples_per_s")),
                    _spread_cell(r),
                    _cell(r.get("data_wait_share"), 1, percent=True),
                    f"{r['tflops']:.3g}" if r.get("tflops") is not None else "",
                    _cell(r.get("peak_fraction"), 1, percent=True),
                    _cell(r.get("ratio_to_reference"), 2),
                    _cell(r.get("gpu_busy_share"), 0, percent=True),
                    _cell(r.get("peak_mem_gb"), 2),
                    r["status"].split(":")[0],
                    " ".join(
                        f"{_steps_note(meta, r)}{r.get('data_note') or ''} "
                        f"{r['status'] if r['status'] != 'ok' else ''}".split()
                    ),  # fmt: skip
                ]
            ).replace("\n", " ")
            + " |"
        )
    return "\n".join(lines) + "\n"


def write_record(folder: Path, meta: dict, rows: list[dict]) -> None:
    """bench.csv, bench.json and table.md of ``rows`` so far, each replaced whole (records.write_atomic)."""
    add_reference_ratios(rows)
    write_csv(folder / "bench.csv", rows, COLUMNS)
    record = {**meta, "columns": COLUMNS, "rows": [{c: r.get(c) for c in COLUMNS} for r in rows]}
    write_atomic(folder / "bench.json", json.dumps(record, indent=2, default=_jsonable) + "\n")
    write_atomic(folder / "table.md", table_markdown(meta, rows))


def _jsonable(value):
    if hasattr(value, "item"):
        return value.item()
    return str(value)


# What a resumed record's earlier rows and its new rows must share, or they would not be one measurement:
# the machine and software, the commit and its tree, and every setting that changes a row's numbers.
RUN_KEYS = ("mode", "device", "torch", "cuda", "cudnn", "git_commit", "tree_changes")
RESUME_MUST_MATCH = (
    *RUN_KEYS,
    "conv_auto_table",  # the environment's LRA_CONV_AUTO_TABLE: which convolution auto picks
    # then the settings, named followup.<key> on the command line
    "profile",
    "warmup",
    "steps",
    "rounds",
    "max_round_seconds",
    "staged_batches",
    "generated_cap",
    "isolate_rows",
    "overrides",
    "planned_rows",
)
KEY_NAMES = {"planned_rows": "followup.rows", "conv_auto_table": AUTO_TABLE_ENV}  # how a key is spelled to the user
# Keys that records written before they were recorded held at one value: a round was one timing, uncapped.
RESUME_LEGACY = {"rounds": 1, "max_round_seconds": None}
NOT_RECORDED = "<not recorded>"


class ResumeRefused(ValueError):
    """``followup.resume`` names no record of this mode, or one this run may not add rows to."""


def read_record(folder: Path) -> dict:
    """An earlier run's record (``bench.json``), to resume it."""
    path = Path(folder) / "bench.json"
    if not path.is_file():
        raise ResumeRefused(f"followup.resume={folder}: no bench.json there; pass a folder this mode wrote")
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ResumeRefused(f"followup.resume={folder}: bench.json cannot be read ({err}); start a new record") from err
    if not isinstance(record, dict) or not isinstance(record.get("rows"), list):
        raise ResumeRefused(f"followup.resume={folder}: bench.json holds no rows; pass a folder this mode wrote")
    return record


def resume_problem(earlier: dict, meta: dict, folder: Path) -> str | None:
    """Why this run cannot add rows to the record ``earlier`` (in ``folder``), or None: each key of
    ``RESUME_MUST_MATCH`` must be equal, a key the record lacks counting as its legacy value or as not
    recorded (another GPU, torch, commit, tree or timing setting would make one record of two measurements)."""

    def recorded(record: dict, key: str):
        return record.get(key, RESUME_LEGACY.get(key, NOT_RECORDED))

    differ = [key for key in RESUME_MUST_MATCH if recorded(earlier, key) != recorded(meta, key)]
    if not differ:
        return None

    def spelled(record: dict) -> str:
        named = []
        for key in differ:
            value = recorded(record, key)
            name = KEY_NAMES.get(key, key if key in RUN_KEYS else f"followup.{key}")
            named.append(f"{name}={value}" if value == NOT_RECORDED else f"{name}={value!r}")
        return ", ".join(named)

    return (
        f"followup.resume={folder}: its rows were measured with {spelled(earlier)}, this run has {spelled(meta)}; "
        "resume with the same GPU kind, software, commit and settings, or leave followup.resume out to start a "
        "new record"
    )


def record_folder(out_dir: Path, date: str, device_name: str) -> Path:
    """``<out_dir>/<date>_<device>_followup-protocol``, with ``-2``, ``-3``, ... where that exists."""
    name = f"{date}_{slug(device_name)}_{RECORD_SUFFIX}"
    folder, n = Path(out_dir) / name, 2
    while folder.exists():
        folder, n = Path(out_dir) / f"{name}-{n}", n + 1
    return folder


def run_followup(
    specs: list[RowSpec], options: Options, device: torch.device, out_dir: Path, meta: dict, clock=time.perf_counter
) -> tuple[Path, list[dict]]:
    """Measure ``specs`` in order, writing the record after each row; returns its folder and the rows."""
    from .timing import device_name

    name = device_name(device)
    peak = dense_bf16_peak(name) if device.type == "cuda" else None
    planned = [spec.name for spec in specs]
    meta = {**meta, "device": name, "peak_tflops": peak, "rows_planned": len(specs), "planned_rows": planned,
            "complete": False}  # fmt: skip
    rows: list[dict] = []
    done: set[str] = set()
    if options.resume:
        earlier = read_record(options.resume)
        if problem := resume_problem(earlier, meta, options.resume):
            raise ResumeRefused(problem)
        rows = [r for r in earlier["rows"] if r.get("status") == "ok"]
        done = {r["row"] for r in rows}
        # the record keeps the date and command that began it, and lists each later run that measured rows
        resumed = list(earlier.get("resumed", []))
        if set(planned) - done:
            resumed.append({"date": meta.get("date"), "command": meta.get("command")})
        meta = {**meta, "date": earlier.get("date"), "command": earlier.get("command"), "resumed": resumed}
    folder = Path(options.resume) if options.resume else record_folder(out_dir, meta["date"], name)
    folder.mkdir(parents=True, exist_ok=True)
    order = {spec.name: i for i, spec in enumerate(specs)}
    transformer = {spec.arm: is_transformer_arm(spec.arm) for spec in specs}
    started = clock()
    write_record(folder, meta, rows)
    for spec in specs:
        if spec.name in done:
            continue
        base = {"row": spec.name, "kind": spec.kind, "arm": spec.arm, "task": spec.task, "profile": options.profile}
        if options.time_budget_s is not None and clock() - started > options.time_budget_s:
            row = {**base, "status": f"skipped: not started within time_budget_s={options.time_budget_s:g}"}
        else:
            try:
                row = (
                    measure_isolated(spec, options, device, peak)
                    if options.isolate_rows
                    else (measure(spec, options, device, peak, clock))
                )
            except Exception as err:  # noqa: BLE001 - one row's failure is its row, the others still run
                kind = "OOM" if is_out_of_memory(err) else "error"
                first_line = (str(err).splitlines() or [""])[0][:300]
                row = {**base, "status": f"{kind}: {type(err).__name__}: {first_line}"}
                if kind == "error":
                    traceback.print_exc(file=sys.stderr)
            free_memory(device)
        row["transformer"] = transformer[spec.arm] and spec.kind == "arm"
        rows.append(row)
        rows.sort(key=lambda r: order.get(r["row"], len(order)))  # a resumed record keeps the planned order
        write_record(folder, meta, rows)
        print(summary_line(row), flush=True)
    meta["complete"] = all(r["status"] == "ok" for r in rows) and len(rows) == len(specs)
    write_record(folder, meta, rows)
    return folder, rows


def summary_line(row: dict) -> str:
    if row["status"] != "ok":
        return f"{row['row']}: {row['status']}"
    parts = [f"{row['row']}: staged {row['staged_examples_per_s']:.1f} ex/s"]
    if row.get("real_examples_per_s"):
        parts.append(f"real {row['real_examples_per_s']:.1f} ex/s (data wait {100 * row['data_wait_share']:.1f}%)")
    if row.get("tflops") is not None:
        peak = f" ({100 * row['peak_fraction']:.1f}% of peak)" if row.get("peak_fraction") else ""
        parts.append(f"{row['tflops']:.3g} TFLOP/s{peak}")
    if row.get("ratio_to_reference"):
        parts.append(f"{row['ratio_to_reference']:.2f}x reference")
    return ", ".join(parts)


def seconds_or_null(block: dict, key: str, where: str, null_means: str) -> float | None:
    """``block[key]`` as seconds > 0, or None; anything else raises naming ``followup.<key>``."""
    value = block.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise ValueError(f"followup.{key}={value!r}{where}: give seconds > 0, or null ({null_means})")
    return None if value is None else float(value)


def options_from(cfg) -> Options:
    """The ``followup`` block of the benchmark's config as Options; a bad value raises with its key."""
    from ..run.validate import is_int

    block = dict(cfg)
    known = {f.name for f in dataclasses.fields(Options)} | {"rows"}
    overrides = block.get("overrides") or {}
    if not isinstance(overrides, dict) or not all(isinstance(v, list) for v in overrides.values()):
        raise ValueError(
            f"followup.overrides={overrides!r}: give a block of task: [override, ...], "
            "e.g. {listops: ['task.max_len=300']}"
        )
    unknown = sorted(set(block) - known)
    if unknown:
        raise ValueError(
            f"followup.{unknown[0]}: no such key (experiments/conf/bench.yaml); known: {', '.join(sorted(known))}"
        )
    for key, least in (("warmup", 0), ("steps", 1), ("rounds", 1), ("staged_batches", 1), ("workers", 1),
                       ("profile_steps", 0)):  # fmt: skip
        value = block.get(key, getattr(Options, key))
        if key == "workers" and value is None:
            continue
        if not is_int(value) or value < least:
            raise ValueError(f"followup.{key}={value!r} (experiments/conf/bench.yaml): give a whole number >= {least}")
    cap = block.get("generated_cap")
    if cap is not None and (not is_int(cap) or cap < 1):
        raise ValueError(f"followup.generated_cap={cap!r}: give a whole number of examples >= 1, or null (no cap)")
    round_cap = seconds_or_null(block, "max_round_seconds", " (experiments/conf/bench.yaml)", "no cap")
    budget = seconds_or_null(block, "time_budget_s", "", "no limit")
    isolate = block.get("isolate_rows", Options.isolate_rows)
    if not isinstance(isolate, bool):
        raise ValueError(f"followup.isolate_rows={isolate!r} (experiments/conf/bench.yaml): give true or false")
    return Options(
        profile=str(block.get("profile", "paper")),
        warmup=int(block.get("warmup", Options.warmup)),
        steps=int(block.get("steps", Options.steps)),
        rounds=int(block.get("rounds", Options.rounds)),
        max_round_seconds=round_cap,
        staged_batches=int(block.get("staged_batches", Options.staged_batches)),
        generated_cap=cap,
        data_dir=Path(str(block.get("data_dir", "data"))),
        cache_dir=Path(str(block.get("cache_dir", ".cache/lra-repro"))),
        workers=int(block.get("workers") or min(16, os.cpu_count() or 1)),
        time_budget_s=budget,
        profile_steps=int(block.get("profile_steps", Options.profile_steps)),
        resume=Path(str(block["resume"])) if block.get("resume") else None,
        overrides={str(k): [str(o) for o in v] for k, v in overrides.items()},
        isolate_rows=isolate,
    )


def main(cfg) -> None:
    """``lra-bench mode=followup``: measure the rows, write the record; exit 1 when a row failed."""
    from omegaconf import OmegaConf

    from ..invocation import fail, invoked_as
    from ..records import commit_variable_problem, git_commit, tree_changes
    from ..run.runner import pick_device
    from ..tasks import task_names

    if problem := commit_variable_problem():
        fail(f"bench: {problem}")
    block = OmegaConf.to_container(cfg.followup, resolve=True)
    try:
        options = options_from(block)
        device = pick_device(str(cfg.device))
        rows = block.get("rows")
        arm_rows = [parse_row(r) for r in rows] if rows else protocol_rows()
        specs = plan_rows(arm_rows, arm_names(), task_names())
    except (KeyError, ValueError) as err:
        fail(f"bench: {err.args[0] if err.args else err}")
    if device.type == "cuda":
        from ..original.attention._flex import raise_recompile_limit

        raise_recompile_limit()  # every row's compiled model is another graph of the same functions
    meta = {
        "mode": "followup",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),  # noqa: UP017 (UTC: Python 3.11+)
        "profile": options.profile,
        "warmup": options.warmup,
        "steps": options.steps,
        "rounds": options.rounds,
        "max_round_seconds": options.max_round_seconds,
        "staged_batches": options.staged_batches,
        "generated_cap": options.generated_cap,
        "isolate_rows": options.isolate_rows,
        "overrides": options.overrides,
        "profile_steps": options.profile_steps,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if device.type == "cuda" else None,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "git_commit": git_commit(),
        "tree_changes": tree_changes(),  # what +dirty stands for
        "conv_auto_table": auto_table_identity(),  # the table conv_impl=auto follows, None: the built-in rule
        "command": " ".join([invoked_as("lra-bench"), *sys.argv[1:]]),
    }
    print(f"{len(specs)} rows ({sum(s.kind == 'reference' for s in specs)} references) at profile={options.profile}")
    try:
        folder, measured = run_followup(specs, options, device, Path(cfg.out_dir), meta)
    except ResumeRefused as err:  # before any row is measured or the record is touched
        fail(f"bench: {err}")
    failed = [r for r in measured if r["status"].startswith(("error", "OOM"))]
    print(f"wrote {folder} ({len(measured)} rows, {len(failed)} failed)")
    if failed:
        sys.exit(1)
