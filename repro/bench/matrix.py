"""The measurement loop: every (model, length, mode) of the matrix, one record row each.

A training step is what ``repro/training/step.py`` runs: forward under bf16 autocast (on
CUDA), cross-entropy on float32 logits, backward, gradient clipping where the arm
sets it, and the fused AdamW step of ``make_optimizer``; dropout active. An
inference step is the forward pass in evaluation mode under ``torch.no_grad``.
Both run on one random batch of byte ids already on the device (no padding; the
padding mask is still built and passed, as in training). The follow-up's training
techniques (augmentation, the multitask MLM head) are not part of the timed step:
every row times its backbone's plain classification step.

Each model is built once per length; inference is measured first (weights only),
then training (weights, gradients, optimiser state). An out-of-memory error, or any
other error, in one measurement becomes that row's ``status`` and the loop goes on
after freeing what the failed step held.
"""

from __future__ import annotations

import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..followup.conv import BoundedConvMixer
from ..ops.conv import conv1d_same
from ..training import TrainSettings, make_optimizer
from .flops import analytic_forward_flops, conv_layer_flops, counted_forward_flops, step_flops
from .models import BenchModel, TextShape, build, sequence_length
from .timing import GB, StepTimer, Timing, free_memory, is_out_of_memory, kernel_profile, read_peak, reset_peak

MODES = ("infer", "train")  # measured in this order for each model and length


@dataclass
class Settings:
    lengths: list[int]
    batch: int
    modes: list[str]
    dtype: str
    warmup: int
    reps: int
    max_row_seconds: float | None
    count_batch: int
    seed: int
    device: torch.device
    progress: bool = True
    time_budget_s: float | None = None  # rows not started within it are recorded as skipped
    sync_every: int = 1  # timed steps per synchronisation (repro/bench/timing.py)
    profile_steps: int = 0  # steps profiled after the timed ones (timing.kernel_profile); 0: none
    oom_at: str | None = None  # "model@length@mode": inject an out-of-memory error there (tests)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """bf16 autocast on CUDA only, as the training loop does (repro/training/loop.py: configure_device)."""
        if self.dtype not in ("bf16", "fp32"):
            raise ValueError(f"dtype={self.dtype!r} (experiments/conf/bench.yaml): choose bf16 or fp32")
        return torch.bfloat16 if (self.dtype == "bf16" and self.device.type == "cuda") else None


def modes_for(mode: str) -> list[str]:
    if mode == "both":
        return list(MODES)
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} (experiments/conf/bench.yaml): choose train, infer, both or followup")
    return [mode]


def _autocast(settings: Settings):
    ac = settings.autocast_dtype
    return torch.autocast(settings.device.type, dtype=ac) if ac is not None else nullcontext()


def random_batch(batch: int, length: int, device: torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Byte ids in [1, vocab) (no padding) and binary labels, drawn from ``seed``, on ``device``."""
    shape = TextShape(max_len=length)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, shape.vocab_size, (batch, length), generator=generator)
    labels = torch.randint(0, shape.num_classes, (batch,), generator=generator)
    return ids.to(device), labels.to(device)


class InjectedOutOfMemory:
    """Raises a CUDA out-of-memory error in the step named by ``debug.oom_at`` (tests only)."""

    def __init__(self, target: str | None, name: str, length: int, mode: str):
        self.active = target == f"{name}@{length}@{mode}"

    def __call__(self) -> None:
        if self.active:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected by debug.oom_at)")


def timed(step, settings: Settings) -> Timing:
    """The timing of ``step`` under the settings' warm-up, repetitions, row cap and blocks, and where
    ``profile_steps`` more steps spent the GPU's time."""
    timing = StepTimer(settings.device).timing(
        step, settings.warmup, settings.reps, settings.max_row_seconds, settings.sync_every
    )
    if settings.profile_steps:  # a profile that fails leaves the timing and says why
        kernels, status = attempt(partial(kernel_profile, step, settings.profile_steps, settings.device))
        timing.kernels = kernels or {"top_kernels": f"not profiled: {status}"}
    return timing


def time_infer(model, ids, settings: Settings, inject) -> Timing:
    model.eval()

    def step():
        inject()
        with torch.no_grad(), _autocast(settings):
            model(ids)

    return timed(step, settings)


def time_train(model, ids, labels, spec: BenchModel, settings: Settings, inject) -> Timing:
    model.train()
    train_settings = TrainSettings.from_dict(spec.train)
    optimizer = make_optimizer(model, train_settings, settings.device)
    clip = train_settings.grad_clip

    def step():
        inject()
        with _autocast(settings):
            logits = model(ids)
        loss = F.cross_entropy(logits.float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()

    try:
        return timed(step, settings)
    finally:  # the optimiser's state goes with this frame; the gradients go now
        optimizer.zero_grad(set_to_none=True)


def attempt(fn) -> tuple[object, str]:
    """``(fn(), "ok")``, or ``(None, "OOM")`` / ``(None, "error: ...")``; the exception (and the
    tensors its frames hold) is gone when this returns."""
    try:
        return fn(), "ok"
    except Exception as err:  # noqa: BLE001 - one failing row must not end the matrix
        if is_out_of_memory(err):
            return None, "OOM"
        return None, f"error: {type(err).__name__}: {err}"[:400]


def forward_flops(spec: BenchModel, model, length: int, settings: Settings) -> tuple[int | None, str]:
    """Forward FLOPs at ``settings.batch`` and where they come from (analytic | counted | unavailable)."""
    seq = sequence_length(spec, length)
    analytic = analytic_forward_flops(spec.model, settings.batch, seq, TextShape(length).num_classes)
    if analytic is not None:
        return analytic, "analytic"
    ids, _ = random_batch(settings.count_batch, length, settings.device, settings.seed)
    counted, status = attempt(lambda: counted_forward_flops(model, ids, settings.autocast_dtype))
    if counted is None:
        return None, f"unavailable: {status}"
    return counted * settings.batch // settings.count_batch, "counted"


def conv_layer_tflops(spec: BenchModel, model, length: int, mode: str, settings: Settings) -> float | None:
    """TFLOP/s of the convolutions alone (one layer, as the model runs it), for conv rows.

    Forward for ``infer``, forward + backward (3x FLOPs) for ``train``, at the row's
    batch and length with the layer's own ``impl``.
    """
    layer = next((m for m in model.modules() if isinstance(m, BoundedConvMixer)), None)
    if layer is None:
        return None
    d_model = layer.conv.weight.shape[1] * layer.groups
    train = mode == "train"
    x = torch.randn(settings.batch, d_model, length, device=settings.device, requires_grad=train)

    def step():
        with _autocast(settings):
            y = conv1d_same(x, layer.conv.weight, layer.conv.bias, layer.groups, layer.impl)
        if train:
            y.float().sum().backward()

    context = nullcontext() if train else torch.no_grad()
    with context:
        timing = timed(step, replace(settings, profile_steps=0))  # the row's own steps are the ones profiled
    layer.zero_grad(set_to_none=True)
    one_layer = {**spec.model, "depth": 1}
    flops = step_flops(conv_layer_flops(one_layer, settings.batch, length), mode)
    return flops / (timing.median_ms * 1e-3) / 1e12


def measure(spec: BenchModel, length: int, settings: Settings, peak_tflops: float | None) -> list[dict]:
    """The rows of one model at one length (one per mode)."""
    device = settings.device
    base = {
        "model": spec.name,
        "arm": spec.arm,
        "kind": spec.kind,
        "length": int(length),
        "seq_len": sequence_length(spec, length),
        "batch": settings.batch,
        "layers": spec.layers,
        "parameters": None,
        "flops_per_step": None,
        "flops_source": None,
    }
    model, status = attempt(lambda: build(spec, length, device, settings.seed))
    if model is None:
        free_memory(device)
        return [{**base, "mode": mode, "status": status} for mode in settings.modes]
    base["parameters"] = sum(p.numel() for p in model.parameters())
    fwd, source = forward_flops(spec, model, length, settings)
    base["flops_source"] = source
    ids, labels = random_batch(settings.batch, length, device, settings.seed)
    rows = []
    for mode in settings.modes:
        row = {**base, "mode": mode, "flops_per_step": step_flops(fwd, mode) if fwd is not None else None}
        inject = InjectedOutOfMemory(settings.oom_at, spec.name, length, mode)
        reset_peak(device)
        if mode == "infer":
            timing, status = attempt(partial(time_infer, model, ids, settings, inject))
        else:
            timing, status = attempt(partial(time_train, model, ids, labels, spec, settings, inject))
        model.zero_grad(set_to_none=True)
        row["status"] = status
        if timing is not None:
            row.update(timing.summary())
            row["peak_mem_bytes"], row["peak_mem_reason"] = read_peak(device)
            row["peak_mem_gb"] = None if row["peak_mem_bytes"] is None else row["peak_mem_bytes"] / GB
            if row["flops_per_step"] is not None:
                row["tflops"] = row["flops_per_step"] * row["steps_per_s"] / 1e12
                row["roofline_fraction"] = row["tflops"] / peak_tflops if peak_tflops else None
        else:
            row["peak_mem_reason"] = "out of memory" if status == "OOM" else "not measured: the step failed"
            free_memory(device)  # what the failed step held, before the next measurement
        if status == "ok":
            rate, conv_status = attempt(partial(conv_layer_tflops, spec, model, length, mode, settings))
            row["conv_layer_tflops"] = rate
            if conv_status != "ok":
                row["conv_layer_note"] = conv_status
        rows.append(row)
    del model, ids, labels
    free_memory(device)  # one collection per model and length (gc.collect costs ~0.1 s)
    return rows


def describe(row: dict) -> str:
    """One line per measured row, for the log."""
    head = f"{row['model']} L={row['length']} {row['mode']}"
    if row["status"] != "ok":
        return f"{head}: {row['status']}"
    parts = [f"{row['steps_per_s']:.2f} steps/s"]
    if row.get("peak_mem_gb") is not None:
        parts.append(f"{row['peak_mem_gb']:.2f} GB")
    if row.get("tflops") is not None:
        parts.append(f"{row['tflops']:.3g} TFLOP/s")
    if row.get("roofline_fraction") is not None:
        parts.append(f"{row['roofline_fraction']:.0%} of peak")
    return f"{head}: " + ", ".join(parts)


def skipped_rows(spec: BenchModel, length: int, settings: Settings, why: str) -> list[dict]:
    return [
        {
            "model": spec.name,
            "arm": spec.arm,
            "kind": spec.kind,
            "length": int(length),
            "seq_len": sequence_length(spec, length),
            "mode": mode,
            "batch": settings.batch,
            "layers": spec.layers,
            "status": f"skipped: {why}",
        }
        for mode in settings.modes
    ]


def run_matrix(specs: list[BenchModel], settings: Settings, peak_tflops: float | None) -> list[dict]:
    """Every model at every length; rows in (model, length, mode) order.

    Once ``settings.time_budget_s`` has passed, the pairs not yet started are recorded
    as skipped (so one bounded GPU call always ends with a complete record).
    """
    rows = []
    free_memory(settings.device)
    start = time.monotonic()
    pairs = [(spec, length) for spec in specs for length in settings.lengths]
    bar = tqdm(
        pairs, desc="bench", unit="model-length", disable=not settings.progress, dynamic_ncols=True, file=sys.stdout
    )
    for spec, length in bar:
        bar.set_postfix_str(f"{spec.name} L={length}")
        if settings.time_budget_s is not None and time.monotonic() - start > settings.time_budget_s:
            new = skipped_rows(spec, length, settings, f"time budget of {settings.time_budget_s:g} s used up")
        else:
            new = measure(spec, length, settings, peak_tflops)
        for row in new:
            rows.append(row)
            tqdm.write(describe(row), file=sys.stdout)
    return rows
